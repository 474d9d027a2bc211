//! The exchange's official Python SDK (`hyperliquid-python-sdk`, pinned,
//! installed from PyPI into a venv under `target/`) against l1gate,
//! unchanged: `Info(base_url, skip_ws=False)` with l1gate's address and a
//! key in the path, subscriptions over the WebSocket API while a node
//! directory grows, then Info calls answered locally. What it receives is
//! checked against replay of the same blocks. Over TLS too: Info over
//! `https://` and a subscription over `wss://`.
//!
//! The SDK's constructor reads `meta` and `spotMeta` (with `szDecimals`
//! and spot tokens, which the node's files do not carry): l1gate runs with
//! an Info source, a stand-in of the node's info server answering them for
//! the simulator's universe, as an operator's node with `--serve-info`
//! would.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::response::{IntoResponse as _, Json, Response};
use axum::routing::post;
use bytes::Bytes;
use fixtures::{MarketKind, Universe};
use proto::v3 as pb;
use serde_json::{Value, json};

use super::harness::TestServer;
use super::market_live::{client, live_node, ready};
use super::market_views::{actors, settled};
use super::standin::{StandIn, post_json};
use super::ws_streams::check_channels;

/// The stand-in node info server's `meta` and `spotMeta` for `universe`;
/// other types answer 422 as the real one does for a body it cannot read.
fn node_info(universe: &Universe) -> Router {
    let mut perps: Vec<_> = universe
        .markets
        .iter()
        .filter(|m| m.kind == MarketKind::Perp)
        .collect();
    perps.sort_by_key(|m| m.asset);
    let meta = json!({
        "universe": perps.iter().map(|m| json!({
            "name": m.coin, "szDecimals": m.sz_decimals, "maxLeverage": 20,
            "marginTableId": 20,
        })).collect::<Vec<_>>(),
        "marginTables": [],
        "collateralToken": 0,
    });
    let mut tokens: Vec<String> = vec!["USDC".into()];
    let mut decimals: BTreeMap<String, u8> = BTreeMap::new();
    let mut pairs = Vec::new();
    for market in universe
        .markets
        .iter()
        .filter(|m| m.kind == MarketKind::Spot)
    {
        let base = tokens
            .iter()
            .position(|t| *t == market.base_token)
            .unwrap_or_else(|| {
                tokens.push(market.base_token.clone());
                tokens.len() - 1
            });
        decimals.insert(market.base_token.clone(), market.sz_decimals);
        pairs.push(json!({
            "tokens": [base, 0], "name": market.coin,
            "index": market.asset - 10_000, "isCanonical": true,
        }));
    }
    let spot_meta = json!({
        "universe": pairs,
        "tokens": tokens.iter().enumerate().map(|(index, name)| json!({
            "name": name, "szDecimals": decimals.get(name).copied().unwrap_or(2),
            "weiDecimals": 8, "index": index, "tokenId": format!("0x{index:032x}"),
            "isCanonical": true, "evmContract": null, "fullName": null,
        })).collect::<Vec<_>>(),
    });
    Router::new().route(
        "/info",
        post(move |body: Bytes| {
            let (meta, spot_meta) = (meta.clone(), spot_meta.clone());
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap_or_default();
                let answer: Response = match request["type"].as_str() {
                    Some("meta") => Json(meta).into_response(),
                    Some("spotMeta") => Json(spot_meta).into_response(),
                    _ => (
                        axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                        "Failed to deserialize the JSON body into the target type",
                    )
                        .into_response(),
                };
                answer
            }
        }),
    )
}

/// The SDK client: subscribes, collects for a while, asks Info, prints
/// everything as JSON.
const CLIENT: &str = r#"
import json, sys, threading, time
from hyperliquid.info import Info

base, user, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
info = Info(base, skip_ws=False)
received = {}
lock = threading.Lock()

def keep(name):
    def callback(message):
        with lock:
            received.setdefault(name, []).append(message)
    return callback

subscriptions = {
    "l2Book": {"type": "l2Book", "coin": "BTC"},
    "bbo": {"type": "bbo", "coin": "BTC"},
    "trades": {"type": "trades", "coin": "BTC"},
    "candle": {"type": "candle", "coin": "BTC", "interval": "1s"},
    "allMids": {"type": "allMids"},
    "userFills": {"type": "userFills", "user": user},
    "orderUpdates": {"type": "orderUpdates", "user": user},
}
for name, subscription in subscriptions.items():
    info.subscribe(subscription, keep(name))
time.sleep(seconds)
answers = {
    "l2": info.l2_snapshot("BTC"),
    "mids": info.all_mids(),
    "open": info.open_orders(user),
    "candles": info.candles_snapshot("BTC", "1s", 0, 4102444800000),
}
info.disconnect_websocket()
with lock:
    print(json.dumps({"received": received, "answers": answers}))
"#;

/// The SDK's venv; the stand-in node info server of the simulator's
/// universe; a node directory appended to (340 blocks over about 10 s,
/// while a client starts and subscribes); and a server over it, its
/// settings tuned by `tune`, caught up.
async fn sdk_setup(
    tune: impl FnOnce(&mut l1gate::config::ServeArgs),
) -> (
    std::path::PathBuf,
    StandIn,
    super::market_live::LiveNode,
    TestServer,
) {
    let python = super::python::venv(&[super::python::HYPERLIQUID_SDK]);
    let mut cfg = fixtures::SimConfig::small(11);
    cfg.mode = fixtures::OutputMode::ByBlock;
    let universe = fixtures::Simulator::new(&cfg).universe().clone();
    let info = StandIn::start(node_info(&universe)).await;
    let node = live_node(400, 60, Duration::from_millis(30));
    let server = TestServer::start(node.dir.path(), |args| {
        args.info_url = Some(info.url("/info"));
        tune(args);
    })
    .await;
    ready(&server).await;
    (python, info, node, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_streams_and_asks_info_unchanged() {
    let (python, _info, node, server) = sdk_setup(|_| {}).await;
    let user = actors(node.dir.path()).user;
    let base = format!("http://{}/{}", server.running.http_addr, server.key);
    let client_run = {
        let (python, user) = (python.clone(), user.clone());
        tokio::spawn(async move {
            super::python::run(
                &python,
                CLIENT,
                &[base, user, "16".into()],
                Duration::from_secs(120),
            )
            .await
        })
    };
    settled(&server, &node).await;
    let out: Value = serde_json::from_str(&client_run.await.unwrap()).unwrap();

    // Every channel: the SDK hands each message to its callback whole.
    let mut live: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (name, messages) in out["received"].as_object().unwrap() {
        for message in messages.as_array().unwrap() {
            assert_eq!(message["channel"], name.as_str(), "{message}");
            live.entry(name.clone())
                .or_default()
                .push(message["data"].clone());
        }
    }
    check_channels(
        node.dir.path(),
        &user,
        20,
        &live,
        &[
            "trades",
            "bbo",
            "l2Book",
            "candle",
            "allMids",
            "userFills",
            "orderUpdates",
        ],
    );

    // Info, answered locally: the book and mids as the channels last sent
    // them, the account's orders as the gRPC order-updates snapshot lists
    // them, the candles as POST /info gives them.
    let answers = &out["answers"];
    let last_book = live["l2Book"].last().unwrap();
    assert_eq!(answers["l2"]["levels"], last_book["levels"]);
    assert_eq!(answers["mids"], live["allMids"].last().unwrap()["mids"]);
    let mut market = client(&server).await;
    let snapshot = market
        .stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest {
            users: vec![user.clone()],
            ..pb::L4OrderUpdatesRequest::default()
        }))
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let mut expected: Vec<u64> = snapshot
        .diffs
        .iter()
        .filter(|d| !d.coin.contains(':'))
        .map(|d| d.oid)
        .collect();
    let mut got: Vec<u64> = answers["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["oid"].as_u64().unwrap())
        .collect();
    expected.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, expected, "open orders");
    let candles = post_json(
        server.running.http_addr,
        "/info",
        Some(&server.key),
        &json!({"type":"candleSnapshot","req":{"coin":"BTC","interval":"1s",
                "startTime":0,"endTime":4_102_444_800_000_i64}})
        .to_string(),
    )
    .await;
    assert_eq!(answers["candles"], candles.json());
    assert!(
        !candles.json().as_array().unwrap().is_empty(),
        "no candle in the range"
    );
}

/// The SDK over TLS: `https://` for Info and `wss://` for the WebSocket
/// API, trusting the tests' authority through the variables its HTTP and
/// WebSocket libraries read.
const TLS_CLIENT: &str = r#"
import json, os, sys, threading, time
base, ca, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
os.environ["REQUESTS_CA_BUNDLE"] = ca
os.environ["WEBSOCKET_CLIENT_CA_BUNDLE"] = ca
from hyperliquid.info import Info

info = Info(base, skip_ws=False)
trades = []
info.subscribe({"type": "trades", "coin": "BTC"}, trades.append)
deadline = time.time() + seconds
while not trades and time.time() < deadline:
    time.sleep(0.1)
mids = info.all_mids()
info.disconnect_websocket()
print(json.dumps({"trades": len(trades), "mids": len(mids), "channel": trades[0]["channel"] if trades else None}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_works_over_https_and_wss() {
    let pki = super::tls::Pki::new("l1gate test CA");
    let ca = pki.ca_file.clone();
    let (python, _info, _node, server) = sdk_setup(|args| {
        args.tls_cert_file = Some(pki.files.cert.clone());
        args.tls_key_file = Some(pki.files.key.clone());
    })
    .await;
    let base = format!(
        "https://localhost:{}/{}",
        server.running.http_addr.port(),
        server.key
    );
    let out = super::python::run(
        &python,
        TLS_CLIENT,
        &[base, ca.display().to_string(), "20".into()],
        Duration::from_secs(120),
    )
    .await;
    let out: Value = serde_json::from_str(&out).unwrap();
    assert!(
        out["trades"].as_u64().unwrap() > 0,
        "trades over wss://: {out}"
    );
    assert_eq!(out["channel"], "trades");
    assert!(
        out["mids"].as_u64().unwrap() > 0,
        "allMids over https://: {out}"
    );
}
