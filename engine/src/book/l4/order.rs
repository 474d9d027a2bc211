//! One resting order, and the diffs a book refuses.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use thiserror::Error;

use super::cloid::Cloid;
use super::owner::Owner;
use crate::event::{NodeOrder, OrderStatusEvent, Side};
use crate::num::{Px, Sz};
use crate::text::Short;

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
///
/// What the node lists of an order besides its owner, id, place, sizes,
/// time and client id — its [`Terms`] — is the same for most orders of a
/// book (`"Limit"`, `"Gtc"` or `"Alo"`, `"N/A"`, no trigger): orders share
/// one copy of each set of terms met (see [`Terms::shared`]). The owner is
/// a copy shared by the owner's orders ([`Owner`]) and the client order id
/// is kept as its 16 bytes ([`Cloid`]). A resting order takes 112 bytes
/// where terms, owner and id kept inline took 248: a book of 440,000 orders
/// holds about 60 MB less.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestingOrder {
    /// Owner address, as written by the node (a copy shared by the
    /// owner's orders).
    pub user: Owner,
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
    /// Original size.
    pub orig_sz: Sz,
    /// Client order id.
    pub cloid: Option<Cloid>,
    /// Type, time in force, trigger and flags: shared with the orders that
    /// have the same.
    pub terms: Arc<Terms>,
}

/// What the node lists of a resting order besides its identity, place,
/// sizes and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
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
    /// Time in force (`"Gtc"`, `"Alo"`, ...; IOC residuals rest as `"Gtc"`).
    pub tif: Option<Short>,
}

/// Distinct terms a thread shares at most ([`Terms::shared`]); mainnet's
/// orders have a few dozen. Terms met once the table is full are not
/// shared: each order carries its own copy.
const SHARED_TERMS: usize = 1024;

/// Terms as written, for finding the shared copy: a price's scale counts
/// (`"0.0"` and `"0"` are equal numbers, but print differently).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Written {
    trigger_condition: Short,
    order_type: Short,
    tif: Option<Short>,
    trigger_px: (i64, u8),
    flags: (bool, bool, bool),
}

impl Written {
    fn of(terms: &Terms) -> Self {
        Self {
            trigger_condition: terms.trigger_condition.clone(),
            order_type: terms.order_type.clone(),
            tif: terms.tif.clone(),
            trigger_px: (terms.trigger_px.units(), terms.trigger_px.scale()),
            flags: (terms.is_trigger, terms.is_position_tpsl, terms.reduce_only),
        }
    }
}

thread_local! {
    /// This thread's shared terms (each thread that rests orders — the
    /// engine's, a snapshot or checkpoint loader — has its table, so
    /// sharing takes no lock).
    static SHARED: RefCell<HashMap<Written, Arc<Terms>, foldhash::fast::RandomState>> =
        RefCell::default();
}

impl Terms {
    /// These terms, as the copy shared by every order with the same ones
    /// that this thread rested (or a copy of their own once the thread's
    /// table holds [`SHARED_TERMS`]).
    pub fn shared(self) -> Arc<Self> {
        SHARED.with_borrow_mut(|table| {
            let written = Written::of(&self);
            if let Some(shared) = table.get(&written) {
                return Arc::clone(shared);
            }
            let terms = Arc::new(self);
            if table.len() < SHARED_TERMS {
                table.insert(written, Arc::clone(&terms));
            }
            terms
        })
    }
}

impl RestingOrder {
    /// An order exactly as a node snapshot lists it.
    pub fn from_node(user: &str, order: &NodeOrder<'_>) -> Self {
        Self::with_terms(user, order, Terms::of_node(order).shared())
    }

    fn with_terms(user: &str, order: &NodeOrder<'_>, terms: Arc<Terms>) -> Self {
        Self {
            user: user.into(),
            oid: order.oid,
            side: order.side,
            limit_px: order.limit_px,
            sz: order.sz,
            timestamp: order.timestamp,
            orig_sz: order.orig_sz,
            cloid: order.cloid.map(Into::into),
            terms,
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
        let mut terms = Terms::of_node(&status.order);
        let triggered = status.status == "triggered" || status.order.is_trigger;
        if triggered {
            terms.trigger_condition = "Triggered".into();
            terms.is_trigger = false;
            terms.trigger_px = Px::ZERO;
            terms.tif = Some("Gtc".into());
        } else if terms.tif.as_deref() == Some("Ioc") {
            terms.tif = Some("Gtc".into());
        }
        let mut order = Self::with_terms(user, &status.order, terms.shared());
        order.limit_px = px;
        order.sz = sz;
        if triggered {
            order.timestamp = block_time_ms;
        }
        order
    }

    /// An order known only from its raw `new` diff (no opening status).
    pub fn bare(user: &str, oid: u64, side: Side, px: Px, sz: Sz, block_time_ms: i64) -> Self {
        let terms = Terms {
            trigger_condition: "N/A".into(),
            is_trigger: false,
            trigger_px: Px::ZERO,
            is_position_tpsl: false,
            reduce_only: false,
            order_type: "Limit".into(),
            tif: None,
        };
        Self {
            user: user.into(),
            oid,
            side,
            limit_px: px,
            sz,
            timestamp: block_time_ms,
            orig_sz: sz,
            cloid: None,
            terms: terms.shared(),
        }
    }
}

impl Terms {
    /// The terms of an order as the node lists it.
    fn of_node(order: &NodeOrder<'_>) -> Self {
        Self {
            trigger_condition: order.trigger_condition.into(),
            is_trigger: order.is_trigger,
            trigger_px: order.trigger_px,
            is_position_tpsl: order.is_position_tpsl,
            reduce_only: order.reduce_only,
            order_type: order.order_type.into(),
            tif: order.tif.map(Into::into),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn px(text: &str) -> Px {
        text.parse().unwrap()
    }

    fn limit(tif: Option<&str>, trigger_px: &str) -> Terms {
        Terms {
            trigger_condition: "N/A".into(),
            is_trigger: false,
            trigger_px: px(trigger_px),
            is_position_tpsl: false,
            reduce_only: false,
            order_type: "Limit".into(),
            tif: tif.map(Into::into),
        }
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_resting_order_is_112_bytes() {
        // The figure the type's doc gives, and what the memory budget of
        // a full book counts on.
        assert_eq!(std::mem::size_of::<RestingOrder>(), 112);
    }

    #[test]
    fn orders_with_the_same_terms_share_one_copy() {
        let gtc = limit(Some("Gtc"), "0.0").shared();
        assert!(Arc::ptr_eq(&gtc, &limit(Some("Gtc"), "0.0").shared()));
        let alo = limit(Some("Alo"), "0.0").shared();
        assert!(!Arc::ptr_eq(&gtc, &alo));
        assert_eq!(alo.tif.as_deref(), Some("Alo"));
        // Equal numbers written differently are not the same terms: each
        // order prints its trigger price as the node wrote it.
        let bare_zero = limit(Some("Gtc"), "0").shared();
        assert!(!Arc::ptr_eq(&gtc, &bare_zero));
        assert_eq!(bare_zero.trigger_px.to_string(), "0");
        assert_eq!(gtc.trigger_px.to_string(), "0.0");
    }

    #[test]
    fn terms_past_the_shared_table_are_kept_as_they_are() {
        // A thread of its own: an empty table to fill.
        std::thread::spawn(|| {
            for n in 0..SHARED_TERMS + 10 {
                let mut terms = limit(None, "0.0");
                terms.trigger_condition = Short::new(&format!("Price above {n}"));
                let shared = terms.clone().shared();
                assert_eq!(*shared, terms);
                let again = terms.shared();
                assert_eq!(Arc::ptr_eq(&shared, &again), n < SHARED_TERMS, "{n}");
            }
        })
        .join()
        .unwrap();
    }
}
