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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::StatusCode;
use crossbeam_channel::Sender;
use engine::book::l4::RestingOrder;
use engine::market::candles::Interval;
use serde_json::{Map, Value, json};

use crate::candles::{Candles, Miss, stored_under};
use crate::host::engine::{Command, EngineStatus, SubscribeError, read, subscribe};
use crate::ws::protocol;
use crate::ws::render::{self, Channel};

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
    pub commands: Sender<Command>,
    /// Its status.
    pub status: Arc<EngineStatus>,
    /// The candles served (`None`: no candle store).
    pub candles: Option<Arc<Candles>>,
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
            invalid(format!("coin: unknown coin {}", crate::quoted(&coin)))
        }
        SubscribeError::View(error) => {
            invalid(crate::grpc::relay::view_status(error).message().to_owned())
        }
    }
}

/// A local answer: a JSON value, or JSON text made directly (a long
/// `candleSnapshot`, where building a value per candle cost more than the
/// rest of the request).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A JSON value.
    Value(Value),
    /// JSON text.
    Text(String),
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
                let user = crate::address(
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
                // The engine thread only copies the user's orders out (see
                // `Books::orders_of`); the answer is built here.
                let orders = read(&self.commands, &self.status, move |market| {
                    market
                        .orders_of(&user)
                        .into_iter()
                        .filter(|(coin, _)| engine::coin::on_dex(coin, &dex))
                        .map(|(coin, order)| (coin.to_owned(), order.clone()))
                        .collect::<Vec<_>>()
                })
                .await
                .map_err(refused)?;
                Ok(Answer::Value(open_orders(orders, frontend)))
            }
            "candleSnapshot" => self.candle_snapshot(fields).map(Answer::Text),
            other => Err(invalid(format!(
                "type: {} is not answered locally",
                crate::quoted(other)
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
        // go of a key nobody reads at the next block.
        let opened = subscribe(&self.commands, &self.status, key)
            .await
            .map_err(refused)?;
        let frame = opened.opening.frames().first().cloned();
        let data = frame.and_then(|frame| render::data(&frame, channel));
        Ok(match (channel, data) {
            (Channel::AllMids, Some(mut data)) => data["mids"].take(),
            (_, Some(data)) => data,
            (Channel::AllMids, None) => json!({}),
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
                crate::quoted(interval_text),
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
        let now = crate::unix_now_ms();
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

/// The resting orders of `user` (lowercased) on exchange `dex`, newest
/// first.
/// `orders` (coin, order) as the exchange answers them, newest first.
fn open_orders(mut orders: Vec<(String, RestingOrder)>, frontend: bool) -> Value {
    orders.sort_by_key(|(_, order)| std::cmp::Reverse((order.timestamp, order.oid)));
    Value::Array(
        orders
            .iter()
            .map(|(coin, order)| order_json(coin, order, frontend))
            .collect(),
    )
}

fn order_json(coin: &str, order: &RestingOrder, frontend: bool) -> Value {
    let mut out: BTreeMap<&str, Value> = BTreeMap::from([
        ("coin", coin.into()),
        ("side", order.side.as_str().into()),
        ("limitPx", order.limit_px.to_string().into()),
        ("sz", order.sz.to_string().into()),
        ("oid", order.oid.into()),
        ("timestamp", order.timestamp.into()),
        ("origSz", order.orig_sz.to_string().into()),
    ]);
    if frontend {
        out.insert("orderType", order.order_type.as_str().into());
        out.insert(
            "tif",
            order
                .tif
                .as_ref()
                .map_or(Value::Null, |tif| tif.as_str().into()),
        );
        out.insert("reduceOnly", order.reduce_only.into());
        out.insert("isTrigger", order.is_trigger.into());
        out.insert("isPositionTpsl", order.is_position_tpsl.into());
        out.insert("triggerCondition", order.trigger_condition.as_str().into());
        out.insert("triggerPx", order.trigger_px.to_string().into());
        out.insert("children", json!([]));
        out.insert(
            "cloid",
            order
                .cloid
                .as_ref()
                .map_or(Value::Null, |cloid| cloid.as_str().into()),
        );
    } else if let Some(cloid) = &order.cloid {
        // `openOrders` carries the client order id only when one was set.
        out.insert("cloid", cloid.as_str().into());
    }
    Value::Object(out.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}
