//! The node REST/GraphQL gateway: `/{key}/v1/…` (or `/v1/…` with the key in
//! the `X-Api-Key` header) relayed to the chain node's API at `node_url`,
//! behind the same access control as every other route.
//!
//! - l1gate's own routes under `/v1` (`/v1/feeds`, and any other specific
//!   route) are matched first; everything else under `/v1` is relayed.
//! - The key never reaches the node: the path loses its `/{key}` segment and
//!   the `X-Api-Key` header is removed (as are hop-by-hop headers, `Host`,
//!   and `Referer`, which could carry a key-bearing URL).
//! - Paths with `.` / `..` segments (plain or percent-encoded) are refused
//!   (400), so a request cannot climb above the node URL's own path.
//! - Method, path below the node URL's own path, query, body, status,
//!   `Content-Type` and other end-to-end headers pass through unchanged.
//! - Bounded: request bodies up to [`MAX_REQUEST_BODY`] (413 beyond),
//!   responses up to [`MAX_RESPONSE_BODY`] and the whole exchange within
//!   `upstream_timeout_ms`.
//! - No `node_url`: 503 `no_node_upstream`. Node unreachable or answering
//!   too much: 502 `bad_gateway`; too slowly: 504 `gateway_timeout`.

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::any;
use axum::{Extension, Router};

use crate::access::keys::Principal;
use crate::info::lookup::upstream_failure;
use crate::upstream::{UpstreamClient, UpstreamUrl};

/// Largest request body relayed to the node.
pub const MAX_REQUEST_BODY: usize = 8 << 20;

/// Largest node response relayed back.
pub const MAX_RESPONSE_BODY: usize = 64 << 20;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1),
/// plus the ones l1gate sets or must not leak.
const DROPPED_REQUEST_HEADERS: [&str; 12] = [
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
const DROPPED_RESPONSE_HEADERS: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// The node the gateway relays to, if configured.
#[derive(Debug, Clone)]
pub struct Gateway {
    node: Option<(UpstreamUrl, UpstreamClient)>,
}

impl Gateway {
    /// A gateway to `node` (or one answering 503 when `None`).
    pub fn new(node: Option<(UpstreamUrl, UpstreamClient)>) -> Self {
        Self { node }
    }

    /// The authenticated routes: `/v1` and `/v1/{*rest}`, every method.
    pub fn routes(self) -> Router {
        Router::new()
            .route("/v1", any(relay))
            .route("/v1/", any(relay))
            .route("/v1/{*rest}", any(relay))
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY))
            .with_state(self)
    }
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": code, "message": message.into() });
    (status, Json(body)).into_response()
}

async fn relay(
    State(gateway): State<Gateway>,
    Extension(_caller): Extension<Principal>,
    request: Request,
) -> Response {
    let Some((node, client)) = &gateway.node else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_node_upstream",
            "the node REST/GraphQL gateway is not configured: start l1gate with --node-url \
             (L1GATE_NODE_URL, node_url)",
        );
    };
    let (parts, body) = request.into_parts();
    if has_dot_segment(parts.uri.path()) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "path: \".\" and \"..\" segments are not relayed",
        );
    }
    // Nested under `/{key}`, the path seen here has lost the key segment.
    let target = match node.join(parts.uri.path(), parts.uri.query()) {
        Ok(target) => target,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                crate::bounded(format!("path: {e}")),
            );
        }
    };
    let Ok(body) = axum::body::to_bytes(body, MAX_REQUEST_BODY).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("body: larger than {MAX_REQUEST_BODY} bytes"),
        );
    };
    let headers = forwarded(&parts.headers, &DROPPED_REQUEST_HEADERS);
    match client.send(parts.method, target, headers, body).await {
        Ok(answer) => {
            let mut response = Response::new(Body::from(answer.body));
            *response.status_mut() = answer.status;
            *response.headers_mut() = forwarded(&answer.headers, &DROPPED_RESPONSE_HEADERS);
            response
        }
        Err(failure) => upstream_failure(&failure, "node"),
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
fn forwarded(headers: &HeaderMap, dropped: &[&str]) -> HeaderMap {
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
            || name_str == crate::http::API_KEY_HEADER
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
