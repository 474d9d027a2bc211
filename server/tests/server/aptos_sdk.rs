//! The official Python `aptos-sdk` (`RestClient`, from PyPI, pinned,
//! installed by the test into the venv under `target/`) reads ledger info,
//! an account's resources and its events through l1gate's node gateway,
//! with the key in the path and in the `X-Api-Key` header, unchanged but
//! for its base URL; what it gets equals what the node answers.

use std::time::Duration;

use serde_json::Value;

use super::aptos_node::AptosNode;
use super::harness::{TestServer, real};
use super::python;
use super::standin::http;

/// The Aptos Python SDK, pinned.
const APTOS_SDK: &str = "aptos-sdk==0.11.0";

const SCRIPT: &str = r#"
import asyncio, json, sys
from aptos_sdk.async_client import ApiError, RestClient
from aptos_sdk.account_address import AccountAddress

async def main():
    port, key, account, creation = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    address = AccountAddress.from_str_relaxed(account)
    out = {}
    for form in ("path", "header"):
        if form == "path":
            client = RestClient(f"http://localhost:{port}/{key}/v1")
        else:
            client = RestClient(f"http://localhost:{port}/v1")
            client.client.headers["X-Api-Key"] = key
        info = await client.info()
        resources = await client.account_resources(address)
        events = await client.event_by_creation_number(address, creation, limit=5, start=0)
        later = await client.event_by_creation_number(address, creation, limit=3, start=5)
        chain_id = await client.chain_id()
        try:
            await client.event_by_creation_number(address, 999999)
            refused = None
        except ApiError as error:
            refused = error.status_code
        await client.close()
        out[form] = {
            "chain_id": chain_id,
            "ledger_version": info["ledger_version"],
            "resource_types": [r["type"] for r in resources],
            "events": [e["sequence_number"] for e in events],
            "later": [e["sequence_number"] for e in later],
            "missing_stream_status": refused,
        }
    # A wrong key is a 401, which the SDK raises.
    client = RestClient(f"http://localhost:{port}/l1g_{'0' * 64}/v1")
    try:
        await client.info()
        out["wrong_key_status"] = None
    except ApiError as error:
        out["wrong_key_status"] = error.status_code
    await client.close()
    print(json.dumps(out))

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aptos_python_sdk_reads_through_l1gate_unchanged() {
    let python = python::venv(&[APTOS_SDK]);
    let node = AptosNode::start(2).await;
    let registry = format!(
        "[[chains]]\nid = \"aptos\"\nname = \"Aptos\"\necosystem = \"move\"\n\
         [[chains.networks]]\nid = \"testnet\"\nname = \"Aptos Testnet\"\nbase_url = \"http://localhost\"\n\
         [[chains.networks.nodes]]\nid = \"aptos-testnet-full\"\nnode_type = \"full\"\nrest = \"{}\"\n",
        node.rest_url()
    );
    #[derive(serde::Deserialize)]
    struct File {
        chains: Vec<gateway::registry::ChainConfig>,
    }
    let chains = toml::from_str::<File>(&registry).unwrap().chains;
    let server = TestServer::start(&real("btc-985148182"), |args| args.chains = chains).await;
    let port = server.running.http_addr.port();
    let account = node.account();
    let creation = node.deposit_creation_number();
    let output = python::run(
        &python,
        SCRIPT,
        &[
            port.to_string(),
            server.key.clone(),
            account.clone(),
            creation.to_string(),
        ],
        Duration::from_secs(120),
    )
    .await;
    let got: Value = serde_json::from_str(output.trim()).unwrap();

    // What the node itself answers, read through l1gate by this test.
    let resources = http(
        server.running.http_addr,
        "GET",
        &format!("/{}/v1/accounts/{account}/resources", server.key),
        &[("host", "localhost")],
        "",
    )
    .await
    .json();
    let types: Vec<Value> = resources
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].clone())
        .collect();
    for form in ["path", "header"] {
        let seen = &got[form];
        assert_eq!(seen["chain_id"], 2, "{form}: {got}");
        assert_eq!(
            seen["resource_types"],
            Value::Array(types.clone()),
            "{form}"
        );
        assert_eq!(
            seen["events"],
            serde_json::json!(["0", "1", "2", "3", "4"]),
            "{form}"
        );
        assert_eq!(seen["later"], serde_json::json!(["5", "6", "7"]), "{form}");
        assert_eq!(seen["missing_stream_status"], 404, "{form}");
    }
    assert_eq!(got["wrong_key_status"], 401);
    // The SDK's requests reached the node without the key.
    for seen in node.requests() {
        assert!(!format!("{seen:?}").contains(&server.key), "{seen:?}");
    }
}
