//! Compression where bytes travel far: gRPC raw-feed records sent with
//! zstd or gzip to a client that accepts it (the same records once
//! decoded; gzip only while `raw_feed_gzip` is on), compressed requests accepted on both services, and HTTP
//! answers compressed for clients that ask (curl), up to a size bound.

use std::time::Duration;

use access::keys::KeysFile;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use proto::{Record, StreamRequest};
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use crate::server::access_support::Gate;
use crate::server::harness::with_key;

async fn gate() -> (Gate, String) {
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    (Gate::start(keys, |_| {}).await, key)
}

async fn channel(gate: &Gate) -> Channel {
    Channel::from_shared(format!("http://{}", gate.running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The capture's first 20 fills records, and the encoding they came in.
async fn fills(
    client: &mut VenueL1GatewayClient<Channel>,
    key: &str,
) -> (Vec<Record>, Option<String>) {
    let request = StreamRequest {
        position: Some(proto::Position {
            kind: Some(proto::position::Kind::BlockNumber(985_148_182)),
        }),
        filter: None,
    };
    let response = client.stream_fills(with_key(request, key)).await.unwrap();
    let encoding = response
        .metadata()
        .get("grpc-encoding")
        .map(|value| value.to_str().unwrap().to_owned());
    let mut stream = response.into_inner();
    let mut records = Vec::new();
    while records.len() < 20 {
        let record = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a record within 10 s")
            .unwrap()
            .expect("the stream goes on");
        records.push(record);
    }
    (records, encoding)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_feed_records_are_the_same_compressed_or_not() {
    let (gate, key) = gate().await;
    let channel = channel(&gate).await;
    let (plain, none) = fills(&mut VenueL1GatewayClient::new(channel.clone()), &key).await;
    assert_eq!(
        none, None,
        "nothing compressed for a client that asked nothing"
    );
    for (encoding, name) in [
        (CompressionEncoding::Zstd, "zstd"),
        (CompressionEncoding::Gzip, "gzip"),
    ] {
        let mut client = VenueL1GatewayClient::new(channel.clone())
            .accept_compressed(encoding)
            .send_compressed(encoding);
        let (records, used) = fills(&mut client, &key).await;
        assert_eq!(used.as_deref(), Some(name));
        assert_eq!(records, plain, "{name}: the same records once decoded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_feed_gzip_can_be_turned_off_and_zstd_stays() {
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    let gate = Gate::start(keys, |args| args.raw_feed_gzip = Some(false)).await;
    let channel = channel(&gate).await;
    let (plain, _) = fills(&mut VenueL1GatewayClient::new(channel.clone()), &key).await;
    // As gRPC's C-core and Java clients ask: gzip accepted, never chosen.
    let mut client =
        VenueL1GatewayClient::new(channel.clone()).accept_compressed(CompressionEncoding::Gzip);
    let (records, used) = fills(&mut client, &key).await;
    assert_eq!(used, None, "gzip is not sent with raw_feed_gzip off");
    assert_eq!(records, plain);
    let mut client =
        VenueL1GatewayClient::new(channel).accept_compressed(CompressionEncoding::Zstd);
    let (records, used) = fills(&mut client, &key).await;
    assert_eq!(used.as_deref(), Some("zstd"));
    assert_eq!(records, plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn market_streams_accept_compressed_requests() {
    let (gate, key) = gate().await;
    let mut client =
        proto::market_streaming_client::MarketStreamingClient::new(channel(&gate).await)
            .send_compressed(CompressionEncoding::Gzip);
    let response = client
        .stream_bbo(with_key(
            proto::BboRequest {
                coins: vec!["BTC".into()],
            },
            &key,
        ))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), response.into_inner().message())
        .await
        .expect("the opening within 10 s")
        .unwrap()
        .expect("an opening frame");
    assert_eq!(first.coin, "BTC");
}

/// The first frames of an L2 book stream of BTC from a client accepting
/// zstd, and the encoding they came in.
async fn l2_frames(gate: &Gate, key: &str) -> (Vec<proto::L2BookUpdate>, Option<String>) {
    let mut client =
        proto::market_streaming_client::MarketStreamingClient::new(channel(gate).await)
            .accept_compressed(CompressionEncoding::Zstd);
    let response = client
        .stream_l2_book(with_key(
            proto::L2BookRequest {
                coin: "BTC".into(),
                ..proto::L2BookRequest::default()
            },
            key,
        ))
        .await
        .unwrap();
    let encoding = response
        .metadata()
        .get("grpc-encoding")
        .map(|value| value.to_str().unwrap().to_owned());
    let first = tokio::time::timeout(Duration::from_secs(10), response.into_inner().message())
        .await
        .expect("the opening within 10 s")
        .unwrap()
        .expect("an opening frame");
    (vec![first], encoding)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn market_frames_are_compressed_only_with_market_compression() {
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    let off = Gate::start(keys.clone(), |_| {}).await;
    let (plain, none) = l2_frames(&off, &key).await;
    assert_eq!(none, None, "frames go uncompressed by default");
    let on = Gate::start(keys, |args| args.market_compression = Some(true)).await;
    let (packed, used) = l2_frames(&on, &key).await;
    assert_eq!(used.as_deref(), Some("zstd"));
    assert_eq!(packed, plain, "the same opening once decoded");
    assert!(!plain[0].bids.is_empty());
}

/// curl's response headers (lowercased) and body for `url` with
/// `Accept-Encoding: encoding`.
fn curl(url: &str, encoding: Option<&str>, decode: bool) -> (String, Vec<u8>) {
    let mut command = std::process::Command::new("curl");
    command.args(["-s", "-D", "-", "--max-time", "10"]);
    if let Some(encoding) = encoding {
        command.args(["-H", &format!("Accept-Encoding: {encoding}")]);
    }
    if decode {
        command.arg("--compressed");
    }
    let out = command
        .arg(url)
        .output()
        .expect("curl (Debian package curl) must be installed for the compression tests");
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers and a body");
    (
        String::from_utf8_lossy(&out.stdout[..split]).to_ascii_lowercase(),
        out.stdout[split + 4..].to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_are_compressed_for_clients_that_ask() {
    let (gate, key) = gate().await;
    let url = format!("http://{}/{key}/v1/feeds", gate.running.http_addr);
    let (headers, plain) = curl(&url, None, false);
    assert!(!headers.contains("content-encoding"), "{headers}");
    let listed: serde_json::Value = serde_json::from_slice(&plain).unwrap();
    assert!(listed["feeds"].as_array().is_some_and(|f| !f.is_empty()));

    let (headers, gzipped) = curl(&url, Some("gzip"), false);
    assert!(headers.contains("content-encoding: gzip"), "{headers}");
    assert_ne!(gzipped, plain);
    let (_, decoded) = curl(&url, Some("gzip"), true);
    assert_eq!(decoded, plain, "gzip decodes to the same answer");

    let (headers, _) = curl(&url, Some("zstd"), false);
    assert!(headers.contains("content-encoding: zstd"), "{headers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_past_the_size_bound_go_as_they_are() {
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    // The default bound compresses the feeds listing (above); a bound
    // below its size leaves it as it is, and 0 leaves every answer.
    for bound in [64, 0] {
        let gate = Gate::start(keys.clone(), |args| {
            args.http_compress_max_bytes = Some(bound);
        })
        .await;
        let url = format!("http://{}/{key}/v1/feeds", gate.running.http_addr);
        let (_, plain) = curl(&url, None, false);
        assert!(plain.len() > 64, "{} bytes", plain.len());
        for encoding in ["gzip", "zstd"] {
            let (headers, body) = curl(&url, Some(encoding), false);
            assert!(
                !headers.contains("content-encoding"),
                "bound {bound}, {encoding}: {headers}"
            );
            assert_eq!(body, plain, "bound {bound}, {encoding}");
        }
    }
    // A small answer under a bound it fits is still compressed.
    let gate = Gate::start(keys, |args| {
        args.http_compress_max_bytes = Some(1 << 20);
    })
    .await;
    let url = format!("http://{}/{key}/v1/feeds", gate.running.http_addr);
    let (headers, _) = curl(&url, Some("gzip"), false);
    assert!(headers.contains("content-encoding: gzip"), "{headers}");
}
