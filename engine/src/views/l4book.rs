//! The L4 book view per coin: a snapshot frame with every resting order,
//! then one diff frame per block that had events for the coin, whose `data`
//! is the JSON object `{"order_statuses":[…],"book_diffs":[…]}` built from
//! the node's own event bytes (each event byte-identical to the source). A
//! coin reset from a node snapshot sends a fresh snapshot frame.
//!
//! Not yet supported: the synthetic `mirror` projection of sibling outcome
//! markets; `synthetic` is always false.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::book::l4::{L4Book, Level, RestingOrder};
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
    /// Mirror projection of sibling outcome markets (not yet supported).
    pub mirror: Option<bool>,
}

/// One L4 book subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L4BookSubscription {
    coin: String,
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
        engine.views_mut().0.l4book.watch(&request.coin);
        let subscription = Self {
            coin: request.coin.clone(),
        };
        let frame = subscription.snapshot(engine);
        Ok((subscription, frame))
    }

    /// The frame of the last folded block: a snapshot after a reset, else a
    /// diff when the coin had events.
    pub fn on_block(&self, engine: &Engine) -> Option<L4BookUpdate> {
        let view = &engine.views().l4book;
        if view.was_reset(&self.coin) {
            return Some(self.snapshot(engine));
        }
        let data = view.data(&self.coin)?;
        let (block_number, time) = position(engine);
        Some(L4BookUpdate::Diff(L4BookDiff {
            time,
            block_number,
            data: data.clone(),
        }))
    }

    /// Unsubscribes.
    pub fn close(self, engine: &mut Engine) {
        engine.views_mut().0.l4book.unwatch(&self.coin);
    }

    fn snapshot(&self, engine: &Engine) -> L4BookUpdate {
        let (block_number, time) = position(engine);
        let empty = L4Book::new();
        let book = engine.books().get(&self.coin).unwrap_or(&empty);
        let side = |levels: Box<dyn Iterator<Item = &Level> + '_>| {
            levels
                .flat_map(Level::orders)
                .map(|order| L4Order::of(&self.coin, order))
                .collect()
        };
        L4BookUpdate::Snapshot(L4BookSnapshot {
            coin: self.coin.clone(),
            time,
            block_number,
            bids: side(book.side(Side::Bid)),
            asks: side(book.side(Side::Ask)),
        })
    }
}
