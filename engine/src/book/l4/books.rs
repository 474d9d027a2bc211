//! Every coin's book.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::book::{L4Book, UserOrders, WatchedSet, level_key};
use crate::book::oids::prefetch;
use crate::event::Side;
use crate::num::Px;
use crate::text::Short;

/// Every coin's L4 book, by coin name: kept sorted by coin (iteration is
/// deterministic) with a hash index beside it, since every raw diff looks its
/// coin's book up by name.
#[derive(Debug, Clone, Default)]
pub struct Books {
    coins: Vec<(Short, L4Book)>,
    index: HashMap<Short, usize, foldhash::fast::RandomState>,
    /// Per coin (same order), a stamp its user keeps: the fold writes its
    /// block count there to note each touched coin once per block.
    stamps: Vec<u64>,
    /// The users whose orders every book keeps ([`Books::orders_of`],
    /// [`Books::hold_user`]), lowercase.
    pub(super) watched: HashMap<String, WatchedUser, foldhash::fast::RandomState>,
    /// Counts the questions, for `watched`.
    asked: u64,
    /// `watched` as every book reads it (see [`WatchedSet`]).
    set: Arc<WatchedSet>,
}

/// A user whose orders the books keep.
#[derive(Debug, Clone, Default)]
pub(super) struct WatchedUser {
    /// When the user was last asked about (the count of questions then).
    asked: u64,
    /// Holders ([`Books::hold_user`]): a held user is never let go.
    holders: u32,
    /// Changes to the user's orders in any book (see
    /// [`Books::changes_of`]).
    changes: Arc<AtomicU64>,
}

/// Users whose orders the books keep at most, past the held ones: past it
/// the one asked about longest ago and not held is let go (and walked for
/// again if asked about again).
pub const MAX_WATCHED_USERS: usize = 1_024;

/// Users held at once at most ([`Books::hold_user`]): each hold of a new
/// user walks every order of every book, and each held user costs an entry
/// per book it rests orders in.
pub const MAX_HELD_USERS: usize = 4_096;

impl PartialEq for Books {
    fn eq(&self, other: &Self) -> bool {
        self.coins == other.coins
    }
}

impl Books {
    /// No books.
    pub fn new() -> Self {
        Self::default()
    }

    /// The book of `coin`, if any order ever rested there.
    pub fn get(&self, coin: &str) -> Option<&L4Book> {
        let at = *self.index.get(coin)?;
        self.coins.get(at).map(|(_, book)| book)
    }

    /// The book of `coin`, created empty when absent.
    pub fn get_or_create(&mut self, coin: &str) -> &mut L4Book {
        self.get_or_create_stamped(coin, None).0
    }

    /// The book of `coin` for mutation, if present.
    pub fn get_mut(&mut self, coin: &str) -> Option<&mut L4Book> {
        self.get_mut_stamped(coin, None).map(|(book, _)| book)
    }

    /// Where `coin`'s book sits among the books, as a hint for the calls
    /// below: it stays right until a coin is added, and they check it.
    pub(crate) fn position(&self, coin: &str) -> Option<usize> {
        self.index.get(coin).copied()
    }

    /// The position of `coin`: `hint` when it is right (a name compare,
    /// cheaper than hashing the name), else looked up.
    fn locate(&self, coin: &str, hint: Option<usize>) -> Option<usize> {
        match hint.and_then(|at| self.coins.get(at)) {
            Some((held, _)) if held.as_str() == coin => hint,
            _ => self.index.get(coin).copied(),
        }
    }

    /// [`Books::get_or_create`], with the coin's stamp (0 for a new coin);
    /// `hint` as for [`Books::position`].
    pub(crate) fn get_or_create_stamped(
        &mut self,
        coin: &str,
        hint: Option<usize>,
    ) -> (&mut L4Book, &mut u64) {
        let at = match self.locate(coin, hint) {
            Some(at) => at,
            None => self.add(coin, L4Book::new()),
        };
        (&mut self.coins[at].1, &mut self.stamps[at])
    }

    /// [`Books::get_mut`], with the coin's stamp; `hint` as for
    /// [`Books::position`].
    pub(crate) fn get_mut_stamped(
        &mut self,
        coin: &str,
        hint: Option<usize>,
    ) -> Option<(&mut L4Book, &mut u64)> {
        let at = self.locate(coin, hint)?;
        let book = self.coins.get_mut(at).map(|(_, book)| book)?;
        Some((book, self.stamps.get_mut(at)?))
    }

    /// Asks for the line of the oid index where `oid`'s probe starts, in
    /// the book at `position` (a hint: a stale position only fetches the
    /// wrong line).
    pub(crate) fn prefetch_index(&self, position: Option<usize>, oid: u64) {
        if let Some((_, book)) = position.and_then(|at| self.coins.get(at)) {
            book.index.prefetch(oid);
        }
    }

    /// Asks for the memory that changing or removing `oid` reads in the
    /// book at `position`: its links and the lines of its order holding
    /// side, price and size (a hint: reads the index, changes nothing).
    pub(crate) fn prefetch_order(&self, position: Option<usize>, oid: u64) {
        if let Some((_, book)) = position.and_then(|at| self.coins.get(at))
            && let Some(at) = book.index.get(oid)
        {
            book.slots.prefetch(at);
        }
    }

    /// Asks for the rest of what changing or removing `oid` touches in the
    /// book at `position`: its level, and its neighbours' links (an unlink
    /// rewrites them). Reads the index and the order's link, so it pays
    /// once [`Books::prefetch_order`] has brought those in.
    pub(crate) fn prefetch_neighbours(&self, position: Option<usize>, oid: u64) {
        if let Some((_, book)) = position.and_then(|at| self.coins.get(at))
            && let Some(at) = book.index.get(oid)
            && let Some(link) = book.slots.link(at)
        {
            if let Some(level) = book.levels.get(link.level) {
                prefetch(level);
            }
            for neighbour in [link.prev(), link.next()] {
                if let Some(link) = book.slots.link_ref(neighbour) {
                    prefetch(link);
                }
            }
        }
    }

    /// Asks for the line of the price index where the level of `px` on
    /// `side` is looked up, in the book at `position` (a hint, like
    /// [`Books::prefetch_index`]).
    pub(crate) fn prefetch_price(&self, position: Option<usize>, side: Side, px: Px) {
        if let Some((_, book)) = position.and_then(|at| self.coins.get(at))
            && let Some(key) = level_key(side, px)
        {
            book.at_price.prefetch(key);
        }
    }

    /// Asks for what resting an order at `px` on `side` rewrites in the
    /// book at `position`, when the price has a level: the level and the
    /// link of its last order. Reads the price index, so it pays once
    /// [`Books::prefetch_price`] has brought that in.
    pub(crate) fn prefetch_level(&self, position: Option<usize>, side: Side, px: Px) {
        if let Some((_, book)) = position.and_then(|at| self.coins.get(at))
            && let Some(key) = level_key(side, px)
            && let Some(level) = book.at_price.get(key)
            && let Some(level) = u32::try_from(level).ok().and_then(|at| book.levels.get(at))
        {
            prefetch(level);
            if let Some(link) = book.slots.link_ref(level.tail()) {
                prefetch(link);
            }
        }
    }

    /// Positions and names of the coins whose stamp is `stamp`, sorted.
    pub(crate) fn stamped(&self, stamp: u64) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.coins
            .iter()
            .zip(&self.stamps)
            .enumerate()
            .filter(move |(_, (_, held))| **held == stamp)
            .map(|(at, ((coin, _), _))| (at, coin.as_str()))
    }

    /// The coin and book at `position` (see [`Books::position`]).
    pub(crate) fn at(&self, position: usize) -> Option<(&str, &L4Book)> {
        self.coins
            .get(position)
            .map(|(coin, book)| (coin.as_str(), book))
    }

    /// Replaces (or inserts) the book of `coin`.
    pub fn replace(&mut self, coin: &str, mut book: L4Book) {
        for watched in self.watched.values() {
            // The orders the old book held may be gone: a change either way.
            watched.changes.fetch_add(1, Ordering::Relaxed);
        }
        book.watch_all(&self.set);
        match self.get_mut(coin) {
            Some(held) => *held = book,
            None => {
                self.add(coin, book);
            }
        }
    }

    /// Every order `user` has resting, by coin (sorted; coins where the
    /// user rests nothing are left out). The first question about a user
    /// walks every book once; from then on the books keep that user's
    /// orders as they change, so the next costs a look per book, not per
    /// order: each book's orders are handed out shared ([`UserOrders`]). At
    /// most [`MAX_WATCHED_USERS`] users are kept besides the held ones.
    pub fn orders_of(&mut self, user: &str) -> Vec<(Short, UserOrders)> {
        let user = user.to_ascii_lowercase();
        self.watch(&user);
        self.watched_orders_of(&user)
    }

    /// Keeps the orders of `user` until [`Books::release_user`] (a live
    /// subscription reads them every block): the first hold of a user not
    /// yet watched walks every book once. False, holding nothing, when
    /// [`MAX_HELD_USERS`] other users are held.
    pub fn hold_user(&mut self, user: &str) -> bool {
        let user = user.to_ascii_lowercase();
        let held = self.watched.values().filter(|w| w.holders > 0).count();
        let holds = self.watched.get(&user).is_some_and(|w| w.holders > 0);
        if !holds && held >= MAX_HELD_USERS {
            return false;
        }
        self.watch(&user).holders += 1;
        true
    }

    /// Takes back one [`Books::hold_user`] of `user`: with none left the
    /// user may be let go like any other asked about.
    pub fn release_user(&mut self, user: &str) {
        if let Some(watched) = self.watched.get_mut(&user.to_ascii_lowercase()) {
            watched.holders = watched.holders.saturating_sub(1);
        }
    }

    /// The orders of a watched `user` (lowercase), as [`Books::orders_of`]
    /// hands them out but without watching (empty for a user not watched).
    pub fn watched_orders_of(&self, user: &str) -> Vec<(Short, UserOrders)> {
        if !self.watched.contains_key(user) {
            return Vec::new();
        }
        self.coins
            .iter()
            .filter_map(|(coin, book)| {
                let orders = book.watched_orders(user)?;
                (!orders.is_empty()).then(|| (coin.clone(), orders.clone()))
            })
            .collect()
    }

    /// How many times the orders of watched `user` (lowercase) have
    /// changed, in any book, since it was first watched (`None` for a user
    /// not watched): equal counts, the same orders. A reader compares it
    /// each block instead of walking the books.
    pub fn changes_of(&self, user: &str) -> Option<u64> {
        let watched = self.watched.get(user)?;
        Some(watched.changes.load(Ordering::Relaxed))
    }

    /// `user` (lowercase) watched and asked about now; the unheld user
    /// asked about longest ago let go if that makes too many.
    fn watch(&mut self, user: &str) -> &mut WatchedUser {
        self.asked += 1;
        if !self.watched.contains_key(user) {
            let unheld = self.watched.values().filter(|w| w.holders == 0).count();
            if unheld >= MAX_WATCHED_USERS
                && let Some(oldest) = self
                    .watched
                    .iter()
                    .filter(|(_, watched)| watched.holders == 0)
                    .min_by_key(|(_, watched)| watched.asked)
                    .map(|(user, _)| user.clone())
            {
                self.watched.remove(&oldest);
                self.set = Arc::new(self.set.without(&oldest));
            }
            let watched = WatchedUser::default();
            self.set = Arc::new(self.set.with(user, &watched.changes));
            self.watched.insert(user.to_owned(), watched);
            for (_, book) in &mut self.coins {
                book.set_watched(&self.set, Some(user));
            }
        }
        let asked = self.asked;
        let watched = self.watched.entry(user.to_owned()).or_default();
        watched.asked = asked;
        watched
    }

    /// Coins and their books, sorted by coin.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &L4Book)> + '_ {
        self.coins.iter().map(|(coin, book)| (coin.as_str(), book))
    }

    /// Number of coins with a book.
    pub fn len(&self) -> usize {
        self.coins.len()
    }

    /// Whether there is no book.
    pub fn is_empty(&self) -> bool {
        self.coins.is_empty()
    }

    /// Total resting orders over all coins.
    pub fn order_count(&self) -> usize {
        self.coins.iter().map(|(_, book)| book.len()).sum()
    }

    /// Adds a coin not yet present at its sorted place; returns its index.
    /// New coins are rare (a listing), so re-indexing the ones after it is
    /// cheap enough.
    fn add(&mut self, coin: &str, mut book: L4Book) -> usize {
        book.watch_all(&self.set);
        let at = self.coins.partition_point(|(held, _)| held.as_str() < coin);
        self.coins.insert(at, (Short::new(coin), book));
        self.stamps.insert(at, 0);
        for (i, (held, _)) in self.coins.iter().enumerate().skip(at) {
            self.index.insert(held.clone(), i);
        }
        at
    }
}
