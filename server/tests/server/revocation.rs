//! Revocation bites: revoking a key, or narrowing its allow-list so that a
//! stream's source address is no longer on it, ends the streams already
//! open under it, on both gRPC services, within the keys file's reload
//! interval; other keys' streams carry on.

use std::time::{Duration, Instant};

use access::keys::{KeysFile, hash_key};
use proto::v3 as pb;
use tonic::{Code, Status};

use super::harness::{TestServer, end_status, from_block, next};
use super::market_live::{client, live_node, ready};

const WAIT: Duration = Duration::from_secs(30);
/// The keys file is re-read every second; the sweeper looks a few times per
/// second on top.
const BOUND: Duration = Duration::from_secs(3);

/// The id of `key` in the server's keys file.
pub fn key_id(server: &TestServer, key: &str) -> String {
    let file = KeysFile::load(&server.keys_file).unwrap();
    let hash = hash_key(key);
    file.accounts
        .iter()
        .flat_map(|a| &a.keys)
        .find(|k| k.sha256.eq_ignore_ascii_case(&hash))
        .map(|k| k.id.clone())
        .expect("the key is in the file")
}

pub fn edit_keys(server: &TestServer, edit: impl FnOnce(&mut KeysFile)) {
    let mut file = KeysFile::load(&server.keys_file).unwrap();
    edit(&mut file);
    // A reload is noticed by modification time and size: make sure one of
    // them moves even within the file system's time resolution.
    std::thread::sleep(Duration::from_millis(20));
    file.save(&server.keys_file).unwrap();
}

/// Reads `stream` until it ends; the status it ends with and when.
async fn until_ended<T>(stream: &mut tonic::Streaming<T>) -> (Status, Instant) {
    let status = end_status(stream, WAIT).await;
    (status, Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_its_open_streams_on_both_services() {
    let node = live_node(6000, 50, Duration::from_millis(20));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    // A second key of another account, whose stream must carry on.
    let mut other_key = String::new();
    edit_keys(&server, |file| {
        other_key = file.add_key("bystander", 0).unwrap().0;
    });
    let doomed = key_id(&server, &server.key);

    let mut market = client(&server).await;
    let mut bbo = market
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec!["BTC".into()],
        }))
        .await
        .unwrap()
        .into_inner();
    next(&mut bbo, WAIT).await.unwrap();
    let mut raw = server
        .client()
        .await
        .stream_order_statuses(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    next(&mut raw, WAIT).await.unwrap();
    // The bystander's stream, opened once its key is loaded.
    let mut bystander = loop {
        match market
            .stream_bbo(super::harness::with_key(
                pb::BboRequest {
                    coins: vec!["BTC".into()],
                },
                &other_key,
            ))
            .await
        {
            Ok(response) => break response.into_inner(),
            Err(status) if status.code() == Code::Unauthenticated => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    next(&mut bystander, WAIT).await.unwrap();

    let revoked_at = Instant::now();
    edit_keys(&server, |file| file.revoke(&doomed).unwrap());
    for (what, (status, at)) in [
        ("market", until_ended(&mut bbo).await),
        ("raw feed", until_ended(&mut raw).await),
    ] {
        assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
        assert!(
            status.message().contains("revoked"),
            "{what}: {}",
            status.message()
        );
        assert!(
            !status.message().contains(&server.key),
            "{what}: the key is never echoed"
        );
        let after = at.duration_since(revoked_at);
        assert!(
            after <= BOUND,
            "{what}: ended {after:?} after the revocation"
        );
    }
    // The other account's stream carries on.
    for _ in 0..3 {
        next(&mut bystander, WAIT).await.unwrap();
    }
    let metrics = super::slow_subscribers::metrics(&server).await;
    assert!(
        metrics.contains("reason=\"revoked\""),
        "ends are counted by reason:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_that_no_longer_admits_the_source_ends_its_streams() {
    let node = live_node(6000, 50, Duration::from_millis(20));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let id = key_id(&server, &server.key);
    let mut market = client(&server).await;
    // A quiet stream: TP/SL orders of one coin may see no frame for long.
    let mut quiet = market
        .stream_tpsl_updates(server.req(pb::TpslUpdatesRequest {
            coins: vec!["BTC".into()],
            ..pb::TpslUpdatesRequest::default()
        }))
        .await
        .unwrap()
        .into_inner();
    next(&mut quiet, WAIT).await.unwrap();
    // Still admitted: a list that includes the loopback source.
    edit_keys(&server, |file| {
        file.allow(&id, "127.0.0.0/8").unwrap();
    });
    tokio::time::sleep(BOUND).await;
    let changed_at = Instant::now();
    edit_keys(&server, |file| {
        file.allow(&id, "10.0.0.0/8").unwrap();
        file.disallow(&id, "127.0.0.0/8").unwrap();
    });
    let (status, at) = until_ended(&mut quiet).await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("allow-list"),
        "{}",
        status.message()
    );
    let after = at.duration_since(changed_at);
    assert!(after <= BOUND, "ended {after:?} after the change");
}

/// `/healthz`'s `keys` object.
async fn keys_health(server: &TestServer) -> serde_json::Value {
    let reply = super::access_support::http_get(server.running.http_addr, "/healthz", None).await;
    let health: serde_json::Value = serde_json::from_str(&reply.text).unwrap();
    health["keys"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_or_deleted_keys_file_keeps_the_last_good_keys() {
    let node = live_node(600, 50, Duration::from_millis(20));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let good = std::fs::read(&server.keys_file).unwrap();
    let admitted = |server: &TestServer| {
        let key = server.key.clone();
        let addr = server.running.grpc_addr;
        async move {
            let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            proto::venue_l1_gateway_client::VenueL1GatewayClient::new(channel)
                .list_feeds(super::harness::with_key(proto::ListFeedsRequest {}, &key))
                .await
                .map(|_| ())
        }
    };
    assert_eq!(
        keys_health(&server).await["problem"],
        serde_json::Value::Null
    );
    for (what, damage) in [
        ("emptied", Some(Vec::new())),
        ("deleted", None),
        ("unparsable", Some(b"[[accounts]\nname = ".to_vec())),
    ] {
        match &damage {
            Some(bytes) => std::fs::write(&server.keys_file, bytes).unwrap(),
            None => std::fs::remove_file(&server.keys_file).unwrap(),
        }
        // Noticed within the reload interval, reported, and the key still
        // works.
        let started = Instant::now();
        let problem = loop {
            let keys = keys_health(&server).await;
            if let Some(problem) = keys["problem"].as_str() {
                break problem.to_owned();
            }
            assert!(started.elapsed() < BOUND, "{what}: never reported");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(!problem.contains(&server.key), "{what}: {problem}");
        assert_eq!(keys_health(&server).await["in_force"], 1, "{what}");
        admitted(&server)
            .await
            .unwrap_or_else(|s| panic!("{what}: the last good key was refused: {s:?}"));
        // A good file again: taken, the problem cleared.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&server.keys_file, &good).unwrap();
        let started = Instant::now();
        while !keys_health(&server).await["problem"].is_null() {
            assert!(
                started.elapsed() < BOUND,
                "{what}: the good file was not taken"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
