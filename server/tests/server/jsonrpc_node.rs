//! A stand-in for an EVM-style JSON-RPC 2.0 node (geth's answers), over
//! HTTP `POST /` and a WebSocket at `/`, recording every request (WebSocket
//! upgrades with their headers) and every text frame it receives; it stops
//! when dropped.
//!
//! | Request | Answer |
//! |---|---|
//! | `eth_chainId` | `"0x1"` |
//! | `net_version` | `"1"` |
//! | `eth_blockNumber` | a hex number, larger at every call (and every new head) |
//! | `web3_clientVersion` | `"Geth/v1.14.12-stable-standin/linux-amd64/go1.23.4"` |
//! | any of those with parameters | error -32602 `too many arguments, want at most 0` |
//! | another method | error -32601 `the method X does not exist/is not available` |
//! | a body that is not JSON | HTTP 200, `{"id":null,"error":{"code":-32700,"message":"parse error"}}` (as geth) |
//! | not a request object (no `"jsonrpc":"2.0"`, no `method`, a bad `id`) | error -32600 `invalid request` |
//! | `[]` | error -32600 `empty batch`; more than 1000 entries: -32600 `batch too large` |
//! | a batch | an array of the answers, in order; notifications (no `id`) get none |
//! | only notifications | HTTP 200 with an empty body (nothing over WebSocket) |
//! | HTTP `POST` with a content type other than `application/json` | 415, plain text |
//! | HTTP `GET /` without an upgrade | 200, empty (geth's health answer) |
//! | WebSocket `eth_subscribe ["newHeads"]` | a subscription id, then every ~50 ms an `eth_subscription` notification with a new head (`number` rising) |
//! | WebSocket `eth_subscribe` of another kind | error -32601 `no "x" subscription in eth namespace` |
//! | WebSocket `eth_unsubscribe [id]` | `true` and no more notifications; an unknown id is error -32000 `subscription not found` |
//! | `eth_subscribe` / `eth_unsubscribe` over HTTP | error -32001 `notifications not supported` |
//!
//! A WebSocket frame that is not text is ignored; a close frame ends the
//! session. Answers are always HTTP 200 except the 415.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt as _, StreamExt as _};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::aptos_node::{Seen, StopOnDrop, record, serve};

const CHAIN_ID: u64 = 1;
const CLIENT_VERSION: &str = "Geth/v1.14.12-stable-standin/linux-amd64/go1.23.4";
const FIRST_BLOCK: u64 = 20_000_000;
const HEAD_INTERVAL: Duration = Duration::from_millis(50);
const BATCH_MAX: usize = 1_000;

struct RpcState {
    seen: Mutex<Vec<Seen>>,
    ws_messages: Mutex<Vec<String>>,
    head: AtomicU64,
    subscriptions: AtomicU64,
    stop: watch::Receiver<bool>,
}

impl RpcState {
    /// The next block number: every call gets a larger one.
    fn next_block(&self) -> u64 {
        self.head.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// The WebSocket side of a session: where notifications go and what is
/// subscribed.
struct Session {
    out: mpsc::UnboundedSender<String>,
    subscriptions: HashMap<String, JoinHandle<()>>,
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn head(number: u64) -> Value {
    let hash = |label: &str| {
        format!(
            "0x{:0>64x}",
            number.wrapping_mul(0x9e37_79b9) ^ label.len() as u64
        )
    };
    json!({
        "number": format!("0x{number:x}"),
        "hash": hash("hash"),
        "parentHash": format!("0x{:0>64x}", (number - 1).wrapping_mul(0x9e37_79b9) ^ 4),
        "timestamp": format!("0x{:x}", 1_700_000_000 + number * 12),
        "miner": format!("0x{:0>40}", "c0ffee"),
        "gasLimit": "0x1c9c380",
        "gasUsed": "0x0",
        "baseFeePerGas": "0x7",
        "difficulty": "0x0",
        "extraData": "0x",
        "nonce": "0x0000000000000000",
        "stateRoot": hash("state"),
        "transactionsRoot": hash("transactions"),
        "receiptsRoot": hash("receipts"),
    })
}

/// Starts sending new heads for a new subscription; its id.
fn subscribe(state: &Arc<RpcState>, session: &mut Session) -> String {
    let id = format!(
        "0x{:032x}",
        0xa5a5_0000 + state.subscriptions.fetch_add(1, Ordering::SeqCst)
    );
    let (state, out, subscription) = (state.clone(), session.out.clone(), id.clone());
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(HEAD_INTERVAL);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let note = json!({
                "jsonrpc": "2.0",
                "method": "eth_subscription",
                "params": {"subscription": subscription, "result": head(state.next_block())},
            });
            if out.send(note.to_string()).is_err() {
                break;
            }
        }
    });
    session.subscriptions.insert(id.clone(), task);
    id
}

/// The answer to one request object; `None` for a notification.
fn answer_one(
    state: &Arc<RpcState>,
    message: &Value,
    session: Option<&mut Session>,
) -> Option<Value> {
    let id = message.get("id");
    let id_valid = matches!(
        id,
        None | Some(Value::Null | Value::Number(_) | Value::String(_))
    );
    let reply_id = id.filter(|_| id_valid).cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str);
    let version_ok = message.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    let (Some(method), true, true) = (method, version_ok, id_valid) else {
        return Some(error(reply_id, -32600, "invalid request"));
    };
    let id = id?.clone();
    let params = match message.get("params") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(params)) => params.clone(),
        Some(_) => return Some(error(id, -32602, "non-array args")),
    };
    let plain = |value: Value| {
        if params.is_empty() {
            result(id.clone(), value)
        } else {
            error(id.clone(), -32602, "too many arguments, want at most 0")
        }
    };
    Some(match (method, session) {
        ("eth_chainId", _) => plain(json!(format!("0x{CHAIN_ID:x}"))),
        ("net_version", _) => plain(json!(CHAIN_ID.to_string())),
        ("web3_clientVersion", _) => plain(json!(CLIENT_VERSION)),
        ("eth_blockNumber", _) => {
            if params.is_empty() {
                result(id, json!(format!("0x{:x}", state.next_block())))
            } else {
                plain(Value::Null)
            }
        }
        ("eth_subscribe" | "eth_unsubscribe", None) => {
            error(id, -32001, "notifications not supported")
        }
        ("eth_subscribe", Some(session)) => match params.first().and_then(Value::as_str) {
            Some("newHeads") => result(id, json!(subscribe(state, session))),
            Some(kind) => error(
                id,
                -32601,
                &format!("no \"{kind}\" subscription in eth namespace"),
            ),
            None => error(id, -32602, "subscription name missing"),
        },
        ("eth_unsubscribe", Some(session)) => {
            let task = params
                .first()
                .and_then(Value::as_str)
                .and_then(|sub| session.subscriptions.remove(sub));
            match task {
                Some(task) => {
                    task.abort();
                    result(id, json!(true))
                }
                None => error(id, -32000, "subscription not found"),
            }
        }
        (other, _) => error(
            id,
            -32601,
            &format!("the method {other} does not exist/is not available"),
        ),
    })
}

/// The answer to one body or frame: a request or a batch.
fn answer_payload(
    state: &Arc<RpcState>,
    payload: &[u8],
    mut session: Option<&mut Session>,
) -> Option<Value> {
    let Ok(value) = serde_json::from_slice::<Value>(payload) else {
        return Some(error(Value::Null, -32700, "parse error"));
    };
    match value {
        Value::Array(items) if items.is_empty() => Some(error(Value::Null, -32600, "empty batch")),
        Value::Array(items) if items.len() > BATCH_MAX => {
            Some(error(Value::Null, -32600, "batch too large"))
        }
        Value::Array(items) => {
            let answers: Vec<Value> = items
                .iter()
                .filter_map(|item| answer_one(state, item, session.as_deref_mut()))
                .collect();
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        single => answer_one(state, &single, session),
    }
}

async fn recorded(State(state): State<Arc<RpcState>>, request: Request, next: Next) -> Response {
    let request = record(&state.seen, request).await;
    next.run(request).await
}

async fn http_call(
    State(state): State<Arc<RpcState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid content type, only application/json is supported",
        )
            .into_response();
    }
    match answer_payload(&state, &body, None) {
        Some(answer) => (StatusCode::OK, axum::Json(answer)).into_response(),
        None => StatusCode::OK.into_response(),
    }
}

async fn upgrade(
    State(state): State<Arc<RpcState>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match upgrade {
        Ok(upgrade) => upgrade.on_upgrade(move |socket| session(state, socket)),
        Err(_) => StatusCode::OK.into_response(),
    }
}

async fn session(state: Arc<RpcState>, socket: WebSocket) {
    let (mut sink, mut frames) = socket.split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(text) = outgoing.recv().await {
            if sink.send(Message::Text(text.into())).await.is_err() {
                return;
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    });
    let mut session = Session {
        out,
        subscriptions: HashMap::new(),
    };
    let mut stop = state.stop.clone();
    loop {
        tokio::select! {
            frame = frames.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    state.ws_messages.lock().push(text.to_string());
                    if let Some(answer) = answer_payload(&state, text.as_bytes(), Some(&mut session)) {
                        let _ = session.out.send(answer.to_string());
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    for (_, task) in session.subscriptions.drain() {
        task.abort();
    }
    drop(session);
    let _ = writer.await;
}

/// A stand-in JSON-RPC node on loopback; it stops when dropped.
pub struct JsonRpcNode {
    addr: SocketAddr,
    state: Arc<RpcState>,
    _stop: StopOnDrop,
}

impl JsonRpcNode {
    /// Starts a node on 127.0.0.1:0.
    pub async fn start() -> JsonRpcNode {
        let stop = StopOnDrop::default();
        let (state, router) = Self::router(&stop);
        let addr = serve(router, stop.subscribe()).await;
        JsonRpcNode {
            addr,
            state,
            _stop: stop,
        }
    }

    /// Starts a node on 127.0.0.1:0 that speaks TLS with `files` (its
    /// URLs are then `https://` and `wss://` ones: [`JsonRpcNode::port`]).
    pub async fn start_tls(files: &edge::tls::TlsFiles) -> JsonRpcNode {
        let stop = StopOnDrop::default();
        let (state, router) = Self::router(&stop);
        let addr = super::tls::tls_upstream(router, files).await;
        JsonRpcNode {
            addr,
            state,
            _stop: stop,
        }
    }

    fn router(stop: &StopOnDrop) -> (Arc<RpcState>, Router) {
        let state = Arc::new(RpcState {
            seen: Mutex::new(Vec::new()),
            ws_messages: Mutex::new(Vec::new()),
            head: AtomicU64::new(FIRST_BLOCK),
            subscriptions: AtomicU64::new(0),
            stop: stop.subscribe(),
        });
        let router = Router::new()
            .route("/", get(upgrade).post(http_call))
            .layer(middleware::from_fn_with_state(state.clone(), recorded))
            .with_state(state.clone());
        (state, router)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT/`.
    pub fn http_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// `ws://127.0.0.1:PORT/`.
    pub fn ws_url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    /// HTTP requests and WebSocket upgrade requests, in arrival order.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.seen.lock().clone()
    }

    /// Text frames received over WebSocket, in arrival order.
    pub fn ws_messages(&self) -> Vec<String> {
        self.state.ws_messages.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

    use super::super::aptos_node::send;
    use super::*;

    const JSON: (&str, &str) = ("content-type", "application/json");

    type Socket = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    async fn say(socket: &mut Socket, text: &str) {
        socket
            .send(tungstenite::Message::Text(text.into()))
            .await
            .unwrap();
    }

    /// The next text frame, parsed.
    async fn next(socket: &mut Socket) -> Value {
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(5), socket.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if let tungstenite::Message::Text(text) = frame {
                return serde_json::from_str(&text).unwrap();
            }
        }
    }

    async fn call(node: &JsonRpcNode, body: &str) -> Value {
        let answer = send("POST", &node.http_url(), &[JSON], body.as_bytes()).await;
        assert_eq!(answer.status, 200);
        answer.json()
    }

    fn block_number(value: &Value) -> u64 {
        u64::from_str_radix(value.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    #[tokio::test]
    async fn jsonrpc_standin_answers_over_http() {
        let node = JsonRpcNode::start().await;
        assert!(node.http_url().starts_with("http://127.0.0.1:") && node.http_url().ends_with('/'));

        let chain = call(
            &node,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#,
        )
        .await;
        assert_eq!(chain, json!({"jsonrpc": "2.0", "id": 1, "result": "0x1"}));
        let first = call(
            &node,
            r#"{"jsonrpc":"2.0","id":"a","method":"eth_blockNumber"}"#,
        )
        .await;
        let second = call(
            &node,
            r#"{"jsonrpc":"2.0","id":"b","method":"eth_blockNumber"}"#,
        )
        .await;
        assert_eq!(first["id"], "a");
        assert!(block_number(&second["result"]) > block_number(&first["result"]));

        let batch = call(
            &node,
            r#"[{"jsonrpc":"2.0","id":1,"method":"net_version"},
                {"jsonrpc":"2.0","method":"eth_chainId"},
                {"jsonrpc":"2.0","id":2,"method":"web3_clientVersion"},
                {"jsonrpc":"2.0","id":3,"method":"eth_nope"}]"#,
        )
        .await;
        let batch = batch.as_array().unwrap();
        assert_eq!(batch.len(), 3, "no answer to the notification");
        assert_eq!(batch[0]["result"], "1");
        assert_eq!(batch[1]["result"], CLIENT_VERSION);
        assert_eq!(batch[2]["error"]["code"], -32601);
        assert_eq!(
            batch[2]["error"]["message"],
            "the method eth_nope does not exist/is not available"
        );

        let code = |value: &Value| value["error"]["code"].as_i64().unwrap();
        let parse = call(&node, "{not json").await;
        assert_eq!(code(&parse), -32700);
        assert_eq!(parse["id"], Value::Null);
        assert_eq!(
            code(&call(&node, r#"{"jsonrpc":"2.0","id":7}"#).await),
            -32600
        );
        assert_eq!(call(&node, r#"{"jsonrpc":"2.0","id":7}"#).await["id"], 7);
        assert_eq!(
            code(&call(&node, r#"{"id":7,"method":"eth_chainId"}"#).await),
            -32600
        );
        assert_eq!(code(&call(&node, "1").await), -32600);
        assert_eq!(code(&call(&node, "[]").await), -32600);
        let too_many = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[1]}"#;
        assert_eq!(code(&call(&node, too_many).await), -32602);
        let subscribe =
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#;
        assert_eq!(code(&call(&node, subscribe).await), -32001);

        let silent = send(
            "POST",
            &node.http_url(),
            &[JSON],
            br#"{"jsonrpc":"2.0","method":"eth_chainId"}"#,
        )
        .await;
        assert_eq!((silent.status, silent.body.len()), (200, 0));
        let text = send(
            "POST",
            &node.http_url(),
            &[("content-type", "text/plain")],
            b"{}",
        )
        .await;
        assert_eq!(text.status, 415);
        let health = send("GET", &node.http_url(), &[], b"").await;
        assert_eq!(health.status, 200);

        let seen = node.requests();
        assert_eq!(seen.len(), 15);
        assert_eq!(seen[0].method, "POST");
        assert_eq!(seen[0].path_and_query, "/");
        assert_eq!(seen[0].header("content-type"), Some("application/json"));
        assert_eq!(
            seen[0].body,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#
        );
        assert!(node.ws_messages().is_empty());
    }

    #[tokio::test]
    async fn jsonrpc_standin_streams_new_heads_over_websocket() {
        let node = JsonRpcNode::start().await;
        assert!(node.ws_url().starts_with("ws://127.0.0.1:"));
        let mut request = node.ws_url().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("x-api-key", "k-upstream".parse().unwrap());
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();

        say(
            &mut socket,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
        )
        .await;
        assert_eq!(next(&mut socket).await["result"], "0x1");
        say(&mut socket, "not json").await;
        assert_eq!(next(&mut socket).await["error"]["code"], -32700);
        say(
            &mut socket,
            r#"{"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["logsX"]}"#,
        )
        .await;
        assert_eq!(next(&mut socket).await["error"]["code"], -32601);

        say(
            &mut socket,
            r#"{"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["newHeads"]}"#,
        )
        .await;
        let subscribed = next(&mut socket).await;
        assert_eq!(subscribed["id"], 3);
        let id = subscribed["result"].as_str().unwrap().to_owned();
        let mut numbers = Vec::new();
        while numbers.len() < 3 {
            let note = next(&mut socket).await;
            assert_eq!(note["method"], "eth_subscription");
            assert_eq!(note["params"]["subscription"], id.as_str());
            numbers.push(block_number(&note["params"]["result"]["number"]));
        }
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");

        let unsubscribe =
            format!(r#"{{"jsonrpc":"2.0","id":4,"method":"eth_unsubscribe","params":["{id}"]}}"#);
        say(&mut socket, &unsubscribe).await;
        let done = loop {
            let message = next(&mut socket).await;
            if message.get("id").is_some() {
                break message;
            }
        };
        assert_eq!(done, json!({"jsonrpc": "2.0", "id": 4, "result": true}));
        let quiet = tokio::time::timeout(Duration::from_millis(200), socket.next()).await;
        assert!(
            quiet.is_err(),
            "a notification after unsubscribing: {quiet:?}"
        );
        say(&mut socket, &unsubscribe).await;
        assert_eq!(next(&mut socket).await["error"]["code"], -32000);

        let frames = node.ws_messages();
        assert_eq!(frames.len(), 6);
        assert_eq!(
            frames[0],
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#
        );
        let upgrade = &node.requests()[0];
        assert_eq!(upgrade.method, "GET");
        assert_eq!(upgrade.path_and_query, "/");
        assert_eq!(upgrade.header("x-api-key"), Some("k-upstream"));
        assert_eq!(upgrade.header("upgrade"), Some("websocket"));

        // Dropping the node ends the session.
        drop(node);
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match socket.next().await {
                    Some(Ok(tungstenite::Message::Close(_)) | Err(_)) | None => break,
                    Some(Ok(_)) => {}
                }
            }
        })
        .await;
        assert!(end.is_ok(), "the session outlived the node");
    }
}
