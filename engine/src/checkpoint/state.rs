//! The market state a checkpoint archives, as rkyv types beside the live
//! ones (the live types keep the layout the fold wants; nothing here is on
//! the hot path). [`capture`] copies the state out of a [`Market`] between
//! two blocks; [`restore`] rebuilds a [`Market`] straight from the validated
//! archive, with no intermediate copy of it.
//!
//! # What is archived
//!
//! Everything a market carries from one block to the next:
//!
//! - the position: the last folded block and its time, for the market and
//!   for the books (they differ while a candle store's earlier trades are
//!   folded, see [`Market::with_candles_from`]), and the fold's counters;
//! - every L4 book, level by level in book order: the level's price as the
//!   book keeps it (the text of its first order) and its running total,
//!   then its orders in time priority with every field. Strings that repeat
//!   (owners, order types, time in force, trigger conditions) are stored
//!   once in a table and referenced by number; a client order id in its
//!   usual form (`0x` and 32 lowercase hex digits) is stored as its 16
//!   bytes;
//! - the unknown-id counts, resets found but not yet surfaced, the universe
//!   of coins seen;
//! - trades' running counts per coin; TP/SL's tracked trigger orders, the
//!   highest oid it tracked and the positions from fills (in parts, see
//!   [`TpslState::positions`]); every candle
//!   series (live candle, the bucket below which trades are late, the fold
//!   that last changed it) with the candle fold's counters.
//!
//! # What is not, and why
//!
//! - What only the last block produced (its trades, fills, TP/SL diffs,
//!   order changes, closed candles, raw events): the next block replaces
//!   it, and no subscription opens on it.
//! - What subscriptions hold in the market (watched coins and accounts,
//!   tracked L2 parameter sets) and what derives from the books while they
//!   are watched (tops of book, mids, L2 books): a restarted server has no
//!   subscriber, and the first one rebuilds them from the books, as after
//!   any start.
//!
//! So a market restored from a checkpoint at block `H` gives any
//! subscription opened on it, and every block after `H`, exactly the frames
//! the market that wrote it would have given.
//!
//! # Validation
//!
//! The archive is validated by rkyv (`bytecheck`) before anything reads it;
//! [`restore`] then checks the state's own rules — text references in
//! range, scales at most 18, levels in book order with one price each,
//! every order at its level's price and side, no order id twice, candle
//! buckets on their interval's boundaries, counters far from overflow — so
//! a damaged or hostile checkpoint is refused with a reason, never a panic
//! or a market that breaks later.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use rkyv::{Archive, Deserialize, Serialize};

use crate::book::l4::{Books, Cloid, CloidForm, L4Book, Owner, RestingOrder, Terms};
use crate::book::prefetch_all;
use crate::event::Side;
use crate::fold::{CoinReset, Engine, EngineParts, UnknownIds};
use crate::market::candles::{Amount, Candle, CandlesView, Interval, Series};
use crate::market::fills::FillsView;
use crate::market::tpsl::{TpslView, TriggerOrder};
use crate::market::trades::{CoinCounts, TradesView};
use crate::market::{Market, MarketParts, Needs};
use crate::num::{Decimal, MAX_SCALE};
use crate::positions::{POSITION_PARTS, Positions};
use crate::text::{Address, Short};

/// The archived state's format version. Any change to the types of this
/// module (or to what they mean) must bump it: a checkpoint of another
/// version is refused, never misread. The golden test
/// `checkpoint::the_archive_format_is_pinned` fails until it is bumped.
pub const FORMAT_VERSION: u32 = 3;

/// "No string" in a text reference.
const NONE: u32 = u32::MAX;

/// Counters and heights must stay this far from overflowing (a hostile
/// checkpoint could otherwise set one to `u64::MAX` and make the next
/// block's `+ 1` overflow).
const COUNTER_LIMIT: u64 = 1 << 62;

/// Candle bucket times must lie within this many ms of the epoch (about
/// 35,000 years), so that bucket arithmetic cannot overflow.
const TIME_LIMIT: i64 = 1 << 50;

/// [`OrderState::flags`]: the order is a trigger order.
const IS_TRIGGER: u8 = 1;
/// [`OrderState::flags`]: a position TP/SL.
const IS_POSITION_TPSL: u8 = 2;
/// [`OrderState::flags`]: reduce-only.
const REDUCE_ONLY: u8 = 4;
/// [`OrderState::flags`]: the client order id is in `cloid_bytes`.
const CLOID_BYTES: u8 = 8;
const KNOWN_FLAGS: u8 = IS_TRIGGER | IS_POSITION_TPSL | REDUCE_ONLY | CLOID_BYTES;

/// Everything a market carries from block to block. See the module docs.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CheckpointState {
    /// What the market folds ([`Needs`] as bits: books 1, trades 2, fills
    /// 4, TP/SL 8, candles 16).
    pub needs: u8,
    /// The last block folded into anything.
    pub height: Option<u64>,
    /// Its time, Unix ms.
    pub time_ms: i64,
    /// The last block folded into the books.
    pub books_height: Option<u64>,
    /// Its time, Unix ms.
    pub books_time_ms: i64,
    /// Blocks the book fold folded.
    pub blocks_folded: u64,
    /// Events the book fold saw.
    pub events_seen: u64,
    /// Every book, by coin, sorted. The first field with data out of line
    /// and before the texts its orders reference: an archive lays fields
    /// out in this order, and the checkpointer writes each book as it
    /// copies it, numbering texts on the way (see `stream`).
    pub books: Vec<BookState>,
    /// Strings the orders reference by number.
    pub texts: Vec<String>,
    /// The only coins whose books are kept (`None`: every coin).
    pub book_coins: Option<Vec<String>>,
    /// Unknown order ids per coin.
    pub unknown_ids: Vec<UnknownIdsState>,
    /// Coins reset from a node snapshot, surfaced with the next block.
    pub pending_resets: Vec<ResetState>,
    /// Every coin seen.
    pub universe: Vec<String>,
    /// Trades' position and running counts.
    pub trades: TradesState,
    /// The fills view's position.
    pub fills: PositionState,
    /// TP/SL.
    pub tpsl: TpslState,
    /// Candles.
    pub candles: CandlesState,
}

/// An exact decimal: `units / 10^scale`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecimalState {
    /// Integer units.
    pub units: i64,
    /// Digits after the point (at most 18).
    pub scale: u8,
}

/// An exact 128-bit sum (candle volume and notional).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmountState {
    /// Integer units.
    pub units: i128,
    /// Digits after the point.
    pub scale: u8,
}

/// A block number and time.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PositionState {
    /// Block number.
    pub block_number: u64,
    /// Block time, Unix ms.
    pub time: i64,
}

/// One coin's unknown-id counts.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct UnknownIdsState {
    /// Market.
    pub coin: String,
    /// Updates and removals of orders the book did not hold.
    pub unknown_oid: u64,
    /// `new` diffs without an opening status.
    pub missing_status: u64,
}

/// A reset found but not surfaced yet.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ResetState {
    /// Market.
    pub coin: String,
    /// Snapshot height.
    pub height: u64,
    /// The first difference found.
    pub detail: String,
}

/// One coin's L4 book: its levels in book order (bids best first, then asks
/// best first), and their orders in the same order, level after level.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct BookState {
    /// Market.
    pub coin: String,
    /// Levels in book order.
    pub levels: Vec<LevelState>,
    /// Orders, level after level, time priority within each.
    pub orders: Vec<OrderState>,
}

/// One price level.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelState {
    /// Bid side (else ask).
    pub bid: bool,
    /// The level's price as kept (the text of its first order).
    pub px: DecimalState,
    /// The running total as kept (`None`: it overflowed once).
    pub total: Option<DecimalState>,
    /// How many of the book's next orders rest here (at least one).
    pub orders: u32,
}

/// One resting order (its side is its level's). Strings are numbers into
/// [`CheckpointState::texts`] ([`u32::MAX`]: none).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderState {
    /// Order id.
    pub oid: u64,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// Resting price units.
    pub limit_px: i64,
    /// Resting size units.
    pub sz: i64,
    /// Trigger price units.
    pub trigger_px: i64,
    /// Original size units.
    pub orig_sz: i64,
    /// Owner (a text).
    pub user: u32,
    /// Trigger condition (a text).
    pub trigger_condition: u32,
    /// Order type (a text).
    pub order_type: u32,
    /// Time in force (a text, or none).
    pub tif: u32,
    /// Client order id in another form than the usual (a text, or none).
    pub cloid: u32,
    /// Client order id in the usual form, when flagged.
    pub cloid_bytes: [u8; 16],
    /// Scales of `limit_px`, `sz`, `trigger_px`, `orig_sz`.
    pub scales: [u8; 4],
    /// Trigger, position TP/SL, reduce-only, client order id as bytes.
    pub flags: u8,
}

/// Trades' position and running counts.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct TradesState {
    /// The last folded block.
    pub position: PositionState,
    /// Per coin, the nine [`CoinCounts`] in declaration order.
    pub counts: Vec<CoinCountsState>,
}

/// One coin's trade counts.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CoinCountsState {
    /// Market.
    pub coin: String,
    /// Trades, ambiguous taker, same side, mismatch, unmatched, crowded,
    /// spot dust conversion, outcome complete set, no trade id.
    pub counts: [u64; 9],
}

/// TP/SL's state.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct TpslState {
    /// The last folded block.
    pub position: PositionState,
    /// The highest oid ever tracked.
    pub max_oid: u64,
    /// Tracked trigger orders by (coin, lowercased user, oid).
    pub orders: Vec<TriggerOrderState>,
    /// Open positions in parts (one list each, so that a checkpoint
    /// archives them a part at a time): the accounts in the usual form
    /// (`0x` and 40 hex digits) by their first hex digit, then the others;
    /// each part by (lowercased user, coin).
    pub positions: Vec<Vec<PositionEntryState>>,
    /// Fills whose start position disagreed so far.
    pub position_mismatches: u64,
}

/// A tracked trigger order.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TriggerOrderState {
    /// Market.
    pub coin: String,
    /// Owner as the node wrote it.
    pub user: String,
    /// Order id.
    pub oid: u64,
    /// Bid side (else ask).
    pub bid: bool,
    /// Trigger price.
    pub trigger_px: DecimalState,
    /// Limit price.
    pub limit_px: DecimalState,
    /// The order's own size.
    pub orig_sz: DecimalState,
    /// Trigger condition text.
    pub trigger_condition: String,
    /// Order type text.
    pub order_type: String,
    /// Position TP/SL.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// Client order id.
    pub cloid: Option<String>,
    /// The size last published.
    pub sz: DecimalState,
}

/// One open position.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PositionEntryState {
    /// Account, lowercased.
    pub user: String,
    /// Market.
    pub coin: String,
    /// Signed position.
    pub position: DecimalState,
}

/// Candles' state.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct CandlesState {
    /// Tracked intervals, as positions in [`Interval::ALL`], ascending.
    pub intervals: Vec<u8>,
    /// The last folded block.
    pub position: PositionState,
    /// Blocks folded.
    pub folds: u64,
    /// Trades ignored as late.
    pub late_trades: u64,
    /// Per coin with trades, one series per tracked interval.
    pub series: Vec<CoinSeriesState>,
}

/// One coin's candle series.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CoinSeriesState {
    /// Market.
    pub coin: String,
    /// One per tracked interval, in that order.
    pub series: Vec<SeriesState>,
}

/// One (coin, interval) series.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SeriesState {
    /// The live bucket.
    pub live: Option<CandleState>,
    /// Trades in buckets opening before this are late.
    pub floor: i64,
    /// The fold that last changed the series.
    pub changed_at: u64,
}

/// A live candle (its coin and interval are its series').
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CandleState {
    /// Bucket open, Unix ms.
    pub open_time: i64,
    /// Next bucket's open.
    pub next_open: i64,
    /// Open.
    pub open: DecimalState,
    /// High.
    pub high: DecimalState,
    /// Low.
    pub low: DecimalState,
    /// Close.
    pub close: DecimalState,
    /// Σ sz.
    pub volume: AmountState,
    /// Σ px·sz.
    pub notional: AmountState,
    /// Trades folded in.
    pub trades_count: u64,
    /// Finest price scale seen.
    pub price_scale: u8,
    /// Block that last changed it.
    pub block_number: u64,
    /// That block's time.
    pub time: i64,
}

impl CheckpointState {
    /// The last block folded into anything (0 before the first).
    pub fn block_number(&self) -> u64 {
        self.height.unwrap_or(0)
    }

    /// Resting orders over every book.
    pub fn order_count(&self) -> usize {
        self.books.iter().map(|book| book.orders.len()).sum()
    }
}

/// What the state of an archived checkpoint breaks, for
/// [`super::error::CheckpointError::Damaged`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage(String);

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn damage(reason: impl Into<String>) -> Damage {
    Damage(reason.into())
}

/// [`Needs`] as the bits of [`CheckpointState::needs`].
pub(crate) fn needs_bits(needs: Needs) -> u8 {
    u8::from(needs.books)
        | u8::from(needs.trades) << 1
        | u8::from(needs.fills) << 2
        | u8::from(needs.tpsl) << 3
        | u8::from(needs.candles) << 4
}

/// The [`Needs`] of [`CheckpointState::needs`] bits (unknown bits ignored).
pub(crate) fn needs_of(bits: u8) -> Needs {
    Needs {
        books: bits & 1 != 0,
        trades: bits & 2 != 0,
        fills: bits & 4 != 0,
        tpsl: bits & 8 != 0,
        candles: bits & 16 != 0,
    }
}

/// Whether `held` folds every part `wanted` does.
pub(crate) fn covers(held: Needs, wanted: Needs) -> bool {
    held.and(wanted) == held
}

/// `needs` in words (`"books, trades, candles"`).
pub(crate) fn describe(needs: Needs) -> String {
    let parts: Vec<&str> = [
        (needs.books, "books"),
        (needs.trades, "trades"),
        (needs.fills, "fills"),
        (needs.tpsl, "TP/SL"),
        (needs.candles, "candles"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------
// Capture
// ---------------------------------------------------------------------------

/// Copies the state a checkpoint archives out of `market` (see the module
/// docs), whole: for tools and tests, and what [`super::file::encode`]
/// serialises. Taking a checkpoint does not hold such a copy: the
/// checkpointer serialises book by book ([`super::stream`]) into the same
/// bytes.
pub fn capture(market: &Market) -> CheckpointState {
    let mut texts = TextTable::default();
    let books = market
        .fold()
        .books()
        .iter()
        .map(|(coin, book)| capture_book(coin, book, &mut texts))
        .collect();
    let mut rest = capture_rest(market);
    rest.tpsl.orders = market
        .tpsl()
        .orders()
        .map(|order| trigger_state(order.order()))
        .collect();
    rest.tpsl.positions = capture_positions(market.tpsl());
    CheckpointState {
        texts: texts.into_strings(),
        books,
        ..rest
    }
}

/// What [`capture`] copies but the books, the texts and the TP/SL orders
/// and positions (left empty: a streamed checkpoint archives them from the
/// live state, see `stream`).
pub(super) fn capture_rest(market: &Market) -> CheckpointState {
    let fold = market.fold();
    let at = market.position();
    CheckpointState {
        needs: needs_bits(market.needs()),
        height: market.height(),
        time_ms: at.time,
        books_height: fold.height(),
        books_time_ms: fold.time_ms(),
        blocks_folded: fold.blocks_folded(),
        events_seen: fold.events_seen(),
        book_coins: fold
            .book_coins()
            .map(|coins| coins.iter().cloned().collect()),
        unknown_ids: fold
            .unknown_ids()
            .iter()
            .map(|(coin, ids)| UnknownIdsState {
                coin: coin.clone(),
                unknown_oid: ids.unknown_oid,
                missing_status: ids.missing_status,
            })
            .collect(),
        pending_resets: fold
            .pending_resets()
            .iter()
            .map(|reset| ResetState {
                coin: reset.coin.clone(),
                height: reset.height,
                detail: reset.detail.clone(),
            })
            .collect(),
        texts: Vec::new(),
        books: Vec::new(),
        universe: market.universe().iter().cloned().collect(),
        trades: capture_trades(market.trades()),
        fills: position_state(market.fills().position()),
        tpsl: capture_tpsl_rest(market.tpsl()),
        candles: capture_candles(market.candles()),
    }
}

/// Strings numbered in order of first use. The index keeps its own copy of
/// each (inline up to an address's length), so that a lookup compares with
/// bytes in the table rather than with the order the text first came from,
/// somewhere else in a book far larger than the caches.
#[derive(Default)]
pub(super) struct TextTable<'m> {
    index: HashMap<Address, u32, foldhash::fast::RandomState>,
    list: Vec<&'m str>,
}

impl<'m> TextTable<'m> {
    fn id(&mut self, text: &'m str) -> u32 {
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = u32::try_from(self.list.len()).unwrap_or(NONE);
        self.list.push(text);
        self.index.insert(Address::new(text), id);
        id
    }

    pub(super) fn into_strings(self) -> Vec<String> {
        self.list.into_iter().map(str::to_owned).collect()
    }

    /// The texts, by number, borrowed.
    pub(super) fn into_list(self) -> Vec<&'m str> {
        self.list
    }
}

/// The last text numbered for one field: most orders repeat the previous
/// order's order type, time in force and condition (and often owner), and a
/// compare is cheaper than a hash.
#[derive(Default)]
struct Recent<'m> {
    last: Option<(&'m str, u32)>,
}

impl<'m> Recent<'m> {
    fn id(&mut self, text: &'m str, table: &mut TextTable<'m>) -> u32 {
        if let Some((last, id)) = self.last
            && last == text
        {
            return id;
        }
        let id = table.id(text);
        self.last = Some((text, id));
        id
    }
}

/// Per-field memory of the last text, over a whole book.
#[derive(Default)]
struct OrderTexts<'m> {
    user: Recent<'m>,
    trigger_condition: Recent<'m>,
    order_type: Recent<'m>,
    tif: Recent<'m>,
}

/// How many orders ahead of the one being copied a capture asks for the
/// next orders' memory: a deep book's orders are scattered over far more
/// memory than the caches hold, and fetched one after another each order
/// would wait for its own trips to memory.
const CAPTURE_LOOKAHEAD: usize = 8;

fn capture_book<'m>(coin: &str, book: &'m L4Book, texts: &mut TextTable<'m>) -> BookState {
    let mut state = BookState {
        coin: coin.to_owned(),
        levels: Vec::new(),
        orders: Vec::with_capacity(book.len()),
    };
    capture_book_into(book, texts, &mut state.levels, &mut state.orders);
    state
}

/// Appends `book`'s levels and orders (see [`BookState`]) to `levels` and
/// `orders`, numbering their texts in `texts`.
fn capture_book_into<'m>(
    book: &'m L4Book,
    texts: &mut TextTable<'m>,
    levels: &mut Vec<LevelState>,
    orders: &mut Vec<OrderState>,
) {
    let mut resting = capture_levels_into(book, levels);
    orders.reserve(resting.len());
    resting.capture_into(usize::MAX, texts, orders);
}

/// Appends `book`'s levels (see [`BookState`]) to `levels`; its orders are
/// then captured from what this returns, all at once or a part at a time.
pub(super) fn capture_levels_into<'m>(
    book: &'m L4Book,
    levels: &mut Vec<LevelState>,
) -> BookOrders<'m> {
    // The levels and where their orders rest first (walking the levels'
    // links reads no order), then the orders, fetched ahead.
    let mut resting: Vec<&'m RestingOrder> = Vec::with_capacity(book.len());
    let bids = book.bids().map(|level| (true, level));
    let asks = book.asks().map(|level| (false, level));
    for (bid, level) in bids.chain(asks) {
        let before = resting.len();
        resting.extend(level.orders());
        levels.push(LevelState {
            bid,
            px: level.px().into(),
            total: level.running_total().map(Into::into),
            orders: u32::try_from(resting.len() - before).unwrap_or(u32::MAX),
        });
    }
    BookOrders {
        resting,
        next: 0,
        recent: OrderTexts::default(),
    }
}

/// A book's orders in the order its levels list them, captured a part at a
/// time (see [`capture_levels_into`]).
pub(super) struct BookOrders<'m> {
    resting: Vec<&'m RestingOrder>,
    /// The first order not captured yet.
    next: usize,
    recent: OrderTexts<'m>,
}

impl<'m> BookOrders<'m> {
    /// Orders in the book.
    pub(super) fn len(&self) -> usize {
        self.resting.len()
    }

    /// Whether every order was captured.
    pub(super) fn done(&self) -> bool {
        self.next == self.resting.len()
    }

    /// Appends the next `most` orders (fewer at the end) to `orders`,
    /// numbering their texts in `texts`.
    pub(super) fn capture_into(
        &mut self,
        most: usize,
        texts: &mut TextTable<'m>,
        orders: &mut Vec<OrderState>,
    ) {
        let end = self.next.saturating_add(most).min(self.resting.len());
        for at in self.next..end {
            if let Some(ahead) = self.resting.get(at + CAPTURE_LOOKAHEAD) {
                prefetch_all(*ahead);
            }
            orders.push(capture_order(self.resting[at], texts, &mut self.recent));
        }
        self.next = end;
    }
}

fn capture_order<'m>(
    order: &'m RestingOrder,
    texts: &mut TextTable<'m>,
    recent: &mut OrderTexts<'m>,
) -> OrderState {
    let mut flags = 0;
    if order.terms.is_trigger {
        flags |= IS_TRIGGER;
    }
    if order.terms.is_position_tpsl {
        flags |= IS_POSITION_TPSL;
    }
    if order.terms.reduce_only {
        flags |= REDUCE_ONLY;
    }
    let (cloid, cloid_bytes) = match &order.cloid {
        None => (NONE, [0; 16]),
        // The usual form, `0x` and 32 lowercase hex digits, prints back the
        // same from its 16 bytes.
        Some(cloid) => match cloid.form() {
            CloidForm::Bytes(bytes) => {
                flags |= CLOID_BYTES;
                (NONE, *bytes)
            }
            CloidForm::Text(text) => (texts.id(text), [0; 16]),
        },
    };
    OrderState {
        oid: order.oid,
        timestamp: order.timestamp,
        limit_px: order.limit_px.units(),
        sz: order.sz.units(),
        trigger_px: order.terms.trigger_px.units(),
        orig_sz: order.orig_sz.units(),
        user: recent.user.id(&order.user, texts),
        trigger_condition: recent
            .trigger_condition
            .id(&order.terms.trigger_condition, texts),
        order_type: recent.order_type.id(&order.terms.order_type, texts),
        tif: order
            .terms
            .tif
            .as_deref()
            .map_or(NONE, |tif| recent.tif.id(tif, texts)),
        cloid,
        cloid_bytes,
        scales: [
            order.limit_px.scale(),
            order.sz.scale(),
            order.terms.trigger_px.scale(),
            order.orig_sz.scale(),
        ],
        flags,
    }
}

impl From<Decimal> for DecimalState {
    fn from(value: Decimal) -> Self {
        Self {
            units: value.units(),
            scale: value.scale(),
        }
    }
}

impl From<Amount> for AmountState {
    fn from(value: Amount) -> Self {
        Self {
            units: value.units(),
            scale: value.scale(),
        }
    }
}

fn position_state((block_number, time): (u64, i64)) -> PositionState {
    PositionState { block_number, time }
}

fn capture_trades(trades: &TradesView) -> TradesState {
    TradesState {
        position: position_state(trades.position()),
        counts: trades
            .counts()
            .iter()
            .map(|(coin, c)| CoinCountsState {
                coin: coin.clone(),
                counts: [
                    c.trades,
                    c.ambiguous_taker,
                    c.same_side,
                    c.mismatch,
                    c.unmatched,
                    c.crowded,
                    c.spot_dust_conversion,
                    c.outcome_complete_set,
                    c.no_trade_id,
                ],
            })
            .collect(),
    }
}

fn capture_positions(tpsl: &TpslView) -> Vec<Vec<PositionEntryState>> {
    let positions = tpsl.positions();
    (0..POSITION_PARTS)
        .map(|part| {
            positions
                .part(part)
                .iter()
                .map(|(user, coin, position)| PositionEntryState {
                    user: user.as_str(&mut [0; 42]).to_owned(),
                    coin: coin.to_owned(),
                    position: position.into(),
                })
                .collect()
        })
        .collect()
}

/// TP/SL's state but its orders and positions (left empty).
fn capture_tpsl_rest(tpsl: &TpslView) -> TpslState {
    TpslState {
        position: position_state(tpsl.position()),
        max_oid: tpsl.max_oid(),
        orders: Vec::new(),
        positions: Vec::new(),
        position_mismatches: tpsl.positions().mismatches(),
    }
}

/// A tracked trigger order as archived.
pub(super) fn trigger_state(order: TriggerOrder) -> TriggerOrderState {
    TriggerOrderState {
        coin: order.coin,
        user: order.user,
        oid: order.oid,
        bid: order.side == Side::Bid,
        trigger_px: order.trigger_px.into(),
        limit_px: order.limit_px.into(),
        orig_sz: order.orig_sz.into(),
        trigger_condition: order.trigger_condition,
        order_type: order.order_type,
        is_position_tpsl: order.is_position_tpsl,
        reduce_only: order.reduce_only,
        timestamp: order.timestamp,
        cloid: order.cloid,
        sz: order.sz.into(),
    }
}

fn interval_code(interval: Interval) -> u8 {
    Interval::ALL
        .iter()
        .position(|&known| known == interval)
        .map_or(u8::MAX, |at| at as u8)
}

fn capture_candles(candles: &CandlesView) -> CandlesState {
    CandlesState {
        intervals: candles
            .intervals()
            .iter()
            .map(|&interval| interval_code(interval))
            .collect(),
        position: position_state(candles.position()),
        folds: candles.folds(),
        late_trades: candles.late_trades(),
        series: candles
            .all_series()
            .map(|(coin, list)| CoinSeriesState {
                coin: coin.to_owned(),
                series: list
                    .iter()
                    .map(|series| SeriesState {
                        live: series.live.as_ref().map(|candle| CandleState {
                            open_time: candle.open_time,
                            next_open: candle.next_open,
                            open: candle.open.into(),
                            high: candle.high.into(),
                            low: candle.low.into(),
                            close: candle.close.into(),
                            volume: candle.volume.into(),
                            notional: candle.notional.into(),
                            trades_count: candle.trades_count,
                            price_scale: candle.price_scale,
                            block_number: candle.block_number,
                            time: candle.time,
                        }),
                        floor: series.floor,
                        changed_at: series.changed_at,
                    })
                    .collect(),
            })
            .collect(),
    }
}

// ---------------------------------------------------------------------------
// Restore
// ---------------------------------------------------------------------------

/// The parts an archived checkpoint folded.
pub(crate) fn held_needs(state: &ArchivedCheckpointState) -> Needs {
    needs_of(state.needs)
}

/// The last block of an archived checkpoint (0 before the first).
pub(crate) fn archived_block_number(state: &ArchivedCheckpointState) -> u64 {
    state.height.as_ref().map_or(0, |h| h.to_native())
}

/// Rebuilds the market an archived (and validated) checkpoint holds, folding
/// `needs` from here on (a subset of what it held: see [`held_needs`]).
/// After each book `read_below` is called with the address past its last
/// order: the archive lays the books out first, in order, so nothing below
/// it is read again (a caller holding the archive in a mapping lets go of
/// those pages).
///
/// # Errors
/// [`Damage`] when the state breaks one of its rules (see the module docs).
pub(crate) fn restore(
    state: &ArchivedCheckpointState,
    needs: Needs,
    read_below: &mut dyn FnMut(*const u8),
) -> Result<Market, Damage> {
    if state.needs & !31 != 0 {
        return Err(damage(format!("unknown needs bits {:#x}", state.needs)));
    }
    let texts: Vec<&str> = state
        .texts
        .iter()
        .map(rkyv::string::ArchivedString::as_str)
        .collect();
    let mut books = Books::new();
    let mut previous: Option<&str> = None;
    for book in state.books.iter() {
        let coin = book.coin.as_str();
        if previous.is_some_and(|previous| previous >= coin) {
            return Err(damage(format!("book {coin:?} out of order")));
        }
        previous = Some(coin);
        books.replace(coin, restore_book(book, &texts)?);
        read_below(book.orders.as_slice().as_ptr_range().end.cast());
    }
    let book_coins = state
        .book_coins
        .as_ref()
        .map(|coins| coins.iter().map(|coin| coin.as_str().to_owned()).collect());
    let mut unknown = BTreeMap::new();
    for ids in state.unknown_ids.iter() {
        unknown.insert(
            ids.coin.as_str().to_owned(),
            UnknownIds {
                unknown_oid: counter(ids.unknown_oid.to_native(), "unknown oid count")?,
                missing_status: counter(ids.missing_status.to_native(), "missing status count")?,
            },
        );
    }
    let pending_resets = state
        .pending_resets
        .iter()
        .map(|reset| {
            Ok(CoinReset {
                coin: reset.coin.as_str().to_owned(),
                height: counter(reset.height.to_native(), "reset height")?,
                detail: reset.detail.as_str().to_owned(),
            })
        })
        .collect::<Result<_, Damage>>()?;
    let fold = Engine::restored(EngineParts {
        books,
        height: optional_height(state.books_height.as_ref().map(|h| h.to_native()))?,
        time_ms: state.books_time_ms.to_native(),
        unknown,
        pending_resets,
        blocks: counter(state.blocks_folded.to_native(), "blocks folded")?,
        events: counter(state.events_seen.to_native(), "events seen")?,
        book_coins,
    });
    Ok(Market::restored(MarketParts {
        needs,
        fold,
        height: optional_height(state.height.as_ref().map(|h| h.to_native()))?,
        time_ms: state.time_ms.to_native(),
        trades: restore_trades(&state.trades)?,
        fills: FillsView::restored(
            state.fills.block_number.to_native(),
            state.fills.time.to_native(),
        ),
        tpsl: restore_tpsl(&state.tpsl, read_below)?,
        candles: restore_candles(&state.candles)?,
        universe: state
            .universe
            .iter()
            .map(|coin| coin.as_str().to_owned())
            .collect::<BTreeSet<String>>(),
    }))
}

fn counter(value: u64, what: &str) -> Result<u64, Damage> {
    if value < COUNTER_LIMIT {
        Ok(value)
    } else {
        Err(damage(format!("{what} {value} out of range")))
    }
}

fn optional_height(height: Option<u64>) -> Result<Option<u64>, Damage> {
    height.map(|h| counter(h, "height")).transpose()
}

fn decimal(units: i64, scale: u8) -> Result<Decimal, Damage> {
    Decimal::new(units, scale).map_err(|_| damage(format!("scale {scale} above {MAX_SCALE}")))
}

fn archived_decimal(value: &ArchivedDecimalState) -> Result<Decimal, Damage> {
    decimal(value.units.to_native(), value.scale)
}

fn amount(value: &ArchivedAmountState, max_scale: u8) -> Result<Amount, Damage> {
    if value.scale > max_scale {
        return Err(damage(format!(
            "candle sum scale {} above {max_scale}",
            value.scale
        )));
    }
    Ok(Amount::new(value.units.to_native(), value.scale))
}

fn text<'t>(texts: &[&'t str], id: u32, what: &str) -> Result<&'t str, Damage> {
    texts
        .get(id as usize)
        .copied()
        .ok_or_else(|| damage(format!("{what} text {id} out of range")))
}

fn optional_text<'t>(texts: &[&'t str], id: u32, what: &str) -> Result<Option<&'t str>, Damage> {
    if id == NONE {
        Ok(None)
    } else {
        text(texts, id, what).map(Some)
    }
}

fn restore_book(state: &ArchivedBookState, texts: &[&str]) -> Result<L4Book, Damage> {
    let coin = state.coin.as_str();
    let mut book = L4Book::new();
    book.reserve(state.orders.len());
    let mut orders = state.orders.iter();
    for level_state in state.levels.iter() {
        let side = if level_state.bid {
            Side::Bid
        } else {
            Side::Ask
        };
        let px = archived_decimal(&level_state.px)?;
        let count = level_state.orders.to_native();
        if count == 0 {
            return Err(damage(format!("{coin}: empty level at {px}")));
        }
        let level = book.append_level(side, px).ok_or_else(|| {
            damage(format!(
                "{coin}: {} level {px} out of book order",
                side.as_str()
            ))
        })?;
        for _ in 0..count {
            let order = orders
                .next()
                .ok_or_else(|| damage(format!("{coin}: fewer orders than its levels hold")))?;
            let order = restore_order(order, side, texts)?;
            let oid = order.oid;
            if !book.append_order(level, order) {
                return Err(damage(format!(
                    "{coin}: order {oid} repeated or off its level's price {px}"
                )));
            }
        }
        let total = match level_state.total.as_ref() {
            Some(total) => Some(archived_decimal(total)?),
            None => None,
        };
        book.set_running_total(level, total);
    }
    if orders.next().is_some() {
        return Err(damage(format!("{coin}: more orders than its levels hold")));
    }
    Ok(book)
}

fn restore_order(
    state: &ArchivedOrderState,
    side: Side,
    texts: &[&str],
) -> Result<RestingOrder, Damage> {
    let flags = state.flags;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(damage(format!("order flags {flags:#x}")));
    }
    let [px_scale, sz_scale, trigger_scale, orig_scale] = state.scales;
    let cloid = if flags & CLOID_BYTES != 0 {
        Some(Cloid::from_bytes(state.cloid_bytes))
    } else {
        optional_text(texts, state.cloid.to_native(), "client order id")?.map(Cloid::new)
    };
    let terms = Terms {
        trigger_condition: Short::new(text(
            texts,
            state.trigger_condition.to_native(),
            "trigger condition",
        )?),
        is_trigger: flags & IS_TRIGGER != 0,
        trigger_px: decimal(state.trigger_px.to_native(), trigger_scale)?,
        is_position_tpsl: flags & IS_POSITION_TPSL != 0,
        reduce_only: flags & REDUCE_ONLY != 0,
        order_type: Short::new(text(texts, state.order_type.to_native(), "order type")?),
        tif: optional_text(texts, state.tif.to_native(), "time in force")?.map(Short::new),
    };
    Ok(RestingOrder {
        user: Owner::new(text(texts, state.user.to_native(), "owner")?),
        oid: state.oid.to_native(),
        side,
        limit_px: decimal(state.limit_px.to_native(), px_scale)?,
        sz: decimal(state.sz.to_native(), sz_scale)?,
        timestamp: state.timestamp.to_native(),
        orig_sz: decimal(state.orig_sz.to_native(), orig_scale)?,
        cloid,
        terms: terms.shared(),
    })
}

fn restore_trades(state: &ArchivedTradesState) -> Result<TradesView, Damage> {
    let mut counts = BTreeMap::new();
    for coin in state.counts.iter() {
        let mut values = [0u64; 9];
        for (value, archived) in values.iter_mut().zip(coin.counts.iter()) {
            *value = counter(archived.to_native(), "trade count")?;
        }
        let [
            trades,
            ambiguous_taker,
            same_side,
            mismatch,
            unmatched,
            crowded,
            spot_dust_conversion,
            outcome_complete_set,
            no_trade_id,
        ] = values;
        counts.insert(
            coin.coin.as_str().to_owned(),
            CoinCounts {
                trades,
                ambiguous_taker,
                same_side,
                mismatch,
                unmatched,
                crowded,
                spot_dust_conversion,
                outcome_complete_set,
                no_trade_id,
            },
        );
    }
    Ok(TradesView::restored(
        state.position.block_number.to_native(),
        state.position.time.to_native(),
        counts,
    ))
}

/// TP/SL's state. Trigger orders are put in the tracker's table one at a
/// time, not gathered first. Positions are many (hundreds of thousands on
/// mainnet): their table is made at its final size at once, and the pages
/// of the entries restored are let go of as the restore goes on
/// (`read_below`; the orders are archived before them).
fn restore_tpsl(
    state: &ArchivedTpslState,
    read_below: &mut dyn FnMut(*const u8),
) -> Result<TpslView, Damage> {
    let mut view = TpslView::restoring(
        state.max_oid.to_native(),
        state.position.block_number.to_native(),
        state.position.time.to_native(),
    );
    for order in state.orders.iter() {
        view.restore(&TriggerOrder {
            coin: order.coin.as_str().to_owned(),
            user: order.user.as_str().to_owned(),
            oid: order.oid.to_native(),
            side: if order.bid { Side::Bid } else { Side::Ask },
            trigger_px: archived_decimal(&order.trigger_px)?,
            limit_px: archived_decimal(&order.limit_px)?,
            orig_sz: archived_decimal(&order.orig_sz)?,
            trigger_condition: order.trigger_condition.as_str().to_owned(),
            order_type: order.order_type.as_str().to_owned(),
            is_position_tpsl: order.is_position_tpsl,
            reduce_only: order.reduce_only,
            timestamp: order.timestamp.to_native(),
            cloid: order.cloid.as_ref().map(|cloid| cloid.as_str().to_owned()),
            sz: archived_decimal(&order.sz)?,
        });
    }
    let mut positions = Positions::restoring(
        counter(state.position_mismatches.to_native(), "position mismatches")?,
        state
            .positions
            .iter()
            .map(rkyv::vec::ArchivedVec::len)
            .sum(),
    );
    for part in state.positions.iter() {
        for (at, entry) in part.iter().enumerate() {
            positions.restore(
                entry.user.as_str(),
                entry.coin.as_str(),
                archived_decimal(&entry.position)?,
            );
            if at % 4096 == 4095 {
                // A part's texts are archived before its entries, in their
                // order, and the parts one after another.
                read_below(entry.user.as_str().as_ptr());
            }
        }
        read_below(part.as_slice().as_ptr_range().end.cast());
    }
    Ok(view.with_positions(positions))
}

fn restore_candles(state: &ArchivedCandlesState) -> Result<CandlesView, Damage> {
    let mut intervals = Vec::with_capacity(state.intervals.len());
    for &code in state.intervals.iter() {
        let interval = Interval::ALL
            .get(usize::from(code))
            .copied()
            .ok_or_else(|| damage(format!("candle interval code {code}")))?;
        if intervals.last().is_some_and(|&last| last >= interval) {
            return Err(damage("candle intervals out of order"));
        }
        intervals.push(interval);
    }
    let folds = counter(state.folds.to_native(), "candle folds")?;
    let mut series = BTreeMap::new();
    for coin_series in state.series.iter() {
        let coin = coin_series.coin.as_str();
        if coin_series.series.len() != intervals.len() {
            return Err(damage(format!(
                "{coin}: {} candle series for {} intervals",
                coin_series.series.len(),
                intervals.len()
            )));
        }
        let list = coin_series
            .series
            .iter()
            .zip(&intervals)
            .map(|(state, &interval)| {
                let changed_at = state.changed_at.to_native();
                if changed_at > folds {
                    return Err(damage(format!(
                        "{coin} {interval}: changed after the last fold"
                    )));
                }
                let live = match state.live.as_ref() {
                    Some(candle) => Some(restore_candle(candle, coin, interval)?),
                    None => None,
                };
                Ok(Series {
                    live,
                    floor: state.floor.to_native(),
                    changed_at,
                })
            })
            .collect::<Result<Vec<_>, Damage>>()?;
        if series.insert(coin.to_owned(), list).is_some() {
            return Err(damage(format!("{coin}: candle series twice")));
        }
    }
    Ok(CandlesView::restored(
        intervals,
        series,
        (
            state.position.block_number.to_native(),
            state.position.time.to_native(),
        ),
        folds,
        counter(state.late_trades.to_native(), "late trades")?,
    ))
}

fn restore_candle(
    state: &ArchivedCandleState,
    coin: &str,
    interval: Interval,
) -> Result<Candle, Damage> {
    let open_time = state.open_time.to_native();
    let next_open = state.next_open.to_native();
    if !(-TIME_LIMIT..=TIME_LIMIT).contains(&open_time)
        || interval.bucket_open(open_time) != open_time
        || interval.next_open(open_time) != next_open
    {
        return Err(damage(format!(
            "{coin} {interval}: bucket {open_time}..{next_open} off the interval's boundaries"
        )));
    }
    Ok(Candle {
        coin: coin.to_owned(),
        interval,
        open_time,
        next_open,
        open: archived_decimal(&state.open)?,
        high: archived_decimal(&state.high)?,
        low: archived_decimal(&state.low)?,
        close: archived_decimal(&state.close)?,
        volume: amount(&state.volume, MAX_SCALE)?,
        notional: amount(&state.notional, 2 * MAX_SCALE)?,
        trades_count: counter(state.trades_count.to_native(), "candle trade count")?,
        price_scale: state.price_scale,
        block_number: state.block_number.to_native(),
        time: state.time.to_native(),
    })
}
