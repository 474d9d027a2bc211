//! Aggregated L2 books per `(coin, n_levels, n_sig_figs, mantissa)`,
//! computed only for the parameter sets some subscription asked for (by
//! reference count), with what the last block did to each: touched,
//! changed as printed, reset, and the changed levels.

use std::collections::BTreeMap;

use crate::book::l2::{L2Book, L2Error, L2Level, L2Params, aggregate};
use crate::book::l4::{Books, L4Book};
use crate::event::Side;
use crate::fold::BlockChanges;

/// Which aggregated book.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L2Key {
    /// Market.
    pub coin: String,
    /// Depth and aggregation.
    pub params: L2Params,
}

/// One tracked aggregated book and what the last block did to it.
#[derive(Debug, Clone, Default)]
pub struct TrackedL2 {
    refs: usize,
    book: L2Book,
    touched: bool,
    changed: bool,
    reset: bool,
    delta: L2Book,
    errors: u64,
}

impl TrackedL2 {
    /// The current aggregated book.
    pub fn book(&self) -> &L2Book {
        &self.book
    }

    /// The last block mutated the coin's L4 book.
    pub fn touched(&self) -> bool {
        self.touched
    }

    /// The last block changed the printed levels.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// The last block carried a snapshot reset of the coin.
    pub fn reset(&self) -> bool {
        self.reset
    }

    /// Levels changed by the last block, a removed level with `sz` `0.0`.
    pub fn delta(&self) -> &L2Book {
        &self.delta
    }

    /// Blocks whose aggregation failed (the previous levels were kept).
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

/// Shared state: the aggregated books someone subscribed to.
#[derive(Debug, Default)]
pub struct L2Tracker {
    tracked: BTreeMap<L2Key, TrackedL2>,
}

fn compute(books: &Books, key: &L2Key) -> Result<L2Book, L2Error> {
    let empty = L4Book::new();
    let book = books.get(&key.coin).unwrap_or(&empty);
    aggregate(&key.coin, book, &key.params)
}

/// The levels of `new` that differ from `old`, in book order; a level of
/// `old` missing from `new` comes back with `sz` `0.0` and `n` 0.
pub fn diff_side(side: Side, old: &[L2Level], new: &[L2Level]) -> Vec<L2Level> {
    let better = |a: &L2Level, b: &L2Level| match side {
        Side::Bid => a.px > b.px,
        Side::Ask => a.px < b.px,
    };
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if j == new.len() || (i < old.len() && better(&old[i], &new[j])) {
            out.push(old[i].removed());
            i += 1;
        } else if i == old.len() || better(&new[j], &old[i]) {
            out.push(new[j]);
            j += 1;
        } else {
            if !old[i].same_print(&new[j]) {
                out.push(new[j]);
            }
            i += 1;
            j += 1;
        }
    }
    out
}

impl L2Tracker {
    /// Starts (or shares) tracking of `key`, computing it now if new.
    pub fn track(&mut self, key: L2Key, books: &Books) {
        let book = if self.tracked.contains_key(&key) {
            None
        } else {
            Some(compute(books, &key).unwrap_or_default())
        };
        let entry = self.tracked.entry(key).or_default();
        if let Some(book) = book {
            entry.book = book;
        }
        entry.refs += 1;
    }

    /// Drops one reference to `key`; the book stops being computed at zero.
    pub fn untrack(&mut self, key: &L2Key) {
        if let Some(entry) = self.tracked.get_mut(key) {
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                self.tracked.remove(key);
            }
        }
    }

    /// The tracked book for `key`.
    pub fn get(&self, key: &L2Key) -> Option<&TrackedL2> {
        self.tracked.get(key)
    }

    /// Number of parameter sets computed per block.
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.tracked.is_empty()
    }

    /// Brings the tracked books of the coins `which` takes up to the block
    /// `changes` describes (the others are left for another call).
    pub(crate) fn update(
        &mut self,
        books: &Books,
        changes: &BlockChanges,
        which: impl Fn(&str) -> bool,
    ) {
        for (key, entry) in &mut self.tracked {
            if !which(&key.coin) {
                continue;
            }
            entry.touched = changes.touched(&key.coin);
            entry.reset = changes.resets.contains(&key.coin);
            entry.changed = false;
            entry.delta = L2Book::default();
            if !entry.touched {
                continue;
            }
            match compute(books, key) {
                Ok(book) => {
                    entry.delta = L2Book {
                        bids: diff_side(Side::Bid, &entry.book.bids, &book.bids),
                        asks: diff_side(Side::Ask, &entry.book.asks, &book.asks),
                    };
                    entry.changed = !entry.delta.bids.is_empty() || !entry.delta.asks.is_empty();
                    entry.book = book;
                }
                Err(_) => entry.errors += 1,
            }
        }
    }
}
