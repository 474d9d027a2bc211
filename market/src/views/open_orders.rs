//! Open orders of one account: `StreamOpenOrders` and its `OpenOrdersUpdate`
//! (the whole list, numbered per subscriber), and the exchange's
//! `openOrders` channel (`{dex, user, orders}`, the orders as
//! `frontendOpenOrders` entries).

use axum::extract::ws::Utf8Bytes;
use engine::views::l4book::L4Order;
use engine::views::open_orders::{OpenOrdersKey, OpenOrdersSubscription, OpenOrdersUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::Value;
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, address};

/// The field number of `sequence` in `OpenOrdersUpdate` (market_streaming.proto).
const SEQUENCE: u32 = 6;

/// The longest exchange name taken (builder-deployed exchanges' names are
/// a few letters).
const MAX_DEX: usize = 32;

impl Served for OpenOrdersSubscription {
    /// `dex` absent, `null` or empty: the default exchange.
    const WS: &'static [WsType] = &[WsType {
        name: "openOrders",
        parse: |fields| {
            let user = channel::user(fields)?;
            let dex = channel::optional_string(fields, "dex")?;
            let key = Key::OpenOrders(OpenOrdersKey::new(&user, self::dex(&dex)?));
            Ok(Parsed::user(key, user))
        },
        opening: None,
    }];

    fn protobuf(frame: &OpenOrdersUpdate) -> Shared {
        Shared::sequenced(&message(frame), SEQUENCE)
    }

    fn ws_data(frame: &OpenOrdersUpdate, on: Channel) -> Option<Value> {
        if on.name() != "openOrders" {
            return None;
        }
        serde_json::to_value(Data::of(frame)).ok()
    }

    /// Written straight from the orders (a market maker's list is tens of
    /// thousands of them; see [`channel::message`]).
    fn ws_text(frame: &OpenOrdersUpdate, on: Channel) -> Option<Utf8Bytes> {
        (on.name() == "openOrders").then(|| channel::message(on.name(), &Data::of(frame)))
    }
}

/// The `openOrders` channel's `data`, keys in byte order.
#[derive(serde::Serialize)]
struct Data<'a> {
    dex: &'a str,
    orders: &'a [engine::views::open_orders::OpenOrder],
    user: &'a str,
}

impl<'a> Data<'a> {
    fn of(frame: &'a OpenOrdersUpdate) -> Self {
        Self {
            dex: &frame.dex,
            orders: &frame.orders,
            user: &frame.user,
        }
    }
}

impl MarketRequest for pb::OpenOrdersRequest {
    fn opening(self) -> Result<Opening, Status> {
        let user = address("user", &self.user)?;
        let dex = dex(&self.dex).map_err(Status::invalid_argument)?;
        Ok(Opening::View(Key::OpenOrders(OpenOrdersKey::new(
            &user, dex,
        ))))
    }
}

/// An exchange's name as a request gives it: empty (the default exchange)
/// or up to [`MAX_DEX`] ASCII letters and digits.
///
/// # Errors
/// What is wrong with it, naming the field `dex`.
pub fn dex(dex: &str) -> Result<&str, String> {
    if dex.len() <= MAX_DEX && dex.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(dex)
    } else {
        Err(format!(
            "dex: an exchange's name is up to {MAX_DEX} letters and digits (empty for the \
             default exchange), got {}",
            common::quoted(dex)
        ))
    }
}

fn message(frame: &OpenOrdersUpdate) -> pb::OpenOrdersUpdate {
    pb::OpenOrdersUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
        user: frame.user.clone(),
        dex: frame.dex.clone(),
        orders: frame
            .orders
            .iter()
            .map(|open| super::l4book::order(&L4Order::of(&open.coin, &open.order)))
            .collect(),
        sequence: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::book::l4::RestingOrder;
    use engine::event::Side;
    use engine::num::Decimal;
    use engine::views::open_orders::OpenOrder;
    use std::sync::Arc;

    #[test]
    fn the_channels_message_is_the_document_it_was() {
        let px = |text: &str| Decimal::parse(text).unwrap();
        let mut cloided = RestingOrder::bare("0xab", 8, Side::Ask, px("76500"), px("0.5"), 2);
        cloided.cloid = Some("0x00000000000000000000019ddecca7eb".into());
        let orders = vec![
            OpenOrder {
                coin: "BTC".into(),
                order: Arc::new(cloided),
            },
            OpenOrder {
                coin: "ETH".into(),
                order: Arc::new(RestingOrder::bare(
                    "0xab",
                    7,
                    Side::Bid,
                    px("2500.10"),
                    px("1.000"),
                    1,
                )),
            },
        ];
        let frame = OpenOrdersUpdate {
            time: 5,
            block_number: 6,
            user: "0xab".to_owned(),
            dex: String::new(),
            orders,
            sequence: 0,
        };
        let channel = crate::views::ws_channel("openOrders").unwrap();
        let text = OpenOrdersSubscription::ws_text(&frame, channel).unwrap();
        // As a JSON tree of the frame wrote it (keys sorted at every level).
        let tree =
            serde_json::json!({ "dex": frame.dex, "user": frame.user, "orders": frame.orders });
        assert_eq!(
            text.as_str(),
            channel::message("openOrders", &tree).as_str()
        );
        assert!(
            text.as_str()
                .contains(r#""cloid":"0x00000000000000000000019ddecca7eb""#)
        );
        assert_eq!(OpenOrdersSubscription::ws_data(&frame, channel), Some(tree));
    }
}
