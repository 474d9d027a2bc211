//! A book's order-id index: oid → slot of the order in the book's slot
//! table. The book keeps a second one as its price index (a level's packed
//! side and price → level number).
//!
//! Every raw diff probes it once, and a deep book's index is far larger than
//! the CPU's near caches, so the probe is usually a trip to memory. Unlike a
//! general-purpose map, this table can say *where* an oid's probe will land
//! before the probe is made ([`OidIndex::prefetch`]): the fold asks for the
//! lines of the diffs a few places ahead while it applies the current one,
//! and the trips overlap instead of queueing.
//!
//! Open addressing with linear probing over a power-of-two table of
//! 12-byte `(oid, slot)` pairs, at most three quarters full; the home of an oid is
//! the top bits of its product with a 64-bit odd constant (Fibonacci
//! hashing: the node's oids are consecutive integers, which this spreads
//! evenly). Removal shifts the rest of the probe run back, so there are no
//! tombstones and a probe never reads past the first vacant entry.

/// A slot value that marks a vacant entry.
const VACANT: u32 = u32::MAX;

/// Entries in the first table.
const FIRST_CAPACITY: usize = 16;

/// 2^64 / φ, odd.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

/// 12 bytes: slots are kept as 32-bit numbers, like the book's links (a
/// book of 2^32 orders would need a terabyte first), and the pair is packed
/// to 4-byte alignment so that five and a third entries share a cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct Entry {
    oid: u64,
    slot: u32,
}

impl Entry {
    const EMPTY: Self = Self {
        oid: 0,
        slot: VACANT,
    };

    fn is_vacant(self) -> bool {
        self.slot == VACANT
    }
}

/// Order id → slot.
#[derive(Debug, Clone, Default)]
pub(crate) struct OidIndex {
    /// Empty, or a power of two of entries.
    entries: Box<[Entry]>,
    len: usize,
}

impl OidIndex {
    /// Oids held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The entry an oid's probe starts at (the table is not empty).
    fn home(&self, oid: u64) -> usize {
        let bits = self.entries.len().trailing_zeros();
        // The top `bits` bits of the product; `bits` ≥ 4 in a table.
        #[allow(clippy::cast_possible_truncation)]
        let home = (oid.wrapping_mul(FIBONACCI) >> (64 - bits)) as usize;
        home
    }

    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    /// Where `oid` is held, or the vacant entry that ends its probe run;
    /// `None` only when the table is empty.
    fn find(&self, oid: u64) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut at = self.home(oid);
        loop {
            let entry = *self.entries.get(at)?;
            if entry.is_vacant() || entry.oid == oid {
                return Some(at);
            }
            at = (at + 1) & mask;
        }
    }

    /// The slot of `oid`.
    pub(crate) fn get(&self, oid: u64) -> Option<usize> {
        let entry = *self.entries.get(self.find(oid)?)?;
        (!entry.is_vacant()).then_some(entry.slot as usize)
    }

    /// Points `oid` at `slot`, returning the slot it pointed at before.
    /// A slot number past `u32::MAX - 1` is not indexed (see [`Entry`]).
    pub(crate) fn insert(&mut self, oid: u64, slot: usize) -> Option<usize> {
        let slot = u32::try_from(slot).ok().filter(|&slot| slot != VACANT)?;
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        let at = self.find(oid)?;
        let entry = self.entries.get_mut(at)?;
        if entry.is_vacant() {
            *entry = Entry { oid, slot };
            self.len += 1;
            None
        } else {
            let old = entry.slot;
            entry.slot = slot;
            Some(old as usize)
        }
    }

    /// Makes room for `more` oids without growing on the way (a book being
    /// rebuilt whole).
    pub(crate) fn reserve(&mut self, more: usize) {
        while (self.len + more) * 4 > self.entries.len() * 3 {
            self.grow();
        }
    }

    /// Drops `oid`, returning its slot.
    pub(crate) fn remove(&mut self, oid: u64) -> Option<usize> {
        let mut hole = self.find(oid)?;
        let removed = *self.entries.get(hole)?;
        if removed.is_vacant() {
            return None;
        }
        // Close the gap: each later entry of the run whose home is not
        // between the hole and itself (cyclically) moves back into the hole.
        let mask = self.mask();
        let mut next = hole;
        loop {
            next = (next + 1) & mask;
            let entry = *self.entries.get(next)?;
            if entry.is_vacant() {
                break;
            }
            let home = self.home(entry.oid);
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.entries[hole] = entry;
                hole = next;
            }
        }
        self.entries[hole] = Entry::EMPTY;
        self.len -= 1;
        Some(removed.slot as usize)
    }

    /// Asks the CPU to start loading the line `oid`'s probe starts at; no
    /// effect on the table's contents.
    pub(crate) fn prefetch(&self, oid: u64) {
        if !self.entries.is_empty()
            && let Some(entry) = self.entries.get(self.home(oid))
        {
            prefetch(entry);
        }
    }

    /// Doubles the table (or makes the first one) and re-homes every entry.
    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(FIRST_CAPACITY);
        let old = std::mem::replace(
            &mut self.entries,
            vec![Entry::EMPTY; capacity].into_boxed_slice(),
        );
        let mask = self.mask();
        for entry in old.iter().filter(|entry| !entry.is_vacant()) {
            let mut at = self.home(entry.oid);
            while !self.entries[at].is_vacant() {
                at = (at + 1) & mask;
            }
            self.entries[at] = *entry;
        }
    }
}

/// Asks the CPU to start loading the cache line holding the start of
/// `value` into its nearest cache. A hint only: nothing is read, and no
/// fault can follow.
#[inline]
pub(crate) fn prefetch<T>(value: &T) {
    prefetch_at(std::ptr::from_ref(value).cast::<u8>());
}

/// [`prefetch`] of every cache line `value` spans.
#[inline]
pub(crate) fn prefetch_all<T>(value: &T) {
    let start = std::ptr::from_ref(value).cast::<u8>();
    for offset in (0..size_of::<T>()).step_by(64) {
        prefetch_at(start.wrapping_add(offset));
    }
}

#[inline]
fn prefetch_at(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        #[allow(unsafe_code)]
        // SAFETY: a prefetch is a hint that never faults and changes no
        // memory, whatever the address (callers pass addresses inside a live
        // reference anyway).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>());
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, usize),
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct oids, so inserts replace and removes hit; runs of
        // consecutive oids like the node's, and colliding homes.
        let oid = prop_oneof![0u64..64, 1_000_000u64..1_000_040, any::<u64>()];
        prop_oneof![
            (oid.clone(), 0usize..10_000).prop_map(|(oid, slot)| Op::Insert(oid, slot)),
            oid.prop_map(Op::Remove),
        ]
    }

    proptest! {
        #[test]
        fn agrees_with_a_hash_map(ops in proptest::collection::vec(op(), 0..600)) {
            let mut index = OidIndex::default();
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(oid, slot) => {
                        prop_assert_eq!(index.insert(oid, slot), model.insert(oid, slot));
                    }
                    Op::Remove(oid) => {
                        prop_assert_eq!(index.remove(oid), model.remove(&oid));
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for (&oid, &slot) in &model {
                prop_assert_eq!(index.get(oid), Some(slot));
                index.prefetch(oid);
            }
        }
    }

    #[test]
    fn a_run_that_wraps_the_table_end_closes_after_a_remove() {
        let mut index = OidIndex::default();
        index.insert(0, 0);
        // Oids whose home is the last entry, so their run wraps to the start.
        let last = index.entries.len() - 1;
        let wrapping: Vec<u64> = (1..)
            .filter(|&oid| index.home(oid) == last)
            .take(4)
            .collect();
        for (slot, &oid) in wrapping.iter().enumerate() {
            index.insert(oid, slot + 1);
        }
        assert_eq!(index.remove(wrapping[0]), Some(1));
        for (slot, &oid) in wrapping.iter().enumerate().skip(1) {
            assert_eq!(index.get(oid), Some(slot + 1), "oid {oid}");
        }
        assert_eq!(index.get(0), Some(0));
        assert_eq!(index.get(wrapping[0]), None);
        assert_eq!(index.len(), 4);
    }

    #[test]
    fn grows_past_three_quarters_and_keeps_every_entry() {
        let mut index = OidIndex::default();
        for oid in 0..1000u64 {
            assert_eq!(index.insert(oid, usize::try_from(oid).unwrap()), None);
            assert!(index.len() * 4 <= index.entries.len() * 3);
        }
        assert!((0..1000u64).all(|oid| index.get(oid) == usize::try_from(oid).ok()));
        assert_eq!(index.get(1000), None);
    }
}
