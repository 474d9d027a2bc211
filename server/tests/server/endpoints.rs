//! `l1gate routes` against a running server: the HTTP routes it lists are
//! exactly those the server registered (on its own host and on a network's),
//! every listed route is served (none falls through to the router's bare
//! 404) behind the key it says, and every gRPC service it lists is
//! reachable.

use std::collections::BTreeSet;
use std::time::Duration;

use gateway::registry::ChainConfig;
use l1gate::config::ServeArgs;
use l1gate::endpoints::{Endpoints, KeyForm};

use super::harness::TestServer;
use super::market_live::live_node;
use super::standin::http;

const NETWORK_HOST: &str = "aptos-mainnet.gw.test";

/// One network whose node is down: its routes are served all the same.
fn one_network() -> Vec<ChainConfig> {
    super::networks::chains_of(&format!(
        r#"
[[chains]]
id = "aptos"
name = "Aptos"
ecosystem = "move"
[[chains.networks]]
id = "mainnet"
name = "Aptos Mainnet"
base_url = "https://{NETWORK_HOST}"
[[chains.networks.nodes]]
id = "aptos-full"
node_type = "full"
rest = "http://127.0.0.1:9/v1"
jsonrpc = "http://127.0.0.1:9"
"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_is_what_the_server_registered_and_every_listed_route_is_served() {
    let node = live_node(40, 40, Duration::from_millis(10));
    let chains = one_network();
    let server = TestServer::start(node.dir.path(), |args| args.chains = chains.clone()).await;
    let settings = ServeArgs {
        grpc_addr: Some(server.running.grpc_addr),
        http_addr: Some(server.running.http_addr),
        chains,
        ..ServeArgs::default()
    }
    .resolve()
    .unwrap();

    // Served ⇒ listed and listed ⇒ served, as registered.
    let served: BTreeSet<_> = server.running.http_routes.iter().cloned().collect();
    assert_eq!(
        served.len(),
        server.running.http_routes.len(),
        "a route registered twice"
    );
    let planned: BTreeSet<_> = l1gate::endpoints::planned(&settings).into_iter().collect();
    assert_eq!(served, planned);
    assert!(
        served
            .iter()
            .any(|s| s.host.as_deref() == Some(NETWORK_HOST)),
        "the network's routes are among them"
    );

    let endpoints = Endpoints::of(&settings).unwrap();
    assert_eq!(
        endpoints.http_url,
        format!("http://{}", server.running.http_addr)
    );
    assert_eq!(endpoints.http.len(), planned.len());
    for route in &endpoints.http {
        // A concrete request for the route's pattern, on its host.
        let (host, pattern) = match route.path.strip_prefix("//") {
            Some(rest) => {
                let at = rest.find('/').unwrap();
                (Some(&rest[..at]), &rest[at..])
            }
            None => (None, route.path.as_str()),
        };
        let mut path = pattern
            .replace("<API_KEY>", &server.key)
            .replace("{*rest}", "accounts");
        if path.ends_with("/v1/candles") {
            path.push_str("?market=BTC&interval=1m&time=2026-05-05T17:39:00Z");
        }
        let method = match route.method {
            "ANY" => "GET",
            "GET, POST" => "POST",
            other => other,
        };
        let body = if method == "POST" {
            r#"{"type":"meta"}"#
        } else {
            ""
        };
        let mut headers = vec![("content-type", "application/json")];
        if let Some(host) = host {
            headers.push(("host", host));
        }
        let reply = http(server.running.http_addr, method, &path, &headers, body).await;
        assert!(
            !(reply.status == 404 && reply.text.is_empty()),
            "{} {}: not routed",
            route.method,
            route.path
        );
        assert_ne!(reply.status, 401, "{} {path}: {}", route.method, reply.text);
        if route.key == KeyForm::PathOrHeader {
            // Without the key the same route is refused.
            let bare = path.replacen(&format!("/{}", server.key), "", 1);
            let bare = if bare.is_empty() {
                "/".to_owned()
            } else {
                bare
            };
            let refused = http(server.running.http_addr, method, &bare, &headers, body).await;
            assert_eq!(refused.status, 401, "{} {bare}", route.method);
        }
    }
}
