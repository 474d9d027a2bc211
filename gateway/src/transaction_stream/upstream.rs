//! One network's Transaction Stream upstream: the lazily made connection,
//! l1gate's own credential, the statuses mapped for the client, and the
//! codec that relays each batch's transactions as bytes.

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use proto::aptos::indexer::v1::{GetTransactionsRequest, TransactionsResponse};
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::registry::NodeConfig;

/// Largest batch relayed (Aptos' own clients accept up to this).
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// How long a TCP connect to an upstream may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 pings on a busy upstream connection, and how long an answer may
/// take before the connection counts as lost.
pub(super) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub(super) const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Each relayed stream's HTTP/2 receive window at the upstream: the most a
/// stalled client leaves waiting in l1gate for it.
pub(super) const UPSTREAM_STREAM_WINDOW: u32 = 2 << 20;
/// The upstream connection's receive window: as large as HTTP/2 allows, so
/// streams stalled by slow clients do not hold back the others.
pub(super) const UPSTREAM_CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// The method's path at the upstream.
pub(super) const GET_TRANSACTIONS: &str = "/aptos.indexer.v1.RawData/GetTransactions";
/// The client metadata forwarded upstream: the stream's name as Aptos'
/// indexer clients set it.
pub(super) const REQUEST_NAME: &str = "x-aptos-request-name";
/// Longest request name forwarded.
pub(super) const REQUEST_NAME_MAX_BYTES: usize = 256;
/// The metadata a client may not send on the Transaction Stream (the key
/// goes in `x-api-key`).
pub(super) const AUTHORIZATION: &str = "authorization";
/// Longest upstream message passed on to the client.
pub(super) const UPSTREAM_MESSAGE_MAX_CHARS: usize = 1024;

/// One network's Transaction Stream upstream.
pub(super) struct Upstream {
    /// `chain/network`.
    pub(super) network: Arc<str>,
    /// The node's id.
    pub(super) node: Arc<str>,
    /// `None` when the configured address is not one tonic can connect to
    /// (logged at start-up).
    channel: Option<Channel>,
    credential: Credential,
    /// Its last connection failure (`/healthz` reports it).
    failure: edge::upstream::LastFailure,
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
pub(super) enum Credential {
    /// No `transaction_stream_token`: nothing.
    None,
    /// `authorization: Bearer <token>`, marked sensitive (kept out of the
    /// HTTP/2 header table).
    Bearer(AsciiMetadataValue),
    /// A token that is not a valid header value (logged at start-up).
    Unusable,
}

impl Upstream {
    pub(super) fn new(
        network: &str,
        node: &NodeConfig,
        url: &str,
        tls: &edge::upstream::UpstreamTls,
        failures: &edge::upstream::FailureBoard,
        channels: &mut HashMap<String, Option<Channel>>,
    ) -> Self {
        let channel = channels
            .entry(url.to_owned())
            .or_insert_with(|| match connect_lazy(url, tls) {
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
            failure: failures.add(network),
        }
    }

    /// Opens the upstream stream for `message`, with l1gate's credential
    /// and the caller's `request_name`.
    pub(super) async fn open(
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
        let opened = match client.ready().await {
            Err(error) => Err(Status::from_error(error.into())),
            Ok(()) => client
                .server_streaming(
                    request,
                    http::uri::PathAndQuery::from_static(GET_TRANSACTIONS),
                    UpstreamCodec,
                )
                .await
                .map(Response::into_inner),
        };
        match opened {
            Ok(stream) => {
                self.failure.set(None);
                Ok(stream)
            }
            Err(status) => {
                // Failures to reach it (connection, TLS) are reported in
                // /healthz; the upstream's own answers are not failures.
                if status.source().is_some() {
                    self.failure.set(Some(cause(&status)));
                }
                Err(mapped(&status, &self.network, &self.node))
            }
        }
    }
}

/// A status's message and its chain of causes, bounded.
fn cause(status: &Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = status.source();
    while let Some(error) = source {
        text.push_str(": ");
        text.push_str(&error.to_string());
        source = error.source();
    }
    common::bounded(text)
}

/// A lazily connected HTTP/2 channel to `url`.
pub(super) fn connect_lazy(
    url: &str,
    tls: &edge::upstream::UpstreamTls,
) -> Result<Channel, String> {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| e.to_string())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .initial_stream_window_size(UPSTREAM_STREAM_WINDOW)
        .initial_connection_window_size(UPSTREAM_CONNECTION_WINDOW);
    if !url.starts_with("https://") {
        return Ok(endpoint.connect_lazy());
    }
    // HTTP/2 over TLS (rustls, ALPN `h2`), verified against the same roots
    // as every `https://` upstream: the system's and `upstream_ca_file`'s.
    // A certificate that does not verify fails the connection (the call is
    // UNAVAILABLE), never a plain-text fallback.
    let mut config = ClientTlsConfig::new().with_native_roots();
    if let Some(pem) = tls.ca_pem() {
        config = config.ca_certificate(Certificate::from_pem(pem));
    }
    Ok(endpoint
        .tls_config(config)
        .map_err(|e| e.to_string())?
        .connect_lazy())
}

/// The status the client gets for the upstream's `status` (see the module
/// docs); each is logged with the network and node.
pub(super) fn mapped(status: &Status, network: &str, node: &str) -> Status {
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
pub(super) fn clip(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// `DeadlineExceeded` → `DEADLINE_EXCEEDED`.
pub(super) fn code_name(code: Code) -> String {
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
pub(super) struct UpstreamCodec;

/// Marks a status raised because the upstream's answer did not decode.
#[derive(Debug, thiserror::Error)]
#[error("the upstream's answer is not a TransactionsResponse")]
pub(super) struct Undecodable;

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
