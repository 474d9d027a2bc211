//! The per-coin L4 book: every resting order with its owner and metadata,
//! bids price-descending and asks price-ascending, time priority inside a
//! level. Mutation follows the node's raw book diffs literally — a `new`
//! rests where the diff says (replacing any entry with the same oid, no local
//! matching), `update` sets the size, `remove` deletes — so the book never
//! guesses what the matching engine did.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use thiserror::Error;

use crate::event::{NodeOrder, OrderStatusEvent, Side};
use crate::num::{Px, Sz};

/// A raw book diff the book cannot apply; counted and reported by the fold,
/// never fatal.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum L4Error {
    /// `update` or `remove` for an order the book does not hold.
    #[error("l4: unknown oid {oid} for {coin} at block {block}")]
    UnknownOid {
        /// Market.
        coin: String,
        /// Order id.
        oid: u64,
        /// Block number.
        block: u64,
    },
    /// `new` without an opening status (`open` or `triggered`) in the same
    /// block. The order still rests, with the diff's fields and bare metadata.
    #[error("l4: new oid {oid} for {coin} at block {block} has no opening status")]
    MissingOpeningStatus {
        /// Market.
        coin: String,
        /// Order id.
        oid: u64,
        /// Block number.
        block: u64,
    },
}

impl L4Error {
    /// The market the error is about.
    pub fn coin(&self) -> &str {
        match self {
            L4Error::UnknownOid { coin, .. } | L4Error::MissingOpeningStatus { coin, .. } => coin,
        }
    }
}

/// One resting order, shaped like an order of the node's L4 snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestingOrder {
    /// Owner address, as written by the node.
    pub user: Box<str>,
    /// Order id.
    pub oid: u64,
    /// Book side.
    pub side: Side,
    /// Resting price (the raw diff's `px`).
    pub limit_px: Px,
    /// Resting size.
    pub sz: Sz,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// `"N/A"`, or `"Triggered"` for a triggered order now resting.
    pub trigger_condition: Box<str>,
    /// Always false for a resting order from the diffs; kept as loaded.
    pub is_trigger: bool,
    /// `"0.0"` unless loaded otherwise.
    pub trigger_px: Px,
    /// Position TP/SL.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// `"Limit"`, `"Stop Limit"`, ...
    pub order_type: Box<str>,
    /// Original size.
    pub orig_sz: Sz,
    /// Time in force (`"Gtc"`, `"Alo"`, ...; IOC residuals rest as `"Gtc"`).
    pub tif: Option<Box<str>>,
    /// Client order id.
    pub cloid: Option<Box<str>>,
}

impl RestingOrder {
    /// An order exactly as a node snapshot lists it.
    pub fn from_node(user: &str, order: &NodeOrder<'_>) -> Self {
        Self {
            user: user.into(),
            oid: order.oid,
            side: order.side,
            limit_px: order.limit_px,
            sz: order.sz,
            timestamp: order.timestamp,
            trigger_condition: order.trigger_condition.into(),
            is_trigger: order.is_trigger,
            trigger_px: order.trigger_px,
            is_position_tpsl: order.is_position_tpsl,
            reduce_only: order.reduce_only,
            order_type: order.order_type.into(),
            orig_sz: order.orig_sz,
            tif: order.tif.map(Into::into),
            cloid: order.cloid.map(Into::into),
        }
    }

    /// The order a raw `new` rests, with metadata from its opening status,
    /// normalised the way the node's snapshots show resting orders: price and
    /// size from the diff, IOC residuals as `tif:"Gtc"`, and triggered orders
    /// as `triggerCondition:"Triggered"`, `isTrigger:false`,
    /// `triggerPx:"0.0"`, `tif:"Gtc"`.
    pub fn from_opening(
        user: &str,
        status: &OrderStatusEvent<'_>,
        px: Px,
        sz: Sz,
        block_time_ms: i64,
    ) -> Self {
        let mut order = Self::from_node(user, &status.order);
        order.limit_px = px;
        order.sz = sz;
        if status.status == "triggered" || status.order.is_trigger {
            order.trigger_condition = "Triggered".into();
            order.is_trigger = false;
            order.trigger_px = Px::ZERO;
            order.tif = Some("Gtc".into());
            order.timestamp = block_time_ms;
        } else if order.tif.as_deref() == Some("Ioc") {
            order.tif = Some("Gtc".into());
        }
        order
    }

    /// An order known only from its raw `new` diff (no opening status).
    pub fn bare(user: &str, oid: u64, side: Side, px: Px, sz: Sz, block_time_ms: i64) -> Self {
        Self {
            user: user.into(),
            oid,
            side,
            limit_px: px,
            sz,
            timestamp: block_time_ms,
            trigger_condition: "N/A".into(),
            is_trigger: false,
            trigger_px: Px::ZERO,
            is_position_tpsl: false,
            reduce_only: false,
            order_type: "Limit".into(),
            orig_sz: sz,
            tif: None,
            cloid: None,
        }
    }
}

/// One price level: its orders in time priority, and their total size kept
/// as orders come, change and go (BBO, L2 and mids read it on every block).
#[derive(Debug, Clone)]
pub struct Level {
    px: Px,
    orders: BTreeMap<u64, RestingOrder>,
    /// Exact running sum of the orders' sizes; `None` once a step overflowed
    /// (then [`Level::total_sz`] sums the orders instead).
    total: Option<Sz>,
}

impl PartialEq for Level {
    fn eq(&self, other: &Self) -> bool {
        self.px == other.px && self.orders == other.orders
    }
}

impl Eq for Level {}

impl Level {
    /// The level's price, as the node wrote it for the first order here.
    pub fn px(&self) -> Px {
        self.px
    }

    /// Orders in time priority (oldest first).
    pub fn orders(&self) -> impl DoubleEndedIterator<Item = &RestingOrder> + '_ {
        self.orders.values()
    }

    /// Number of orders.
    pub fn len(&self) -> usize {
        self.orders.len()
    }

    /// Whether the level holds no order (never true for a level in a book).
    pub fn is_empty(&self) -> bool {
        self.orders.is_empty()
    }

    /// Exact total size, canonically printed; `None` on overflow.
    pub fn total_sz(&self) -> Option<Sz> {
        if self.total.is_some() {
            // Sums are canonical, so the running one prints as a fresh one.
            return self.total;
        }
        let mut total = Sz::ZERO;
        for order in self.orders.values() {
            total = total.checked_add(order.sz)?;
        }
        Some(total)
    }

    fn new(px: Px) -> Self {
        Self {
            px,
            orders: BTreeMap::new(),
            total: Some(Sz::ZERO),
        }
    }

    /// Moves the running total by `added - removed` (`None`: no order added
    /// or removed). A step that overflows leaves the total unknown (summed on
    /// demand) until the level empties.
    fn adjust(&mut self, added: Option<Sz>, removed: Option<Sz>) {
        self.total = self.total.and_then(|total| {
            total
                .checked_add(added.unwrap_or(Sz::ZERO))?
                .checked_sub(removed.unwrap_or(Sz::ZERO))
        });
        if self.orders.is_empty() {
            self.total = Some(Sz::ZERO);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    side: Side,
    px: Px,
    seq: u64,
}

/// One coin's L4 book.
#[derive(Debug, Clone, Default)]
pub struct L4Book {
    bids: BTreeMap<Reverse<Px>, Level>,
    asks: BTreeMap<Px, Level>,
    /// Order id → where it rests. Ids come from the node, so a fast
    /// non-cryptographic hash serves (no untrusted keys).
    index: HashMap<u64, Slot, foldhash::fast::RandomState>,
    next_seq: u64,
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
        let replaced = self.remove(order.oid);
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = Slot {
            side: order.side,
            px: order.limit_px,
            seq,
        };
        self.index.insert(order.oid, slot);
        let level = match order.side {
            Side::Bid => self
                .bids
                .entry(Reverse(slot.px))
                .or_insert_with(|| Level::new(slot.px)),
            Side::Ask => self
                .asks
                .entry(slot.px)
                .or_insert_with(|| Level::new(slot.px)),
        };
        let sz = order.sz;
        level.orders.insert(seq, order);
        level.adjust(Some(sz), None);
        replaced
    }

    /// Sets the resting size of `oid`, keeping its time priority.
    pub fn set_sz(&mut self, oid: u64, sz: Sz) -> Option<&RestingOrder> {
        let slot = *self.index.get(&oid)?;
        let level = match slot.side {
            Side::Bid => self.bids.get_mut(&Reverse(slot.px))?,
            Side::Ask => self.asks.get_mut(&slot.px)?,
        };
        let order = level.orders.get_mut(&slot.seq)?;
        let old = std::mem::replace(&mut order.sz, sz);
        level.adjust(Some(sz), Some(old));
        level.orders.get(&slot.seq)
    }

    /// Removes `oid`, returning it.
    pub fn remove(&mut self, oid: u64) -> Option<RestingOrder> {
        let slot = self.index.remove(&oid)?;
        match slot.side {
            Side::Bid => take(&mut self.bids, &Reverse(slot.px), slot.seq),
            Side::Ask => take(&mut self.asks, &slot.px, slot.seq),
        }
    }

    /// The order with id `oid`.
    pub fn get(&self, oid: u64) -> Option<&RestingOrder> {
        let slot = self.index.get(&oid)?;
        let level = match slot.side {
            Side::Bid => self.bids.get(&Reverse(slot.px))?,
            Side::Ask => self.asks.get(&slot.px)?,
        };
        level.orders.get(&slot.seq)
    }

    /// Bid levels, best (highest) first.
    pub fn bids(&self) -> impl DoubleEndedIterator<Item = &Level> + '_ {
        self.bids.values()
    }

    /// Ask levels, best (lowest) first.
    pub fn asks(&self) -> impl DoubleEndedIterator<Item = &Level> + '_ {
        self.asks.values()
    }

    /// Levels of one side, best first.
    pub fn side(&self, side: Side) -> Box<dyn Iterator<Item = &Level> + '_> {
        match side {
            Side::Bid => Box::new(self.bids()),
            Side::Ask => Box::new(self.asks()),
        }
    }

    /// Best bid level.
    pub fn best_bid(&self) -> Option<&Level> {
        self.bids.values().next()
    }

    /// Best ask level.
    pub fn best_ask(&self) -> Option<&Level> {
        self.asks.values().next()
    }

    /// Number of resting orders.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no order rests.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every order: bids best first, then asks best first, time priority
    /// inside each level.
    pub fn orders(&self) -> impl Iterator<Item = &RestingOrder> + '_ {
        self.bids()
            .chain(self.asks())
            .flat_map(|level| level.orders.values())
    }
}

fn take<K: Ord>(levels: &mut BTreeMap<K, Level>, key: &K, seq: u64) -> Option<RestingOrder> {
    let level = levels.get_mut(key)?;
    let order = level.orders.remove(&seq);
    if let Some(order) = &order {
        level.adjust(None, Some(order.sz));
    }
    if level.orders.is_empty() {
        levels.remove(key);
    }
    order
}

/// Every coin's L4 book, by coin name (sorted, so iteration is deterministic).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Books {
    coins: BTreeMap<String, L4Book>,
}

impl Books {
    /// No books.
    pub fn new() -> Self {
        Self::default()
    }

    /// The book of `coin`, if any order ever rested there.
    pub fn get(&self, coin: &str) -> Option<&L4Book> {
        self.coins.get(coin)
    }

    /// The book of `coin`, created empty when absent.
    pub fn get_or_create(&mut self, coin: &str) -> &mut L4Book {
        self.coins.entry(coin.to_owned()).or_default()
    }

    /// The book of `coin` for mutation, if present.
    pub fn get_mut(&mut self, coin: &str) -> Option<&mut L4Book> {
        self.coins.get_mut(coin)
    }

    /// Replaces (or inserts) the book of `coin`.
    pub fn replace(&mut self, coin: &str, book: L4Book) {
        self.coins.insert(coin.to_owned(), book);
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
        self.coins.values().map(L4Book::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::Decimal;

    fn px(text: &str) -> Px {
        Decimal::parse(text).unwrap()
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
        let level: Vec<_> = book
            .bids()
            .nth(1)
            .unwrap()
            .orders()
            .map(|o| o.oid)
            .collect();
        assert_eq!(level, [1, 3]);
        assert_eq!(
            book.bids().nth(1).unwrap().total_sz().unwrap().to_string(),
            "3.0"
        );
    }

    #[test]
    fn new_with_existing_oid_replaces_and_loses_priority() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Bid, "100.0", "1"));
        book.insert(order(2, Side::Bid, "100.0", "1"));
        let replaced = book.insert(order(1, Side::Bid, "100.0", "5"));
        assert_eq!(replaced.unwrap().sz.to_string(), "1");
        let level: Vec<_> = book.best_bid().unwrap().orders().map(|o| o.oid).collect();
        assert_eq!(level, [2, 1]);
        assert_eq!(book.len(), 2);
    }

    #[test]
    fn update_keeps_priority_and_remove_drops_empty_levels() {
        let mut book = L4Book::new();
        book.insert(order(1, Side::Ask, "100.0", "1"));
        book.insert(order(2, Side::Ask, "100.0", "1"));
        assert_eq!(book.set_sz(1, px("0.5")).unwrap().sz.to_string(), "0.5");
        let level: Vec<_> = book.best_ask().unwrap().orders().map(|o| o.oid).collect();
        assert_eq!(level, [1, 2]);
        assert!(book.remove(1).is_some());
        assert!(book.remove(2).is_some());
        assert!(book.best_ask().is_none());
        assert!(book.remove(2).is_none());
        assert!(book.set_sz(2, px("1")).is_none());
    }
}
