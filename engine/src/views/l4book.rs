//! The L4 book view per coin: a snapshot frame with every resting order,
//! then one diff frame per block that had events for the coin, whose `data`
//! is the JSON object `{"order_statuses":[…],"book_diffs":[…]}` built from
//! the node's own event bytes (each event byte-identical to the source). A
//! coin reset from a node snapshot sends a fresh snapshot frame.
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

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::book::l4::{L4Book, Level, RestingOrder};
use crate::coin::outcome_sibling;
use crate::event::Side;
use crate::fold::{BlockChanges, Engine};
use crate::num::{Px, Sz};
use crate::views::{ViewError, position};

/// JSON text shared between frames and written verbatim when serialised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJson(Arc<str>);

impl RawJson {
    /// The JSON bytes (the `data` field of `L4BookDiff`).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for RawJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

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
            trigger_condition: order.trigger_condition.to_string(),
            is_trigger: order.is_trigger,
            trigger_px: order.trigger_px,
            is_position_tpsl: order.is_position_tpsl,
            reduce_only: order.reduce_only,
            order_type: order.order_type.to_string(),
            tif: order.tif.as_deref().map(str::to_owned),
            cloid: order.cloid.as_deref().map(str::to_owned),
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

/// Shared state: the coins someone watches and their last block's data.
#[derive(Debug, Default)]
pub struct L4BookView {
    watchers: BTreeMap<String, usize>,
    data: BTreeMap<String, RawJson>,
    resets: Vec<String>,
}

/// Builds `{"order_statuses":[…],"book_diffs":[…]}` from exact event bytes.
pub fn diff_data(order_statuses: &[impl AsRef<[u8]>], book_diffs: &[impl AsRef<[u8]>]) -> String {
    let len: usize = order_statuses
        .iter()
        .map(|e| e.as_ref().len() + 1)
        .chain(book_diffs.iter().map(|e| e.as_ref().len() + 1))
        .sum();
    let mut out = Vec::with_capacity(len + 40);
    out.extend_from_slice(b"{\"order_statuses\":[");
    join(&mut out, order_statuses);
    out.extend_from_slice(b"],\"book_diffs\":[");
    join(&mut out, book_diffs);
    out.extend_from_slice(b"]}");
    String::from_utf8_lossy(&out).into_owned()
}

fn join(out: &mut Vec<u8>, events: &[impl AsRef<[u8]>]) {
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(event.as_ref());
    }
}

impl L4BookView {
    /// Coins with watchers (their raw events are kept per block).
    pub fn coins(&self) -> impl Iterator<Item = &str> + '_ {
        self.watchers.keys().map(String::as_str)
    }

    /// The last block's data for `coin`, if it had events.
    pub fn data(&self, coin: &str) -> Option<&RawJson> {
        self.data.get(coin)
    }

    /// Whether `coin` was reset in the last block.
    pub fn was_reset(&self, coin: &str) -> bool {
        self.resets.iter().any(|c| c == coin)
    }

    fn watch(&mut self, coin: &str) {
        *self.watchers.entry(coin.to_owned()).or_insert(0) += 1;
    }

    fn unwatch(&mut self, coin: &str) {
        if let Some(count) = self.watchers.get_mut(coin) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.watchers.remove(coin);
            }
        }
    }

    pub(crate) fn update(&mut self, changes: &BlockChanges) {
        self.data.clear();
        for (coin, events) in &changes.raw {
            if self.watchers.contains_key(coin) {
                let text = diff_data(&events.order_statuses, &events.book_diffs);
                self.data.insert(coin.clone(), RawJson(text.into()));
            }
        }
        self.resets = changes.resets.iter().cloned().collect();
    }
}

/// `L4BookRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L4BookRequest {
    /// Market (required).
    pub coin: String,
    /// Mirror projection of the sibling outcome market (omitted = true;
    /// only outcome coins `#n` have one).
    pub mirror: Option<bool>,
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
    /// The sibling outcome market mirrored onto this book, if any.
    sibling: Option<String>,
}

impl L4BookSubscription {
    /// Subscribes; the opening frame is the coin's full book.
    ///
    /// # Errors
    /// [`ViewError::MissingCoin`] when no coin is given.
    pub fn open(
        engine: &mut Engine,
        request: &L4BookRequest,
    ) -> Result<(Self, L4BookUpdate), ViewError> {
        if request.coin.is_empty() {
            return Err(ViewError::MissingCoin { view: "l4book" });
        }
        let sibling = if request.mirror.unwrap_or(true) {
            outcome_sibling(&request.coin)
        } else {
            None
        };
        let view = &mut engine.views_mut().0.l4book;
        view.watch(&request.coin);
        if let Some(sibling) = &sibling {
            view.watch(sibling);
        }
        let subscription = Self {
            coin: request.coin.clone(),
            sibling,
        };
        let frame = subscription.snapshot(engine);
        Ok((subscription, frame))
    }

    /// The frame of the last folded block: a snapshot after a reset, else a
    /// diff when the coin had events.
    pub fn on_block(&self, engine: &Engine) -> Option<L4BookUpdate> {
        let view = &engine.views().l4book;
        let sibling = self.sibling.as_deref();
        if view.was_reset(&self.coin) || sibling.is_some_and(|s| view.was_reset(s)) {
            return Some(self.snapshot(engine));
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
                RawJson(text.into())
            }
        };
        let (block_number, time) = position(engine);
        Some(L4BookUpdate::Diff(L4BookDiff {
            time,
            block_number,
            data,
        }))
    }

    /// Unsubscribes.
    pub fn close(self, engine: &mut Engine) {
        let view = &mut engine.views_mut().0.l4book;
        view.unwatch(&self.coin);
        if let Some(sibling) = &self.sibling {
            view.unwatch(sibling);
        }
    }

    fn snapshot(&self, engine: &Engine) -> L4BookUpdate {
        let (block_number, time) = position(engine);
        let empty = L4Book::new();
        let book = engine.books().get(&self.coin).unwrap_or(&empty);
        let side = |levels: Box<dyn Iterator<Item = Level<'_>> + '_>| -> Vec<L4Order> {
            levels
                .flat_map(Level::orders)
                .map(|order| L4Order::of(&self.coin, order))
                .collect()
        };
        let mut bids = side(book.side(Side::Bid));
        let mut asks = side(book.side(Side::Ask));
        if let Some(sibling) = self.sibling.as_deref().and_then(|s| engine.books().get(s)) {
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
            time,
            block_number,
            bids,
            asks,
        })
    }
}
