//! The Transaction Stream: Aptos' public indexer service
//! `aptos.indexer.v1.RawData` (`GetTransactions`, a server stream of
//! transaction batches), served on l1gate's gRPC address and relayed to the
//! network's configured upstream.
//!
//! # A relay, not a decoder
//!
//! l1gate's `raw_data.proto` declares each transaction (and the request's
//! filter) as `bytes` under its public field number: an embedded message and
//! a `bytes` field are the same on the wire, so what the upstream sends
//! reaches the client byte for byte, and clients decoding with Aptos' own
//! protos see real `aptos.transaction.v1.Transaction` messages. The batch
//! envelope (`chain_id`, `processed_range`) is decoded and re-encoded, so a
//! field the upstream adds to `TransactionsResponse` itself is not carried.
//!
//! # Routing
//!
//! A call is routed by the host of its `:authority` (port ignored) against
//! the configured networks' hosts ([`crate::registry::Site`]): the network
//! whose `base_url` (or a node's `public_url`) has that host, served by its
//! first node with a `transaction_stream` upstream. A host no network claims
//! goes to the one network that has a Transaction Stream, when exactly one
//! has; otherwise, and for a network without one, the call is
//! FAILED_PRECONDITION naming the authority. With no upstream configured at
//! all the service is still served, and every call is FAILED_PRECONDITION.
//!
//! # Access
//!
//! Behind the access interceptor like every service: the API key goes in
//! the `x-api-key` metadata (missing or unknown: UNAUTHENTICATED), and each
//! stream holds one of its account's stream slots until it ends, its bytes
//! counted under the key's usage. A stream whose key is no longer admitted
//! ([`Access::recheck`]: revoked, expired after a rotation, its source off
//! the key's allow-list, its byte quota used up) ends with the status that
//! refusal has. On a server, streams are under its stream supervisor
//! ([`crate::grpc::flow`], through [`Pulled`]): the supervisor's re-checks
//! end those of keys no longer admitted, and a client whose transport asks
//! for nothing for `send_timeout_ms` is ended with DEADLINE_EXCEEDED;
//! without a supervisor the keys are looked at before each batch, when the
//! keys file changes and every second. The seed's rule: the Transaction
//! Stream takes no bearer `authorization` header; a call carrying one is
//! UNAUTHENTICATED, saying the key goes in `x-api-key`, before anything
//! else is looked at.
//!
//! Upstream, l1gate presents its own credential, the node's
//! `transaction_stream_token`, as `authorization: Bearer …` (never logged).
//! Nothing of the client's metadata is forwarded except
//! `x-aptos-request-name`, the name Aptos' indexer clients give their
//! stream: never the client's key.
//!
//! # Flow
//!
//! The upstream's response stream is the client's response stream: the
//! next batch is read from the upstream only when the client's HTTP/2
//! stream has room for more, so a slow client slows its upstream stream
//! instead of making l1gate buffer it, and a client that goes away cancels
//! it. One HTTP/2 connection per upstream address, made on first use,
//! carries every relayed stream; its connection window is large enough that
//! stalled streams (each holding at most its own stream window) do not stall
//! the others.
//!
//! # Sizes
//!
//! A request is at most [`MAX_REQUEST_BYTES`] (larger: OUT_OF_RANGE); a
//! batch at most [`MAX_BATCH_BYTES`].
//!
//! # Statuses
//!
//! | upstream outcome | status to the client |
//! |---|---|
//! | unreachable, connection lost, transport error | UNAVAILABLE naming the network (never the upstream address) |
//! | UNAUTHENTICATED, PERMISSION_DENIED (l1gate's credential refused) | UNAVAILABLE: the upstream refused l1gate's credential, not the caller's key |
//! | RESOURCE_EXHAUSTED | RESOURCE_EXHAUSTED |
//! | INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE, FAILED_PRECONDITION | the same code and message |
//! | UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED | UNAVAILABLE naming the network |
//! | any other code, or an answer that is not a `TransactionsResponse` | INTERNAL naming the network |

use std::collections::{BTreeMap, HashMap};
use std::error::Error as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};

use crate::grpc::flow::{Measured, Pulled, Watched};
use prost::Message as _;
use proto::aptos::indexer::v1::raw_data_server::{RawData, RawDataServer};
use proto::aptos::indexer::v1::{GetTransactionsRequest, TransactionsResponse};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{Service, http};
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::access::{Access, StreamGuard};
use crate::grpc::admission::GrpcAccess as _;
use crate::registry::{ChainConfig, NodeConfig};

/// Largest request accepted (the filter is its only field that grows).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;
/// Largest batch relayed (Aptos' own clients accept up to this).
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// How long a TCP connect to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings on a busy upstream connection, and how long an answer may
/// take before the connection counts as lost.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Each relayed stream's HTTP/2 receive window at the upstream: the most a
/// stalled client leaves waiting in l1gate for it.
const UPSTREAM_STREAM_WINDOW: u32 = 2 << 20;
/// The upstream connection's receive window: as large as HTTP/2 allows, so
/// streams stalled by slow clients do not hold back the others.
const UPSTREAM_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// The method's path at the upstream.
const GET_TRANSACTIONS: &str = "/aptos.indexer.v1.RawData/GetTransactions";
/// The client metadata forwarded upstream: the stream's name as Aptos'
/// indexer clients set it.
const REQUEST_NAME: &str = "x-aptos-request-name";
/// Longest request name forwarded.
const REQUEST_NAME_MAX_BYTES: usize = 256;
/// The metadata the seed forbids on the Transaction Stream.
const AUTHORIZATION: &str = "authorization";
/// Longest upstream message passed on to the client.
const UPSTREAM_MESSAGE_MAX_CHARS: usize = 1024;

/// A response stream of the service.
pub type TransactionsStream =
    Pin<Box<dyn Stream<Item = Result<TransactionsResponse, Status>> + Send + 'static>>;

/// The `aptos.indexer.v1.RawData` relay. See the module docs.
#[derive(Debug, Clone)]
pub struct TransactionStreamService {
    routes: Arc<Routes>,
    access: Option<Access>,
    flow: Option<crate::grpc::flow::Supervisor>,
}

impl TransactionStreamService {
    /// The relay for the networks of `chains`. Upstream connections are made
    /// on first use; must be called within a tokio runtime.
    pub fn new(chains: &[ChainConfig]) -> Self {
        Self {
            routes: Arc::new(Routes::new(chains)),
            access: None,
            flow: None,
        }
    }

    /// Puts every stream under `flow`, the server's stream supervisor: a
    /// client that reads nothing for `send_timeout_ms` is ended with
    /// DEADLINE_EXCEEDED and its stream slot freed, and the supervisor's
    /// re-checks of keys end the streams of keys no longer admitted.
    #[must_use]
    pub fn with_flow(mut self, flow: crate::grpc::flow::Supervisor) -> Self {
        self.flow = Some(flow);
        self
    }

    /// Holds one of the caller's account stream slots per stream (and
    /// counts its usage); requests must have passed [`GrpcAccess::intercept`](crate::grpc::admission::GrpcAccess::intercept).
    #[must_use]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = Some(access);
        self
    }

    /// The tonic service: requests bounded to [`MAX_REQUEST_BYTES`], each
    /// call told the authority it was sent to (see [`WithAuthority`]).
    pub fn into_server(self) -> WithAuthority<RawDataServer<Self>> {
        WithAuthority(
            RawDataServer::new(self)
                .max_decoding_message_size(MAX_REQUEST_BYTES)
                .max_encoding_message_size(MAX_BATCH_BYTES),
        )
    }
}

#[tonic::async_trait]
impl RawData for TransactionStreamService {
    type GetTransactionsStream = TransactionsStream;

    async fn get_transactions(
        &self,
        request: Request<GetTransactionsRequest>,
    ) -> Result<Response<TransactionsStream>, Status> {
        if request.metadata().contains_key(AUTHORIZATION) {
            if let Some(access) = &self.access {
                access.metrics().grpc_admission("unauthenticated");
            }
            return Err(Status::unauthenticated(
                "the Transaction Stream takes the API key in the `x-api-key` metadata only: \
                 remove the `authorization` header and send `x-api-key: <API_KEY>`",
            ));
        }
        let authority = request
            .extensions()
            .get::<RequestAuthority>()
            .and_then(|a| a.0.clone());
        let upstream = self.routes.route(authority.as_deref())?;
        let guard = self
            .access
            .as_ref()
            .map(|access| access.grpc_stream(&request))
            .transpose()?;
        let request_name = request
            .metadata()
            .get(REQUEST_NAME)
            .filter(|name| name.len() <= REQUEST_NAME_MAX_BYTES)
            .cloned();
        let message = request.into_inner();
        tracing::debug!(
            network = %upstream.network,
            key_id = guard.as_ref().map_or("-", |g| g.key_id()),
            starting_version = ?message.starting_version,
            transactions_count = ?message.transactions_count,
            "transaction stream opened"
        );
        let batches = upstream.open(message, request_name).await?;
        let network = Arc::clone(&upstream.network);
        let node = Arc::clone(&upstream.node);
        let batches = batches.map(move |item| item.map_err(|s| mapped(&s, &network, &node)));
        Ok(Response::new(match (guard, &self.access, &self.flow) {
            (Some(guard), Some(_), Some(flow)) => {
                let slot = flow.watch("transaction_stream", "transactions", None, Some(guard));
                let watched =
                    Watched::new(batches, slot.clone(), |batch: &TransactionsResponse| {
                        Measured {
                            bytes: batch.encoded_len(),
                            block: None,
                            block_time_ms: None,
                        }
                    });
                Box::pin(Pulled::new(watched, slot))
            }
            (Some(guard), Some(access), None) => admitted_only(batches, guard, access.clone()),
            _ => Box::pin(batches),
        }))
    }
}

/// How often a stream with nothing to send looks again at whether its key
/// is still admitted (a rotated key's grace period can end without the
/// keys file changing).
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// `batches` under `guard`: each batch counted under the key's usage, the
/// account's stream slot held until the stream is dropped, and the stream
/// ended as soon as its key is no longer admitted ([`Access::recheck`]: a
/// revoked or expired key, a source off the key's allow-list, a used-up
/// byte quota), looked at before each batch, when the keys file changes
/// and every [`RECHECK_EVERY`]. The upstream is still read only when the
/// client asks for the next batch.
fn admitted_only<S>(batches: S, guard: StreamGuard, access: Access) -> TransactionsStream
where
    S: Stream<Item = Result<TransactionsResponse, Status>> + Send + Unpin + 'static,
{
    struct State<S> {
        batches: S,
        guard: StreamGuard,
        changes: tokio::sync::watch::Receiver<u64>,
        tick: tokio::time::Interval,
        access: Access,
        /// Whether the keys file's changes are still announced.
        watching: bool,
        done: bool,
    }
    impl<S> State<S> {
        /// The status ending the stream, if its key is no longer admitted.
        fn refused(&self) -> Option<Status> {
            let denial = self.access.recheck(&self.guard).err()?;
            let reason = crate::grpc::flow::EndReason::of_denial(&denial).label();
            self.access
                .metrics()
                .stream_ended("transaction_stream", "transactions", reason);
            tracing::info!(
                key_id = self.guard.key_id(),
                reason,
                "transaction stream ended: its key is no longer admitted"
            );
            let status = crate::grpc::admission::status_of(&denial);
            Some(Status::new(
                status.code(),
                format!("stream ended: {}", status.message()),
            ))
        }
    }
    let mut tick = tokio::time::interval(RECHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = State {
        batches,
        guard,
        changes: access.auth().changes(),
        tick,
        access,
        watching: true,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(
        state,
        |mut state| async move {
            if state.done {
                return None;
            }
            if let Some(status) = state.refused() {
                state.done = true;
                return Some((Err(status), state));
            }
            loop {
                tokio::select! {
                    biased;
                    changed = state.changes.changed(), if state.watching => {
                        state.watching = changed.is_ok();
                    }
                    _ = state.tick.tick() => {}
                    item = state.batches.next() => {
                        let item = item?;
                        match &item {
                            Ok(batch) => state.guard.sent(batch.encoded_len(), None),
                            Err(_) => state.done = true,
                        }
                        return Some((item, state));
                    }
                }
                if let Some(status) = state.refused() {
                    state.done = true;
                    return Some((Err(status), state));
                }
            }
        },
    ))
}

/// The authority a call was sent to (`:authority`, or `Host`), as
/// [`WithAuthority`] records it in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAuthority(pub Option<String>);

/// Wraps a gRPC service so its handlers can see the authority their call
/// was sent to: tonic hands a handler the metadata and extensions of a call
/// but not its URI, so this records it in the extensions first.
#[derive(Debug, Clone)]
pub struct WithAuthority<S>(S);

impl<S, B> Service<http::Request<B>> for WithAuthority<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let authority = request
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                request
                    .headers()
                    .get(http::header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        request.extensions_mut().insert(RequestAuthority(authority));
        self.0.call(request)
    }
}

impl<S: NamedService> NamedService for WithAuthority<S> {
    const NAME: &'static str = S::NAME;
}

/// Where calls go: every configured host, and the fallback.
#[derive(Debug)]
struct Routes {
    /// Each configured host with its network's upstream (`None`: that
    /// network has no Transaction Stream), in configured order.
    hosts: Vec<(String, String, Option<Arc<Upstream>>)>,
    /// The upstream of a host no network claims: the only network with a
    /// Transaction Stream, if exactly one has.
    only: Option<Arc<Upstream>>,
    /// The networks that have one (`chain/network`) and their first host.
    offered: BTreeMap<String, String>,
}

impl Routes {
    fn new(chains: &[ChainConfig]) -> Self {
        let mut channels = HashMap::new();
        let mut hosts = Vec::new();
        let mut first: BTreeMap<String, (String, Arc<Upstream>)> = BTreeMap::new();
        for site in crate::registry::sites(chains) {
            let name = site.name();
            let upstream = site
                .upstream(|node| node.transaction_stream.as_deref())
                .map(|(node, url)| Arc::new(Upstream::new(&name, node, url, &mut channels)));
            if let Some(upstream) = &upstream {
                first
                    .entry(name.clone())
                    .or_insert_with(|| (site.host.clone(), Arc::clone(upstream)));
            }
            hosts.push((site.host, name, upstream));
        }
        let only = match first.values().collect::<Vec<_>>().as_slice() {
            [(_, upstream)] => Some(Arc::clone(upstream)),
            _ => None,
        };
        Self {
            hosts,
            only,
            offered: first
                .into_iter()
                .map(|(name, (host, _))| (name, host))
                .collect(),
        }
    }

    /// The upstream for a call sent to `authority`.
    fn route(&self, authority: Option<&str>) -> Result<Arc<Upstream>, Status> {
        let host = authority.and_then(crate::registry::request_host);
        let shown = authority.map_or_else(|| "(no authority)".to_owned(), crate::quoted);
        let mut claimed_by = None;
        for (site_host, name, upstream) in &self.hosts {
            if host.as_deref() != Some(site_host.as_str()) {
                continue;
            }
            if let Some(upstream) = upstream {
                return Ok(Arc::clone(upstream));
            }
            claimed_by.get_or_insert(name);
        }
        if let Some(name) = claimed_by {
            return Err(Status::failed_precondition(format!(
                "no Transaction Stream is configured for {shown}: it is the host of {name}, \
                 which has none"
            )));
        }
        if let Some(upstream) = &self.only {
            return Ok(Arc::clone(upstream));
        }
        Err(Status::failed_precondition(if self.offered.is_empty() {
            format!(
                "no Transaction Stream is configured for {shown}: this deployment has no \
                 Transaction Stream upstream"
            )
        } else {
            format!(
                "no Transaction Stream is configured for {shown}: call it at the host of the \
                 network wanted ({})",
                self.offered
                    .iter()
                    .map(|(name, host)| format!("{host} for {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }))
    }
}

/// One network's Transaction Stream upstream.
struct Upstream {
    /// `chain/network`.
    network: Arc<str>,
    /// The node's id.
    node: Arc<str>,
    /// `None` when the configured address is not one tonic can connect to
    /// (logged at start-up).
    channel: Option<Channel>,
    credential: Credential,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("network", &self.network)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// What l1gate presents upstream.
enum Credential {
    /// No `transaction_stream_token`: nothing.
    None,
    /// `authorization: Bearer <token>`, marked sensitive (kept out of the
    /// HTTP/2 header table).
    Bearer(AsciiMetadataValue),
    /// A token that is not a valid header value (logged at start-up).
    Unusable,
}

impl Upstream {
    fn new(
        network: &str,
        node: &NodeConfig,
        url: &str,
        channels: &mut HashMap<String, Option<Channel>>,
    ) -> Self {
        let channel = channels
            .entry(url.to_owned())
            .or_insert_with(|| match connect_lazy(url) {
                Ok(channel) => Some(channel),
                Err(error) => {
                    tracing::error!(
                        network,
                        node = %node.id,
                        %error,
                        "transaction_stream: not a usable upstream address; its calls are UNAVAILABLE"
                    );
                    None
                }
            })
            .clone();
        let credential = match &node.transaction_stream_token {
            None => Credential::None,
            Some(token) => {
                let parsed = format!("Bearer {}", token.expose()).parse::<AsciiMetadataValue>();
                if let Ok(mut value) = parsed {
                    value.set_sensitive(true);
                    Credential::Bearer(value)
                } else {
                    tracing::error!(
                        network,
                        node = %node.id,
                        "transaction_stream_token is not a valid header value (printable ASCII); \
                         its calls are UNAVAILABLE"
                    );
                    Credential::Unusable
                }
            }
        };
        Self {
            network: network.into(),
            node: node.id.as_str().into(),
            channel,
            credential,
        }
    }

    /// Opens the upstream stream for `message`, with l1gate's credential
    /// and the caller's `request_name`.
    async fn open(
        &self,
        message: GetTransactionsRequest,
        request_name: Option<AsciiMetadataValue>,
    ) -> Result<tonic::Streaming<TransactionsResponse>, Status> {
        let unusable = || {
            Status::unavailable(format!(
                "the Transaction Stream of {} is misconfigured in l1gate (see its log); \
                 retry later",
                self.network
            ))
        };
        let channel = self.channel.clone().ok_or_else(unusable)?;
        let mut metadata = MetadataMap::new();
        match &self.credential {
            Credential::None => {}
            Credential::Bearer(value) => {
                metadata.insert(AUTHORIZATION, value.clone());
            }
            Credential::Unusable => return Err(unusable()),
        }
        if let Some(name) = request_name {
            metadata.insert(REQUEST_NAME, name);
        }
        let request = Request::from_parts(metadata, tonic::Extensions::default(), message);
        let mut client =
            tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_BATCH_BYTES);
        client.ready().await.map_err(|error| {
            mapped(&Status::from_error(error.into()), &self.network, &self.node)
        })?;
        client
            .server_streaming(
                request,
                http::uri::PathAndQuery::from_static(GET_TRANSACTIONS),
                UpstreamCodec,
            )
            .await
            .map(Response::into_inner)
            .map_err(|status| mapped(&status, &self.network, &self.node))
    }
}

/// A lazily connected HTTP/2 channel to `url`.
fn connect_lazy(url: &str) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(url.to_owned())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .initial_stream_window_size(UPSTREAM_STREAM_WINDOW)
        .initial_connection_window_size(UPSTREAM_CONNECTION_WINDOW)
        .connect_lazy())
}

/// The status the client gets for the upstream's `status` (see the module
/// docs); each is logged with the network and node.
fn mapped(status: &Status, network: &str, node: &str) -> Status {
    let code = status.code();
    let local = status.source().is_some();
    let undecodable = status
        .source()
        .is_some_and(|source| source.downcast_ref::<Undecodable>().is_some());
    tracing::warn!(
        network,
        node,
        code = code_name(code),
        local,
        message = %status.message(),
        "transaction stream: the upstream failed"
    );
    if undecodable {
        return Status::internal(format!(
            "the Transaction Stream upstream of {network} sent an answer that is not a \
             TransactionsResponse"
        ));
    }
    if local {
        return Status::unavailable(format!(
            "the Transaction Stream upstream of {network} cannot be reached (connection \
             failed or lost); retry with backoff"
        ));
    }
    match code {
        Code::Unauthenticated | Code::PermissionDenied => Status::unavailable(format!(
            "the Transaction Stream upstream of {network} refused l1gate's credential (the \
             operator's, not your API key); retry later"
        )),
        Code::ResourceExhausted => Status::resource_exhausted(format!(
            "the Transaction Stream upstream of {network} is rate limiting (not a key \
             problem); retry with backoff"
        )),
        Code::InvalidArgument | Code::NotFound | Code::OutOfRange | Code::FailedPrecondition => {
            Status::new(code, clip(status.message(), UPSTREAM_MESSAGE_MAX_CHARS))
        }
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::Cancelled => {
            Status::unavailable(format!(
                "the Transaction Stream upstream of {network} is unavailable ({}); retry with \
                 backoff",
                code_name(code)
            ))
        }
        _ => Status::internal(format!(
            "the Transaction Stream upstream of {network} failed ({})",
            code_name(code)
        )),
    }
}

/// `text` cut to `max` characters (`…` marking a cut).
fn clip(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// `DeadlineExceeded` → `DEADLINE_EXCEEDED`.
fn code_name(code: Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The upstream call's codec: prost both ways, marking an answer that does
/// not decode as l1gate's own finding ([`Undecodable`]), so it is not taken
/// for the upstream's verdict on the request.
#[derive(Debug, Clone, Copy, Default)]
struct UpstreamCodec;

/// Marks a status raised because the upstream's answer did not decode.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's answer is not a TransactionsResponse")]
struct Undecodable;

impl Codec for UpstreamCodec {
    type Encode = GetTransactionsRequest;
    type Decode = TransactionsResponse;
    type Encoder = UpstreamCodec;
    type Decoder = UpstreamCodec;

    fn encoder(&mut self) -> Self::Encoder {
        UpstreamCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        UpstreamCodec
    }
}

impl Encoder for UpstreamCodec {
    type Item = GetTransactionsRequest;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(buf)
            .map_err(|error| Status::internal(format!("encoding the upstream request: {error}")))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

impl Decoder for UpstreamCodec {
    type Item = TransactionsResponse;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        TransactionsResponse::decode(buf)
            .map(Some)
            .map_err(|error| {
                let mut status = Status::internal(error.to_string());
                status.set_source(Arc::new(Undecodable));
                status
            })
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Ecosystem, NetworkConfig, NodeType, Secret};

    fn node(id: &str, stream: Option<&str>) -> NodeConfig {
        NodeConfig {
            id: id.into(),
            node_type: NodeType::Full,
            public_url: None,
            rest: None,
            graphql: None,
            jsonrpc: None,
            jsonrpc_ws: None,
            transaction_stream: stream.map(str::to_owned),
            transaction_stream_token: Some(Secret::new("t")),
        }
    }

    fn aptos(networks: &[(&str, Option<&str>)]) -> Vec<ChainConfig> {
        vec![
            ChainConfig {
                id: "aptos".into(),
                name: "Aptos".into(),
                ecosystem: Ecosystem::Move,
                networks: networks
                    .iter()
                    .map(|(id, stream)| NetworkConfig {
                        id: (*id).into(),
                        name: (*id).into(),
                        base_url: format!("https://aptos-{id}.example"),
                        nodes: vec![node("n1", None), node("n2", *stream)],
                    })
                    .collect(),
            },
            ChainConfig {
                id: "eth".into(),
                name: "Ethereum".into(),
                ecosystem: Ecosystem::Evm,
                networks: vec![NetworkConfig {
                    id: "mainnet".into(),
                    name: "mainnet".into(),
                    base_url: "https://eth.example".into(),
                    nodes: vec![node("e1", None)],
                }],
            },
        ]
    }

    fn routed(routes: &Routes, authority: Option<&str>) -> Result<String, (Code, String)> {
        routes
            .route(authority)
            .map(|u| format!("{}@{}", u.network, u.node))
            .map_err(|s| (s.code(), s.message().to_owned()))
    }

    #[tokio::test]
    async fn calls_are_routed_by_authority_with_one_network_as_the_fallback() {
        let one = Routes::new(&aptos(&[("mainnet", Some("http://127.0.0.1:1"))]));
        assert_eq!(
            routed(&one, Some("APTOS-mainnet.example:443")),
            Ok("aptos/mainnet@n2".into())
        );
        assert_eq!(
            routed(&one, Some("localhost:50051")),
            Ok("aptos/mainnet@n2".into())
        );
        assert_eq!(routed(&one, None), Ok("aptos/mainnet@n2".into()));
        let (code, message) = routed(&one, Some("eth.example")).unwrap_err();
        assert_eq!(code, Code::FailedPrecondition);
        assert!(message.contains("\"eth.example\""), "{message}");
        assert!(message.contains("eth/mainnet"), "{message}");

        let two = Routes::new(&aptos(&[
            ("mainnet", Some("http://127.0.0.1:1")),
            ("testnet", Some("http://127.0.0.1:2")),
        ]));
        assert_eq!(
            routed(&two, Some("aptos-testnet.example")),
            Ok("aptos/testnet@n2".into())
        );
        let (code, message) = routed(&two, Some("localhost:50051")).unwrap_err();
        assert_eq!(code, Code::FailedPrecondition);
        assert!(
            message.contains("no Transaction Stream is configured for \"localhost:50051\""),
            "{message}"
        );
        assert!(message.contains("aptos-testnet.example for aptos/testnet"));

        let none = Routes::new(&aptos(&[("mainnet", None)]));
        let (code, message) = routed(&none, Some("localhost:50051")).unwrap_err();
        assert_eq!(code, Code::FailedPrecondition);
        assert!(
            message.contains("no Transaction Stream upstream"),
            "{message}"
        );
    }

    #[test]
    fn upstream_statuses_map_to_the_seeds_codes() {
        let cases = [
            (
                Code::Unauthenticated,
                Code::Unavailable,
                "refused l1gate's credential",
            ),
            (
                Code::PermissionDenied,
                Code::Unavailable,
                "refused l1gate's credential",
            ),
            (
                Code::ResourceExhausted,
                Code::ResourceExhausted,
                "rate limiting",
            ),
            (
                Code::InvalidArgument,
                Code::InvalidArgument,
                "upstream says",
            ),
            (Code::NotFound, Code::NotFound, "upstream says"),
            (Code::OutOfRange, Code::OutOfRange, "upstream says"),
            (
                Code::FailedPrecondition,
                Code::FailedPrecondition,
                "upstream says",
            ),
            (
                Code::Unavailable,
                Code::Unavailable,
                "aptos/mainnet is unavailable (UNAVAILABLE)",
            ),
            (
                Code::DeadlineExceeded,
                Code::Unavailable,
                "(DEADLINE_EXCEEDED)",
            ),
            (
                Code::Internal,
                Code::Internal,
                "aptos/mainnet failed (INTERNAL)",
            ),
            (Code::Unimplemented, Code::Internal, "(UNIMPLEMENTED)"),
        ];
        for (upstream, client, says) in cases {
            let status = mapped(
                &Status::new(upstream, "upstream says"),
                "aptos/mainnet",
                "n",
            );
            assert_eq!(status.code(), client, "{upstream:?}");
            assert!(status.message().contains(says), "{upstream:?}: {status:?}");
        }
        let mut lost = Status::unknown("h2: connection reset by 10.0.0.7:50052");
        lost.set_source(Arc::new(std::io::Error::other("reset")));
        let status = mapped(&lost, "aptos/mainnet", "n");
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.message().contains("aptos/mainnet"));
        assert!(!status.message().contains("10.0.0.7"));
    }

    #[test]
    fn an_answer_that_does_not_decode_is_internal() {
        let mut status = Status::internal("bad wire type");
        status.set_source(Arc::new(Undecodable));
        let status = mapped(&status, "aptos/mainnet", "n");
        assert_eq!(status.code(), Code::Internal);
        assert!(status.message().contains("not a TransactionsResponse"));
    }

    #[test]
    fn the_upstream_path_is_the_services() {
        assert_eq!(
            GET_TRANSACTIONS,
            format!(
                "/{}/GetTransactions",
                <RawDataServer<TransactionStreamService> as NamedService>::NAME
            )
        );
    }
}
