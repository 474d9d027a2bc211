//! Info request types answered from l1gate's own state, with or without an
//! Info source, in the exchange's response shapes:
//!
//! - `l2Book` (`coin`, `nSigFigs`, `mantissa`): `{coin, time, levels}`, 20
//!   levels a side, from the engine's books (the same view as the `l2Book`
//!   channel and `StreamL2Book`);
//! - `allMids` (`dex`): `{coin: mid}` of one exchange, book mids;
//! - `openOrders` (`user`, `dex`): the account's resting orders, newest
//!   first: `{coin, side, limitPx, sz, oid, timestamp, origSz}`, and
//!   `cloid` when the order has one;
//! - `frontendOpenOrders` (`user`, `dex`): the same with the order's
//!   details (`orderType`, `tif`, `reduceOnly`, trigger fields, `cloid` —
//!   `null` when unset);
//!   `children` is always empty (the book does not keep brackets);
//! - `candleSnapshot` (`req`: `coin`, `interval`, `startTime`, `endTime`):
//!   the candles with trades in the range, oldest first, at most the newest
//!   5,000, as `{t, T, s, i, o, c, h, l, v, n}`, for every interval the
//!   exchange offers: `1s`/`1m`/`5m` as stored (and live), the others built
//!   from the stored buckets inside them (`3m` from `1m`, the rest from
//!   `5m`); a bucket partly outside the store's coverage is left out, but
//!   for the one the node's files begin in, served while it is open with
//!   the trades from the files' first block on, as the `candle` channel
//!   serves it ([`Candles::snapshot`]).
//!
//! A request outside this contract is 400 `invalid_request` naming the
//! field; an unknown coin or a coin without a book is 400 too; before the
//! engine caught up, 503 `not_ready`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::StatusCode;
use bytes::Bytes;
use engine::book::l4::{Cloid, RestingOrder, UserOrders};
use engine::event::Side;
use engine::hub::Recv;
use engine::market::candles::Interval;
use engine::num::{Px, Sz};
use engine::text::Short;
use engine::views::open_orders::newest_first;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::views;
use crate::ws::protocol;
use host::candles::{Candles, Miss, stored_under};
use host::engine::{Commands, EngineStatus, SubscribeError, read, subscribe};

/// The request types answered here.
pub const LOCAL_TYPES: [&str; 5] = [
    "l2Book",
    "allMids",
    "openOrders",
    "frontendOpenOrders",
    "candleSnapshot",
];

/// Most candles one `candleSnapshot` answers (the exchange's bound).
pub const MAX_CANDLES: usize = 5_000;

/// A refusal: HTTP status, error code, message.
pub type Refusal = (StatusCode, &'static str, String);

/// Where local answers come from.
#[derive(Debug, Clone)]
pub struct Local {
    /// The engine thread's commands.
    pub commands: Commands,
    /// Its status.
    pub status: Arc<EngineStatus>,
    /// The candles served (`None`: no candle store).
    pub candles: Option<Arc<Candles>>,
    /// `openOrders` answers of the current block, shared.
    pub open_orders: Arc<OpenOrdersCache>,
}

/// `openOrders` and `frontendOpenOrders` answers made at one block, by
/// user, exchange and form: every request for the same ones until the next
/// block is answered from here, so a market maker's tens of thousands of
/// orders are read and rendered once per block however many clients ask.
#[derive(Debug, Default)]
pub struct OpenOrdersCache {
    answers: parking_lot::Mutex<HashMap<OrdersAsked, (u64, Bytes)>>,
}

/// Whose orders, on which exchange, in which form (`frontendOpenOrders`).
type OrdersAsked = (String, String, bool);

/// Answers [`OpenOrdersCache`] keeps at most; past it, those of older
/// blocks are dropped (all of them, if every one is current).
const OPEN_ORDERS_KEPT: usize = 256;

impl OpenOrdersCache {
    fn get(&self, key: &OrdersAsked, block: u64) -> Option<Bytes> {
        let answers = self.answers.lock();
        let (made_at, answer) = answers.get(key)?;
        (*made_at == block).then(|| answer.clone())
    }

    fn put(&self, key: OrdersAsked, block: u64, answer: Bytes) {
        let mut answers = self.answers.lock();
        if answers.len() >= OPEN_ORDERS_KEPT && !answers.contains_key(&key) {
            answers.retain(|_, (made_at, _)| *made_at >= block);
            if answers.len() >= OPEN_ORDERS_KEPT {
                answers.clear();
            }
        }
        answers.insert(key, (block, answer));
    }
}

fn invalid(message: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, "invalid_request", message.into())
}

fn refused(error: SubscribeError) -> Refusal {
    match error {
        SubscribeError::NotReady => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the market engine is still catching up with the node files; retry shortly".into(),
        ),
        SubscribeError::Stopped => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the market engine stopped".into(),
        ),
        SubscribeError::Busy(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "engine_busy",
            error.to_string(),
        ),
        SubscribeError::UnknownCoin(coin) => {
            invalid(format!("coin: unknown coin {}", common::quoted(&coin)))
        }
        SubscribeError::View(error) => invalid(
            crate::views::request::view_status(error)
                .message()
                .to_owned(),
        ),
    }
}

/// A local answer: a JSON value, or JSON text made directly (a long
/// `candleSnapshot`, where building a value per candle cost more than the
/// rest of the request; an `openOrders` answer, shared by the requests of
/// one block).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A JSON value.
    Value(Value),
    /// JSON text.
    Text(Bytes),
}

impl Local {
    /// The answer to `kind` (one of [`LOCAL_TYPES`]) for the request body
    /// `body`.
    ///
    /// # Errors
    /// A [`Refusal`] naming what is wrong.
    pub async fn answer(&self, kind: &str, body: &Value) -> Result<Answer, Refusal> {
        let Some(fields) = body.as_object() else {
            return Err(invalid("the body must be a JSON object"));
        };
        match kind {
            "l2Book" | "allMids" => self.view_state(fields).await.map(Answer::Value),
            "openOrders" | "frontendOpenOrders" => {
                let user = common::address(
                    "user",
                    fields
                        .get("user")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                )
                .map_err(invalid)?;
                let dex = fields
                    .get("dex")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let frontend = kind == "frontendOpenOrders";
                let key = (user, dex, frontend);
                if let Some(answer) = self.open_orders.get(&key, self.status.height()) {
                    return Ok(Answer::Text(answer));
                }
                // The engine thread hands the user's orders out shared, a
                // look per book (see `Books::orders_of`); the answer is
                // built on a blocking thread, off the runtime's workers.
                let (user, dex) = (key.0.clone(), key.1.clone());
                let (block, orders) = read(&self.commands, &self.status, move |market| {
                    let orders = market
                        .orders_of(&user)
                        .into_iter()
                        .filter(|(coin, _)| engine::coin::on_dex(coin, &dex))
                        .collect::<Vec<_>>();
                    (market.position().block_number, orders)
                })
                .await
                .map_err(refused)?;
                let answer = tokio::task::spawn_blocking(move || open_orders(&orders, frontend))
                    .await
                    .map_err(|error| {
                        (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "internal",
                            format!("openOrders: the answer could not be built: {error}"),
                        )
                    })?;
                self.open_orders.put(key, block, answer.clone());
                Ok(Answer::Text(answer))
            }
            "candleSnapshot" => self
                .candle_snapshot(fields)
                .map(|text| Answer::Text(text.into())),
            other => Err(invalid(format!(
                "type: {} is not answered locally",
                common::quoted(other)
            ))),
        }
    }

    /// `l2Book` and `allMids`: the opening frame of the same view the
    /// channel reads.
    async fn view_state(&self, fields: &Map<String, Value>) -> Result<Value, Refusal> {
        let subscription = protocol::subscription(fields).map_err(invalid)?;
        let Some((key, channel)) = subscription.view() else {
            return Err(invalid("type: not answered from a view"));
        };
        // The subscription is dropped with its receiver; the engine lets
        // go of a key nobody reads once it has gone unread for a second.
        let mut opened = subscribe(&self.commands, &self.status, key)
            .await
            .map_err(refused)?;
        // A live key's opening may be shared from a few blocks back with
        // the frames since (snapshots, each whole): the newest is the answer.
        let mut frame = opened.opening.frames().first().cloned();
        loop {
            match opened.receiver.recv() {
                Recv::Frame(batch) => {
                    if let Some(newer) = batch.frames().last() {
                        frame = Some(newer.clone());
                    }
                }
                Recv::Lagged { .. } => {}
                Recv::Empty | Recv::Closed => break,
            }
        }
        let data = frame.and_then(|frame| views::ws_data(&frame, channel));
        Ok(match (channel.name(), data) {
            ("allMids", Some(mut data)) => data["mids"].take(),
            (_, Some(data)) => data,
            ("allMids", None) => json!({}),
            (_, None) => Value::Null,
        })
    }

    fn candle_snapshot(&self, fields: &Map<String, Value>) -> Result<String, Refusal> {
        let Some(Value::Object(req)) = fields.get("req") else {
            return Err(invalid(
                "req: required, an object {\"coin\",\"interval\",\"startTime\",\"endTime\"}",
            ));
        };
        let Some(candles) = &self.candles else {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "no_candles",
                "this server keeps no candle store".into(),
            ));
        };
        let coin = match req.get("coin") {
            Some(Value::String(coin)) if !coin.trim().is_empty() => coin.clone(),
            _ => return Err(invalid("req.coin: required, a coin name")),
        };
        let interval_text = req.get("interval").and_then(Value::as_str).unwrap_or("");
        let interval = Interval::parse(interval_text).map_err(|_| {
            invalid(format!(
                "req.interval: unknown interval {}; one of {}",
                common::quoted(interval_text),
                Interval::ALL.map(Interval::as_str).join(" ")
            ))
        })?;
        let time = |name: &str, required: bool| -> Result<Option<i64>, Refusal> {
            match req.get(name) {
                Some(Value::Number(n)) => n
                    .as_i64()
                    .filter(|ms| *ms >= 0)
                    .map(Some)
                    .ok_or_else(|| invalid(format!("req.{name}: must be Unix milliseconds"))),
                None | Some(Value::Null) if !required => Ok(None),
                _ => Err(invalid(format!("req.{name}: required, Unix milliseconds"))),
            }
        };
        let now = common::unix_now_ms();
        let start = time("startTime", true)?.unwrap_or_default();
        let end = time("endTime", false)?.unwrap_or(now).min(now);
        if end < start {
            return Err(invalid("req.endTime: before req.startTime"));
        }
        let part = stored_under(interval);
        // An empty answer means no trades: a range the store cannot give
        // whole is an error instead.
        let newest = candles
            .snapshot(&coin, interval, start, end.saturating_add(1), MAX_CANDLES)
            .map_err(|miss| match miss {
                Miss::Damaged { from_ms, to_ms } => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "damaged",
                    format!(
                        "the stored {part} candles of {coin} from {} to {} are damaged and not rebuilt yet",
                        feeds::time::format_iso8601_ms(from_ms),
                        feeds::time::format_iso8601_ms(to_ms)
                    ),
                ),
                other => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "candles_unavailable",
                    match other {
                        Miss::Unavailable(reason) => format!("the candle store is unavailable: {reason}"),
                        other => format!("the candle store cannot answer: {other:?}"),
                    },
                ),
            })?;
        // `[{"t":…,"T":…,"s":…,"i":…,"o":…,"c":…,"h":…,"l":…,"v":…,"n":…},…]`
        let name = serde_json::to_string(&coin).unwrap_or_else(|_| "\"\"".to_owned());
        let mut out = String::with_capacity(newest.len() * 160 + 2);
        out.push('[');
        for (i, values) in newest.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                r#"{{"t":{},"T":{},"s":{name},"i":"{}","o":"{}","c":"{}","h":"{}","l":"{}","v":"{}","n":{}}}"#,
                values.open_time,
                interval.close_time(values.open_time),
                interval.as_str(),
                values.open,
                values.close,
                values.high,
                values.low,
                values.volume,
                values.trades_count,
            );
        }
        out.push(']');
        Ok(out)
    }
}

/// `orders` (by coin, shared) as the exchange answers them, newest first,
/// as JSON text: `openOrders` (`frontend` off) or `frontendOpenOrders`.
fn open_orders(orders: &[(Short, UserOrders)], frontend: bool) -> Bytes {
    let all = newest_first(orders);
    let mut out = Vec::with_capacity(all.len() * if frontend { 330 } else { 150 } + 2);
    // Writing to a `Vec` fails only when a value refuses to serialise,
    // which none of these does.
    let _ = if frontend {
        // An open order serialises as its `frontendOpenOrders` entry.
        serde_json::to_writer(&mut out, &all)
    } else {
        let rows: Vec<PlainOrder<'_>> = all
            .iter()
            .map(|open| PlainOrder::of(&open.coin, &open.order))
            .collect();
        serde_json::to_writer(&mut out, &rows)
    };
    Bytes::from(out)
}

/// One `openOrders` entry (fields in alphabetical order, as the answer
/// always had them); `cloid` only when the order has one.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlainOrder<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cloid: Option<&'a Cloid>,
    coin: &'a str,
    limit_px: &'a Px,
    oid: u64,
    orig_sz: &'a Sz,
    side: Side,
    sz: &'a Sz,
    timestamp: i64,
}

impl<'a> PlainOrder<'a> {
    fn of(coin: &'a str, order: &'a RestingOrder) -> Self {
        Self {
            cloid: order.cloid.as_ref(),
            coin,
            limit_px: &order.limit_px,
            oid: order.oid,
            orig_sz: &order.orig_sz,
            side: order.side,
            sz: &order.sz,
            timestamp: order.timestamp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str) -> OrdersAsked {
        (user.to_owned(), String::new(), false)
    }

    #[test]
    fn an_open_orders_answer_serves_its_own_block_only() {
        let cache = OpenOrdersCache::default();
        cache.put(key("0xa"), 7, Bytes::from_static(b"[]"));
        assert_eq!(cache.get(&key("0xa"), 7).as_deref(), Some(&b"[]"[..]));
        assert_eq!(cache.get(&key("0xa"), 8), None, "a later block asks again");
        assert_eq!(cache.get(&key("0xb"), 7), None);
        let frontend = ("0xa".to_owned(), String::new(), true);
        assert_eq!(cache.get(&frontend, 7), None, "each form is its own answer");
    }

    #[test]
    fn the_open_orders_cache_stays_bounded() {
        let cache = OpenOrdersCache::default();
        for n in 0..OPEN_ORDERS_KEPT {
            cache.put(key(&format!("0x{n}")), 1, Bytes::new());
        }
        // A new block's answer makes room by dropping the older block's.
        cache.put(key("0xnew"), 2, Bytes::new());
        assert_eq!(cache.answers.lock().len(), 1);
        for n in 0..=OPEN_ORDERS_KEPT {
            cache.put(key(&format!("0x{n}")), 2, Bytes::new());
        }
        assert!(cache.answers.lock().len() <= OPEN_ORDERS_KEPT);
    }
}
