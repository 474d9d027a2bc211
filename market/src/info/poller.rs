//! The Info poller: asks the Info source for `{"type":"allMids"}` and
//! `{"type":"metaAndAssetCtxs"}` every `info_poll_interval_ms` and keeps the
//! newest state of each in a [`tokio::sync::watch`] channel, so a stream
//! always skips to the newest state and never queues old ones.
//!
//! - Only what someone watches is polled: a state nobody subscribes to is
//!   not asked for (the exchange's Info API is rate limited per address) and
//!   is forgotten, so a later subscriber gets a fresh answer rather than an
//!   old one. A new subscriber wakes the poller when there is no state yet.
//! - A state is replaced (and watchers woken) only when its content
//!   changed; its `time` is when l1gate made the change available (Unix
//!   ms), not a block time.
//! - A failed poll (source down, error status, unexpected shape) keeps the
//!   last state and is logged once per outage: watchers see no change, which
//!   the streams show as an absence of frames, never a close.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use proto::v3 as pb;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use edge::upstream::{UpstreamClient, UpstreamUrl};
use engine::coin;

/// The default exchange's perp mids from `allMids`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MidsState {
    /// When l1gate made this map available (Unix ms).
    pub time_ms: i64,
    /// Perp coin → mid, exactly as the source wrote it.
    pub mids: BTreeMap<String, String>,
}

/// One coin's context and when it last changed.
#[derive(Debug, Clone, PartialEq)]
pub struct CoinCtx {
    /// When l1gate made this context available (Unix ms).
    pub time_ms: i64,
    /// The context, strings exactly as the source wrote them.
    pub ctx: pb::PerpAssetCtx,
}

/// The default exchange's perp universe and asset contexts from
/// `metaAndAssetCtxs`.
#[derive(Debug, Clone, PartialEq)]
pub struct CtxState {
    /// Every perp in `meta.universe` (delisted ones too).
    pub universe: BTreeSet<String>,
    /// Coin → context, for the coins whose context was complete.
    pub ctxs: BTreeMap<String, CoinCtx>,
}

/// Which of the two polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Poll {
    Mids,
    Ctxs,
}

impl Poll {
    fn body(self) -> Bytes {
        Bytes::from_static(match self {
            Poll::Mids => br#"{"type":"allMids"}"#,
            Poll::Ctxs => br#"{"type":"metaAndAssetCtxs"}"#,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Poll::Mids => "allMids",
            Poll::Ctxs => "metaAndAssetCtxs",
        }
    }
}

#[derive(Debug)]
struct Shared {
    mids: watch::Sender<Option<Arc<MidsState>>>,
    ctxs: watch::Sender<Option<Arc<CtxState>>>,
    wake: Notify,
    /// The last failure of each poll (cleared by a success).
    failures: Mutex<[Option<String>; 2]>,
    timeout: Duration,
}

/// The streams' handle on the poller's state.
#[derive(Debug, Clone)]
pub struct InfoFeed {
    shared: Arc<Shared>,
}

impl InfoFeed {
    /// Watches the mids (and makes the poller ask for them).
    pub fn watch_mids(&self) -> watch::Receiver<Option<Arc<MidsState>>> {
        let receiver = self.shared.mids.subscribe();
        if receiver.borrow().is_none() {
            self.shared.wake.notify_one();
        }
        receiver
    }

    /// Watches the contexts (and makes the poller ask for them).
    pub fn watch_ctxs(&self) -> watch::Receiver<Option<Arc<CtxState>>> {
        let receiver = self.shared.ctxs.subscribe();
        if receiver.borrow().is_none() {
            self.shared.wake.notify_one();
        }
        receiver
    }

    /// How long one poll may take: the longest a subscriber should wait for
    /// a first answer.
    pub fn poll_timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// Why the last `metaAndAssetCtxs` poll failed, if it did.
    pub fn ctxs_failure(&self) -> Option<String> {
        self.shared.failures.lock()[1].clone()
    }
}

/// Starts polling `url` every `interval`; the task runs until aborted.
pub fn spawn(
    client: UpstreamClient,
    url: UpstreamUrl,
    interval: Duration,
) -> (InfoFeed, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(Shared {
        mids: watch::Sender::new(None),
        ctxs: watch::Sender::new(None),
        wake: Notify::new(),
        failures: Mutex::new([None, None]),
        timeout: client.timeout(),
    });
    let task = tokio::spawn(run(Arc::clone(&shared), client, url, interval));
    (InfoFeed { shared }, task)
}

async fn run(shared: Arc<Shared>, client: UpstreamClient, url: UpstreamUrl, interval: Duration) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = shared.wake.notified() => {}
        }
        let now = Instant::now();
        let due = now >= next;
        if due {
            next = now + interval;
        }
        let mut polls = Vec::with_capacity(2);
        if shared.mids.receiver_count() == 0 {
            shared.mids.send_if_modified(|state| state.take().is_some());
        } else if due || shared.mids.borrow().is_none() {
            polls.push(Poll::Mids);
        }
        if shared.ctxs.receiver_count() == 0 {
            shared.ctxs.send_if_modified(|state| state.take().is_some());
        } else if due || shared.ctxs.borrow().is_none() {
            polls.push(Poll::Ctxs);
        }
        let answers = futures_util::future::join_all(polls.iter().map(|&poll| {
            let client = &client;
            let url = &url;
            async move { client.post_json(url.uri().clone(), poll.body()).await }
        }))
        .await;
        for (poll, answer) in polls.into_iter().zip(answers) {
            let result = answer.map_err(|e| e.to_string()).and_then(|response| {
                if !response.status.is_success() {
                    return Err(format!("answered HTTP {}", response.status.as_u16()));
                }
                let value: Value = serde_json::from_slice(&response.body)
                    .map_err(|e| format!("answer is not JSON: {e}"))?;
                let now_ms = common::unix_now_ms();
                match poll {
                    Poll::Mids => {
                        let mids = parse_mids(&value)?;
                        shared
                            .mids
                            .send_if_modified(|state| update_mids(state, mids, now_ms));
                    }
                    Poll::Ctxs => {
                        let (universe, ctxs) = parse_ctxs(&value)?;
                        shared
                            .ctxs
                            .send_if_modified(|state| update_ctxs(state, universe, ctxs, now_ms));
                    }
                }
                Ok(())
            });
            shared.record(poll, result.err(), &url);
        }
    }
}

impl Shared {
    /// Logs the start and the end of an outage, once each.
    fn record(&self, poll: Poll, failure: Option<String>, url: &UpstreamUrl) {
        let slot = match poll {
            Poll::Mids => 0,
            Poll::Ctxs => 1,
        };
        let mut failures = self.failures.lock();
        match (&failures[slot], &failure) {
            (None, Some(error)) => {
                tracing::warn!(%url, poll = poll.name(), %error, "Info source poll failing");
            }
            (Some(_), None) => {
                tracing::info!(%url, poll = poll.name(), "Info source poll recovered");
            }
            _ => {}
        }
        failures[slot] = failure;
    }
}

/// Replaces the mids when they changed.
fn update_mids(
    state: &mut Option<Arc<MidsState>>,
    mids: BTreeMap<String, String>,
    now_ms: i64,
) -> bool {
    if state.as_ref().is_some_and(|old| old.mids == mids) {
        return false;
    }
    *state = Some(Arc::new(MidsState {
        time_ms: now_ms,
        mids,
    }));
    true
}

/// Replaces the contexts when any changed; unchanged coins keep their time.
fn update_ctxs(
    state: &mut Option<Arc<CtxState>>,
    universe: BTreeSet<String>,
    ctxs: BTreeMap<String, pb::PerpAssetCtx>,
    now_ms: i64,
) -> bool {
    let old = state.as_deref();
    let mut changed =
        old.is_none_or(|old| old.universe != universe || old.ctxs.len() != ctxs.len());
    let ctxs: BTreeMap<String, CoinCtx> = ctxs
        .into_iter()
        .map(|(coin, ctx)| {
            let time_ms = match old.and_then(|old| old.ctxs.get(&coin)) {
                Some(previous) if previous.ctx == ctx => previous.time_ms,
                _ => {
                    changed = true;
                    now_ms
                }
            };
            (coin, CoinCtx { time_ms, ctx })
        })
        .collect();
    if changed {
        *state = Some(Arc::new(CtxState { universe, ctxs }));
    }
    changed
}

/// The default exchange's perp mids of an `allMids` answer: an object of
/// coin → mid string (or `{"mids": {…}}`, the WebSocket shape). Spot pairs,
/// builder-deployed perps and outcome markets are left out.
fn parse_mids(value: &Value) -> Result<BTreeMap<String, String>, String> {
    let map = match value.get("mids") {
        Some(Value::Object(inner)) => inner,
        _ => value
            .as_object()
            .ok_or("allMids: the answer is not an object")?,
    };
    Ok(map
        .iter()
        .filter(|(coin, _)| coin::is_default_perp(coin))
        .filter_map(|(coin, px)| Some((coin.clone(), text(px)?)))
        .collect())
}

/// The universe and contexts of a `metaAndAssetCtxs` answer:
/// `[{"universe":[{"name",…}]}, [ctx, …]]`, contexts in universe order.
#[allow(clippy::type_complexity)]
fn parse_ctxs(
    value: &Value,
) -> Result<(BTreeSet<String>, BTreeMap<String, pb::PerpAssetCtx>), String> {
    let shape = "metaAndAssetCtxs: expected [meta, [assetCtx, …]]";
    let pair = value.as_array().filter(|a| a.len() == 2).ok_or(shape)?;
    let universe = pair[0]
        .get("universe")
        .and_then(Value::as_array)
        .ok_or("metaAndAssetCtxs: meta has no universe")?;
    let contexts = pair[1].as_array().ok_or(shape)?;
    let names: Vec<Option<&str>> = universe
        .iter()
        .map(|asset| asset.get("name").and_then(Value::as_str))
        .collect();
    let ctxs = names
        .iter()
        .zip(contexts)
        .filter_map(|(name, ctx)| Some(((*name)?.to_owned(), perp_ctx(ctx)?)))
        .filter(|(name, _)| coin::is_default_perp(name))
        .collect();
    let universe = names
        .into_iter()
        .flatten()
        .filter(|name| coin::is_default_perp(name))
        .map(str::to_owned)
        .collect();
    Ok((universe, ctxs))
}

/// A string field as written (numbers as their JSON text).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One perp asset context; `None` when a required field is missing.
fn perp_ctx(ctx: &Value) -> Option<pb::PerpAssetCtx> {
    let field = |name: &str| ctx.get(name).and_then(text);
    Some(pb::PerpAssetCtx {
        funding: field("funding")?,
        open_interest: field("openInterest")?,
        prev_day_px: field("prevDayPx")?,
        day_ntl_vlm: field("dayNtlVlm")?,
        premium: field("premium"),
        oracle_px: field("oraclePx")?,
        mark_px: field("markPx")?,
        mid_px: field("midPx"),
        impact_pxs: ctx
            .get("impactPxs")
            .and_then(Value::as_array)
            .map(|pxs| pxs.iter().filter_map(text).collect())
            .unwrap_or_default(),
        day_base_vlm: field("dayBaseVlm")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn btc_ctx(mark: &str) -> Value {
        json!({
            "funding": "0.0000125", "openInterest": "30000.1", "prevDayPx": "80000.0",
            "dayNtlVlm": "1000000.0", "premium": null, "oraclePx": "81000.0",
            "markPx": mark, "midPx": "81001.5", "impactPxs": ["81000.0", "81003.0"],
            "dayBaseVlm": "12.5"
        })
    }

    #[test]
    fn all_mids_keeps_default_perps_only() {
        let answer = json!({"BTC": "81001.5", "@107": "38.1", "PURR/USDC": "0.2",
                            "xyz:NVDA": "120.0", "#1890": "0.5", "ETH": "3050.25"});
        let mids = parse_mids(&answer).unwrap();
        assert_eq!(
            mids.keys().map(String::as_str).collect::<Vec<_>>(),
            ["BTC", "ETH"]
        );
        assert_eq!(mids["BTC"], "81001.5");
        let wrapped = json!({"mids": {"SOL": "152.0"}});
        assert_eq!(parse_mids(&wrapped).unwrap()["SOL"], "152.0");
        assert!(parse_mids(&json!([1])).is_err());
    }

    #[test]
    fn contexts_follow_the_universe_order_and_keep_strings() {
        let answer = json!([
            {"universe": [{"name": "BTC", "szDecimals": 5}, {"name": "ETH"}, {"name": "DEAD"}]},
            [btc_ctx("81000.5"), {"funding": "0.0"}, btc_ctx("1.0")]
        ]);
        let (universe, ctxs) = parse_ctxs(&answer).unwrap();
        assert_eq!(universe.len(), 3);
        // ETH's context lacks fields: known coin, no context.
        assert!(universe.contains("ETH") && !ctxs.contains_key("ETH"));
        let btc = &ctxs["BTC"];
        assert_eq!(btc.mark_px, "81000.5");
        assert_eq!(btc.premium, None);
        assert_eq!(btc.mid_px.as_deref(), Some("81001.5"));
        assert_eq!(btc.impact_pxs, ["81000.0", "81003.0"]);
        assert!(parse_ctxs(&json!({"universe": []})).is_err());
    }

    #[test]
    fn states_change_only_when_their_content_does() {
        let mut mids = None;
        let map: BTreeMap<String, String> = [("BTC".to_owned(), "1.0".to_owned())].into();
        assert!(update_mids(&mut mids, map.clone(), 10));
        assert!(!update_mids(&mut mids, map, 20));
        assert_eq!(mids.as_ref().unwrap().time_ms, 10);

        let answer = |mark: &str| {
            parse_ctxs(&json!([
                {"universe": [{"name": "BTC"}, {"name": "ETH"}]},
                [btc_ctx(mark), btc_ctx("3000.0")]
            ]))
            .unwrap()
        };
        let mut ctxs = None;
        let (universe, first) = answer("1.0");
        assert!(update_ctxs(&mut ctxs, universe.clone(), first.clone(), 10));
        assert!(!update_ctxs(&mut ctxs, universe.clone(), first, 20));
        let (_, second) = answer("2.0");
        assert!(update_ctxs(&mut ctxs, universe, second, 30));
        let state = ctxs.unwrap();
        assert_eq!(state.ctxs["BTC"].time_ms, 30);
        assert_eq!(state.ctxs["ETH"].time_ms, 10);
    }
}
