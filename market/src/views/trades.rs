//! Trades: `StreamTrades` and its `TradesUpdate`, and the exchange's
//! `trades` channel.

use engine::market::trades::TradesUpdate;
use engine::views::registry::Key;
use engine::views::trades::{TradesKey, TradesSubscription};
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, coins};

impl Served for TradesSubscription {
    const WS: &'static [WsType] = &[WsType {
        name: "trades",
        parse: |fields| {
            let coin = channel::string(fields, "coin")?;
            Ok(Parsed::of(Key::Trades(TradesKey {
                coins: [coin].into(),
            })))
        },
        opening: None,
    }];

    fn protobuf(frame: &TradesUpdate) -> Shared {
        Shared::plain(&message(frame))
    }

    fn ws_data(frame: &TradesUpdate, on: Channel) -> Option<Value> {
        (on.name() == "trades").then(|| data(frame))
    }
}

impl MarketRequest for pb::TradesRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::Trades(TradesKey {
            coins: coins("coins", &self.coins)?,
        })))
    }
}

fn message(frame: &TradesUpdate) -> pb::TradesUpdate {
    pb::TradesUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
        trades: frame
            .trades
            .iter()
            .map(|trade| pb::Trade {
                coin: trade.coin.clone(),
                side: trade.side.as_str().to_owned(),
                px: trade.px.to_string(),
                sz: trade.sz.to_string(),
                time: trade.time,
                hash: trade.hash.clone(),
                tid: trade.tid,
                users: trade.users.to_vec(),
            })
            .collect(),
    }
}

fn data(update: &TradesUpdate) -> Value {
    Value::Array(
        update
            .trades
            .iter()
            .map(|trade| {
                json!({
                    "coin": trade.coin,
                    "side": trade.side.as_str(),
                    "px": trade.px.to_string(),
                    "sz": trade.sz.to_string(),
                    "time": trade.time,
                    "hash": trade.hash,
                    "tid": trade.tid,
                    "users": trade.users,
                })
            })
            .collect(),
    )
}
