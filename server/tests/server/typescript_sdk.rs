//! The exchange's TypeScript SDK (`@nktkas/hyperliquid`, pinned in
//! `node_clients`) against l1gate's WebSocket API, unchanged but for its
//! URL: its `openOrders` subscription opens, routes l1gate's messages to
//! the listener (the SDK matches them on the channel, the account and the
//! exchange), and the event it hands on is the account's orders as Info
//! answers `frontendOpenOrders` (the shape the SDK's types give the event).

use std::time::Duration;

use serde_json::{Value, json};

use super::harness::TestServer;
use super::market_live::{live_node, ready};
use super::market_views::actors;
use super::node_clients::{HYPERLIQUID_TS_SDK, project, run};
use super::standin::post_json;

/// Subscribes to `openOrders` of `argv[3]` at `argv[2]` and prints the
/// first event the SDK hands its listener.
const OPEN_ORDERS: &str = r#"
import { WebSocketTransport, SubscriptionClient } from "@nktkas/hyperliquid";

const [url, user] = process.argv.slice(2);
const transport = new WebSocketTransport({ url, reconnect: { maxRetries: 0 } });
const client = new SubscriptionClient({ transport });
const event = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("no openOrders event in 20 s")), 20_000);
  client.openOrders({ user }, (data) => { clearTimeout(timer); resolve(data); }).catch(reject);
});
await transport.close();
// A pipe takes stdout asynchronously: exit once all of it is written.
process.stdout.write(JSON.stringify(event) + "\n", () => process.exit(0));
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdks_open_orders_subscription_reads_l1gate() {
    let (dir, node) = project(&[HYPERLIQUID_TS_SDK]);
    // The node's files are written before the server starts: the orders
    // the SDK is sent are those Info answers.
    let data = live_node(120, 120, Duration::from_millis(1));
    let server = TestServer::start(data.dir.path(), |_| {}).await;
    ready(&server).await;
    let user = actors(data.dir.path()).user;
    let url = format!("ws://{}/{}/ws", server.running.http_addr, server.key);
    // Mixed case, as a user may type it: the SDK lowercases it.
    let typed = user.to_uppercase().replacen("0X", "0x", 1);
    let out = run(
        &dir,
        &node,
        OPEN_ORDERS,
        &[url, typed],
        Duration::from_secs(60),
    )
    .await;
    let event: Value = serde_json::from_str(out.trim()).unwrap();
    let answer = post_json(
        server.running.http_addr,
        "/info",
        Some(&server.key),
        &json!({"type": "frontendOpenOrders", "user": user}).to_string(),
    )
    .await
    .json();
    assert!(
        answer.as_array().is_some_and(|orders| !orders.is_empty()),
        "the busiest account rests no order: {answer}"
    );
    assert_eq!(event["user"], user.to_lowercase());
    assert_eq!(event["dex"], "");
    assert_eq!(event["orders"], answer);
}
