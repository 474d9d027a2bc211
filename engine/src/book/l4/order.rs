//! One resting order, and the diffs a book refuses.

use thiserror::Error;

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
