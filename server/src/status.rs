//! The operator status page: one page on the HTTP address showing the
//! state of this server, updated live, for admin accounts only.
//!
//! | Route | What |
//! |---|---|
//! | `GET /{key}/status` | the page (HTML, CSS and script in the binary; no build step, no other request but its event stream) |
//! | `GET /{key}/status/events` | server-sent events: an `status` event with the JSON snapshot now and every second |
//! | `GET /{key}/status.json` (or `/status.json` with `X-Api-Key`) | the snapshot once |
//!
//! Access: the key forms of every route (401 without a valid key, 403
//! outside its allow-list, 429 over the rate), then the account's role:
//! an account without `role = "admin"` in the keys file gets 403. The
//! event stream counts as one of the account's streams while it is open,
//! and ends within a second when the key stops being admitted. Browsers
//! cannot send headers, so the page is opened with the key in the path;
//! the page sends no `Referer`, and shows key ids only — never a key or a
//! hash.
//!
//! What the snapshot holds: each feed's newest block on disk, its age and
//! the freshness verdict of `/healthz`; the engine's position, blocks per
//! second and how far it is behind the newest block on disk; the streams
//! open per view and per account, and the streams l1gate ended (lag,
//! stall, revocation, quota); per key its usage this period, its quota and
//! a pending rotation; the upstreams (Info source, each node gateway
//! network); the recent warnings ([`warnings`]); where clients reach this
//! server (its public gRPC, HTTP and WebSocket URLs, `https://`/`wss://`
//! with TLS on).

pub mod warnings;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse as _, Json, Response};
use axum::routing::get;
use feeds::Source;
use parking_lot::Mutex;
use serde_json::{Value, json};

use access::Access;
use access::keys::Principal;
use edge::flow::Supervisor;
use edge::live::LiveFeeds;
use edge::routes::{Route, Routed};
use host::engine::EngineStatus;

/// `GET /{key}/status`: the status page.
pub const PAGE_ROUTE: Route = Route {
    method: "GET",
    path: "/status",
    keyed: true,
    what: "the operator status page (admin accounts)",
};
/// `GET /{key}/status/`: the same page.
pub const PAGE_SLASH_ROUTE: Route = Route {
    method: "GET",
    path: "/status/",
    keyed: true,
    what: "the operator status page (admin accounts)",
};
/// `GET /{key}/status/events`: the page's live figures.
pub const EVENTS_ROUTE: Route = Route {
    method: "GET",
    path: "/status/events",
    keyed: true,
    what: "the status page's figures as server-sent events, once a second (admin accounts)",
};
/// `GET /{key}/status.json`: the figures once.
pub const JSON_ROUTE: Route = Route {
    method: "GET",
    path: "/status.json",
    keyed: true,
    what: "the status page's figures once, as JSON (admin accounts)",
};

/// The page.
const PAGE: &str = include_str!("status/page.html");

/// How often the event stream sends a snapshot.
const EVERY: Duration = Duration::from_secs(1);

/// Where clients reach this server, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// The gRPC address's public URL.
    pub grpc: String,
    /// The HTTP address's public base URL.
    pub http: String,
    /// Whether this server serves TLS on both addresses itself.
    pub tls: bool,
}

/// Everything the page reads.
#[derive(Debug, Clone)]
pub struct StatusPage {
    /// The node's feeds.
    pub live: Arc<LiveFeeds>,
    /// The freshness bound of `/healthz`.
    pub max_data_age: Duration,
    /// The engine thread's position.
    pub engine: Arc<EngineStatus>,
    /// Keys, usage, metrics.
    pub access: Access,
    /// Every supervised stream.
    pub flow: Supervisor,
    /// The node gateway's networks.
    pub networks: Option<edge::http::NetworkProbe>,
    /// The Info source's poller, when configured.
    pub info: Option<market::info::poller::InfoFeed>,
    /// The message bus, on a publishing node host or an edge.
    pub bus: Option<market::http::BusProbe>,
    /// Where clients reach this server.
    pub addresses: Option<Addresses>,
    /// Blocks-per-second sampling.
    rate: Arc<Mutex<Option<(Instant, u64, f64)>>>,
}

impl StatusPage {
    /// A page over these sources.
    pub fn new(
        live: Arc<LiveFeeds>,
        max_data_age: Duration,
        engine: Arc<EngineStatus>,
        access: Access,
        flow: Supervisor,
        networks: Option<edge::http::NetworkProbe>,
        info: Option<market::info::poller::InfoFeed>,
    ) -> Self {
        Self {
            live,
            max_data_age,
            engine,
            access,
            flow,
            networks,
            info,
            bus: None,
            addresses: None,
            rate: Arc::new(Mutex::new(None)),
        }
    }

    /// Also shows the message bus (`serve --publish`, or an edge).
    #[must_use]
    pub fn with_bus(mut self, bus: Option<market::http::BusProbe>) -> Self {
        self.bus = bus;
        self
    }

    /// Also shows where clients reach this server.
    #[must_use]
    pub fn with_addresses(mut self, addresses: Addresses) -> Self {
        self.addresses = Some(addresses);
        self
    }

    /// The authenticated routes (see the module docs).
    pub fn routes(self) -> Routed {
        Routed::new()
            .route(PAGE_ROUTE, get(page))
            .route(PAGE_SLASH_ROUTE, get(page))
            .route(EVENTS_ROUTE, get(events))
            .route(JSON_ROUTE, get(once))
            .map(|router| router.with_state(self))
    }

    /// Blocks per second of the engine, over the time since the last call
    /// at least a second ago.
    fn blocks_per_second(&self, height: u64) -> Option<f64> {
        let mut rate = self.rate.lock();
        let now = Instant::now();
        match *rate {
            None => {
                *rate = Some((now, height, f64::NAN));
                None
            }
            Some((at, then, last)) => {
                let elapsed = now.duration_since(at).as_secs_f64();
                if elapsed < 0.9 {
                    return (!last.is_nan()).then_some(last);
                }
                let per_second = height.saturating_sub(then) as f64 / elapsed;
                *rate = Some((now, height, per_second));
                Some(per_second)
            }
        }
    }

    /// The snapshot the page renders.
    pub async fn snapshot(&self) -> Value {
        let now = common::unix_now_ms();
        let bound = i64::try_from(self.max_data_age.as_millis()).unwrap_or(i64::MAX);
        let newest_age = market::http::newest_data_age_ms(&self.live, now);
        let mut feeds = Vec::new();
        let mut newest_block = None::<u64>;
        for &source in &Source::ALL {
            let Some(feed) = self.live.feed(source) else {
                continue;
            };
            let newest = feed.newest();
            let block = newest.and_then(|h| h.block_number);
            if source != Source::OrderbookSnapshots {
                newest_block = newest_block.max(block);
            }
            let time = newest.and_then(|h| h.timestamp_ms);
            feeds.push(json!({
                "id": source.feed_id(),
                "source": self.live.source_name(source),
                "block_number": block,
                "block_time": time.map(feeds::time::format_iso8601_ms),
                "age_ms": time.map(|t| now - t),
            }));
        }
        let height = self.engine.height();
        let engine = json!({
            "ready": self.engine.ready(),
            "error": self.engine.error(),
            "block_number": (height > 0).then_some(height),
            "block_time": (height > 0).then(|| feeds::time::format_iso8601_ms(self.engine.block_time_ms())),
            "blocks_per_second": self.blocks_per_second(height),
            "behind_blocks": newest_block.map(|newest| newest.saturating_sub(height)),
            "coins": self.engine.coins().len(),
        });
        let usage = self.access.usage_report();
        let mut by_view = std::collections::BTreeMap::<String, u64>::new();
        let mut streams_of_key = std::collections::HashMap::<String, u64>::new();
        for (service, view, key_id) in self.flow.open_streams() {
            *by_view.entry(format!("{service} {view}")).or_default() += 1;
            *streams_of_key.entry(key_id).or_default() += 1;
        }
        let metrics = self.access.metrics();
        let by_account = metrics.open_streams();
        let open: u64 = by_account.iter().map(|(_, n)| n).sum();
        let ended: Vec<Value> = metrics
            .streams_ended()
            .into_iter()
            .map(|((service, view, reason), count)| {
                json!({"service": service, "view": view, "reason": reason, "count": count})
            })
            .collect();
        let keys: Vec<Value> = usage
            .keys
            .iter()
            .map(|key| {
                let quota = key.quota.map(|q| q.describe());
                let exhausted = key.quota.is_some_and(|q| {
                    q.requests.is_some_and(|cap| key.requests >= cap)
                        || q.bytes.is_some_and(|cap| key.bytes >= cap)
                });
                let rotation = key.rotation.as_ref().map(|r| {
                    if now < r.grace_until_ms {
                        format!(
                            "rotated → {}, grace until {}",
                            r.replaced_by,
                            feeds::time::format_iso8601_ms(r.grace_until_ms)
                        )
                    } else {
                        format!("rotated → {}, grace over", r.replaced_by)
                    }
                });
                json!({
                    "key_id": key.key_id,
                    "account": key.account,
                    "requests": key.requests,
                    "streams": streams_of_key.get(&key.key_id).copied().unwrap_or(0),
                    "bytes": key.bytes,
                    "period_end": feeds::time::format_iso8601_ms(key.period_end_ms),
                    "quota": quota,
                    "quota_exhausted": exhausted,
                    "rotation": rotation,
                })
            })
            .collect();
        let mut upstreams = Vec::new();
        match &self.info {
            None => upstreams.push(json!({
                "name": "Info source",
                "status": "off",
                "detail": "no info_url: Info answered locally and derived",
            })),
            Some(info) => {
                let failure = info.ctxs_failure();
                upstreams.push(json!({
                    "name": "Info source",
                    "status": if failure.is_some() { "error" } else { "ok" },
                    "detail": failure,
                }));
            }
        }
        if let Some(networks) = &self.networks
            && let Value::Object(verdicts) = (networks.0)().await
        {
            for (name, verdict) in verdicts {
                upstreams.push(network_row(&name, &verdict));
            }
        }
        if let Some(bus) = &self.bus {
            upstreams.push(bus_row(&(bus.0)()));
        }
        json!({
            "now": feeds::time::format_iso8601_ms(now),
            "fresh": market::http::is_fresh(newest_age, bound),
            "max_data_age_ms": bound,
            "feeds": feeds,
            "engine": engine,
            "streams": {
                "open": open,
                "by_view": by_view.into_iter().map(|(view, open)| json!({"view": view, "open": open})).collect::<Vec<_>>(),
                "by_account": by_account.into_iter().filter(|(_, n)| *n > 0).map(|(account, open)| json!({"account": account, "open": open})).collect::<Vec<_>>(),
                "ended": ended,
            },
            "keys": keys,
            "upstreams": upstreams,
            "warnings": warnings::recent(),
            "addresses": self.addresses.as_ref().map(|a| json!({
                "grpc": a.grpc,
                "http": a.http,
                "websocket": format!(
                    "{}/{}",
                    gateway::registry::websocket(a.http.trim_end_matches('/')),
                    gateway::registry::KEY
                ),
                "tls": a.tls,
            })),
        })
    }
}

/// The bus's row among the upstreams: the connection, the first feed in
/// trouble, the newest record's age and the engine checkpoint.
/// A node gateway network's row: its ledger verdict (REST networks) and
/// the last failure of any of its upstreams (`upstream_errors`).
fn network_row(name: &str, verdict: &Value) -> Value {
    let failure = verdict["upstream_errors"].as_object().and_then(|errors| {
        errors
            .iter()
            .find_map(|(kind, error)| error.as_str().map(|e| format!("{kind}: {e}")))
    });
    let ledger = verdict.get("status").and_then(Value::as_str);
    let status = match (ledger, &failure) {
        (Some("ok") | None, Some(_)) => "error",
        (Some(status), _) => status,
        (None, None) => "ok",
    };
    let detail = verdict
        .get("problem")
        .cloned()
        .or_else(|| failure.map(Value::from))
        .or_else(|| {
            verdict["ledger_age_ms"]
                .as_i64()
                .map(|age| json!(format!("ledger {} s behind", age / 1000)))
        })
        .unwrap_or(Value::Null);
    json!({
        "name": format!("node gateway {name}"),
        "status": status,
        "detail": detail,
    })
}

fn bus_row(bus: &Value) -> Value {
    let feeds = bus["feeds"].as_object();
    let failing = feeds.and_then(|feeds| {
        feeds
            .iter()
            .find_map(|(feed, state)| state["error"].as_str().map(|e| format!("{feed}: {e}")))
    });
    let newest_age_s = feeds
        .and_then(|feeds| feeds.values().filter_map(|f| f["age_ms"].as_i64()).min())
        .map(|ms| ms / 1000);
    let problem = bus["error"]
        .as_str()
        .map(str::to_owned)
        .or(failing)
        .or_else(|| {
            bus["checkpoint"]["error"]
                .as_str()
                .map(|e| format!("checkpoint: {e}"))
        });
    let status = match (bus["connected"].as_bool(), &problem) {
        (Some(true), None) => "ok",
        (Some(true), Some(_)) => "error",
        _ => "unreachable",
    };
    let mut detail = vec![bus["url"].as_str().unwrap_or("").to_owned()];
    if let Some(age) = newest_age_s {
        detail.push(format!("newest record {age} s old"));
    }
    if let Some(block) = bus["checkpoint"]["block"].as_u64() {
        detail.push(format!("checkpoint at block {block}"));
    }
    if let Some(problem) = problem {
        detail.push(problem);
    }
    json!({
        "name": format!("bus ({})", bus["role"].as_str().unwrap_or("?")),
        "status": status,
        "detail": detail.join("; "),
    })
}

/// 403 unless `principal` is an admin account's.
fn admin_only(principal: &Principal) -> Result<(), Box<Response>> {
    if principal.admin {
        Ok(())
    } else {
        let body = json!({
            "error": "forbidden",
            "message": format!(
                "the status page is for admin accounts; account {} has no role = \"admin\" in the keys file",
                common::quoted(&principal.account)
            ),
        });
        Err(Box::new(
            (StatusCode::FORBIDDEN, Json(body)).into_response(),
        ))
    }
}

async fn page(Extension(principal): Extension<Principal>) -> Response {
    if let Err(refusal) = admin_only(&principal) {
        return *refusal;
    }
    let mut response = Html(PAGE).into_response();
    let headers = response.headers_mut();
    // The page's URL holds the key: keep it out of caches and referrers.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        ),
    );
    response
}

async fn once(
    State(status): State<StatusPage>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if let Err(refusal) = admin_only(&principal) {
        return *refusal;
    }
    let mut response = Json(status.snapshot().await).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn events(
    State(status): State<StatusPage>,
    Extension(principal): Extension<Principal>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    if let Err(refusal) = admin_only(&principal) {
        return *refusal;
    }
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let guard = match status.access.open_stream(&principal, peer) {
        Ok(guard) => guard,
        Err(denial) => {
            status.access.record_denial("http", &denial);
            return edge::http::denial_response(&denial);
        }
    };
    let stream =
        futures_util::stream::unfold((status, guard, true), |(status, guard, first)| async move {
            if !first {
                tokio::time::sleep(EVERY).await;
            }
            if let Err(denial) = status.access.recheck(&guard) {
                status.access.record_denial("http", &denial);
                return None;
            }
            let data = status.snapshot().await.to_string();
            let event = Event::default().event("status").data(data);
            Some((
                Ok::<_, std::convert::Infallible>(event),
                (status, guard, false),
            ))
        });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_row_shows_its_upstream_failures_and_its_ledger() {
        let ledger_only = json!({"status": "ok", "ledger_age_ms": 2_000});
        assert_eq!(
            network_row("aptos/mainnet", &ledger_only),
            json!({"name": "node gateway aptos/mainnet", "status": "ok", "detail": "ledger 2 s behind"})
        );
        let websocket_failing = json!({"upstream_errors": {"jsonrpc": null, "jsonrpc_ws": "TLS: invalid peer certificate"}});
        assert_eq!(
            network_row("hyperevm/mainnet", &websocket_failing),
            json!({"name": "node gateway hyperevm/mainnet", "status": "error", "detail": "jsonrpc_ws: TLS: invalid peer certificate"})
        );
        let quiet = json!({"upstream_errors": {"jsonrpc": null}});
        assert_eq!(network_row("x/y", &quiet)["status"], "ok");
        let stale = json!({"status": "stale", "problem": "94 s behind", "upstream_errors": {"rest": "timeout"}});
        assert_eq!(
            network_row("x/y", &stale),
            json!({"name": "node gateway x/y", "status": "stale", "detail": "94 s behind"})
        );
    }

    #[test]
    fn the_bus_row_says_what_is_wrong_first() {
        let healthy = json!({
            "role": "edge", "url": "nats://127.0.0.1:4222", "connected": true, "error": null,
            "feeds": {"fills": {"age_ms": 2_500, "error": null},
                      "blocks": {"age_ms": 900, "error": null}},
            "checkpoint": {"block": 985_148_300, "error": null},
        });
        let row = bus_row(&healthy);
        assert_eq!(row["name"], "bus (edge)");
        assert_eq!(row["status"], "ok");
        assert_eq!(
            row["detail"],
            "nats://127.0.0.1:4222; newest record 0 s old; checkpoint at block 985148300"
        );

        let mut feed_stuck = healthy.clone();
        feed_stuck["feeds"]["fills"]["error"] = json!("record larger than max_payload");
        let row = bus_row(&feed_stuck);
        assert_eq!(row["status"], "error");
        assert!(
            row["detail"]
                .as_str()
                .unwrap()
                .ends_with("fills: record larger than max_payload"),
            "{row}"
        );

        let mut down = healthy;
        down["connected"] = json!(false);
        down["error"] = json!("connection refused");
        let row = bus_row(&down);
        assert_eq!(row["status"], "unreachable");
        assert!(
            row["detail"]
                .as_str()
                .unwrap()
                .ends_with("connection refused")
        );
    }
}
