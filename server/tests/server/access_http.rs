//! The HTTP edge's access control over real HTTP: both key forms, 401 vs
//! 403 vs 429, pooled per-account limits, and what gets counted.

use access::keys::KeysFile;

use super::access_support::{Gate, sample};

#[tokio::test]
async fn path_and_header_keys_are_the_same_key_and_bad_keys_get_401() {
    let mut keys = KeysFile::default();
    let (key, stored) = keys.add_key("alice", 0).unwrap();
    let gate = Gate::start(keys, |_| {}).await;

    let by_path = gate.get(&format!("/{key}/v1/feeds"), None).await;
    assert_eq!(by_path.status, 200, "{}", by_path.text);
    let by_header = gate.get("/v1/feeds", Some(&key)).await;
    assert_eq!(by_header.status, 200, "{}", by_header.text);
    assert_eq!(by_path.json(), by_header.json());
    let feeds = by_path.json();
    let ids: Vec<&str> = feeds["feeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"blocks") && ids.contains(&"orderbook_snapshots"),
        "{ids:?}"
    );
    // Both forms at once must agree.
    assert_eq!(
        gate.get(&format!("/{key}/v1/feeds"), Some(&key))
            .await
            .status,
        200
    );

    let wrong = "l1g_0000000000000000000000000000000000000000000000000000000000000000";
    for reply in [
        gate.get("/v1/feeds", None).await,
        gate.get("/v1/feeds", Some(wrong)).await,
        gate.get(&format!("/{wrong}/v1/feeds"), None).await,
        gate.get(&format!("/{key}/v1/feeds"), Some(wrong)).await,
    ] {
        assert_eq!(reply.status, 401, "{}", reply.text);
        let body = reply.json();
        assert!(
            body["error"] == "missing_key" || body["error"] == "rejected_key",
            "{body}"
        );
        assert!(!reply.text.contains(&key) && !reply.text.contains(wrong));
    }
    assert_eq!(
        gate.get("/v1/feeds", None).await.json()["error"],
        "missing_key"
    );

    let metrics = gate.metrics().await;
    let series = format!(
        "l1gate_key_requests_total{{key_id=\"{}\",account=\"alice\"}}",
        stored.id
    );
    assert_eq!(sample(&metrics, &series), 3, "{metrics}");
    assert!(sample(&metrics, "l1gate_http_responses_total{status=\"200\"}") >= 3);
    assert_eq!(
        sample(&metrics, "l1gate_http_responses_total{status=\"401\"}"),
        5
    );
    assert!(!metrics.contains(&key) && !metrics.contains(&stored.sha256));
}

#[tokio::test]
async fn the_request_rate_is_pooled_across_an_accounts_keys_and_says_so() {
    let mut keys = KeysFile::default();
    let (first, _) = keys.add_key("pool", 0).unwrap();
    let (second, _) = keys.add_key("pool", 0).unwrap();
    let (other, _) = keys.add_key("other", 0).unwrap();
    keys.accounts[0].requests_per_second = Some(1);
    keys.accounts[0].request_burst = Some(3);
    let gate = Gate::start(keys, |_| {}).await;
    // Connected up front: the whole exchange must fit in the one second
    // after which the account earns its next request.
    let mut client = gate.client().await;

    assert_eq!(gate.get("/v1/feeds", Some(&first)).await.status, 200);
    assert_eq!(
        gate.get(&format!("/{second}/v1/feeds"), None).await.status,
        200
    );
    assert_eq!(gate.get("/v1/feeds", Some(&first)).await.status, 200);
    let limited = gate.get("/v1/feeds", Some(&second)).await;
    assert_eq!(limited.status, 429, "{}", limited.text);
    assert_eq!(limited.retry_after.as_deref(), Some("1"));
    let body = limited.json();
    assert_eq!(body["error"], "rate_limited");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not a key problem")
    );
    assert_eq!(
        gate.get(&format!("/{first}/v1/feeds"), None).await.status,
        429
    );
    // The pool is shared with gRPC unary calls of the same account.
    let status = client
        .list_feeds(super::harness::with_key(proto::ListFeedsRequest {}, &first))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status.message().contains("rate limit"),
        "{}",
        status.message()
    );
    // Another account is not affected.
    assert_eq!(gate.get("/v1/feeds", Some(&other)).await.status, 200);
}

#[tokio::test]
async fn a_source_outside_the_allow_list_gets_403_with_the_link_and_is_not_counted() {
    let mut keys = KeysFile::default();
    let (restricted, restricted_key) = keys.add_key("guarded", 0).unwrap();
    let (open, _) = keys.add_key("guarded", 0).unwrap();
    keys.allow(&restricted_key.id, "10.0.0.0/8").unwrap();
    keys.allow(&restricted_key.id, "2001:db8::/32").unwrap();
    keys.accounts[0].requests_per_second = Some(1);
    keys.accounts[0].request_burst = Some(1);
    let gate = Gate::start(keys, |_| {}).await;

    for path in ["/v1/feeds".to_owned(), format!("/{restricted}/v1/feeds")] {
        for _ in 0..3 {
            let key = path.starts_with("/v1").then_some(restricted.as_str());
            let reply = gate.get(&path, key).await;
            assert_eq!(reply.status, 403, "{}", reply.text);
            let body = reply.json();
            assert_eq!(body["error"], "forbidden");
            assert_eq!(body["allow_list_url"], "https://keys.example/allow-list");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains("127.0.0.1") && message.contains(&restricted_key.id));
            assert!(!reply.text.contains(&restricted));
        }
    }
    // Six refusals took nothing from the account's burst of one.
    assert_eq!(gate.get("/v1/feeds", Some(&open)).await.status, 200);
    assert_eq!(gate.get("/v1/feeds", Some(&open)).await.status, 429);

    let metrics = gate.metrics().await;
    let series = format!(
        "l1gate_key_requests_total{{key_id=\"{}\",account=\"guarded\"}}",
        restricted_key.id
    );
    assert_eq!(sample(&metrics, &series), 0, "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "l1gate_access_rejections_total{edge=\"http\",reason=\"forbidden\"}"
        ),
        6
    );
    assert_eq!(
        sample(&metrics, "l1gate_http_responses_total{status=\"403\"}"),
        6
    );
    assert_eq!(
        sample(&metrics, "l1gate_http_responses_total{status=\"429\"}"),
        1
    );
}

#[tokio::test]
async fn health_and_metrics_need_no_key_and_unknown_routes_are_404() {
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    let gate = Gate::start(keys, |_| {}).await;
    // The capture is months old: stale by the default bound, and says so.
    let health = gate.get("/healthz", None).await;
    assert_eq!(health.status, 503, "{}", health.text);
    assert_eq!(health.json()["status"], "stale");
    let metrics = gate.metrics().await;
    assert!(metrics.contains("# TYPE l1gate_http_responses counter"));
    // An authenticated but unknown route is a 404.
    assert_eq!(gate.get(&format!("/{key}/v2/nope"), None).await.status, 404);
    assert_eq!(gate.get("/v2/nope", Some(&key)).await.status, 404);
    // Other paths under /v1 belong to the node gateway (not configured here).
    let relayed = gate.get("/v1/nope", Some(&key)).await;
    assert_eq!(relayed.status, 503, "{}", relayed.text);
    assert_eq!(relayed.json()["error_code"], "no_node_upstream");
}

#[tokio::test]
async fn ipv6_peers_are_matched_against_ipv6_networks_on_both_edges() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine; IPv6 matching is covered by unit tests");
        return;
    }
    let mut keys = KeysFile::default();
    let (loopback, loopback_key) = keys.add_key("six", 0).unwrap();
    let (elsewhere, elsewhere_key) = keys.add_key("six", 0).unwrap();
    let (v4_only, v4_key) = keys.add_key("six", 0).unwrap();
    keys.allow(&loopback_key.id, "::1/128").unwrap();
    keys.allow(&elsewhere_key.id, "2001:db8::/32").unwrap();
    keys.allow(&v4_key.id, "127.0.0.0/8").unwrap();
    let gate = Gate::start(keys, |args| {
        args.http_addr = Some("[::1]:0".parse().unwrap());
        args.grpc_addr = Some("[::1]:0".parse().unwrap());
    })
    .await;

    assert_eq!(gate.get("/v1/feeds", Some(&loopback)).await.status, 200);
    let fenced = gate.get(&format!("/{elsewhere}/v1/feeds"), None).await;
    assert_eq!(fenced.status, 403, "{}", fenced.text);
    assert!(fenced.json()["message"].as_str().unwrap().contains("::1"));
    assert_eq!(gate.get("/v1/feeds", Some(&v4_only)).await.status, 403);

    let mut client = gate.client().await;
    let call = |key: &str| super::harness::with_key(proto::ListFeedsRequest {}, key);
    client.list_feeds(call(&loopback)).await.unwrap();
    let denied = client.list_feeds(call(&elsewhere)).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
}
