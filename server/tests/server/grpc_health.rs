//! gRPC health follows the data's freshness as `/healthz` judges it.

use std::time::{Duration, Instant};

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::access_support::http_get;
use super::harness::{TestServer, real};

const MARKET: &str = "venue_l1_gateway.v3.MarketStreaming";
const RAW_FEED: &str = "venue_l1_gateway.v3.VenueL1Gateway";

/// Polls the health of `service` until it is `want`, for up to 10 s.
async fn until_status(server: &TestServer, service: &str, want: ServingStatus) {
    let channel = server.channel().await;
    let mut client = HealthClient::new(channel);
    let started = Instant::now();
    loop {
        let status = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        if status == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{service:?} stayed {status:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn stale_data_is_not_serving_like_healthz() {
    // Captured mainnet files: their newest block is far older than 30 s.
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    assert_eq!(
        http_get(server.running.http_addr, "/healthz", None)
            .await
            .status,
        503
    );
    for service in ["", MARKET, RAW_FEED] {
        until_status(&server, service, ServingStatus::NotServing).await;
    }
}

#[tokio::test]
async fn fresh_data_is_serving_like_healthz() {
    // The same files judged against a bound of ten years are fresh.
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.max_data_age_ms = Some(10 * 365 * 24 * 3_600_000);
    })
    .await;
    assert_eq!(
        http_get(server.running.http_addr, "/healthz", None)
            .await
            .status,
        200
    );
    for service in ["", MARKET, RAW_FEED] {
        until_status(&server, service, ServingStatus::Serving).await;
    }
}
