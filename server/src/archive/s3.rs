//! The S3 client of `l1gate archive fetch`: GET requests over HTTP/1.1
//! (hyper), plain TCP for `http://` endpoints and TLS (rustls with the ring
//! provider, the system's root certificates) for `https://`.
//!
//! Every request is signed with AWS Signature Version 4 ([`super::sigv4`];
//! the payload hash is the empty body's) and carries `x-amz-request-payer:
//! requester`, signed: the archive's buckets are requester-pays and refuse
//! anything else with 403.
//!
//! Addressing: AWS itself is reached virtual-host style,
//! `https://BUCKET.s3.REGION.amazonaws.com/KEY` (path style,
//! `https://s3.REGION.amazonaws.com/BUCKET/KEY`, for a bucket name with a
//! dot, which the wildcard certificate does not cover); a `--endpoint` (an
//! S3-compatible server) path style, `URL/BUCKET/KEY`.
//!
//! Each request opens its own connection: the hour files are megabytes, the
//! listings one request a day, so a pool would save nothing that matters.
//! Connecting, the response head and each read of a body are bounded in
//! time; an exchange that fails for a reason that may pass (connection
//! errors, 5xx, 429, `SlowDown`) is [`S3Error::is_transient`], and
//! [`retrying`] tries it again with exponential backoff.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use quick_xml::events::Event;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

use super::credentials::Resolved;
use super::sigv4::{self, EMPTY_PAYLOAD_SHA256};

/// How long a TCP connect (and TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the response head may take once the request is sent.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a body may go without a byte before the transfer is given up
/// (and resumed by the next attempt).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts of one request before a transient failure is final.
pub const ATTEMPTS: u32 = 5;
/// The largest listing page or error document read.
const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// Where the bucket is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    tls: bool,
    host: String,
    port: u16,
    /// AWS: the bucket in the host name; otherwise in the path.
    virtual_host: bool,
}

impl Endpoint {
    /// AWS's S3 endpoint of `region`, `https://s3.REGION.amazonaws.com`.
    pub fn aws(region: &str) -> Self {
        Self {
            tls: true,
            host: format!("s3.{region}.amazonaws.com"),
            port: 443,
            virtual_host: true,
        }
    }

    /// An S3-compatible server, `http://HOST[:PORT]` or `https://HOST[:PORT]`
    /// (a trailing `/` allowed; no other path).
    ///
    /// # Errors
    /// What is wrong with the URL.
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|_| "not a URL (http://HOST:PORT or https://HOST:PORT)".to_owned())?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err("the scheme must be http:// or https://".to_owned()),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| "no host".to_owned())?;
        if uri.path() != "/" && !uri.path().is_empty() || uri.query().is_some() {
            return Err("no path or query: the bucket and key are added to it".to_owned());
        }
        Ok(Self {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            virtual_host: false,
        })
    }

    fn virtual_host_for(&self, bucket: &str) -> bool {
        self.virtual_host && !bucket.contains('.')
    }

    /// The host to connect to (and to name in TLS).
    fn connect_host(&self, bucket: &str) -> String {
        if self.virtual_host_for(bucket) {
            format!("{bucket}.{}", self.host)
        } else {
            self.host.clone()
        }
    }

    /// The `Host` header.
    fn host_header(&self, bucket: &str) -> String {
        let host = self.connect_host(bucket);
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The request path of `key` (URI-encoded), or of the bucket itself
    /// when `key` is empty.
    fn path(&self, bucket: &str, key: &str) -> String {
        let key = sigv4::uri_encode(key, false);
        match (self.virtual_host_for(bucket), key.is_empty()) {
            (true, _) => format!("/{key}"),
            (false, true) => format!("/{}", sigv4::uri_encode(bucket, true)),
            (false, false) => format!("/{}/{key}", sigv4::uri_encode(bucket, true)),
        }
    }

    /// The endpoint as a URL, for messages.
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.host_header("")
        )
    }
}

/// Why a request to the bucket failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum S3Error {
    /// The connection failed, timed out or broke off.
    #[error("s3://{bucket}/{key}: {message}")]
    Transport {
        /// The bucket.
        bucket: String,
        /// The key, or `?prefix=…` for a listing.
        key: String,
        /// What happened.
        message: String,
    },
    /// 403: the credentials are wrong, or the request was not one a
    /// requester-pays bucket takes.
    #[error(
        "s3://{bucket}/{key}: access denied, HTTP 403 {code} ({message:?}); check the AWS \
         credentials (from {credentials}): the bucket is requester-pays, so every request must \
         be signed by an AWS account, which pays for the transfer"
    )]
    Forbidden {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// S3's error code (`AccessDenied`, `InvalidAccessKeyId`, …).
        code: String,
        /// S3's message.
        message: String,
        /// Where the credentials came from.
        credentials: String,
    },
    /// 404 `NoSuchBucket`.
    #[error("bucket {bucket} does not exist at {endpoint} (HTTP 404 NoSuchBucket)")]
    NoSuchBucket {
        /// The bucket.
        bucket: String,
        /// The endpoint asked.
        endpoint: String,
    },
    /// 404 for an object.
    #[error("s3://{bucket}/{key}: no such key (HTTP 404 {code})")]
    NotFound {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// S3's error code.
        code: String,
    },
    /// The bucket is in another region than the one requests were signed
    /// for.
    #[error(
        "s3://{bucket}/{key}: the bucket is in region {actual}, not {used}: pass --region \
         {actual} (or unset AWS_REGION and AWS_DEFAULT_REGION)"
    )]
    WrongRegion {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The bucket's region, as S3 answered.
        actual: String,
        /// The region used.
        used: String,
    },
    /// Any other answer but success.
    #[error("s3://{bucket}/{key}: HTTP {status} {code}: {message}")]
    Status {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
        /// The HTTP status.
        status: u16,
        /// S3's error code, if it sent one.
        code: String,
        /// S3's message, or the start of the body.
        message: String,
    },
    /// A listing that is not ListObjectsV2's XML.
    #[error("s3://{bucket}/{key}: unreadable ListObjectsV2 answer: {message}")]
    Listing {
        /// The bucket.
        bucket: String,
        /// `?prefix=…`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// TLS could not be set up (no root certificates, say).
    #[error("TLS for {endpoint}: {message}")]
    Tls {
        /// The endpoint.
        endpoint: String,
        /// What failed.
        message: String,
    },
}

impl S3Error {
    /// Whether trying again may succeed: connection failures, 5xx, 429 and
    /// `SlowDown`.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { .. } => true,
            Self::Status { status, code, .. } => {
                *status >= 500 || *status == 429 || code == "SlowDown"
            }
            _ => false,
        }
    }
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The objects on it.
    pub objects: Vec<Object>,
    /// Whether more pages follow.
    pub truncated: bool,
    /// The token that asks for the next page.
    pub next_token: Option<String>,
}

/// A client of one bucket.
pub struct Client {
    endpoint: Endpoint,
    bucket: String,
    region: String,
    credentials: Resolved,
    tls: Option<(TlsConnector, rustls::pki_types::ServerName<'static>)>,
}

impl Client {
    /// A client of `bucket` at `endpoint`, signing for `region`.
    ///
    /// # Errors
    /// [`S3Error::Tls`] for an `https://` endpoint when TLS cannot be set up.
    pub fn new(
        endpoint: Endpoint,
        bucket: &str,
        region: &str,
        credentials: Resolved,
    ) -> Result<Self, S3Error> {
        let tls = if endpoint.tls {
            let host = endpoint.connect_host(bucket);
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                S3Error::Tls {
                    endpoint: endpoint.url(),
                    message: format!("{host:?} is not a server name: {e}"),
                }
            })?;
            Some((TlsConnector::from(tls_config(&endpoint)?), name))
        } else {
            None
        };
        Ok(Self {
            endpoint,
            bucket: bucket.to_owned(),
            region: region.to_owned(),
            credentials,
            tls,
        })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The endpoint, for messages.
    pub fn endpoint_url(&self) -> String {
        self.endpoint.url()
    }

    /// Every object under `prefix`, all pages (ListObjectsV2), each page
    /// retried as [`retrying`] does.
    ///
    /// # Errors
    /// [`S3Error`] of the page that failed.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Object>, S3Error> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = retrying(|| self.list_page(prefix, token.as_deref())).await?;
            objects.extend(page.objects);
            match page.next_token {
                Some(next) if page.truncated => {
                    if token.as_deref() == Some(next.as_str()) {
                        return Err(self.listing_error(prefix, "the same continuation token twice"));
                    }
                    token = Some(next);
                }
                _ => return Ok(objects),
            }
        }
    }

    async fn list_page(&self, prefix: &str, token: Option<&str>) -> Result<ListPage, S3Error> {
        let mut query = vec![("list-type", "2"), ("prefix", prefix)];
        if let Some(token) = token {
            query.push(("continuation-token", token));
        }
        let shown = format!("?prefix={prefix}");
        let response = self.send("", &query, None, &shown).await?;
        if response.status() != StatusCode::OK {
            return Err(self.error_of(&shown, response).await);
        }
        let body = read_document(response.into_body())
            .await
            .map_err(|message| self.transport(&shown, message))?;
        parse_list(&body).map_err(|message| self.listing_error(prefix, &message))
    }

    /// GETs `key` from byte `from` on (a `Range: bytes=FROM-` request when
    /// `from` > 0): the answer's head, 200 or 206, with the body to read.
    ///
    /// # Errors
    /// [`S3Error`]: any other status, or the exchange failed.
    pub async fn get(&self, key: &str, from: u64) -> Result<Response<Incoming>, S3Error> {
        let range = (from > 0).then(|| format!("bytes={from}-"));
        let response = self.send(key, &[], range.as_deref(), key).await?;
        match response.status() {
            StatusCode::OK | StatusCode::PARTIAL_CONTENT => Ok(response),
            _ => Err(self.error_of(key, response).await),
        }
    }

    /// A transport failure of `key`.
    pub fn transport(&self, key: &str, message: String) -> S3Error {
        S3Error::Transport {
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            message,
        }
    }

    fn listing_error(&self, prefix: &str, message: &str) -> S3Error {
        S3Error::Listing {
            bucket: self.bucket.clone(),
            key: format!("?prefix={prefix}"),
            message: message.to_owned(),
        }
    }

    /// The signed request for `key` (the bucket itself when empty).
    fn request(
        &self,
        key: &str,
        query: &[(&str, &str)],
        range: Option<&str>,
        unix_secs: i64,
    ) -> Result<Request<Empty<Bytes>>, String> {
        let path = self.endpoint.path(&self.bucket, key);
        let host = self.endpoint.host_header(&self.bucket);
        let amz_date = sigv4::amz_date(unix_secs);
        let credentials = &self.credentials.credentials;
        let mut headers: Vec<(&str, &str)> = vec![
            ("host", &host),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
            ("x-amz-date", &amz_date),
            ("x-amz-request-payer", "requester"),
        ];
        if let Some(range) = range {
            headers.push(("range", range));
        }
        if let Some(token) = &credentials.session_token {
            headers.push(("x-amz-security-token", token));
        }
        let signer = sigv4::Signer {
            access_key_id: &credentials.access_key_id,
            secret_access_key: &credentials.secret_access_key,
            region: &self.region,
            service: "s3",
            amz_date: &amz_date,
        };
        let authorization = signer.authorization(&sigv4::Request {
            method: "GET",
            path: &path,
            query,
            headers: &headers,
            payload_sha256: EMPTY_PAYLOAD_SHA256,
        });
        let query = sigv4::canonical_query(query);
        let uri = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        let mut builder = Request::get(uri);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        builder
            .header("authorization", authorization)
            .header("user-agent", concat!("l1gate/", env!("CARGO_PKG_VERSION")))
            .body(Empty::new())
            .map_err(|e| format!("building the request: {e}"))
    }

    /// Sends one signed GET on a connection of its own.
    async fn send(
        &self,
        key: &str,
        query: &[(&str, &str)],
        range: Option<&str>,
        shown: &str,
    ) -> Result<Response<Incoming>, S3Error> {
        let failed = |message: String| self.transport(shown, message);
        let request = self
            .request(key, query, range, common::unix_now_ms().div_euclid(1_000))
            .map_err(failed)?;
        let host = self.endpoint.connect_host(&self.bucket);
        let port = self.endpoint.port;
        let connect = async {
            let tcp = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| failed(format!("connecting to {host}:{port}: {e}")))?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                Some((connector, name)) => {
                    let stream = connector.connect(name.clone(), tcp).await.map_err(|e| {
                        let message = format!("TLS with {host}:{port}: {e}");
                        // A certificate refused stays refused; a handshake
                        // cut off may pass.
                        if e.kind() == std::io::ErrorKind::InvalidData {
                            S3Error::Tls {
                                endpoint: self.endpoint.url(),
                                message,
                            }
                        } else {
                            failed(message)
                        }
                    })?;
                    handshake(stream).await.map_err(failed)
                }
                None => handshake(tcp).await.map_err(failed),
            }
        };
        let mut sender = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| failed(format!("connecting to {host}:{port}: timed out")))??;
        tokio::time::timeout(RESPONSE_TIMEOUT, sender.send_request(request))
            .await
            .map_err(|_| failed(format!("no answer within {} s", RESPONSE_TIMEOUT.as_secs())))?
            .map_err(|e| failed(error_chain(&e)))
    }

    /// The error an unsuccessful answer means.
    async fn error_of(&self, key: &str, response: Response<Incoming>) -> S3Error {
        let status = response.status();
        let header_region = response
            .headers()
            .get("x-amz-bucket-region")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_document(response.into_body())
            .await
            .unwrap_or_default();
        let error = parse_error(&body);
        let code = error.code.clone().unwrap_or_default();
        let message = error.message.clone().unwrap_or_else(|| {
            let start: String = body.chars().take(200).collect();
            if start.trim().is_empty() {
                status.canonical_reason().unwrap_or("").to_owned()
            } else {
                start
            }
        });
        let bucket = self.bucket.clone();
        let key = key.to_owned();
        let actual = header_region.or(error.region);
        match (status.as_u16(), code.as_str(), actual) {
            (403, _, _) => S3Error::Forbidden {
                bucket,
                key,
                code,
                message,
                credentials: self.credentials.source.clone(),
            },
            (404, "NoSuchBucket", _) => S3Error::NoSuchBucket {
                bucket,
                endpoint: self.endpoint.url(),
            },
            (404, _, _) => S3Error::NotFound { bucket, key, code },
            (301 | 307 | 400, _, Some(actual)) if actual != self.region => S3Error::WrongRegion {
                bucket,
                key,
                actual,
                used: self.region.clone(),
            },
            (status, _, _) => S3Error::Status {
                bucket,
                key,
                status,
                code,
                message,
            },
        }
    }
}

/// Runs `attempt` until it succeeds, fails for good, or has failed
/// [`ATTEMPTS`] times; waits [`backoff`] between tries.
///
/// # Errors
/// The last attempt's.
pub async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T, S3Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, S3Error>>,
{
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(error) if error.is_transient() && tried < ATTEMPTS => {
                tokio::time::sleep(backoff(tried)).await;
                tried += 1;
            }
            result => return result,
        }
    }
}

/// The wait after the `tried`-th failed attempt: 0.5 s doubling up to 8 s,
/// plus up to a quarter more at random, so parallel transfers that failed
/// together do not come back together.
pub fn backoff(tried: u32) -> Duration {
    let base = 500u64.saturating_mul(1 << tried.saturating_sub(1).min(4));
    Duration::from_millis(base + rand::random_range(0..=base / 4))
}

/// The TLS setup: the system's root certificates, the ring provider.
fn tls_config(endpoint: &Endpoint) -> Result<Arc<rustls::ClientConfig>, S3Error> {
    let failed = |message: String| S3Error::Tls {
        endpoint: endpoint.url(),
        message,
    };
    let native = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (_added, _ignored) = roots.add_parsable_certificates(native.certs);
    if roots.is_empty() {
        let why = native
            .errors
            .first()
            .map_or_else(String::new, |e| format!(" ({e})"));
        return Err(failed(format!(
            "no root certificates found on this system{why}; install ca-certificates or set \
             SSL_CERT_FILE"
        )));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// An HTTP/1.1 connection over `io`, its driver spawned.
async fn handshake<T>(
    io: T,
) -> Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>, String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| error_chain(&e))?;
    tokio::spawn(async move {
        // Its failures reach the request or the body reader.
        let _ = connection.await;
    });
    Ok(sender)
}

/// An error with its sources, `outer: inner: …`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    text
}

/// A whole small body (a listing page, an error document) as text.
async fn read_document(body: Incoming) -> Result<String, String> {
    let limited = http_body_util::Limited::new(body, MAX_DOCUMENT_BYTES);
    let bytes = tokio::time::timeout(IDLE_TIMEOUT, limited.collect())
        .await
        .map_err(|_| format!("the answer stalled for {} s", IDLE_TIMEOUT.as_secs()))?
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    String::from_utf8(bytes.to_vec()).map_err(|_| "the answer is not UTF-8".to_owned())
}

/// Parses one ListObjectsV2 page (`<ListBucketResult>`: `Contents` with
/// `Key` and `Size`, `IsTruncated`, `NextContinuationToken`).
///
/// # Errors
/// What is wrong: not XML, not a `ListBucketResult`, a `Contents` without
/// a key or a size, a truncated page without a token.
pub fn parse_list(xml: &str) -> Result<ListPage, String> {
    let mut page = ListPage::default();
    let mut seen_root = false;
    let (mut key, mut size) = (None, None);
    walk(xml, |path, text| {
        match path {
            ["ListBucketResult"] => seen_root = true,
            ["ListBucketResult", "Contents", "Key"] => key = Some(text.to_owned()),
            ["ListBucketResult", "Contents", "Size"] => {
                size = Some(
                    text.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("Size {text:?} is not a byte count"))?,
                );
            }
            ["ListBucketResult", "Contents"] => {
                let key = key.take().ok_or("a Contents without a Key")?;
                let size = size
                    .take()
                    .ok_or_else(|| format!("{key}: a Contents without a Size"))?;
                page.objects.push(Object { key, size });
            }
            ["ListBucketResult", "IsTruncated"] => page.truncated = text.trim() == "true",
            ["ListBucketResult", "NextContinuationToken"] => {
                page.next_token = Some(text.to_owned());
            }
            _ => {}
        }
        Ok(())
    })?;
    if !seen_root {
        return Err("no ListBucketResult element".to_owned());
    }
    if page.truncated && page.next_token.is_none() {
        return Err("IsTruncated without a NextContinuationToken".to_owned());
    }
    Ok(page)
}

/// The fields of an S3 error document (`<Error><Code>…`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorDocument {
    /// `Code`.
    pub code: Option<String>,
    /// `Message`.
    pub message: Option<String>,
    /// `Region` (wrong-region answers carry it).
    pub region: Option<String>,
}

/// The fields of an S3 error document; all `None` when `xml` is not one.
pub fn parse_error(xml: &str) -> ErrorDocument {
    let mut document = ErrorDocument::default();
    let _ = walk(xml, |path, text| {
        let field = match path {
            ["Error", "Code"] => &mut document.code,
            ["Error", "Message"] => &mut document.message,
            ["Error", "Region"] => &mut document.region,
            _ => return Ok(()),
        };
        *field = Some(text.to_owned());
        Ok(())
    });
    document
}

/// Walks `xml`, calling `at_end` with the path of local names of each
/// element as it closes and its text (entities resolved).
fn walk(
    xml: &str,
    mut at_end: impl FnMut(&[&str], &str) -> Result<(), String>,
) -> Result<(), String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("at byte {}: {e}", reader.error_position()))?;
        match event {
            Event::Start(start) => {
                path.push(start.local_name().as_ref().to_owned());
                text.clear();
            }
            Event::Empty(empty) => {
                path.push(empty.local_name().as_ref().to_owned());
                let names: Vec<&str> = path.iter().map(String::as_str).collect();
                at_end(&names, "")?;
                path.pop();
            }
            Event::End(_) => {
                let names: Vec<&str> = path.iter().map(String::as_str).collect();
                at_end(&names, &text)?;
                path.pop();
                text.clear();
            }
            Event::Text(content) => text.push_str(&content.xml10_content()),
            Event::CData(content) => text.push_str(&content.xml10_content()),
            Event::GeneralRef(reference) => {
                if let Some(c) = reference.resolve_char_ref().map_err(|e| e.to_string())? {
                    text.push(c);
                } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(&reference) {
                    text.push_str(s);
                } else {
                    return Err(format!("unknown entity &{};", &*reference));
                }
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE_ONE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>hl-mainnet-node-data</Name>
  <Prefix>node_fills_by_block/hourly/20251130/</Prefix>
  <KeyCount>2</KeyCount>
  <MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <Contents>
    <Key>node_fills_by_block/hourly/20251130/0.lz4</Key>
    <LastModified>2025-11-30T01:10:02.000Z</LastModified>
    <ETag>&quot;0b6c0e3c3a5a1e9f&quot;</ETag>
    <Size>21734512</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>node_fills_by_block/hourly/20251130/1.lz4</Key>
    <Size>19002211</Size>
  </Contents>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&amp;x</NextContinuationToken>
</ListBucketResult>"#;

    const PAGE_TWO: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix><KeyCount>1</KeyCount><MaxKeys>2</MaxKeys><ContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&amp;x</ContinuationToken><IsTruncated>false</IsTruncated><Contents><Key>node_fills_by_block/hourly/20251130/12.lz4</Key><Size>0</Size></Contents></ListBucketResult>"#;

    #[test]
    fn listing_pages_give_keys_sizes_and_the_continuation_token() {
        let one = parse_list(PAGE_ONE).unwrap();
        assert_eq!(
            one.objects,
            [
                Object {
                    key: "node_fills_by_block/hourly/20251130/0.lz4".into(),
                    size: 21_734_512
                },
                Object {
                    key: "node_fills_by_block/hourly/20251130/1.lz4".into(),
                    size: 19_002_211
                },
            ]
        );
        assert!(one.truncated);
        assert_eq!(
            one.next_token.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=&x")
        );
        let two = parse_list(PAGE_TWO).unwrap();
        assert!(!two.truncated);
        assert_eq!(two.next_token, None);
        assert_eq!(two.objects.len(), 1);
        assert_eq!(two.objects[0].size, 0);
    }

    #[test]
    fn an_empty_listing_has_no_objects() {
        let page = parse_list(
            r#"<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>x/</Prefix><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>"#,
        )
        .unwrap();
        assert_eq!(page, ListPage::default());
    }

    #[test]
    fn broken_listings_are_refused() {
        for (xml, why) in [
            ("<Error><Code>x</Code></Error>", "no ListBucketResult"),
            (
                "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
                "without a Key",
            ),
            (
                "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
                "not a byte count",
            ),
            (
                "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
                "NextContinuationToken",
            ),
            (
                "<ListBucketResult><Contents><Key>a</Key></ListBucketResult>",
                "at byte",
            ),
        ] {
            let error = parse_list(xml).unwrap_err();
            assert!(error.contains(why), "{xml}: {error}");
        }
    }

    #[test]
    fn error_documents_give_code_message_and_region() {
        let document = parse_error(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region &apos;us-east-1&apos; is wrong; expecting &apos;ap-northeast-1&apos;</Message><Region>ap-northeast-1</Region><RequestId>X</RequestId></Error>"#,
        );
        assert_eq!(
            document.code.as_deref(),
            Some("AuthorizationHeaderMalformed")
        );
        assert_eq!(
            document.message.as_deref(),
            Some("the region 'us-east-1' is wrong; expecting 'ap-northeast-1'")
        );
        assert_eq!(document.region.as_deref(), Some("ap-northeast-1"));
        assert_eq!(parse_error("not xml <"), ErrorDocument::default());
    }

    #[test]
    fn endpoints_address_aws_by_host_and_others_by_path() {
        let aws = Endpoint::aws("ap-northeast-1");
        assert_eq!(
            aws.host_header("hl-mainnet-node-data"),
            "hl-mainnet-node-data.s3.ap-northeast-1.amazonaws.com"
        );
        assert_eq!(
            aws.path(
                "hl-mainnet-node-data",
                "node_fills_by_block/hourly/20250727/8.lz4"
            ),
            "/node_fills_by_block/hourly/20250727/8.lz4"
        );
        assert_eq!(aws.path("hl-mainnet-node-data", ""), "/");
        // A dotted bucket name goes in the path.
        assert_eq!(aws.host_header("a.b"), "s3.ap-northeast-1.amazonaws.com");
        assert_eq!(aws.path("a.b", "k"), "/a.b/k");

        let local = Endpoint::parse("http://127.0.0.1:5000/").unwrap();
        assert_eq!(local.host_header("bucket"), "127.0.0.1:5000");
        assert_eq!(local.path("bucket", "x/1.lz4"), "/bucket/x/1.lz4");
        assert_eq!(local.path("bucket", ""), "/bucket");
        assert_eq!(local.url(), "http://127.0.0.1:5000");
        assert_eq!(Endpoint::parse("https://minio.example").unwrap().port, 443);
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://x:1/bucket").is_err());
        assert!(Endpoint::parse("127.0.0.1:5000").is_err());
    }

    #[test]
    fn transient_failures_are_the_ones_worth_retrying() {
        let status = |status: u16, code: &str| S3Error::Status {
            bucket: "b".into(),
            key: "k".into(),
            status,
            code: code.into(),
            message: String::new(),
        };
        assert!(status(500, "InternalError").is_transient());
        assert!(status(503, "SlowDown").is_transient());
        assert!(status(429, "").is_transient());
        assert!(!status(400, "InvalidArgument").is_transient());
        assert!(
            S3Error::Transport {
                bucket: "b".into(),
                key: "k".into(),
                message: "reset".into()
            }
            .is_transient()
        );
        assert!(
            !S3Error::NoSuchBucket {
                bucket: "b".into(),
                endpoint: "e".into()
            }
            .is_transient()
        );
        assert!(
            backoff(1) >= Duration::from_millis(500) && backoff(1) <= Duration::from_millis(625)
        );
        assert!(backoff(9) <= Duration::from_secs(10));
    }
}
