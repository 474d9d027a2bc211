//! Order statuses of named accounts: `StreamOrderUpdates` and its
//! `OrderStatusesUpdate` (the node's status events as they are, numbered per
//! subscriber), and the exchange's `orderUpdates` channel.

use engine::views::registry::Key;
use engine::views::statuses::{OrderStatusesUpdate, StatusesSubscription};
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, addresses, view_status};

/// The field number of `sequence` in `OrderStatusesUpdate` (market_streaming.proto).
const SEQUENCE: u32 = 4;

impl Served for StatusesSubscription {
    const WS: &'static [WsType] = &[WsType {
        name: "orderUpdates",
        parse: |fields| {
            let user = channel::user(fields)?;
            let key = Key::Statuses(engine::views::statuses::StatusesKey {
                users: [user.clone()].into(),
            });
            Ok(Parsed::user(key, user))
        },
        opening: None,
    }];

    fn protobuf(frame: &OrderStatusesUpdate) -> Shared {
        Shared::sequenced(&message(frame), SEQUENCE)
    }

    fn ws_data(frame: &OrderStatusesUpdate, on: Channel) -> Option<Value> {
        (on.name() == "orderUpdates").then(|| {
            Value::Array(
                frame
                    .statuses
                    .iter()
                    .filter_map(|status| order_update(status.as_str(), frame.time))
                    .collect(),
            )
        })
    }
}

impl MarketRequest for pb::OrderUpdatesRequest {
    fn opening(self) -> Result<Opening, Status> {
        let users = addresses("users", &self.users)?;
        let key = engine::views::statuses::StatusesKey::new(&users.into_iter().collect::<Vec<_>>())
            .map_err(view_status)?;
        Ok(Opening::View(Key::Statuses(key)))
    }
}

fn message(frame: &OrderStatusesUpdate) -> pb::OrderStatusesUpdate {
    pb::OrderStatusesUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
        statuses: frame
            .statuses
            .iter()
            .map(|status| status.as_bytes().to_vec())
            .collect(),
        sequence: 0,
    }
}

/// A node order status event as the exchange's `WsOrder`: `{order: {coin,
/// side, limitPx, sz, oid, timestamp, origSz, cloid?}, status,
/// statusTimestamp}` (the status time is the block's).
fn order_update(status: &str, time: i64) -> Option<Value> {
    let event: Value = serde_json::from_str(status).ok()?;
    let order = event.get("order")?;
    let mut basic = json!({
        "coin": order.get("coin")?,
        "side": order.get("side")?,
        "limitPx": order.get("limitPx")?,
        "sz": order.get("sz")?,
        "oid": order.get("oid")?,
        "timestamp": order.get("timestamp")?,
        "origSz": order.get("origSz")?,
    });
    if let Some(cloid) = order.get("cloid").filter(|c| !c.is_null()) {
        basic["cloid"] = cloid.clone();
    }
    Some(json!({
        "order": basic,
        "status": event.get("status")?,
        "statusTimestamp": time,
    }))
}
