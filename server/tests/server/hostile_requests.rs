//! Hostile gRPC requests: bytes that are not the request message, and
//! oversized input in fields that error messages quote. Each gets
//! INVALID_ARGUMENT with a short message; the server stays up.

use std::time::Duration;

use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use proto::{FieldFilter, Filter, Position, StreamRequest, position};
use tonic::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;

use super::harness::{TestServer, from_block, next, real};

/// Sends raw bytes as the request; decodes nothing (the answers here are
/// errors).
#[derive(Debug, Clone, Default)]
struct RawBytes;

impl Codec for RawBytes {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawBytes;
    type Decoder = RawBytes;

    fn encoder(&mut self) -> Self::Encoder {
        RawBytes
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawBytes
    }
}

impl Encoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawBytes {
    type Item = ();
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf as _;
        buf.advance(buf.remaining());
        Ok(Some(()))
    }
}

/// Calls `path` with `bytes` as the request body; the status it ends with.
async fn call_raw(server: &TestServer, path: &'static str, bytes: Vec<u8>) -> tonic::Status {
    let channel = server.channel().await;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let answer = grpc
        .server_streaming(server.req(bytes), PathAndQuery::from_static(path), RawBytes)
        .await;
    match answer {
        Err(status) => status,
        Ok(response) => {
            let mut stream = response.into_inner();
            loop {
                match stream.message().await {
                    Err(status) => break status,
                    Ok(Some(())) => {}
                    Ok(None) => panic!("{path}: the stream ended without a status"),
                }
            }
        }
    }
}

/// A raw-feed request from block 1 with one filter field.
fn filtered(field: String, values: Vec<String>) -> StreamRequest {
    StreamRequest {
        position: Some(Position {
            kind: Some(position::Kind::BlockNumber(1)),
        }),
        filter: Some(Filter {
            fields: vec![FieldFilter {
                field,
                op: 0,
                values,
            }],
        }),
    }
}

#[tokio::test]
async fn undecodable_requests_are_invalid_argument() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    // A length-delimited field whose length runs past the end; a field with
    // wire type 7 (no such type).
    for bytes in [vec![0x0a, 0x7f, 0x01], vec![0x0f, 0x00]] {
        for path in [
            "/venue_l1_gateway.v3.VenueL1Gateway/StreamFills",
            "/venue_l1_gateway.v3.MarketStreaming/StreamBbo",
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Watch",
        ] {
            let status = call_raw(&server, path, bytes.clone()).await;
            assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
            assert!(
                status.message().contains("not a valid"),
                "{path}: {}",
                status.message()
            );
        }
    }
    // The server still answers.
    let mut client = server.client().await;
    client
        .list_feeds(server.req(proto::ListFeedsRequest {}))
        .await
        .unwrap();
}

#[tokio::test]
async fn quoted_input_is_bounded() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    super::market_live::ready(&server).await;
    let huge = "X".repeat(3 << 20);
    let channel = server.channel().await;
    let mut market = MarketStreamingClient::new(channel).max_encoding_message_size(8 << 20);
    let status = market
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec![huge.clone()],
        }))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().len() < 200,
        "{} bytes",
        status.message().len()
    );
    assert!(
        status
            .message()
            .contains(&format!("({} bytes)", huge.len())),
        "{}",
        status.message()
    );
    let status = market
        .stream_candle(server.req(pb::CandleRequest {
            coin: "BTC".into(),
            interval: huge.clone(),
        }))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().len() < 300,
        "{} bytes",
        status.message().len()
    );

    let mut raw = server.client().await.max_encoding_message_size(8 << 20);
    let status = raw
        .stream_fills(server.req(filtered(huge.clone(), vec!["x".into()])))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().len() < 600,
        "{} bytes",
        status.message().len()
    );
    // A well-formed stream still works afterwards.
    let mut fills = raw
        .stream_fills(server.req(from_block(1)))
        .await
        .unwrap()
        .into_inner();
    next(&mut fills, Duration::from_secs(30)).await.unwrap();
}

#[tokio::test]
async fn lists_past_their_bound_are_refused_naming_the_field() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    super::market_live::ready(&server).await;
    let many: Vec<String> = (0..100_000).map(|n| format!("C{n}")).collect();
    let channel = server.channel().await;
    let mut market = MarketStreamingClient::new(channel).max_encoding_message_size(8 << 20);
    let status = market
        .stream_all_fills(server.req(pb::AllFillsRequest {
            coins: many.clone(),
        }))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(status.message(), "coins: at most 1000 entries, got 100000");
    let status = market
        .stream_order_updates(server.req(pb::OrderUpdatesRequest {
            users: vec!["0x".to_owned() + &"a".repeat(200)],
        }))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .starts_with("users: an entry of at most 128 bytes"),
        "{}",
        status.message()
    );
    let mut raw = server.client().await.max_encoding_message_size(8 << 20);
    let status = raw
        .stream_fills(server.req(filtered("coins".into(), many)))
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "filter field \"coins\": at most 1000 entries, got 100000"
    );
    // At the bound, accepted.
    let at_bound: Vec<String> = (0..1_000).map(|n| format!("C{n}")).collect();
    market
        .stream_all_fills(server.req(pb::AllFillsRequest { coins: at_bound }))
        .await
        .unwrap();
}

/// `POST /info` with `body` and the server's key: status line and body.
async fn post_info(server: &TestServer, body: &[u8]) -> (String, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(server.running.http_addr)
        .await
        .unwrap();
    let head = format!(
        "POST /info HTTP/1.1\r\nHost: l1gate.test\r\nX-Api-Key: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.key,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[tokio::test]
async fn info_errors_quote_the_body_briefly() {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let huge = "Z".repeat(200_000);
    for body in [
        format!("{{\"type\":[\"{huge}\"]}}"),
        format!("{{\"type\":\"{huge}\"}}"),
    ] {
        let (status, text) = post_info(&server, body.as_bytes()).await;
        assert!(
            status.starts_with("HTTP/1.1 4") || status.starts_with("HTTP/1.1 5"),
            "{status}"
        );
        assert!(
            text.len() < 1_000,
            "{} bytes: {}",
            text.len(),
            &text[..200.min(text.len())]
        );
    }
}
