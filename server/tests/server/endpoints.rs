//! `l1gate routes` against a running server: every HTTP route it lists
//! is served (none falls through to the router's bare 404), and every gRPC
//! service it lists is reachable.

use std::time::Duration;

use l1gate::config::ServeArgs;
use l1gate::endpoints::{Endpoints, KeyForm};

use super::harness::TestServer;
use super::market_live::live_node;
use super::standin::http;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listed_http_route_is_served() {
    let node = live_node(40, 40, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    let settings = ServeArgs {
        grpc_addr: Some(server.running.grpc_addr),
        http_addr: Some(server.running.http_addr),
        ..ServeArgs::default()
    }
    .resolve()
    .unwrap();
    let endpoints = Endpoints::of(&settings).unwrap();
    assert_eq!(
        endpoints.http_url,
        format!("http://{}", server.running.http_addr)
    );
    for route in &endpoints.http {
        // A concrete request for the route's pattern.
        let path = route
            .path
            .replace("<API_KEY>", &server.key)
            .replace(
                "?market=…&interval=1s|1m|5m&time=ISO-8601",
                "?market=BTC&interval=1m&time=2026-05-05T17:39:00Z",
            )
            .replace("/v1/…", "/v1/accounts");
        let method = if route.method == "ANY" {
            "GET"
        } else {
            route.method
        };
        let body = if method == "POST" {
            r#"{"type":"meta"}"#
        } else {
            ""
        };
        let reply = http(
            server.running.http_addr,
            method,
            &path,
            &[("content-type", "application/json")],
            body,
        )
        .await;
        assert!(
            !(reply.status == 404 && reply.text.is_empty()),
            "{} {path}: not routed",
            route.method
        );
        assert_ne!(reply.status, 401, "{} {path}: {}", route.method, reply.text);
        if route.key == KeyForm::PathOrHeader {
            // Without the key the same route is refused.
            let bare = path.replacen(&format!("/{}", server.key), "", 1);
            let refused = http(server.running.http_addr, method, &bare, &[], body).await;
            assert_eq!(refused.status, 401, "{} {bare}", route.method);
        }
    }
}
