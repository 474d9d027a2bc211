//! The API key check every HTTP edge shares (l1gate's own routes, the
//! exchange's Info lookup, the node gateway), and the JSON refusals it
//! answers with.
//!
//! Authenticated routes take the API key in either form, with the same key,
//! limits and usage accounting (see the `access` crate):
//! - the first path segment: `GET /{key}/v1/feeds`;
//! - the `X-Api-Key` header: `GET /v1/feeds`.
//!
//! Refusals are JSON `{"error": reason, "message": …}`: 401 for a missing or
//! rejected key (`rotated_key` for a rotated key past its grace period), 403
//! (with `allow_list_url`) for a source address outside the key's
//! allow-list, 429 (with a `Retry-After` header) over the key's usage quota
//! (`quota_exceeded`, with a `quota` object naming the cap and when it
//! resets) or the account's rate limit. Response bodies of a known length
//! count toward the key's byte quota. The source address is the TCP peer:
//! proxy headers are not trusted.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{ConnectInfo, RawPathParams, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse as _, Json, Response};

use crate::routes::Routed;
use access::{Access, Denial};
use common::metrics::Metrics;

/// Header carrying the API key (matched case-insensitively).
pub const API_KEY_HEADER: &str = "x-api-key";

/// Name of the path capture holding the key in the path form.
pub const PATH_KEY: &str = "api_key";

/// Serves `routes` behind the API key in both forms: as written (key in the
/// `X-Api-Key` header) and under a leading `/{key}` segment. Each request
/// passes [`require_key`]; handlers read the caller with
/// `Extension<Principal>`. Nested handlers see the `api_key` capture among
/// their path parameters, so they should extract named parameters.
pub fn authenticated(routes: Routed, access: Access) -> Routed {
    routes.map(|routes| {
        Router::new()
            .merge(routes.clone())
            .nest(&format!("/{{{PATH_KEY}}}"), routes)
            .route_layer(middleware::from_fn_with_state(access, require_key))
    })
}

/// Middleware of [`authenticated`]: the key (path segment or header), the
/// key's allow-list against the TCP peer, then one request of the key's
/// quota and one unit of the account's request rate. Admitted requests
/// carry the [`Principal`] in their extensions and no longer carry the
/// `X-Api-Key` header; their response body, when its length is known,
/// counts toward the key's byte quota.
pub async fn require_key(
    State(access): State<Access>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut request: Request,
    next: Next,
) -> Response {
    let path_key = params.ok().and_then(|params| {
        params
            .iter()
            .find(|(name, _)| *name == PATH_KEY)
            .map(|(_, value)| value.to_owned())
    });
    let header_key = request
        .headers_mut()
        .remove(API_KEY_HEADER)
        .and_then(|v| v.to_str().ok().map(str::to_owned));
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let key = match (path_key, header_key) {
        (Some(path), Some(header)) if path != header => Err(Denial::ConflictingKeys),
        (Some(key), _) | (None, Some(key)) => Ok(Some(key)),
        (None, None) => Ok(None),
    };
    let admitted = key
        .and_then(|key| access.identify(key.as_deref(), peer))
        .and_then(|principal| {
            access
                .charge_http_request(&principal)
                .map(|bytes| (principal, bytes))
        });
    match admitted {
        Ok((principal, bytes)) => {
            request.extensions_mut().insert(principal);
            let response = next.run(request).await;
            if let Some(length) = axum::body::HttpBody::size_hint(response.body()).exact() {
                bytes.sent(length);
            }
            response
        }
        Err(denial) => {
            access.record_denial("http", &denial);
            denial_response(&denial)
        }
    }
}

/// The JSON refusal for a denial.
pub fn denial_response(denial: &Denial) -> Response {
    let status =
        StatusCode::from_u16(denial.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = serde_json::json!({
        "error": denial.reason(),
        "message": denial.message(),
    });
    if let Some(url) = denial.allow_list_url() {
        body["allow_list_url"] = url.into();
    }
    let retry_after = denial
        .retry_after()
        .map(|wait| wait.as_millis().div_ceil(1000).max(1) as u64);
    if let Some(seconds) = retry_after {
        body["retry_after_s"] = seconds.into();
    }
    if let Some((kind, limit, period, resets_at_ms)) = denial.quota() {
        body["quota"] = serde_json::json!({
            "kind": kind.name(),
            "limit": limit,
            "period": period.name(),
            "resets_at": feeds::time::format_iso8601_ms(resets_at_ms),
        });
    }
    let mut response = (status, Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// A 503 the client retries after `retry_after_s` seconds: the JSON body
/// names `reason` (a stable token) and says why in `message`.
pub fn unavailable_response(reason: &str, message: &str, retry_after_s: u64) -> Response {
    let body = serde_json::json!({
        "error": reason,
        "message": message,
        "retry_after_s": retry_after_s,
    });
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
    response
}

/// Middleware counting responses by status for `/metrics`.
pub async fn count_responses(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    metrics.http_response(response.status().as_u16());
    response
}

/// Asks each node gateway network for its freshness verdict (what
/// `/healthz` shows of the gateway):
/// `{"chain/network": {"status", …}}`.
#[derive(Clone)]
pub struct NetworkProbe(
    pub Arc<dyn Fn() -> futures_util::future::BoxFuture<'static, serde_json::Value> + Send + Sync>,
);

impl std::fmt::Debug for NetworkProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetworkProbe")
    }
}
