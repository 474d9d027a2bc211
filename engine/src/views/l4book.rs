//! The L4 book of one coin: a snapshot frame with every resting order, then
//! one diff frame per block that had events for the coin, whose `data` is
//! the JSON object `{"order_statuses":[…],"book_diffs":[…]}` built from the
//! node's own event bytes (each event byte-identical to the source). A coin
//! reset from a node snapshot sends a fresh snapshot frame.
//!
//! # Outcome mirror
//!
//! Outcome markets come in complementary pairs `#n` / `#(n^1)`: buying one
//! side at `p` is the same exposure as selling the other at `1 − p`. A
//! subscription to an outcome coin with `mirror` omitted or true also shows
//! the sibling's resting orders projected onto this book: side flipped,
//! `limit_px` = `1 − p` (exact, on the same tick grid), every other field
//! kept, `coin` = this coin and `synthetic` = true. Within a price level,
//! native orders come first (time priority), then projected ones (the
//! sibling's time priority). Diff frames then also carry the sibling's
//! events of the block, byte-identical, under
//! `"mirror":{"coin":…,"order_statuses":[…],"book_diffs":[…]}`; a client
//! applies them to the projected orders with the same rule. A block where
//! only the sibling had events sends a diff too, and a reset of either coin
//! sends a fresh snapshot. `mirror = false`, or a coin that is not `#n`,
//! shows native orders only.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::book::l4::{L4Book, Level, RestingOrder};
use crate::coin::outcome_sibling;
use crate::event::Side;
use crate::market::raw::RawJson;
use crate::market::{Market, Needs};
use crate::num::{Px, Sz};
use crate::table::order::{
    DiffEvent, RawBookDiff, STATUS, StatusEvent, decimal, status_cells, unreadable,
};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, TableError, block_cells};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, distinct};

/// `L4Order`: one resting order with its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L4Order {
    /// Owner.
    pub user: String,
    /// Market.
    pub coin: String,
    /// `B` or `A`.
    pub side: Side,
    /// Resting price.
    pub limit_px: Px,
    /// Resting size.
    pub sz: Sz,
    /// Order id.
    pub oid: u64,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// `"N/A"`, `"Triggered"`, ...
    pub trigger_condition: String,
    /// Untriggered trigger order.
    pub is_trigger: bool,
    /// Trigger price.
    pub trigger_px: Px,
    /// Position TP/SL.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// Order type.
    pub order_type: String,
    /// Time in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tif: Option<String>,
    /// Client order id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloid: Option<String>,
    /// True only for a synthesised mirror order.
    pub synthetic: bool,
}

impl L4Order {
    /// The frame form of a resting order of `coin`.
    pub fn of(coin: &str, order: &RestingOrder) -> Self {
        Self {
            user: order.user.to_string(),
            coin: coin.to_owned(),
            side: order.side,
            limit_px: order.limit_px,
            sz: order.sz,
            oid: order.oid,
            timestamp: order.timestamp,
            trigger_condition: order.terms.trigger_condition.to_string(),
            is_trigger: order.terms.is_trigger,
            trigger_px: order.terms.trigger_px,
            is_position_tpsl: order.terms.is_position_tpsl,
            reduce_only: order.terms.reduce_only,
            order_type: order.terms.order_type.to_string(),
            tif: order.terms.tif.as_deref().map(str::to_owned),
            cloid: order.cloid.as_ref().map(ToString::to_string),
            synthetic: false,
        }
    }
}

/// `L4BookSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L4BookSnapshot {
    /// Market.
    pub coin: String,
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Bids, best first, time priority inside a level.
    pub bids: Vec<L4Order>,
    /// Asks, best first, time priority inside a level.
    pub asks: Vec<L4Order>,
}

/// `L4BookDiff`: one block's events for the coin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L4BookDiff {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// `{"order_statuses":[…],"book_diffs":[…]}`, events byte-identical.
    pub data: RawJson,
}

/// `L4BookUpdate`: exactly one of `snapshot` or `diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum L4BookUpdate {
    /// Full book.
    Snapshot(L4BookSnapshot),
    /// One block's events.
    Diff(L4BookDiff),
}

/// `L4BookRequest`, normalised: `mirror` is true only for an outcome coin
/// whose sibling is mirrored.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L4BookKey {
    /// Market.
    pub coin: String,
    /// Mirror the outcome sibling's orders.
    pub mirror: bool,
}

impl L4BookKey {
    /// The key of a request for `coin` with `mirror` as asked (omitted =
    /// true): only outcome coins have a sibling to mirror, so other coins
    /// share one key whatever the flag says.
    pub fn new(coin: String, mirror: Option<bool>) -> Self {
        let mirror = mirror.unwrap_or(true) && outcome_sibling(&coin).is_some();
        Self { coin, mirror }
    }
}

/// `order` of the sibling market projected onto `coin`'s book: the other
/// side at `1 − limit_px`. `None` when the price is not inside (0, 1).
fn project(coin: &str, order: &RestingOrder) -> Option<L4Order> {
    let one = Px::new(1, 0).ok()?;
    let px = one.checked_sub(order.limit_px)?;
    if px.is_negative() || px.is_zero() {
        return None;
    }
    let mut projected = L4Order::of(coin, order);
    projected.side = order.side.opposite();
    projected.limit_px = px;
    projected.synthetic = true;
    Some(projected)
}

/// One L4 book subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L4BookSubscription {
    coin: String,
    sibling: Option<String>,
}

impl L4BookSubscription {
    /// The diff frame of the block just folded (a snapshot frame after a
    /// reset), if the coin or its mirrored sibling had events.
    fn diff(&self, market: &Market) -> Option<L4BookUpdate> {
        let view = market.raw();
        let sibling = self.sibling.as_deref();
        if view.was_reset(&self.coin) || sibling.is_some_and(|s| view.was_reset(s)) {
            return Some(self.snapshot(market));
        }
        let native = view.data(&self.coin);
        let data = match sibling.and_then(|s| Some((s, view.data(s)?))) {
            None => native?.clone(),
            Some((sibling, mirrored)) => {
                const EMPTY: &str = "{\"order_statuses\":[],\"book_diffs\":[]}";
                let native = native.map_or(EMPTY, RawJson::as_str);
                let mut text = String::with_capacity(native.len() + mirrored.as_str().len() + 32);
                text.push_str(native.strip_suffix('}').unwrap_or(native));
                text.push_str(",\"mirror\":{\"coin\":");
                // Coin names are plain ASCII identifiers; quote them as JSON.
                text.push_str(&serde_json::to_string(sibling).unwrap_or_default());
                text.push(',');
                let events = mirrored.as_str();
                text.push_str(events.strip_prefix('{').unwrap_or(events));
                text.push('}');
                RawJson::new(text)
            }
        };
        let at = market.position();
        Some(L4BookUpdate::Diff(L4BookDiff {
            time: at.time,
            block_number: at.block_number,
            data,
        }))
    }

    /// The snapshot frame: every resting order of the coin (and the
    /// projected ones of its mirrored sibling), best first.
    fn snapshot(&self, market: &Market) -> L4BookUpdate {
        let at = market.position();
        let empty = L4Book::new();
        let book = market.books().get(&self.coin).unwrap_or(&empty);
        let side = |levels: Box<dyn Iterator<Item = Level<'_>> + '_>| -> Vec<L4Order> {
            levels
                .flat_map(Level::orders)
                .map(|order| L4Order::of(&self.coin, order))
                .collect()
        };
        let mut bids = side(book.side(Side::Bid));
        let mut asks = side(book.side(Side::Ask));
        if let Some(sibling) = self.sibling.as_deref().and_then(|s| market.books().get(s)) {
            // A sibling ask at p is a bid here at 1 − p, and the other way.
            for (from, into) in [(Side::Ask, &mut bids), (Side::Bid, &mut asks)] {
                into.extend(
                    sibling
                        .side(from)
                        .flat_map(Level::orders)
                        .filter_map(|order| project(&self.coin, order)),
                );
            }
            // Best first; stable, so a level keeps native orders first.
            bids.sort_by_key(|order| std::cmp::Reverse(order.limit_px));
            asks.sort_by_key(|order| order.limit_px);
        }
        L4BookUpdate::Snapshot(L4BookSnapshot {
            coin: self.coin.clone(),
            time: at.time,
            block_number: at.block_number,
            bids,
            asks,
        })
    }
}

impl View for L4BookSubscription {
    type Key = L4BookKey;
    type Frame = L4BookUpdate;
    const NAME: &'static str = "l4book";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs::BOOKS;

    fn keys(selection: &Selection) -> Result<Vec<L4BookKey>, ViewError> {
        let coins = distinct(&selection.coins);
        if coins.is_empty() {
            return Err(ViewError::MissingCoin { view: Self::NAME });
        }
        Ok(coins
            .into_iter()
            .map(|coin| L4BookKey::new(coin, None))
            .collect())
    }

    fn listed_coins(key: &L4BookKey) -> Vec<&str> {
        vec![key.coin.as_str()]
    }

    /// Watches the coin (and its mirrored sibling); the opening frame is
    /// the snapshot.
    fn open(
        market: &mut Market,
        key: &L4BookKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<L4BookUpdate>), ViewError> {
        if key.coin.is_empty() {
            return Err(ViewError::MissingCoin { view: Self::NAME });
        }
        let sibling = if key.mirror {
            outcome_sibling(&key.coin)
        } else {
            None
        };
        let raw = market.raw_mut();
        raw.watch(&key.coin);
        if let Some(sibling) = &sibling {
            raw.watch(sibling);
        }
        let subscription = Self {
            coin: key.coin.clone(),
            sibling,
        };
        let frame = subscription.snapshot(market);
        Ok((subscription, vec![frame]))
    }

    /// A diff frame when the block had events for the coin (or its
    /// sibling); a snapshot frame after a reset.
    fn on_block(&mut self, market: &Market) -> Vec<L4BookUpdate> {
        self.diff(market).into_iter().collect()
    }

    fn close(self, market: &mut Market) {
        let raw = market.raw_mut();
        raw.unwatch(&self.coin);
        if let Some(sibling) = &self.sibling {
            raw.unwatch(sibling);
        }
    }
}

// `l4book`: one row per resting order of a snapshot frame, and per node
// event (order status, raw book diff) of a diff frame.

const NAME: &str = "l4book";

/// A diff frame's `data`: the coin's events, and its mirrored sibling's.
#[derive(Debug, Deserialize)]
struct Events<'a> {
    #[serde(borrow)]
    order_statuses: Vec<StatusEvent<'a>>,
    #[serde(borrow)]
    book_diffs: Vec<DiffEvent<'a>>,
    #[serde(borrow, default)]
    mirror: Option<Mirror<'a>>,
}

#[derive(Debug, Deserialize)]
struct Mirror<'a> {
    #[serde(borrow)]
    order_statuses: Vec<StatusEvent<'a>>,
    #[serde(borrow)]
    book_diffs: Vec<DiffEvent<'a>>,
}

// Column indexes of the row (after `block_number`, `block_time`).
const KIND: usize = 2;
const MIRROR: usize = 3;
const DIFF: usize = 4;
/// Where [`STATUS`]'s columns start.
const STATUS_AT: usize = 5;
const COLUMNS: usize = STATUS_AT + STATUS.len();

const fn columns() -> [Column; COLUMNS] {
    let head = [
        BLOCK[0],
        BLOCK[1],
        Column::required(
            "kind",
            Kind::Text,
            "`order` (a snapshot's resting order), `status` (an order status) or `diff` (a raw book diff)",
        ),
        Column::required(
            "mirror",
            Kind::Bool,
            "true: the mirrored outcome sibling's (an order projected onto this book, or the sibling's event)",
        ),
        Column::optional(
            "diff",
            Kind::Text,
            "on `diff` rows: `new`, `update` or `remove`",
        ),
    ];
    let mut out = [BLOCK[0]; COLUMNS];
    let mut i = 0;
    while i < STATUS_AT {
        out[i] = head[i];
        i += 1;
    }
    while i < COLUMNS {
        // Every order column may be empty: a diff row fills only the ones
        // a raw book diff has.
        out[i] = STATUS[i - STATUS_AT];
        out[i].nullable = true;
        i += 1;
    }
    out
}

/// A status column's index in the row (evaluated at compile time where
/// used: `const { at("user") }`).
const fn at(name: &str) -> usize {
    let mut i = 0;
    while i < STATUS.len() {
        if same(STATUS[i].name, name) {
            return STATUS_AT + i;
        }
        i += 1;
    }
    panic!("not a status column")
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl Tabular for L4BookSubscription {
    const TABLE: Table = Table {
        name: NAME,
        row: "one resting order of a snapshot frame (kind `order`: bids best first, then asks, \
              time priority within a level), or one node event of a diff frame (kinds `status` \
              and `diff`: the block's order statuses, then its raw book diffs, in file order, \
              then the mirrored sibling's); the order columns hold what the event has (a diff: \
              its price in `limit_px`, the resting size after it in `sz` — empty on `remove` — \
              and an update's size before it in `orig_sz`)",
        columns: &columns(),
    };

    fn block(frame: &L4BookUpdate) -> (u64, i64) {
        match frame {
            L4BookUpdate::Snapshot(snapshot) => (snapshot.block_number, snapshot.time),
            L4BookUpdate::Diff(diff) => (diff.block_number, diff.time),
        }
    }

    fn rows<S: RowSink>(frame: &L4BookUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let mut cells = vec![Cell::Null; COLUMNS];
        cells[0] = number;
        cells[1] = time;
        match frame {
            L4BookUpdate::Snapshot(snapshot) => {
                for order in snapshot.bids.iter().chain(&snapshot.asks) {
                    order_row(&mut cells, order);
                    out.row(&cells)?;
                }
            }
            L4BookUpdate::Diff(diff) => {
                let events: Events<'_> =
                    serde_json::from_str(diff.data.as_str()).map_err(|e| unreadable(NAME, &e))?;
                let mirrored = events
                    .mirror
                    .iter()
                    .map(|m| (true, &m.order_statuses, &m.book_diffs));
                for (mirror, statuses, diffs) in
                    std::iter::once((false, &events.order_statuses, &events.book_diffs))
                        .chain(mirrored)
                {
                    for status in statuses {
                        cells[2..].fill(Cell::Null);
                        cells[KIND] = Cell::Text("status");
                        cells[MIRROR] = Cell::Bool(mirror);
                        cells[STATUS_AT..].copy_from_slice(&status_cells(NAME, status)?);
                        out.row(&cells)?;
                    }
                    for event in diffs {
                        diff_row(&mut cells, mirror, event)?;
                        out.row(&cells)?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn order_row<'o>(cells: &mut [Cell<'o>], order: &'o L4Order) {
    cells[2..].fill(Cell::Null);
    cells[KIND] = Cell::Text("order");
    cells[MIRROR] = Cell::Bool(order.synthetic);
    cells[const { at("user") }] = Cell::Text(&order.user);
    cells[const { at("coin") }] = Cell::Text(&order.coin);
    cells[const { at("side") }] = Cell::Text(order.side.as_str());
    cells[const { at("limit_px") }] = Cell::decimal(order.limit_px);
    cells[const { at("sz") }] = Cell::decimal(order.sz);
    cells[const { at("oid") }] = Cell::U64(order.oid);
    cells[const { at("timestamp") }] = Cell::TimeMs(order.timestamp);
    cells[const { at("order_type") }] = Cell::Text(&order.order_type);
    cells[const { at("tif") }] = Cell::text_or_null(order.tif.as_deref());
    cells[const { at("reduce_only") }] = Cell::Bool(order.reduce_only);
    cells[const { at("is_trigger") }] = Cell::Bool(order.is_trigger);
    cells[const { at("trigger_px") }] = Cell::decimal(order.trigger_px);
    cells[const { at("trigger_condition") }] = Cell::Text(&order.trigger_condition);
    cells[const { at("is_position_tpsl") }] = Cell::Bool(order.is_position_tpsl);
    cells[const { at("cloid") }] = Cell::text_or_null(order.cloid.as_deref());
}

fn diff_row<'e>(
    cells: &mut [Cell<'e>],
    mirror: bool,
    event: &'e DiffEvent<'_>,
) -> Result<(), TableError> {
    cells[2..].fill(Cell::Null);
    cells[KIND] = Cell::Text("diff");
    cells[MIRROR] = Cell::Bool(mirror);
    cells[DIFF] = Cell::Text(event.raw_book_diff.name());
    let text = |value: &'e Cow<'_, str>| Cell::Text(value.as_ref());
    match &event.raw_book_diff {
        RawBookDiff::New { sz } => cells[const { at("sz") }] = decimal(NAME, "sz", sz)?,
        RawBookDiff::Update { orig_sz, new_sz } => {
            cells[const { at("sz") }] = decimal(NAME, "sz", new_sz)?;
            cells[const { at("orig_sz") }] = decimal(NAME, "orig_sz", orig_sz)?;
        }
        RawBookDiff::Remove => {}
    }
    cells[const { at("user") }] = text(&event.user);
    cells[const { at("coin") }] = text(&event.coin);
    cells[const { at("side") }] = text(&event.side);
    cells[const { at("limit_px") }] = decimal(NAME, "limit_px", &event.px)?;
    cells[const { at("oid") }] = Cell::U64(event.oid);
    Ok(())
}
