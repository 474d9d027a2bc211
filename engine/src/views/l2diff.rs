//! L2 diffs per coin: a `snapshot=true` full book first, then only the
//! levels a block changed; a removed level is sent with `sz:"0.0"`. A coin
//! reset from a node snapshot restarts its chain with a fresh
//! `snapshot=true` entry. Entries chain per coin by `seq` / `prev_seq`,
//! given per subscriber (see [`crate::views::numbering`]). The aggregation
//! is shared with the L2 book view ([`crate::market::l2::L2Tracker`]); with
//! a coalescing window, a window's changes merge into one frame (see
//! [`crate::views::coalesce`]).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::book::l2::{L2Level, L2Params};
use crate::market::l2::L2Key;
use crate::market::{Market, Needs, Position};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells};
use crate::views::coalesce::{Coalesce, Coalescer};
use crate::views::l2book::{LEVEL, each_level};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, required_coins};

/// `L2CoinDiff`: one coin's changed levels (or its whole book).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2CoinDiff {
    /// Market.
    pub coin: String,
    /// This entry's number in the coin's chain (0 until numbered).
    pub seq: u64,
    /// The coin's previous `seq`; 0 on a snapshot entry.
    pub prev_seq: u64,
    /// Changed bid levels (`sz` `0.0` = removed), or the whole side.
    pub bids: Vec<L2Level>,
    /// Changed ask levels, or the whole side.
    pub asks: Vec<L2Level>,
    /// True = full book, rebuild from it.
    pub snapshot: bool,
}

/// `L2BookDiffUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L2BookDiffUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// One entry per coin that changed, in coin order.
    pub diffs: Vec<L2CoinDiff>,
}

impl Coalesce for L2BookDiffUpdate {
    /// Per coin, later level states win; a snapshot entry replaces what
    /// came before it.
    fn absorb(&mut self, next: Self) {
        self.time = next.time;
        self.block_number = next.block_number;
        for diff in next.diffs {
            match self.diffs.iter_mut().find(|d| d.coin == diff.coin) {
                Some(entry) if !diff.snapshot => {
                    upsert(&mut entry.bids, diff.bids);
                    upsert(&mut entry.asks, diff.asks);
                }
                Some(entry) => *entry = diff,
                None => self.diffs.push(diff),
            }
        }
    }

    fn restamp(&mut self, at: Position) {
        self.block_number = at.block_number;
        self.time = at.time;
    }
}

fn upsert(levels: &mut Vec<L2Level>, changes: Vec<L2Level>) {
    for change in changes {
        match levels.iter_mut().find(|l| l.px == change.px) {
            Some(level) => *level = change,
            None => levels.push(change),
        }
    }
}

/// `L2BookDiffRequest`, normalised: 1–20 distinct coins and the
/// aggregation (checked on open).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L2DiffKey {
    /// Markets.
    pub coins: BTreeSet<String>,
    /// Levels per side (omitted = 20, 0 = full depth).
    pub n_levels: Option<u32>,
    /// Significant figures of aggregated prices.
    pub n_sig_figs: Option<u32>,
    /// Mantissa (with 5 significant figures).
    pub mantissa: Option<u64>,
}

/// One L2 diff subscription.
#[derive(Debug, Clone)]
pub struct L2DiffSubscription {
    params: L2Params,
    coins: BTreeSet<String>,
    coalescer: Coalescer<L2BookDiffUpdate>,
}

impl L2DiffSubscription {
    fn key(&self, coin: &str) -> L2Key {
        L2Key {
            coin: coin.to_owned(),
            params: self.params,
        }
    }

    fn snapshot_entry(&self, market: &Market, coin: &str) -> L2CoinDiff {
        let book = market
            .l2()
            .get(&self.key(coin))
            .map(|tracked| tracked.book().clone())
            .unwrap_or_default();
        L2CoinDiff {
            coin: coin.to_owned(),
            seq: 0,
            prev_seq: 0,
            bids: book.bids,
            asks: book.asks,
            snapshot: true,
        }
    }
}

impl View for L2DiffSubscription {
    type Key = L2DiffKey;
    type Frame = L2BookDiffUpdate;
    const NAME: &'static str = "l2diff";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs::BOOKS;
    const FIRST: bool = true;

    fn keys(selection: &Selection) -> Result<Vec<L2DiffKey>, ViewError> {
        Ok(vec![L2DiffKey {
            coins: required_coins(Self::NAME, &selection.coins)?,
            n_levels: selection.n_levels,
            n_sig_figs: selection.n_sig_figs,
            mantissa: selection.mantissa,
        }])
    }

    fn listed_coins(key: &L2DiffKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    fn book_coins(key: &L2DiffKey) -> Option<Vec<&str>> {
        (!key.coins.is_empty()).then(|| Self::listed_coins(key))
    }

    /// Tracks each coin's aggregated book; the opening frame has a snapshot
    /// entry per coin.
    fn open(
        market: &mut Market,
        key: &L2DiffKey,
        settings: &ViewSettings,
    ) -> Result<(Self, Vec<L2BookDiffUpdate>), ViewError> {
        let coins: Vec<String> = key.coins.iter().cloned().collect();
        let coins = required_coins(Self::NAME, &coins)?;
        let params = L2Params::new(key.n_levels, key.n_sig_figs, key.mantissa)?;
        let subscription = Self {
            params,
            coins,
            coalescer: Coalescer::new(settings.l2_coalesce_ms, market.position().time),
        };
        let (l2, books) = market.l2_mut();
        for coin in &subscription.coins {
            l2.track(subscription.key(coin), books);
        }
        market.fold_first(subscription.coins.iter().map(String::as_str));
        let at = market.position();
        let diffs = subscription
            .coins
            .iter()
            .map(|coin| subscription.snapshot_entry(market, coin))
            .collect();
        let frame = L2BookDiffUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
        };
        Ok((subscription, vec![frame]))
    }

    /// The changed levels of each coin the block changed; a fresh snapshot
    /// entry for a coin reset from a node snapshot.
    fn on_block(&mut self, market: &Market) -> Vec<L2BookDiffUpdate> {
        let mut diffs = Vec::new();
        for coin in &self.coins {
            let Some(tracked) = market.l2().get(&self.key(coin)) else {
                continue;
            };
            if tracked.reset() {
                diffs.push(self.snapshot_entry(market, coin));
            } else if tracked.changed() {
                diffs.push(L2CoinDiff {
                    coin: coin.clone(),
                    seq: 0,
                    prev_seq: 0,
                    bids: tracked.delta().bids.clone(),
                    asks: tracked.delta().asks.clone(),
                    snapshot: false,
                });
            }
        }
        let at = market.position();
        let frames = if diffs.is_empty() {
            Vec::new()
        } else {
            vec![L2BookDiffUpdate {
                time: at.time,
                block_number: at.block_number,
                diffs,
            }]
        };
        self.coalescer.push(frames, at)
    }

    fn close(self, market: &mut Market) {
        let l2 = market.l2_mut().0;
        for coin in &self.coins {
            l2.untrack(&self.key(coin));
        }
        market.unfold_first(self.coins.iter().map(String::as_str));
    }

    fn numbers(frame: &L2BookDiffUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::PerCoin(
            frame
                .diffs
                .iter()
                .map(|diff| numbering.next_seq(&diff.coin, diff.snapshot))
                .collect(),
        )
    }

    fn stamp(frame: &mut L2BookDiffUpdate, numbers: &Numbers) {
        if let Numbers::PerCoin(seqs) = numbers {
            for (diff, &(seq, prev_seq)) in frame.diffs.iter_mut().zip(seqs) {
                diff.seq = seq;
                diff.prev_seq = prev_seq;
            }
        }
    }
}

// `l2diff`: one row per changed level of each coin's entry of a frame.

impl Tabular for L2DiffSubscription {
    const TABLE: Table = Table {
        name: "l2diff",
        row: "one changed level of a coin's entry in a frame (`sz` 0 = the level is gone); on \
              a snapshot entry, every level of the coin's book; an entry with no level is one \
              row with no level",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::required(
                "seq",
                Kind::UInt64,
                "the entry's number in the coin's chain",
            ),
            Column::required(
                "prev_seq",
                Kind::UInt64,
                "the coin's previous `seq`; 0 on a snapshot",
            ),
            Column::required(
                "snapshot",
                Kind::Bool,
                "true: the coin's whole book, rebuild from it",
            ),
            LEVEL[0],
            LEVEL[1],
            LEVEL[2],
            LEVEL[3],
            LEVEL[4],
        ],
    };

    fn block(frame: &L2BookDiffUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &L2BookDiffUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        for diff in &frame.diffs {
            each_level(&diff.bids, &diff.asks, |[side, level, px, sz, n]| {
                out.row(&[
                    number,
                    time,
                    Cell::Text(&diff.coin),
                    Cell::U64(diff.seq),
                    Cell::U64(diff.prev_seq),
                    Cell::Bool(diff.snapshot),
                    side,
                    level,
                    px,
                    sz,
                    n,
                ])
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::{Px, Sz};

    fn level(px: &str, sz: &str) -> L2Level {
        L2Level {
            px: Px::parse(px).unwrap(),
            sz: Sz::parse(sz).unwrap(),
            n: 1,
        }
    }

    fn diff(block: u64, coin: &str, bids: Vec<L2Level>, snapshot: bool) -> L2BookDiffUpdate {
        L2BookDiffUpdate {
            time: i64::try_from(block).unwrap() * 100,
            block_number: block,
            diffs: vec![L2CoinDiff {
                coin: coin.into(),
                seq: 0,
                prev_seq: 0,
                bids,
                asks: Vec::new(),
                snapshot,
            }],
        }
    }

    #[test]
    fn diffs_inside_a_window_merge_into_the_newest_level_states() {
        let mut merged = diff(1, "BTC", vec![level("10", "1")], false);
        merged.absorb(diff(
            2,
            "BTC",
            vec![level("10", "2"), level("9", "1")],
            false,
        ));
        merged.absorb(diff(3, "ETH", vec![level("5", "1")], false));
        assert_eq!(merged.block_number, 3);
        assert_eq!(merged.diffs.len(), 2);
        assert_eq!(merged.diffs[0].bids, [level("10", "2"), level("9", "1")]);
        assert_eq!(merged.diffs[1].coin, "ETH");
        merged.absorb(diff(4, "BTC", vec![level("7", "1")], true));
        assert!(
            merged.diffs[0].snapshot,
            "a snapshot entry replaces the coin's"
        );
        assert_eq!(merged.diffs[0].bids, [level("7", "1")]);
    }
}
