//! Mid prices per coin from the book: `(best bid + best ask) / 2`, exact and
//! canonically printed; a coin with an empty side has no mid. Kept for every
//! book, with the coins whose mid the last block changed.

use std::collections::BTreeMap;

use crate::book::l4::{Books, L4Book};
use crate::market::bbo::BboView;
use crate::num::{Decimal, Px};
use crate::text::Short;

/// `(bid + ask) / 2`, exact, canonical; `None` on overflow.
pub fn mid(bid: Px, ask: Px) -> Option<Px> {
    let sum = bid.checked_add(ask)?;
    let half = if sum.units() % 2 == 0 {
        Decimal::new(sum.units() / 2, sum.scale()).ok()?
    } else {
        Decimal::new(sum.units().checked_mul(5)?, sum.scale().checked_add(1)?).ok()?
    };
    Some(half.canonical())
}

fn mid_of(book: &L4Book) -> Option<Px> {
    mid(book.best_bid()?.px(), book.best_ask()?.px())
}

/// Shared state: every coin's mid and the coins whose mid changed in the
/// last block.
#[derive(Debug, Default)]
pub struct MidsView {
    mids: BTreeMap<String, Px>,
    changed: Vec<Short>,
}

impl MidsView {
    /// The current mids.
    pub fn mids(&self) -> &BTreeMap<String, Px> {
        &self.mids
    }

    /// Coins whose mid the last block changed (set, moved or gone).
    pub fn changed(&self) -> &[Short] {
        &self.changed
    }

    pub(crate) fn rebuild(&mut self, books: &Books) {
        self.mids = books
            .iter()
            .filter_map(|(coin, book)| Some((coin.to_owned(), mid_of(book)?)))
            .collect();
        self.changed.clear();
    }

    /// Recomputes the mids of the coins the block touched. `bbo` has already
    /// folded the block: a mid moves only with a best price, so a coin whose
    /// top did not change, with both sides set, keeps its mid, and a changed
    /// top with both sides set gives the mid directly. A side left unset
    /// there (an empty side, or a level total too large to print) says
    /// nothing about the price, and that coin is recomputed from its book.
    pub(crate) fn update(&mut self, books: &Books, bbo: &BboView) {
        self.changed.clear();
        for (coin, top, changed) in bbo.touched() {
            let now = match top {
                (Some(_), Some(_)) if !changed => continue,
                (Some(bid), Some(ask)) => mid(bid.px, ask.px),
                _ => books.get(coin).and_then(mid_of),
            };
            let before = self.mids.get(coin);
            let same = match (before, now.as_ref()) {
                (None, None) => true,
                (Some(a), Some(b)) => a == b && a.scale() == b.scale(),
                _ => false,
            };
            if same {
                continue;
            }
            match (now, self.mids.get_mut(coin)) {
                (Some(px), Some(held)) => *held = px,
                (Some(px), None) => {
                    self.mids.insert(coin.to_owned(), px);
                }
                (None, _) => {
                    self.mids.remove(coin);
                }
            }
            self.changed.push(Short::new(coin));
        }
    }
}
