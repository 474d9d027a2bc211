//! TP/SL updates: the lifecycle of the perps' untriggered trigger orders
//! (see [`crate::market::tpsl`] for how they are tracked), for the coins
//! and users asked for (empty coins = every perp; users match
//! case-insensitively). A subscription opens with a `snapshot: true` frame
//! holding every matching tracked order as an ADD; each later frame (one per
//! block with a matching diff) carries that block's diffs. Frames carry
//! `sequence` (1 on the first, +1 per frame), given per subscriber (see
//! [`crate::views::numbering`]). Naming a spot or outcome coin is refused.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::coin::is_perp;
use crate::market::tpsl::{TpslDiffType, TpslOrderDiff};
use crate::market::{Market, Needs};
use crate::table::{
    BLOCK, Cell, Column, Kind, RowSink, SEQUENCE, SNAPSHOT, Table, block_cells, empty_frame_row,
};
use crate::views::numbering::{Numbering, Numbers};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, lowercased};

/// `TpslUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TpslUpdate {
    /// Block time, Unix ms.
    pub time: i64,
    /// Producing block.
    pub block_number: u64,
    /// Diffs in order.
    pub diffs: Vec<TpslOrderDiff>,
    /// True = rebuild local state from these ADDs.
    pub snapshot: bool,
    /// 1 on the subscription's first frame, +1 per frame (0 until
    /// numbered).
    pub sequence: u64,
}

/// `TpslUpdatesRequest`, normalised.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TpslKey {
    /// Perp coins (empty = all perp coins).
    pub coins: BTreeSet<String>,
    /// Owners, lowercased (empty = all).
    pub users: BTreeSet<String>,
}

impl TpslKey {
    /// Refuses coins that are not perps.
    ///
    /// # Errors
    /// [`ViewError::NotPerp`] naming the first such coin.
    pub fn check(&self) -> Result<(), ViewError> {
        match self.coins.iter().find(|coin| !is_perp(coin)) {
            Some(coin) => Err(ViewError::NotPerp { coin: coin.clone() }),
            None => Ok(()),
        }
    }
}

/// One TP/SL subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpslSubscription {
    key: TpslKey,
}

impl TpslSubscription {
    /// Whether an order of `user` in `coin` belongs to this subscription.
    pub fn matches(&self, coin: &str, user: &str) -> bool {
        (self.key.coins.is_empty() || self.key.coins.contains(coin))
            && (self.key.users.is_empty() || self.key.users.contains(&user.to_ascii_lowercase()))
    }
}

impl View for TpslSubscription {
    type Key = TpslKey;
    type Frame = TpslUpdate;
    const NAME: &'static str = "tpsl";
    const ON_LAG: OnLag = OnLag::Abort;
    const NEEDS: Needs = Needs {
        tpsl: true,
        ..Needs::NONE
    };

    fn keys(selection: &Selection) -> Result<Vec<TpslKey>, ViewError> {
        let key = TpslKey {
            coins: selection.coins.iter().cloned().collect(),
            users: lowercased(&selection.users),
        };
        key.check()?;
        Ok(vec![key])
    }

    fn listed_coins(key: &TpslKey) -> Vec<&str> {
        key.coins.iter().map(String::as_str).collect()
    }

    /// The opening frame is the snapshot of the matching tracked orders.
    fn open(
        market: &mut Market,
        key: &TpslKey,
        _settings: &ViewSettings,
    ) -> Result<(Self, Vec<TpslUpdate>), ViewError> {
        key.check()?;
        // Keys are normalised by whoever builds them; lowercase again so
        // that a hand-built key still matches case-insensitively.
        let subscription = Self {
            key: TpslKey {
                coins: key.coins.clone(),
                users: key.users.iter().map(|u| u.to_ascii_lowercase()).collect(),
            },
        };
        let view = market.tpsl();
        let diffs = view
            .orders()
            .filter(|order| subscription.matches(order.coin(), order.user()))
            .map(|order| order.diff(TpslDiffType::Add, None))
            .collect();
        let at = market.position();
        let frame = TpslUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: true,
            sequence: 0,
        };
        Ok((subscription, vec![frame]))
    }

    /// The block's matching diffs.
    fn on_block(&mut self, market: &Market) -> Vec<TpslUpdate> {
        let diffs: Vec<TpslOrderDiff> = market
            .tpsl()
            .diffs()
            .iter()
            .filter(|diff| self.matches(&diff.coin, &diff.user))
            .cloned()
            .collect();
        if diffs.is_empty() {
            return Vec::new();
        }
        let at = market.position();
        vec![TpslUpdate {
            time: at.time,
            block_number: at.block_number,
            diffs,
            snapshot: false,
            sequence: 0,
        }]
    }

    fn numbers(_frame: &TpslUpdate, numbering: &mut Numbering) -> Numbers {
        Numbers::Sequence(numbering.next_sequence())
    }

    fn stamp(frame: &mut TpslUpdate, numbers: &Numbers) {
        if let Numbers::Sequence(sequence) = numbers {
            frame.sequence = *sequence;
        }
    }
}

// `tpsl`: one row per trigger-order diff.

impl Tabular for TpslSubscription {
    const TABLE: Table = Table {
        name: "tpsl",
        row: "one trigger-order diff of a frame, in order (on a snapshot frame, every tracked \
              order in scope as an `add`); a frame with no diff is one row with no diff",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            SNAPSHOT,
            Column::optional("diff", Kind::Text, "`add`, `update` or `remove`"),
            Column::optional("oid", Kind::UInt64, "order id"),
            Column::optional("coin", Kind::Text, "market (a perp)"),
            Column::optional("user", Kind::Text, "the order's owner"),
            Column::optional("side", Kind::Text, "`B` or `A`"),
            Column::optional("trigger_px", Kind::Decimal, "trigger price"),
            Column::optional("limit_px", Kind::Decimal, "limit price"),
            Column::optional(
                "sz",
                Kind::Decimal,
                "effective size (a position TP/SL's from the position)",
            ),
            Column::optional("orig_sz", Kind::Decimal, "the order's own size as written"),
            Column::optional(
                "trigger_condition",
                Kind::Text,
                "the node's trigger condition text",
            ),
            Column::optional(
                "order_type",
                Kind::Text,
                "`Stop Market`, `Take Profit Limit`, …",
            ),
            Column::optional("is_position_tpsl", Kind::Bool, "a position TP/SL"),
            Column::optional("reduce_only", Kind::Bool, "reduce-only"),
            Column::optional("timestamp", Kind::TimeMs, "placement time"),
            Column::optional(
                "reason",
                Kind::Text,
                "on `remove`: the status that removed it",
            ),
            Column::optional("cloid", Kind::Text, "client order id"),
        ],
    };

    fn block(frame: &TpslUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &TpslUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let head = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Bool(frame.snapshot),
        ];
        if frame.diffs.is_empty() {
            return empty_frame_row(out, &head, 16);
        }
        for diff in &frame.diffs {
            let kind = match diff.diff_type {
                TpslDiffType::Add => "add",
                TpslDiffType::Update => "update",
                TpslDiffType::Remove => "remove",
            };
            out.row(&[
                head[0],
                head[1],
                head[2],
                head[3],
                Cell::Text(kind),
                Cell::U64(diff.oid),
                Cell::Text(&diff.coin),
                Cell::Text(&diff.user),
                Cell::Text(diff.side.as_str()),
                Cell::decimal(diff.trigger_px),
                Cell::decimal(diff.limit_px),
                Cell::decimal(diff.sz),
                Cell::decimal(diff.orig_sz),
                Cell::Text(&diff.trigger_condition),
                Cell::Text(&diff.order_type),
                Cell::Bool(diff.is_position_tpsl),
                Cell::Bool(diff.reduce_only),
                Cell::TimeMs(diff.timestamp),
                Cell::text_or_null(diff.reason.as_deref()),
                Cell::text_or_null(diff.cloid.as_deref()),
            ])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_coins_are_refused() {
        let key = TpslKey {
            coins: ["BTC".to_owned(), "@107".to_owned()].into(),
            users: BTreeSet::new(),
        };
        assert_eq!(
            key.check(),
            Err(ViewError::NotPerp {
                coin: "@107".into()
            })
        );
    }
}
