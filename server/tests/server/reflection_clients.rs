//! Clients that know nothing of l1gate's `.proto` files and discover every
//! service by reflection: Python's `grpc_requests` (pinned, from PyPI),
//! which speaks only `grpc.reflection.v1alpha`, and a dynamic client here
//! over `grpc.reflection.v1`. Each lists the services, then calls
//! `ListFeeds` and `StreamBbo` with messages built from the descriptors it
//! fetched, the key in metadata as everywhere. The Python client does it
//! again over TLS (grpcio with the tests' authority as its root).

use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor};
use serde_json::Value;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

use super::harness::{TestServer, with_key};
use super::market_live::{live_node, ready};

/// The `grpc_requests` client: a key interceptor, the service list, one
/// unary call and the first frame of one stream.
const CLIENT: &str = r#"
import collections, json, sys
import grpc
from grpc_requests import Client

endpoint, key = sys.argv[1], sys.argv[2]
# A third argument: the authority to trust, over TLS.
ca = sys.argv[3] if len(sys.argv) > 3 else None

class Details(collections.namedtuple("Details", ("method", "timeout", "metadata",
        "credentials", "wait_for_ready", "compression")), grpc.ClientCallDetails):
    pass

class Key(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
          grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def keyed(self, d):
        metadata = list(d.metadata or []) + [("x-api-key", key)]
        return Details(d.method, d.timeout, metadata, d.credentials,
                       getattr(d, "wait_for_ready", None), getattr(d, "compression", None))
    def intercept_unary_unary(self, call, d, request): return call(self.keyed(d), request)
    def intercept_unary_stream(self, call, d, request): return call(self.keyed(d), request)
    def intercept_stream_unary(self, call, d, requests): return call(self.keyed(d), requests)
    def intercept_stream_stream(self, call, d, requests): return call(self.keyed(d), requests)

if ca:
    # grpc_requests reads each credential given as a path.
    client = Client(endpoint, ssl=True, credentials={"root_certificates": ca},
                    interceptors=[Key()])
else:
    client = Client(endpoint, interceptors=[Key()])
services = client.service_names
feeds = client.request("venue_l1_gateway.v3.VenueL1Gateway", "ListFeeds", {})
bbo = next(iter(client.request("venue_l1_gateway.v3.MarketStreaming", "StreamBbo",
                               {"coins": ["BTC"]})))
print(json.dumps({"services": services, "feeds": feeds, "bbo": bbo}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha_reflection_client_lists_and_calls() {
    let python = super::python::venv(&[super::python::GRPC_REQUESTS]);
    let node = live_node(60, 60, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let out = super::python::run(
        &python,
        CLIENT,
        &[server.running.grpc_addr.to_string(), server.key.clone()],
        Duration::from_secs(120),
    )
    .await;
    lists_and_calls(&serde_json::from_str(&out).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_lists_and_calls_over_tls() {
    let python = super::python::venv(&[super::python::GRPC_REQUESTS]);
    let node = live_node(60, 60, Duration::from_millis(1));
    let (server, pki) = tls_server(&node).await;
    let ca = &pki.ca_file;
    let out = super::python::run(
        &python,
        CLIENT,
        &[
            format!("localhost:{}", server.running.grpc_addr.port()),
            server.key.clone(),
            ca.display().to_string(),
        ],
        Duration::from_secs(120),
    )
    .await;
    lists_and_calls(&serde_json::from_str(&out).unwrap());
}

/// What the `grpc_requests` client printed: the services, the feeds and a
/// BBO frame.
fn lists_and_calls(out: &Value) {
    let services: Vec<&str> = out["services"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for service in [
        "venue_l1_gateway.v3.VenueL1Gateway",
        "venue_l1_gateway.v3.MarketStreaming",
        "grpc.health.v1.Health",
    ] {
        assert!(services.contains(&service), "{service} in {services:?}");
    }
    let feeds = out["feeds"]["feeds"].as_array().unwrap();
    assert!(feeds.iter().any(|f| f["id"] == "fills"), "{out}");
    assert_eq!(out["bbo"]["coin"], "BTC", "{out}");
    assert!(out["bbo"]["bid"]["px"].is_string(), "{out}");
}

/// A server over `node` serving TLS with a certificate of a fresh test
/// authority (written under `certs`), ready; the authority's file.
async fn tls_server(node: &super::market_live::LiveNode) -> (TestServer, super::tls::Pki) {
    let pki = super::tls::Pki::new("l1gate test CA");
    let server = TestServer::start(node.dir.path(), |args| {
        args.tls_cert_file = Some(pki.files.cert.clone());
        args.tls_key_file = Some(pki.files.key.clone());
    })
    .await;
    ready(&server).await;
    (server, pki)
}

/// Bytes in, bytes out: the messages are built and read by descriptors.
#[derive(Debug, Clone, Default)]
struct RawCodec;

#[derive(Debug, Clone, Default)]
struct RawCoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCoder;
    type Decoder = RawCoder;
    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }
    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

impl Encoder for RawCoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Every file descriptor the server's v1 reflection gives for `symbol`.
async fn files_for(
    channel: &Channel,
    key: &str,
    symbol: &str,
) -> Vec<prost_types::FileDescriptorProto> {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(symbol.to_owned())),
    };
    let mut responses = ServerReflectionClient::new(channel.clone())
        .server_reflection_info(with_key(tokio_stream::iter(vec![request]), key))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = response.message_response else {
        panic!("no descriptors for {symbol}");
    };
    files
        .file_descriptor_proto
        .iter()
        .map(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap())
        .collect()
}

fn method(pool: &DescriptorPool, service: &str, name: &str) -> MethodDescriptor {
    pool.get_service_by_name(service)
        .unwrap()
        .methods()
        .find(|m| m.name() == name)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_reflection_client_calls_with_fetched_descriptors_only() {
    let node = live_node(60, 60, Duration::from_millis(1));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    calls_with_fetched_descriptors(server.channel().await, &server.key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_descriptor_only_client_calls_over_tls_with_the_authority_as_root() {
    let node = live_node(60, 60, Duration::from_millis(1));
    let (server, pki) = tls_server(&node).await;
    let ca = &pki.ca_file;
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(ca).unwrap(),
        ))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!(
        "https://localhost:{}",
        server.running.grpc_addr.port()
    ))
    .unwrap()
    .tls_config(tls)
    .unwrap()
    .connect()
    .await
    .unwrap();
    calls_with_fetched_descriptors(channel, &server.key).await;
}

/// `ListFeeds` and `StreamBbo` with messages built and read only from the
/// descriptors the server's v1 reflection gives.
async fn calls_with_fetched_descriptors(channel: Channel, key: &str) {
    let mut pool = DescriptorPool::new();
    let mut files = files_for(&channel, key, "venue_l1_gateway.v3.VenueL1Gateway").await;
    files.extend(files_for(&channel, key, "venue_l1_gateway.v3.MarketStreaming").await);
    files.sort_by(|a, b| a.name().cmp(b.name()));
    files.dedup_by(|a, b| a.name() == b.name());
    pool.add_file_descriptor_protos(files).unwrap();

    let mut grpc = tonic::client::Grpc::new(channel);
    // ListFeeds.
    let list = method(&pool, "venue_l1_gateway.v3.VenueL1Gateway", "ListFeeds");
    let request = DynamicMessage::new(list.input()).encode_to_vec();
    grpc.ready().await.unwrap();
    let answer = grpc
        .unary(
            with_key(Bytes::from(request), key),
            "/venue_l1_gateway.v3.VenueL1Gateway/ListFeeds"
                .parse()
                .unwrap(),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let feeds = DynamicMessage::decode(list.output(), answer).unwrap();
    let feeds: Value = serde_json::to_value(&feeds).unwrap();
    assert!(
        feeds["feeds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "fills"),
        "{feeds}"
    );
    // StreamBbo.
    let bbo = method(&pool, "venue_l1_gateway.v3.MarketStreaming", "StreamBbo");
    let mut request = DynamicMessage::new(bbo.input());
    request
        .try_set_field_by_name(
            "coins",
            prost_reflect::Value::List(vec![prost_reflect::Value::String("BTC".into())]),
        )
        .unwrap();
    grpc.ready().await.unwrap();
    let mut stream = grpc
        .server_streaming(
            with_key(Bytes::from(request.encode_to_vec()), key),
            "/venue_l1_gateway.v3.MarketStreaming/StreamBbo"
                .parse()
                .unwrap(),
            RawCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let first = DynamicMessage::decode(bbo.output(), first).unwrap();
    let first: Value = serde_json::to_value(&first).unwrap();
    assert_eq!(first["coin"], "BTC", "{first}");
}
