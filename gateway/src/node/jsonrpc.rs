//! The JSON-RPC relays of one network: `POST /{key}` (or `POST /` with the
//! key in `X-Api-Key`) to the node's JSON-RPC over HTTP, and a WebSocket
//! upgrade at `/{key}` (or `/` with the header on the upgrade) relayed both
//! ways to the node's JSON-RPC over WebSocket, subscriptions included.
//!
//! Both sit behind the same access checks as every route (401 / 403 / 429
//! before any upstream work), and the key never reaches the node: it is
//! not in the upstream URL, and no client header is forwarded on the
//! upstream upgrade.
//!
//! HTTP: the body must be JSON — one call (an object) or a batch (a
//! non-empty array of at most [`MAX_BATCH`] calls); otherwise the answer is
//! a JSON-RPC error with `id: null` (`-32700` parse error, `-32600` invalid
//! request) and status 400. The node's answer passes through with its
//! status. A batch is charged one request of the account's rate per call.
//! Upstream failures are JSON-RPC errors too: `-32603` with status 502, or
//! 504 when the node is slower than `upstream_timeout_ms`.
//!
//! WebSocket: frames are relayed as they come, text and binary, each at most
//! [`MAX_WS_MESSAGE`] bytes (1009 beyond). The connection counts as one
//! stream against the account's cap; every client message is charged one
//! request of the account's rate, and one over the rate is answered with a
//! JSON-RPC error instead of being relayed. The node's messages count toward
//! the key's byte quota; the one that uses it up is delivered, then the
//! connection is closed with 4003. When the key is revoked, rotated past
//! its grace, or its allow-list stops admitting the source, the connection
//! is closed with 1008; when the node closes or cannot be reached, with 1011
//! (or the node's own close code).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::ws::{CloseFrame, Message as ClientMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::post;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message as NodeMessage;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as NodeCloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use access::keys::Principal;
use access::{Access, StreamGuard};
use edge::listen::HeldConnection;
use edge::routes::{Route, Routed};
use edge::upstream::{UpstreamClient, UpstreamError, UpstreamUrl};

/// `POST /{key}` (and the WebSocket upgrade, `GET`): the node's JSON-RPC.
pub const RPC: Route = Route {
    method: "GET, POST",
    path: "/",
    keyed: true,
    what: "the node's JSON-RPC, over HTTP (POST) or a WebSocket (GET, upgrade)",
};

/// Most calls in one batch.
pub const MAX_BATCH: usize = 1000;

/// Largest request body.
pub const MAX_REQUEST_BODY: usize = 8 << 20;

/// Largest answer relayed back.
pub const MAX_RESPONSE_BODY: usize = 64 << 20;

/// Largest WebSocket message either way.
pub const MAX_WS_MESSAGE: usize = 16 << 20;

/// The close code when the key's byte quota is used up (as the exchange's
/// WebSocket API closes).
const QUOTA_CLOSE: u16 = 4003;

/// How often an open WebSocket re-checks its key and allow-list.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// One network's JSON-RPC side.
#[derive(Debug, Clone)]
pub struct JsonRpc {
    /// `chain/network`, in messages.
    pub name: String,
    /// JSON-RPC over HTTP.
    pub http: Option<UpstreamUrl>,
    /// JSON-RPC over WebSocket (`ws://…` or `wss://…`).
    pub ws: Option<String>,
    /// What a `wss://` upstream is verified against.
    pub tls: std::sync::Arc<tokio_rustls::rustls::ClientConfig>,
    /// HTTP client for [`JsonRpc::http`].
    pub client: UpstreamClient,
    /// Access control (stream cap, rate, revocation).
    pub access: Access,
    /// Longest wait to connect to the WebSocket upstream.
    pub connect_timeout: Duration,
    /// Why the last connection to the WebSocket upstream failed (`None`
    /// once one succeeds).
    pub ws_failure: edge::upstream::LastFailure,
}

impl JsonRpc {
    /// A network's JSON-RPC side.
    pub fn new(
        name: String,
        http: Option<UpstreamUrl>,
        ws: Option<String>,
        timeout: Duration,
        tls: &edge::upstream::UpstreamTls,
        access: Access,
    ) -> Self {
        Self {
            name,
            http,
            ws,
            client: UpstreamClient::new(timeout, MAX_RESPONSE_BODY, tls),
            tls: tls.client_config(),
            access,
            connect_timeout: timeout,
            ws_failure: edge::upstream::LastFailure::default(),
        }
    }

    /// The last failures of its upstreams, by kind (`jsonrpc`, `jsonrpc_ws`;
    /// `None`: the last exchange succeeded, or none was made), for those it
    /// has.
    pub fn last_failures(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        if self.http.is_some() {
            out.push(("jsonrpc", self.client.last_failure()));
        }
        if self.ws.is_some() {
            out.push(("jsonrpc_ws", self.ws_failure.get()));
        }
        out
    }

    /// The routes (authenticated by the caller): `POST /` and the
    /// WebSocket upgrade at `GET /`.
    pub fn routes(self) -> Routed {
        Routed::new()
            .route(RPC, post(relay_http).get(upgrade))
            .map(|router| {
                router
                    .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BODY))
                    .with_state(self)
            })
    }
}

/// `{"jsonrpc":"2.0","id":null,"error":{"code","message"}}` with `status`.
fn rpc_error(status: StatusCode, code: i64, message: impl Into<String>) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message.into() },
    });
    (status, Json(body)).into_response()
}

/// How many calls `body` holds, or the JSON-RPC error answering it.
fn calls(body: &[u8]) -> Result<usize, Box<Response>> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            -32700,
            common::bounded(format!("parse error: body is not JSON ({e})")),
        ))
    })?;
    match value {
        serde_json::Value::Object(_) => Ok(1),
        serde_json::Value::Array(items) if items.is_empty() => Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "invalid request: the batch is empty",
        ))),
        serde_json::Value::Array(items) if items.len() > MAX_BATCH => Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            format!(
                "invalid request: the batch holds {} calls, more than {MAX_BATCH}",
                items.len()
            ),
        ))),
        serde_json::Value::Array(items) => Ok(items.len()),
        _ => Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "invalid request: the body must be a call object or an array of calls",
        ))),
    }
}

async fn relay_http(
    State(rpc): State<JsonRpc>,
    Extension(principal): Extension<Principal>,
    request: Request,
) -> Response {
    let Some(upstream) = &rpc.http else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            -32603,
            format!(
                "{}: no JSON-RPC upstream is configured for this network",
                rpc.name
            ),
        );
    };
    let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_REQUEST_BODY).await else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            format!("invalid request: body larger than {MAX_REQUEST_BODY} bytes"),
        );
    };
    let count = match calls(&body) {
        Ok(count) => count,
        Err(response) => return *response,
    };
    // The request itself was charged on the way in; the rest of a batch here.
    for _ in 1..count {
        if let Err(denial) = rpc.access.charge_request(&principal) {
            rpc.access.record_denial("jsonrpc", &denial);
            return edge::http::denial_response(&denial);
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    match rpc
        .client
        .send(
            axum::http::Method::POST,
            upstream.uri().clone(),
            headers,
            body,
        )
        .await
    {
        Ok(answer) => {
            let mut response = Response::new(Body::from(answer.body));
            *response.status_mut() = answer.status;
            *response.headers_mut() =
                super::rest::forwarded(&answer.headers, &super::rest::DROPPED_RESPONSE_HEADERS);
            response
        }
        Err(error @ UpstreamError::Timeout(_)) => rpc_error(
            StatusCode::GATEWAY_TIMEOUT,
            -32603,
            format!("{}: node: {error}", rpc.name),
        ),
        Err(error) => rpc_error(
            StatusCode::BAD_GATEWAY,
            -32603,
            format!("{}: node: {error}", rpc.name),
        ),
    }
}

async fn upgrade(
    State(rpc): State<JsonRpc>,
    Extension(principal): Extension<Principal>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    held: Option<Extension<HeldConnection>>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return rpc_error(
            StatusCode::METHOD_NOT_ALLOWED,
            -32600,
            "GET / is a WebSocket upgrade; send JSON-RPC calls with POST",
        );
    };
    let Some(url) = rpc.ws.clone() else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            -32603,
            format!(
                "{}: no JSON-RPC WebSocket upstream is configured for this network",
                rpc.name
            ),
        );
    };
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    let guard = match rpc.access.open_stream(&principal, peer) {
        Ok(guard) => guard,
        Err(denial) => {
            // The upgrade request took a unit of the key's quota; refused,
            // it is not counted.
            rpc.access.refund_quota(&principal);
            rpc.access.record_denial("websocket", &denial);
            return edge::http::denial_response(&denial);
        }
    };
    // Connect before accepting, so a node that is down is a 502 the
    // client sees, not an upgrade closed at once.
    let connect = connect_node(&url, &rpc.tls);
    let node = match tokio::time::timeout(rpc.connect_timeout, connect).await {
        Ok(Ok(node)) => {
            rpc.ws_failure.set(None);
            node
        }
        Ok(Err(error)) => {
            tracing::warn!(network = %rpc.name, %error, "node WebSocket: cannot connect");
            rpc.ws_failure.set(Some(common::bounded(error.clone())));
            return rpc_error(
                StatusCode::BAD_GATEWAY,
                -32603,
                common::bounded(format!("{}: node WebSocket: {error}", rpc.name)),
            );
        }
        Err(_) => {
            rpc.ws_failure.set(Some(format!(
                "did not accept within {} ms",
                rpc.connect_timeout.as_millis()
            )));
            return rpc_error(
                StatusCode::GATEWAY_TIMEOUT,
                -32603,
                format!(
                    "{}: node WebSocket did not accept within {} ms",
                    rpc.name,
                    rpc.connect_timeout.as_millis()
                ),
            );
        }
    };
    upgrade
        .max_message_size(MAX_WS_MESSAGE)
        .max_frame_size(MAX_WS_MESSAGE)
        .on_upgrade(move |client| async move {
            let _held = held;
            pump(client, node, rpc, principal, guard).await;
        })
}

/// Why a relayed connection ends, and the close frame the client gets.
fn close(code: u16, reason: &str) -> ClientMessage {
    let mut reason = reason.to_owned();
    // A close frame's reason holds at most 123 bytes.
    while reason.len() > 123 {
        reason.pop();
    }
    ClientMessage::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// The connection to the node: plain TCP, or TLS over it for `wss://`.
type NodeStream = tokio_util::either::Either<
    tokio::net::TcpStream,
    tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
>;
type NodeSocket = tokio_tungstenite::WebSocketStream<NodeStream>;

/// Opens the node's WebSocket at `url` (`ws://` or `wss://`, verified
/// against `tls`: never a plain fallback); why not, in words.
async fn connect_node(
    url: &str,
    tls: &std::sync::Arc<tokio_rustls::rustls::ClientConfig>,
) -> Result<NodeSocket, String> {
    let uri: axum::http::Uri = url.parse().map_err(|_| format!("{url} is not a URL"))?;
    let secure = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err(format!("{url} is not a ws:// or wss:// URL")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("{url} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let stream = if secure {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| format!("{host} is not a TLS server name"))?;
        let tls = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {host}:{port}: {e}"))?;
        tokio_util::either::Either::Right(tls)
    } else {
        tokio_util::either::Either::Left(tcp)
    };
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_WS_MESSAGE))
        .max_frame_size(Some(MAX_WS_MESSAGE));
    tokio_tungstenite::client_async_with_config(url, stream, Some(config))
        .await
        .map(|(socket, _)| socket)
        .map_err(|e| e.to_string())
}

async fn pump(
    client: WebSocket,
    node: NodeSocket,
    rpc: JsonRpc,
    principal: Principal,
    guard: StreamGuard,
) {
    let (mut to_client, mut from_client) = client.split();
    let (mut to_node, mut from_node) = node.split();
    let mut recheck = tokio::time::interval(RECHECK_EVERY);
    recheck.tick().await;
    let ending = loop {
        tokio::select! {
            message = from_client.next() => match message {
                Some(Ok(message @ (ClientMessage::Text(_) | ClientMessage::Binary(_)))) => {
                    if let Err(denial) = rpc.access.charge_request(&principal) {
                        rpc.access.record_denial("websocket", &denial);
                        let refusal = serde_json::json!({
                            "jsonrpc": "2.0", "id": null,
                            "error": {"code": -32005, "message": denial.message()},
                        });
                        if to_client.send(ClientMessage::Text(refusal.to_string().into())).await.is_err() {
                            break None;
                        }
                        continue;
                    }
                    let relayed = match message {
                        ClientMessage::Text(text) => NodeMessage::Text(text.as_str().into()),
                        ClientMessage::Binary(data) => NodeMessage::Binary(data),
                        _ => continue,
                    };
                    if to_node.send(relayed).await.is_err() {
                        break Some(close(1011, "the node closed the connection"));
                    }
                }
                // Pings are answered by the server's WebSocket layer.
                Some(Ok(ClientMessage::Ping(_) | ClientMessage::Pong(_))) => {}
                Some(Ok(ClientMessage::Close(_))) | None => {
                    let _ = to_node.send(NodeMessage::Close(None)).await;
                    break None;
                }
                Some(Err(error)) => {
                    let _ = to_node.send(NodeMessage::Close(None)).await;
                    break Some(close(1009, &format!("{error}")));
                }
            },
            message = from_node.next() => match message {
                Some(Ok(NodeMessage::Text(text))) => {
                    let within = guard.sent_within_quota(text.len(), None);
                    if to_client.send(ClientMessage::Text(text.as_str().into())).await.is_err() {
                        break None;
                    }
                    if let Err(denial) = within {
                        let _ = to_node.send(NodeMessage::Close(None)).await;
                        break Some(close(QUOTA_CLOSE, denial.message().as_str()));
                    }
                }
                Some(Ok(NodeMessage::Binary(data))) => {
                    let within = guard.sent_within_quota(data.len(), None);
                    if to_client.send(ClientMessage::Binary(data)).await.is_err() {
                        break None;
                    }
                    if let Err(denial) = within {
                        let _ = to_node.send(NodeMessage::Close(None)).await;
                        break Some(close(QUOTA_CLOSE, denial.message().as_str()));
                    }
                }
                Some(Ok(NodeMessage::Close(frame))) => {
                    let (code, reason) = frame.map_or((1011, String::new()), |f: NodeCloseFrame| {
                        (u16::from(f.code), f.reason.to_string())
                    });
                    let code = if code == u16::from(CloseCode::Normal) { 1000 } else { code };
                    break Some(close(code, &format!("node: {reason}")));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break Some(close(1011, "the node connection failed")),
            },
            _ = recheck.tick() => {
                if let Err(denial) = rpc.access.recheck(&guard) {
                    rpc.access.record_denial("websocket", &denial);
                    let _ = to_node.send(NodeMessage::Close(None)).await;
                    let code = if denial.quota().is_some() { QUOTA_CLOSE } else { 1008 };
                    break Some(close(code, denial.message().as_str()));
                }
            }
        }
    };
    if let Some(frame) = ending {
        let _ = to_client.send(frame).await;
    }
    drop(guard);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_calls_or_batches() {
        assert_eq!(
            calls(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#).ok(),
            Some(1)
        );
        assert_eq!(calls(br#"[{"id":1},{"id":2}]"#).ok(), Some(2));
        for body in [&b"not json"[..], b"[]", b"3", br#""x""#] {
            assert!(calls(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
        let big = format!("[{}]", vec!["{}"; MAX_BATCH + 1].join(","));
        assert!(calls(big.as_bytes()).is_err());
    }
}
