//! Open orders of one account: `StreamOpenOrders` and its `OpenOrdersUpdate`
//! (the whole list, numbered per subscriber), and the exchange's
//! `openOrders` channel (`{dex, user, orders}`, the orders as
//! `frontendOpenOrders` entries).

use engine::views::l4book::L4Order;
use engine::views::open_orders::{OpenOrdersKey, OpenOrdersSubscription, OpenOrdersUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
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
        (on.name() == "openOrders")
            .then(|| json!({ "dex": frame.dex, "user": frame.user, "orders": frame.orders }))
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
