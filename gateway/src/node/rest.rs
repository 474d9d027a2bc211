//! The REST and GraphQL relay of one network: `/{key}/v1/…` (or `/v1/…`
//! with the key in the `X-Api-Key` header) relayed to the network's node,
//! `POST …/v1/graphql` to its indexer, behind the same access control as
//! every other route.
//!
//! - On Move-family networks (and the exchange host's `node_url`) the
//!   gateway's REST rules ([`super::rules`]) are checked first: a request that
//!   breaks one is answered `400 invalid_input` and never reaches the node.
//! - `GET /v1` (ledger info) comes from the network's cache
//!   ([`super::ledger`]); `wait_by_hash` has its own, longer timeout.
//! - The key never reaches the node: the path loses its `/{key}` segment and
//!   the `X-Api-Key` header is removed (as are hop-by-hop headers, `Host`,
//!   `Referer`, which could carry a key-bearing URL, and the client's
//!   `Authorization` and `Cookie`).
//! - Paths with `.` / `..` segments (plain or percent-encoded) are refused
//!   (400), so a request cannot climb above the upstream's own path.
//! - Method, path below `/v1`, query, body, status, `Content-Type` and the
//!   node's other end-to-end headers (its `X-Aptos-…` ledger headers, the
//!   `X-Aptos-Cursor` of a page) pass through unchanged.
//! - Bounded: request bodies up to [`MAX_REQUEST_BODY`] (413 beyond),
//!   responses up to [`MAX_RESPONSE_BODY`] and the whole exchange within
//!   `upstream_timeout_ms` (`node_wait_timeout_ms` for `wait_by_hash`).
//!
//! l1gate's own answers on these routes have the node's error shape,
//! `{"message", "error_code", "vm_error_code": null}`: `invalid_input`
//! (400), `payload_too_large` (413), `no_node_upstream` /
//! `no_graphql_upstream` (503), `bad_gateway` (502), `gateway_timeout`
//! (504).

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::any;

use super::ledger::LedgerCache;
use super::rules::{self, Route};
use access::keys::Principal;
use edge::routes::{Route as HttpRoute, Routed};
use edge::upstream::{UpstreamClient, UpstreamError, UpstreamResponse, UpstreamUrl};

/// `/{key}/v1`, `/{key}/v1/` and everything below: the node's REST API
/// (and its GraphQL indexer at `/v1/graphql`), relayed.
pub const ROUTES: [HttpRoute; 3] = [
    HttpRoute {
        method: "ANY",
        path: "/v1",
        keyed: true,
        what: "the node's REST API, relayed",
    },
    HttpRoute {
        method: "ANY",
        path: "/v1/",
        keyed: true,
        what: "the node's REST API, relayed",
    },
    HttpRoute {
        method: "ANY",
        path: "/v1/{*rest}",
        keyed: true,
        what: "the node's REST API (GraphQL at /v1/graphql), relayed",
    },
];

/// Largest request body relayed to the node.
pub const MAX_REQUEST_BODY: usize = 8 << 20;

/// Largest node response relayed back.
pub const MAX_RESPONSE_BODY: usize = 64 << 20;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1),
/// plus the ones l1gate sets or must not leak: a client's credentials are
/// for l1gate (an SDK's `Authorization: Bearer` may well hold the l1gate
/// key), never for the node.
pub(super) const DROPPED_REQUEST_HEADERS: [&str; 14] = [
    "authorization",
    "cookie",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    "referer",
];

/// Response headers not relayed (hyper sets the framing itself).
pub(super) const DROPPED_RESPONSE_HEADERS: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// One network's REST side.
#[derive(Debug, Clone)]
pub struct RestApi {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `chain/network`, in messages.
    name: String,
    /// Whether l1gate's REST rules apply.
    rules: bool,
    /// What `/v1` maps to.
    rest: Option<UpstreamUrl>,
    /// The indexer's GraphQL endpoint.
    graphql: Option<UpstreamUrl>,
    client: UpstreamClient,
    wait_client: UpstreamClient,
    ledger: LedgerCache,
}

/// How one network's REST side is set up.
#[derive(Debug, Clone)]
pub struct RestConfig {
    /// `chain/network`.
    pub name: String,
    /// Whether l1gate's REST rules apply.
    pub rules: bool,
    /// What `/v1` maps to (the node's `…/v1`).
    pub rest: Option<UpstreamUrl>,
    /// The indexer's GraphQL endpoint.
    pub graphql: Option<UpstreamUrl>,
    /// Longest ordinary exchange.
    pub timeout: std::time::Duration,
    /// Longest `wait_by_hash` exchange.
    pub wait_timeout: std::time::Duration,
    /// Ledger info cache window.
    pub ledger_window: std::time::Duration,
    /// What `https://` upstreams are verified against.
    pub tls: edge::upstream::UpstreamTls,
}

impl RestApi {
    /// The last failure of its REST and GraphQL exchanges (`None`: the last
    /// one succeeded, or none was made), when it has either upstream.
    pub fn last_failure(&self) -> Option<Option<String>> {
        (self.inner.rest.is_some() || self.inner.graphql.is_some())
            .then(|| self.inner.client.last_failure())
    }

    /// The REST side of one network.
    pub fn new(config: RestConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                name: config.name,
                rules: config.rules,
                rest: config.rest,
                graphql: config.graphql,
                client: UpstreamClient::new(config.timeout, MAX_RESPONSE_BODY, &config.tls),
                wait_client: UpstreamClient::new(
                    config.wait_timeout,
                    MAX_RESPONSE_BODY,
                    &config.tls,
                ),
                ledger: LedgerCache::new(config.ledger_window),
            }),
        }
    }

    /// `chain/network`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether there is a node to ask.
    pub fn has_node(&self) -> bool {
        self.inner.rest.is_some()
    }

    /// How many ledger info requests reached the node.
    pub fn ledger_requests(&self) -> u64 {
        self.inner.ledger.requests()
    }

    /// The routes (authenticated by the caller): `/v1` and `/v1/{*rest}`,
    /// every method.
    pub fn routes(self) -> Routed {
        let [root, slash, below] = ROUTES;
        Routed::new()
            .route(root, any(relay))
            .route(slash, any(relay))
            .route(below, any(relay))
            .map(|router| {
                router
                    .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY))
                    .with_state(self)
            })
    }

    /// The network's ledger info, from the cache (one node request per
    /// window).
    ///
    /// # Errors
    /// When there is no node, or it cannot be reached.
    pub async fn ledger(&self) -> Option<super::ledger::Answer> {
        let rest = self.inner.rest.as_ref()?;
        let target = rest.join("", None).ok()?;
        let client = &self.inner.client;
        Some(
            self.inner
                .ledger
                .get(client.send(
                    axum::http::Method::GET,
                    target,
                    accept_json(),
                    bytes::Bytes::new(),
                ))
                .await,
        )
    }
}

fn accept_json() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::ACCEPT,
        axum::http::HeaderValue::from_static("application/json"),
    );
    headers
}

/// An answer of l1gate's own in the node's error shape.
pub fn node_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({
        "message": message.into(),
        "error_code": code,
        "vm_error_code": null,
    });
    (status, Json(body)).into_response()
}

/// A failed exchange, in the node's error shape, naming `what` (never the
/// upstream's address).
pub fn failure(error: &UpstreamError, what: &str) -> Response {
    match error {
        UpstreamError::Timeout(_) => node_error(
            StatusCode::GATEWAY_TIMEOUT,
            "gateway_timeout",
            format!("{what}: {error}"),
        ),
        _ => node_error(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            format!("{what}: {error}"),
        ),
    }
}

fn relayed(answer: &UpstreamResponse) -> Response {
    let mut response = Response::new(Body::from(answer.body.clone()));
    *response.status_mut() = answer.status;
    *response.headers_mut() = forwarded(&answer.headers, &DROPPED_RESPONSE_HEADERS);
    response
}

async fn relay(
    State(api): State<RestApi>,
    Extension(_caller): Extension<Principal>,
    request: Request,
) -> Response {
    let inner = &api.inner;
    let (parts, body) = request.into_parts();
    // Nested under `/{key}`, the path seen here has lost the key segment.
    let path = parts.uri.path();
    if has_dot_segment(path) {
        return node_error(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "path: \".\" and \"..\" segments are not relayed",
        );
    }
    let below = path.strip_prefix("/v1").unwrap_or(path);
    let rest = below.strip_prefix('/').unwrap_or(below);
    let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BODY).await else {
        return node_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("body: larger than {MAX_REQUEST_BODY} bytes"),
        );
    };
    let method = parts.method.as_str();
    let (route, query) = if inner.rules {
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        match rules::check(method, rest, parts.uri.query(), content_type, &body) {
            Ok(checked) => (checked.route, checked.query),
            Err(message) => {
                return node_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_input",
                    common::bounded(message),
                );
            }
        }
    } else {
        (
            rules::route_of(method, rest),
            parts.uri.query().map(str::to_owned),
        )
    };
    let (upstream, what) = if route == Route::GraphQl {
        let Some(graphql) = &inner.graphql else {
            return node_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_graphql_upstream",
                format!(
                    "{}: no GraphQL indexer is configured for this network",
                    inner.name
                ),
            );
        };
        (graphql.join("", query.as_deref()), "indexer")
    } else {
        let Some(node) = &inner.rest else {
            return node_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_node_upstream",
                format!(
                    "{}: no node REST upstream is configured (the exchange host's is --node-url, \
                     L1GATE_NODE_URL, node_url; other networks' is `rest` in [[chains.networks.nodes]])",
                    inner.name
                ),
            );
        };
        let below = if rest.is_empty() && below.is_empty() {
            String::new()
        } else {
            format!("/{rest}")
        };
        (node.join(&below, query.as_deref()), "node")
    };
    let target = match upstream {
        Ok(target) => target,
        Err(e) => {
            return node_error(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                common::bounded(format!("path: {e}")),
            );
        }
    };
    if route == Route::Ledger && query.is_none() {
        return match api.ledger().await {
            Some(Ok(answer)) => relayed(&answer),
            Some(Err(error)) => failure(&error, "node"),
            None => node_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_node_upstream",
                "no node",
            ),
        };
    }
    let headers = forwarded(&parts.headers, &DROPPED_REQUEST_HEADERS);
    let client = if route == Route::Wait {
        &inner.wait_client
    } else {
        &inner.client
    };
    match client.send(parts.method, target, headers, body).await {
        Ok(answer) => relayed(&answer),
        Err(error) => failure(&error, what),
    }
}

/// Whether a path has a `.` or `..` segment (also percent-encoded), which
/// could climb above the node URL's own path.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

/// `headers` without the dropped ones, those named by `Connection`, and the
/// API key header.
pub(super) fn forwarded(headers: &HeaderMap, dropped: &[&str]) -> HeaderMap {
    let named_by_connection: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name_str = name.as_str();
        if dropped.contains(&name_str)
            || name_str == edge::http::API_KEY_HEADER
            || named_by_connection.contains(name)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn dot_segments_are_found_encoded_or_not() {
        for path in ["/v1/../x", "/v1/./x", "/v1/%2E%2e/x", "/v1/x/..", "/v1/%2e"] {
            assert!(has_dot_segment(path), "{path}");
        }
        for path in ["/v1", "/v1/accounts/0x1", "/v1/a..b", "/v1/.well-known"] {
            assert!(!has_dot_segment(path), "{path}");
        }
    }

    #[test]
    fn the_key_and_connection_headers_are_never_forwarded() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("l1g_secret"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("connection", HeaderValue::from_static("keep-alive, x-hop"));
        headers.insert("x-hop", HeaderValue::from_static("1"));
        headers.insert(
            "referer",
            HeaderValue::from_static("http://h/l1g_secret/v1"),
        );
        headers.insert("x-trace", HeaderValue::from_static("abc"));
        let out = forwarded(&headers, &DROPPED_REQUEST_HEADERS);
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"content-type") && names.contains(&"x-trace"));
    }
}
