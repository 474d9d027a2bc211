//! `POST /info` over real HTTP: the cache in front of a stand-in Info
//! server, pass-through, answers derived from the data without a source,
//! and the refusals.

use std::time::Duration;

use engine::coin;

use super::harness::{TestServer, real};
use super::market_live::live_node;
use super::standin::{StandIn, closed_port, info_router, info_world, post_json};

const WAIT: Duration = Duration::from_secs(30);

async fn ready(server: &TestServer) {
    for _ in 0..600 {
        if server.running.engine.status().ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the engine never caught up within {WAIT:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_types_reach_the_source_once_per_window_and_other_types_pass_through() {
    let world = info_world();
    let source = StandIn::start(info_router(world.clone())).await;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.info_url = Some(source.url("/info"));
        args.info_cache_ms = Some(1_500);
    })
    .await;
    let http = server.running.http_addr;
    let key = server.key.clone();

    // Many callers at once, both key forms: one request to the source.
    let by_path = format!("/{key}/info");
    let calls = (0..12).map(|i| {
        let (path, header) = if i % 2 == 0 {
            (by_path.as_str(), None)
        } else {
            ("/info", Some(key.as_str()))
        };
        post_json(http, path, header, r#"{"type":"meta"}"#)
    });
    let replies = futures_util::future::join_all(calls).await;
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.json()["universe"][0]["name"], "BTC");
        assert_eq!(reply.header("content-type"), Some("application/json"));
    }
    assert_eq!(world.lock().asked("meta"), 1);
    let sources: Vec<&str> = replies
        .iter()
        .map(|r| r.header("x-l1gate-info-source").unwrap())
        .collect();
    assert_eq!(sources.iter().filter(|s| **s == "upstream").count(), 1);
    assert_eq!(sources.iter().filter(|s| **s == "cache").count(), 11);

    // Each cached type and each distinct body has its own entry.
    for _ in 0..3 {
        let spot = post_json(http, "/info", Some(&key), r#"{"type":"spotMeta"}"#).await;
        assert_eq!(spot.json()["tokens"][1]["name"], "PURR");
        let dexs = post_json(http, "/info", Some(&key), r#"{"type":"perpDexs"}"#).await;
        assert_eq!(dexs.json()[1]["name"], "xyz");
        let xyz = post_json(http, "/info", Some(&key), r#"{"type":"meta","dex":"xyz"}"#).await;
        assert_eq!(xyz.json()["dex"], "xyz");
    }
    {
        let world = world.lock();
        assert_eq!(world.asked("spotMeta"), 1);
        assert_eq!(world.asked("perpDexs"), 1);
        assert_eq!(world.asked("meta"), 2);
    }

    // After the window, the source is asked again.
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let again = post_json(http, &by_path, None, r#"{"type":"meta"}"#).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-l1gate-info-source"), Some("upstream"));
    assert_eq!(world.lock().asked("meta"), 3);

    // Other types go through every time, with the source's status.
    for user in ["0xabc", "0xdef"] {
        let body = format!(r#"{{"type":"clearinghouseState","user":"{user}"}}"#);
        let reply = post_json(http, "/info", Some(&key), &body).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(reply.json()["user"], user);
    }
    assert_eq!(world.lock().asked("clearinghouseState"), 2);
    let unknown = post_json(http, "/info", Some(&key), r#"{"type":"noSuchType"}"#).await;
    assert_eq!(unknown.status, 422);
    assert!(
        unknown.text.contains("Failed to deserialize"),
        "{}",
        unknown.text
    );
    // A 5xx of the source's own is a bad gateway, with what it said.
    let broken = post_json(http, "/info", Some(&key), r#"{"type":"broken"}"#).await;
    assert_eq!(broken.status, 502, "{}", broken.text);
    assert_eq!(broken.json()["error"], "bad_gateway");
    assert_eq!(
        broken.json()["message"],
        "Info source answered HTTP 500: internal failure"
    );

    // Nobody streams: the poller never asked for mids or contexts.
    assert_eq!(world.lock().asked("allMids"), 0);
    assert_eq!(world.lock().asked("metaAndAssetCtxs"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_source_meta_and_spot_meta_are_derived_from_the_data() {
    let node = live_node(60, 60, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let http = server.running.http_addr;
    let key = server.key.clone();
    let coins = server.running.engine.status().coins();
    // The simulator's universe has every family.
    assert!(coins.iter().any(|c| c.starts_with('@')), "{coins:?}");
    assert!(coins.iter().any(|c| c.contains(':')), "{coins:?}");

    let meta = post_json(http, &format!("/{key}/info"), None, r#"{"type":"meta"}"#).await;
    assert_eq!(meta.status, 200, "{}", meta.text);
    assert_eq!(meta.header("x-l1gate-info-source"), Some("derived"));
    let names: Vec<String> = meta.json()["universe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|asset| asset["name"].as_str().unwrap().to_owned())
        .collect();
    let perps: Vec<String> = coins
        .iter()
        .filter(|c| coin::is_default_perp(c))
        .cloned()
        .collect();
    assert_eq!(names, perps);
    assert!(names.contains(&"BTC".to_owned()), "{names:?}");
    // Only what the names say: no invented decimals or leverage.
    assert_eq!(
        meta.json()["universe"][0].as_object().unwrap().len(),
        1,
        "{}",
        meta.text
    );

    let spot = post_json(http, "/info", Some(&key), r#"{"type":"spotMeta"}"#).await;
    assert_eq!(spot.status, 200, "{}", spot.text);
    let pairs = spot.json()["universe"].as_array().unwrap().clone();
    let spot_coins: Vec<&String> = coins
        .iter()
        .filter(|c| coin::kind(c) == coin::CoinKind::Spot)
        .collect();
    assert_eq!(pairs.len(), spot_coins.len());
    for pair in &pairs {
        let name = pair["name"].as_str().unwrap();
        assert!(spot_coins.iter().any(|c| *c == name), "{name}");
        if let Some(index) = coin::spot_index(name) {
            assert_eq!(pair["index"], index);
        }
    }

    for body in [
        r#"{"type":"perpDexs"}"#,
        r#"{"type":"clearinghouseState","user":"0x0000000000000000000000000000000000000001"}"#,
        r#"{"type":"meta","dex":"xyz"}"#,
    ] {
        let reply = post_json(http, "/info", Some(&key), body).await;
        assert_eq!(reply.status, 503, "{body}: {}", reply.text);
        assert_eq!(reply.json()["error"], "no_info_source");
        assert!(
            reply.json()["message"]
                .as_str()
                .unwrap()
                .contains("--info-url")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_400_naming_type_and_bad_keys_401() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let http = server.running.http_addr;
    let key = server.key.clone();
    for body in ["", "{", "[]", "{}", r#"{"type":""}"#, r#"{"type":7}"#] {
        let reply = post_json(http, "/info", Some(&key), body).await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.text);
        assert_eq!(reply.json()["error"], "invalid_request");
        assert!(
            reply.json()["message"]
                .as_str()
                .unwrap()
                .starts_with("type: "),
            "{}",
            reply.text
        );
    }
    let wrong = "l1g_0000000000000000000000000000000000000000000000000000000000000000";
    for reply in [
        post_json(http, "/info", Some(wrong), r#"{"type":"meta"}"#).await,
        post_json(http, &format!("/{wrong}/info"), None, r#"{"type":"meta"}"#).await,
        post_json(http, "/info", None, r#"{"type":"meta"}"#).await,
    ] {
        assert_eq!(reply.status, 401, "{}", reply.text);
        assert!(!reply.text.contains(wrong));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_source_is_502_with_a_message() {
    let down = closed_port().await;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.info_url = Some(format!("http://{down}/info"));
    })
    .await;
    let http = server.running.http_addr;
    for body in [
        r#"{"type":"meta"}"#,
        r#"{"type":"clearinghouseState","user":"0x1"}"#,
    ] {
        let reply = post_json(http, "/info", Some(&server.key), body).await;
        assert_eq!(reply.status, 502, "{}", reply.text);
        assert_eq!(reply.json()["error"], "bad_gateway");
        assert!(
            reply.json()["message"]
                .as_str()
                .unwrap()
                .contains("Info source: upstream unreachable"),
            "{}",
            reply.text
        );
    }
}
