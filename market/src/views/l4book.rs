//! The order-level book: `StreamL4Book` and its `L4BookUpdate` (a snapshot,
//! then each block's node events as they are), and the node servers'
//! `l4Book` channel.

use axum::extract::ws::Utf8Bytes;
use engine::num::{Px, Sz};
use engine::views::l4book::{L4BookKey, L4BookSnapshot, L4BookSubscription, L4BookUpdate, L4Order};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde::Serialize;
use serde_json::Value;
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, one_coin};

impl Served for L4BookSubscription {
    /// Perp books only, as the node servers serve them.
    const WS: &'static [WsType] = &[WsType {
        name: "l4Book",
        parse: |fields| {
            let coin = channel::string(fields, "coin")?;
            if coin.starts_with('@') || coin.contains('/') {
                return Err(format!(
                    "coin: l4Book serves perp books only, got the spot coin {}",
                    common::quoted(&coin)
                ));
            }
            Ok(Parsed::of(Key::L4Book(L4BookKey::new(coin, None))))
        },
        opening: None,
    }];

    fn protobuf(frame: &L4BookUpdate) -> Shared {
        Shared::plain(&message(frame))
    }

    fn ws_data(frame: &L4BookUpdate, on: Channel) -> Option<Value> {
        match (frame, on) {
            (L4BookUpdate::Snapshot(snapshot), on) if on.name() == "l4Book" => {
                Some(snapshot_data(snapshot))
            }
            _ => None,
        }
    }

    /// A diff is spliced from the node's event bytes as they are (nothing
    /// re-parsed); a snapshot is written straight from its orders.
    fn ws_text(frame: &L4BookUpdate, on: Channel) -> Option<Utf8Bytes> {
        let diff = match (frame, on.name()) {
            (L4BookUpdate::Diff(diff), "l4Book") => diff,
            (L4BookUpdate::Snapshot(snapshot), "l4Book") => return Some(snapshot_text(snapshot)),
            _ => return Self::ws_data(frame, on).map(|data| channel::message(on.name(), &data)),
        };
        // `{"order_statuses":[…],"book_diffs":[…]}`: its members go after
        // `time` and `height` in the node servers' `Updates` object.
        let events = diff.data.as_str();
        let members = events
            .strip_prefix('{')
            .and_then(|e| e.strip_suffix('}'))
            .filter(|m| !m.trim().is_empty())
            .map_or_else(String::new, |m| format!(",{m}"));
        Some(Utf8Bytes::from(format!(
            r#"{{"channel":"l4Book","data":{{"Updates":{{"time":{},"height":{}{members}}}}}}}"#,
            diff.time, diff.block_number
        )))
    }
}

impl MarketRequest for pb::L4BookRequest {
    fn opening(self) -> Result<Opening, Status> {
        // Only outcome coins have a sibling to mirror; other coins share one
        // key whatever the flag says.
        Ok(Opening::View(Key::L4Book(L4BookKey::new(
            one_coin(&self.coin)?,
            self.mirror,
        ))))
    }
}

/// An order as its protobuf message.
pub(super) fn order(order: &L4Order) -> pb::L4Order {
    pb::L4Order {
        user: order.user.clone(),
        coin: order.coin.clone(),
        side: order.side.as_str().to_owned(),
        limit_px: order.limit_px.to_string(),
        sz: order.sz.to_string(),
        oid: order.oid,
        timestamp: order.timestamp,
        trigger_condition: order.trigger_condition.clone(),
        is_trigger: order.is_trigger,
        trigger_px: order.trigger_px.to_string(),
        is_position_tpsl: order.is_position_tpsl,
        reduce_only: order.reduce_only,
        order_type: order.order_type.clone(),
        tif: order.tif.clone(),
        cloid: order.cloid.clone(),
        synthetic: order.synthetic,
    }
}

fn message(frame: &L4BookUpdate) -> pb::L4BookUpdate {
    let update = match frame {
        L4BookUpdate::Snapshot(snapshot) => {
            pb::l4_book_update::Update::Snapshot(pb::L4BookSnapshot {
                coin: snapshot.coin.clone(),
                time: snapshot.time,
                block_number: protobuf::block(snapshot.block_number),
                bids: snapshot.bids.iter().map(order).collect(),
                asks: snapshot.asks.iter().map(order).collect(),
            })
        }
        L4BookUpdate::Diff(diff) => pb::l4_book_update::Update::Diff(pb::L4BookDiff {
            time: diff.time,
            block_number: protobuf::block(diff.block_number),
            data: diff.data.as_bytes().to_vec().into(),
        }),
    };
    pb::L4BookUpdate {
        update: Some(update),
    }
}

/// An `L4Order` in the node servers' camelCase, its user inlined; the
/// keys in byte order (as the first form of this message, a JSON map,
/// wrote them), `synthetic` only when set.
#[derive(Serialize)]
struct OrderData<'a> {
    cloid: Option<&'a str>,
    coin: &'a str,
    #[serde(rename = "isPositionTpsl")]
    is_position_tpsl: bool,
    #[serde(rename = "isTrigger")]
    is_trigger: bool,
    #[serde(rename = "limitPx")]
    limit_px: Px,
    oid: u64,
    #[serde(rename = "orderType")]
    order_type: &'a str,
    #[serde(rename = "reduceOnly")]
    reduce_only: bool,
    side: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    synthetic: bool,
    sz: Sz,
    tif: Option<&'a str>,
    timestamp: i64,
    #[serde(rename = "triggerCondition")]
    trigger_condition: &'a str,
    #[serde(rename = "triggerPx")]
    trigger_px: Px,
    user: &'a str,
}

impl<'a> OrderData<'a> {
    fn of(order: &'a L4Order) -> Self {
        Self {
            cloid: order.cloid.as_deref(),
            coin: &order.coin,
            is_position_tpsl: order.is_position_tpsl,
            is_trigger: order.is_trigger,
            limit_px: order.limit_px,
            oid: order.oid,
            order_type: &order.order_type,
            reduce_only: order.reduce_only,
            side: order.side.as_str(),
            synthetic: order.synthetic,
            sz: order.sz,
            tif: order.tif.as_deref(),
            timestamp: order.timestamp,
            trigger_condition: &order.trigger_condition,
            trigger_px: order.trigger_px,
            user: &order.user,
        }
    }
}

/// `{"Snapshot":{coin,height,levels,time}}`, the node servers' externally
/// tagged shape (their `Updates` are spliced by `ws_text`), written
/// straight from the orders: a busy book's snapshot is thousands of
/// orders, and a JSON map of each cost the runtime's worker milliseconds.
#[derive(Serialize)]
struct SnapshotData<'a> {
    #[serde(rename = "Snapshot")]
    snapshot: SnapshotFields<'a>,
}

#[derive(Serialize)]
struct SnapshotFields<'a> {
    coin: &'a str,
    height: u64,
    levels: [Orders<'a>; 2],
    time: i64,
}

/// One side's orders, written one by one.
struct Orders<'a>(&'a [L4Order]);

impl Serialize for Orders<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(OrderData::of))
    }
}

impl<'a> SnapshotData<'a> {
    fn of(snapshot: &'a L4BookSnapshot) -> Self {
        Self {
            snapshot: SnapshotFields {
                coin: &snapshot.coin,
                height: snapshot.block_number,
                levels: [Orders(&snapshot.bids), Orders(&snapshot.asks)],
                time: snapshot.time,
            },
        }
    }
}

/// The snapshot's `data`.
fn snapshot_data(snapshot: &L4BookSnapshot) -> Value {
    serde_json::to_value(SnapshotData::of(snapshot)).unwrap_or(Value::Null)
}

/// The snapshot's whole message on the `l4Book` channel.
fn snapshot_text(snapshot: &L4BookSnapshot) -> Utf8Bytes {
    channel::message("l4Book", &SnapshotData::of(snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::event::Side;
    use engine::num::Decimal;

    fn order(oid: u64, side: Side, px: &str) -> L4Order {
        L4Order {
            user: "0xab\"c\\d".to_owned(),
            coin: "BTC".to_owned(),
            side,
            limit_px: Decimal::parse(px).unwrap(),
            sz: Decimal::parse("0.0100").unwrap(),
            oid,
            timestamp: 1_777_582_003_304,
            trigger_condition: "N/A".to_owned(),
            is_trigger: false,
            trigger_px: Decimal::parse("0.0").unwrap(),
            is_position_tpsl: false,
            reduce_only: oid.is_multiple_of(2),
            order_type: "Limit".to_owned(),
            tif: Some("Alo".to_owned()),
            cloid: None,
            synthetic: false,
        }
    }

    /// The message as the first form of this view wrote it (a JSON map per
    /// order, keys sorted): clients that compare bytes see no change.
    const SNAPSHOT_TEXT: &str = r#"{"channel":"l4Book","data":{"Snapshot":{"coin":"BTC","height":985148181,"levels":[[{"cloid":null,"coin":"BTC","isPositionTpsl":false,"isTrigger":false,"limitPx":"76450.0","oid":1,"orderType":"Limit","reduceOnly":false,"side":"B","sz":"0.0100","tif":"Alo","timestamp":1777582003304,"triggerCondition":"N/A","triggerPx":"0.0","user":"0xab\"c\\d"},{"cloid":null,"coin":"BTC","isPositionTpsl":false,"isTrigger":false,"limitPx":"76449.5","oid":2,"orderType":"Limit","reduceOnly":true,"side":"B","sz":"0.0100","tif":"Alo","timestamp":1777582003304,"triggerCondition":"N/A","triggerPx":"0.0","user":"0xab\"c\\d"}],[{"cloid":"0x00000000000000000000019ddecca7eb","coin":"BTC","isPositionTpsl":true,"isTrigger":true,"limitPx":"76500","oid":3,"orderType":"Limit","reduceOnly":false,"side":"A","synthetic":true,"sz":"0.0100","tif":null,"timestamp":1777582003304,"triggerCondition":"Price above 76717","triggerPx":"0.0","user":"0xab\"c\\d"}]],"time":1777582003000}}}"#;

    #[test]
    fn a_snapshot_is_written_as_the_node_servers_write_it() {
        let mut mirrored = order(3, Side::Ask, "76500");
        mirrored.synthetic = true;
        mirrored.tif = None;
        mirrored.cloid = Some("0x00000000000000000000019ddecca7eb".to_owned());
        mirrored.is_trigger = true;
        mirrored.is_position_tpsl = true;
        mirrored.trigger_condition = "Price above 76717".to_owned();
        let snapshot = L4BookSnapshot {
            coin: "BTC".to_owned(),
            time: 1_777_582_003_000,
            block_number: 985_148_181,
            bids: vec![
                order(1, Side::Bid, "76450.0"),
                order(2, Side::Bid, "76449.5"),
            ],
            asks: vec![mirrored],
        };
        let channel = crate::views::ws_channel("l4Book").unwrap();
        let update = L4BookUpdate::Snapshot(snapshot);
        let text = L4BookSubscription::ws_text(&update, channel).unwrap();
        assert_eq!(text.as_str(), SNAPSHOT_TEXT);
        // The `data` alone is the same document.
        let data = L4BookSubscription::ws_data(&update, channel).unwrap();
        let whole: Value = serde_json::from_str(SNAPSHOT_TEXT).unwrap();
        assert_eq!(data, whole["data"]);
        // An empty book: two empty sides.
        let empty = L4BookUpdate::Snapshot(L4BookSnapshot {
            coin: "ETH".to_owned(),
            time: 1,
            block_number: 2,
            bids: Vec::new(),
            asks: Vec::new(),
        });
        assert_eq!(
            L4BookSubscription::ws_text(&empty, channel)
                .unwrap()
                .as_str(),
            r#"{"channel":"l4Book","data":{"Snapshot":{"coin":"ETH","height":2,"levels":[[],[]],"time":1}}}"#
        );
    }
}
