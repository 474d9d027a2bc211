//! Typed L4 order updates: NEW / UPDATE / REMOVE diffs of the coins and
//! users asked for (empty = all; users match case-insensitively). The
//! opening frame is `snapshot=true` with every matching resting order as a
//! NEW diff; then one frame per block with a matching change. A REMOVE
//! carries the diff's price and `sz:"0.0"`. When a coin in scope is reset
//! from a node snapshot, the block's frame is a fresh `snapshot=true` frame
//! instead. Frames carry `sequence` (1 on the first, +1 per frame), given
//! per subscriber (see [`crate::views::numbering`]).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::event::Side;
use crate::fold::{OrderChange, OrderChangeKind};
use crate::market::{Market, Needs};
use crate::num::{Px, Sz};
use crate::table::{
    BLOCK, Cell, Column, Kind, RowSink, SEQUENCE, SNAPSHOT, Table, block_cells, empty_frame_row,
};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{
    OnLag, Selection, Tabular, View, ViewError, ViewSettings, in_scope, lowercased,
};

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
    /// The diff of one applied change.
    pub fn of(change: &OrderChange) -> Self {
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
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// `L4OrderUpdatesRequest`, normalised.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct L4UpdatesKey {
    /// Markets (empty = all).
    pub coins: BTreeSet<String>,
    /// Owners, lowercased (empty = all).
    pub users: BTreeSet<String>,
}

/// One L4 order-updates subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L4UpdatesSubscription {
    key: L4UpdatesKey,
}

impl L4UpdatesSubscription {
    fn matches(&self, coin: &str, user: &str) -> bool {
        in_scope(&self.key.coins, coin)
            && (self.key.users.is_empty() || self.key.users.contains(&user.to_ascii_lowercase()))
    }

    fn snapshot(&self, market: &Market) -> L4OrderUpdate {
        let mut diffs = Vec::new();
        for (coin, book) in market.books().iter() {
            if !in_scope(&self.key.coins, coin) {
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
        let at = market.position();
        L4OrderUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: true,
            sequence: 0,
        }
    }
}

impl View for L4UpdatesSubscription {
    type Key = L4UpdatesKey;
    type Frame = L4OrderUpdate;
    const NAME: &'static str = "l4updates";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs::BOOKS;

    fn keys(selection: &Selection) -> Result<Vec<L4UpdatesKey>, ViewError> {
        Ok(vec![L4UpdatesKey {
            coins: selection.coins.iter().cloned().collect(),
            users: lowercased(&selection.users),
        }])
    }

    fn listed_coins(key: &L4UpdatesKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    /// The opening frame is the snapshot of the matching resting orders.
    fn open(
        market: &mut Market,
        key: &L4UpdatesKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<L4OrderUpdate>), ViewError> {
        // Keys are normalised by whoever builds them; lowercase again so
        // that a hand-built key still matches case-insensitively.
        let subscription = Self {
            key: L4UpdatesKey {
                coins: key.coins.clone(),
                users: key.users.iter().map(|u| u.to_ascii_lowercase()).collect(),
            },
        };
        let frame = subscription.snapshot(market);
        Ok((subscription, vec![frame]))
    }

    /// The block's matching changes; a fresh snapshot after a reset of a
    /// coin in scope.
    fn on_block(&mut self, market: &Market) -> Vec<L4OrderUpdate> {
        let view = market.orders();
        if view
            .resets()
            .iter()
            .any(|coin| in_scope(&self.key.coins, coin))
        {
            return vec![self.snapshot(market)];
        }
        let diffs: Vec<L4OrderDiff> = view
            .changes()
            .iter()
            .filter(|change| self.matches(&change.coin, &change.user))
            .map(L4OrderDiff::of)
            .collect();
        if diffs.is_empty() {
            return Vec::new();
        }
        let at = market.position();
        vec![L4OrderUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: false,
            sequence: 0,
        }]
    }

    fn numbers(_frame: &L4OrderUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut L4OrderUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

// `l4updates`: one row per order diff.

impl Tabular for L4UpdatesSubscription {
    const TABLE: Table = Table {
        name: "l4updates",
        row: "one order diff of a frame, in file order (on a snapshot frame, every resting order \
              in scope as a `new`, in book order per coin); a frame with no diff is one row with \
              no diff",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            SNAPSHOT,
            Column::optional("diff", Kind::Text, "`new`, `update` or `remove`"),
            Column::optional("coin", Kind::Text, "market"),
            Column::optional("oid", Kind::UInt64, "order id"),
            Column::optional("user", Kind::Text, "the order's owner"),
            Column::optional("side", Kind::Text, "`B` or `A`"),
            Column::optional("px", Kind::Decimal, "resting price"),
            Column::optional(
                "sz",
                Kind::Decimal,
                "resting size after the change (0 on `remove`)",
            ),
        ],
    };

    fn block(frame: &L4OrderUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &L4OrderUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let head = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Bool(frame.snapshot),
        ];
        if frame.diffs.is_empty() {
            return empty_frame_row(out, &head, 7);
        }
        for diff in &frame.diffs {
            let kind = match diff.diff_type {
                L4OrderDiffType::New => "new",
                L4OrderDiffType::Update => "update",
                L4OrderDiffType::Remove => "remove",
            };
            out.row(&[
                head[0],
                head[1],
                head[2],
                head[3],
                Cell::Text(kind),
                Cell::Text(&diff.coin),
                Cell::U64(diff.oid),
                Cell::Text(&diff.user),
                Cell::Text(diff.side.as_str()),
                Cell::decimal(diff.px),
                Cell::decimal(diff.sz),
            ])?;
        }
        Ok(())
    }
}
