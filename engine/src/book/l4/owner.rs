//! An order's owner: one copy of each address, shared by every order of
//! that owner.
//!
//! A mainnet book rests ~440,000 orders from a few thousand accounts (the
//! market makers rest most of them). Kept inline, the owner's address was
//! 48 of a resting order's bytes — ~21 MB of a full book, nearly all of it
//! repeats. An [`Owner`] is one pointer to a shared copy instead: 8 bytes
//! an order, and one copy (~90 bytes with its table entry) per account that
//! rests orders.
//!
//! # The table
//!
//! Each thread that rests orders (the engine's, a snapshot or checkpoint
//! loader) looks owners up in a table of its own, so resting an order
//! takes no lock. Two threads may therefore hold two copies of one
//! address; owners compare by their text, so where a copy came from is
//! invisible. A table drops the copies no order holds any more when it has
//! doubled since it last did: its size follows the accounts with resting
//! orders, not every account ever seen, at a cost spread over the inserts
//! that doubled it.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use crate::text::Address;

/// An order's owner address, as written by the node: a shared copy.
///
/// Compares, hashes, orders and prints exactly like the `str` it holds.
#[derive(Clone)]
pub struct Owner(Arc<Address>);

/// Owners a table holds before it first drops the unused ones.
const FIRST_SWEEP: usize = 4_096;

#[derive(Default)]
struct Table {
    owners: HashSet<Owner, foldhash::fast::RandomState>,
    /// The size at which the next insert first drops the owners no order
    /// holds.
    sweep_at: usize,
}

thread_local! {
    static OWNERS: RefCell<Table> = RefCell::default();
}

impl Owner {
    /// The shared copy of `user` (made if this thread holds none).
    pub fn new(user: &str) -> Self {
        OWNERS.with_borrow_mut(|table| table.owner(user))
    }

    /// A copy of its own of `user`, not from (nor added to) the table: to
    /// look up owners of a map without adding every account looked up.
    pub(crate) fn unshared(user: &str) -> Self {
        Owner(Arc::new(Address::new(user)))
    }

    /// The address.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Table {
    fn owner(&mut self, user: &str) -> Owner {
        if let Some(owner) = self.owners.get(user) {
            return owner.clone();
        }
        if self.owners.len() >= self.sweep_at {
            // An owner whose only holder is this table cannot be held
            // again but through it: dropping it loses nothing.
            self.owners.retain(|owner| Arc::strong_count(&owner.0) > 1);
            self.sweep_at = (2 * self.owners.len()).max(FIRST_SWEEP);
        }
        let owner = Owner(Arc::new(Address::new(user)));
        self.owners.insert(owner.clone());
        owner
    }
}

impl Deref for Owner {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Owner {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Owner {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Owner {
    fn from(user: &str) -> Self {
        Self::new(user)
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.as_str() == other.as_str()
    }
}

impl Eq for Owner {}

impl PartialEq<str> for Owner {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Owner {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Owner {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Owner {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Owner {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(n: usize) -> String {
        format!("0x{n:040x}")
    }

    fn held() -> usize {
        OWNERS.with_borrow(|table| table.owners.len())
    }

    #[test]
    fn one_copy_per_address_and_it_reads_as_the_address() {
        let user = address(7);
        let (a, b) = (Owner::new(&user), Owner::new(&user));
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, user.as_str());
        assert_eq!(a.to_string(), user);
        assert_eq!(format!("{a:?}"), format!("{user:?}"));
        assert_eq!(std::mem::size_of::<Owner>(), 8);
    }

    #[test]
    fn copies_from_two_threads_are_equal() {
        let user = address(9);
        let here = Owner::new(&user);
        let there = std::thread::spawn({
            let user = user.clone();
            move || Owner::new(&user)
        })
        .join()
        .unwrap();
        assert!(!Arc::ptr_eq(&here.0, &there.0));
        assert_eq!(here, there);
        assert_eq!(here.cmp(&there), Ordering::Equal);
        let set: HashSet<Owner> = [here].into_iter().collect();
        assert!(set.contains(&there));
        assert!(set.contains(user.as_str()));
    }

    #[test]
    fn the_table_lets_go_of_owners_no_order_holds() {
        // A fresh thread: a table of its own.
        std::thread::spawn(|| {
            let kept: Vec<Owner> = (0..100).map(|n| Owner::new(&address(n))).collect();
            for n in 100..10 * FIRST_SWEEP {
                drop(Owner::new(&address(n)));
            }
            // Sweeps ran on the way: what is left is the kept owners and
            // at most what came since the last sweep.
            assert!(held() <= 2 * FIRST_SWEEP, "{}", held());
            // The kept ones survived every sweep, still shared.
            for (n, owner) in kept.iter().enumerate() {
                assert!(Arc::ptr_eq(&owner.0, &Owner::new(&address(n)).0));
            }
        })
        .join()
        .unwrap();
    }
}
