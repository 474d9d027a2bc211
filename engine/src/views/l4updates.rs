//! Typed L4 order updates: NEW / UPDATE / REMOVE diffs of the coins and
//! users asked for (empty = all; users match case-insensitively). The
//! opening frame is `snapshot=true` with every matching resting order as a
//! NEW diff and `sequence` 1; each later frame adds 1. A REMOVE carries the
//! diff's price and `sz:"0.0"`. When a coin in scope is reset from a node
//! snapshot, the block's frame is a fresh `snapshot=true` frame instead.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::event::Side;
use crate::fold::{BlockChanges, Engine, OrderChange, OrderChangeKind};
use crate::num::{Px, Sz};
use crate::views::{in_scope, position};

/// `L4OrderDiffType`, serialised by its protobuf name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum L4OrderDiffType {
    /// The order now rests.
    #[serde(rename = "L4_ORDER_DIFF_TYPE_NEW")]
    New,
    /// Its size changed.
    #[serde(rename = "L4_ORDER_DIFF_TYPE_UPDATE")]
    Update,
    /// It left the book.
    #[serde(rename = "L4_ORDER_DIFF_TYPE_REMOVE")]
    Remove,
}

/// `L4OrderDiff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L4OrderDiff {
    /// What happened.
    pub diff_type: L4OrderDiffType,
    /// Market.
    pub coin: String,
    /// Order id.
    pub oid: u64,
    /// Owner.
    pub user: String,
    /// Side.
    pub side: Side,
    /// Price.
    pub px: Px,
    /// Size after the change (`0.0` on remove).
    pub sz: Sz,
}

impl L4OrderDiff {
    fn of(change: &OrderChange) -> Self {
        Self {
            diff_type: match change.kind {
                OrderChangeKind::New => L4OrderDiffType::New,
                OrderChangeKind::Update => L4OrderDiffType::Update,
                OrderChangeKind::Remove => L4OrderDiffType::Remove,
            },
            coin: change.coin.as_str().to_owned(),
            oid: change.oid,
            user: change.user.as_str().to_owned(),
            side: change.side,
            px: change.px,
            sz: change.sz,
        }
    }
}

/// `L4OrderUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L4OrderUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Diffs in file order (on a snapshot: book order per coin).
    pub diffs: Vec<L4OrderDiff>,
    /// True = rebuild local state from these diffs.
    pub snapshot: bool,
    /// 1 on the opening snapshot, +1 per frame.
    pub sequence: u64,
}

/// Shared state: the last block's typed changes and resets.
#[derive(Debug, Default)]
pub struct L4UpdatesView {
    changes: Vec<OrderChange>,
    resets: BTreeSet<String>,
    /// The list before last, emptied, for the engine to fill again: a block
    /// has hundreds of changes, and growing a fresh list to that size copied
    /// it several times per block.
    spare: Vec<OrderChange>,
}

impl L4UpdatesView {
    /// The last block's applied changes.
    pub fn changes(&self) -> &[OrderChange] {
        &self.changes
    }

    pub(crate) fn update(&mut self, changes: &mut BlockChanges) {
        let mut previous = std::mem::replace(
            &mut self.changes,
            std::mem::take(&mut changes.order_changes),
        );
        previous.clear();
        self.spare = previous;
        self.resets = std::mem::take(&mut changes.resets);
    }

    /// An empty change list with room for a block's changes.
    pub(crate) fn take_spare(&mut self) -> Vec<OrderChange> {
        std::mem::take(&mut self.spare)
    }
}

/// `L4OrderUpdatesRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L4OrderUpdatesRequest {
    /// Markets (empty = all).
    pub coins: Vec<String>,
    /// Owners (empty = all), case-insensitive.
    pub users: Vec<String>,
}

/// One L4 order-updates subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L4UpdatesSubscription {
    coins: BTreeSet<String>,
    users: BTreeSet<String>,
    sequence: u64,
}

impl L4UpdatesSubscription {
    /// Subscribes; the opening frame is the snapshot (`sequence` 1).
    pub fn open(engine: &Engine, request: &L4OrderUpdatesRequest) -> (Self, L4OrderUpdate) {
        let mut subscription = Self {
            coins: request.coins.iter().cloned().collect(),
            users: request
                .users
                .iter()
                .map(|u| u.to_ascii_lowercase())
                .collect(),
            sequence: 0,
        };
        let frame = subscription.snapshot(engine);
        (subscription, frame)
    }

    /// The frame of the last folded block, if any diff matched.
    pub fn on_block(&mut self, engine: &Engine) -> Option<L4OrderUpdate> {
        let view = &engine.views().l4updates;
        if view.resets.iter().any(|coin| in_scope(&self.coins, coin)) {
            return Some(self.snapshot(engine));
        }
        let diffs: Vec<L4OrderDiff> = view
            .changes
            .iter()
            .filter(|change| self.matches(&change.coin, &change.user))
            .map(L4OrderDiff::of)
            .collect();
        if diffs.is_empty() {
            return None;
        }
        self.sequence += 1;
        let (block_number, time) = position(engine);
        Some(L4OrderUpdate {
            time,
            block_number,
            diffs,
            snapshot: false,
            sequence: self.sequence,
        })
    }

    fn matches(&self, coin: &str, user: &str) -> bool {
        in_scope(&self.coins, coin)
            && (self.users.is_empty() || self.users.contains(&user.to_ascii_lowercase()))
    }

    fn snapshot(&mut self, engine: &Engine) -> L4OrderUpdate {
        let mut diffs = Vec::new();
        for (coin, book) in engine.books().iter() {
            if !in_scope(&self.coins, coin) {
                continue;
            }
            for order in book.orders() {
                if self.matches(coin, &order.user) {
                    diffs.push(L4OrderDiff {
                        diff_type: L4OrderDiffType::New,
                        coin: coin.to_owned(),
                        oid: order.oid,
                        user: order.user.to_string(),
                        side: order.side,
                        px: order.limit_px,
                        sz: order.sz,
                    });
                }
            }
        }
        self.sequence += 1;
        let (block_number, time) = position(engine);
        L4OrderUpdate {
            time,
            block_number,
            diffs,
            snapshot: true,
            sequence: self.sequence,
        }
    }
}
