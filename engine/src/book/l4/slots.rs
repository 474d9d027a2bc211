//! A book's slot table: its orders, and each one's place in its level's
//! time priority.

use super::order::RestingOrder;
use crate::book::oids::{prefetch, prefetch_all};

/// No neighbour in a level's list.
pub(super) const NIL: usize = usize::MAX;

/// A slot's neighbours in time priority within its level and the level's
/// number (see `Levels`), kept as 32-bit numbers (12 bytes a slot: the
/// table is read and written on every order change, so it is kept small).
/// Slots past `u32::MAX - 1` would read as "no neighbour"; a book that large
/// (hundreds of gigabytes of orders) does not fit in memory first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Link {
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) level: u32,
}

impl Link {
    pub(super) const UNLINKED: Self = Self {
        prev: u32::MAX,
        next: u32::MAX,
        level: u32::MAX,
    };

    pub(super) fn new(prev: usize, next: usize, level: u32) -> Self {
        Self {
            prev: Self::pack(prev),
            next: Self::pack(next),
            level,
        }
    }

    pub(super) fn pack(at: usize) -> u32 {
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    pub(super) fn unpack(at: u32) -> usize {
        if at == u32::MAX { NIL } else { at as usize }
    }

    pub(super) fn prev(self) -> usize {
        Self::unpack(self.prev)
    }

    pub(super) fn next(self) -> usize {
        Self::unpack(self.next)
    }

    pub(super) fn set_prev(&mut self, at: usize) {
        self.prev = Self::pack(at);
    }

    pub(super) fn set_next(&mut self, at: usize) {
        self.next = Self::pack(at);
    }
}

/// Slots of the first chunk; chunk `k` holds `FIRST_CHUNK << k`.
pub(super) const FIRST_CHUNK: usize = 16;

/// A book's slot table: the orders, and beside them, in a table of their
/// own, each slot's [`Link`]. Both are chunks of doubling size, each
/// allocated once at its full capacity and never reallocated, so adding an
/// order never copies the ones already resting (a plain `Vec` would move the
/// whole book on growth: milliseconds for a deep one, in the middle of a
/// block). Memory stays within twice the peak order count, like a `Vec`.
///
/// The links are apart from the orders because a deep book is far larger
/// than the cache: linking or unlinking an order rewrites its neighbours'
/// links, and those sit in a dense table (12 bytes a slot) rather than at
/// the head of each neighbour's ~170-byte order. A freed slot keeps its old
/// order until the slot is reused — only slots on a level's list or in the
/// oid index are ever read — so removing an order does not touch (or drop)
/// its memory; the next order placed there overwrites, and drops, it.
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) orders: Vec<Vec<RestingOrder>>,
    pub(super) links: Vec<Vec<Link>>,
    pub(super) free: Vec<usize>,
    /// Slots handed out so far (used or free).
    pub(super) len: usize,
}

/// A copy keeps every chunk at its full capacity: a derived `Clone` would
/// trim the last chunk to its length, and the next order added to the copy
/// would then reallocate (and copy) that chunk — up to half the book.
impl Clone for Slots {
    fn clone(&self) -> Self {
        fn full<T: Clone>(chunks: &[Vec<T>]) -> Vec<Vec<T>> {
            chunks
                .iter()
                .enumerate()
                .map(|(k, chunk)| {
                    let mut copy = Vec::with_capacity(FIRST_CHUNK << k);
                    copy.extend_from_slice(chunk);
                    copy
                })
                .collect()
        }
        Self {
            orders: full(&self.orders),
            links: full(&self.links),
            free: self.free.clone(),
            len: self.len,
        }
    }
}

impl Slots {
    /// Chunk and offset of slot `at`.
    pub(super) fn locate(at: usize) -> (usize, usize) {
        let shifted = at.saturating_add(FIRST_CHUNK);
        let chunk = (shifted.ilog2() - FIRST_CHUNK.ilog2()) as usize;
        (chunk, shifted - (FIRST_CHUNK << chunk))
    }

    pub(super) fn order(&self, at: usize) -> Option<&RestingOrder> {
        let (chunk, offset) = Self::locate(at);
        self.orders.get(chunk)?.get(offset)
    }

    pub(super) fn order_mut(&mut self, at: usize) -> Option<&mut RestingOrder> {
        let (chunk, offset) = Self::locate(at);
        self.orders.get_mut(chunk)?.get_mut(offset)
    }

    pub(super) fn link(&self, at: usize) -> Option<Link> {
        self.link_ref(at).copied()
    }

    pub(super) fn link_ref(&self, at: usize) -> Option<&Link> {
        let (chunk, offset) = Self::locate(at);
        self.links.get(chunk)?.get(offset)
    }

    pub(super) fn link_mut(&mut self, at: usize) -> Option<&mut Link> {
        let (chunk, offset) = Self::locate(at);
        self.links.get_mut(chunk)?.get_mut(offset)
    }

    /// Asks for slot `at`'s link and the lines of its order that an update
    /// or a removal reads.
    pub(super) fn prefetch(&self, at: usize) {
        if let Some(link) = self.link_ref(at) {
            prefetch(link);
        }
        if let Some(order) = self.order(at) {
            prefetch(&order.side);
            prefetch(&order.limit_px);
            prefetch(&order.sz);
        }
    }

    /// Stores `order`, unlinked, returning its slot.
    pub(super) fn put(&mut self, order: RestingOrder) -> usize {
        if let Some(at) = self.free.pop() {
            let (chunk, offset) = Self::locate(at);
            let slot = self.orders.get_mut(chunk).and_then(|c| c.get_mut(offset));
            let link = self.links.get_mut(chunk).and_then(|c| c.get_mut(offset));
            if let (Some(slot), Some(link)) = (slot, link) {
                *slot = order;
                *link = Link::UNLINKED;
                return at;
            }
        }
        let at = self.len;
        let (chunk, _) = Self::locate(at);
        if chunk == self.orders.len() {
            self.orders.push(Vec::with_capacity(FIRST_CHUNK << chunk));
            self.links.push(Vec::with_capacity(FIRST_CHUNK << chunk));
        }
        if let (Some(orders), Some(links)) = (self.orders.last_mut(), self.links.last_mut()) {
            orders.push(order);
            links.push(Link::UNLINKED);
        }
        self.len += 1;
        at
    }

    /// Frees slot `at` for reuse; its order stays until then. The next
    /// order placed takes this slot and first drops the old order there,
    /// reading all of it, so all of it is asked for now.
    pub(super) fn free(&mut self, at: usize) {
        if let Some(order) = self.order(at) {
            prefetch_all(order);
        }
        self.free.push(at);
    }
}

/// The slot table's own invariants: every index has one place, links
/// keep their numbers, freed slots are reused before the table grows, and
/// a copy keeps every chunk at full capacity.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Side;
    use crate::num::Decimal;

    fn order(oid: u64) -> RestingOrder {
        let one = Decimal::parse("1").unwrap();
        RestingOrder::bare("0xabc", oid, Side::Bid, one, one, 0)
    }

    #[test]
    fn slots_map_every_index_to_one_place_across_chunks() {
        let mut seen = std::collections::HashSet::new();
        let mut expected = (0, 0);
        for at in 0..10_000 {
            let (chunk, offset) = Slots::locate(at);
            assert_eq!((chunk, offset), expected, "slot {at}");
            assert!(seen.insert((chunk, offset)));
            expected = if offset + 1 == FIRST_CHUNK << chunk {
                (chunk + 1, 0)
            } else {
                (chunk, offset + 1)
            };
        }
        // The "no neighbour" marker lands in no chunk a book could have.
        assert!(Slots::locate(NIL).0 >= 48);
    }

    #[test]
    fn links_keep_slot_numbers_and_the_no_neighbour_marker() {
        for at in [0, 1, 15, 16, 1 << 20, (u32::MAX - 1) as usize] {
            let link = Link::new(at, NIL, 3);
            assert_eq!((link.prev(), link.next(), link.level), (at, NIL, 3));
        }
        let mut link = Link::UNLINKED;
        assert_eq!((link.prev(), link.next()), (NIL, NIL));
        link.set_next(7);
        link.set_prev(9);
        assert_eq!((link.prev(), link.next()), (9, 7));
    }

    #[test]
    fn freed_slots_are_taken_again_before_the_table_grows() {
        let mut slots = Slots::default();
        let at: Vec<usize> = (0..40).map(|oid| slots.put(order(oid))).collect();
        assert_eq!(at, (0..40).collect::<Vec<_>>());
        assert_eq!(slots.len, 40);
        slots.free(7);
        slots.free(33);
        // Last freed, first taken; its old order is replaced and unlinked.
        assert_eq!(slots.put(order(100)), 33);
        assert_eq!(slots.put(order(101)), 7);
        assert_eq!(slots.order(7).map(|o| o.oid), Some(101));
        assert_eq!(
            slots.link(7).map(|l| (l.prev(), l.next())),
            Some((NIL, NIL))
        );
        assert_eq!(slots.len, 40, "nothing grew");
        assert_eq!(slots.put(order(102)), 40);
        assert!(slots.order(41).is_none(), "past the table: nothing");
    }

    #[test]
    fn a_copy_keeps_every_chunk_at_full_capacity() {
        let mut slots = Slots::default();
        for oid in 0..100 {
            slots.put(order(oid));
        }
        let copy = slots.clone();
        for (k, chunk) in copy.orders.iter().enumerate() {
            assert_eq!(chunk.capacity(), FIRST_CHUNK << k, "chunk {k}");
        }
        for (k, chunk) in copy.links.iter().enumerate() {
            assert_eq!(chunk.capacity(), FIRST_CHUNK << k, "link chunk {k}");
        }
        assert_eq!(
            (0..100)
                .map(|at| copy.order(at).map(|o| o.oid))
                .collect::<Vec<_>>(),
            (0..100).map(Some).collect::<Vec<_>>()
        );
    }
}
