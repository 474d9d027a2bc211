//! Per-key usage quotas on a real server: an exhausted request quota is
//! refused on every edge with a message naming the quota and its reset; a
//! byte quota ends the key's open streams and refuses new ones; refused
//! requests are not counted; usage survives a restart on the same state
//! directory; and it starts from zero at the period boundary, judged by an
//! injected clock.

use std::time::{Duration, Instant};

use access::clock::Clock;
use access::keys::KeysFile;
use access::quota::{Period, Quota};
use futures_util::SinkExt as _;
use proto::{ListFeedsRequest, StreamRequest};
use tokio_tungstenite::tungstenite::Message;
use tonic::Code;

use super::access_rotation::{noon, ws_closed, ws_connect};
use super::access_support::{Gate, eventually, sample};
use super::harness::{end_status, from_block, next, with_key};

const WAIT: Duration = Duration::from_secs(30);

fn at(text: &str) -> i64 {
    feeds::time::parse_iso8601_ms(text).unwrap()
}

/// A keys file with one key of account `alice` under `quota`.
fn keys_with(quota: Quota) -> (KeysFile, String, String) {
    let mut keys = KeysFile::default();
    let (key, stored) = keys.add_key("alice", 0).unwrap();
    keys.set_quota(&stored.id, Some(quota)).unwrap();
    (keys, key, stored.id)
}

fn requests_per_day(n: u64) -> Quota {
    Quota {
        period: Period::Day,
        requests: Some(n),
        bytes: None,
    }
}

/// The key's requests this period, as the status-page report has them.
fn requests_used(gate: &Gate, key_id: &str) -> u64 {
    gate.running
        .usage
        .report()
        .keys
        .iter()
        .find(|k| k.key_id == key_id)
        .map_or(0, |k| k.requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_request_quota_is_refused_on_every_edge_naming_the_quota() {
    let clock = Clock::manual(noon());
    let (keys, key, id) = keys_with(requests_per_day(3));
    let gate = Gate::start_with_clock(keys, clock, |_| {}).await;
    let mut client = gate.client().await;
    // One request per edge: HTTP, a gRPC call, a WebSocket connection.
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    client
        .list_feeds(with_key(ListFeedsRequest {}, &key))
        .await
        .unwrap();
    let mut socket = ws_connect(&gate, &key).await.unwrap();
    assert_eq!(requests_used(&gate, &id), 3);

    let refused = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    // Noon: twelve hours until the day's usage resets.
    assert_eq!(refused.retry_after.as_deref(), Some("43200"));
    let body = refused.json();
    assert_eq!(body["error"], "quota_exceeded");
    assert_eq!(body["quota"]["kind"], "requests");
    assert_eq!(body["quota"]["limit"], 3);
    assert_eq!(body["quota"]["period"], "day");
    assert_eq!(body["quota"]["resets_at"], "2026-05-06T00:00:00Z");
    let message = body["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "usage quota exhausted (not a key problem): key {id} has used its daily request \
             quota of 3 requests; usage resets at 2026-05-06T00:00:00Z"
        )
    );
    assert!(!message.contains("rate limit"));

    for status in [
        client
            .list_feeds(with_key(ListFeedsRequest {}, &key))
            .await
            .unwrap_err(),
        client
            .stream_fills(with_key(StreamRequest::default(), &key))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("quota"), "{}", status.message());
        assert!(status.message().contains("2026-05-06T00:00:00Z"));
    }

    // A new WebSocket connection is refused before the upgrade; on the one
    // open, a subscription is refused with an error message and the
    // connection stays up.
    let (status, body) = ws_connect(&gate, &key).await.err().unwrap();
    assert_eq!(status, 429);
    assert!(body.contains("quota_exceeded"), "{body}");
    socket
        .send(Message::Text(
            r#"{"method":"subscribe","subscription":{"type":"bbo","coin":"BTC"}}"#.into(),
        ))
        .await
        .unwrap();
    socket
        .send(Message::Text(r#"{"method":"ping"}"#.into()))
        .await
        .unwrap();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        match tokio::time::timeout(WAIT, futures_util::StreamExt::next(&mut socket)).await {
            Ok(Some(Ok(Message::Text(text)))) => answers.push(text.to_string()),
            Ok(Some(Ok(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    let error: serde_json::Value = serde_json::from_str(&answers[0]).unwrap();
    assert_eq!(error["channel"], "error", "{answers:?}");
    assert!(
        error["data"]
            .as_str()
            .unwrap()
            .contains("daily request quota of 3 requests"),
        "{error}"
    );
    assert_eq!(answers[1], r#"{"channel":"pong"}"#, "pings are free");

    // None of the refusals counted.
    assert_eq!(requests_used(&gate, &id), 3);
    let metrics = gate.metrics().await;
    for edge in ["http", "grpc", "websocket"] {
        let series =
            format!("l1gate_access_rejections_total{{edge=\"{edge}\",reason=\"quota_exceeded\"}}");
        assert!(sample(&metrics, &series) >= 1, "{series} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_are_not_counted() {
    let clock = Clock::manual(noon());
    let mut keys = KeysFile::default();
    let (key, stored) = keys.add_key("alice", 0).unwrap();
    let (fenced, fenced_stored) = keys.add_key("alice", 0).unwrap();
    keys.set_quota(&stored.id, Some(requests_per_day(2)))
        .unwrap();
    keys.set_quota(&fenced_stored.id, Some(requests_per_day(1)))
        .unwrap();
    keys.allow(&fenced_stored.id, "10.0.0.0/8").unwrap();
    keys.accounts[0].requests_per_second = Some(1);
    keys.accounts[0].request_burst = Some(1);
    let gate = Gate::start_with_clock(keys, clock, |_| {}).await;

    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    let limited = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(limited.status, 429);
    assert_eq!(limited.json()["error"], "rate_limited");
    for _ in 0..3 {
        assert_eq!(gate.get("/v1/feeds", Some(&fenced)).await.status, 403);
    }
    assert_eq!(
        gate.get("/v1/feeds", Some("l1g_not_a_key")).await.status,
        401
    );
    assert_eq!(requests_used(&gate, &stored.id), 1);
    assert_eq!(requests_used(&gate, &fenced_stored.id), 0);
    // The rate-limited request did not use the second request of the day.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let refused = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(
        refused.json()["error"],
        "quota_exceeded",
        "{}",
        refused.text
    );
    assert_eq!(requests_used(&gate, &stored.id), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_quota_ends_the_keys_open_streams_and_refuses_new_ones() {
    let clock = Clock::manual(at("2026-05-20T08:00:00Z"));
    let (keys, key, id) = keys_with(Quota {
        period: Period::Month,
        requests: None,
        bytes: Some(1_000_000),
    });
    let gate = Gate::start_with_clock(keys, clock, |args| {
        args.idle_timeout_ms = Some(600_000);
    })
    .await;
    let mut client = gate.client().await;
    // Open before the quota is used up: a quiet stream and a WebSocket
    // connection.
    let mut quiet = client
        .stream_fills(with_key(StreamRequest::default(), &key))
        .await
        .unwrap()
        .into_inner();
    let mut socket = ws_connect(&gate, &key).await.unwrap();
    // The capture's order statuses are 19 MB: the stream uses up 1 MB.
    let mut stream = client
        .stream_order_statuses(with_key(from_block(1), &key))
        .await
        .unwrap()
        .into_inner();
    let mut received = 0usize;
    let started = Instant::now();
    let status = loop {
        match next(&mut stream, WAIT).await {
            Ok(record) => received += record.data.len(),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let quota_message = |message: &str| {
        message.contains(&format!(
            "key {id} has used its monthly byte quota of 1MB sent; usage resets at \
             2026-06-01T00:00:00Z"
        ))
    };
    assert!(quota_message(status.message()), "{}", status.message());
    assert!(received >= 1_000_000 - 200_000, "received {received} bytes");
    let report = gate.running.usage.report();
    let used = report.keys.iter().find(|k| k.key_id == id).unwrap();
    assert!(used.bytes >= 1_000_000, "{used:?}");
    assert_eq!(used.period_end_ms, at("2026-06-01T00:00:00Z"));

    // The key's other stream and its WebSocket connection end too.
    let quiet_status = end_status(&mut quiet, WAIT).await;
    assert_eq!(
        quiet_status.code(),
        Code::ResourceExhausted,
        "{quiet_status:?}"
    );
    assert!(
        quota_message(quiet_status.message()),
        "{}",
        quiet_status.message()
    );
    let ((code, reason), _) = ws_closed(&mut socket).await;
    assert_eq!(code, 4003, "{reason}");
    assert!(reason.contains("quota"), "{reason}");
    assert!(started.elapsed() < WAIT);

    // New streams, calls and requests are refused.
    let refused = client
        .stream_order_statuses(with_key(from_block(1), &key))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(quota_message(refused.message()), "{}", refused.message());
    let reply = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.json()["quota"]["kind"], "bytes");
    assert!(reply.retry_after.is_some());
    let metrics = gate.metrics().await;
    assert!(
        metrics.contains("reason=\"quota\""),
        "stream ends are counted:\n{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_survives_a_restart_on_the_same_state_dir() {
    let clock = Clock::manual(noon());
    let (keys, key, id) = keys_with(requests_per_day(4));
    let gate = Gate::start_with_clock(keys, clock, |_| {}).await;
    for _ in 0..3 {
        assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    }
    let gate = gate.restart().await;
    let file = gate.state_dir().join("usage.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(saved["keys"][&id]["requests"], 3, "{saved}");
    assert_eq!(requests_used(&gate, &id), 3);
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    let refused = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["error"], "quota_exceeded");

    // Written every few seconds while serving, not only at shutdown.
    eventually(
        Duration::from_secs(10),
        "usage.json holds the 4th request",
        || {
            let file = file.clone();
            let id = id.clone();
            async move {
                std::fs::read_to_string(&file).is_ok_and(|text| {
                    serde_json::from_str::<serde_json::Value>(&text)
                        .is_ok_and(|saved| saved["keys"][&id]["requests"] == 4)
                })
            }
        },
    )
    .await;

    // A damaged file is reported, set aside and ignored: usage starts from
    // zero.
    let gate = gate
        .restart_with(|| std::fs::write(&file, b"{\"version\": 1, \"keys\": {").unwrap())
        .await;
    assert_eq!(requests_used(&gate, &id), 0);
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    assert!(gate.state_dir().join("usage.json.damaged").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_starts_from_zero_at_the_period_boundary() {
    let clock = Clock::manual(at("2026-05-05T23:59:58Z"));
    let (keys, key, id) = keys_with(requests_per_day(2));
    let gate = Gate::start_with_clock(keys, clock.clone(), |_| {}).await;
    let mut client = gate.client().await;
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    client
        .list_feeds(with_key(ListFeedsRequest {}, &key))
        .await
        .unwrap();
    let refused = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.retry_after.as_deref(), Some("2"));
    assert_eq!(refused.json()["quota"]["resets_at"], "2026-05-06T00:00:00Z");
    clock.advance(Duration::from_secs(2));
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    client
        .list_feeds(with_key(ListFeedsRequest {}, &key))
        .await
        .unwrap();
    let refused = client
        .list_feeds(with_key(ListFeedsRequest {}, &key))
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("2026-05-07T00:00:00Z"),
        "{}",
        refused.message()
    );
    let report = gate.running.usage.report();
    let used = report.keys.iter().find(|k| k.key_id == id).unwrap();
    assert_eq!(used.requests, 2);
    assert_eq!(used.period_start_ms, at("2026-05-06T00:00:00Z"));
}
