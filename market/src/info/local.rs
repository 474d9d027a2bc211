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
use engine::hub::Recv;
use engine::market::candles::Interval;
use serde_json::{Map, Value, json};

use super::open_orders;
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
    /// The threads the costly answers are made on.
    pub answering: Answering,
}

/// The blocking threads Info's costly answers are made on (an account's
/// open orders, up to 5,000 candles from the store): at most `limit` at
/// once, so that however many clients ask, the answers take no more than
/// that many cores from the engine thread and the streams' senders. A
/// request beyond it waits for a thread (without holding one); the
/// requests under way are bounded by the connections admitted, one at a
/// time each.
#[derive(Debug, Clone)]
pub struct Answering {
    threads: Arc<tokio::sync::Semaphore>,
}

impl Answering {
    /// At most `limit` answers made at once (at least one).
    pub fn new(limit: usize) -> Self {
        Self {
            threads: Arc::new(tokio::sync::Semaphore::new(limit.max(1))),
        }
    }

    /// Half of this machine's cores, at least one: the other half is left
    /// to the engine thread and the runtime's workers.
    pub fn half_the_cores() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Self::new(cores / 2)
    }

    /// `work`'s result, made on a blocking thread once one of the `limit` is
    /// free. The thread is held until `work` ends, even if the request
    /// goes away meanwhile.
    async fn run<T: Send + 'static>(
        &self,
        kind: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Refusal> {
        // Only a closed semaphore refuses, and this one is never closed: an
        // internal error rather than a panic if that ever changes.
        let held = Arc::clone(&self.threads)
            .acquire_owned()
            .await
            .map_err(|error| {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("{kind}: no thread to answer on: {error}"),
                )
            })?;
        tokio::task::spawn_blocking(move || {
            let answer = work();
            drop(held);
            answer
        })
        .await
        .map_err(|error| not_built(kind, &error))
    }
}

/// `openOrders` and `frontendOpenOrders` answers made at one block, by
/// user, exchange and form: every request for the same ones until the next
/// block is answered from here, so a market maker's tens of thousands of
/// orders are read and rendered once per block however many clients ask.
///
/// A request that finds its answer being made for a request asked at the
/// same block waits for that one (single flight) instead of making it
/// again: it is answered sooner than it could make the answer itself, and
/// the render, the costliest part, is not repeated side by side. If the
/// request making it goes away (its client left), a waiting one makes it.
#[derive(Debug, Default)]
pub struct OpenOrdersCache {
    answers: parking_lot::Mutex<HashMap<OrdersAsked, (u64, Bytes)>>,
    /// Answers being made: the block they were asked at, and where the
    /// answer lands. Entries leave when their answer is made; one whose
    /// requests all went away leaves when the next is added.
    making: parking_lot::Mutex<HashMap<OrdersAsked, (u64, Arc<Making>)>>,
}

/// An answer being made: set once, by the request that makes it, for all
/// those waiting.
type Making = tokio::sync::OnceCell<Result<Bytes, Refusal>>;

/// Whose orders, on which exchange, in which form (`frontendOpenOrders`).
type OrdersAsked = (String, String, bool);

/// Answers [`OpenOrdersCache`] keeps at most; past it, those of older
/// blocks are dropped (all of them, if every one is current).
const OPEN_ORDERS_KEPT: usize = 256;

impl OpenOrdersCache {
    /// The answer to `key` asked at block `height`: the one made at that
    /// block; else the one being made for a request asked at it, waited
    /// for; else made here by `make`, which gives the answer and the block
    /// it read (at or past `height`). A refusal `make` gives is shared with
    /// the requests waiting, not kept.
    async fn answer<Made>(
        &self,
        key: OrdersAsked,
        height: u64,
        make: impl FnOnce() -> Made,
    ) -> Result<Bytes, Refusal>
    where
        Made: Future<Output = Result<(u64, Bytes), Refusal>>,
    {
        if let Some(answer) = self.get(&key, height) {
            return Ok(answer);
        }
        let making = self.join(&key, height);
        let answer = making
            .get_or_init(|| async {
                // Made and put in the cache since this request looked.
                if let Some(answer) = self.get(&key, height) {
                    return Ok(answer);
                }
                let (block, answer) = make().await?;
                self.put(key.clone(), block, answer.clone());
                Ok(answer)
            })
            .await
            .clone();
        let mut all = self.making.lock();
        if all
            .get(&key)
            .is_some_and(|(_, current)| Arc::ptr_eq(current, &making))
        {
            all.remove(&key);
        }
        answer
    }

    /// The answer being made for `key` asked at `height`, joined, or a new
    /// one to make (in place of one asked at an earlier block).
    fn join(&self, key: &OrdersAsked, height: u64) -> Arc<Making> {
        let mut all = self.making.lock();
        if let Some((asked_at, making)) = all.get(key)
            && *asked_at == height
        {
            return making.clone();
        }
        // Those no request waits for any more (each waiting one holds a
        // count) go; the others are as many as the requests under way.
        all.retain(|_, (_, making)| Arc::strong_count(making) > 1);
        let making = Arc::new(Making::new());
        all.insert(key.clone(), (height, making.clone()));
        making
    }

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
                let (user, dex) = (key.0.clone(), key.1.clone());
                let make = || async move {
                    // The engine thread hands the user's orders out shared,
                    // a look per book (see `Books::orders_of`); the answer
                    // is built on a blocking thread, off the runtime's
                    // workers.
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
                    let answer = self
                        .answering
                        .run(kind, move || open_orders::render(&orders, frontend))
                        .await?;
                    Ok((block, answer))
                };
                let height = self.status.height();
                let answer = self.open_orders.answer(key, height, make).await?;
                Ok(Answer::Text(answer))
            }
            "candleSnapshot" => {
                let (candles, asked) = self.candle_request(fields)?;
                // Up to 5,000 candles read from the store's file and written
                // out: a blocking thread's work, not a runtime worker's (the
                // streams' senders run there).
                self.answering
                    .run(kind, move || candle_snapshot(&candles, asked))
                    .await?
                    .map(|text| Answer::Text(text.into()))
            }
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

    /// A `candleSnapshot` request's store and what it asks, checked.
    fn candle_request(
        &self,
        fields: &Map<String, Value>,
    ) -> Result<(Arc<Candles>, CandlesAsked), Refusal> {
        let Some(Value::Object(req)) = fields.get("req") else {
            return Err(invalid(
                "req: required, an object {\"coin\",\"interval\",\"startTime\",\"endTime\"}",
            ));
        };
        let Some(candles) = self.candles.clone() else {
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
        Ok((
            candles,
            CandlesAsked {
                coin,
                interval,
                start,
                end,
            },
        ))
    }
}

/// A `candleSnapshot` request, checked: the candles of `coin` at `interval`
/// with open times from `start` to `end` (Unix ms, both included).
#[derive(Debug)]
struct CandlesAsked {
    coin: String,
    interval: Interval,
    start: i64,
    end: i64,
}

/// A refusal for an answer whose blocking thread failed (it panicked or
/// the runtime is stopping).
fn not_built(kind: &str, error: &tokio::task::JoinError) -> Refusal {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("{kind}: the answer could not be built: {error}"),
    )
}

/// The `candleSnapshot` answer for `asked` from `candles`: JSON text.
fn candle_snapshot(candles: &Candles, asked: CandlesAsked) -> Result<String, Refusal> {
    let CandlesAsked {
        coin,
        interval,
        start,
        end,
    } = asked;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn costly_answers_are_made_at_most_limit_at_once() {
        let answering = Answering::new(2);
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let asked: Vec<_> = (0..8)
            .map(|at| {
                let (answering, now, most) = (answering.clone(), now.clone(), most.clone());
                tokio::spawn(async move {
                    answering
                        .run("openOrders", move || {
                            let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(running, Ordering::SeqCst);
                            // Held until another answer runs beside it (or a
                            // second has passed), so two always overlap.
                            let began = std::time::Instant::now();
                            while now.load(Ordering::SeqCst) < 2
                                && began.elapsed() < Duration::from_secs(1)
                            {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            std::thread::sleep(Duration::from_millis(5));
                            most.fetch_max(now.load(Ordering::SeqCst), Ordering::SeqCst);
                            now.fetch_sub(1, Ordering::SeqCst);
                            at
                        })
                        .await
                })
            })
            .collect();
        for (at, asked) in asked.into_iter().enumerate() {
            assert_eq!(asked.await.unwrap().unwrap(), at);
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_holds_its_thread_after_its_request_went_away() {
        let answering = Answering::new(1);
        let (started, done) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let first = {
            let (answering, started, done) = (answering.clone(), started.clone(), done.clone());
            tokio::spawn(async move {
                answering
                    .run("candleSnapshot", move || {
                        started.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(100));
                        done.store(true, Ordering::SeqCst);
                    })
                    .await
            })
        };
        // Its request goes away once the answer is being made.
        while !started.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        first.abort();
        let second = answering
            .run("candleSnapshot", move || done.load(Ordering::SeqCst))
            .await
            .unwrap();
        assert!(
            second,
            "the second answer began while the first was being made"
        );
    }

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

    /// An answer being made, as the tests' makers give it.
    type Making<'c> =
        std::pin::Pin<Box<dyn Future<Output = Result<(u64, Bytes), Refusal>> + Send + 'c>>;

    /// Makes `made` after `wait`, counting the calls.
    fn slow<'c>(
        calls: &'c std::sync::atomic::AtomicU64,
        wait: std::time::Duration,
        made: Result<(u64, Bytes), Refusal>,
    ) -> impl FnOnce() -> Making<'c> + 'c {
        move || {
            Box::pin(async move {
                calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                made
            })
        }
    }

    /// Waits until `done` holds (at most 10 s).
    async fn until(done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "the state never came");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn requests_asked_at_one_block_share_the_answer_being_made() {
        let cache = OpenOrdersCache::default();
        let calls = std::sync::atomic::AtomicU64::new(0);
        let wait = std::time::Duration::from_millis(50);
        let answer = || Ok((7, Bytes::from_static(b"[1]")));
        let asked = (0..20).map(|_| cache.answer(key("0xa"), 7, slow(&calls, wait, answer())));
        let answers = futures_util::future::join_all(asked).await;
        assert!(answers.iter().all(|a| a.as_deref() == Ok(&b"[1]"[..])));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(
            cache.making.lock().is_empty(),
            "made answers leave the list"
        );
        // The next one comes from the block's cache, without a wait.
        let next = cache
            .answer(key("0xa"), 7, slow(&calls, wait, answer()))
            .await;
        assert_eq!(next.as_deref(), Ok(&b"[1]"[..]));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Asked at a later block, or for another account: made again.
        let (later, other) = futures_util::future::join(
            cache.answer(
                key("0xa"),
                8,
                slow(&calls, wait, Ok((8, Bytes::from_static(b"[2]")))),
            ),
            cache.answer(key("0xb"), 7, slow(&calls, wait, answer())),
        )
        .await;
        assert_eq!(later.as_deref(), Ok(&b"[2]"[..]));
        assert!(other.is_ok());
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_waiting_request_makes_the_answer_when_its_maker_goes_away() {
        let cache = Arc::new(OpenOrdersCache::default());
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let wait = std::time::Duration::from_millis(50);
        let maker = {
            let (cache, calls) = (cache.clone(), calls.clone());
            tokio::spawn(async move {
                let made = Ok((7, Bytes::from_static(b"[1]")));
                cache.answer(key("0xa"), 7, slow(&calls, wait, made)).await
            })
        };
        // Until the first is making the answer…
        until(|| calls.load(std::sync::atomic::Ordering::Relaxed) == 1).await;
        let waiting = {
            let (cache, calls) = (cache.clone(), calls.clone());
            tokio::spawn(async move {
                let made = Ok((7, Bytes::from_static(b"[1]")));
                cache.answer(key("0xa"), 7, slow(&calls, wait, made)).await
            })
        };
        // …and the second waits for it (the list's count, and the two
        // requests').
        let holders = || {
            cache
                .making
                .lock()
                .get(&key("0xa"))
                .map(|(_, making)| Arc::strong_count(making))
        };
        until(|| holders() == Some(3)).await;
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "the second waits"
        );
        maker.abort();
        // The first never made it.
        assert!(maker.await.is_err_and(|error| error.is_cancelled()));
        let answer = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("the waiting request makes the answer itself")
            .expect("the waiting request ends");
        assert_eq!(answer.as_deref(), Ok(&b"[1]"[..]));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_refusal_is_shared_with_those_waiting_and_not_kept() {
        let cache = OpenOrdersCache::default();
        let calls = std::sync::atomic::AtomicU64::new(0);
        let wait = std::time::Duration::from_millis(50);
        let busy = || {
            Err((
                StatusCode::SERVICE_UNAVAILABLE,
                "engine_busy",
                "busy".to_owned(),
            ))
        };
        let (a, b) = futures_util::future::join(
            cache.answer(key("0xa"), 7, slow(&calls, wait, busy())),
            cache.answer(key("0xa"), 7, slow(&calls, wait, busy())),
        )
        .await;
        assert_eq!(a, b);
        assert_eq!(a.map_err(|refusal| refusal.1), Err("engine_busy"));
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        let again = cache
            .answer(key("0xa"), 7, slow(&calls, wait, Ok((7, Bytes::new()))))
            .await;
        assert!(again.is_ok(), "asked again, it is made again");
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
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
