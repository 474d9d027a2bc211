//! Property tests over untrusted text the server parses: the keys file, the
//! config file, candle lookup queries, ISO-8601 times and the HTTP edge's
//! request bodies. Real-shaped inputs are damaged at random; each parser
//! answers a value or an error naming the problem, never a panic, and an
//! error quotes the input only briefly.
//!
//! Cases: proptest's default (256) or `PROPTEST_CASES`; a longer run:
//! `PROPTEST_CASES=20000 cargo test --release -p server --test server untrusted_text`.
//! Failing cases are saved beside this file (`*.proptest-regressions`) and
//! replayed first on later runs.

use access::keys::{KeyStore, KeysFile};
use l1gate::config::ServeArgs;
use proptest::prelude::*;

const KEYS_FILE: &str = r#"# l1gate keys: SHA-256 hashes only, never keys.
[[accounts]]
name = "alice"
requests_per_second = 50
max_streams = 4

[[accounts.keys]]
id = "k_0123456789ab"
sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
created_ms = 1700000000000
revoked = false
allow_list = ["10.0.0.0/8", "::ffff:127.0.0.1/128", "2001:db8::/32"]
"#;

const CONFIG: &str = r#"data = "/home/hl"
keys_file = "/etc/l1gate/keys.toml"
grpc_addr = "0.0.0.0:50051"
http_addr = "0.0.0.0:8080"
l2_coalesce_ms = 100
market_stale_after_ms = 30000
requests_per_second = 20
max_streams = 8
max_connections_per_ip = 64
http_header_timeout_ms = 10000
candle_history_start = "2025-07-27T08:00:00Z"
demo_scale = 0.05
"#;

const QUERY: &str = "market=BTC&interval=1m&time=2026-05-05T17:00:00Z";

/// `text` with `edits` applied: (position, replacement) pairs, each
/// replacing one character (or inserting, when the replacement is longer).
fn damaged(text: &str, edits: &[(usize, String)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, with) in edits {
        if chars.is_empty() {
            chars.extend(with.chars());
            continue;
        }
        let i = at % chars.len();
        chars.splice(i..=i, with.chars());
    }
    chars.into_iter().collect()
}

fn edits() -> impl Strategy<Value = Vec<(usize, String)>> {
    proptest::collection::vec(
        (
            any::<usize>(),
            prop_oneof![
                Just(String::new()),
                Just("\"".to_owned()),
                Just("[".to_owned()),
                Just("]".to_owned()),
                Just("=".to_owned()),
                Just("\n".to_owned()),
                Just("&".to_owned()),
                Just("%".to_owned()),
                Just("%ff".to_owned()),
                Just("0".to_owned()),
                Just("-1".to_owned()),
                Just("99999999999999999999".to_owned()),
                Just("é".to_owned()),
                Just("\u{0}".to_owned()),
                "\\PC{0,8}",
            ],
        ),
        1..8,
    )
}

proptest! {
    #[test]
    fn a_damaged_keys_file_loads_or_is_refused_never_panics(edits in edits()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        std::fs::write(&path, damaged(KEYS_FILE, &edits)).unwrap();
        match KeysFile::load(&path) {
            Ok(file) => {
                let store = KeyStore::new(&file);
                let _ = store.authenticate("l1g_0000");
            }
            Err(error) => prop_assert!(error.to_string().len() < 4_096, "{error}"),
        }
    }

    #[test]
    fn a_damaged_config_resolves_or_is_refused_never_panics(edits in edits()) {
        if let Ok(args) = toml::from_str::<ServeArgs>(&damaged(CONFIG, &edits))
            && let Err(error) = args.resolve()
        {
            prop_assert!(error.to_string().len() < 4_096, "{error}");
        }
    }

    #[test]
    fn a_damaged_candle_query_parses_or_names_its_parameter(edits in edits()) {
        let query = damaged(QUERY, &edits);
        if let Err(bad) = market::http::candles::parse_query(&query) {
            prop_assert!(!bad.parameter.is_empty());
            prop_assert!(bad.message.len() < 512, "{}", bad.message);
        }
    }

    #[test]
    fn any_text_is_a_time_or_an_error(text in "\\PC{0,40}") {
        let _ = feeds::time::parse_iso8601_ms(&text);
    }
}
