//! The HTTP edge: `/healthz` (feed directories and data freshness),
//! `/metrics` (OpenMetrics text) and the authenticated API routes: feeds,
//! candles (see [`host::candles`]) and those passed to [`router`] (`/info`
//! from [`crate::info`], the exchange node's REST API under `/v1` from
//! the node gateway).
//!
//! `/healthz` reports, per line feed, the newest block number and time on
//! disk and how far that time is behind the wall clock; it answers 503
//! (`"status": "stale"`) when even the freshest feed is older than the
//! configured bound (`max_data_age_ms`, default 30 s: a node whose newest
//! block is older is not keeping up) or no feed has a record yet, else 200 (`"ok"`).
//!
//! Authenticated routes take the API key in the path or the `X-Api-Key`
//! header, and refusals are JSON, as every HTTP edge does
//! ([`edge::http`]). `/healthz` and `/metrics` need no key; metrics carry
//! key ids and account names only, so expose the HTTP address to trusted
//! networks.

pub mod candles;

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::get;
use feeds::Source;

use access::Access;
use access::keys::Principal;
use common::metrics::Metrics;
use edge::http::NetworkProbe;
use edge::http::{authenticated, count_responses};
use edge::live::LiveFeeds;
use edge::routes::{Route, Routed};
use host::candles::Candles;

/// What `/healthz` looks at.
#[derive(Debug, Clone)]
pub struct Health {
    /// The feeds whose freshness is reported.
    pub live: Arc<LiveFeeds>,
    /// Older newest data than this answers 503.
    pub max_data_age: std::time::Duration,
    /// The candle writer's progress, when candles are served.
    pub candles: Option<Arc<Candles>>,
    /// The keys in force, whose reload problems are reported.
    pub auth: Option<access::auth::Auth>,
    /// The node gateway's networks, whose freshness is reported.
    pub networks: Option<NetworkProbe>,
    /// The message bus (publisher or edge), whose state is reported.
    pub bus: Option<BusProbe>,
    /// The Info source and the client that reaches it, whose last failure
    /// is reported.
    pub info_source: Option<(edge::upstream::UpstreamUrl, edge::upstream::UpstreamClient)>,
}

/// The message bus's state for `/healthz` (`bus::status`).
#[derive(Clone)]
pub struct BusProbe(pub Arc<dyn Fn() -> serde_json::Value + Send + Sync>);

impl std::fmt::Debug for BusProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BusProbe")
    }
}

/// Age (ms against `now_ms`) of the newest block on disk over the line
/// feeds, `None` before any was written. Snapshots are periodic by design
/// and do not count.
pub fn newest_data_age_ms(live: &LiveFeeds, now_ms: i64) -> Option<i64> {
    Source::ALL
        .iter()
        .filter_map(|&source| live.feed(source))
        .filter_map(|feed| feed.newest()?.timestamp_ms)
        .map(|time| now_ms - time)
        .min()
}

/// The freshness verdict of `/healthz` and gRPC health: the newest data is
/// no older than `bound_ms`.
pub fn is_fresh(newest_age_ms: Option<i64>, bound_ms: i64) -> bool {
    newest_age_ms.is_some_and(|age| age <= bound_ms)
}

/// Keeps gRPC health in step with the data's freshness as `/healthz`
/// judges it: `services` (and the server as a whole, the empty service
/// name) are `NOT_SERVING` while the newest block on disk is older than
/// `max_data_age`, `SERVING` otherwise. Checked every second; changes are
/// logged.
pub async fn follow_freshness(
    reporter: tonic_health::server::HealthReporter,
    live: Arc<LiveFeeds>,
    max_data_age: std::time::Duration,
    services: Vec<&'static str>,
) {
    use tonic_health::ServingStatus;
    let bound = i64::try_from(max_data_age.as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut last = None;
    loop {
        tick.tick().await;
        let age = newest_data_age_ms(&live, common::unix_now_ms());
        let fresh = is_fresh(age, bound);
        if last == Some(fresh) {
            continue;
        }
        last = Some(fresh);
        let status = if fresh {
            tracing::info!("data fresh: gRPC health SERVING");
            ServingStatus::Serving
        } else {
            tracing::warn!(
                newest_age_ms = ?age,
                max_data_age_ms = bound,
                "data stale: gRPC health NOT_SERVING"
            );
            ServingStatus::NotServing
        };
        for name in std::iter::once("").chain(services.iter().copied()) {
            reporter.set_service_status(name, status).await;
        }
    }
}

/// `GET /healthz`.
pub const HEALTHZ: Route = Route {
    method: "GET",
    path: "/healthz",
    keyed: false,
    what: "health and data freshness per source",
};
/// `GET /metrics`.
pub const METRICS: Route = Route {
    method: "GET",
    path: "/metrics",
    keyed: false,
    what: "Prometheus metrics",
};
/// `GET /{key}/v1/feeds`.
pub const FEEDS: Route = Route {
    method: "GET",
    path: "/v1/feeds",
    keyed: true,
    what: "raw feeds, their positions and filters",
};

/// Routes of the HTTP edge; `more` are further authenticated API routes
/// (the Info lookup, the node gateway), served behind the same key check
/// after l1gate's own.
pub fn router(health: Health, access: Access, more: Routed) -> Routed {
    let live = health.live.clone();
    let metrics = access.metrics().clone();
    let mut api = Routed::new()
        .route(FEEDS, get(list_feeds))
        .map(|router| router.with_state(live));
    if let Some(candles) = &health.candles {
        api = api.merge(candles::routes(candles.clone(), metrics.clone()));
    }
    let api = api.merge(more);
    let layer_metrics = metrics.clone();
    Routed::new()
        .route(HEALTHZ, get(healthz))
        .map(|router| router.with_state(health))
        .merge(
            Routed::new()
                .route(METRICS, get(render_metrics))
                .map(|router| router.with_state(metrics)),
        )
        .merge(authenticated(api, access))
        .map(|router| {
            router.layer(middleware::from_fn_with_state(
                layer_metrics,
                count_responses,
            ))
        })
}

async fn render_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        metrics.render(common::unix_now_ms()),
    )
        .into_response()
}

/// `{"feeds":[{"id","source","position_kinds","filter_fields"}]}`, the same
/// list as the gRPC `ListFeeds`.
async fn list_feeds(
    State(live): State<Arc<LiveFeeds>>,
    Extension(_caller): Extension<Principal>,
) -> Json<serde_json::Value> {
    let feeds: Vec<serde_json::Value> = Source::ALL
        .iter()
        .map(|&source| {
            let kinds: Vec<&str> = source
                .position_kinds()
                .iter()
                .map(|kind| match kind {
                    feeds::PositionKind::Timestamp => "timestamp",
                    feeds::PositionKind::BlockNumber => "block_number",
                })
                .collect();
            serde_json::json!({
                "id": source.feed_id(),
                "source": live.source_name(source),
                "position_kinds": kinds,
                "filter_fields": source.filter_fields(),
            })
        })
        .collect();
    Json(serde_json::json!({ "feeds": feeds }))
}

/// `{"status":"ok"|"stale","feeds":{"fills":"node_fills_by_block",...},
/// "freshness":{"fills":{"block_number","block_time","age_ms"},...},
/// "newest_age_ms","max_data_age_ms","candles":{...}}`; a feed whose
/// directory has not appeared yet maps to `null` in both maps.
async fn healthz(State(health): State<Health>) -> Response {
    let now = common::unix_now_ms();
    let mut feeds = serde_json::Map::new();
    let mut freshness = serde_json::Map::new();
    let newest_age = newest_data_age_ms(&health.live, now);
    for &source in &Source::ALL {
        let feed = health.live.feed(source);
        let dir = match source {
            Source::OrderbookSnapshots => Some("l4_snapshots".to_owned()),
            _ => feed.as_ref().and_then(feeds::Feed::source_dir_name),
        };
        feeds.insert(
            source.feed_id().to_owned(),
            dir.map_or(serde_json::Value::Null, Into::into),
        );
        // Snapshots are periodic by design; only line feeds say whether the
        // node keeps up.
        let Some(feed) = feed else { continue };
        let newest = feed.newest();
        let entry = match newest.and_then(|h| Some((h.block_number, h.timestamp_ms?))) {
            Some((block_number, time)) => {
                let age = now - time;
                serde_json::json!({
                    "block_number": block_number,
                    "block_time": feeds::time::format_iso8601_ms(time),
                    "age_ms": age,
                })
            }
            None => serde_json::Value::Null,
        };
        freshness.insert(source.feed_id().to_owned(), entry);
    }
    let bound = i64::try_from(health.max_data_age.as_millis()).unwrap_or(i64::MAX);
    let fresh = is_fresh(newest_age, bound);
    let mut body = serde_json::json!({
        "status": if fresh { "ok" } else { "stale" },
        "feeds": feeds,
        "freshness": freshness,
        "newest_age_ms": newest_age,
        "max_data_age_ms": bound,
    });
    if let Some(candles) = &health.candles {
        let (block_number, block_time, caught_up, error) = candles.progress();
        body["candles"] = serde_json::json!({
            "block_number": block_number,
            "block_time": (block_number > 0).then(|| feeds::time::format_iso8601_ms(block_time)),
            "caught_up": caught_up,
            "stored_candles": candles.store().candles(),
            "error": error,
        });
    }
    if let Some(auth) = &health.auth {
        // The server keeps serving with the last good keys: reported, not
        // a reason for 503.
        body["keys"] = serde_json::json!({
            "in_force": auth.keys_in_force(),
            "problem": auth.problem(),
        });
    }
    if let Some(bus) = &health.bus {
        // Serving the node does not depend on the bus: reported, not a
        // reason for 503 (an edge's staleness shows in its data's age).
        body["bus"] = (bus.0)();
    }
    if let Some((url, client)) = &health.info_source {
        // Serving the node's data does not depend on it: reported, not a
        // reason for 503.
        body["info_source"] = serde_json::json!({
            "url": url.to_string(),
            "error": client.last_failure(),
        });
    }
    if let Some(networks) = &health.networks {
        // A network's node is the node's business: reported per network,
        // not a reason for 503 (which says the market data is stale).
        body["networks"] = (networks.0)().await;
    }
    let status = if fresh {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
