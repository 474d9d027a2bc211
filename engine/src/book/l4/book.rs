//! One coin's book: its levels in book order, the price index, the best
//! levels kept beside the maps, and the orders of watched users.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::level::Level;
use super::levels::Levels;
use super::order::RestingOrder;
use super::slots::Slots;
use crate::book::oids::OidIndex;
use crate::event::Side;
use crate::num::{Px, Sz};

/// One coin's L4 book.
///
/// Orders live in a slot table (`Slots`: freed slots are reused, and it
/// grows without moving what it holds), each level is a doubly linked list
/// through it, and an oid index (`oids`, which can prefetch) points at the
/// slots: an order rests, changes size or leaves without moving any other
/// order. Levels are kept in book order in an ordered map per side, which
/// holds their numbers (see `Levels`); an order resting at a price that
/// has a level finds it through a price index instead (one probe, which
/// the fold can prefetch, rather than a walk down the ordered map). The
/// best level of each side is kept beside the maps, so reading the top of
/// a book walks no map: a block touches hundreds of books, and their maps'
/// first leaves are rarely in cache.
#[derive(Debug, Clone, Default)]
pub struct L4Book {
    bids: BTreeMap<Reverse<Px>, u32>,
    asks: BTreeMap<Px, u32>,
    /// The first level of `bids` and of `asks`, by number.
    best_bid: Option<u32>,
    best_ask: Option<u32>,
    pub(super) levels: Levels,
    pub(super) slots: Slots,
    /// Order id → slot.
    pub(super) index: OidIndex,
    /// [`level_key`] → level number, for every level whose price has a key.
    pub(super) at_price: OidIndex,
    /// The orders of the users someone asked about ([`Books::orders_of`])
    /// that rest here, kept as the book changes; `None` (one branch per
    /// change) while nobody watches.
    watch: Option<Box<Watch>>,
}

/// One user's resting orders in one book, by oid: a persistent map, so a
/// reader takes the whole of it at once (a pointer copy, however many
/// orders a market maker rests) and reads it on its own thread, while the
/// fold's next changes copy only the few nodes they touch.
pub type UserOrders = imbl::HashMap<u64, Arc<RestingOrder>>;

/// The users whose orders the books keep, one set shared by every book
/// and replaced when a user is added or let go (a copy, small beside the
/// walk of every order that adding a user costs; a plain hash map, since
/// every order change of a user the bloom lets through looks here): a book
/// keeps entries
/// only for the users with orders in it, and looks here when one of the
/// others rests a first order in it. So a watched user costs one entry in
/// this set and one per book they rest orders in, not one per book.
#[derive(Debug, Clone, Default)]
pub(super) struct WatchedSet {
    /// One bit per watched user, by the last byte of the address: most
    /// orders are told apart by it at once.
    bloom: u64,
    /// Watched user (lowercase) → the count of changes to their orders
    /// that every book of theirs adds to (see
    /// [`Books::changes_of`](super::Books::changes_of)): one relaxed add per
    /// change of a watched user's order, which only its owner thread makes.
    users: HashMap<String, Arc<AtomicU64>, foldhash::fast::RandomState>,
}

impl WatchedSet {
    /// This set with `user` (lowercase) and its change count.
    #[must_use]
    pub(super) fn with(&self, user: &str, changes: &Arc<AtomicU64>) -> Self {
        let mut set = self.clone();
        set.bloom |= Self::bit(user);
        set.users.insert(user.to_owned(), Arc::clone(changes));
        set
    }

    /// This set without `user` (lowercase).
    #[must_use]
    pub(super) fn without(&self, user: &str) -> Self {
        let mut set = self.clone();
        set.users.remove(user);
        set.bloom = set
            .users
            .keys()
            .fold(0, |bloom, user| bloom | Self::bit(user));
        set
    }

    fn bit(user: &str) -> u64 {
        let last = user.as_bytes().last().map_or(0, u8::to_ascii_lowercase);
        1 << (last & 63)
    }

    fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// `user` (any case) when it may be watched: lowercase, and whether
    /// the bloom lets it through.
    fn key<'u>(&self, user: &'u str) -> Option<Cow<'u, str>> {
        if self.bloom & Self::bit(user) == 0 {
            return None;
        }
        Some(if user.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(user.to_ascii_lowercase())
        } else {
            Cow::Borrowed(user)
        })
    }
}

/// The orders resting in one book of each watched user who has some here.
#[derive(Debug, Clone)]
struct Watch {
    set: Arc<WatchedSet>,
    /// Watched user (lowercase) → their orders in the book, never empty.
    users: HashMap<String, Watched, foldhash::fast::RandomState>,
}

/// One watched user's orders in one book, and their count of changes.
#[derive(Debug, Clone)]
struct Watched {
    orders: UserOrders,
    changes: Arc<AtomicU64>,
}

impl Watch {
    fn new(set: &Arc<WatchedSet>) -> Self {
        Self {
            set: Arc::clone(set),
            users: HashMap::default(),
        }
    }

    /// `order` rests (or changed): kept when its user is watched. The
    /// book's own entries are looked at first (a watched user's changes are
    /// mostly to orders resting here already), the set only for a first
    /// order here or a user the bloom could not tell apart.
    fn rests(&mut self, order: &RestingOrder) {
        let Some(user) = self.set.key(&order.user) else {
            return;
        };
        if let Some(watched) = self.users.get_mut(user.as_ref()) {
            watched.changes.fetch_add(1, Ordering::Relaxed);
            watched.orders.insert(order.oid, Arc::new(order.clone()));
            return;
        }
        let Some(changes) = self.set.users.get(user.as_ref()) else {
            return;
        };
        // A first order of a watched user in this book.
        changes.fetch_add(1, Ordering::Relaxed);
        let changes = Arc::clone(changes);
        let orders = UserOrders::unit(order.oid, Arc::new(order.clone()));
        self.users
            .insert(user.into_owned(), Watched { orders, changes });
    }

    fn removed(&mut self, user: &str, oid: u64) {
        let Some(user) = self.set.key(user) else {
            return;
        };
        let Some(watched) = self.users.get_mut(user.as_ref()) else {
            return;
        };
        watched.changes.fetch_add(1, Ordering::Relaxed);
        watched.orders.remove(&oid);
        if watched.orders.is_empty() {
            self.users.remove(user.as_ref());
        }
    }
}

/// A level's key in the price index: its side and its price (trailing
/// zeros dropped, so equal prices written differently share it) packed into
/// 64 bits; `None` for a price that does not pack (negative, or 2^57 units
/// or more), whose level is then found in the ordered map alone.
pub(super) fn level_key(side: Side, px: Px) -> Option<u64> {
    let (mut units, mut scale) = (px.units(), px.scale());
    while scale > 0 && units % 10 == 0 {
        units /= 10;
        scale -= 1;
    }
    let units = u64::try_from(units).ok().filter(|&units| units < 1 << 57)?;
    let side = match side {
        Side::Bid => 0,
        Side::Ask => 1,
    };
    // Scale ≤ 18 takes 6 bits, the side one.
    Some(units << 7 | u64::from(scale) << 1 | side)
}

impl PartialEq for L4Book {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.bids().eq(other.bids()) && self.asks().eq(other.asks())
    }
}

impl L4Book {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rests `order` at the back of its level, first removing any order with
    /// the same oid (which is returned).
    pub fn insert(&mut self, order: RestingOrder) -> Option<RestingOrder> {
        let (oid, side, px, sz) = (order.oid, order.side, order.limit_px, order.sz);
        let user = self.watch.as_deref_mut().map(|watch| {
            watch.rests(&order);
            order.user.clone()
        });
        let at = self.slots.put(order);
        // One probe of the index whether or not the oid already rests.
        let replaced = self.index.insert(oid, at).and_then(|old| {
            self.unlink_slot(old);
            self.slots.free(old);
            self.slots.order(old).cloned()
        });
        let level = self.level_at(side, px);
        if let Some(data) = self.levels.get_mut(level) {
            data.push_back(&mut self.slots, at, level, sz);
        }
        if let (Some(watch), Some(old), Some(user)) = (self.watch.as_deref_mut(), &replaced, &user)
            && !old.user.as_str().eq_ignore_ascii_case(user.as_str())
        {
            // The oid rested for another user before: no longer theirs.
            watch.removed(&old.user, oid);
        }
        replaced
    }

    /// The number of the level at `px` on `side`, opened if there is none.
    fn level_at(&mut self, side: Side, px: Px) -> u32 {
        let key = level_key(side, px);
        if let Some(level) = key.and_then(|key| self.at_price.get(key)) {
            // Level numbers are `u32`s (see `Levels`).
            #[allow(clippy::cast_possible_truncation)]
            return level as u32;
        }
        let levels = &mut self.levels;
        let mut opened = false;
        let open = || {
            opened = true;
            levels.add(side, px)
        };
        let level = match side {
            Side::Bid => *self.bids.entry(Reverse(px)).or_insert_with(open),
            Side::Ask => *self.asks.entry(px).or_insert_with(open),
        };
        if opened {
            self.note_opened(side, px, level);
        }
        if let Some(key) = key {
            self.at_price.insert(key, level as usize);
        }
        level
    }

    /// Sets the resting size of `oid`, keeping its time priority.
    pub fn set_sz(&mut self, oid: u64, sz: Sz) -> Option<&RestingOrder> {
        let at = self.index.get(oid)?;
        let level = self.levels.get_mut(self.slots.link(at)?.level)?;
        let order = self.slots.order_mut(at)?;
        let old = std::mem::replace(&mut order.sz, sz);
        level.adjust(Some(sz), Some(old));
        if let Some(watch) = self.watch.as_deref_mut() {
            watch.rests(order);
        }
        Some(order)
    }

    /// Gives the resting order with `order`'s oid the details of `order`
    /// (time, type, tif, cloid, …), keeping its size and its place in the
    /// queue: for an order rested from its diff alone whose opening status
    /// was read after. Should the two disagree on the side or the price (no
    /// node writes that), the order moves to `order`'s level, at its back.
    /// False when no order with that oid rests.
    pub(crate) fn complete(&mut self, mut order: RestingOrder) -> bool {
        let Some(at) = self.index.get(order.oid) else {
            return false;
        };
        let Some(held) = self.slots.order_mut(at) else {
            return false;
        };
        order.sz = held.sz;
        if held.side == order.side && held.limit_px == order.limit_px && held.user == order.user {
            *held = order;
            if let Some(watch) = self.watch.as_deref_mut() {
                watch.rests(held);
            }
        } else {
            self.insert(order);
        }
        true
    }

    /// Removes `oid`, returning a copy of it.
    pub fn remove(&mut self, oid: u64) -> Option<RestingOrder> {
        let at = self.detach(oid)?;
        self.slots.order(at).cloned()
    }

    /// Removes `oid` without copying it out: its slot is freed and the order
    /// left there until the slot is reused; false when the book does not
    /// hold it.
    pub fn discard(&mut self, oid: u64) -> bool {
        self.detach(oid).is_some()
    }

    /// Unlinks `oid` from its level and the index and frees its slot (the
    /// order stays readable there until the next insert).
    fn detach(&mut self, oid: u64) -> Option<usize> {
        let at = self.index.remove(oid)?;
        // Nothing read while nobody watches.
        if let Some(watch) = self.watch.as_deref_mut()
            && let Some(order) = self.slots.order(at)
        {
            watch.removed(&order.user, oid);
        }
        self.unlink_slot(at);
        self.slots.free(at);
        Some(at)
    }

    /// Unlinks the order in slot `at` from its level (the order stays in
    /// its slot), dropping the level when it empties.
    fn unlink_slot(&mut self, at: usize) {
        let (Some(link), Some(order)) = (self.slots.link(at), self.slots.order(at)) else {
            return;
        };
        let sz = order.sz;
        let Some(level) = self.levels.get_mut(link.level) else {
            return;
        };
        level.unlink(&mut self.slots, link.prev(), link.next(), sz);
        if level.len == 0 {
            // The map's path to the level was just walked: finding the next
            // best there is cheap.
            match level.side {
                Side::Bid => {
                    self.bids.remove(&Reverse(level.px()));
                    if self.best_bid == Some(link.level) {
                        self.best_bid = self.bids.values().next().copied();
                    }
                }
                Side::Ask => {
                    self.asks.remove(&level.px());
                    if self.best_ask == Some(link.level) {
                        self.best_ask = self.asks.values().next().copied();
                    }
                }
            }
            if let Some(key) = level_key(level.side, level.px()) {
                self.at_price.remove(key);
            }
            self.levels.release(link.level);
        }
    }

    /// Takes a level just opened at `px` on `side`, number `level`, as the
    /// side's best when it betters it.
    fn note_opened(&mut self, side: Side, px: Px, level: u32) {
        let levels = &self.levels;
        let best = match side {
            Side::Bid => &mut self.best_bid,
            Side::Ask => &mut self.best_ask,
        };
        let better = best
            .and_then(|at| levels.get(at))
            .is_none_or(|held| match side {
                Side::Bid => px > held.px(),
                Side::Ask => px < held.px(),
            });
        if better {
            *best = Some(level);
        }
    }

    /// The order with id `oid`.
    pub fn get(&self, oid: u64) -> Option<&RestingOrder> {
        let at = self.index.get(oid)?;
        self.slots.order(at)
    }

    /// Bid levels, best (highest) first.
    pub fn bids(&self) -> impl DoubleEndedIterator<Item = Level<'_>> + '_ {
        self.bids.values().filter_map(|&at| self.level(at))
    }

    /// Ask levels, best (lowest) first.
    pub fn asks(&self) -> impl DoubleEndedIterator<Item = Level<'_>> + '_ {
        self.asks.values().filter_map(|&at| self.level(at))
    }

    /// Levels of one side, best first.
    pub fn side(&self, side: Side) -> Box<dyn Iterator<Item = Level<'_>> + '_> {
        match side {
            Side::Bid => Box::new(self.bids()),
            Side::Ask => Box::new(self.asks()),
        }
    }

    /// Best bid level.
    pub fn best_bid(&self) -> Option<Level<'_>> {
        self.level(self.best_bid?)
    }

    /// Best ask level.
    pub fn best_ask(&self) -> Option<Level<'_>> {
        self.level(self.best_ask?)
    }

    /// Number of resting orders.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no order rests.
    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// Every order: bids best first, then asks best first, time priority
    /// inside each level.
    pub fn orders(&self) -> impl Iterator<Item = &RestingOrder> + '_ {
        self.bids().chain(self.asks()).flat_map(Level::orders)
    }

    /// Rebuilding a book level by level in book order (from a checkpoint):
    /// opens a level at `px` on `side`, which must be worse than every
    /// level of that side so far; its number, or `None` when it is not
    /// (the levels were not in book order, or the price repeats).
    pub(crate) fn append_level(&mut self, side: Side, px: Px) -> Option<u32> {
        let worse = match side {
            Side::Bid => self
                .bids
                .last_key_value()
                .is_none_or(|(last, _)| px < last.0),
            Side::Ask => self
                .asks
                .last_key_value()
                .is_none_or(|(last, _)| px > *last),
        };
        if !worse {
            return None;
        }
        let level = self.levels.add(side, px);
        match side {
            Side::Bid => self.bids.insert(Reverse(px), level),
            Side::Ask => self.asks.insert(px, level),
        };
        self.note_opened(side, px, level);
        if let Some(key) = level_key(side, px) {
            self.at_price.insert(key, level as usize);
        }
        Some(level)
    }

    /// Rebuilding: makes room for `orders` more orders up front.
    pub(crate) fn reserve(&mut self, orders: usize) {
        self.index.reserve(orders);
    }

    /// Rebuilding: rests `order` at the back of `level` (from
    /// [`L4Book::append_level`]); false, with nothing changed, when its
    /// side or price is not the level's or its oid already rests.
    pub(crate) fn append_order(&mut self, level: u32, order: RestingOrder) -> bool {
        let Some(data) = self.levels.get(level) else {
            return false;
        };
        if order.side != data.side
            || order.limit_px != data.px()
            || self.index.get(order.oid).is_some()
        {
            return false;
        }
        let (oid, sz) = (order.oid, order.sz);
        if let Some(watch) = self.watch.as_deref_mut() {
            watch.rests(&order);
        }
        let at = self.slots.put(order);
        self.index.insert(oid, at);
        if let Some(data) = self.levels.get_mut(level) {
            data.push_back(&mut self.slots, at, level, sz);
        }
        true
    }

    /// Keeps the orders of the users of `set` from now on, the set having
    /// changed by `added` (lowercase; one walk of the book's orders for it)
    /// and by users let go (their entries dropped).
    pub(super) fn set_watched(&mut self, set: &Arc<WatchedSet>, added: Option<&str>) {
        if set.is_empty() {
            self.watch = None;
            return;
        }
        let watch = self.watch.get_or_insert_with(|| Box::new(Watch::new(set)));
        watch.set = Arc::clone(set);
        watch.users.retain(|user, _| set.users.contains_key(user));
        let Some((user, changes)) = added.and_then(|user| set.users.get_key_value(user)) else {
            return;
        };
        let orders: UserOrders = self
            .orders()
            .filter(|order| order.user.as_str().eq_ignore_ascii_case(user))
            .map(|order| (order.oid, Arc::new(order.clone())))
            .collect();
        if orders.is_empty() {
            return;
        }
        changes.fetch_add(1, Ordering::Relaxed);
        let changes = Arc::clone(changes);
        if let Some(watch) = self.watch.as_deref_mut() {
            watch
                .users
                .insert(user.clone(), Watched { orders, changes });
        }
    }

    /// Keeps the orders of every user of `set` in this book, as it holds
    /// them now (one walk of its orders): a book new to the books, or one
    /// that replaces another.
    pub(super) fn watch_all(&mut self, set: &Arc<WatchedSet>) {
        if set.is_empty() {
            self.watch = None;
            return;
        }
        let mut watch = Watch::new(set);
        for order in self.orders() {
            watch.rests(order);
        }
        self.watch = Some(Box::new(watch));
    }

    /// The orders of watched `user` (lowercase) resting in this book, shared
    /// (see [`UserOrders`]).
    pub(super) fn watched_orders(&self, user: &str) -> Option<&UserOrders> {
        Some(&self.watch.as_deref()?.users.get(user)?.orders)
    }

    /// Rebuilding: sets a level's running total as it was kept (see
    /// [`Level::running_total`]); false for an unknown level.
    pub(crate) fn set_running_total(&mut self, level: u32, total: Option<Sz>) -> bool {
        match self.levels.get_mut(level) {
            Some(data) => {
                data.set_total(total);
                true
            }
            None => false,
        }
    }

    fn level(&self, at: u32) -> Option<Level<'_>> {
        Some(Level {
            data: self.levels.get(at)?,
            slots: &self.slots,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::books::{Books, MAX_HELD_USERS, MAX_WATCHED_USERS};
    use super::*;
    use crate::num::Decimal;

    fn px(text: &str) -> Px {
        Decimal::parse(text).unwrap()
    }

    fn oids(level: Level<'_>) -> Vec<u64> {
        level.orders().map(|o| o.oid).collect()
    }

    fn order(oid: u64, side: Side, price: &str, sz: &str) -> RestingOrder {
        RestingOrder::bare("0xabc", oid, side, px(price), px(sz), 0)
    }

    #[test]
    fn bids_descend_asks_ascend_and_time_priority_holds() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Bid, "100.0", "1"));
        book.insert(order(2, Side::Bid, "101.0", "1"));
        book.insert(order(3, Side::Bid, "100.0", "2"));
        book.insert(order(4, Side::Ask, "103.0", "1"));
        book.insert(order(5, Side::Ask, "102.0", "1"));
        let bids: Vec<_> = book.bids().map(|l| l.px().to_string()).collect();
        assert_eq!(bids, ["101.0", "100.0"]);
        let asks: Vec<_> = book.asks().map(|l| l.px().to_string()).collect();
        assert_eq!(asks, ["102.0", "103.0"]);
        let level = oids(book.bids().nth(1).unwrap());
        assert_eq!(level, [1, 3]);
        assert_eq!(
            book.bids().nth(1).unwrap().total_sz().unwrap().to_string(),
            "3.0"
        );
    }

    #[test]
    fn equal_prices_written_differently_share_one_level_key() {
        assert_eq!(
            level_key(Side::Bid, px("100")),
            level_key(Side::Bid, px("100.000"))
        );
        assert_ne!(
            level_key(Side::Bid, px("100")),
            level_key(Side::Ask, px("100"))
        );
        assert_ne!(
            level_key(Side::Bid, px("10.0")),
            level_key(Side::Bid, px("1.00"))
        );
        assert_ne!(
            level_key(Side::Ask, px("0.0001")),
            level_key(Side::Ask, px("0.001"))
        );
        assert_eq!(level_key(Side::Ask, px("-1.5")), None);
        let huge = Decimal::new(1 << 57, 0).unwrap();
        assert_eq!(level_key(Side::Ask, huge), None);
        let largest = Decimal::new((1 << 57) - 1, 0).unwrap();
        assert!(level_key(Side::Ask, largest).is_some());
    }

    #[test]
    fn levels_are_found_by_price_whatever_its_writing_or_its_key() {
        let mut book = L4Book::new();
        // One level whatever the writing of the price.
        book.insert(order(1, Side::Bid, "100", "1"));
        book.insert(order(2, Side::Bid, "100.00", "2"));
        // Prices the price index cannot hold still share their level.
        let huge = Decimal::new(1 << 60, 1).unwrap();
        let mut big = order(3, Side::Ask, "1", "1");
        big.limit_px = huge;
        book.insert(big.clone());
        big.oid = 4;
        book.insert(big);
        let levels: Vec<_> = book.bids().chain(book.asks()).map(oids).collect();
        assert_eq!(levels, [vec![1, 2], vec![3, 4]]);
        // An emptied level leaves the index: a new order at its price opens
        // a fresh level, behind nobody.
        assert!(book.discard(1) && book.discard(2));
        assert_eq!(book.bids().count(), 0);
        book.insert(order(5, Side::Bid, "100.0", "1"));
        assert_eq!(book.bids().map(oids).collect::<Vec<_>>(), [vec![5]]);
        assert!(book.discard(3) && book.discard(4));
        assert_eq!(book.asks().count(), 0);
        // A copy keeps its index.
        let mut copy = book.clone();
        copy.insert(order(6, Side::Bid, "100", "1"));
        assert_eq!(copy.bids().map(oids).collect::<Vec<_>>(), [vec![5, 6]]);
    }

    #[test]
    fn new_with_existing_oid_replaces_and_loses_priority() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Bid, "100.0", "1"));
        book.insert(order(2, Side::Bid, "100.0", "1"));
        let replaced = book.insert(order(1, Side::Bid, "100.0", "5"));
        assert_eq!(replaced.unwrap().sz.to_string(), "1");
        let level = oids(book.best_bid().unwrap());
        assert_eq!(level, [2, 1]);
        assert_eq!(book.len(), 2);
    }

    #[test]
    fn emptied_levels_are_dropped_and_their_numbers_reused() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Bid, "100.0", "1"));
        for oid in 2..2_000u64 {
            // A fresh price each time, emptied again by the next step.
            let px = format!("{}.5", 50 + oid % 7);
            book.insert(order(oid, Side::Ask, &px, "2"));
            book.set_sz(oid, Sz::parse("3").unwrap());
            assert!(book.discard(oid));
        }
        assert_eq!(book.asks().count(), 0);
        assert_eq!(book.bids().count(), 1);
        assert_eq!(book.levels.data.len(), 2, "one level kept, one reused");
        // A level that keeps other orders stays, with its total.
        book.insert(order(5_000, Side::Bid, "100.0", "4"));
        assert!(book.discard(1));
        let level = book.best_bid().unwrap();
        assert_eq!(
            (level.len(), level.total_sz().unwrap().to_string()),
            (1, "4.0".to_owned())
        );
        assert_eq!(level.px().to_string(), "100.0");
    }

    #[test]
    fn a_cloned_book_keeps_room_to_grow_without_moving_orders() {
        let mut book = L4Book::new();
        for oid in 0..100u64 {
            book.insert(order(oid, Side::Bid, "10.0", "1.0"));
        }
        let mut copy = book.clone();
        let last = copy.slots.orders.last().map(Vec::as_ptr);
        copy.insert(order(100, Side::Bid, "10.0", "1.0"));
        assert_eq!(copy.slots.orders.last().map(Vec::as_ptr), last);
        assert_eq!(copy.len(), 101);
        assert_eq!(book.len(), 100);
    }

    #[test]
    fn freed_slots_are_reused_and_levels_stay_linked_across_chunks() {
        let mut book = L4Book::new();
        for oid in 0..1_000u64 {
            let price = if oid % 2 == 0 { "100.0" } else { "101.0" };
            book.insert(order(oid, Side::Bid, price, "1"));
        }
        let handed_out = book.slots.len;
        for oid in (0..1_000u64).filter(|oid| oid % 3 == 0) {
            assert!(book.discard(oid));
        }
        assert!(!book.discard(0));
        for oid in 1_000..1_300u64 {
            book.insert(order(oid, Side::Bid, "100.0", "2"));
        }
        assert!(book.slots.len <= handed_out, "freed slots reused first");
        let level = oids(book.bids().nth(1).unwrap());
        let mut want: Vec<u64> = (0..1_000u64).filter(|o| o % 2 == 0 && o % 3 != 0).collect();
        want.extend(1_000..1_300u64);
        assert_eq!(level, want, "time priority survives reuse");
        let backwards: Vec<u64> = book
            .bids()
            .nth(1)
            .unwrap()
            .orders()
            .rev()
            .map(|o| o.oid)
            .collect();
        assert_eq!(backwards, want.iter().rev().copied().collect::<Vec<_>>());
        let total = book.bids().nth(1).unwrap().total_sz().unwrap();
        assert_eq!(total.to_string(), (want.len() + 300).to_string() + ".0");
    }

    #[test]
    fn update_keeps_priority_and_remove_drops_empty_levels() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Ask, "100.0", "1"));
        book.insert(order(2, Side::Ask, "100.0", "1"));
        assert_eq!(book.set_sz(1, px("0.5")).unwrap().sz.to_string(), "0.5");
        let level = oids(book.best_ask().unwrap());
        assert_eq!(level, [1, 2]);
        assert!(book.remove(1).is_some());
        assert!(book.remove(2).is_some());
        assert!(book.best_ask().is_none());
        assert!(book.remove(2).is_none());
        assert!(book.set_sz(2, px("1")).is_none());
    }

    mod best {
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Insert { oid: u64, bid: bool, tick: u8 },
            Remove { oid: u64 },
            Discard { oid: u64 },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (0..40u64, any::<bool>(), 0..24u8)
                    .prop_map(|(oid, bid, tick)| Op::Insert { oid, bid, tick }),
                1 => (0..40u64).prop_map(|oid| Op::Remove { oid }),
                1 => (0..40u64).prop_map(|oid| Op::Discard { oid }),
            ]
        }

        fn tops(book: &L4Book) -> (Option<Px>, Option<Px>) {
            (
                book.best_bid().map(Level::px),
                book.best_ask().map(Level::px),
            )
        }

        fn first_of_maps(book: &L4Book) -> (Option<Px>, Option<Px>) {
            (
                book.bids().next().map(Level::px),
                book.asks().next().map(Level::px),
            )
        }

        proptest! {
            /// The kept best levels are the maps' first ones after every
            /// step, whatever opens and empties levels (a re-placed oid
            /// included), and in a copy rebuilt level by level.
            #[test]
            fn the_kept_best_levels_are_the_maps_first(ops in proptest::collection::vec(op(), 0..300)) {
                let mut book = L4Book::new();
                for op in ops {
                    match op {
                        Op::Insert { oid, bid, tick } => {
                            let side = if bid { Side::Bid } else { Side::Ask };
                            book.insert(order(oid, side, &format!("{}.5", 100 + u32::from(tick)), "1"));
                        }
                        Op::Remove { oid } => {
                            book.remove(oid);
                        }
                        Op::Discard { oid } => {
                            book.discard(oid);
                        }
                    }
                    prop_assert_eq!(tops(&book), first_of_maps(&book));
                }
                let mut rebuilt = L4Book::new();
                for side in [Side::Bid, Side::Ask] {
                    for level in book.side(side) {
                        let at = rebuilt.append_level(side, level.px()).unwrap();
                        for order in level.orders() {
                            prop_assert!(rebuilt.append_order(at, order.clone()));
                        }
                    }
                }
                prop_assert_eq!(tops(&rebuilt), tops(&book));
                prop_assert!(rebuilt == book);
            }
        }
    }

    /// Every order of `user` in `books`, by walking them: (coin, oid).
    fn walked(books: &Books, user: &str) -> Vec<(String, RestingOrder)> {
        let mut out: Vec<(String, RestingOrder)> = books
            .iter()
            .flat_map(|(coin, book)| {
                book.orders()
                    .filter(|o| o.user.as_str().eq_ignore_ascii_case(user))
                    .map(move |o| (coin.to_owned(), o.clone()))
            })
            .collect();
        out.sort_by_key(|(coin, o)| (coin.clone(), o.oid));
        out
    }

    fn kept(books: &mut Books, user: &str) -> Vec<(String, RestingOrder)> {
        let mut out: Vec<(String, RestingOrder)> = books
            .orders_of(user)
            .into_iter()
            .flat_map(|(coin, orders)| {
                orders
                    .values()
                    .map(|o| (coin.to_string(), RestingOrder::clone(o)))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by_key(|(coin, o)| (coin.clone(), o.oid));
        out
    }

    fn coin_oids(orders: &[(String, RestingOrder)]) -> Vec<(String, u64)> {
        orders
            .iter()
            .map(|(coin, o)| (coin.clone(), o.oid))
            .collect()
    }

    fn of(user: &str, oid: u64, price: &str) -> RestingOrder {
        RestingOrder::bare(user, oid, Side::Bid, px(price), px("1"), 0)
    }

    #[test]
    fn a_stale_position_hint_still_finds_the_named_book() {
        let mut books = Books::new();
        books
            .get_or_create("ETH")
            .insert(order(1, Side::Bid, "10.0", "1.0"));
        let eth = books.position("ETH");
        assert_eq!(eth, Some(0));
        // A coin sorted before ETH moves ETH's book; the old hint now points
        // at BTC.
        books.get_or_create("BTC");
        let (book, stamp) = books.get_mut_stamped("ETH", eth).unwrap();
        assert_eq!(book.len(), 1);
        *stamp = 7;
        assert!(books.get_mut_stamped("SOL", eth).is_none());
        let (book, stamp) = books.get_or_create_stamped("SOL", eth);
        assert!(book.is_empty());
        assert_eq!(*stamp, 0);
        assert_eq!(books.stamped(7).collect::<Vec<_>>(), [(1, "ETH")]);
        assert_eq!(
            books.at(1).map(|(coin, book)| (coin, book.len())),
            Some(("ETH", 1))
        );
        // Prefetching through a stale or absent position changes nothing.
        books.prefetch_index(eth, 1);
        books.prefetch_order(Some(99), 1);
        assert_eq!(books.get("ETH").map(L4Book::len), Some(1));
    }

    #[test]
    fn a_watched_users_orders_are_kept_through_every_change() {
        let (alice, bob) = ("0xa11ce00000000000000000000000000000000001", "0xb0b");
        let mut books = Books::new();
        books.get_or_create("BTC").insert(of(alice, 1, "10"));
        books.get_or_create("BTC").insert(of(bob, 2, "10"));
        books.get_or_create("ETH").insert(of(alice, 3, "5"));
        // Asked in another case: the same user.
        assert_eq!(
            kept(&mut books, &alice.to_uppercase()),
            walked(&books, alice)
        );
        assert_eq!(kept(&mut books, alice).len(), 2);
        // Changes after the first question: added, removed, discarded, an
        // oid taken over by another user, a new coin, a replaced book.
        books.get_or_create("BTC").insert(of(alice, 4, "11"));
        books.get_or_create("ETH").remove(3);
        books.get_or_create("BTC").insert(of(bob, 1, "9"));
        books.get_or_create("SOL").insert(of(alice, 5, "1"));
        books.get_or_create("BTC").insert(of(alice, 6, "12"));
        assert!(books.get_or_create("BTC").discard(6));
        let mut fresh = L4Book::new();
        fresh.insert(of(alice, 7, "4"));
        fresh.insert(of(bob, 8, "4"));
        books.replace("ETH", fresh);
        // A reader's copy stays as it was taken while the books change.
        let taken = books.orders_of(alice);
        books.get_or_create("BTC").set_sz(4, px("3"));
        let mut later = of(alice, 4, "11");
        Arc::make_mut(&mut later.terms).tif = Some("Alo".into());
        assert!(books.get_or_create("BTC").complete(later));
        assert_eq!(kept(&mut books, alice), walked(&books, alice));
        assert_eq!(
            coin_oids(&kept(&mut books, alice)),
            [("BTC".into(), 4), ("ETH".into(), 7), ("SOL".into(), 5)]
        );
        let btc = &kept(&mut books, alice)[0].1;
        assert_eq!((btc.sz, btc.terms.tif.as_deref()), (px("3"), Some("Alo")));
        let before = taken[0].1.get(&4).unwrap();
        assert_eq!((before.sz, before.terms.tif.as_deref()), (px("1"), None));
        assert_eq!(kept(&mut books, bob), walked(&books, bob));
    }

    #[test]
    fn a_held_user_is_kept_past_the_bound_and_counts_only_its_own_changes() {
        let (alice, bob) = ("0xa11ce", "0xb0b");
        let mut books = Books::new();
        books.get_or_create("BTC").insert(of(alice, 1, "10"));
        books.get_or_create("BTC").insert(of(bob, 2, "10"));
        assert_eq!(books.changes_of(alice), None, "not watched yet");
        books.hold_user(&alice.to_uppercase().replace("0X", "0x"));
        let start = books.changes_of(alice).unwrap();
        // Another account's changes leave the count; each of hers moves it.
        books.get_or_create("BTC").insert(of(bob, 3, "9"));
        books.get_or_create("BTC").remove(2);
        assert_eq!(books.changes_of(alice), Some(start));
        books.get_or_create("ETH").insert(of(alice, 4, "5"));
        let placed = books.changes_of(alice).unwrap();
        assert!(placed > start);
        books.get_or_create("BTC").set_sz(1, px("0.5"));
        let resized = books.changes_of(alice).unwrap();
        assert!(resized > placed);
        books.replace("BTC", L4Book::new());
        assert!(
            books.changes_of(alice).unwrap() > resized,
            "a replaced book"
        );
        assert_eq!(coin_oids(&kept(&mut books, alice)), [("ETH".into(), 4)]);
        // Past the bound of accounts asked about, held: kept.
        let user = |n: usize| format!("0x{n:040x}");
        for n in 0..=MAX_WATCHED_USERS {
            books.orders_of(&user(n));
        }
        assert!(books.watched.contains_key(alice));
        assert_eq!(books.watched.len(), MAX_WATCHED_USERS + 1);
        assert_eq!(
            books.watched_orders_of(alice).len(),
            1,
            "still kept as it changes"
        );
        // Released, she is the one asked about longest ago: the next new
        // account lets her go.
        books.release_user(alice);
        books.orders_of(&user(MAX_WATCHED_USERS + 1));
        assert!(!books.watched.contains_key(alice));
        assert_eq!(books.changes_of(alice), None);
        assert!(books.watched_orders_of(alice).is_empty());
    }

    #[test]
    fn a_watched_user_has_an_entry_only_in_the_books_it_rests_orders_in() {
        let alice = "0xa11ce";
        let mut books = Books::new();
        for n in 0..50 {
            books
                .get_or_create(&format!("C{n}"))
                .insert(of("0xb0b", n, "1"));
        }
        books.get_or_create("C7").insert(of(alice, 100, "2"));
        books.hold_user(alice);
        let entries = |books: &Books| {
            books
                .iter()
                .filter(|(_, book)| book.watched_orders(alice).is_some())
                .map(|(coin, _)| coin.to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(entries(&books), ["C7"]);
        // A first order in another book makes an entry there; the last one
        // leaving a book takes its entry away.
        books.get_or_create("C9").insert(of(alice, 101, "3"));
        assert_eq!(entries(&books), ["C7", "C9"]);
        books.get_or_create("C7").remove(100);
        assert_eq!(entries(&books), ["C9"]);
        assert_eq!(coin_oids(&kept(&mut books, alice)), [("C9".into(), 101)]);
        // Uppercase in the node's text: the same account.
        books
            .get_or_create("C3")
            .insert(of(&alice.to_uppercase().replace("0X", "0x"), 102, "4"));
        assert_eq!(entries(&books), ["C3", "C9"]);
    }

    #[test]
    fn past_the_bound_of_held_users_a_hold_is_refused_until_one_is_released() {
        let mut books = Books::new();
        books.get_or_create("BTC").insert(of("0xb0b", 1, "1"));
        let user = |n: usize| format!("0x{n:040x}");
        for n in 0..MAX_HELD_USERS {
            assert!(books.hold_user(&user(n)), "hold {n}");
        }
        assert!(!books.hold_user(&user(MAX_HELD_USERS)), "one too many");
        assert_eq!(books.changes_of(&user(MAX_HELD_USERS)), None);
        // A held user again is a second hold, not a new user.
        assert!(books.hold_user(&user(0)));
        books.release_user(&user(1));
        assert!(books.hold_user(&user(MAX_HELD_USERS)));
        // Asking about others (Info) is not held and still works.
        assert_eq!(books.orders_of("0xb0b").len(), 1);
    }

    #[test]
    fn the_user_asked_about_longest_ago_is_let_go_past_the_bound() {
        let mut books = Books::new();
        let user = |n: usize| format!("0x{n:040x}");
        for n in 0..=MAX_WATCHED_USERS {
            books
                .get_or_create("BTC")
                .insert(of(&user(n), n as u64, "1"));
        }
        for n in 0..=MAX_WATCHED_USERS {
            assert_eq!(
                coin_oids(&kept(&mut books, &user(n))),
                [("BTC".to_owned(), n as u64)]
            );
        }
        assert_eq!(books.watched.len(), MAX_WATCHED_USERS);
        assert!(!books.watched.contains_key(&user(0)), "the oldest went");
        // Asked again, it is walked for again and right.
        books.get_or_create("BTC").insert(of(&user(0), 99_999, "2"));
        assert_eq!(
            coin_oids(&kept(&mut books, &user(0))),
            [("BTC".to_owned(), 0), ("BTC".to_owned(), 99_999)]
        );
    }
}
