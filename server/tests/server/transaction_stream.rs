//! The Transaction Stream relay (`aptos.indexer.v1.RawData`) end to end:
//! l1gate started with `[[chains]]` whose nodes point at an in-process
//! stand-in of Aptos' data service, and clients calling l1gate's gRPC port.
//!
//! The stand-in behaves as the documented upstream does: it requires
//! `authorization: Bearer <token>` (UNAUTHENTICATED otherwise), streams
//! batches of `batch_size` transactions from `starting_version`, stops after
//! `transactions_count`, and stamps each batch with its `chain_id` and
//! `processed_range`. Its transactions are real encoded
//! `aptos.transaction.v1.Transaction` messages (a few of the real fields,
//! with their real numbers; see [`Transaction`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use gateway::registry::{ChainConfig, Ecosystem, NetworkConfig, NodeConfig, NodeType, Secret};
use parking_lot::Mutex;
use prost::Message as _;
use proto::aptos::indexer::v1::raw_data_client::RawDataClient;
use proto::aptos::indexer::v1::raw_data_server::{RawData, RawDataServer};
use proto::aptos::indexer::v1::{GetTransactionsRequest, ProcessedRange, TransactionsResponse};
use tokio::net::TcpListener;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use super::harness::{TestServer, end_status, real, with_key};
use super::standin::http;

/// The token l1gate is configured with, and the stand-in accepts.
pub const TOKEN: &str = "aptos-upstream-token-1234";

/// `aptos.transaction.v1.Transaction`, cut to a few of its fields (same
/// numbers and types as Aptos' `transaction.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Transaction {
    #[prost(message, optional, tag = "1")]
    pub timestamp: Option<Timestamp>,
    #[prost(uint64, tag = "2")]
    pub version: u64,
    #[prost(message, optional, tag = "3")]
    pub info: Option<TransactionInfo>,
    #[prost(uint64, tag = "4")]
    pub epoch: u64,
    #[prost(uint64, tag = "5")]
    pub block_height: u64,
    /// `TransactionType`: 4 is `TRANSACTION_TYPE_USER`.
    #[prost(int32, tag = "6")]
    pub r#type: i32,
}

/// `aptos.util.timestamp.Timestamp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `aptos.transaction.v1.TransactionInfo`, cut.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TransactionInfo {
    #[prost(bytes = "vec", tag = "1")]
    pub hash: Vec<u8>,
    #[prost(uint64, tag = "5")]
    pub gas_used: u64,
    #[prost(bool, tag = "6")]
    pub success: bool,
    #[prost(string, tag = "7")]
    pub vm_status: String,
}

/// The stand-in's transaction at `version`, with `pad` bytes of
/// `vm_status` (to make large batches).
pub fn transaction(version: u64, pad: usize) -> Transaction {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&version.to_be_bytes());
    hash[31] = 0xa5;
    let mut vm_status = "Executed successfully".to_owned();
    vm_status.extend(std::iter::repeat_n('.', pad));
    Transaction {
        timestamp: Some(Timestamp {
            seconds: 1_700_000_000 + i64::try_from(version).unwrap(),
            nanos: 123_000,
        }),
        version,
        info: Some(TransactionInfo {
            hash: hash.to_vec(),
            gas_used: 7 + version % 11,
            success: !version.is_multiple_of(3),
            vm_status,
        }),
        epoch: 40 + version / 1000,
        block_height: 9_000 + version / 4,
        r#type: 4,
    }
}

/// The batch the stand-in sends for `versions`.
pub fn batch(chain_id: u64, versions: std::ops::Range<u64>, pad: usize) -> TransactionsResponse {
    TransactionsResponse {
        processed_range: Some(ProcessedRange {
            first_version: versions.start,
            last_version: versions.end - 1,
        }),
        transactions: versions
            .map(|v| Bytes::from(transaction(v, pad).encode_to_vec()))
            .collect(),
        chain_id: Some(chain_id),
    }
}

/// What a stand-in saw and did.
#[derive(Debug, Default)]
pub struct Seen {
    /// The metadata of every call.
    pub calls: Mutex<Vec<MetadataMap>>,
    /// Batches its streams produced (taken by its gRPC server).
    pub produced: AtomicU64,
    /// Streams dropped before their end (the caller went away).
    pub cancelled: AtomicU64,
}

/// A stand-in of Aptos' data service (`RawData`).
#[derive(Clone)]
struct StandInService {
    chain_id: u64,
    pad: usize,
    seen: Arc<Seen>,
}

/// Counts a stream dropped before its end.
struct Cancel {
    seen: Arc<Seen>,
    done: bool,
}

impl Cancel {
    /// The stream ended by itself.
    fn finish(mut self) {
        self.done = true;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.done {
            self.seen.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

type Batches = Pin<Box<dyn Stream<Item = Result<TransactionsResponse, Status>> + Send>>;

/// Starting versions that make the stand-in fail, as the real service
/// would for its own reasons.
const FAIL_OUT_OF_RANGE: u64 = 9_000_000_001;
const FAIL_RATE_LIMITED: u64 = 9_000_000_002;
const FAIL_INTERNAL: u64 = 9_000_000_003;
const FAIL_AFTER_ONE_BATCH: u64 = 9_000_000_004;

#[tonic::async_trait]
impl RawData for StandInService {
    type GetTransactionsStream = Batches;

    async fn get_transactions(
        &self,
        request: Request<GetTransactionsRequest>,
    ) -> Result<Response<Batches>, Status> {
        self.seen.calls.lock().push(request.metadata().clone());
        let bearer = format!("Bearer {TOKEN}");
        if request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some(bearer.as_str())
        {
            return Err(Status::unauthenticated("invalid or missing auth token"));
        }
        let request = request.into_inner();
        let start = request.starting_version.unwrap_or(0);
        let batch_size = request.batch_size.unwrap_or(1000);
        if batch_size == 0 || batch_size > 1000 {
            return Err(Status::invalid_argument(format!(
                "batch_size {batch_size} is not within 1..=1000"
            )));
        }
        match start {
            FAIL_OUT_OF_RANGE => {
                return Err(Status::out_of_range(
                    "starting_version 9000000001 is past the newest version 4242",
                ));
            }
            FAIL_RATE_LIMITED => return Err(Status::resource_exhausted("quota exceeded")),
            FAIL_INTERNAL => return Err(Status::internal("storage error at 10.1.2.3")),
            _ => {}
        }
        let end = request
            .transactions_count
            .map_or(u64::MAX, |count| start.saturating_add(count));
        let (chain_id, pad, seen) = (self.chain_id, self.pad, Arc::clone(&self.seen));
        let cancel = Cancel {
            seen: Arc::clone(&seen),
            done: false,
        };
        let fail_after_one = start == FAIL_AFTER_ONE_BATCH;
        let batches =
            futures_util::stream::unfold((start, cancel, false), move |(next, cancel, failed)| {
                let seen = Arc::clone(&seen);
                async move {
                    if failed {
                        cancel.finish();
                        return None;
                    }
                    if fail_after_one && next > start {
                        return Some((
                            Err(Status::unavailable("the data service is restarting")),
                            (next, cancel, true),
                        ));
                    }
                    if next >= end {
                        cancel.finish();
                        return None;
                    }
                    let last = end.min(next.saturating_add(batch_size));
                    seen.produced.fetch_add(1, Ordering::SeqCst);
                    Some((Ok(batch(chain_id, next..last, pad)), (last, cancel, false)))
                }
            });
        Ok(Response::new(Box::pin(batches)))
    }
}

impl StandInService {
    fn new(chain_id: u64, pad: usize) -> (Self, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        let service = StandInService {
            chain_id,
            pad,
            seen: Arc::clone(&seen),
        };
        (service, seen)
    }
}

/// A running stand-in.
pub struct StandIn {
    pub url: String,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Starts a stand-in on a loopback port for chain `chain_id`, its
    /// transactions padded by `pad` bytes.
    pub async fn start(chain_id: u64, pad: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (service, seen) = StandInService::new(chain_id, pad);
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RawDataServer::new(service))
                .serve_with_incoming(TcpIncoming::from(listener))
                .await
                .unwrap();
        });
        Self {
            url: format!("http://{addr}"),
            seen,
            task,
        }
    }

    /// [`StandIn::start`] speaking TLS with `files` (ALPN `h2`), at
    /// `https://localhost:PORT`.
    pub async fn start_tls(chain_id: u64, files: &edge::tls::TlsFiles) -> Self {
        let acceptor = edge::tls::ServerTls::load(files)
            .unwrap()
            .acceptor(&[b"h2"])
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (service, seen) = StandInService::new(chain_id, 0);
        let (accepted, incoming) = tokio::sync::mpsc::channel(16);
        let task = tokio::spawn(async move {
            tokio::spawn(async move {
                while let Ok((socket, _)) = listener.accept().await {
                    let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
                    tokio::spawn(async move {
                        // A handshake that fails (an untrusting client) is
                        // not a connection.
                        if let Ok(stream) =
                            edge::tls::EdgeStream::accept(socket, Some(&acceptor)).await
                        {
                            let _ = accepted.send(Ok::<_, std::io::Error>(stream)).await;
                        }
                    });
                }
            });
            tonic::transport::Server::builder()
                .add_service(RawDataServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(incoming))
                .await
                .unwrap();
        });
        Self {
            url: format!("https://localhost:{}", addr.port()),
            seen,
            task,
        }
    }

    /// How many calls reached it.
    pub fn calls(&self) -> usize {
        self.seen.calls.lock().len()
    }
}

/// One Aptos network: its id, Transaction Stream upstream and token.
pub struct Net<'a> {
    pub id: &'a str,
    pub stream: Option<&'a str>,
    pub token: Option<&'a str>,
}

/// `[[chains]]` with an Aptos chain of `networks` (base URL
/// `https://aptos-<id>.test`); the Transaction Stream is on the second
/// node of each, as the first node has only a REST upstream.
pub fn aptos(networks: &[Net<'_>]) -> Vec<ChainConfig> {
    let node = |id: &str, net: &Net<'_>, streams: bool| NodeConfig {
        id: id.into(),
        node_type: NodeType::Full,
        public_url: None,
        rest: Some("http://127.0.0.1:9".into()),
        graphql: None,
        jsonrpc: None,
        jsonrpc_ws: None,
        transaction_stream: net.stream.filter(|_| streams).map(str::to_owned),
        transaction_stream_token: net.token.filter(|_| streams).map(Secret::new),
    };
    vec![ChainConfig {
        id: "aptos".into(),
        name: "Aptos".into(),
        ecosystem: Ecosystem::Move,
        networks: networks
            .iter()
            .map(|net| NetworkConfig {
                id: net.id.into(),
                name: format!("Aptos {}", net.id),
                base_url: format!("https://aptos-{}.test", net.id),
                nodes: vec![node("rest-only", net, false), node("indexer", net, true)],
            })
            .collect(),
    }]
}

/// l1gate serving `chains`.
pub async fn l1gate(chains: Vec<ChainConfig>) -> TestServer {
    TestServer::start(&real("btc-985148182"), move |args| args.chains = chains).await
}

/// A Transaction Stream client of `server`, sending `authority` as the
/// `:authority` when given.
pub async fn client(server: &TestServer, authority: Option<&str>) -> RawDataClient<Channel> {
    let mut endpoint = Endpoint::from_shared(format!("http://{}", server.running.grpc_addr))
        .unwrap()
        .initial_stream_window_size(256 << 10);
    if let Some(authority) = authority {
        endpoint = endpoint.origin(format!("http://{authority}").parse().unwrap());
    }
    RawDataClient::new(endpoint.connect().await.unwrap()).max_decoding_message_size(64 << 20)
}

/// A request from `start` for `count` transactions in batches of `batch`.
pub fn from(start: u64, count: u64, batch: u64) -> GetTransactionsRequest {
    GetTransactionsRequest {
        starting_version: Some(start),
        transactions_count: Some(count),
        batch_size: Some(batch),
        transaction_filter: None,
    }
}

/// Every batch of a call, or the status that ended it (at the call or
/// in the stream), within 20 s.
pub async fn collect(
    client: &mut RawDataClient<Channel>,
    request: Request<GetTransactionsRequest>,
) -> Result<Vec<TransactionsResponse>, Status> {
    tokio::time::timeout(Duration::from_secs(20), async {
        let mut stream = client.get_transactions(request).await?.into_inner();
        let mut batches = Vec::new();
        while let Some(batch) = stream.message().await? {
            batches.push(batch);
        }
        Ok(batches)
    })
    .await
    .expect("the call ended within 20 s")
}

fn one_network(stand_in: &StandIn, token: &str) -> Vec<ChainConfig> {
    aptos(&[Net {
        id: "mainnet",
        stream: Some(&stand_in.url),
        token: Some(token),
    }])
}

#[tokio::test]
async fn streams_end_to_end_with_the_key_in_x_api_key() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;

    let batches = collect(&mut client, server.req(from(100, 25, 10)))
        .await
        .unwrap();
    // Exactly what the stand-in sent: three batches, the transactions'
    // bytes untouched, chain id and processed range carried.
    let expected = vec![
        batch(1, 100..110, 0),
        batch(1, 110..120, 0),
        batch(1, 120..125, 0),
    ];
    assert_eq!(batches, expected);
    let versions: Vec<u64> = batches
        .iter()
        .flat_map(|b| &b.transactions)
        .map(|bytes| Transaction::decode(bytes.clone()).unwrap().version)
        .collect();
    assert_eq!(versions, (100..125).collect::<Vec<_>>());
    let decoded = Transaction::decode(batches[0].transactions[3].clone()).unwrap();
    assert_eq!(decoded, transaction(103, 0));
    assert_eq!(stand_in.seen.produced.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn no_key_is_unauthenticated() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;

    let status = collect(&mut client, Request::new(from(0, 5, 5)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    let status = collect(&mut client, with_key(from(0, 5, 5), "l1g_not_a_key"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(stand_in.calls(), 0);
}

#[tokio::test]
async fn a_bearer_authorization_from_the_client_is_unauthenticated() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;

    // With a valid key in x-api-key as well: still refused (seed rule 2).
    let mut request = server.req(from(0, 5, 5));
    request.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(format!("Bearer {}", server.key)).unwrap(),
    );
    let status = collect(&mut client, request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("`x-api-key`"), "{status:?}");
    assert!(status.message().contains("only"), "{status:?}");
    assert!(!status.message().contains(&server.key));

    // The bearer form alone (no x-api-key): the key check refuses it.
    let mut request = Request::new(from(0, 5, 5));
    request.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(format!("Bearer {}", server.key)).unwrap(),
    );
    let status = collect(&mut client, request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(stand_in.calls(), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn the_upstream_sees_l1gates_token_and_never_the_clients_key() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;

    let mut request = server.req(from(7, 3, 10));
    for (name, value) in [
        ("x-aptos-request-name", "my-processor"),
        ("x-custom-client-header", "hello"),
        ("x-aptos-data-authorization", "client-secret"),
    ] {
        request
            .metadata_mut()
            .insert(name, MetadataValue::try_from(value).unwrap());
    }
    collect(&mut client, request).await.unwrap();

    let calls = stand_in.seen.calls.lock();
    assert_eq!(calls.len(), 1);
    let seen = &calls[0];
    assert_eq!(
        seen.get("authorization").unwrap().to_str().unwrap(),
        format!("Bearer {TOKEN}")
    );
    assert_eq!(
        seen.get("x-aptos-request-name").unwrap().to_str().unwrap(),
        "my-processor"
    );
    for absent in [
        "x-api-key",
        "x-custom-client-header",
        "x-aptos-data-authorization",
    ] {
        assert!(seen.get(absent).is_none(), "{absent} was forwarded");
    }
    let headers = seen.clone().into_headers();
    for (name, value) in &headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        assert!(
            !value.contains(&server.key) && !value.contains("client-secret"),
            "{name}: {value}"
        );
    }
}

#[tokio::test]
async fn a_refused_l1gate_token_is_unavailable_and_not_the_callers_fault() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, "expired-token")).await;
    let mut client = client(&server, None).await;

    let status = collect(&mut client, server.req(from(0, 5, 5)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("refused l1gate's credential"),
        "{status:?}"
    );
    assert!(status.message().contains("aptos/mainnet"), "{status:?}");
    assert!(!status.message().contains("expired-token"));
    assert_eq!(stand_in.calls(), 1);
}

#[tokio::test]
async fn an_upstream_that_is_down_is_unavailable_naming_the_network() {
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let server = l1gate(aptos(&[Net {
        id: "mainnet",
        stream: Some(&url),
        token: Some(TOKEN),
    }]))
    .await;
    let mut client = client(&server, None).await;

    let started = Instant::now();
    let status = collect(&mut client, server.req(from(0, 5, 5)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("aptos/mainnet"), "{status:?}");
    let port = url.rsplit(':').next().unwrap();
    assert!(
        !status.message().contains("127.0.0.1") && !status.message().contains(port),
        "the upstream address leaked: {status:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn upstream_statuses_reach_the_client_as_the_seed_maps_them() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;

    let cases = [
        (
            from(FAIL_OUT_OF_RANGE, 5, 5),
            Code::OutOfRange,
            "starting_version 9000000001 is past the newest version 4242",
        ),
        (
            from(0, 5, 5000),
            Code::InvalidArgument,
            "batch_size 5000 is not within 1..=1000",
        ),
        (
            from(FAIL_RATE_LIMITED, 5, 5),
            Code::ResourceExhausted,
            "aptos/mainnet is rate limiting",
        ),
        (
            from(FAIL_INTERNAL, 5, 5),
            Code::Internal,
            "aptos/mainnet failed (INTERNAL)",
        ),
    ];
    for (request, code, message) in cases {
        let status = collect(&mut client, server.req(request)).await.unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert!(status.message().contains(message), "{status:?}");
        assert!(!status.message().contains("10.1.2.3"), "{status:?}");
    }

    // A failure after the first batch: the batch, then UNAVAILABLE.
    let mut stream = client
        .get_transactions(server.req(from(FAIL_AFTER_ONE_BATCH, 100, 10)))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.transactions.len(), 10);
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("aptos/mainnet is unavailable"),
        "{status:?}"
    );
}

#[tokio::test]
async fn two_networks_are_routed_by_authority() {
    let mainnet = StandIn::start(1, 0).await;
    let testnet = StandIn::start(2, 0).await;
    let server = l1gate(aptos(&[
        Net {
            id: "mainnet",
            stream: Some(&mainnet.url),
            token: Some(TOKEN),
        },
        Net {
            id: "testnet",
            stream: Some(&testnet.url),
            token: Some(TOKEN),
        },
    ]))
    .await;
    let port = server.running.grpc_addr.port();

    for (host, chain_id) in [("aptos-mainnet.test", 1), ("APTOS-TESTNET.test", 2)] {
        let mut client = client(&server, Some(&format!("{host}:{port}"))).await;
        let batches = collect(&mut client, server.req(from(0, 4, 4)))
            .await
            .unwrap();
        assert_eq!(batches, vec![batch(chain_id, 0..4, 0)], "{host}");
    }
    assert_eq!((mainnet.calls(), testnet.calls()), (1, 1));

    // A host no network claims, with two networks offering a stream.
    let mut client = client(&server, Some(&format!("localhost:{port}"))).await;
    let status = collect(&mut client, server.req(from(0, 4, 4)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains(&format!(
            "no Transaction Stream is configured for \"localhost:{port}\""
        )),
        "{status:?}"
    );
    assert!(
        status.message().contains("aptos-testnet.test"),
        "{status:?}"
    );
}

#[tokio::test]
async fn without_an_upstream_every_call_is_failed_precondition() {
    let server = l1gate(aptos(&[Net {
        id: "mainnet",
        stream: None,
        token: None,
    }]))
    .await;
    let mut client = client(&server, None).await;
    let status = collect(&mut client, server.req(from(0, 4, 4)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let authority = server.running.grpc_addr.to_string();
    assert!(
        status.message().contains(&format!(
            "no Transaction Stream is configured for \"{authority}\""
        )),
        "{status:?}"
    );
    // The key is still checked first.
    let status = collect(&mut client, Request::new(from(0, 4, 4)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
}

#[tokio::test]
async fn an_oversized_request_is_refused_before_the_upstream() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;
    let mut request = from(0, 4, 4);
    request.transaction_filter = Some(Bytes::from(vec![b'x'; 100 << 10]));
    let status = collect(&mut client, server.req(request)).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert_eq!(stand_in.calls(), 0);

    // A filter within the bound is forwarded untouched.
    let mut request = from(0, 4, 4);
    request.transaction_filter = Some(Bytes::from_static(b"\x0a\x02\x08\x01"));
    collect(&mut client, server.req(request)).await.unwrap();
    assert_eq!(stand_in.calls(), 1);
}

#[tokio::test]
async fn a_slow_client_does_not_make_l1gate_buffer_the_upstream_stream() {
    // 3000 batches of one 32 KiB transaction: about 96 MiB if l1gate read
    // ahead of its client.
    const BATCHES: u64 = 3000;
    let stand_in = StandIn::start(1, 32 << 10).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;
    let mut stream = client
        .get_transactions(server.req(from(0, BATCHES, 1)))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first, batch(1, 0..1, 32 << 10));

    // The client reads nothing: the upstream is read only as far as the
    // HTTP/2 windows and socket buffers on the way let it, then stops.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let produced = stand_in.seen.produced.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let later = stand_in.seen.produced.load(Ordering::SeqCst);
    eprintln!(
        "while the client read nothing, the stand-in produced {produced} then {later} of {BATCHES} batches"
    );
    assert!(
        later < 600,
        "l1gate read {later} batches ahead of its client"
    );
    assert!(
        later - produced <= 2,
        "the upstream kept flowing: {produced} → {later}"
    );

    // Reading resumes where it stopped, in order.
    for version in 1..200 {
        let next = stream.message().await.unwrap().unwrap();
        assert_eq!(
            next.processed_range.unwrap().first_version,
            version,
            "out of order"
        );
    }
    // The client goes away: l1gate cancels the upstream stream.
    drop(stream);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stand_in.seen.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the upstream stream was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(stand_in.seen.produced.load(Ordering::SeqCst) < BATCHES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_is_ended_after_the_send_timeout() {
    let stand_in = StandIn::start(1, 32 << 10).await;
    let chains = one_network(&stand_in, TOKEN);
    let server = TestServer::start(&real("btc-985148182"), move |args| {
        args.chains = chains;
        args.send_timeout_ms = Some(1000);
    })
    .await;
    let mut stalled = client(&server, None).await;
    let mut stream = stalled
        .get_transactions(server.req(from(0, 3000, 1)))
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    // Reading nothing: the windows fill, the transport asks for nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = http(server.running.http_addr, "GET", "/metrics", &[], "").await;
        if metrics.text.lines().any(|line| {
            line.starts_with("l1gate_streams_ended_total")
                && line.contains("service=\"transaction_stream\"")
                && line.contains("reason=\"stall\"")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled stream was not ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What the transport had buffered arrives, then the status.
    let status = loop {
        match stream.message().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("ended without a status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("send_timeout_ms"), "{status:?}");

    // A client that reads slowly while its window has room keeps being
    // asked for (the transport waits on the upstream): not a stall.
    let quiet = StandIn::start(1, 0).await;
    let chains = one_network(&quiet, TOKEN);
    let server = TestServer::start(&real("btc-985148182"), move |args| {
        args.chains = chains;
        args.send_timeout_ms = Some(1000);
    })
    .await;
    let mut slow = client(&server, None).await;
    let mut stream = slow
        .get_transactions(server.req(from(0, 3, 1)))
        .await
        .unwrap()
        .into_inner();
    for _ in 0..3 {
        stream.message().await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(stream.message().await.unwrap().is_none(), "ended cleanly");
}

#[tokio::test]
async fn revoking_the_key_ends_an_open_stream() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let mut client = client(&server, None).await;
    // No transactions_count: the stream goes on until something ends it.
    let endless = GetTransactionsRequest {
        starting_version: Some(0),
        transactions_count: None,
        batch_size: Some(100),
        transaction_filter: None,
    };
    let mut stream = client
        .get_transactions(server.req(endless))
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();

    let doomed = super::revocation::key_id(&server, &server.key);
    let revoked_at = Instant::now();
    super::revocation::edit_keys(&server, |file| file.revoke(&doomed).unwrap());
    let status = end_status(&mut stream, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("revoked"), "{status:?}");
    assert!(!status.message().contains(&server.key));
    assert!(revoked_at.elapsed() < Duration::from_secs(5));
    // The upstream stream is cancelled with it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stand_in.seen.cancelled.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the upstream stream goes on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn reflection_and_health_list_the_transaction_stream() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    // No upstream: the service is served (and reflected) all the same.
    let server = l1gate(Vec::new()).await;
    let channel = server.channel().await;
    let mut reflection = ServerReflectionClient::new(channel.clone());
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol("aptos.indexer.v1.RawData".into()),
    ]
    .map(|message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    });
    let mut responses = reflection
        .server_reflection_info(with_key(tokio_stream::iter(requests), &server.key))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("unexpected reflection response");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"aptos.indexer.v1.RawData".to_owned()),
        "{names:?}"
    );
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("unexpected reflection response");
    };
    let file = prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
        .unwrap();
    assert_eq!(file.package(), "aptos.indexer.v1");
    let response = file
        .message_type
        .iter()
        .find(|m| m.name() == "TransactionsResponse")
        .unwrap();
    let numbers: Vec<(&str, i32)> = response
        .field
        .iter()
        .map(|f| (f.name(), f.number()))
        .collect();
    assert_eq!(
        numbers,
        [("transactions", 1), ("chain_id", 2), ("processed_range", 3)]
    );

    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "aptos.indexer.v1.RawData".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status();
    assert_eq!(status, ServingStatus::Serving);
}

/// Aptos' own Python message classes (`aptos-indexer-protos`, pinned) over
/// `grpcio`: the stream through l1gate decodes as real `Transaction`s.
const PYTHON_CLIENT: &str = r#"
import json, sys
import grpc
from aptos_indexer_protos.aptos.indexer.v1 import raw_data_pb2, raw_data_pb2_grpc
from aptos_indexer_protos.aptos.transaction.v1 import transaction_pb2

target, key = sys.argv[1], sys.argv[2]
start, count, batch = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
out = {"batches": [], "transactions": []}
with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as channel:
    stub = raw_data_pb2_grpc.RawDataStub(channel)
    request = raw_data_pb2.GetTransactionsRequest(
        starting_version=start, transactions_count=count, batch_size=batch)
    metadata = [("x-api-key", key), ("x-aptos-request-name", "python-processor")]
    for response in stub.GetTransactions(request, metadata=metadata, timeout=30):
        out["batches"].append({"chain_id": response.chain_id, "size": len(response.transactions)})
        for t in response.transactions:
            assert isinstance(t, transaction_pb2.Transaction)
            out["transactions"].append({
                "version": t.version,
                "epoch": t.epoch,
                "block_height": t.block_height,
                "type": transaction_pb2.Transaction.TransactionType.Name(t.type),
                "seconds": t.timestamp.seconds,
                "nanos": t.timestamp.nanos,
                "hash": t.info.hash.hex(),
                "gas_used": t.info.gas_used,
                "success": t.info.success,
                "vm_status": t.info.vm_status,
                "bytes": t.SerializeToString().hex(),
            })
    try:
        for _ in stub.GetTransactions(request, timeout=30):
            pass
        out["without_key"] = "OK"
    except grpc.RpcError as error:
        out["without_key"] = error.code().name
print(json.dumps(out))
"#;

#[tokio::test]
async fn python_grpcio_with_aptos_protos_decodes_real_transactions() {
    let stand_in = StandIn::start(1, 0).await;
    let server = l1gate(one_network(&stand_in, TOKEN)).await;
    let python = super::python::venv_named(super::python::APTOS_VENV, &super::python::APTOS_CLIENT);
    let out = super::python::run(
        &python,
        PYTHON_CLIENT,
        &[
            server.running.grpc_addr.to_string(),
            server.key.clone(),
            "500".into(),
            "17".into(),
            "5".into(),
        ],
        Duration::from_secs(60),
    )
    .await;
    let out: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let sizes: Vec<u64> = out["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert_eq!(b["chain_id"], 1);
            b["size"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(sizes, [5, 5, 5, 2]);
    let transactions = out["transactions"].as_array().unwrap();
    assert_eq!(transactions.len(), 17);
    for (got, version) in transactions.iter().zip(500u64..) {
        let want = transaction(version, 0);
        let info = want.info.as_ref().unwrap();
        let timestamp = want.timestamp.as_ref().unwrap();
        assert_eq!(got["version"], version);
        assert_eq!(got["epoch"], want.epoch);
        assert_eq!(got["block_height"], want.block_height);
        assert_eq!(got["type"], "TRANSACTION_TYPE_USER");
        assert_eq!(got["seconds"], timestamp.seconds);
        assert_eq!(got["nanos"], timestamp.nanos);
        assert_eq!(got["hash"], hex::encode(&info.hash));
        assert_eq!(got["gas_used"], info.gas_used);
        assert_eq!(got["success"], info.success);
        assert_eq!(got["vm_status"], info.vm_status.as_str());
        assert_eq!(got["bytes"], hex::encode(want.encode_to_vec()), "{version}");
    }
    assert_eq!(out["without_key"], "UNAUTHENTICATED");
    let calls = stand_in.seen.calls.lock();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].get("x-aptos-request-name").unwrap(),
        "python-processor"
    );
}
