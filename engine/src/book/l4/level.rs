//! A price level of a book, borrowed: its orders in time priority and
//! their total size.

use std::fmt;

use super::levels::LevelData;
use super::order::RestingOrder;
use super::slots::Slots;
use crate::num::{Px, Sz};

/// One price level of an [`L4Book`](super::L4Book), borrowed: its orders in time priority
/// and their total size, kept as orders come, change and go (BBO, L2 and mids
/// read it on every block).
#[derive(Clone, Copy)]
pub struct Level<'a> {
    pub(super) data: &'a LevelData,
    pub(super) slots: &'a Slots,
}

impl PartialEq for Level<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.px() == other.px() && self.orders().eq(other.orders())
    }
}

impl Eq for Level<'_> {}

impl fmt::Debug for Level<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Level")
            .field("px", &self.px())
            .field("orders", &self.orders().collect::<Vec<_>>())
            .finish()
    }
}

impl<'a> Level<'a> {
    /// The level's price, as the node wrote it for the first order here.
    pub fn px(self) -> Px {
        self.data.px()
    }

    /// Orders in time priority (oldest first).
    pub fn orders(self) -> LevelOrders<'a> {
        LevelOrders {
            slots: self.slots,
            front: self.data.head(),
            back: self.data.tail(),
            left: self.data.len(),
        }
    }

    /// Number of orders.
    pub fn len(self) -> usize {
        self.data.len()
    }

    /// Whether the level holds no order (never true for a level in a book).
    pub fn is_empty(self) -> bool {
        self.data.len == 0
    }

    /// The running total as kept (at the largest scale seen; `None` once a
    /// step overflowed), for a checkpoint to carry over exactly.
    pub(crate) fn running_total(self) -> Option<Sz> {
        self.data.total()
    }

    /// Exact total size, canonically printed; `None` on overflow.
    pub fn total_sz(self) -> Option<Sz> {
        if let Some(total) = self.data.total() {
            // The canonical form depends only on the value, so the running
            // sum prints as a fresh one.
            return Some(total.canonical());
        }
        let mut total = Sz::ZERO;
        for order in self.orders() {
            total = total.checked_add(order.sz)?;
        }
        Some(total)
    }
}

/// The orders of one [`Level`], oldest first.
#[derive(Debug, Clone)]
pub struct LevelOrders<'a> {
    pub(super) slots: &'a Slots,
    pub(super) front: usize,
    pub(super) back: usize,
    pub(super) left: usize,
}

impl<'a> LevelOrders<'a> {
    /// The order at the front (or back) end, moving that end one step in.
    fn take_end(&mut self, back: bool) -> Option<&'a RestingOrder> {
        if self.left == 0 {
            return None;
        }
        let at = if back { self.back } else { self.front };
        let link = self.slots.link(at)?;
        if back {
            self.back = link.prev();
        } else {
            self.front = link.next();
        }
        self.left -= 1;
        self.slots.order(at)
    }
}

impl<'a> Iterator for LevelOrders<'a> {
    type Item = &'a RestingOrder;

    fn next(&mut self) -> Option<&'a RestingOrder> {
        self.take_end(false)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

impl DoubleEndedIterator for LevelOrders<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.take_end(true)
    }
}
