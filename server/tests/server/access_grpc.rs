//! The gRPC edge's access control: UNAUTHENTICATED vs PERMISSION_DENIED vs
//! RESOURCE_EXHAUSTED, the per-account stream cap and its release, and hot
//! reload of revocations and allow-list changes on both edges.

use std::time::Duration;

use access::keys::KeysFile;
use proto::{ListFeedsRequest, StreamRequest};
use tonic::Code;

use super::access_support::{Gate, eventually, sample};
use super::harness::with_key;

#[tokio::test]
async fn unauthenticated_permission_denied_and_resource_exhausted_are_distinct() {
    let mut keys = KeysFile::default();
    let (good, _) = keys.add_key("alice", 0).unwrap();
    let (fenced, fenced_key) = keys.add_key("bob", 0).unwrap();
    keys.allow(&fenced_key.id, "10.0.0.0/8").unwrap();
    keys.accounts[0].requests_per_second = Some(1);
    keys.accounts[0].request_burst = Some(1);
    let gate = Gate::start(keys, |_| {}).await;
    let mut client = gate.client().await;

    let missing = client
        .list_feeds(tonic::Request::new(ListFeedsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    let wrong = client
        .list_feeds(with_key(ListFeedsRequest {}, "l1g_not_a_key"))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);
    assert!(wrong.message().contains("unknown or revoked"));

    let denied = client
        .list_feeds(with_key(ListFeedsRequest {}, &fenced))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("https://keys.example/allow-list"));
    assert!(denied.message().contains(&fenced_key.id));
    assert!(!denied.message().contains(&fenced));
    let denied_stream = client
        .stream_blocks(with_key(StreamRequest::default(), &fenced))
        .await
        .unwrap_err();
    assert_eq!(denied_stream.code(), Code::PermissionDenied);

    client
        .list_feeds(with_key(ListFeedsRequest {}, &good))
        .await
        .unwrap();
    let limited = client
        .list_feeds(with_key(ListFeedsRequest {}, &good))
        .await
        .unwrap_err();
    assert_eq!(limited.code(), Code::ResourceExhausted);
    assert!(
        limited
            .message()
            .contains("rate limit exceeded (not a key problem)")
    );

    let metrics = gate.metrics().await;
    for (series, n) in [
        ("l1gate_grpc_admissions_total{code=\"unauthenticated\"}", 2),
        (
            "l1gate_grpc_admissions_total{code=\"permission_denied\"}",
            2,
        ),
        (
            "l1gate_grpc_admissions_total{code=\"resource_exhausted\"}",
            1,
        ),
        ("l1gate_grpc_admissions_total{code=\"ok\"}", 1),
    ] {
        assert_eq!(sample(&metrics, series), n, "{series} in\n{metrics}");
    }
}

#[tokio::test]
async fn the_stream_cap_is_pooled_and_released_when_a_stream_ends() {
    let mut keys = KeysFile::default();
    let (first, first_key) = keys.add_key("streamer", 0).unwrap();
    let (second, _) = keys.add_key("streamer", 0).unwrap();
    keys.accounts[0].max_streams = Some(1);
    let gate = Gate::start(keys, |_| {}).await;
    let mut client = gate.client().await;

    let open = client
        .stream_blocks(with_key(StreamRequest::default(), &first))
        .await
        .unwrap();
    let refused = client
        .stream_fills(with_key(StreamRequest::default(), &second))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("1 concurrent streams"),
        "{}",
        refused.message()
    );
    // Market streams draw on the same pool.
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", gate.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let refused = proto::market_streaming_client::MarketStreamingClient::new(channel)
        .stream_all_fills(with_key(proto::v3::AllFillsRequest::default(), &second))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // Unary calls are not streams.
    client
        .list_feeds(with_key(ListFeedsRequest {}, &second))
        .await
        .unwrap();
    assert_eq!(
        sample(
            &gate.metrics().await,
            "l1gate_account_open_streams{account=\"streamer\"}"
        ),
        1
    );

    drop(open);
    eventually(Duration::from_secs(5), "the slot to be released", || {
        let mut client = client.clone();
        let second = second.clone();
        async move {
            client
                .stream_blocks(with_key(StreamRequest::default(), &second))
                .await
                .is_ok()
        }
    })
    .await;

    let metrics = gate.metrics().await;
    let opened = format!(
        "l1gate_key_streams_opened_total{{key_id=\"{}\",account=\"streamer\"}}",
        first_key.id
    );
    assert_eq!(sample(&metrics, &opened), 1, "{metrics}");
}

#[tokio::test]
async fn raw_feed_bytes_are_counted_per_key_and_feed() {
    let mut keys = KeysFile::default();
    let (key, stored) = keys.add_key("reader", 0).unwrap();
    let gate = Gate::start(keys, |_| {}).await;
    let mut client = gate.client().await;
    let lines = super::harness::real_lines("btc-985148182", "node_fills_by_block");
    let first = super::harness::block_number(&lines[0]) as i64;
    let request = StreamRequest {
        position: Some(proto::Position {
            kind: Some(proto::position::Kind::BlockNumber(first)),
        }),
        filter: None,
    };
    let mut stream = client
        .stream_fills(with_key(request, &key))
        .await
        .unwrap()
        .into_inner();
    let mut bytes = 0u64;
    for _ in 0..3 {
        let record = super::harness::next(&mut stream, Duration::from_secs(10))
            .await
            .unwrap();
        bytes += record.data.len() as u64;
    }
    let series = format!(
        "l1gate_key_stream_bytes_total{{key_id=\"{}\",account=\"reader\"}}",
        stored.id
    );
    let metrics = gate.metrics().await;
    assert!(sample(&metrics, &series) >= bytes, "{metrics}");
    assert!(
        sample(
            &metrics,
            "l1gate_raw_feed_records_sent_total{feed=\"fills\"}"
        ) >= 3
    );
    assert!(sample(&metrics, "l1gate_raw_feed_bytes_sent_total{feed=\"fills\"}") >= bytes);
    // Real data from the past: its age is positive.
    assert!(
        metrics.contains("l1gate_raw_feed_data_age_seconds{feed=\"fills\"} "),
        "{metrics}"
    );
}

#[tokio::test]
async fn revocation_and_allow_list_changes_apply_without_restart() {
    let mut keys = KeysFile::default();
    let (key, stored) = keys.add_key("alice", 0).unwrap();
    let (doomed, doomed_key) = keys.add_key("alice", 0).unwrap();
    let mut gate = Gate::start(keys, |_| {}).await;
    let client = gate.client().await;
    assert_eq!(gate.get("/v1/feeds", Some(&key)).await.status, 200);
    assert_eq!(gate.get("/v1/feeds", Some(&doomed)).await.status, 200);

    let unary = |key: String| {
        let mut client = client.clone();
        async move {
            client
                .list_feeds(with_key(ListFeedsRequest {}, &key))
                .await
                .map_or_else(|s| s.code(), |_| Code::Ok)
        }
    };

    gate.edit_keys(|file| file.revoke(&doomed_key.id).unwrap());
    eventually(
        Duration::from_secs(5),
        "the revoked key to get 401",
        || async { gate.get("/v1/feeds", Some(&doomed)).await.status == 401 },
    )
    .await;
    assert_eq!(unary(doomed.clone()).await, Code::Unauthenticated);
    assert_eq!(unary(key.clone()).await, Code::Ok);

    gate.edit_keys(|file| {
        file.allow(&stored.id, "10.0.0.0/8").unwrap();
    });
    eventually(
        Duration::from_secs(5),
        "the allow-list to fence the key",
        || async { gate.get("/v1/feeds", Some(&key)).await.status == 403 },
    )
    .await;
    assert_eq!(unary(key.clone()).await, Code::PermissionDenied);

    gate.edit_keys(|file| {
        file.allow(&stored.id, "127.0.0.0/8").unwrap();
    });
    eventually(Duration::from_secs(5), "loopback to be allowed", || async {
        gate.get("/v1/feeds", Some(&key)).await.status == 200
    })
    .await;
    assert_eq!(unary(key.clone()).await, Code::Ok);
}
