//! The fills family: every fill of a block mapped once into a `Fill` frame
//! entry, then filtered per subscription (all, by user, by builder,
//! liquidations) and batched per block as `FillsUpdate`.
//!
//! # Matching
//!
//! - `coins` is a scope list: empty means every coin; duplicates are
//!   ignored; unknown coins are accepted and simply never match.
//! - A user filter matches the fill's own account, case-insensitively.
//! - A builder filter matches the fill's `builder` address,
//!   case-insensitively; fills without a builder never match.
//! - The liquidation stream takes fills carrying a `liquidation` object; a
//!   non-empty `liquidated_users` list keeps only those whose
//!   `liquidatedUser` is one of them (case-insensitive; a liquidation without
//!   a liquidated user never matches a non-empty list).
//!
//! # Sequence
//!
//! Each subscription numbers its own frames: `sequence` is 1 on the first
//! frame it sends and grows by exactly 1 per frame. A block with no matching
//! fill sends no frame and does not consume a number, so a gap always means
//! loss.

use serde::Serialize;

use crate::block::DecodedBlock;
use crate::event::{FillEvent, Side};
use crate::num::{Decimal, Px, Sz};

/// `Liquidation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Liquidation {
    /// The liquidated account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liquidated_user: Option<String>,
    /// Mark price at liquidation.
    pub mark_px: Px,
    /// `"market"` or `"backstop"`.
    pub method: String,
}

/// `Fill`: one party's execution, field for field as the node wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fill {
    /// The fill's own account.
    pub user: String,
    /// Market.
    pub coin: String,
    /// Price.
    pub px: Px,
    /// Size.
    pub sz: Sz,
    /// This party's side.
    pub side: Side,
    /// Unix ms.
    pub time: i64,
    /// Position (or spot balance) before the fill.
    pub start_position: Decimal,
    /// `Open Long`, `Sell`, ...
    pub dir: String,
    /// Realised PnL.
    pub closed_pnl: Decimal,
    /// Taker's transaction hash.
    pub hash: String,
    /// Order id.
    pub oid: u64,
    /// True = taker.
    pub crossed: bool,
    /// Fee (negative = rebate).
    pub fee: Decimal,
    /// Trade id.
    pub tid: u64,
    /// Fee token.
    pub fee_token: String,
    /// Client order id, when the node wrote one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloid: Option<String>,
    /// TWAP id, when non-null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub twap_id: Option<u64>,
    /// Builder address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder: Option<String>,
    /// Builder fee.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder_fee: Option<Decimal>,
    /// HIP-3 deployer fee.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployer_fee: Option<Decimal>,
    /// Priority gas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_gas: Option<Decimal>,
    /// Liquidation details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liquidation: Option<Liquidation>,
}

impl Fill {
    /// Maps a node fill event.
    pub fn of(event: &FillEvent<'_>) -> Self {
        let fill = event.fill();
        Self {
            user: event.user().to_owned(),
            coin: fill.coin.to_owned(),
            px: fill.px,
            sz: fill.sz,
            side: fill.side,
            time: fill.time,
            start_position: fill.start_position,
            dir: fill.dir.to_owned(),
            closed_pnl: fill.closed_pnl,
            hash: fill.hash.to_owned(),
            oid: fill.oid,
            crossed: fill.crossed,
            fee: fill.fee,
            tid: fill.tid,
            fee_token: fill.fee_token.to_owned(),
            cloid: fill.cloid.map(str::to_owned),
            twap_id: fill.twap_id,
            builder: fill.builder.map(str::to_owned),
            builder_fee: fill.builder_fee,
            deployer_fee: fill.deployer_fee,
            priority_gas: fill.priority_gas,
            liquidation: fill.liquidation.as_ref().map(|l| Liquidation {
                liquidated_user: l.liquidated_user.map(str::to_owned),
                mark_px: l.mark_px,
                method: l.method.to_owned(),
            }),
        }
    }
}

/// Shared state: the last folded block's fills, mapped once.
#[derive(Debug, Clone, Default)]
pub struct FillsView {
    block_number: u64,
    time: i64,
    fills: Vec<Fill>,
}

impl FillsView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view as a checkpoint left it: its position (the last block's
    /// fills are not carried: the next block replaces them).
    pub(crate) fn restored(block_number: u64, time: i64) -> Self {
        Self {
            block_number,
            time,
            fills: Vec::new(),
        }
    }

    /// Folds one decoded block.
    pub fn apply(&mut self, block: &DecodedBlock<'_>) {
        self.apply_fills(
            block.number,
            block.time_ms,
            block.fills.iter().map(|spanned| &spanned.event),
        );
    }

    /// Folds one block given as its fills.
    pub fn apply_fills<'e, 'a: 'e>(
        &mut self,
        block_number: u64,
        time: i64,
        fills: impl IntoIterator<Item = &'e FillEvent<'a>>,
    ) {
        self.block_number = block_number;
        self.time = time;
        self.fills.clear();
        self.fills.extend(fills.into_iter().map(Fill::of));
    }

    /// The last folded block: `(block_number, time)`.
    pub fn position(&self) -> (u64, i64) {
        (self.block_number, self.time)
    }

    /// The last block's fills in file order.
    pub fn fills(&self) -> &[Fill] {
        &self.fills
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::decode_fill;

    pub(crate) const LIQUIDATION: &str = r#"["0xAbC0000000000000000000000000000000000001",{"coin":"ETH","px":"3000.5","sz":"0.10","side":"A","time":5,"startPosition":"0.10","dir":"Close Long","closedPnl":"-1.0","hash":"0x01","oid":3,"crossed":true,"fee":"0.01","tid":4,"feeToken":"USDC","twapId":null,"liquidation":{"liquidatedUser":"0xDEAD000000000000000000000000000000000002","markPx":"3000.0","method":"market"},"priorityGas":"0.5"}]"#;

    #[test]
    fn maps_every_field_and_omits_absent_ones() {
        let event = decode_fill(LIQUIDATION.as_bytes()).unwrap();
        let json = serde_json::to_string(&Fill::of(&event)).unwrap();
        assert_eq!(
            json,
            r#"{"user":"0xAbC0000000000000000000000000000000000001","coin":"ETH","px":"3000.5","sz":"0.10","side":"A","time":5,"start_position":"0.10","dir":"Close Long","closed_pnl":"-1.0","hash":"0x01","oid":3,"crossed":true,"fee":"0.01","tid":4,"fee_token":"USDC","priority_gas":"0.5","liquidation":{"liquidated_user":"0xDEAD000000000000000000000000000000000002","mark_px":"3000.0","method":"market"}}"#
        );
    }
}
