//! The node REST/GraphQL gateway over real HTTP against a stand-in node:
//! both key forms reach the node without the key; l1gate's own `/v1`
//! routes are not shadowed; 503 without a node, 502 when it is down.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::harness::{TestServer, real};
use super::standin::{StandIn, closed_port, http, node_router, post_json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_key_forms_reach_the_node_without_the_key() {
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let node = StandIn::start(node_router(seen.clone())).await;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.node_url = Some(node.url("/base"));
    })
    .await;
    let addr = server.running.http_addr;
    let key = server.key.clone();

    // Key in the path, with a query.
    let reply = http(
        addr,
        "GET",
        &format!("/{key}/v1/accounts/0x1/resources?limit=5&start=abc"),
        &[("accept", "application/json"), ("x-trace", "t-1")],
        "",
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.header("x-node-ledger-version"), Some("42"));
    let echo = reply.json();
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/base/v1/accounts/0x1/resources");
    assert_eq!(echo["query"], "limit=5&start=abc");
    assert_eq!(echo["headers"]["x-trace"], "t-1");

    // Key in the header; GraphQL body and content type pass through.
    let query = r#"{"query":"{ ledger_infos(limit: 1) { chain_id } }"}"#;
    let reply = post_json(addr, "/v1/graphql", Some(&key), query).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let echo = reply.json();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["path"], "/base/v1/graphql");
    assert_eq!(echo["body"], query);
    assert_eq!(echo["headers"]["content-type"], "application/json");

    // Ledger info at `/v1` itself, and the node's own error status.
    let reply = http(addr, "GET", &format!("/{key}/v1"), &[], "").await;
    assert_eq!(reply.json()["path"], "/base/v1");
    let reply = http(addr, "GET", "/v1/missing", &[("x-api-key", &key)], "").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error_code"], "account_not_found");

    // The node never saw the key, in any part of any request.
    let seen_now = seen.lock().clone();
    assert_eq!(seen_now.len(), 4);
    for request in &seen_now {
        assert!(!request.to_string().contains(&key), "{request}");
        assert!(request["headers"].get("x-api-key").is_none(), "{request}");
    }

    // Dot segments could climb above the node URL's path: refused.
    let reply = http(addr, "GET", &format!("/{key}/v1/%2e%2e/secret"), &[], "").await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("path: ")
    );
    assert_eq!(seen.lock().len(), 4);

    // l1gate's own routes under /v1 still answer themselves.
    let feeds = http(addr, "GET", &format!("/{key}/v1/feeds"), &[], "").await;
    assert_eq!(feeds.status, 200);
    assert!(feeds.json()["feeds"].is_array(), "{}", feeds.text);
    assert_eq!(seen.lock().len(), 4);

    // A bad key never reaches the node.
    let wrong = "l1g_0000000000000000000000000000000000000000000000000000000000000000";
    for reply in [
        http(addr, "GET", &format!("/{wrong}/v1"), &[], "").await,
        http(addr, "GET", "/v1", &[("x-api-key", wrong)], "").await,
        http(addr, "GET", "/v1/graphql", &[], "").await,
    ] {
        assert_eq!(reply.status, 401, "{}", reply.text);
    }
    assert_eq!(seen.lock().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_is_503_naming_the_setting_and_a_down_node_is_502() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let reply = http(
        server.running.http_addr,
        "GET",
        &format!("/{}/v1", server.key),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text);
    assert_eq!(reply.json()["error_code"], "no_node_upstream");
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .contains("--node-url")
    );

    let down = closed_port().await;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.node_url = Some(format!("http://{down}"));
    })
    .await;
    let reply = post_json(
        server.running.http_addr,
        "/v1/view",
        Some(&server.key),
        r#"{"function":"0x1::coin::balance","type_arguments":[],"arguments":[]}"#,
    )
    .await;
    assert_eq!(reply.status, 502, "{}", reply.text);
    assert_eq!(reply.json()["error_code"], "bad_gateway");
    assert!(
        reply.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("node: upstream unreachable"),
        "{}",
        reply.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slower_than_the_timeout_is_504() {
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let node = StandIn::start(node_router(seen.clone())).await;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.node_url = Some(node.url(""));
        args.upstream_timeout_ms = Some(300);
    })
    .await;
    let started = std::time::Instant::now();
    let reply = http(
        server.running.http_addr,
        "GET",
        "/v1/slow",
        &[("x-api-key", &server.key)],
        "",
    )
    .await;
    assert_eq!(reply.status, 504, "{}", reply.text);
    assert_eq!(reply.json()["error_code"], "gateway_timeout");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(seen.lock().len(), 1, "the request did reach the node");
}
