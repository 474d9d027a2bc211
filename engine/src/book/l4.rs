//! The per-coin L4 book: every resting order with its owner and metadata,
//! bids price-descending and asks price-ascending, time priority inside a
//! level. Mutation follows the node's raw book diffs literally — a `new`
//! rests where the diff says (replacing any entry with the same oid, no local
//! matching), `update` sets the size, `remove` deletes — so the book never
//! guesses what the matching engine did.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use super::oids::{OidIndex, prefetch, prefetch_all};
use crate::event::{NodeOrder, OrderStatusEvent, Side};
use crate::num::{Px, Sz};
use crate::text::{Address, Cloid, Short};

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
    pub user: Address,
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
    pub trigger_condition: Short,
    /// Always false for a resting order from the diffs; kept as loaded.
    pub is_trigger: bool,
    /// `"0.0"` unless loaded otherwise.
    pub trigger_px: Px,
    /// Position TP/SL.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// `"Limit"`, `"Stop Limit"`, ...
    pub order_type: Short,
    /// Original size.
    pub orig_sz: Sz,
    /// Time in force (`"Gtc"`, `"Alo"`, ...; IOC residuals rest as `"Gtc"`).
    pub tif: Option<Short>,
    /// Client order id.
    pub cloid: Option<Cloid>,
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

/// One price level of an [`L4Book`], borrowed: its orders in time priority
/// and their total size, kept as orders come, change and go (BBO, L2 and mids
/// read it on every block).
#[derive(Clone, Copy)]
pub struct Level<'a> {
    data: &'a LevelData,
    slots: &'a Slots,
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
        self.data.px
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
        self.data.total
    }

    /// Exact total size, canonically printed; `None` on overflow.
    pub fn total_sz(self) -> Option<Sz> {
        if let Some(total) = self.data.total {
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
    slots: &'a Slots,
    front: usize,
    back: usize,
    left: usize,
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

/// No neighbour in a level's list.
const NIL: usize = usize::MAX;

/// A slot's neighbours in time priority within its level and the level's
/// number (see `Levels`), kept as 32-bit numbers (12 bytes a slot: the
/// table is read and written on every order change, so it is kept small).
/// Slots past `u32::MAX - 1` would read as "no neighbour"; a book that large
/// (hundreds of gigabytes of orders) does not fit in memory first.
#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    level: u32,
}

impl Link {
    const UNLINKED: Self = Self {
        prev: u32::MAX,
        next: u32::MAX,
        level: u32::MAX,
    };

    fn new(prev: usize, next: usize, level: u32) -> Self {
        Self {
            prev: Self::pack(prev),
            next: Self::pack(next),
            level,
        }
    }

    fn pack(at: usize) -> u32 {
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    fn unpack(at: u32) -> usize {
        if at == u32::MAX { NIL } else { at as usize }
    }

    fn prev(self) -> usize {
        Self::unpack(self.prev)
    }

    fn next(self) -> usize {
        Self::unpack(self.next)
    }

    fn set_prev(&mut self, at: usize) {
        self.prev = Self::pack(at);
    }

    fn set_next(&mut self, at: usize) {
        self.next = Self::pack(at);
    }
}

/// Slots of the first chunk; chunk `k` holds `FIRST_CHUNK << k`.
const FIRST_CHUNK: usize = 16;

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
/// the head of each neighbour's ~250-byte order. A freed slot keeps its old
/// order until the slot is reused — only slots on a level's list or in the
/// oid index are ever read — so removing an order does not touch (or drop)
/// its memory; the next order placed there overwrites, and drops, it.
#[derive(Debug, Default)]
struct Slots {
    orders: Vec<Vec<RestingOrder>>,
    links: Vec<Vec<Link>>,
    free: Vec<usize>,
    /// Slots handed out so far (used or free).
    len: usize,
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
    fn locate(at: usize) -> (usize, usize) {
        let shifted = at.saturating_add(FIRST_CHUNK);
        let chunk = (shifted.ilog2() - FIRST_CHUNK.ilog2()) as usize;
        (chunk, shifted - (FIRST_CHUNK << chunk))
    }

    fn order(&self, at: usize) -> Option<&RestingOrder> {
        let (chunk, offset) = Self::locate(at);
        self.orders.get(chunk)?.get(offset)
    }

    fn order_mut(&mut self, at: usize) -> Option<&mut RestingOrder> {
        let (chunk, offset) = Self::locate(at);
        self.orders.get_mut(chunk)?.get_mut(offset)
    }

    fn link(&self, at: usize) -> Option<Link> {
        self.link_ref(at).copied()
    }

    fn link_ref(&self, at: usize) -> Option<&Link> {
        let (chunk, offset) = Self::locate(at);
        self.links.get(chunk)?.get(offset)
    }

    fn link_mut(&mut self, at: usize) -> Option<&mut Link> {
        let (chunk, offset) = Self::locate(at);
        self.links.get_mut(chunk)?.get_mut(offset)
    }

    /// Asks for slot `at`'s link and the lines of its order that an update
    /// or a removal reads.
    fn prefetch(&self, at: usize) {
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
    fn put(&mut self, order: RestingOrder) -> usize {
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
    fn free(&mut self, at: usize) {
        if let Some(order) = self.order(at) {
            prefetch_all(order);
        }
        self.free.push(at);
    }
}

/// A level's side and price, list ends, order count and running total.
#[derive(Debug, Clone)]
struct LevelData {
    side: Side,
    px: Px,
    /// First and last slots, packed as in [`Link`] (a book has over a
    /// hundred thousand levels: 4 bytes each, not 8).
    head: u32,
    tail: u32,
    len: u32,
    /// Exact running sum of the orders' sizes, kept at the largest scale seen
    /// (made canonical only when read: doing it on every step cost a
    /// division per trailing zero); `None` once a step overflowed (then
    /// [`Level::total_sz`] sums the orders instead).
    total: Option<Sz>,
}

impl LevelData {
    fn new(side: Side, px: Px) -> Self {
        Self {
            side,
            px,
            head: u32::MAX,
            tail: u32::MAX,
            len: 0,
            total: Some(Sz::ZERO),
        }
    }

    /// Moves the running total by `added - removed` (`None`: no order added
    /// or removed). A step that overflows leaves the total unknown (summed on
    /// demand) until the level empties.
    fn adjust(&mut self, added: Option<Sz>, removed: Option<Sz>) {
        self.total = self.total.and_then(|total| {
            total
                .checked_add_wide(added.unwrap_or(Sz::ZERO))?
                .checked_sub_wide(removed.unwrap_or(Sz::ZERO))
        });
        if self.len == 0 {
            self.total = Some(Sz::ZERO);
        }
    }

    fn head(&self) -> usize {
        Link::unpack(self.head)
    }

    fn tail(&self) -> usize {
        Link::unpack(self.tail)
    }

    fn len(&self) -> usize {
        self.len as usize
    }

    /// Appends the order in slot `at` (whose links are unset) at the back
    /// of this level, number `level`.
    fn push_back(&mut self, slots: &mut Slots, at: usize, level: u32, sz: Sz) {
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
    fn unlink(&mut self, slots: &mut Slots, prev: usize, next: usize, sz: Sz) {
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
struct Levels {
    data: Vec<LevelData>,
    /// Numbers of emptied levels, for reuse.
    free: Vec<u32>,
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
    fn add(&mut self, side: Side, px: Px) -> u32 {
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

    fn get(&self, at: u32) -> Option<&LevelData> {
        self.data.get(at as usize)
    }

    fn get_mut(&mut self, at: u32) -> Option<&mut LevelData> {
        self.data.get_mut(at as usize)
    }

    /// Frees an emptied level's number.
    fn release(&mut self, at: u32) {
        self.free.push(at);
    }
}

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
    levels: Levels,
    slots: Slots,
    /// Order id → slot.
    index: OidIndex,
    /// [`level_key`] → level number, for every level whose price has a key.
    at_price: OidIndex,
    /// The orders of the users someone asked about ([`Books::orders_of`]),
    /// kept as the book changes; `None` (one branch per change) while
    /// nobody watches.
    watch: Option<Box<Watch>>,
}

/// One user's resting orders in one book, by oid: a persistent map, so a
/// reader takes the whole of it at once (a pointer copy, however many
/// orders a market maker rests) and reads it on its own thread, while the
/// fold's next changes copy only the few nodes they touch.
pub type UserOrders = imbl::HashMap<u64, Arc<RestingOrder>>;

/// The orders resting in one book of each watched user.
#[derive(Debug, Clone, Default)]
struct Watch {
    /// One bit per watched user, by the last byte of the address: most
    /// orders are told apart by it at once.
    bloom: u64,
    /// Watched user (lowercase) → their orders in the book.
    users: HashMap<String, UserOrders, foldhash::fast::RandomState>,
}

impl Watch {
    fn bit(user: &str) -> u64 {
        let last = user.as_bytes().last().map_or(0, u8::to_ascii_lowercase);
        1 << (last & 63)
    }

    /// The orders of `user` when watched.
    fn orders_mut(&mut self, user: &str) -> Option<&mut UserOrders> {
        if self.bloom & Self::bit(user) == 0 {
            return None;
        }
        if user.bytes().any(|b| b.is_ascii_uppercase()) {
            self.users.get_mut(&user.to_ascii_lowercase())
        } else {
            self.users.get_mut(user)
        }
    }

    /// `order` rests (or changed): kept when its user is watched.
    fn rests(&mut self, order: &RestingOrder) {
        if let Some(orders) = self.orders_mut(&order.user) {
            orders.insert(order.oid, Arc::new(order.clone()));
        }
    }

    fn removed(&mut self, user: &str, oid: u64) {
        if let Some(orders) = self.orders_mut(user) {
            orders.remove(&oid);
        }
    }

    fn rebuild_bloom(&mut self) {
        self.bloom = self
            .users
            .keys()
            .fold(0, |bloom, user| bloom | Self::bit(user));
    }
}

/// A level's key in the price index: its side and its price (trailing
/// zeros dropped, so equal prices written differently share it) packed into
/// 64 bits; `None` for a price that does not pack (negative, or 2^57 units
/// or more), whose level is then found in the ordered map alone.
fn level_key(side: Side, px: Px) -> Option<u64> {
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
                    self.bids.remove(&Reverse(level.px));
                    if self.best_bid == Some(link.level) {
                        self.best_bid = self.bids.values().next().copied();
                    }
                }
                Side::Ask => {
                    self.asks.remove(&level.px);
                    if self.best_ask == Some(link.level) {
                        self.best_ask = self.asks.values().next().copied();
                    }
                }
            }
            if let Some(key) = level_key(level.side, level.px) {
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
                Side::Bid => px > held.px,
                Side::Ask => px < held.px,
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
            || order.limit_px != data.px
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

    /// Starts keeping the orders of `user` (lowercase) in this book: one
    /// walk of its orders, then each change keeps them.
    fn watch_user(&mut self, user: &str) {
        let orders: UserOrders = self
            .orders()
            .filter(|order| order.user.as_str().eq_ignore_ascii_case(user))
            .map(|order| (order.oid, Arc::new(order.clone())))
            .collect();
        let watch = self.watch.get_or_insert_with(Box::default);
        watch.users.insert(user.to_owned(), orders);
        watch.rebuild_bloom();
    }

    /// Stops keeping the orders of `user` (lowercase).
    fn unwatch_user(&mut self, user: &str) {
        if let Some(watch) = self.watch.as_deref_mut() {
            watch.users.remove(user);
            watch.rebuild_bloom();
            if watch.users.is_empty() {
                self.watch = None;
            }
        }
    }

    /// The orders of watched `user` (lowercase) resting in this book, shared
    /// (see [`UserOrders`]).
    fn watched_orders(&self, user: &str) -> Option<&UserOrders> {
        self.watch.as_deref()?.users.get(user)
    }

    /// Rebuilding: sets a level's running total as it was kept (see
    /// [`Level::running_total`]); false for an unknown level.
    pub(crate) fn set_running_total(&mut self, level: u32, total: Option<Sz>) -> bool {
        match self.levels.get_mut(level) {
            Some(data) => {
                data.total = total;
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
    /// The users whose orders every book keeps ([`Books::orders_of`]),
    /// lowercase, with when each was last asked about.
    watched: HashMap<String, u64, foldhash::fast::RandomState>,
    /// Counts the questions, for `watched`.
    asked: u64,
}

/// Users whose orders the books keep at most: past it the one asked about
/// longest ago is let go (and walked for again if asked about again).
pub const MAX_WATCHED_USERS: usize = 1_024;

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
        for user in self.watched.keys() {
            book.watch_user(user);
        }
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
    /// most [`MAX_WATCHED_USERS`] users are kept.
    pub fn orders_of(&mut self, user: &str) -> Vec<(Short, UserOrders)> {
        let user = user.to_ascii_lowercase();
        self.asked += 1;
        if let Some(asked) = self.watched.get_mut(&user) {
            *asked = self.asked;
        } else {
            if self.watched.len() >= MAX_WATCHED_USERS
                && let Some(oldest) = self
                    .watched
                    .iter()
                    .min_by_key(|(_, asked)| **asked)
                    .map(|(user, _)| user.clone())
            {
                self.watched.remove(&oldest);
                for (_, book) in &mut self.coins {
                    book.unwatch_user(&oldest);
                }
            }
            for (_, book) in &mut self.coins {
                book.watch_user(&user);
            }
            self.watched.insert(user.clone(), self.asked);
        }
        self.coins
            .iter()
            .filter_map(|(coin, book)| {
                let orders = book.watched_orders(&user)?;
                (!orders.is_empty()).then(|| (coin.clone(), orders.clone()))
            })
            .collect()
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
        for user in self.watched.keys() {
            book.watch_user(user);
        }
        let at = self.coins.partition_point(|(held, _)| held.as_str() < coin);
        self.coins.insert(at, (Short::new(coin), book));
        self.stamps.insert(at, 0);
        for (i, (held, _)) in self.coins.iter().enumerate().skip(at) {
            self.index.insert(held.clone(), i);
        }
        at
    }
}

#[cfg(test)]
mod tests {
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
        let copy = book.clone();
        for (k, chunk) in copy.slots.orders.iter().enumerate() {
            assert_eq!(chunk.capacity(), FIRST_CHUNK << k, "chunk {k}");
        }
        for (k, chunk) in copy.slots.links.iter().enumerate() {
            assert_eq!(chunk.capacity(), FIRST_CHUNK << k, "link chunk {k}");
        }
        let mut copy = copy;
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
        later.tif = Some("Alo".into());
        assert!(books.get_or_create("BTC").complete(later));
        assert_eq!(kept(&mut books, alice), walked(&books, alice));
        assert_eq!(
            coin_oids(&kept(&mut books, alice)),
            [("BTC".into(), 4), ("ETH".into(), 7), ("SOL".into(), 5)]
        );
        let btc = &kept(&mut books, alice)[0].1;
        assert_eq!((btc.sz, btc.tif.as_deref()), (px("3"), Some("Alo")));
        let before = taken[0].1.get(&4).unwrap();
        assert_eq!((before.sz, before.tif.as_deref()), (px("1"), None));
        assert_eq!(kept(&mut books, bob), walked(&books, bob));
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
