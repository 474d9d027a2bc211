//! Candles: `StreamCandle` and its `CandleUpdate`, and the exchange's
//! `candle` channel.

use engine::market::candles::{CandleUpdate, Interval};
use engine::views::ViewError;
use engine::views::candles::{CandleKey, CandleSubscription};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, one_coin, view_status};

impl Served for CandleSubscription {
    const WS: &'static [WsType] = &[WsType {
        name: "candle",
        parse: subscription,
        opening: None,
    }];

    fn protobuf(frame: &CandleUpdate) -> Shared {
        Shared::plain(&message(frame))
    }

    fn ws_data(frame: &CandleUpdate, on: Channel) -> Option<Value> {
        (on.name() == "candle").then(|| data(frame))
    }
}

/// `{"type":"candle","coin","interval"}`.
fn subscription(fields: &serde_json::Map<String, Value>) -> Result<Parsed, String> {
    let coin = channel::string(fields, "coin")?;
    let intervals = || Interval::ALL.map(Interval::as_str).join(" ");
    let interval = channel::string(fields, "interval")
        .map_err(|why| format!("{why}; one of {}", intervals()))?;
    let interval = Interval::parse(&interval).map_err(|_| {
        format!(
            "interval: unknown interval {}; one of {}",
            common::quoted(&interval),
            intervals()
        )
    })?;
    Ok(Parsed::of(Key::Candles(CandleKey { coin, interval })))
}

impl MarketRequest for pb::CandleRequest {
    fn opening(self) -> Result<Opening, Status> {
        let coin = one_coin(&self.coin)?;
        if self.interval.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "interval: required; one of {}",
                Interval::ALL.map(Interval::as_str).join(" ")
            )));
        }
        let interval = Interval::parse(&self.interval)
            .map_err(|error| view_status(ViewError::Candle(error)))?;
        Ok(Opening::View(Key::Candles(CandleKey { coin, interval })))
    }
}

fn message(frame: &CandleUpdate) -> pb::CandleUpdate {
    pb::CandleUpdate {
        coin: frame.coin.clone(),
        interval: frame.interval.as_str().to_owned(),
        open_time: frame.open_time,
        close_time: frame.close_time,
        open: frame.open.to_string(),
        high: frame.high.to_string(),
        low: frame.low.to_string(),
        close: frame.close.to_string(),
        volume: frame.volume.to_string(),
        trades_count: frame.trades_count,
        vwap: frame.vwap.to_string(),
        block_number: protobuf::block(frame.block_number),
        time: frame.time,
        closed: frame.closed,
    }
}

fn data(candle: &CandleUpdate) -> Value {
    json!({
        "t": candle.open_time,
        "T": candle.close_time,
        "s": candle.coin,
        "i": candle.interval.as_str(),
        "o": candle.open.to_string(),
        "c": candle.close.to_string(),
        "h": candle.high.to_string(),
        "l": candle.low.to_string(),
        "v": candle.volume.to_string(),
        "n": candle.trades_count,
    })
}
