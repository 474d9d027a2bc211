//! The node's order status and raw book diff events, read from the JSON the
//! `statuses` and `l4book` frames carry byte-identical, and the columns
//! both tables give them.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::num::Decimal;
use crate::table::{Cell, Column, Kind, TableError};

/// An order status event: `{time, user, hash, builder, status, order}`.
#[derive(Debug, Deserialize)]
pub(crate) struct StatusEvent<'a> {
    #[serde(borrow)]
    pub user: Cow<'a, str>,
    #[serde(borrow)]
    pub hash: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub builder: Option<Builder<'a>>,
    #[serde(borrow)]
    pub status: Cow<'a, str>,
    #[serde(borrow)]
    pub order: Order<'a>,
}

/// A status's builder: address and fee (tenths of a basis point).
#[derive(Debug, Deserialize)]
pub(crate) struct Builder<'a> {
    #[serde(borrow)]
    pub b: Cow<'a, str>,
    pub f: u32,
}

/// The order object of a status event (field names the node's).
#[derive(Debug, Deserialize)]
#[allow(clippy::struct_field_names)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Order<'a> {
    #[serde(borrow)]
    pub coin: Cow<'a, str>,
    #[serde(borrow)]
    pub side: Cow<'a, str>,
    #[serde(borrow)]
    pub limit_px: Cow<'a, str>,
    #[serde(borrow)]
    pub sz: Cow<'a, str>,
    pub oid: u64,
    pub timestamp: i64,
    #[serde(borrow)]
    pub trigger_condition: Cow<'a, str>,
    pub is_trigger: bool,
    #[serde(borrow)]
    pub trigger_px: Cow<'a, str>,
    #[serde(borrow, default)]
    pub children: Option<&'a RawValue>,
    pub is_position_tpsl: bool,
    pub reduce_only: bool,
    #[serde(borrow)]
    pub order_type: Cow<'a, str>,
    #[serde(borrow)]
    pub orig_sz: Cow<'a, str>,
    #[serde(borrow)]
    pub tif: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub cloid: Option<Cow<'a, str>>,
}

/// A raw book diff event: `{user, oid, coin, side, px, raw_book_diff}`.
#[derive(Debug, Deserialize)]
pub(crate) struct DiffEvent<'a> {
    #[serde(borrow)]
    pub user: Cow<'a, str>,
    pub oid: u64,
    #[serde(borrow)]
    pub coin: Cow<'a, str>,
    #[serde(borrow)]
    pub side: Cow<'a, str>,
    #[serde(borrow)]
    pub px: Cow<'a, str>,
    #[serde(borrow)]
    pub raw_book_diff: RawBookDiff<'a>,
}

/// `{"new":{"sz"}}`, `{"update":{"origSz","newSz"}}` or `"remove"`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RawBookDiff<'a> {
    New {
        #[serde(borrow)]
        sz: Cow<'a, str>,
    },
    Update {
        #[serde(borrow, rename = "origSz")]
        orig_sz: Cow<'a, str>,
        #[serde(borrow, rename = "newSz")]
        new_sz: Cow<'a, str>,
    },
    Remove,
}

impl RawBookDiff<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            RawBookDiff::New { .. } => "new",
            RawBookDiff::Update { .. } => "update",
            RawBookDiff::Remove => "remove",
        }
    }
}

/// An event the frame carries that is not the node's form of it.
pub(crate) fn unreadable(table: &'static str, error: &serde_json::Error) -> TableError {
    TableError::Event {
        table,
        message: error.to_string(),
    }
}

/// The node's decimal text as a decimal cell.
pub(crate) fn decimal(
    table: &'static str,
    column: &'static str,
    text: &str,
) -> Result<Cell<'static>, TableError> {
    Decimal::parse(text)
        .map(Cell::decimal)
        .map_err(|_| TableError::Value {
            table,
            column,
            reason: "not a decimal number",
        })
}

/// The columns of an order status, in the order [`status_cells`] fills
/// them (after the table's own leading columns).
pub(crate) const STATUS: [Column; 21] = [
    Column::required("user", Kind::Text, "the order's owner"),
    Column::optional(
        "hash",
        Kind::Text,
        "transaction hash; empty for statuses with none (rejections, system cancels)",
    ),
    Column::optional(
        "builder",
        Kind::Text,
        "builder address, when the order has one",
    ),
    Column::optional(
        "builder_fee",
        Kind::UInt32,
        "builder fee, tenths of a basis point",
    ),
    Column::required(
        "status",
        Kind::Text,
        "`open`, `filled`, `canceled`, `triggered`, `…Rejected`, `…Canceled` (the node's word)",
    ),
    Column::required("coin", Kind::Text, "market"),
    Column::required("side", Kind::Text, "`B` or `A`"),
    Column::required("limit_px", Kind::Decimal, "limit price"),
    Column::required("sz", Kind::Decimal, "remaining size (0 on `filled`)"),
    Column::required("orig_sz", Kind::Decimal, "size as placed"),
    Column::required("oid", Kind::UInt64, "order id"),
    Column::required("timestamp", Kind::TimeMs, "placement time"),
    Column::required("order_type", Kind::Text, "`Limit`, `Stop Market`, …"),
    Column::optional(
        "tif",
        Kind::Text,
        "time in force (`Gtc`, `Ioc`, `Alo`, …); empty for trigger and market orders",
    ),
    Column::required("reduce_only", Kind::Bool, "reduce-only"),
    Column::required("is_trigger", Kind::Bool, "an untriggered trigger order"),
    Column::required("trigger_px", Kind::Decimal, "trigger price (0 when none)"),
    Column::required(
        "trigger_condition",
        Kind::Text,
        "`N/A`, `Price above …`, `Triggered`, …",
    ),
    Column::required("is_position_tpsl", Kind::Bool, "a position TP/SL"),
    Column::optional("cloid", Kind::Text, "client order id"),
    Column::optional(
        "children",
        Kind::Text,
        "TP/SL children as the node's JSON array; empty when there are none",
    ),
];

/// The cells of [`STATUS`] for `event`.
pub(crate) fn status_cells<'e>(
    table: &'static str,
    event: &'e StatusEvent<'_>,
) -> Result<[Cell<'e>; 21], TableError> {
    let order = &event.order;
    let children = order
        .children
        .map(RawValue::get)
        .filter(|text| text.trim() != "[]");
    Ok([
        Cell::Text(&event.user),
        Cell::text_or_null(event.hash.as_deref()),
        Cell::text_or_null(event.builder.as_ref().map(|b| b.b.as_ref())),
        event
            .builder
            .as_ref()
            .map_or(Cell::Null, |b| Cell::U32(b.f)),
        Cell::Text(&event.status),
        Cell::Text(&order.coin),
        Cell::Text(&order.side),
        decimal(table, "limit_px", &order.limit_px)?,
        decimal(table, "sz", &order.sz)?,
        decimal(table, "orig_sz", &order.orig_sz)?,
        Cell::U64(order.oid),
        Cell::TimeMs(order.timestamp),
        Cell::Text(&order.order_type),
        Cell::text_or_null(order.tif.as_deref()),
        Cell::Bool(order.reduce_only),
        Cell::Bool(order.is_trigger),
        decimal(table, "trigger_px", &order.trigger_px)?,
        Cell::Text(&order.trigger_condition),
        Cell::Bool(order.is_position_tpsl),
        Cell::text_or_null(order.cloid.as_deref()),
        Cell::text_or_null(children),
    ])
}
