//! Views: pure per-block folds of the engine's state into frames shaped like
//! the market-streaming messages (same field names, snake_case, prices and
//! sizes as exact strings, unset optional fields omitted).
//!
//! Each view has two halves. Its shared state (a field of [`Views`]) is
//! updated once per block by the engine thread inside
//! [`Engine::apply`](crate::fold::Engine::apply); views that are costly to
//! compute only keep state for what some subscription asked for. A
//! subscription type (`…Subscription`) then produces, from the engine, its
//! opening frame(s) (`open`) and the frames of each folded block
//! (`on_block`), carrying the block's `block_number` and `time`.

pub mod bbo;
pub mod candles;
pub mod fills;
pub mod l2book;
pub mod l2diff;
pub mod l4book;
pub mod l4updates;
pub mod mids;
pub mod tpsl;
pub mod trades;

use std::collections::BTreeSet;

use thiserror::Error;

use crate::book::l2::L2Error;
use crate::book::l4::Books;
use crate::fold::{BlockChanges, OrderChange};

/// A subscription request outside a view's contract.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    /// A required coin list is empty or too long (after deduplication).
    #[error("view: {view} needs 1 to 20 coins, got {count}")]
    CoinCount {
        /// The view.
        view: &'static str,
        /// Distinct coins asked for.
        count: usize,
    },
    /// A required coin is empty.
    #[error("view: {view} needs a coin")]
    MissingCoin {
        /// The view.
        view: &'static str,
    },
    /// Invalid L2 parameters.
    #[error("view: {0}")]
    L2(#[from] L2Error),
}

/// Maximum coins in a required coin list.
pub const MAX_REQUIRED_COINS: usize = 20;

/// Deduplicates a required coin list (1–20 entries).
///
/// # Errors
/// [`ViewError::CoinCount`] when it is empty or longer than 20.
pub fn required_coins(view: &'static str, coins: &[String]) -> Result<BTreeSet<String>, ViewError> {
    let set: BTreeSet<String> = coins.iter().cloned().collect();
    if set.is_empty() || set.len() > MAX_REQUIRED_COINS {
        return Err(ViewError::CoinCount {
            view,
            count: set.len(),
        });
    }
    Ok(set)
}

/// The frame position of the engine's current state: `(block_number, time)`.
pub(crate) fn position(engine: &crate::fold::Engine) -> (u64, i64) {
    (engine.height().unwrap_or(0), engine.time_ms())
}

/// Every view's shared state, updated once per block.
#[derive(Debug, Default)]
pub struct Views {
    /// Top of book per coin.
    pub bbo: bbo::BboView,
    /// Aggregated L2 books for the parameter sets subscribed to.
    pub l2: l2book::L2Tracker,
    /// Per-block raw events of the coins with L4 book subscribers.
    pub l4book: l4book::L4BookView,
    /// The block's typed L4 order changes.
    pub l4updates: l4updates::L4UpdatesView,
    /// Mid price per coin.
    pub mids: mids::MidsView,
}

impl Views {
    /// Recomputes every view from `books` (after loading a snapshot).
    pub fn rebuild(&mut self, books: &Books) {
        self.bbo.rebuild(books);
        self.l2.rebuild(books);
        self.mids.rebuild(books);
    }

    /// Folds one block's changes into every view (the typed order changes
    /// move into the L4 updates view instead of being copied).
    pub fn update(&mut self, books: &Books, mut changes: BlockChanges) {
        self.bbo.update(books, &changes);
        self.l2.update(books, &changes);
        self.l4book.update(&changes);
        self.mids.update(books, &self.bbo);
        self.l4updates.update(&mut changes);
    }

    /// An empty list for the next block's typed changes, reusing the memory
    /// of an earlier block's.
    pub(crate) fn recycled_changes(&mut self) -> Vec<OrderChange> {
        self.l4updates.take_spare()
    }

    /// Coins whose raw events some view needs this block.
    pub fn raw_coins(&self) -> BTreeSet<String> {
        self.l4book.coins().map(str::to_owned).collect()
    }
}

/// Coin filter of scope lists: empty = every coin.
pub(crate) fn in_scope(scope: &BTreeSet<String>, coin: &str) -> bool {
    scope.is_empty() || scope.contains(coin)
}
