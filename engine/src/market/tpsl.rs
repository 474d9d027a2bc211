//! TP/SL: the untriggered trigger orders of perps (stop and take-profit
//! orders, including position TP/SL), tracked per (coin, user, oid) from
//! order statuses, with the `TpslUpdate` frames of `StreamTpslUpdates`.
//!
//! # Lifecycle
//!
//! - An `open` status with `isTrigger: true` for a perp coin adds the order
//!   (ADD). Another such status for a tracked order whose fields changed
//!   replaces it in place (UPDATE); an identical one changes nothing.
//! - Any other status for a tracked order — `triggered`, `canceled`,
//!   `siblingFilledCanceled`, `reduceOnlyCanceled`, `marginCanceled`, a
//!   rejection, ... — removes it (REMOVE) with `reason` set to that status.
//!   Later statuses of the same oid (e.g. `minTradeNtlRejected` right after
//!   `triggered`) find nothing to remove and are ignored, as are statuses of
//!   orders placed before tracking started.
//! - Bracket `children` of a parent order are not tracked from the parent's
//!   status: they become live orders only when the node writes their own
//!   `open` status.
//!
//! # Effective size
//!
//! A position TP/SL (`isPositionTpsl: true`) is written with `sz: "0.0"`
//! because it closes whatever the position is when it fires. Its `sz` in a
//! diff is the absolute value of the user's current position in the coin,
//! tracked from fills by [`Positions`]; a user with no fill seen since
//! tracking started (or flat) resolves to `"0.0"`. Each block folds its
//! fills first, then its statuses (so an ADD already carries the block's
//! final position), then emits an UPDATE for every tracked position TP/SL
//! whose resolved size moved. Other trigger orders use their own `sz`.
//! A REMOVE echoes the order as last published (its `sz` included).
//! `orig_sz` is always the order's `origSz` exactly as the node wrote it.
//!
//! # Universe
//!
//! "All perp coins" is every main-dex perp and every builder-deployed perp
//! (`dex:ASSET`). Spot (`@N`, `PURR/USDC`) and outcome markets (`#N`) are
//! excluded: outcome tokens are fully collateralised, with no position for a
//! position TP/SL to close. Naming one of them in `coins` is refused.
//!
//! # Frames
//!
//! A subscription opens with a `snapshot: true` frame holding every matching
//! tracked order as an ADD, `sequence` 1; each later frame (one per block
//! with a matching diff) adds 1. Users match case-insensitively.

use std::collections::HashMap;

use crate::block::DecodedBlock;
use crate::coin::is_perp;
use crate::event::{FillEvent, OrderStatusEvent};
use crate::num::Sz;
use crate::positions::{PositionIssue, Positions};

use super::triggers::{Put, Triggers};
pub(crate) use super::triggers::{TextRoom, TriggerView};
pub use super::triggers::{TpslDiffType, TpslOrderDiff, TriggerOrder, TriggerRef};

/// Shared state: tracked trigger orders, positions, and the last block's
/// diffs.
#[derive(Debug, Clone, Default)]
pub struct TpslView {
    /// By (coin, lowercased user, oid).
    orders: Triggers,
    /// How many tracked orders carry each oid: most statuses (rejections,
    /// plain orders) are about no tracked order and are passed over without
    /// building a key.
    oids: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// The highest oid ever tracked. The node numbers orders in placement
    /// order, so most statuses asked about (rejections of orders just
    /// placed) carry a higher oid and are answered without a lookup.
    max_oid: u64,
    positions: Positions,
    diffs: Vec<TpslOrderDiff>,
    position_issues: Vec<PositionIssue>,
    block_number: u64,
    time: i64,
}

fn resolved_sz(
    positions: &Positions,
    user: &str,
    coin: &str,
    order_sz: Sz,
    position_tpsl: bool,
) -> Sz {
    if position_tpsl {
        positions.position(user, coin).abs().canonical()
    } else {
        order_sz
    }
}

impl TpslView {
    /// Nothing tracked.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker as a checkpoint left it, before its orders are put back
    /// ([`TpslView::restore`]) and its positions ([`TpslView::with_positions`]):
    /// the highest oid it ever tracked and its position (the last block's
    /// diffs and issues are not carried: the next block replaces them, and
    /// a subscription opens on the tracked orders).
    pub(crate) fn restoring(max_oid: u64, block_number: u64, time: i64) -> Self {
        Self {
            max_oid,
            block_number,
            time,
            ..Self::default()
        }
    }

    /// The tracker with the positions of its checkpoint.
    pub(crate) fn with_positions(self, positions: Positions) -> Self {
        Self { positions, ..self }
    }

    /// One tracked order of a checkpoint.
    pub(crate) fn restore(&mut self, order: &TriggerOrder) {
        if self.orders.put(order) == Put::New {
            *self.oids.entry(order.oid).or_default() += 1;
        }
        self.max_oid = self.max_oid.max(order.oid);
    }

    /// The highest oid ever tracked.
    pub(crate) fn max_oid(&self) -> u64 {
        self.max_oid
    }

    /// Folds one decoded block: fills, then statuses, then resolved-size
    /// moves.
    pub fn apply(&mut self, block: &DecodedBlock<'_>) {
        let fills: Vec<&FillEvent<'_>> = block.fills.iter().map(|s| &s.event).collect();
        let statuses: Vec<&OrderStatusEvent<'_>> =
            block.order_statuses.iter().map(|s| &s.event).collect();
        self.apply_events(block.number, block.time_ms, fills, statuses);
    }

    /// Whether statuses of order `oid` matter here: it is a tracked trigger
    /// order. Besides these, only statuses opening a trigger order do (the
    /// fold's trigger watch hands over exactly those, see
    /// [`crate::fold::FoldWants::triggers`]).
    pub fn tracks(&self, oid: u64) -> bool {
        oid <= self.max_oid && self.oids.contains_key(&oid)
    }

    /// Folds one block given as its fills and the statuses that matter (any
    /// superset of them will do: the others change nothing): fills, then
    /// statuses, then resolved-size moves.
    pub fn apply_events<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
        statuses: impl IntoIterator<Item = &'e OrderStatusEvent<'a>>,
    ) {
        self.block_number = block_number;
        self.time = time;
        self.diffs.clear();
        let (changes, issues) = self.positions.apply_fills(block_number, fills);
        self.position_issues = issues;
        for status in statuses {
            self.apply_status(status);
        }
        for change in changes {
            // The position is the change's: every order of this (user, coin)
            // resolves to the same size.
            let sz = change.position.abs().canonical();
            for (oid, order) in self.orders.of_user_mut(&change.coin, &change.user) {
                if order.is_position_tpsl() && !order.prints_sz(sz) {
                    order.set_sz(sz);
                    self.diffs.push(
                        order
                            .order(&change.coin, oid)
                            .into_diff(TpslDiffType::Update, None),
                    );
                }
            }
        }
    }

    fn apply_status(&mut self, status: &OrderStatusEvent<'_>) {
        let order = &status.order;
        if !is_perp(order.coin) {
            return;
        }
        let opens = status.status == "open" && order.is_trigger;
        if !opens && !self.oids.contains_key(&order.oid) {
            return;
        }
        if opens {
            let sz = resolved_sz(
                &self.positions,
                status.user,
                order.coin,
                order.sz,
                order.is_position_tpsl,
            );
            let tracked = TriggerOrder::of(status, sz);
            let diff_type = match self.orders.put(&tracked) {
                Put::Same => return,
                Put::Replaced => TpslDiffType::Update,
                Put::New => {
                    *self.oids.entry(order.oid).or_default() += 1;
                    self.max_oid = self.max_oid.max(order.oid);
                    TpslDiffType::Add
                }
            };
            self.diffs.push(tracked.into_diff(diff_type, None));
        } else if let Some(removed) =
            self.orders
                .remove(order.coin, &status.user.to_ascii_lowercase(), order.oid)
        {
            if let Some(count) = self.oids.get_mut(&order.oid) {
                *count -= 1;
                if *count == 0 {
                    self.oids.remove(&order.oid);
                }
            }
            self.diffs
                .push(removed.into_diff(TpslDiffType::Remove, Some(status.status)));
        }
    }

    /// The last folded block: `(block_number, time)`.
    pub fn position(&self) -> (u64, i64) {
        (self.block_number, self.time)
    }

    /// Tracked orders by (coin, lowercased user, oid).
    pub fn orders(&self) -> impl ExactSizeIterator<Item = TriggerRef<'_>> + Clone {
        self.orders.iter()
    }

    /// The tracked order `oid` of `user` (any case) in `coin`.
    pub fn order(&self, coin: &str, user: &str, oid: u64) -> Option<TriggerOrder> {
        self.orders
            .get(coin, &user.to_ascii_lowercase(), oid)
            .map(|order| order.order())
    }

    /// The positions tracked from fills.
    pub fn positions(&self) -> &Positions {
        &self.positions
    }

    /// The last block's diffs, in order.
    pub fn diffs(&self) -> &[TpslOrderDiff] {
        &self.diffs
    }

    /// Fills of the last block whose position could not be taken at face
    /// value.
    pub fn position_issues(&self) -> &[PositionIssue] {
        &self.position_issues
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{decode_fill, decode_order_status};

    fn status(status: &str, oid: u64, position_tpsl: bool, trigger_px: &str) -> String {
        let sz = if position_tpsl { "0.0" } else { "0.5" };
        format!(
            r#"{{"time":"2026-04-30T20:46:43.304461819","user":"0xAbc","hash":null,"builder":null,"status":"{status}","order":{{"coin":"BTC","side":"A","limitPx":"69045.0","sz":"{sz}","oid":{oid},"timestamp":1777582003640,"triggerCondition":"Price above {trigger_px}","isTrigger":true,"triggerPx":"{trigger_px}","children":[],"isPositionTpsl":{position_tpsl},"reduceOnly":true,"orderType":"Take Profit Market","origSz":"{sz}","tif":null,"cloid":null}}}}"#
        )
    }

    fn block<'a>(number: u64, statuses: &'a [String], fills: &'a [String]) -> DecodedBlock<'a> {
        DecodedBlock {
            number,
            time_ms: 1_000 * i64::try_from(number).unwrap(),
            order_statuses: statuses
                .iter()
                .map(|s| crate::block::Spanned {
                    raw: s.as_bytes(),
                    event: decode_order_status(s.as_bytes()).unwrap(),
                })
                .collect(),
            fills: fills
                .iter()
                .map(|s| crate::block::Spanned {
                    raw: s.as_bytes(),
                    event: decode_fill(s.as_bytes()).unwrap(),
                })
                .collect(),
            ..DecodedBlock::default()
        }
    }

    #[test]
    fn a_modified_trigger_is_an_update_and_a_repeat_is_nothing() {
        let mut view = TpslView::new();
        view.apply(&block(1, &[status("open", 7, false, "76717.0")], &[]));
        assert_eq!(view.diffs()[0].diff_type, TpslDiffType::Add);
        view.apply(&block(2, &[status("open", 7, false, "76717.0")], &[]));
        assert!(view.diffs().is_empty());
        view.apply(&block(3, &[status("open", 7, false, "76800.0")], &[]));
        assert_eq!(view.diffs()[0].diff_type, TpslDiffType::Update);
        assert_eq!(view.diffs()[0].trigger_px.to_string(), "76800.0");
    }
}
