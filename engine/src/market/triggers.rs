//! Trigger orders as TP/SL tracks them: the order and its diff as frames
//! carry them ([`TriggerOrder`], [`TpslOrderDiff`]), and the tracker's
//! table of them, kept compact ([`TriggerRef`] borrows one).
//!
//! Trigger orders pile up: they rest until their price is reached, often
//! for days, and a market's stops sit far from its price. After six hours
//! of mainnet-scale activity the tracker holds tens of thousands of them.
//! Kept as the texts the node wrote (coin, owner, condition, order type and
//! client order id each an owned string, and the coin and owner again in
//! the key), one took ~640 bytes with its share of the map; here it takes
//! under a quarter of that (96 bytes, and the map's share):
//!
//! - the coin is the key of a map per coin, written once per coin;
//! - the owner is an [`Owner`], one shared copy per account;
//! - the four decimals are kept as their parts (36 bytes, not 64);
//! - the order type and the trigger condition, in the form the node writes
//!   them (one of four order types; `Price above` or `Price below` and the
//!   trigger price without trailing zeros), are two small numbers; any
//!   other wording is kept as written;
//! - the client order id is a [`Cloid`].
//!
//! Every field reads back exactly as written: [`TriggerRef::order`] gives
//! the same [`TriggerOrder`] that was put in.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt::Write as _;

use serde::Serialize;

use crate::book::l4::{CLOID_TEXT_LEN, Cloid, Owner};
use crate::event::{OrderStatusEvent, Side};
use crate::num::{Decimal, Px, Sz};
use crate::text::Short;

/// `TpslDiffType`, serialised by its protobuf name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TpslDiffType {
    /// A trigger order is now tracked.
    #[serde(rename = "TPSL_DIFF_TYPE_ADD")]
    Add,
    /// It left (fired, canceled, rejected, ...).
    #[serde(rename = "TPSL_DIFF_TYPE_REMOVE")]
    Remove,
    /// Modified in place, or its resolved size moved.
    #[serde(rename = "TPSL_DIFF_TYPE_UPDATE")]
    Update,
}

/// A tracked trigger order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerOrder {
    /// Market.
    pub coin: String,
    /// Owner as the node wrote it.
    pub user: String,
    /// Order id.
    pub oid: u64,
    /// Side.
    pub side: Side,
    /// Trigger price.
    pub trigger_px: Px,
    /// Limit price.
    pub limit_px: Px,
    /// The order's own size (`0.0` for a position TP/SL).
    pub orig_sz: Sz,
    /// `"Price above 76717"`, ...
    pub trigger_condition: String,
    /// `"Stop Market"`, `"Take Profit Limit"`, ...
    pub order_type: String,
    /// Size follows the position.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// Placement time, Unix ms.
    pub timestamp: i64,
    /// Client order id.
    pub cloid: Option<String>,
    /// The size last published (resolved for a position TP/SL).
    pub sz: Sz,
}

impl TriggerOrder {
    /// The order an `open` status describes, its published size `sz`.
    pub(crate) fn of(status: &OrderStatusEvent<'_>, sz: Sz) -> Self {
        let order = &status.order;
        Self {
            coin: order.coin.to_owned(),
            user: status.user.to_owned(),
            oid: order.oid,
            side: order.side,
            trigger_px: order.trigger_px,
            limit_px: order.limit_px,
            orig_sz: order.orig_sz,
            trigger_condition: order.trigger_condition.to_owned(),
            order_type: order.order_type.to_owned(),
            is_position_tpsl: order.is_position_tpsl,
            reduce_only: order.reduce_only,
            timestamp: order.timestamp,
            cloid: order.cloid.map(str::to_owned),
            sz,
        }
    }

    /// This order as a diff of `diff_type` (with `reason` on a REMOVE).
    pub fn into_diff(self, diff_type: TpslDiffType, reason: Option<&str>) -> TpslOrderDiff {
        TpslOrderDiff {
            diff_type,
            oid: self.oid,
            coin: self.coin,
            user: self.user,
            side: self.side,
            trigger_px: self.trigger_px,
            limit_px: self.limit_px,
            sz: self.sz,
            trigger_condition: self.trigger_condition,
            order_type: self.order_type,
            is_position_tpsl: self.is_position_tpsl,
            reduce_only: self.reduce_only,
            timestamp: self.timestamp,
            reason: reason.map(str::to_owned),
            orig_sz: self.orig_sz,
            cloid: self.cloid,
        }
    }
}

/// `TpslOrderDiff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TpslOrderDiff {
    /// What happened.
    pub diff_type: TpslDiffType,
    /// Order id.
    pub oid: u64,
    /// Market.
    pub coin: String,
    /// Owner.
    pub user: String,
    /// Side.
    pub side: Side,
    /// Trigger price.
    pub trigger_px: Px,
    /// Limit price.
    pub limit_px: Px,
    /// Effective size (resolved from the position for a position TP/SL).
    pub sz: Sz,
    /// Trigger condition text.
    pub trigger_condition: String,
    /// Order type text.
    pub order_type: String,
    /// Position TP/SL.
    pub is_position_tpsl: bool,
    /// Reduce-only.
    pub reduce_only: bool,
    /// Placement time.
    pub timestamp: i64,
    /// On REMOVE: the status that removed the order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The order's own size as written.
    pub orig_sz: Sz,
    /// Client order id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloid: Option<String>,
}

/// The order types the node writes for trigger orders, by number.
const ORDER_TYPES: [&str; 4] = [
    "Stop Market",
    "Stop Limit",
    "Take Profit Market",
    "Take Profit Limit",
];

/// Flag bits of [`Kept::flags`].
const BID: u8 = 1;
const POSITION_TPSL: u8 = 2;
const REDUCE_ONLY: u8 = 4;

/// Where the decimals sit in [`Kept::units`] and [`Kept::scales`].
const TRIGGER_PX: usize = 0;
const LIMIT_PX: usize = 1;
const ORIG_SZ: usize = 2;
const SZ: usize = 3;

/// The tracked trigger orders by (coin, lowercased owner, oid).
#[derive(Debug, Clone, Default)]
pub(crate) struct Triggers {
    coins: BTreeMap<Short, BTreeMap<Key, Kept>>,
}

/// What [`Triggers::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// The order was not kept: now it is.
    New,
    /// Another order was kept for its keys: this one replaced it.
    Replaced,
    /// This very order was kept already: nothing changed.
    Same,
}

/// A coin's orders are ordered by owner (lowercased), then oid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    user: Owner,
    oid: u64,
}

impl Key {
    /// The key of `oid` of a lowercased owner, for a lookup: a copy of the
    /// address of its own, so that looking up an account no order holds
    /// adds nothing to the owners' table.
    fn probe(lowercased_user: &str, oid: u64) -> Self {
        Self {
            user: Owner::unshared(lowercased_user),
            oid,
        }
    }
}

/// One trigger order as kept (its coin and oid are its keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The owner as the node wrote it.
    user: Owner,
    timestamp: i64,
    /// Trigger price, limit price, own size and published size: units ...
    units: [i64; 4],
    /// ... and scales.
    scales: [u8; 4],
    flags: u8,
    wording: Wording,
    cloid: Option<Cloid>,
}

/// An order's type and trigger condition. One form per pair of texts (for
/// a given trigger price), so that equal orders are equal here.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wording {
    /// `ORDER_TYPES[order_type]`, and `Price above` (or `below`) and the
    /// trigger price without trailing zeros.
    Usual { order_type: u8, above: bool },
    /// Written otherwise: the order type and the condition.
    Written(Box<[Box<str>; 2]>),
}

/// The trigger price as the node writes it in a condition: without
/// trailing zeros (`76717.0` is `76717`, `6153.50` is `6153.5`).
fn condition_px(px: Decimal) -> String {
    without_trailing_zeros(&px.to_string()).to_owned()
}

/// `text` (ending in a decimal) without the trailing zeros of its fraction,
/// nor its point when nothing is left after it.
fn without_trailing_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// The words before the price in a usual condition.
fn condition_words(above: bool) -> &'static str {
    if above {
        "Price above "
    } else {
        "Price below "
    }
}

impl Wording {
    fn of(order_type: &str, condition: &str, trigger_px: Decimal) -> Self {
        let usual = ORDER_TYPES
            .iter()
            .position(|known| *known == order_type)
            .and_then(|at| {
                let above = condition.starts_with(condition_words(true));
                let px = condition.strip_prefix(condition_words(above))?;
                (px == condition_px(trigger_px)).then_some((at, above))
            });
        match usual {
            // Four order types: the number fits.
            Some((at, above)) => Self::Usual {
                order_type: at as u8,
                above,
            },
            None => Self::Written(Box::new([order_type.into(), condition.into()])),
        }
    }

    /// The order type and the condition, a usual condition written into
    /// `room`.
    fn texts<'b>(
        &'b self,
        trigger_px: Decimal,
        room: &'b mut [u8; CONDITION_ROOM],
    ) -> (&'b str, &'b str) {
        match self {
            Self::Usual { order_type, above } => {
                let mut text = Room {
                    bytes: room,
                    len: 0,
                };
                // Twelve bytes of words and at most 21 of a price: it fits.
                let _ = write!(text, "{}{trigger_px}", condition_words(*above));
                let len = text.len;
                let written = std::str::from_utf8(&room[..len]).unwrap_or_default();
                let condition = without_trailing_zeros(written);
                (ORDER_TYPES[usize::from(*order_type)], condition)
            }
            Self::Written(texts) => (&texts[0], &texts[1]),
        }
    }
}

/// Bytes for a usual trigger condition: `Price above ` and a price.
const CONDITION_ROOM: usize = 48;

/// Text written into a fixed buffer (what does not fit is refused).
struct Room<'b> {
    bytes: &'b mut [u8; CONDITION_ROOM],
    len: usize,
}

impl std::fmt::Write for Room<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let end = self.len + text.len();
        let into = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        into.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Room for the texts of an order that the table does not keep written
/// out: its trigger condition and its client id.
pub(crate) struct TextRoom {
    condition: [u8; CONDITION_ROOM],
    cloid: [u8; CLOID_TEXT_LEN],
}

impl TextRoom {
    pub(crate) fn new() -> Self {
        Self {
            condition: [0; CONDITION_ROOM],
            cloid: [0; CLOID_TEXT_LEN],
        }
    }
}

/// A tracked order, its texts borrowed from the table or written into a
/// [`TextRoom`]: what [`TriggerOrder`] holds, without allocating.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TriggerView<'b> {
    pub coin: &'b str,
    pub user: &'b str,
    pub oid: u64,
    pub side: Side,
    pub trigger_px: Px,
    pub limit_px: Px,
    pub orig_sz: Sz,
    pub trigger_condition: &'b str,
    pub order_type: &'b str,
    pub is_position_tpsl: bool,
    pub reduce_only: bool,
    pub timestamp: i64,
    pub cloid: Option<&'b str>,
    pub sz: Sz,
}

impl TriggerView<'_> {
    /// The order, written out.
    pub(crate) fn to_order(self) -> TriggerOrder {
        TriggerOrder {
            coin: self.coin.to_owned(),
            user: self.user.to_owned(),
            oid: self.oid,
            side: self.side,
            trigger_px: self.trigger_px,
            limit_px: self.limit_px,
            orig_sz: self.orig_sz,
            trigger_condition: self.trigger_condition.to_owned(),
            order_type: self.order_type.to_owned(),
            is_position_tpsl: self.is_position_tpsl,
            reduce_only: self.reduce_only,
            timestamp: self.timestamp,
            cloid: self.cloid.map(str::to_owned),
            sz: self.sz,
        }
    }
}

impl Kept {
    fn of(order: &TriggerOrder) -> Self {
        let decimals = [order.trigger_px, order.limit_px, order.orig_sz, order.sz];
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        Self {
            user: Owner::new(&order.user),
            timestamp: order.timestamp,
            units: decimals.map(Decimal::units),
            scales: decimals.map(Decimal::scale),
            flags: flag(order.side == Side::Bid, BID)
                | flag(order.is_position_tpsl, POSITION_TPSL)
                | flag(order.reduce_only, REDUCE_ONLY),
            wording: Wording::of(
                &order.order_type,
                &order.trigger_condition,
                order.trigger_px,
            ),
            cloid: order.cloid.as_deref().map(Cloid::new),
        }
    }

    fn decimal(&self, at: usize) -> Decimal {
        Decimal::from_parts(self.units[at], self.scales[at])
    }

    /// A position TP/SL: its size follows the position.
    pub(crate) fn is_position_tpsl(&self) -> bool {
        self.flags & POSITION_TPSL != 0
    }

    /// The size last published.
    pub(crate) fn sz(&self) -> Decimal {
        self.decimal(SZ)
    }

    /// Whether `sz` would print as the size last published (two decimals
    /// print alike exactly when their parts are equal).
    pub(crate) fn prints_sz(&self, sz: Decimal) -> bool {
        (self.units[SZ], self.scales[SZ]) == (sz.units(), sz.scale())
    }

    pub(crate) fn set_sz(&mut self, sz: Decimal) {
        self.units[SZ] = sz.units();
        self.scales[SZ] = sz.scale();
    }

    /// The order, its texts borrowed or written into `room`.
    pub(crate) fn view<'b>(
        &'b self,
        coin: &'b str,
        oid: u64,
        room: &'b mut TextRoom,
    ) -> TriggerView<'b> {
        let trigger_px = self.decimal(TRIGGER_PX);
        let (order_type, trigger_condition) = self.wording.texts(trigger_px, &mut room.condition);
        TriggerView {
            coin,
            user: self.user.as_str(),
            oid,
            side: if self.flags & BID != 0 {
                Side::Bid
            } else {
                Side::Ask
            },
            trigger_px,
            limit_px: self.decimal(LIMIT_PX),
            orig_sz: self.decimal(ORIG_SZ),
            trigger_condition,
            order_type,
            is_position_tpsl: self.is_position_tpsl(),
            reduce_only: self.flags & REDUCE_ONLY != 0,
            timestamp: self.timestamp,
            cloid: self
                .cloid
                .as_ref()
                .map(|cloid| cloid.as_str(&mut room.cloid)),
            sz: self.sz(),
        }
    }

    /// The order, written out.
    pub(crate) fn order(&self, coin: &str, oid: u64) -> TriggerOrder {
        self.view(coin, oid, &mut TextRoom::new()).to_order()
    }
}

/// A tracked order, borrowed from the table.
#[derive(Debug, Clone, Copy)]
pub struct TriggerRef<'a> {
    coin: &'a str,
    key: &'a Key,
    kept: &'a Kept,
}

impl<'a> TriggerRef<'a> {
    /// Market.
    pub fn coin(&self) -> &'a str {
        self.coin
    }

    /// Owner as the node wrote it.
    pub fn user(&self) -> &'a str {
        self.kept.user.as_str()
    }

    /// Order id.
    pub fn oid(&self) -> u64 {
        self.key.oid
    }

    /// The order, written out.
    pub fn order(&self) -> TriggerOrder {
        self.kept.order(self.coin, self.key.oid)
    }

    /// The order without allocating: its texts borrowed from the table or
    /// written into `room`.
    pub(crate) fn view<'b>(&self, room: &'b mut TextRoom) -> TriggerView<'b>
    where
        'a: 'b,
    {
        self.kept.view(self.coin, self.key.oid, room)
    }

    /// The order as a diff of `diff_type` (with `reason` on a REMOVE).
    pub fn diff(&self, diff_type: TpslDiffType, reason: Option<&str>) -> TpslOrderDiff {
        self.order().into_diff(diff_type, reason)
    }
}

impl Triggers {
    /// The order `oid` of a lowercased owner in `coin`.
    pub(crate) fn get(
        &self,
        coin: &str,
        lowercased_user: &str,
        oid: u64,
    ) -> Option<TriggerRef<'_>> {
        let (coin, orders) = self.coins.get_key_value(coin)?;
        let (key, kept) = orders.get_key_value(&Key::probe(lowercased_user, oid))?;
        Some(TriggerRef { coin, key, kept })
    }

    /// Keeps `order` under its keys (its coin, owner lowercased, oid),
    /// in place of what was kept there.
    pub(crate) fn put(&mut self, order: &TriggerOrder) -> Put {
        let key = Key {
            user: Owner::new(&order.user.to_ascii_lowercase()),
            oid: order.oid,
        };
        let orders = match self.coins.get_mut(order.coin.as_str()) {
            Some(orders) => orders,
            None => self.coins.entry(Short::new(&order.coin)).or_default(),
        };
        let kept = Kept::of(order);
        match orders.entry(key) {
            btree_map::Entry::Vacant(entry) => {
                entry.insert(kept);
                Put::New
            }
            btree_map::Entry::Occupied(entry) if *entry.get() == kept => Put::Same,
            btree_map::Entry::Occupied(mut entry) => {
                entry.insert(kept);
                Put::Replaced
            }
        }
    }

    /// Removes the order `oid` of a lowercased owner in `coin`; it as it was.
    pub(crate) fn remove(
        &mut self,
        coin: &str,
        lowercased_user: &str,
        oid: u64,
    ) -> Option<TriggerOrder> {
        let orders = self.coins.get_mut(coin)?;
        let kept = orders.remove(&Key::probe(lowercased_user, oid))?;
        if orders.is_empty() {
            self.coins.remove(coin);
        }
        Some(kept.order(coin, oid))
    }

    /// The orders of a lowercased owner in `coin`, by oid: `(oid, order)`.
    pub(crate) fn of_user_mut<'t>(
        &'t mut self,
        coin: &str,
        lowercased_user: &str,
    ) -> impl Iterator<Item = (u64, &'t mut Kept)> + 't {
        let from = Key::probe(lowercased_user, 0);
        let to = Key {
            user: from.user.clone(),
            oid: u64::MAX,
        };
        self.coins
            .get_mut(coin)
            .into_iter()
            .flat_map(move |orders| orders.range_mut(from.clone()..=to.clone()))
            .map(|(key, kept)| (key.oid, kept))
    }

    /// Every order by (coin, lowercased owner, oid).
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter {
            coins: self.coins.iter(),
            coin: None,
            left: self.coins.values().map(BTreeMap::len).sum(),
        }
    }
}

/// The iterator of [`Triggers::iter`] (its length is known).
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    coins: btree_map::Iter<'a, Short, BTreeMap<Key, Kept>>,
    coin: Option<(&'a str, btree_map::Iter<'a, Key, Kept>)>,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = TriggerRef<'a>;

    fn next(&mut self) -> Option<TriggerRef<'a>> {
        loop {
            if let Some((coin, orders)) = &mut self.coin
                && let Some((key, kept)) = orders.next()
            {
                self.left -= 1;
                return Some(TriggerRef { coin, key, kept });
            }
            let (coin, orders) = self.coins.next()?;
            self.coin = Some((coin.as_str(), orders.iter()));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(coin: &str, user: &str, oid: u64) -> TriggerOrder {
        TriggerOrder {
            coin: coin.to_owned(),
            user: user.to_owned(),
            oid,
            side: Side::Ask,
            trigger_px: "76717.0".parse().unwrap(),
            limit_px: "69045.0".parse().unwrap(),
            orig_sz: "0.50".parse().unwrap(),
            trigger_condition: "Price above 76717".to_owned(),
            order_type: "Take Profit Market".to_owned(),
            is_position_tpsl: false,
            reduce_only: true,
            timestamp: 1_777_582_003_640,
            cloid: Some("0x000000000000000000000000000000ab".to_owned()),
            sz: "0.50".parse().unwrap(),
        }
    }

    #[test]
    fn an_order_in_the_usual_wording_takes_96_bytes_and_reads_back_as_written() {
        assert_eq!(std::mem::size_of::<Kept>(), 96);
        let placed = order("BTC", "0xabc", 7);
        let kept = Kept::of(&placed);
        assert!(matches!(kept.wording, Wording::Usual { .. }));
        assert_eq!(kept.order("BTC", 7), placed);
        assert_eq!(kept.order("BTC", 7).orig_sz.to_string(), "0.50");
    }

    #[test]
    fn any_other_wording_is_kept_as_written() {
        let mut cases = Vec::new();
        for (px, condition, order_type) in [
            ("6153.50", "Price below 6153.5", "Stop Limit"),
            ("6153.5", "Price below 6153.50", "Stop Limit"),
            ("100", "Price above 100", "Stop Market"),
            ("100.0", "Price above 100.0", "Stop Market"),
            ("0.0", "Price below 0", "Take Profit Limit"),
            ("76717.0", "Price above 76717", "Trailing Stop"),
            ("76717.0", "Price at 76717", "Stop Market"),
            ("76717.0", "N/A", "Stop Market"),
            ("76717.0", "", ""),
        ] {
            let mut placed = order("BTC", "0xabc", 7);
            placed.trigger_px = px.parse().unwrap();
            placed.trigger_condition = condition.to_owned();
            placed.order_type = order_type.to_owned();
            let kept = Kept::of(&placed);
            cases.push(matches!(kept.wording, Wording::Usual { .. }));
            assert_eq!(kept.order("BTC", 7), placed);
            assert_eq!(kept.order("BTC", 7).trigger_condition, condition);
        }
        assert_eq!(
            cases,
            [true, false, true, false, true, false, false, false, false]
        );
    }

    #[test]
    fn orders_are_listed_by_coin_owner_and_oid_and_found_in_any_case() {
        let mut triggers = Triggers::default();
        let placed = [
            order("ETH", "0xB", 3),
            order("BTC", "0xb", 9),
            order("BTC", "0xa", 12),
            order("BTC", "0xA", 4),
            order("xyz:NVDA", "0xa", 1),
        ];
        for order in &placed {
            assert_eq!(triggers.put(order), Put::New);
        }
        assert_eq!(triggers.iter().len(), 5);
        let listed: Vec<(String, String, u64)> = triggers
            .iter()
            .map(|o| (o.coin().to_owned(), o.user().to_owned(), o.oid()))
            .collect();
        assert_eq!(
            listed,
            [
                ("BTC".to_owned(), "0xA".to_owned(), 4),
                ("BTC".to_owned(), "0xa".to_owned(), 12),
                ("BTC".to_owned(), "0xb".to_owned(), 9),
                ("ETH".to_owned(), "0xB".to_owned(), 3),
                ("xyz:NVDA".to_owned(), "0xa".to_owned(), 1),
            ]
        );
        assert_eq!(triggers.iter().len(), 5);
        assert_eq!(triggers.get("ETH", "0xb", 3).unwrap().order(), placed[0]);
        assert!(triggers.get("ETH", "0xb", 4).is_none());
        assert_eq!(triggers.put(&placed[0]), Put::Same);
        let mut moved = placed[0].clone();
        moved.trigger_px = "76717.00".parse().unwrap();
        assert_eq!(
            triggers.put(&moved),
            Put::Replaced,
            "the same price, printed otherwise"
        );
        assert_eq!(triggers.iter().len(), 5);
        let oids: Vec<u64> = triggers
            .of_user_mut("BTC", "0xa")
            .map(|(oid, _)| oid)
            .collect();
        assert_eq!(oids, [4, 12]);
        assert_eq!(triggers.remove("ETH", "0xb", 3), Some(moved));
        assert_eq!(triggers.remove("ETH", "0xb", 3), None);
        assert_eq!(triggers.iter().len(), 4);
    }
}
