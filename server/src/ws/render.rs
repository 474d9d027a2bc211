//! The WebSocket edge's rendering of frames: each engine frame as the
//! exchange's channel message `{"channel":…,"data":…}`, rendered once per
//! batch and channel and shared (the text of a message is reference
//! counted) by every connection subscribed to the same key.
//!
//! Field names and shapes follow the exchange's WebSocket API (and, for
//! `l4Book`, the node servers'); prices and sizes keep the node's exact
//! text. One key can be read through several channels (an account's fills
//! as `userFills`, `userEvents` or `userTwapSliceFills`): each channel's
//! messages are made on first use.

use std::sync::OnceLock;

use axum::extract::ws::Utf8Bytes;
use engine::book::l2::L2Level;
use engine::market::candles::CandleUpdate;
use engine::market::fills::Fill;
use engine::market::trades::TradesUpdate;
use engine::views::l4book::{L4BookSnapshot, L4BookUpdate, L4Order};
use engine::views::registry::{Batch, Frame, Rendering};
use serde_json::{Value, json};

/// The channels frames are rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `l2Book`.
    L2Book,
    /// `bbo`.
    Bbo,
    /// `trades`.
    Trades,
    /// `candle`.
    Candle,
    /// `allMids`.
    AllMids,
    /// `userFills`.
    UserFills,
    /// `userEvents` (fills).
    UserEvents,
    /// `userTwapSliceFills`.
    UserTwapSliceFills,
    /// `orderUpdates`.
    OrderUpdates,
    /// `l4Book`.
    L4Book,
}

const CHANNELS: usize = 10;

impl Channel {
    fn index(self) -> usize {
        self as usize
    }

    /// The channel name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Channel::L2Book => "l2Book",
            Channel::Bbo => "bbo",
            Channel::Trades => "trades",
            Channel::Candle => "candle",
            Channel::AllMids => "allMids",
            Channel::UserFills => "userFills",
            Channel::UserEvents => "userEvents",
            Channel::UserTwapSliceFills => "userTwapSliceFills",
            Channel::OrderUpdates => "orderUpdates",
            Channel::L4Book => "l4Book",
        }
    }
}

/// A batch's messages per channel, each made on first use.
pub struct Json {
    channels: [OnceLock<Vec<Utf8Bytes>>; CHANNELS],
}

impl Rendering for Json {
    const SLOT: usize = 1;

    fn render(_batch: &Batch) -> Self {
        Self {
            channels: Default::default(),
        }
    }
}

/// The messages of `batch` on `channel`, shared with every other
/// connection reading the same key through the same channel.
pub fn messages(batch: &Batch, channel: Channel) -> Vec<Utf8Bytes> {
    let make = || -> Vec<Utf8Bytes> {
        batch
            .frames()
            .iter()
            .filter_map(|frame| text(frame, channel))
            .collect()
    };
    match batch.rendered::<Json>() {
        Some(json) => json.channels[channel.index()].get_or_init(make).clone(),
        // Another rendering holds the slot: made for this subscriber.
        None => make(),
    }
}

/// One frame's message on `channel`. An `l4Book` diff is spliced from the
/// node's event bytes as they are (nothing re-parsed); every other message
/// is written from its `data`.
fn text(frame: &Frame, channel: Channel) -> Option<Utf8Bytes> {
    if let (Frame::L4Book(L4BookUpdate::Diff(diff)), Channel::L4Book) = (frame, channel) {
        // `{"order_statuses":[…],"book_diffs":[…]}`: its members go after
        // `time` and `height` in the node servers' `Updates` object.
        let events = diff.data.as_str();
        let members = events
            .strip_prefix('{')
            .and_then(|e| e.strip_suffix('}'))
            .filter(|m| !m.trim().is_empty())
            .map_or_else(String::new, |m| format!(",{m}"));
        return Some(Utf8Bytes::from(format!(
            r#"{{"channel":"l4Book","data":{{"Updates":{{"time":{},"height":{}{members}}}}}}}"#,
            diff.time, diff.block_number
        )));
    }
    data(frame, channel).map(|data| message(channel.name(), &data))
}

/// `{"channel":…,"data":…}` as text.
pub fn message(channel: &str, data: &Value) -> Utf8Bytes {
    Utf8Bytes::from(json!({ "channel": channel, "data": data }).to_string())
}

/// The `data` of one frame on `channel`; `None` when the frame has nothing
/// for that channel.
pub fn data(frame: &Frame, channel: Channel) -> Option<Value> {
    Some(match (frame, channel) {
        (Frame::L2Book(book), Channel::L2Book) => json!({
            "coin": book.coin,
            "time": book.time,
            "levels": [levels(&book.bids), levels(&book.asks)],
        }),
        (Frame::Bbo(bbo), Channel::Bbo) => json!({
            "coin": bbo.coin,
            "time": bbo.time,
            "bbo": [bbo.bid.as_ref().map(level), bbo.ask.as_ref().map(level)],
        }),
        (Frame::Trades(trades), Channel::Trades) => self::trades(trades),
        (Frame::Candles(candle), Channel::Candle) => self::candle(candle),
        (Frame::Mids(mids), Channel::AllMids) => {
            let mids: serde_json::Map<String, Value> = mids
                .mids
                .iter()
                .map(|(coin, px)| (coin.clone(), Value::String(px.to_string())))
                .collect();
            json!({ "mids": mids })
        }
        // Live messages say they are not the snapshot the channel opened with.
        (Frame::Fills(update), Channel::UserFills) => json!({
            "user": update.fills.first()?.user,
            "fills": update.fills.iter().map(fill).collect::<Vec<_>>(),
            "isSnapshot": false,
        }),
        (Frame::Fills(update), Channel::UserEvents) => json!({
            "fills": update.fills.iter().map(fill).collect::<Vec<_>>(),
        }),
        (Frame::Fills(update), Channel::UserTwapSliceFills) => {
            let slices: Vec<Value> = update
                .fills
                .iter()
                .filter_map(|f| Some(json!({ "fill": fill(f), "twapId": f.twap_id? })))
                .collect();
            if slices.is_empty() {
                return None;
            }
            json!({
                "user": update.fills.first()?.user,
                "twapSliceFills": slices,
                "isSnapshot": false,
            })
        }
        (Frame::Statuses(update), Channel::OrderUpdates) => Value::Array(
            update
                .statuses
                .iter()
                .filter_map(|status| order_update(status.as_str(), update.time))
                .collect(),
        ),
        (Frame::L4Book(L4BookUpdate::Snapshot(snapshot)), Channel::L4Book) => l4_snapshot(snapshot),
        _ => return None,
    })
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

fn level(level: &L2Level) -> Value {
    json!({ "px": level.px.to_string(), "sz": level.sz.to_string(), "n": level.n })
}

fn levels(levels: &[L2Level]) -> Vec<Value> {
    levels.iter().map(level).collect()
}

fn trades(update: &TradesUpdate) -> Value {
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

fn candle(candle: &CandleUpdate) -> Value {
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

/// A fill as the exchange's `WsFill`: the node's fill without its user.
pub fn fill(fill: &Fill) -> Value {
    let mut out = json!({
        "coin": fill.coin,
        "px": fill.px.to_string(),
        "sz": fill.sz.to_string(),
        "side": fill.side.as_str(),
        "time": fill.time,
        "startPosition": fill.start_position.to_string(),
        "dir": fill.dir,
        "closedPnl": fill.closed_pnl.to_string(),
        "hash": fill.hash,
        "oid": fill.oid,
        "crossed": fill.crossed,
        "fee": fill.fee.to_string(),
        "tid": fill.tid,
        "feeToken": fill.fee_token,
        "twapId": fill.twap_id,
    });
    if let Some(cloid) = &fill.cloid {
        out["cloid"] = cloid.clone().into();
    }
    if let Some(fee) = &fill.builder_fee {
        out["builderFee"] = fee.to_string().into();
    }
    if let Some(liquidation) = &fill.liquidation {
        let mut object = json!({
            "markPx": liquidation.mark_px.to_string(),
            "method": liquidation.method,
        });
        if let Some(user) = &liquidation.liquidated_user {
            object["liquidatedUser"] = user.clone().into();
        }
        out["liquidation"] = object;
    }
    out
}

/// An `L4Order` in the node servers' camelCase, its user inlined.
fn l4order(order: &L4Order) -> Value {
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
/// tagged shape (their `Updates` are spliced by `text`).
fn l4_snapshot(snapshot: &L4BookSnapshot) -> Value {
    json!({
        "Snapshot": {
            "coin": snapshot.coin,
            "time": snapshot.time,
            "height": snapshot.block_number,
            "levels": [
                snapshot.bids.iter().map(l4order).collect::<Vec<_>>(),
                snapshot.asks.iter().map(l4order).collect::<Vec<_>>(),
            ],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::event::Side;
    use engine::market::Position;
    use engine::market::trades::Trade;
    use engine::num::Decimal;

    #[test]
    fn trades_render_as_the_exchange_sends_them_once_per_batch() {
        let trade = Trade {
            coin: "BTC".into(),
            side: Side::Ask,
            px: Decimal::parse("106296.0").unwrap(),
            sz: Decimal::parse("0.00017").unwrap(),
            time: 1_751_430_933_565,
            hash: "0xde93".into(),
            tid: 293_353_986_402_527,
            users: ["0xcc0a".into(), "0xc64c".into()],
        };
        let batch = Batch::new(
            Position::default(),
            vec![Frame::Trades(TradesUpdate {
                coin: "BTC".into(),
                time: 1_751_430_933_565,
                block_number: 7,
                trades: vec![trade],
            })],
        );
        let first = messages(&batch, Channel::Trades);
        let value: Value = serde_json::from_str(first[0].as_str()).unwrap();
        assert_eq!(
            value,
            json!({"channel":"trades","data":[{"coin":"BTC","side":"A","px":"106296.0",
                "sz":"0.00017","time":1_751_430_933_565_i64,"hash":"0xde93",
                "tid":293_353_986_402_527_u64,"users":["0xcc0a","0xc64c"]}]})
        );
        let again = messages(&batch, Channel::Trades);
        assert_eq!(first[0].as_str().as_ptr(), again[0].as_str().as_ptr());
        // Not a trades frame on another channel: nothing.
        assert!(messages(&batch, Channel::Bbo).is_empty());
    }

    #[test]
    fn l4_updates_carry_the_node_events_byte_for_byte() {
        let events = r#"{"order_statuses":[{"time":"2026-05-05T17:39:13.1","user":"0xab","status":"open","order":{"sz":"1.50"}}],"book_diffs":[]}"#;
        let batch = Batch::new(
            Position::default(),
            vec![Frame::L4Book(L4BookUpdate::Diff(
                engine::views::l4book::L4BookDiff {
                    time: 5,
                    block_number: 9,
                    data: engine::market::raw::RawJson::new(events.to_owned()),
                },
            ))],
        );
        let text = messages(&batch, Channel::L4Book);
        let body = &events[1..events.len() - 1];
        assert!(text[0].as_str().contains(body), "{}", text[0].as_str());
        let value: Value = serde_json::from_str(text[0].as_str()).unwrap();
        assert_eq!(value["data"]["Updates"]["height"], 9);
        assert_eq!(value["data"]["Updates"]["time"], 5);
        assert_eq!(value["data"]["Updates"]["book_diffs"], json!([]));
    }
}
