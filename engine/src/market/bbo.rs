//! Top of book per coin: the top level of each side (`px`, total `sz`,
//! order count `n`) of every book, and which tops the last block changed.

use crate::book::l2::{L2Level, level_of};
use crate::book::l4::{Books, L4Book};
use crate::fold::BlockChanges;
use crate::text::Short;

/// Top of book: `(bid, ask)`.
pub type Top = (Option<L2Level>, Option<L2Level>);

/// Shared state: every coin's current top of book and the coins whose top
/// changed in the last block.
///
/// Kept by the books' positions (coin order), which the block's touched list
/// gives, so no coin name is hashed or compared to fold a block. Books are
/// only ever added, so the list is in step with them while it is as long.
#[derive(Debug, Default)]
pub struct BboView {
    /// The books' coins, in their order.
    coins: Vec<Short>,
    /// Top of `coins[i]`.
    tops: Vec<Top>,
    /// The last block's touched coins, as positions, in coin order, with
    /// whether their top changed.
    last: Vec<(usize, bool)>,
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
        self.coins = books.iter().map(|(coin, _)| Short::new(coin)).collect();
        self.tops = books
            .iter()
            .map(|(coin, book)| top_of(coin, book))
            .collect();
        self.last.clear();
    }

    /// Takes in the tops of the books `changes` touched, as the block's
    /// first ones: the coins folded first.
    pub(crate) fn update(&mut self, books: &Books, changes: &BlockChanges) {
        self.last.clear();
        self.update_rest(books, changes);
    }

    /// Takes in the tops of the books `changes` touched that the block's
    /// first update did not: `last` then holds every touched coin once.
    pub(crate) fn update_rest(&mut self, books: &Books, changes: &BlockChanges) {
        if self.coins.len() != books.len() {
            // Books listed since the first update moved the positions it
            // noted: note them again by coin.
            let noted: Vec<(Short, bool)> = self
                .last
                .drain(..)
                .filter_map(|(at, changed)| Some((self.coins.get(at)?.clone(), changed)))
                .collect();
            self.follow_listings(books);
            for (coin, changed) in noted {
                if let Some(at) = self.position(&coin) {
                    self.last.push((at, changed));
                }
            }
        }
        let first = self.last.len();
        for &at in &changes.touched_at {
            if self.last[..first]
                .binary_search_by_key(&at, |&(noted, _)| noted)
                .is_ok()
            {
                continue;
            }
            let Some((coin, book)) = books.at(at) else {
                continue;
            };
            let top = top_of(coin, book);
            let Some(held) = self.tops.get_mut(at) else {
                continue;
            };
            let changed = !same_top(held, &top);
            *held = top;
            self.last.push((at, changed));
        }
        if first > 0 && self.last.len() > first {
            self.last.sort_unstable_by_key(|&(at, _)| at);
        }
    }

    /// Takes in coins listed since the last block (with no top yet: the
    /// block's touched list covers any that now have one).
    fn follow_listings(&mut self, books: &Books) {
        let mut tops = std::mem::take(&mut self.tops).into_iter();
        let mut held = std::mem::take(&mut self.coins).into_iter().peekable();
        for (coin, _) in books.iter() {
            let top = if held.next_if(|known| known.as_str() == coin).is_some() {
                tops.next().unwrap_or((None, None))
            } else {
                (None, None)
            };
            self.coins.push(Short::new(coin));
            self.tops.push(top);
        }
    }

    /// The current top of `coin` (both unset when it has no book).
    pub fn top(&self, coin: &str) -> Top {
        self.position(coin)
            .and_then(|at| self.tops.get(at).copied())
            .unwrap_or((None, None))
    }

    /// Whether `coin`'s top changed in the last block.
    pub fn changed(&self, coin: &str) -> bool {
        self.position(coin).is_some_and(|at| {
            self.last
                .binary_search_by_key(&at, |&(touched, _)| touched)
                .is_ok_and(|i| self.last[i].1)
        })
    }

    /// The last block's touched coins in coin order: name, current top, and
    /// whether the top changed.
    pub(crate) fn touched(&self) -> impl Iterator<Item = (&str, &Top, bool)> + '_ {
        self.last.iter().filter_map(|&(at, changed)| {
            Some((self.coins.get(at)?.as_str(), self.tops.get(at)?, changed))
        })
    }

    fn position(&self, coin: &str) -> Option<usize> {
        self.coins
            .binary_search_by(|held| held.as_str().cmp(coin))
            .ok()
    }
}
