//! `POST /info` (key in the path: `POST /{key}/info`, or in the `X-Api-Key`
//! header): the exchange's Info lookup, body `{"type": …}`.
//!
//! `l2Book`, `allMids`, `openOrders`, `frontendOpenOrders` and
//! `candleSnapshot` are answered from l1gate's own state, with or without a
//! source (see [`super::local`]; header `X-L1gate-Info-Source: local`).
//!
//! With an Info source (`info_url`):
//! - `meta`, `spotMeta` and `perpDexs` are answered from a short cache
//!   (`info_cache_ms`): the source is asked at most once per request body
//!   per cache window, however many callers ask at once (a failure is kept
//!   for the window too, so a failing source is not asked once per caller);
//! - every other type is passed through as it is;
//! - the source's status (2xx, 4xx), `Content-Type` and body are relayed;
//!   when it cannot be reached, answers too much or answers 5xx: 502
//!   `{"error":"bad_gateway","message":…}`; too slowly: 504
//!   `gateway_timeout`.
//!
//! Without one, `meta` and `spotMeta` are derived from the coins in the
//! node's data (see [`super::derived`]; 503 `not_ready` until the engine has
//! caught up) and every other type, like `meta` of a builder-deployed
//! exchange (a non-empty `dex`), is 503 `no_info_source`.
//!
//! A body that is not a JSON object with a non-empty string `type` is 400
//! `invalid_request`, naming `type`. Each answer says where it came from in
//! the `X-L1gate-Info-Source` header: `upstream`, `cache`, `derived` or
//! `local`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::post;
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use access::keys::Principal;
use edge::routes::{Route, Routed};
use edge::upstream::{UpstreamClient, UpstreamError, UpstreamResponse, UpstreamUrl};
use host::engine::EngineStatus;

/// `POST /{key}/info`.
pub const INFO: Route = Route {
    method: "POST",
    path: "/info",
    keyed: true,
    what: "the exchange's Info lookup, body {\"type\": …}",
};

/// Request types answered from the cache.
pub const CACHED_TYPES: [&str; 3] = ["meta", "spotMeta", "perpDexs"];

/// Distinct cached request bodies kept at once; past it, expired entries
/// are dropped and, if none expired, the request goes to the source
/// uncached.
const MAX_CACHE_ENTRIES: usize = 256;

/// Response header naming where an answer came from.
pub const SOURCE_HEADER: &str = "x-l1gate-info-source";

/// An Info source: its address and the client that reaches it.
#[derive(Debug, Clone)]
pub struct InfoSource {
    /// The endpoint the request bodies are POSTed to.
    pub url: UpstreamUrl,
    /// The client.
    pub client: UpstreamClient,
}

/// State of the `/info` route.
#[derive(Debug, Clone)]
pub struct InfoLookup {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    local: Option<super::local::Local>,
    source: Option<InfoSource>,
    cache_for: Duration,
    cache: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Cached>>>>>,
    engine: Arc<EngineStatus>,
}

#[derive(Debug)]
struct Cached {
    at: Instant,
    answer: Result<UpstreamResponse, UpstreamError>,
}

impl InfoLookup {
    /// A lookup over `source` (or derived answers when `None`) whose cached
    /// types live `cache_for`, deriving from `engine`'s coins; with `local`,
    /// the types of [`super::local::LOCAL_TYPES`] are answered from the
    /// engine's books and the candle store, with or without a source.
    pub fn new(
        source: Option<InfoSource>,
        cache_for: Duration,
        engine: Arc<EngineStatus>,
        local: Option<super::local::Local>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                local,
                source,
                cache_for,
                cache: Mutex::new(HashMap::new()),
                engine,
            }),
        }
    }

    /// The authenticated routes: `POST /info`.
    pub fn routes(self) -> Routed {
        Routed::new()
            .route(INFO, post(info))
            .map(|router| router.with_state(self))
    }
}

/// A JSON error answer.
/// An error answer; `not_ready` and `engine_busy` (states that pass) say
/// when to retry.
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": code, "message": message.into() });
    let mut response = (status, Json(body)).into_response();
    if matches!(code, "not_ready" | "engine_busy") {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// The request body and its type, or why it is refused (naming `type`).
fn request_type(body: &[u8]) -> Result<(Value, String), String> {
    let bad = |why: String| {
        format!("type: {why}; the body must be a JSON object such as {{\"type\":\"meta\"}}")
    };
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON ({e})")))?;
    let kind = match value.get("type") {
        Some(Value::String(kind)) if !kind.trim().is_empty() => kind.clone(),
        Some(Value::String(_)) => return Err(bad("must not be blank".into())),
        Some(other) => {
            return Err(bad(format!(
                "must be a string, got {}",
                common::clipped(&other.to_string())
            )));
        }
        None if value.is_object() => return Err(bad("required".into())),
        None => return Err(bad("required (the body is not an object)".into())),
    };
    Ok((value, kind))
}

async fn info(
    State(lookup): State<InfoLookup>,
    Extension(_caller): Extension<Principal>,
    body: Bytes,
) -> Response {
    lookup.answer(body).await
}

impl InfoLookup {
    /// The answer to one request body, as `POST /info` gives it.
    pub async fn answer(&self, body: Bytes) -> Response {
        let (value, kind) = match request_type(&body) {
            Ok(parsed) => parsed,
            Err(message) => return error(StatusCode::BAD_REQUEST, "invalid_request", message),
        };
        if let Some(local) = &self.inner.local
            && super::local::LOCAL_TYPES.contains(&kind.as_str())
        {
            return match local.answer(&kind, &value).await {
                Ok(answer) => {
                    let mut response = match answer {
                        super::local::Answer::Value(value) => Json(value).into_response(),
                        super::local::Answer::Text(text) => (
                            [(
                                axum::http::header::CONTENT_TYPE,
                                HeaderValue::from_static("application/json"),
                            )],
                            text,
                        )
                            .into_response(),
                    };
                    response
                        .headers_mut()
                        .insert(SOURCE_HEADER, HeaderValue::from_static("local"));
                    response
                }
                Err((status, code, message)) => error(status, code, message),
            };
        }
        let Some(source) = &self.inner.source else {
            // Derived answers read the engine's coins: wait for its catch-up.
            if matches!(kind.as_str(), "meta" | "spotMeta") {
                self.inner.engine.until_ready().await;
            }
            return self.derived(&kind, &value);
        };
        if CACHED_TYPES.contains(&kind.as_str()) {
            self.cached(source, &value, body).await
        } else {
            relay(
                source
                    .client
                    .post_json(source.url.uri().clone(), body)
                    .await,
                "upstream",
            )
        }
    }

    /// The answer to one request body as a JSON value (a WebSocket `post`),
    /// or the refusal's message.
    ///
    /// # Errors
    /// The message of a refusal or an upstream failure (an error status, a
    /// body that is not JSON).
    pub async fn answer_json(&self, body: Bytes) -> Result<Value, String> {
        let response = self.answer(body).await;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| format!("the Info answer could not be read: {e}"))?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the Info answer is not JSON: {e}"))?;
        if status.is_success() {
            return Ok(value);
        }
        // As the exchange's WebSocket answers a post it would refuse over
        // HTTP: the status code and its description, then the reason.
        Err(match value.get("message").and_then(Value::as_str) {
            Some(message) => format!("{status}: {message}"),
            None => format!("{status}: {value}"),
        })
    }
    fn derived(&self, kind: &str, value: &Value) -> Response {
        let engine = &self.inner.engine;
        let builder_dex = value
            .get("dex")
            .is_some_and(|dex| dex.as_str().map_or(!dex.is_null(), |name| !name.is_empty()));
        let answer = match kind {
            "meta" if builder_dex => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no_info_source",
                    "meta with a dex (a builder-deployed exchange) needs an Info source: start \
                     l1gate with --info-url (L1GATE_INFO_URL, info_url); derived meta covers the \
                     default exchange only",
                );
            }
            "meta" | "spotMeta" if !engine.ready() => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not_ready",
                    "the market engine is still catching up with the node files; retry shortly",
                );
            }
            "meta" => super::derived::meta(&engine.coins()),
            "spotMeta" => super::derived::spot_meta(&engine.coins()),
            other => {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no_info_source",
                    format!(
                        "type {} needs an Info source: start l1gate with --info-url \
                         (L1GATE_INFO_URL, info_url); without one only meta and spotMeta are \
                         answered, derived from the node's data",
                        common::quoted(other)
                    ),
                );
            }
        };
        let mut response = Json(answer).into_response();
        response
            .headers_mut()
            .insert(SOURCE_HEADER, HeaderValue::from_static("derived"));
        response
    }

    /// A cached type: fresh cache entry, or one request to the source for
    /// every caller waiting on the same body.
    async fn cached(&self, source: &InfoSource, value: &Value, body: Bytes) -> Response {
        // serde_json's maps are sorted, so equal requests print equally.
        let key = value.to_string();
        let Some(slot) = self.slot(&key) else {
            return relay(
                source
                    .client
                    .post_json(source.url.uri().clone(), body)
                    .await,
                "upstream",
            );
        };
        let mut slot = slot.lock().await;
        if let Some(cached) = slot.as_ref()
            && cached.at.elapsed() < self.inner.cache_for
        {
            return relay(cached.answer.clone(), "cache");
        }
        let answer = source
            .client
            .post_json(source.url.uri().clone(), body)
            .await;
        // Failures are kept for the window too: callers queued behind a
        // failed request get its answer instead of each waiting out their
        // own timeout against a failing source.
        *slot = Some(Cached {
            at: Instant::now(),
            answer: answer.clone(),
        });
        relay(answer, "upstream")
    }

    /// The cache slot of `key`, or `None` when the cache is full of fresh
    /// entries.
    fn slot(&self, key: &str) -> Option<Arc<tokio::sync::Mutex<Option<Cached>>>> {
        let mut cache = self.inner.cache.lock();
        if let Some(slot) = cache.get(key) {
            return Some(Arc::clone(slot));
        }
        if cache.len() >= MAX_CACHE_ENTRIES {
            let cache_for = self.inner.cache_for;
            cache.retain(|_, slot| match slot.try_lock() {
                Ok(entry) => entry.as_ref().is_some_and(|c| c.at.elapsed() < cache_for),
                // Someone is filling it right now.
                Err(_) => true,
            });
            if cache.len() >= MAX_CACHE_ENTRIES {
                return None;
            }
        }
        let slot = Arc::new(tokio::sync::Mutex::new(None));
        cache.insert(key.to_owned(), Arc::clone(&slot));
        Some(slot)
    }
}

/// The caller's answer for a source exchange: the source's own answer, or
/// 502 when it failed (unreachable, too large, or a 5xx of its own) and 504
/// when it was too slow.
fn relay(answer: Result<UpstreamResponse, UpstreamError>, origin: &'static str) -> Response {
    match answer {
        Ok(upstream) if upstream.status.is_server_error() => {
            let excerpt: String = String::from_utf8_lossy(&upstream.body)
                .chars()
                .take(200)
                .collect();
            error(
                StatusCode::BAD_GATEWAY,
                "bad_gateway",
                format!(
                    "Info source answered HTTP {}: {excerpt}",
                    upstream.status.as_u16()
                ),
            )
        }
        Ok(upstream) => {
            let mut response = (upstream.status, upstream.body).into_response();
            let headers = response.headers_mut();
            let content_type = upstream
                .headers
                .get(header::CONTENT_TYPE)
                .cloned()
                .unwrap_or(HeaderValue::from_static("application/json"));
            headers.insert(header::CONTENT_TYPE, content_type);
            headers.insert(SOURCE_HEADER, HeaderValue::from_static(origin));
            response
        }
        Err(failure) => upstream_failure(&failure, "Info source"),
    }
}

/// 504 for a timeout, 502 for anything else.
pub fn upstream_failure(failure: &UpstreamError, what: &str) -> Response {
    match failure {
        UpstreamError::Timeout(_) => error(
            StatusCode::GATEWAY_TIMEOUT,
            "gateway_timeout",
            format!("{what}: {failure}"),
        ),
        _ => error(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            format!("{what}: {failure}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_is_required_and_named() {
        let (value, kind) = request_type(br#"{"type":"meta","dex":""}"#).unwrap();
        assert_eq!(kind, "meta");
        assert_eq!(value["dex"], "");
        for (body, why) in [
            (&b"{}"[..], "required"),
            (b"[]", "not an object"),
            (b"not json", "not JSON"),
            (b"", "not JSON"),
            (br#"{"type":" "}"#, "blank"),
            (br#"{"type":3}"#, "must be a string, got 3"),
        ] {
            let message = request_type(body).unwrap_err();
            assert!(message.starts_with("type: "), "{message}");
            assert!(message.contains(why), "{message}");
        }
    }
}
