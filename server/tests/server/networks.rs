//! The node gateway's networks over real HTTP against stand-ins that behave
//! like the upstreams: two Move-family networks on their own hosts, each
//! with an Aptos-like node (one with a GraphQL indexer), and an EVM network
//! with a JSON-RPC node over HTTP and WebSocket. Every seed error row is
//! exercised: the ones l1gate answers itself never reach a node, the
//! node's own pass through with status, body and ledger headers.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use gateway::registry::ChainConfig;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use super::aptos_node::{AptosNode, Indexer};
use super::harness::{TestServer, real};
use super::jsonrpc_node::JsonRpcNode;
use super::revocation::{edit_keys, key_id};
use super::standin::{HttpReply, http};

const APTOS: &str = "aptos-mainnet.gw.test";
const MOVEMENT: &str = "movement-mainnet.gw.test";
const EVM: &str = "hyperevm-mainnet.gw.test";

/// The registry of the test: `rest`/`graphql` of each Move network, the
/// JSON-RPC pair of the EVM one.
fn chains(
    aptos: &AptosNode,
    indexer: &Indexer,
    movement: &AptosNode,
    rpc: &JsonRpcNode,
) -> Vec<ChainConfig> {
    let text = format!(
        r#"
[[chains]]
id = "aptos"
name = "Aptos"
ecosystem = "move"
[[chains.networks]]
id = "mainnet"
name = "Aptos Mainnet"
base_url = "https://{APTOS}"
[[chains.networks.nodes]]
id = "aptos-full"
node_type = "full"
rest = "{}"
graphql = "{}"

[[chains]]
id = "movement"
name = "Movement"
ecosystem = "move"
[[chains.networks]]
id = "mainnet"
name = "Movement Mainnet"
base_url = "https://{MOVEMENT}"
[[chains.networks.nodes]]
id = "movement-full"
node_type = "full"
rest = "{}"

[[chains]]
id = "hyperevm"
name = "HyperEVM"
ecosystem = "evm"
[[chains.networks]]
id = "mainnet"
name = "HyperEVM Mainnet"
base_url = "https://{EVM}"
[[chains.networks.nodes]]
id = "hyperevm-local"
node_type = "full"
jsonrpc = "{}"
jsonrpc_ws = "{}"
"#,
        aptos.rest_url(),
        indexer.url(),
        movement.rest_url(),
        rpc.http_url(),
        rpc.ws_url(),
    );
    chains_of(&text)
}

/// The `[[chains]]` of a config file's text.
pub fn chains_of(text: &str) -> Vec<ChainConfig> {
    #[derive(serde::Deserialize)]
    struct File {
        chains: Vec<ChainConfig>,
    }
    toml::from_str::<File>(text).unwrap().chains
}

struct Setup {
    server: TestServer,
    aptos: AptosNode,
    indexer: Indexer,
    movement: AptosNode,
    rpc: JsonRpcNode,
}

async fn setup(tune: impl FnOnce(&mut l1gate::config::ServeArgs)) -> Setup {
    let aptos = AptosNode::start(1).await;
    let indexer = Indexer::start(1).await;
    let movement = AptosNode::start(126).await;
    let rpc = JsonRpcNode::start().await;
    let registry = chains(&aptos, &indexer, &movement, &rpc);
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.chains = registry;
        tune(args);
    })
    .await;
    Setup {
        server,
        aptos,
        indexer,
        movement,
        rpc,
    }
}

impl Setup {
    async fn get(&self, host: &str, path: &str) -> HttpReply {
        http(
            self.server.running.http_addr,
            "GET",
            path,
            &[("host", host)],
            "",
        )
        .await
    }

    async fn post(&self, host: &str, path: &str, body: &str) -> HttpReply {
        http(
            self.server.running.http_addr,
            "POST",
            path,
            &[("host", host), ("content-type", "application/json")],
            body,
        )
        .await
    }

    fn key(&self) -> &str {
        &self.server.key
    }
}

fn invalid_input(reply: &HttpReply, name: &str) {
    assert_eq!(reply.status, 400, "{}", reply.text);
    let body = reply.json();
    assert_eq!(body["error_code"], "invalid_input", "{body}");
    assert_eq!(body["vm_error_code"], Value::Null, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with(name), "{name}: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_network_is_served_on_its_own_host() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    let aptos = s.get(APTOS, &format!("/{key}/v1")).await;
    assert_eq!(aptos.status, 200, "{}", aptos.text);
    assert_eq!(aptos.json()["chain_id"], 1);
    assert_eq!(aptos.header("x-aptos-chain-id"), Some("1"));
    assert!(aptos.header("x-aptos-ledger-version").is_some());
    // Port and case do not matter; the header form works the same.
    let movement = http(
        s.server.running.http_addr,
        "GET",
        "/v1",
        &[
            ("host", "Movement-Mainnet.GW.test:443"),
            ("x-api-key", &key),
        ],
        "",
    )
    .await;
    assert_eq!(movement.json()["chain_id"], 126, "{}", movement.text);
    // The exchange's own host keeps l1gate's routes (no node_url here).
    let feeds = s.get("l1gate.test", &format!("/{key}/v1/feeds")).await;
    assert_eq!(feeds.status, 200);
    let exchange_node = s.get("l1gate.test", &format!("/{key}/v1")).await;
    assert_eq!(exchange_node.status, 503);
    assert_eq!(exchange_node.json()["error_code"], "no_node_upstream");
    // l1gate's own routes do not exist on a network's host.
    let not_there = s.get(APTOS, &format!("/{key}/v1/feeds")).await;
    assert_eq!(
        not_there.status, 404,
        "relayed to the node, which has no such route"
    );
    let unknown = s.get(APTOS, &format!("/{key}/nope/deeper")).await;
    assert_eq!(unknown.status, 404);
    // Health and metrics answer on every host, without a key.
    assert_eq!(s.get(APTOS, "/metrics").await.status, 200);
    // The key is checked before any upstream work.
    let before = s.aptos.requests().len();
    let wrong = "l1g_0000000000000000000000000000000000000000000000000000000000000000";
    assert_eq!(s.get(APTOS, &format!("/{wrong}/v1")).await.status, 401);
    assert_eq!(s.get(APTOS, "/v1/accounts/0x1").await.status, 401);
    assert_eq!(s.aptos.requests().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_rules_are_answered_by_l1gate_without_the_node() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    let account = s.aptos.account();
    let before = s.aptos.requests().len();
    for (path, name) in [
        ("accounts/notanaddress/resources".to_owned(), "address"),
        (
            format!("accounts/{account}/resources?ledger_version=latest"),
            "ledger_version",
        ),
        (format!("accounts/{account}/resources?limit=0"), "limit"),
        (
            format!("accounts/{account}/resources?start=not-a-cursor"),
            "start",
        ),
        (format!("accounts/{account}/events/xyz"), "creation_number"),
        (format!("accounts/{account}/events/2?limit=5000"), "limit"),
        (format!("accounts/{account}/events/2?start=-1"), "start"),
        (
            format!("accounts/{account}/resource/not-a-type"),
            "resource_type",
        ),
        ("blocks/by_version/12abc".to_owned(), "version"),
        ("blocks/by_height/1e9".to_owned(), "height"),
        (
            "blocks/by_height/5?with_transactions=maybe".to_owned(),
            "with_transactions",
        ),
        ("transactions/by_hash/0x1234".to_owned(), "hash"),
        ("transactions/wait_by_hash/nothex".to_owned(), "hash"),
        ("transactions/by_version/-3".to_owned(), "version"),
    ] {
        let reply = s.get(APTOS, &format!("/{key}/v1/{path}")).await;
        invalid_input(&reply, name);
    }
    let payload = json!({
        "type": "entry_function_payload",
        "function": "0x1::aptos_account::transfer",
        "type_arguments": [],
        "arguments": [account, "100"],
    });
    for (path, body, name) in [
        (
            "transactions/encode_submission",
            json!({"sequence_number": "0", "payload": payload}),
            "body.sender",
        ),
        (
            "transactions/encode_submission",
            json!({"sender": account, "payload": payload}),
            "body.sequence_number",
        ),
        (
            "transactions/encode_submission",
            json!({"sender": account, "sequence_number": "0"}),
            "body.payload",
        ),
        (
            "transactions",
            json!({"sender": account, "sequence_number": "0", "max_gas_amount": "2000",
                   "gas_unit_price": "100", "expiration_timestamp_secs": "99", "payload": payload}),
            "body.signature",
        ),
        (
            "transactions/simulate",
            json!({"sender": "0xZZ"}),
            "body.sender",
        ),
        ("transactions/batch", json!([]), "body"),
        (
            "transactions/batch",
            json!([{"sender": account}]),
            "body[0].sequence_number",
        ),
        (
            "view",
            json!({"type_arguments": [], "arguments": []}),
            "body.function",
        ),
        (
            "view",
            json!({"function": "0x1::coin::balance", "arguments": []}),
            "body.type_arguments",
        ),
        (
            "tables/0x1/item",
            json!({"key_type": "address", "key": "0x1"}),
            "body.value_type",
        ),
        ("tables/0x1/raw_item", json!({}), "body.key"),
    ] {
        let reply = s
            .post(APTOS, &format!("/{key}/v1/{path}"), &body.to_string())
            .await;
        invalid_input(&reply, name);
    }
    invalid_input(
        &s.post(APTOS, &format!("/{key}/v1/view"), "{not json").await,
        "body",
    );
    assert_eq!(
        s.aptos.requests().len(),
        before,
        "no refused request reached the node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_own_answers_pass_through_with_its_headers() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    let account = s.aptos.account();
    let creation = s.aptos.deposit_creation_number();

    // Events: the default limit of 25 is sent, a larger one up to 1000 is
    // the caller's, paging forward by `start` works.
    let events = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/events/{creation}"),
        )
        .await;
    assert_eq!(events.status, 200, "{}", events.text);
    let seen = s.aptos.requests().last().unwrap().clone();
    assert!(seen.path_and_query.contains("limit=25"), "{seen:?}");
    let first = events.json();
    assert!(!first.as_array().unwrap().is_empty());
    assert!(events.header("x-aptos-ledger-version").is_some());
    let page = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/events/{creation}?start=2&limit=3"),
        )
        .await;
    let page = page.json();
    assert_eq!(page.as_array().unwrap().len(), 3, "{page}");
    assert_eq!(page[0]["sequence_number"], "2");
    assert_eq!(page[2]["sequence_number"], "4");
    let big = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/events/{creation}?limit=1000"),
        )
        .await;
    assert_eq!(big.status, 200, "{}", big.text);

    // Resources page with the node's cursor header.
    let resources = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/resources?limit=1"),
        )
        .await;
    assert_eq!(resources.status, 200, "{}", resources.text);
    let cursor = resources
        .header("x-aptos-cursor")
        .expect("a cursor to the next page")
        .to_owned();
    let next = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/resources?limit=1&start={cursor}"),
        )
        .await;
    assert_eq!(next.status, 200, "{}", next.text);
    assert_ne!(next.json()[0]["type"], resources.json()[0]["type"]);

    // The node's errors, with its body and headers.
    let unknown = format!("0x{}", "ab".repeat(32));
    for (path, status, code) in [
        (
            format!("accounts/{unknown}/resources"),
            404,
            "account_not_found",
        ),
        (
            format!("accounts/{account}/events/999999"),
            404,
            "resource_not_found",
        ),
        (
            "blocks/by_version/18446744073709551615".to_owned(),
            404,
            "version_not_found",
        ),
    ] {
        let reply = s.get(APTOS, &format!("/{key}/v1/{path}")).await;
        assert_eq!(reply.status, status, "{path}: {}", reply.text);
        assert_eq!(reply.json()["error_code"], code, "{path}: {}", reply.text);
        assert!(reply.header("x-aptos-ledger-version").is_some(), "{path}");
    }
    // Below the oldest version the node serves: its own 404/410.
    let pruned = s
        .get(APTOS, &format!("/{key}/v1/blocks/by_version/0"))
        .await;
    assert!(matches!(pruned.status, 404 | 410), "{}", pruned.text);
    // The events reader down: the node's internal_error.
    s.aptos.set_event_reader(false);
    let down = s
        .get(
            APTOS,
            &format!("/{key}/v1/accounts/{account}/events/{creation}"),
        )
        .await;
    assert_eq!(down.status, 500, "{}", down.text);
    assert_eq!(down.json()["error_code"], "internal_error");
    s.aptos.set_event_reader(true);

    // Submit: 202 with the pending transaction (the account's next
    // sequence number read through l1gate, as a wallet's signing flow does).
    let sequence = s
        .get(APTOS, &format!("/{key}/v1/accounts/{account}"))
        .await
        .json()["sequence_number"]
        .as_str()
        .unwrap()
        .to_owned();
    let signed = json!({
        "sender": account, "sequence_number": sequence, "max_gas_amount": "2000",
        "gas_unit_price": "100", "expiration_timestamp_secs": "4102444800",
        "payload": {"type": "entry_function_payload", "function": "0x1::aptos_account::transfer",
                    "type_arguments": [], "arguments": [account, "1"]},
        "signature": {"type": "ed25519_signature", "public_key": format!("0x{}", "11".repeat(32)),
                      "signature": format!("0x{}", "22".repeat(64))},
    });
    let submitted = s
        .post(
            APTOS,
            &format!("/{key}/v1/transactions"),
            &signed.to_string(),
        )
        .await;
    assert_eq!(submitted.status, 202, "{}", submitted.text);
    let hash = submitted.json()["hash"].as_str().unwrap().to_owned();
    let waited = s
        .get(
            APTOS,
            &format!("/{key}/v1/transactions/wait_by_hash/{hash}"),
        )
        .await;
    assert!(matches!(waited.status, 200 | 202), "{}", waited.text);

    // GraphQL goes to the indexer, not the node.
    let query = r#"{"query":"{ ledger_infos(limit: 1) { chain_id } }"}"#;
    let graphql = s.post(APTOS, &format!("/{key}/v1/graphql"), query).await;
    assert_eq!(graphql.status, 200, "{}", graphql.text);
    assert_eq!(graphql.json()["data"]["ledger_infos"][0]["chain_id"], 1);
    assert_eq!(s.indexer.requests().len(), 1);
    assert!(
        s.aptos
            .requests()
            .iter()
            .all(|seen| !seen.path_and_query.contains("graphql"))
    );
    // A network without an indexer says so.
    let none = s.post(MOVEMENT, &format!("/{key}/v1/graphql"), query).await;
    assert_eq!(none.status, 503, "{}", none.text);
    assert_eq!(none.json()["error_code"], "no_graphql_upstream");

    // No upstream ever saw the key, in any part of any request.
    let everything = s
        .aptos
        .requests()
        .into_iter()
        .chain(s.indexer.requests())
        .chain(s.movement.requests());
    for seen in everything {
        let text = format!("{seen:?}");
        assert!(!text.contains(&key), "{text}");
        assert!(
            seen.headers
                .iter()
                .all(|(name, _)| name != "x-api-key" && name != "authorization")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_info_is_one_node_request_per_window_and_freshness_is_reported() {
    let s = setup(|args| args.ledger_cache_ms = Some(2000)).await;
    let key = s.key().to_owned();
    let addr = s.server.running.http_addr;
    let mut tasks = Vec::new();
    for _ in 0..25 {
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            http(addr, "GET", &format!("/{key}/v1"), &[("host", APTOS)], "").await
        }));
    }
    for task in tasks {
        let reply = task.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(reply.header("x-aptos-ledger-timestampusec").is_some());
    }
    assert_eq!(s.aptos.ledger_requests(), 1, "one request for 25 callers");
    let health = s.get("l1gate.test", "/healthz").await.json();
    assert_eq!(
        health["networks"]["aptos/mainnet"]["status"], "ok",
        "{health}"
    );
    assert_eq!(health["networks"]["aptos/mainnet"]["chain_id"], 1);
    assert_eq!(s.aptos.ledger_requests(), 1, "healthz read the same window");

    // A node whose ledger falls 60 s behind is stale once the window passes.
    s.movement.set_ledger_lag(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let health = s.get("l1gate.test", "/healthz").await.json();
    let movement = &health["networks"]["movement/mainnet"];
    assert_eq!(movement["status"], "stale", "{health}");
    let age = movement["ledger_age_ms"].as_i64().unwrap();
    assert!((59_000..70_000).contains(&age), "{age}");
    assert!(movement["problem"].as_str().unwrap().contains("30 s"));
    assert_eq!(health["networks"]["aptos/mainnet"]["status"], "ok");
    assert_eq!(s.aptos.ledger_requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_by_hash_has_its_own_longer_timeout() {
    let s = setup(|args| {
        args.upstream_timeout_ms = Some(400);
        args.node_wait_timeout_ms = Some(5000);
    })
    .await;
    let key = s.key().to_owned();
    let account = s.aptos.account();
    s.aptos.set_delay(Duration::from_millis(1000));
    let slow = s.get(APTOS, &format!("/{key}/v1/accounts/{account}")).await;
    assert_eq!(slow.status, 504, "{}", slow.text);
    assert_eq!(slow.json()["error_code"], "gateway_timeout");
    let hash = format!("0x{}", "cd".repeat(32));
    let waited = s
        .get(
            APTOS,
            &format!("/{key}/v1/transactions/wait_by_hash/{hash}"),
        )
        .await;
    assert_ne!(waited.status, 504, "{}", waited.text);
    assert_eq!(
        waited.header("x-aptos-chain-id"),
        Some("1"),
        "the node's answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_is_relayed_single_and_batch_in_both_key_forms() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    let addr = s.server.running.http_addr;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let single = s.post(EVM, &format!("/{key}"), call).await;
    assert_eq!(single.status, 200, "{}", single.text);
    assert_eq!(single.json()["id"], 1);
    assert!(single.json()["result"].is_string(), "{}", single.text);
    let batch = http(
        addr,
        "POST",
        "/",
        &[("host", EVM), ("content-type", "application/json"), ("x-api-key", &key)],
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]},{"jsonrpc":"2.0","id":2,"method":"no_such_method","params":[]}]"#,
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.text);
    let answers = batch.json();
    assert_eq!(answers.as_array().unwrap().len(), 2, "{answers}");
    assert!(
        answers
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["error"]["code"] == -32601),
        "the node's own error passes through: {answers}"
    );
    // Bodies that are not JSON-RPC are answered by l1gate, as JSON-RPC.
    let before = s.rpc.requests().len();
    for (body, code) in [("{oops", -32700), ("[]", -32600), ("42", -32600)] {
        let reply = s.post(EVM, &format!("/{key}"), body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert_eq!(reply.json()["error"]["code"], code, "{body}");
        assert_eq!(reply.json()["id"], Value::Null);
    }
    assert_eq!(s.rpc.requests().len(), before);
    // No JSON-RPC on a network that has none.
    let none = s.post(APTOS, &format!("/{key}"), call).await;
    assert_eq!(none.status, 503, "{}", none.text);
    // No key: 401 before the node.
    assert_eq!(s.post(EVM, "/", call).await.status, 401);
    assert_eq!(s.rpc.requests().len(), before);
    for seen in s.rpc.requests() {
        assert!(!format!("{seen:?}").contains(&key));
    }
}

/// A WebSocket to `path` on `host` through l1gate.
async fn websocket(
    s: &Setup,
    path: &str,
    header_key: Option<&str>,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Error,
> {
    let addr = s.server.running.http_addr;
    let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
    request.headers_mut().insert("host", EVM.parse().unwrap());
    if let Some(key) = header_key {
        request
            .headers_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(socket, _)| socket)
}

async fn next_json(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("a message in time")
            .expect("the connection is open")
            .unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_json_rpc_is_relayed_both_ways_with_subscriptions() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    for (path, header) in [
        (format!("/{key}"), None),
        ("/".to_owned(), Some(key.as_str())),
    ] {
        let mut socket = websocket(&s, &path, header).await.unwrap();
        socket
            .send(Message::Text(
                r#"{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["newHeads"]}"#.into(),
            ))
            .await
            .unwrap();
        let subscribed = next_json(&mut socket).await;
        assert_eq!(subscribed["id"], 7, "{subscribed}");
        let id = subscribed["result"].as_str().unwrap().to_owned();
        let first = next_json(&mut socket).await;
        let second = next_json(&mut socket).await;
        assert_eq!(first["method"], "eth_subscription", "{first}");
        assert_eq!(first["params"]["subscription"], id.as_str());
        assert_ne!(first["params"]["result"], second["params"]["result"]);
        socket.close(None).await.unwrap();
    }
    // The node saw neither the key nor the client's headers.
    for seen in s.rpc.requests() {
        assert!(!format!("{seen:?}").contains(&key), "{seen:?}");
    }
    assert!(s.rpc.ws_messages().iter().all(|m| !m.contains(&key)));
    // No key, a wrong key: refused before any upgrade.
    for path in [
        "/",
        "/l1g_0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        match websocket(&s, path, None).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 401);
            }
            other => panic!("{path}: expected 401, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_closes_the_relayed_websocket_with_1008() {
    let s = setup(|_| {}).await;
    let key = s.key().to_owned();
    let mut socket = websocket(&s, &format!("/{key}"), None).await.unwrap();
    socket
        .send(Message::Text(
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#.into(),
        ))
        .await
        .unwrap();
    next_json(&mut socket).await;
    let id = key_id(&s.server, &key);
    edit_keys(&s.server, |file| file.revoke(&id).unwrap());
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(message) = socket.next().await {
            if let Ok(Message::Close(frame)) = message {
                return frame;
            }
        }
        None
    })
    .await
    .expect("closed in time")
    .expect("a close frame");
    assert_eq!(u16::from(closed.code), 1008, "{closed:?}");
}
