//! L2 book: one coin's book aggregated by `(n_levels, n_sig_figs,
//! mantissa)`: the full aggregated book on subscribe, then again for every
//! block that touched the coin (with `strict`, only when the printed levels
//! changed); with a coalescing window, at most once per window of block time
//! (see [`crate::views::coalesce`]).

use serde::Serialize;

use crate::book::l2::{L2Level, L2Params};
use crate::market::l2::L2Key;
use crate::market::{Market, Needs, Position};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells};
use crate::views::coalesce::{Coalesce, Coalescer};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, distinct};

/// `L2BookUpdate`: one coin's aggregated book.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2BookUpdate {
    /// Market.
    pub coin: String,
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Bid levels, best first.
    pub bids: Vec<L2Level>,
    /// Ask levels, best first.
    pub asks: Vec<L2Level>,
}

impl Coalesce for L2BookUpdate {
    /// The newest state supersedes.
    fn absorb(&mut self, next: Self) {
        *self = next;
    }

    fn restamp(&mut self, at: Position) {
        self.block_number = at.block_number;
        self.time = at.time;
    }
}

/// `L2BookRequest`, as asked (the parameters are checked on open).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L2BookKey {
    /// Market.
    pub coin: String,
    /// Levels per side (omitted = 20, 0 = full depth).
    pub n_levels: Option<u32>,
    /// Significant figures of aggregated prices.
    pub n_sig_figs: Option<u32>,
    /// Mantissa (with 5 significant figures).
    pub mantissa: Option<u64>,
    /// Suppress frames whose levels did not change.
    pub strict: bool,
}

/// One L2 book subscription.
#[derive(Debug, Clone)]
pub struct L2BookSubscription {
    key: L2Key,
    strict: bool,
    coalescer: Coalescer<L2BookUpdate>,
}

impl L2BookSubscription {
    fn frame(&self, market: &Market) -> L2BookUpdate {
        let at = market.position();
        let book = market
            .l2()
            .get(&self.key)
            .map(|tracked| tracked.book().clone())
            .unwrap_or_default();
        L2BookUpdate {
            coin: self.key.coin.clone(),
            time: at.time,
            block_number: at.block_number,
            bids: book.bids,
            asks: book.asks,
        }
    }
}

impl View for L2BookSubscription {
    type Key = L2BookKey;
    type Frame = L2BookUpdate;
    const NAME: &'static str = "l2book";
    const ON_LAG: OnLag = OnLag::SkipToNewest;
    const NEEDS: Needs = Needs::BOOKS;
    const FIRST: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<L2BookKey>, ViewError> {
        let coins = distinct(&selection.coins);
        if coins.is_empty() {
            return Err(ViewError::MissingCoin { view: Self::NAME });
        }
        Ok(coins
            .into_iter()
            .map(|coin| L2BookKey {
                coin,
                n_levels: selection.n_levels,
                n_sig_figs: selection.n_sig_figs,
                mantissa: selection.mantissa,
                strict: selection.strict,
            })
            .collect())
    }

    fn listed_coins(key: &L2BookKey) -> Vec<&str> {
        vec![key.coin.as_str()]
    }

    fn book_coins(key: &L2BookKey) -> Option<Vec<&str>> {
        Some(Self::listed_coins(key))
    }

    /// Tracks the aggregated book; the opening frame is its current state.
    fn open(
        market: &mut Market,
        key: &L2BookKey,
        settings: &ViewSettings,
    ) -> Result<(Self, Vec<L2BookUpdate>), ViewError> {
        if key.coin.is_empty() {
            return Err(ViewError::MissingCoin { view: Self::NAME });
        }
        let params = L2Params::new(key.n_levels, key.n_sig_figs, key.mantissa)?;
        let tracked = L2Key {
            coin: key.coin.clone(),
            params,
        };
        let (l2, books) = market.l2_mut();
        l2.track(tracked.clone(), books);
        market.fold_first([key.coin.as_str()]);
        let subscription = Self {
            key: tracked,
            strict: key.strict,
            coalescer: Coalescer::new(settings.l2_coalesce_ms, market.position().time),
        };
        let frame = subscription.frame(market);
        Ok((subscription, vec![frame]))
    }

    /// The book again when the block touched it (`strict`: changed it).
    fn on_block(&mut self, market: &Market) -> Vec<L2BookUpdate> {
        let emit = market.l2().get(&self.key).is_some_and(|tracked| {
            if self.strict {
                tracked.changed()
            } else {
                tracked.touched()
            }
        });
        let frames = if emit {
            vec![self.frame(market)]
        } else {
            Vec::new()
        };
        self.coalescer.push(frames, market.position())
    }

    fn close(self, market: &mut Market) {
        market.l2_mut().0.untrack(&self.key);
        market.unfold_first([self.key.coin.as_str()]);
    }
}

// `l2book`: one row per price level of each frame's aggregated book.

/// The side, level index, price, size and order count columns of a book
/// level, shared with `l2diff`.
pub(super) const LEVEL: [Column; 5] = [
    Column::optional(
        "side",
        Kind::Text,
        "`B` (bid) or `A` (ask); empty for an empty book",
    ),
    Column::optional(
        "level",
        Kind::UInt32,
        "0 for the best level of its side, then 1, 2, …",
    ),
    Column::optional(
        "px",
        Kind::Decimal,
        "the level's price (its bucket's, when aggregated)",
    ),
    Column::optional("sz", Kind::Decimal, "total size resting at the level"),
    Column::optional("n", Kind::UInt32, "orders resting at the level"),
];

/// A level's price, size and order count (empty when there is none).
pub(super) fn level_cells(level: Option<&L2Level>) -> [Cell<'static>; 3] {
    match level {
        Some(level) => [
            Cell::decimal(level.px),
            Cell::decimal(level.sz),
            Cell::U32(level.n),
        ],
        None => [Cell::Null; 3],
    }
}

/// Calls `row` with the side, index and cells of every level of `bids`
/// then `asks`; once with empty cells when both are empty.
pub(super) fn each_level<E>(
    bids: &[L2Level],
    asks: &[L2Level],
    mut row: impl FnMut([Cell<'static>; 5]) -> Result<(), E>,
) -> Result<(), E> {
    if bids.is_empty() && asks.is_empty() {
        return row([Cell::Null; 5]);
    }
    for (side, levels) in [("B", bids), ("A", asks)] {
        for (index, level) in levels.iter().enumerate() {
            let [px, sz, n] = level_cells(Some(level));
            row([Cell::Text(side), Cell::U32(index as u32), px, sz, n])?;
        }
    }
    Ok(())
}

impl Tabular for L2BookSubscription {
    const TABLE: Table = Table {
        name: "l2book",
        row: "one price level of a frame (a coin's aggregated book after a block that touched \
              it): bids best first, then asks best first; a frame of an empty book is one row \
              with no level",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            LEVEL[0],
            LEVEL[1],
            LEVEL[2],
            LEVEL[3],
            LEVEL[4],
        ],
    };

    fn block(frame: &L2BookUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &L2BookUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        each_level(&frame.bids, &frame.asks, |[side, level, px, sz, n]| {
            out.row(&[
                number,
                time,
                Cell::Text(&frame.coin),
                side,
                level,
                px,
                sz,
                n,
            ])
        })
    }
}
