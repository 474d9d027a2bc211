//! Hostile connections: slowloris and idle HTTP connections are closed by
//! their timeouts; a flood of connections from one address is capped, and
//! clients from other addresses are still served on both edges.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

use super::access_support::sample;
use super::harness::{TestServer, real, with_key};

/// A TCP connection to `addr` from the loopback address `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Whether the server closes `stream` within `within` (reads until EOF or
/// an error, discarding what arrives).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// `GET /healthz` over a fresh connection from `from`: the status line.
async fn healthz_from(from: &str, addr: SocketAddr) -> String {
    let mut stream = connect_from(from, addr).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: l1gate.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_connection_is_cut_by_the_header_timeout() {
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.http_header_timeout_ms = Some(500);
        args.http_idle_timeout_ms = Some(60_000);
    })
    .await;
    let addr = server.running.http_addr;
    // Headers one byte every 100 ms, never finished: bytes keep moving, so
    // only the header timeout can end it.
    let mut slow = connect_from("127.0.0.1", addr).await;
    slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if slow.write_all(b"X").await.is_err() {
            break;
        }
    }
    assert!(
        closed_within(&mut slow, Duration::from_millis(500)).await,
        "a slowloris connection was still open after {:?}",
        started.elapsed()
    );
    assert!(
        healthz_from("127.0.0.1", addr)
            .await
            .starts_with("HTTP/1.1 ")
    );
    let metrics = super::slow_subscribers::metrics(&server).await;
    let series = "l1gate_http_connections_timed_out_total{reason=\"header\"}";
    assert!(sample(&metrics, series) >= 1, "{series}\n{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http_connections_are_closed() {
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.http_header_timeout_ms = Some(30_000);
        args.http_idle_timeout_ms = Some(1_000);
    })
    .await;
    let addr = server.running.http_addr;
    // A connection that sends nothing, and a keep-alive one after its
    // answer.
    let mut silent = connect_from("127.0.0.1", addr).await;
    let mut kept = connect_from("127.0.0.1", addr).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: l1gate.test\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(closed_within(&mut kept, Duration::from_secs(3)).await);
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "closed before the idle timeout: {:?}",
        started.elapsed()
    );
    assert!(
        healthz_from("127.0.0.1", addr)
            .await
            .starts_with("HTTP/1.1 ")
    );
    let metrics = super::slow_subscribers::metrics(&server).await;
    let series = "l1gate_http_connections_timed_out_total{reason=\"idle\"}";
    assert!(sample(&metrics, series) >= 2, "{series}\n{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_from_one_address_leaves_other_clients_served() {
    const PER_IP: usize = 20;
    let server = TestServer::start(&real("btc-985148182"), |args| {
        args.max_connections_per_ip = Some(PER_IP);
    })
    .await;
    let http = server.running.http_addr;
    let grpc = server.running.grpc_addr;
    // The flood: idle connections from 127.0.0.1 to both edges.
    let mut flood = Vec::new();
    for i in 0..(PER_IP + 30) {
        let edge = if i % 2 == 0 { http } else { grpc };
        flood.push(connect_from("127.0.0.1", edge).await);
    }
    let mut closed = 0;
    for stream in &mut flood {
        if closed_within(stream, Duration::from_millis(200)).await {
            closed += 1;
        }
    }
    assert_eq!(
        closed, 30,
        "every connection over the cap is closed at once"
    );
    // Another address is served on both edges.
    assert!(
        healthz_from("127.0.0.2", http)
            .await
            .starts_with("HTTP/1.1 "),
        "HTTP from another address"
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .local_address(Some("127.0.0.2".parse::<IpAddr>().unwrap()))
        .connect()
        .await
        .unwrap();
    proto::venue_l1_gateway_client::VenueL1GatewayClient::new(channel)
        .list_feeds(with_key(proto::ListFeedsRequest {}, &server.key))
        .await
        .expect("gRPC from another address");
    let metrics = {
        // Read from another address: 127.0.0.1 is at its cap.
        let mut stream = connect_from("127.0.0.2", http).await;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: l1gate.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let refused: u64 = ["http", "grpc"]
        .iter()
        .map(|edge| {
            sample(
                &metrics,
                &format!(
                    "l1gate_connections_refused_total{{edge=\"{edge}\",limit=\"max_connections_per_ip\"}}"
                ),
            )
        })
        .sum();
    assert_eq!(refused, 30, "{metrics}");
    // Freed places are usable again.
    flood.clear();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        healthz_from("127.0.0.1", http)
            .await
            .starts_with("HTTP/1.1 ")
    );
}
