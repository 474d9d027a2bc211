//! The HTTP client l1gate uses to reach its upstreams: the Info server
//! (lookups and the poller behind the Info-derived streams) and the chain
//! node's REST/GraphQL API (the gateway).
//!
//! `http://` or `https://` (HTTP/1.1 over hyper's pooled client, rustls
//! for TLS): an `https://` upstream is verified against the system's root
//! certificates plus the operator's `upstream_ca_file`, and one that fails
//! verification is an error of the exchange (logged, answered 502), never
//! a fall back to plain text. Every exchange is bounded: the whole
//! request, response head and body must complete within the configured
//! timeout, and a response body larger than its cap is refused rather than
//! buffered.

use std::fmt;
use std::time::Duration;

use axum::http::{HeaderMap, Method, Request, StatusCode, Uri, uri};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Serialize, Serializer};
use thiserror::Error;
use tokio_rustls::rustls;

/// How long a TCP connect to an upstream may take (within the exchange's
/// overall timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A validated `http://host[:port][/path]` upstream address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    uri: Uri,
}

/// Why an upstream address was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UrlError {
    /// Not a URL at all.
    #[error("{0:?} is not a URL")]
    Malformed(String),
    /// A scheme other than `http` or `https`.
    #[error("{0:?}: an upstream is an http:// or https:// URL")]
    Scheme(String),
    /// No host.
    #[error("{0:?} has no host")]
    NoHost(String),
    /// A query string or fragment, which would be lost or mangled.
    #[error("{0:?}: a query string is not allowed in an upstream address")]
    Query(String),
}

impl UpstreamUrl {
    /// Parses and checks `text`.
    ///
    /// # Errors
    /// [`UrlError`] when it is not an `http://` or `https://` URL with a
    /// host and no query.
    pub fn parse(text: &str) -> Result<Self, UrlError> {
        let uri: Uri = text
            .parse()
            .map_err(|_| UrlError::Malformed(text.to_owned()))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            Some(_) => return Err(UrlError::Scheme(text.to_owned())),
            None => return Err(UrlError::Malformed(text.to_owned())),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err(UrlError::NoHost(text.to_owned()));
        }
        if uri.query().is_some() || text.contains('#') {
            return Err(UrlError::Query(text.to_owned()));
        }
        Ok(Self { uri })
    }

    /// The address itself (for a POST to an endpoint such as `/info`).
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The address with `path` (starting with `/`) appended to its own path
    /// and `query` (without `?`) attached.
    ///
    /// # Errors
    /// When the result is not a valid URI (e.g. `path` holds characters a
    /// URI cannot carry).
    pub fn join(&self, path: &str, query: Option<&str>) -> Result<Uri, UrlError> {
        let base = self.uri.path().trim_end_matches('/');
        let mut path_and_query = format!("{base}{path}");
        if let Some(query) = query {
            path_and_query.push('?');
            path_and_query.push_str(query);
        }
        let mut parts = uri::Parts::default();
        parts.scheme = self.uri.scheme().cloned();
        parts.authority = self.uri.authority().cloned();
        parts.path_and_query = Some(
            path_and_query
                .parse()
                .map_err(|_| UrlError::Malformed(path_and_query.clone()))?,
        );
        Uri::from_parts(parts).map_err(|_| UrlError::Malformed(path_and_query))
    }
}

impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.uri.fmt(f)
    }
}

impl Serialize for UpstreamUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.uri)
    }
}

/// Where l1gate's upstreams are and how long it waits for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamSettings {
    /// The Info source (`POST /info`, the Info-derived streams); `None` =
    /// derived lookups and book mids.
    pub info_url: Option<UpstreamUrl>,
    /// How long cached Info types (`meta`, `spotMeta`, `perpDexs`) live.
    pub info_cache: Duration,
    /// How often the Info poller asks for `allMids` / `metaAndAssetCtxs`.
    pub info_poll_interval: Duration,
    /// The chain node's REST/GraphQL API; `None` = the gateway answers 503.
    pub node_url: Option<UpstreamUrl>,
    /// Longest exchange with either.
    pub timeout: Duration,
    /// Longest `wait_by_hash` exchange with a node.
    pub node_wait_timeout: Duration,
    /// How long a network's ledger info is cached.
    pub ledger_cache: Duration,
    /// What `https://` upstreams are verified against.
    pub tls: UpstreamTls,
}

/// Why the last exchange with one upstream failed (`None`: it succeeded,
/// or none was made), shared by clones: what `/healthz` says of it.
#[derive(Debug, Clone, Default)]
pub struct LastFailure(std::sync::Arc<parking_lot::Mutex<Option<String>>>);

impl LastFailure {
    /// Records the outcome of an exchange.
    pub fn set(&self, failure: Option<String>) {
        *self.0.lock() = failure;
    }

    /// The failure recorded last.
    pub fn get(&self) -> Option<String> {
        self.0.lock().clone()
    }
}

/// The [`LastFailure`] of each network's upstream of one kind, for an edge
/// that connects to them apart from the one that reports them (the
/// Transaction Stream relay on the gRPC address, `/healthz` on HTTP).
#[derive(Debug, Clone, Default)]
pub struct FailureBoard(
    std::sync::Arc<parking_lot::Mutex<std::collections::BTreeMap<String, LastFailure>>>,
);

impl FailureBoard {
    /// `network`'s entry, listed (with no failure yet) if it was not.
    pub fn add(&self, network: &str) -> LastFailure {
        self.0.lock().entry(network.to_owned()).or_default().clone()
    }

    /// `network`'s last failure: `None` when it is not listed.
    pub fn get(&self, network: &str) -> Option<Option<String>> {
        self.0.lock().get(network).map(LastFailure::get)
    }
}

/// The roots `https://` upstreams are verified against: the system's
/// certificates and those of an optional CA bundle.
#[derive(Clone)]
pub struct UpstreamTls {
    ca_file: Option<std::path::PathBuf>,
    /// The bundle's text, read once (for clients that take roots as PEM).
    ca_pem: Option<std::sync::Arc<[u8]>>,
    config: std::sync::Arc<rustls::ClientConfig>,
}

/// Why the upstream roots cannot be loaded.
#[derive(Debug, Error)]
pub enum UpstreamTlsError {
    /// The CA bundle cannot be read or holds no certificate.
    #[error("{}: {reason}", path.display())]
    Bundle {
        /// The bundle.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The TLS configuration cannot be made.
    #[error("TLS: {0}")]
    Config(String),
}

impl UpstreamTls {
    /// The system's roots, and those of `ca_file` when given.
    ///
    /// # Errors
    /// [`UpstreamTlsError`] when the bundle cannot be read or holds no
    /// certificate.
    pub fn new(ca_file: Option<&std::path::Path>) -> Result<Self, UpstreamTlsError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        // The system's store: what it cannot read is left out (logged at
        // debug; the bundle is the operator's way to add roots).
        let system = rustls_native_certs::load_native_certs();
        for error in &system.errors {
            tracing::debug!(%error, "upstream TLS: a system root could not be read");
        }
        roots.add_parsable_certificates(system.certs);
        let mut ca_pem = None;
        if let Some(path) = ca_file {
            let bundle_error = |reason: String| UpstreamTlsError::Bundle {
                path: path.to_owned(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|error| bundle_error(error.to_string()))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| bundle_error(error.to_string()))?;
            if certs.is_empty() {
                return Err(bundle_error("no CERTIFICATE block".into()));
            }
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bundle_error("no certificate that parses".into()));
            }
            ca_pem = Some(pem.into());
        }
        // No ALPN here: the connector offers http/1.1 itself.
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|error| UpstreamTlsError::Config(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(Self {
            ca_file: ca_file.map(std::path::Path::to_owned),
            ca_pem,
            config: std::sync::Arc::new(config),
        })
    }
}

impl UpstreamTls {
    /// The client configuration (no ALPN), for upstreams that make their
    /// own TLS connections (the node's JSON-RPC WebSocket).
    pub fn client_config(&self) -> std::sync::Arc<rustls::ClientConfig> {
        self.config.clone()
    }

    /// The CA bundle added to the system's roots, as read at start, if
    /// any (for the Transaction Stream's gRPC client, which takes roots as
    /// PEM, not a configuration).
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca_pem.as_deref()
    }
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// Two are the same when they add the same bundle to the system's roots.
impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca_file == other.ca_file
    }
}

impl Eq for UpstreamTls {}

impl Serialize for UpstreamTls {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.ca_file.serialize(serializer)
    }
}

impl UpstreamSettings {
    /// These settings with the node gateway's own timing.
    #[must_use]
    pub fn with_node(self, node_wait_timeout: Duration, ledger_cache: Duration) -> Self {
        Self {
            node_wait_timeout,
            ledger_cache,
            ..self
        }
    }
}

/// A buffered upstream response.
#[derive(Debug, Clone)]
pub struct UpstreamResponse {
    /// Status as the upstream sent it.
    pub status: StatusCode,
    /// Headers as the upstream sent them.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// Why an exchange with an upstream failed (the caller answers 502).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UpstreamError {
    /// Connecting or talking to it failed.
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    /// It did not answer completely within the timeout.
    #[error("upstream did not answer within {0} ms")]
    Timeout(u128),
    /// Its response body exceeded the cap.
    #[error("upstream response exceeds {0} bytes")]
    TooLarge(usize),
    /// The request could not be built.
    #[error("bad upstream request: {0}")]
    Request(String),
}

/// A pooled HTTP/1.1 client with a timeout and a response size cap.
#[derive(Clone)]
pub struct UpstreamClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    max_body: usize,
    /// Why the last exchange failed, if it did (shared by clones): what
    /// `/healthz` says of the upstream.
    last_failure: LastFailure,
}

impl fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamClient")
            .field("timeout", &self.timeout)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

impl UpstreamClient {
    /// A client whose exchanges take at most `timeout` and whose response
    /// bodies are at most `max_body` bytes, `https://` verified against
    /// `tls`.
    pub fn new(timeout: Duration, max_body: usize, tls: &UpstreamTls) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT.min(timeout)));
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls.config).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self {
            client,
            timeout,
            max_body,
            last_failure: LastFailure::default(),
        }
    }

    /// Why the last exchange of this client (or a clone) failed, if it
    /// did: unreachable, a certificate that did not verify, too slow.
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure.get()
    }

    /// The exchange timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one request and buffers the response.
    ///
    /// # Errors
    /// [`UpstreamError`] when the upstream cannot be reached, is too slow or
    /// answers with too large a body. Any status the upstream sends is a
    /// response, not an error.
    pub async fn send(
        &self,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| UpstreamError::Request(e.to_string()))?;
        *request.headers_mut() = headers;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| UpstreamError::Unreachable(error_chain(&e)))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, self.max_body)
                .collect()
                .await
                .map_err(|e| {
                    if e.downcast_ref::<LengthLimitError>().is_some() {
                        UpstreamError::TooLarge(self.max_body)
                    } else {
                        UpstreamError::Unreachable(e.to_string())
                    }
                })?
                .to_bytes();
            Ok(UpstreamResponse {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        let result = tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(self.timeout.as_millis())));
        self.last_failure
            .set(result.as_ref().err().map(ToString::to_string));
        result
    }

    /// POSTs a JSON body to `uri`.
    ///
    /// # Errors
    /// As [`UpstreamClient::send`].
    pub async fn post_json(
        &self,
        uri: Uri,
        body: Bytes,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        self.send(Method::POST, uri, headers, body).await
    }
}

/// An error and its sources on one line (hyper's top-level messages alone
/// say little, e.g. "client error (Connect)").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_with_a_host_and_no_query_are_accepted() {
        assert!(UpstreamUrl::parse("http://127.0.0.1:3001/info").is_ok());
        assert!(UpstreamUrl::parse("http://node.local").is_ok());
        assert!(UpstreamUrl::parse("https://api.example/info").is_ok());
        assert!(matches!(
            UpstreamUrl::parse("ftp://api.example/info"),
            Err(UrlError::Scheme(_))
        ));
        assert!(matches!(
            UpstreamUrl::parse("127.0.0.1:3001"),
            Err(UrlError::Scheme(_) | UrlError::Malformed(_))
        ));
        assert!(matches!(
            UpstreamUrl::parse("http://h/info?x=1"),
            Err(UrlError::Query(_))
        ));
        assert!(matches!(
            UpstreamUrl::parse("not a url"),
            Err(UrlError::Malformed(_))
        ));
    }

    #[test]
    fn join_appends_to_the_base_path_and_keeps_the_query() {
        let base = UpstreamUrl::parse("http://h:8080/").unwrap();
        assert_eq!(
            base.join("/v1/accounts/0x1", Some("limit=5"))
                .unwrap()
                .to_string(),
            "http://h:8080/v1/accounts/0x1?limit=5"
        );
        let prefixed = UpstreamUrl::parse("http://h/node/").unwrap();
        assert_eq!(
            prefixed.join("/v1", None).unwrap().to_string(),
            "http://h/node/v1"
        );
        assert!(base.join("/v1/a b", None).is_err());
    }
}
