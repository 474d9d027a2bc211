//! Best bid and offer per coin: the top level of each side (`px`, total
//! `sz`, order count `n`), with a frame only when one of them changes.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::book::l2::{L2Level, level_of};
use crate::book::l4::{Books, L4Book};
use crate::fold::{BlockChanges, Engine};
use crate::text::Short;
use crate::views::{ViewError, position, required_coins};

/// `BboUpdate`: one coin's top of book; a side is omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BboUpdate {
    /// Market.
    pub coin: String,
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Best bid level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bid: Option<L2Level>,
    /// Best ask level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask: Option<L2Level>,
}

/// Top of book: `(bid, ask)`.
pub type Top = (Option<L2Level>, Option<L2Level>);

/// Shared state: every coin's current top of book and the coins whose top
/// changed in the last block.
#[derive(Debug, Default)]
pub struct BboView {
    current: HashMap<String, Top, foldhash::fast::RandomState>,
    changed: HashSet<String, foldhash::fast::RandomState>,
}

/// The top of `book` (sides whose total size overflows are left unset).
pub fn top_of(coin: &str, book: &L4Book) -> Top {
    (
        book.best_bid().and_then(|level| level_of(coin, level).ok()),
        book.best_ask().and_then(|level| level_of(coin, level).ok()),
    )
}

fn same_top(a: &Top, b: &Top) -> bool {
    fn same(x: Option<&L2Level>, y: Option<&L2Level>) -> bool {
        match (x, y) {
            (None, None) => true,
            (Some(x), Some(y)) => x.same_print(y),
            _ => false,
        }
    }
    same(a.0.as_ref(), b.0.as_ref()) && same(a.1.as_ref(), b.1.as_ref())
}

impl BboView {
    pub(crate) fn rebuild(&mut self, books: &Books) {
        self.current = books
            .iter()
            .map(|(coin, book)| (coin.to_owned(), top_of(coin, book)))
            .collect();
        self.changed.clear();
    }

    pub(crate) fn update(&mut self, books: &Books, changes: &BlockChanges) {
        self.changed.clear();
        for coin in changes.touched.iter().map(Short::as_str) {
            let top = books
                .get(coin)
                .map_or((None, None), |book| top_of(coin, book));
            let previous = self.current.get(coin).copied().unwrap_or((None, None));
            if !same_top(&previous, &top) {
                match self.current.get_mut(coin) {
                    Some(held) => *held = top,
                    None => {
                        self.current.insert(coin.to_owned(), top);
                    }
                }
                self.changed.insert(coin.to_owned());
            }
        }
    }

    /// The current top of `coin` (both unset when it has no book).
    pub fn top(&self, coin: &str) -> Top {
        self.current.get(coin).copied().unwrap_or((None, None))
    }

    /// Whether `coin`'s top changed in the last block.
    pub fn changed(&self, coin: &str) -> bool {
        self.changed.contains(coin)
    }
}

/// `BboRequest`: 1–20 coins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BboRequest {
    /// Markets.
    pub coins: Vec<String>,
}

/// One BBO subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BboSubscription {
    coins: BTreeSet<String>,
}

impl BboSubscription {
    /// Subscribes; the opening frames are every coin's current top.
    ///
    /// # Errors
    /// [`ViewError::CoinCount`] unless 1–20 distinct coins are given.
    pub fn open(
        engine: &Engine,
        request: &BboRequest,
    ) -> Result<(Self, Vec<BboUpdate>), ViewError> {
        let subscription = Self {
            coins: required_coins("bbo", &request.coins)?,
        };
        let frames = subscription
            .coins
            .iter()
            .map(|coin| Self::frame(engine, coin))
            .collect();
        Ok((subscription, frames))
    }

    /// Frames of the last folded block: one per subscribed coin whose top
    /// changed.
    pub fn on_block(&self, engine: &Engine) -> Vec<BboUpdate> {
        self.coins
            .iter()
            .filter(|coin| engine.views().bbo.changed(coin))
            .map(|coin| Self::frame(engine, coin))
            .collect()
    }

    fn frame(engine: &Engine, coin: &str) -> BboUpdate {
        let (block_number, time) = position(engine);
        let (bid, ask) = engine.views().bbo.top(coin);
        BboUpdate {
            coin: coin.to_owned(),
            time,
            block_number,
            bid,
            ask,
        }
    }
}
