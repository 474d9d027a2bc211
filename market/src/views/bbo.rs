//! Best bid and offer: `StreamBbo`, its `BboUpdate`, and the `bbo` channel.

use engine::views::bbo::{BboKey, BboSubscription, BboUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening};

impl Served for BboSubscription {
    const WS: &'static [WsType] = &[WsType {
        name: "bbo",
        parse: |fields| {
            let coin = channel::string(fields, "coin")?;
            Ok(Parsed::of(Key::Bbo(BboKey {
                coins: [coin].into(),
            })))
        },
        opening: None,
    }];

    fn protobuf(frame: &BboUpdate) -> Shared {
        Shared::plain(&pb::BboUpdate {
            coin: frame.coin.clone(),
            time: frame.time,
            block_number: protobuf::block(frame.block_number),
            bid: frame.bid.as_ref().map(protobuf::level),
            ask: frame.ask.as_ref().map(protobuf::level),
        })
    }

    fn ws_data(frame: &BboUpdate, on: Channel) -> Option<Value> {
        (on.name() == "bbo").then(|| {
            json!({
                "coin": frame.coin,
                "time": frame.time,
                "bbo": [frame.bid.as_ref().map(channel::level), frame.ask.as_ref().map(channel::level)],
            })
        })
    }
}

impl MarketRequest for pb::BboRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::Bbo(BboKey {
            coins: crate::views::request::coins("coins", &self.coins)?,
        })))
    }
}
