//! A book's levels by number: each level's side, price, list ends, order
//! count and running total.

use super::slots::{Link, NIL, Slots};
use crate::event::Side;
use crate::num::{Px, Sz};

/// A level's side and price, list ends, order count and running total, in
/// 32 bytes: the two decimals are kept as their parts, side by side with
/// the small fields (a book has over a hundred thousand levels; whole
/// decimals and an optional total padded the level to 56).
#[derive(Debug, Clone)]
pub(super) struct LevelData {
    px_units: i64,
    /// Exact running sum of the orders' sizes (see [`LevelData::total`]).
    total_units: i64,
    /// First and last slots, packed as in [`Link`](super::slots::Link) (4
    /// bytes each, not 8).
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) len: u32,
    px_scale: u8,
    total_scale: u8,
    /// False once a step of the running total overflowed.
    total_known: bool,
    pub(super) side: Side,
}

impl LevelData {
    pub(super) fn new(side: Side, px: Px) -> Self {
        Self {
            px_units: px.units(),
            total_units: Sz::ZERO.units(),
            head: u32::MAX,
            tail: u32::MAX,
            len: 0,
            px_scale: px.scale(),
            total_scale: Sz::ZERO.scale(),
            total_known: true,
            side,
        }
    }

    /// The level's price.
    pub(super) fn px(&self) -> Px {
        Px::from_parts(self.px_units, self.px_scale)
    }

    /// Exact running sum of the orders' sizes, kept at the largest scale
    /// seen (made canonical only when read: doing it on every step cost a
    /// division per trailing zero); `None` once a step overflowed (then
    /// [`Level::total_sz`](super::Level::total_sz) sums the orders instead).
    pub(super) fn total(&self) -> Option<Sz> {
        self.total_known
            .then(|| Sz::from_parts(self.total_units, self.total_scale))
    }

    pub(super) fn set_total(&mut self, total: Option<Sz>) {
        let total_or_zero = total.unwrap_or(Sz::ZERO);
        self.total_units = total_or_zero.units();
        self.total_scale = total_or_zero.scale();
        self.total_known = total.is_some();
    }

    /// Moves the running total by `added - removed` (`None`: no order added
    /// or removed). A step that overflows leaves the total unknown (summed on
    /// demand) until the level empties.
    pub(super) fn adjust(&mut self, added: Option<Sz>, removed: Option<Sz>) {
        let total = if self.len == 0 {
            Some(Sz::ZERO)
        } else {
            self.total().and_then(|total| {
                total
                    .checked_add_wide(added.unwrap_or(Sz::ZERO))?
                    .checked_sub_wide(removed.unwrap_or(Sz::ZERO))
            })
        };
        self.set_total(total);
    }

    pub(super) fn head(&self) -> usize {
        Link::unpack(self.head)
    }

    pub(super) fn tail(&self) -> usize {
        Link::unpack(self.tail)
    }

    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// Appends the order in slot `at` (whose links are unset) at the back
    /// of this level, number `level`.
    pub(super) fn push_back(&mut self, slots: &mut Slots, at: usize, level: u32, sz: Sz) {
        if let Some(last) = slots.link_mut(self.tail()) {
            last.set_next(at);
        } else {
            self.head = Link::pack(at);
        }
        if let Some(link) = slots.link_mut(at) {
            *link = Link::new(self.tail(), NIL, level);
        }
        self.tail = Link::pack(at);
        // At most one order per slot: fewer than `u32::MAX`.
        self.len = self.len.saturating_add(1);
        self.adjust(Some(sz), None);
    }

    /// Unlinks a removed order that sat between `prev` and `next`.
    pub(super) fn unlink(&mut self, slots: &mut Slots, prev: usize, next: usize, sz: Sz) {
        match slots.link_mut(prev) {
            Some(link) => link.set_next(next),
            None => self.head = Link::pack(next),
        }
        match slots.link_mut(next) {
            Some(link) => link.set_prev(prev),
            None => self.tail = Link::pack(prev),
        }
        self.len = self.len.saturating_sub(1);
        self.adjust(None, Some(sz));
    }
}

/// A book's levels by number. The ordered maps of prices hold only these
/// numbers, and each resting order's link names its level's, so changing
/// or removing an order reaches its level directly: a map is searched when
/// an order is placed (to find its price's level) and changed only when a
/// level is made or empties. Most removals leave other orders on the level
/// (nine in ten in the simulator's mainnet blocks), and a map search walks
/// nodes spread over memory, each a wait.
#[derive(Debug, Default)]
pub(super) struct Levels {
    pub(super) data: Vec<LevelData>,
    /// Numbers of emptied levels, for reuse.
    pub(super) free: Vec<u32>,
}

/// A copy keeps the table's capacity, as `Slots` does: a derived `Clone`
/// trims it to its length, and the copy's next new price would then copy the
/// whole table to grow it.
impl Clone for Levels {
    fn clone(&self) -> Self {
        let mut data = Vec::with_capacity(self.data.capacity());
        data.extend_from_slice(&self.data);
        Self {
            data,
            free: self.free.clone(),
        }
    }
}

impl Levels {
    /// A new empty level at `px`; its number.
    pub(super) fn add(&mut self, side: Side, px: Px) -> u32 {
        let level = LevelData::new(side, px);
        if let Some(at) = self.free.pop()
            && let Some(slot) = self.data.get_mut(at as usize)
        {
            *slot = level;
            return at;
        }
        // A level per resting order at most: fewer than `u32::MAX` (see
        // `Link`).
        let at = u32::try_from(self.data.len()).unwrap_or(u32::MAX);
        self.data.push(level);
        at
    }

    pub(super) fn get(&self, at: u32) -> Option<&LevelData> {
        self.data.get(at as usize)
    }

    pub(super) fn get_mut(&mut self, at: u32) -> Option<&mut LevelData> {
        self.data.get_mut(at as usize)
    }

    /// Frees an emptied level's number.
    pub(super) fn release(&mut self, at: u32) {
        self.free.push(at);
    }
}

/// The level table's own invariants: a level's list, count and running
/// total follow every order added and removed, an overflowing total is
/// unknown until the level empties, and emptied numbers are reused.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::l4::RestingOrder;
    use crate::num::Decimal;

    fn sz(text: &str) -> Sz {
        Decimal::parse(text).unwrap()
    }

    /// `level`'s slots from head to tail, checking each back link.
    fn walk(level: &LevelData, slots: &Slots) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = level.head();
        let mut prev = NIL;
        while at != NIL {
            let link = slots.link(at).unwrap();
            assert_eq!(link.prev(), prev, "slot {at}'s back link");
            out.push(at);
            prev = at;
            at = link.next();
        }
        assert_eq!(level.tail(), prev);
        assert_eq!(level.len(), out.len());
        out
    }

    #[test]
    fn a_levels_list_count_and_total_follow_its_orders() {
        let mut slots = Slots::default();
        let mut levels = Levels::default();
        let number = levels.add(Side::Ask, sz("10.5"));
        let mut level = levels.get(number).unwrap().clone();
        let sizes = ["1.5", "2", "0.25", "4", "1"];
        for (oid, size) in sizes.iter().enumerate() {
            let at = slots.put(RestingOrder::bare(
                "0xabc",
                oid as u64,
                Side::Ask,
                sz("10.5"),
                sz(size),
                0,
            ));
            level.push_back(&mut slots, at, number, sz(size));
        }
        assert_eq!(walk(&level, &slots), [0, 1, 2, 3, 4]);
        assert_eq!(level.total().map(Sz::canonical), Some(sz("8.75")));
        assert_eq!(slots.link(3).unwrap().level, number);
        // The middle, the head, then the tail.
        for (at, size, left, total) in [
            (2, "0.25", vec![0, 1, 3, 4], "8.5"),
            (0, "1.5", vec![1, 3, 4], "7"),
            (4, "1", vec![1, 3], "6"),
        ] {
            let link = slots.link(at).unwrap();
            level.unlink(&mut slots, link.prev(), link.next(), sz(size));
            slots.free(at);
            assert_eq!(walk(&level, &slots), left);
            assert_eq!(level.total().map(Sz::canonical), Some(sz(total)));
        }
        for at in [1, 3] {
            let link = slots.link(at).unwrap();
            level.unlink(&mut slots, link.prev(), link.next(), sz("1"));
        }
        assert_eq!((level.head(), level.tail(), level.len()), (NIL, NIL, 0));
        assert_eq!(level.total(), Some(Sz::ZERO), "an empty level totals zero");
    }

    #[test]
    fn an_overflowing_total_is_unknown_until_the_level_empties() {
        let mut level = LevelData::new(Side::Bid, sz("1"));
        level.len = 2;
        let huge = Sz::new(i64::MAX, 0).unwrap();
        level.adjust(Some(huge), None);
        level.adjust(Some(huge), None);
        assert_eq!(level.total(), None);
        level.len = 0;
        level.adjust(None, Some(huge));
        assert_eq!(level.total(), Some(Sz::ZERO));
    }

    #[test]
    fn a_level_is_32_bytes() {
        assert_eq!(std::mem::size_of::<LevelData>(), 32);
    }

    #[test]
    fn emptied_level_numbers_are_reused() {
        let mut levels = Levels::default();
        let a = levels.add(Side::Bid, sz("1"));
        let b = levels.add(Side::Bid, sz("2"));
        assert_eq!((a, b), (0, 1));
        levels.release(a);
        let c = levels.add(Side::Ask, sz("3"));
        assert_eq!(c, a, "the freed number");
        assert_eq!(
            levels.get(c).map(|l| (l.side, l.px())),
            Some((Side::Ask, sz("3")))
        );
        assert_eq!(levels.add(Side::Ask, sz("4")), 2);
        assert_eq!(levels.clone().data.capacity(), levels.data.capacity());
    }
}
