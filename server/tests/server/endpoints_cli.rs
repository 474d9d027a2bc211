//! `l1gate endpoints list | search | get` over the committed example
//! registry (`docs/examples/registry.toml`), run as the binary: the JSON
//! shape, every filter and their combinations, the table, not_found, bad
//! filter values, and no upstream address anywhere in the output.

use std::process::Command;

use serde_json::{Value, json};

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

fn registry() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/registry.toml"
    )
    .to_owned()
}

/// Runs `l1gate endpoints --config REGISTRY ARGS…`: (exit code, stdout,
/// stderr).
fn endpoints(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(L1GATE)
        .arg("endpoints")
        .arg("--config")
        .arg(registry())
        .args(args)
        .env_remove("L1GATE_CONFIG")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn json_of(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = endpoints(&all);
    assert_eq!(code, 0, "{args:?}: {err}");
    assert!(
        !out.contains("10.0."),
        "an upstream address in the output: {out}"
    );
    let value: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["ok"], true);
    value
}

/// `chain/network/node` of every node listed.
fn nodes(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for chain in value["data"].as_array().unwrap() {
        for network in chain["networks"].as_array().unwrap() {
            for node in network["nodes"].as_array().unwrap() {
                out.push(format!(
                    "{}/{}/{}",
                    chain["id"].as_str().unwrap(),
                    network["id"].as_str().unwrap(),
                    node["id"].as_str().unwrap()
                ));
            }
        }
    }
    out
}

#[test]
fn list_gives_every_chain_in_the_documented_shape() {
    let value = json_of(&["list"]);
    assert_eq!(value["meta"]["command"], "list");
    assert!(value["meta"]["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        nodes(&value),
        [
            "hyperliquid/mainnet/l1gate",
            "aptos/mainnet/aptos-mainnet-full",
            "aptos/mainnet/aptos-mainnet-archive",
            "aptos/testnet/aptos-testnet-full",
            "movement/mainnet/movement-mainnet-full",
            "hyperevm/mainnet/hyperevm-local",
        ]
    );
    let own = &value["data"][0];
    assert_eq!(own["ecosystem"], "hyperliquid");
    assert_eq!(
        own["networks"][0]["nodes"][0],
        json!({"id": "l1gate", "https": "https://hl.gw.example/<key>",
               "wss": "wss://hl.gw.example/<key>/ws", "node_type": {"name": "full"},
               "grpc": "https://grpc.hl.gw.example"})
    );
    assert_eq!(
        value["data"][1]["networks"][0]["nodes"][1],
        json!({"id": "aptos-mainnet-archive",
               "https": "https://aptos-mainnet-archive.gw.example/<key>",
               "wss": "wss://aptos-mainnet-archive.gw.example/<key>",
               "node_type": {"name": "archive"}})
    );
}

#[test]
fn filters_combine_and_apply_to_every_command() {
    let moves = json_of(&["list", "--ecosystem", "move"]);
    assert_eq!(
        nodes(&moves),
        [
            "aptos/mainnet/aptos-mainnet-full",
            "aptos/mainnet/aptos-mainnet-archive",
            "aptos/testnet/aptos-testnet-full",
            "movement/mainnet/movement-mainnet-full",
        ]
    );
    assert_eq!(
        nodes(&json_of(&["list", "--network", "TESTNET"])),
        ["aptos/testnet/aptos-testnet-full"]
    );
    // A network name works as well as an id.
    assert_eq!(
        nodes(&json_of(&["list", "--network", "movement main"])),
        ["movement/mainnet/movement-mainnet-full"]
    );
    assert_eq!(
        nodes(&json_of(&["list", "--node-type", "Archive"])),
        ["aptos/mainnet/aptos-mainnet-archive"]
    );
    assert_eq!(
        nodes(&json_of(&[
            "list",
            "--ecosystem",
            "evm",
            "--network",
            "mainnet",
            "--node-type",
            "full"
        ])),
        ["hyperevm/mainnet/hyperevm-local"]
    );
    let wss = json_of(&["get", "aptos", "--protocol", "wss", "--network", "mainnet"]);
    assert_eq!(wss["meta"]["command"], "get");
    for node in wss["data"][0]["networks"][0]["nodes"].as_array().unwrap() {
        assert!(node["https"].is_null(), "{node}");
        assert!(node["wss"].as_str().unwrap().starts_with("wss://"));
    }
    let https = json_of(&[
        "search",
        "main",
        "--protocol",
        "https",
        "--ecosystem",
        "move",
    ]);
    assert_eq!(https["meta"]["command"], "search");
    assert_eq!(
        nodes(&https),
        [
            "aptos/mainnet/aptos-mainnet-full",
            "aptos/mainnet/aptos-mainnet-archive",
            "movement/mainnet/movement-mainnet-full",
        ]
    );
    assert!(https["data"][0]["networks"][0]["nodes"][0]["wss"].is_null());
}

#[test]
fn search_matches_chain_names_and_network_identifiers() {
    // A chain's name: every network of it.
    assert_eq!(
        nodes(&json_of(&["search", "APT"])),
        [
            "aptos/mainnet/aptos-mainnet-full",
            "aptos/mainnet/aptos-mainnet-archive",
            "aptos/testnet/aptos-testnet-full",
        ]
    );
    // A network's id: those networks only.
    assert_eq!(
        nodes(&json_of(&["search", "testnet"])),
        ["aptos/testnet/aptos-testnet-full"]
    );
    // get takes an id or a name.
    assert_eq!(json_of(&["get", "HyperEVM"])["data"][0]["id"], "hyperevm");
    assert_eq!(
        json_of(&["get", "hyperliquid"])["data"][0]["ecosystem"],
        "hyperliquid"
    );
}

#[test]
fn a_miss_is_not_found_with_help_and_a_nonzero_exit() {
    for args in [
        vec!["get", "solana", "--json"],
        vec!["search", "nothing-like-it", "--json"],
        vec!["list", "--ecosystem", "cosmos", "--json"],
        vec![
            "get",
            "aptos",
            "--node-type",
            "archive",
            "--network",
            "testnet",
            "--json",
        ],
    ] {
        let (code, out, _) = endpoints(&args);
        assert_eq!(code, 1, "{args:?}");
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["ok"], false);
        assert_eq!(value["error"]["code"], "not_found");
        assert!(value["error"]["message"].is_string());
        assert!(value["error"]["help"].as_str().unwrap().contains("list"));
    }
    let (code, out, err) = endpoints(&["get", "solana"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.contains("not found") && err.contains("\"solana\""),
        "{err}"
    );
}

/// `l1gate endpoints list` over the example registry, as it must print.
const LIST_TABLE: &str = "CHAIN        ECOSYSTEM    NETWORK  NODE                   TYPE     HTTPS                                           WSS\n\
hyperliquid  hyperliquid  mainnet  l1gate                 full     https://hl.gw.example/<key>                     wss://hl.gw.example/<key>/ws\n\
aptos        move         mainnet  aptos-mainnet-full     full     https://aptos-mainnet.gw.example/<key>          wss://aptos-mainnet.gw.example/<key>\n\
aptos        move         mainnet  aptos-mainnet-archive  archive  https://aptos-mainnet-archive.gw.example/<key>  wss://aptos-mainnet-archive.gw.example/<key>\n\
aptos        move         testnet  aptos-testnet-full     full     https://aptos-testnet.gw.example/<key>          wss://aptos-testnet.gw.example/<key>\n\
movement     move         mainnet  movement-mainnet-full  full     https://movement-mainnet.gw.example/<key>       wss://movement-mainnet.gw.example/<key>\n\
hyperevm     evm          mainnet  hyperevm-local         full     https://hyperevm-mainnet.gw.example/<key>       wss://hyperevm-mainnet.gw.example/<key>\n\
";

#[test]
fn the_table_shows_one_node_per_line() {
    let (code, out, err) = endpoints(&["list"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, LIST_TABLE);
    let (code, out, err) = endpoints(&["list", "--ecosystem", "move", "--protocol", "https"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].starts_with("CHAIN") && lines[0].contains("HTTPS"));
    assert!(lines[2].contains("aptos-mainnet-archive") && lines[2].contains("archive"));
    assert!(lines[2].contains("https://aptos-mainnet-archive.gw.example/<key>"));
    assert!(lines[2].trim_end().ends_with('-'), "{}", lines[2]);
    assert!(!out.contains("10.0."));
}

#[test]
fn bad_filter_values_and_registries_are_refused_naming_them() {
    let (code, _, err) = endpoints(&["list", "--ecosystem", "solana"]);
    assert_ne!(code, 0);
    assert!(err.contains("evm") && err.contains("hyperliquid"), "{err}");
    let (code, _, err) = endpoints(&["list", "--protocol", "ftp"]);
    assert_ne!(code, 0);
    assert!(err.contains("https") && err.contains("wss"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    for (text, named) in [
        (
            "[[chains]]\nid = \"a\"\nname = \"A\"\necosystem = \"evm\"\n[[chains]]\nid = \"A\"\nname = \"B\"\necosystem = \"evm\"\n",
            "used twice",
        ),
        (
            "[[chains]]\nid = \"a\"\nname = \"A\"\necosystem = \"evm\"\n[[chains.networks]]\nid = \"m\"\nname = \"M\"\nbase_url = \"ftp://x\"\n",
            "base_url",
        ),
        (
            "[[chains]]\nid = \"a\"\nname = \"A\"\necosystem = \"solana\"\n",
            "ecosystem",
        ),
        (
            "[[chains]]\nid = \"a\"\nname = \"A\"\necosystem = \"evm\"\nrpc = \"x\"\n",
            "rpc",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let output = Command::new(L1GATE)
            .args(["endpoints", "--config"])
            .arg(&path)
            .arg("list")
            .env_remove("L1GATE_CONFIG")
            .output()
            .unwrap();
        assert!(!output.status.success());
        let err = String::from_utf8(output.stderr).unwrap();
        assert!(err.contains(named), "{named}: {err}");
        assert!(err.contains("bad.toml") || err.contains("chains"), "{err}");
    }
}

#[test]
fn an_env_file_gets_the_key_and_urls_atomically_and_keeps_other_lines() {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.env");
    std::fs::write(
        &path,
        "# mine\nFOO=bar\nL1GATE_API_KEY=old\nexport KEEP=1\n",
    )
    .unwrap();
    let key = "l1g_secretsecretsecret";
    let output = Command::new(L1GATE)
        .args(["endpoints", "--config"])
        .arg(registry())
        .args(["get", "aptos", "--network", "mainnet", "--env-file"])
        .arg(&path)
        .args(["--key-env", "APP_KEY", "--json"])
        .env("APP_KEY", key)
        .env_remove("L1GATE_CONFIG")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    assert!(output.status.success(), "{err}");
    assert!(
        !out.contains(key) && !err.contains(key),
        "the key was printed"
    );
    let value: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["meta"]["env_file"], path.display().to_string());
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        format!(
            "# mine\nFOO=bar\nL1GATE_API_KEY={key}\nexport KEEP=1\n\
             APTOS_MAINNET_APTOS_MAINNET_FULL_HTTPS_URL=https://aptos-mainnet.gw.example/{key}\n\
             APTOS_MAINNET_APTOS_MAINNET_FULL_WSS_URL=wss://aptos-mainnet.gw.example/{key}\n\
             APTOS_MAINNET_APTOS_MAINNET_ARCHIVE_HTTPS_URL=https://aptos-mainnet-archive.gw.example/{key}\n\
             APTOS_MAINNET_APTOS_MAINNET_ARCHIVE_WSS_URL=wss://aptos-mainnet-archive.gw.example/{key}\n"
        )
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Nothing left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Again from standard input, for l1gate's own chain, over the same
    // file: its names replaced or added, the others kept.
    let mut child = Command::new(L1GATE)
        .args(["endpoints", "--config"])
        .arg(registry())
        .args(["get", "hyperliquid", "--protocol", "wss", "--env-file"])
        .arg(&path)
        .arg("--key-stdin")
        .env_remove("L1GATE_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"l1g_otherkey\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    assert!(
        !String::from_utf8(output.stdout)
            .unwrap()
            .contains("l1g_otherkey")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("L1GATE_API_KEY=l1g_otherkey\n"), "{text}");
    assert!(
        text.contains("FOO=bar\n") && text.contains("APTOS_MAINNET_APTOS_MAINNET_FULL_HTTPS_URL")
    );
    assert!(
        text.contains("HYPERLIQUID_MAINNET_L1GATE_WSS_URL=wss://hl.gw.example/l1g_otherkey/ws\n")
    );
    assert!(text.contains("HYPERLIQUID_MAINNET_L1GATE_GRPC_URL=https://grpc.hl.gw.example\n"));
    assert!(
        !text.contains("HYPERLIQUID_MAINNET_L1GATE_HTTPS_URL"),
        "--protocol wss"
    );

    // Without a key source: refused, the file untouched.
    let before = std::fs::read_to_string(&path).unwrap();
    let (code, _, err) = endpoints(&["list", "--env-file", path.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--key-env") && err.contains("--key-stdin"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}
