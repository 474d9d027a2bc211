//! The order-level book: `StreamL4Book` and its `L4BookUpdate` (a snapshot,
//! then each block's node events as they are), and the node servers'
//! `l4Book` channel.

use axum::extract::ws::Utf8Bytes;
use engine::views::l4book::{L4BookKey, L4BookSnapshot, L4BookSubscription, L4BookUpdate, L4Order};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
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
    /// re-parsed); a snapshot is written from its `data`.
    fn ws_text(frame: &L4BookUpdate, on: Channel) -> Option<Utf8Bytes> {
        let (L4BookUpdate::Diff(diff), "l4Book") = (frame, on.name()) else {
            return Self::ws_data(frame, on).map(|data| channel::message(on.name(), &data));
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

/// An `L4Order` in the node servers' camelCase, its user inlined.
fn order_data(order: &L4Order) -> Value {
    let mut out = json!({
        "user": order.user,
        "coin": order.coin,
        "side": order.side.as_str(),
        "limitPx": order.limit_px.to_string(),
        "sz": order.sz.to_string(),
        "oid": order.oid,
        "timestamp": order.timestamp,
        "triggerCondition": order.trigger_condition,
        "isTrigger": order.is_trigger,
        "triggerPx": order.trigger_px.to_string(),
        "isPositionTpsl": order.is_position_tpsl,
        "reduceOnly": order.reduce_only,
        "orderType": order.order_type,
        "tif": order.tif,
        "cloid": order.cloid,
    });
    if order.synthetic {
        out["synthetic"] = true.into();
    }
    out
}

/// `{"Snapshot":{coin,time,height,levels}}`, the node servers' externally
/// tagged shape (their `Updates` are spliced by `ws_text`).
fn snapshot_data(snapshot: &L4BookSnapshot) -> Value {
    json!({
        "Snapshot": {
            "coin": snapshot.coin,
            "time": snapshot.time,
            "height": snapshot.block_number,
            "levels": [
                snapshot.bids.iter().map(order_data).collect::<Vec<_>>(),
                snapshot.asks.iter().map(order_data).collect::<Vec<_>>(),
            ],
        }
    })
}
