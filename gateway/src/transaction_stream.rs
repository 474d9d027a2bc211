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
//! ([`edge::flow`], through [`Pulled`]): the supervisor's re-checks
//! end those of keys no longer admitted, and a client whose transport asks
//! for nothing for `send_timeout_ms` is ended with DEADLINE_EXCEEDED;
//! without a supervisor the keys are looked at before each batch, when the
//! keys file changes and every second. The Transaction
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

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};

use edge::flow::{Measured, Pulled, Watched};
use prost::Message as _;
use proto::aptos::indexer::v1::raw_data_server::{RawData, RawDataServer};
use proto::aptos::indexer::v1::{GetTransactionsRequest, TransactionsResponse};
use tonic::{Request, Response, Status};

use crate::registry::ChainConfig;
use access::{Access, StreamGuard};
use edge::admission::GrpcAccess as _;

mod routing;
mod upstream;

use routing::Routes;
pub use routing::{RequestAuthority, WithAuthority};
pub use upstream::MAX_BATCH_BYTES;
use upstream::{AUTHORIZATION, REQUEST_NAME, REQUEST_NAME_MAX_BYTES, mapped};

/// Largest request accepted (the filter is its only field that grows).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// A response stream of the service.
pub type TransactionsStream =
    Pin<Box<dyn Stream<Item = Result<TransactionsResponse, Status>> + Send + 'static>>;

/// The `aptos.indexer.v1.RawData` relay. See the module docs.
#[derive(Debug, Clone)]
pub struct TransactionStreamService {
    routes: Arc<Routes>,
    access: Option<Access>,
    flow: Option<edge::flow::Supervisor>,
}

impl TransactionStreamService {
    /// The relay for the networks of `chains`. Upstream connections are made
    /// on first use (an `https://` upstream over TLS verified against
    /// `tls`); must be called within a tokio runtime.
    /// Each network's connection failures go on `failures`.
    pub fn new(
        chains: &[ChainConfig],
        tls: &edge::upstream::UpstreamTls,
        failures: &edge::upstream::FailureBoard,
    ) -> Self {
        Self {
            routes: Arc::new(Routes::new(chains, tls, failures)),
            access: None,
            flow: None,
        }
    }

    /// Puts every stream under `flow`, the server's stream supervisor: a
    /// client that reads nothing for `send_timeout_ms` is ended with
    /// DEADLINE_EXCEEDED and its stream slot freed, and the supervisor's
    /// re-checks of keys end the streams of keys no longer admitted.
    #[must_use]
    pub fn with_flow(mut self, flow: edge::flow::Supervisor) -> Self {
        self.flow = Some(flow);
        self
    }

    /// Holds one of the caller's account stream slots per stream (and
    /// counts its usage); requests must have passed [`GrpcAccess::intercept`](edge::admission::GrpcAccess::intercept).
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
                let slot = flow.watch("transaction_stream", "transactions", None, Some(guard))?;
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
            let reason = edge::flow::EndReason::of_denial(&denial).label();
            self.access
                .metrics()
                .stream_ended("transaction_stream", "transactions", reason);
            tracing::info!(
                key_id = self.guard.key_id(),
                reason,
                "transaction stream ended: its key is no longer admitted"
            );
            let status = edge::admission::status_of(&denial);
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

#[cfg(test)]
mod tests {
    use tonic::Code;
    use tonic::server::NamedService;

    use super::upstream::{GET_TRANSACTIONS, Undecodable};
    use super::*;

    fn tls() -> edge::upstream::UpstreamTls {
        edge::upstream::UpstreamTls::new(None).unwrap()
    }
    use crate::registry::NodeConfig;
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
        let one = Routes::new(
            &aptos(&[("mainnet", Some("http://127.0.0.1:1"))]),
            &tls(),
            &edge::upstream::FailureBoard::default(),
        );
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

        let two = Routes::new(
            &aptos(&[
                ("mainnet", Some("http://127.0.0.1:1")),
                ("testnet", Some("http://127.0.0.1:2")),
            ]),
            &tls(),
            &edge::upstream::FailureBoard::default(),
        );
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

        let none = Routes::new(
            &aptos(&[("mainnet", None)]),
            &tls(),
            &edge::upstream::FailureBoard::default(),
        );
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
