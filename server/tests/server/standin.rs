//! Local stand-ins for l1gate's upstreams (an Info server, a chain node's
//! REST API) that tests start on loopback, change, stop and restart on the
//! same port, and a small HTTP/1.1 client for l1gate's HTTP edge.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{any, post};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A server on a fixed loopback port that can be stopped and started again.
pub struct StandIn {
    pub addr: SocketAddr,
    router: Router,
    running: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl StandIn {
    /// Serves `router` on a fresh loopback port.
    pub async fn start(router: Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut standin = Self {
            addr,
            router,
            running: None,
        };
        standin.serve(listener);
        standin
    }

    fn serve(&mut self, listener: TcpListener) {
        let (stop, stopped) = oneshot::channel::<()>();
        let router = self.router.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        self.running = Some((stop, task));
    }

    /// Stops accepting and closes every connection.
    pub async fn stop(&mut self) {
        if let Some((stop, task)) = self.running.take() {
            let _ = stop.send(());
            task.await.unwrap();
        }
    }

    /// Listens on the same port again.
    pub async fn restart(&mut self) {
        assert!(self.running.is_none(), "still running");
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// `http://addr` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A loopback address nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// What the stand-in Info server answers and what it was asked.
#[derive(Debug, Default)]
pub struct InfoWorld {
    /// `allMids`: coin → mid.
    pub mids: BTreeMap<String, String>,
    /// `metaAndAssetCtxs`: perps in universe order with their contexts.
    pub ctxs: Vec<(String, Value)>,
    /// Requests per `type`.
    pub asked: BTreeMap<String, usize>,
}

impl InfoWorld {
    /// How many requests of `kind` arrived.
    pub fn asked(&self, kind: &str) -> usize {
        self.asked.get(kind).copied().unwrap_or(0)
    }
}

/// A perp context with this mark price.
pub fn ctx(mark: &str) -> Value {
    json!({
        "funding": "0.0000125", "openInterest": "30123.4", "prevDayPx": "80000.0",
        "dayNtlVlm": "1234567.8", "premium": "0.0001", "oraclePx": "81000.0",
        "markPx": mark, "midPx": null, "impactPxs": ["80999.0", "81002.0"],
        "dayBaseVlm": "15.2"
    })
}

/// The stand-in Info server's shared state, with a few markets of every
/// family.
pub fn info_world() -> Arc<Mutex<InfoWorld>> {
    let mids = [
        ("BTC", "81001.5"),
        ("ETH", "3050.25"),
        ("@107", "38.1"),
        ("PURR/USDC", "0.21"),
        ("xyz:NVDA", "121.0"),
        ("#1890", "0.52"),
    ];
    Arc::new(Mutex::new(InfoWorld {
        mids: mids
            .iter()
            .map(|(c, p)| ((*c).to_owned(), (*p).to_owned()))
            .collect(),
        ctxs: vec![
            ("BTC".to_owned(), ctx("81000.0")),
            ("ETH".to_owned(), ctx("3050.0")),
        ],
        asked: BTreeMap::new(),
    }))
}

/// The stand-in Info server: `POST /info` answering by `type`, counting
/// each.
pub fn info_router(world: Arc<Mutex<InfoWorld>>) -> Router {
    Router::new()
        .route("/info", post(info_answer))
        .with_state(world)
}

async fn info_answer(State(world): State<Arc<Mutex<InfoWorld>>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap();
    let kind = request["type"].as_str().unwrap_or_default().to_owned();
    let mut world = world.lock();
    *world.asked.entry(kind.clone()).or_default() += 1;
    match kind.as_str() {
        "meta" => Json(json!({
            "universe": [{"name": "BTC", "szDecimals": 5, "maxLeverage": 40},
                         {"name": "ETH", "szDecimals": 4, "maxLeverage": 25}],
            "dex": request.get("dex"),
        }))
        .into_response(),
        "spotMeta" => Json(json!({
            "universe": [{"name": "PURR/USDC", "tokens": [1, 0], "index": 0, "isCanonical": true}],
            "tokens": [{"name": "USDC", "index": 0}, {"name": "PURR", "index": 1}],
        }))
        .into_response(),
        "perpDexs" => {
            Json(json!([null, {"name": "xyz", "assetToStreamingOiCap": []}])).into_response()
        }
        "allMids" => Json(json!(world.mids)).into_response(),
        "metaAndAssetCtxs" => {
            let universe: Vec<Value> = world.ctxs.iter().map(|(c, _)| json!({"name": c})).collect();
            let ctxs: Vec<Value> = world.ctxs.iter().map(|(_, x)| x.clone()).collect();
            Json(json!([{"universe": universe}, ctxs])).into_response()
        }
        "clearinghouseState" => {
            Json(json!({"user": request["user"], "marginSummary": {}})).into_response()
        }
        "broken" => (StatusCode::INTERNAL_SERVER_ERROR, "internal failure").into_response(),
        _ => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type",
        )
            .into_response(),
    }
}

/// The stand-in node REST API: every request echoed back as JSON, except
/// `/v1/missing`, which is a 404 with the node's error shape, and
/// `/v1/slow`, which answers after 3 s.
pub fn node_router(seen: Arc<Mutex<Vec<Value>>>) -> Router {
    Router::new()
        .route("/{*path}", any(node_answer))
        .with_state(seen)
}

async fn node_answer(State(seen): State<Arc<Mutex<Vec<Value>>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
        .collect();
    let echo = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    seen.lock().push(echo.clone());
    if parts.uri.path().ends_with("/v1/slow") {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    if parts.uri.path().ends_with("/v1/missing") {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Account not found", "error_code": "account_not_found"})),
        )
            .into_response();
    }
    ([("x-node-ledger-version", "42")], Json(echo)).into_response()
}

/// One HTTP response.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    pub text: String,
}

impl HttpReply {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// Sends one request to `addr` over a fresh HTTP/1.1 connection.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpReply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = hyper::Request::builder().method(method).uri(path);
    // The exchange's host unless the caller names a network's.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request = request.header("host", "l1gate.test");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(
            request
                .body(Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    HttpReply {
        status,
        headers,
        text: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// `POST path` with a JSON body and, when given, the key in `X-Api-Key`.
pub async fn post_json(addr: SocketAddr, path: &str, key: Option<&str>, body: &str) -> HttpReply {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(key) = key {
        headers.push(("x-api-key", key));
    }
    http(addr, "POST", path, &headers, body).await
}
