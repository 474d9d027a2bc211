//! TLS on the listening addresses: one certificate chain and key (PEM
//! files) for the gRPC and the HTTP/WebSocket address, TLS 1.2 and 1.3,
//! ALPN `h2` on the gRPC address and `http/1.1` on the HTTP one.
//!
//! The files are checked at start — readable, a certificate and a key
//! that belong together, the certificate inside its validity — and a
//! failure is a start-up error naming the file. While serving, the files
//! are looked at every [`RELOAD_EVERY`]: a renewed certificate is loaded
//! and new connections get it; connections already open keep theirs. A
//! replacement that does not pass the same checks is logged and the
//! certificate in use stays.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

/// How often the files are looked at for a renewal.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// The longest a client may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate chain and key files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the server's certificate first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// Why a certificate or key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read, or holds no certificate or key.
    #[error("TLS {what} {}: {reason}", path.display())]
    File {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The certificate is outside its validity.
    #[error("TLS certificate {}: {reason}", path.display())]
    Validity {
        /// The file.
        path: PathBuf,
        /// Expired when, or valid from when.
        reason: String,
    },
    /// The TLS configuration cannot be made (the crypto provider refused
    /// it).
    #[error("TLS: {0}")]
    Config(String),
    /// The key is not the certificate's.
    #[error("TLS key {} does not belong to the certificate {}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
}

/// The certificate being served, replaced when the files are renewed.
#[derive(Debug)]
pub struct ServerTls {
    files: TlsFiles,
    current: Arc<ArcSwap<CertifiedKey>>,
    provider: Arc<CryptoProvider>,
}

impl ServerTls {
    /// Loads and checks the files.
    ///
    /// # Errors
    /// [`TlsError`] naming the file that cannot be served.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = certified_key(files, &provider, SystemTime::now())?;
        Ok(Self {
            files: files.clone(),
            current: Arc::new(ArcSwap::from_pointee(key)),
            provider,
        })
    }

    /// An acceptor offering `alpn` (in order of preference), serving the
    /// certificate in use at each handshake.
    ///
    /// # Errors
    /// [`TlsError::Config`] when the provider refuses TLS 1.2 and 1.3.
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Result<TlsAcceptor, TlsError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|error| TlsError::Config(error.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Current(Arc::clone(&self.current))));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Looks at the files every [`RELOAD_EVERY`] and serves a renewed
    /// certificate to new connections once it passes the start-up checks.
    pub fn spawn_reloader(&self) -> tokio::task::JoinHandle<()> {
        let (files, current, provider) = (
            self.files.clone(),
            Arc::clone(&self.current),
            Arc::clone(&self.provider),
        );
        tokio::spawn(async move {
            let mut seen = stamp(&files);
            let mut tick = tokio::time::interval(RELOAD_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now = stamp(&files);
                if now == seen {
                    continue;
                }
                seen = now;
                match certified_key(&files, &provider, SystemTime::now()) {
                    Ok(key) => {
                        current.store(Arc::new(key));
                        tracing::info!(
                            cert = %files.cert.display(),
                            "TLS: the renewed certificate is served to new connections"
                        );
                    }
                    Err(error) => tracing::error!(
                        %error,
                        "TLS: the replaced files cannot be served; the certificate in use stays"
                    ),
                }
            }
        })
    }
}

/// The resolver: whatever certificate is current.
#[derive(Debug)]
struct Current(Arc<ArcSwap<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// When the files last changed, and their sizes (a rename over them shows
/// too).
fn stamp(files: &TlsFiles) -> [Option<(SystemTime, u64)>; 2] {
    let of = |path: &Path| {
        let meta = std::fs::metadata(path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    };
    [of(&files.cert), of(&files.key)]
}

/// The chain and key of `files`, checked as served at `now`.
fn certified_key(
    files: &TlsFiles,
    provider: &CryptoProvider,
    now: SystemTime,
) -> Result<CertifiedKey, TlsError> {
    let file_error = |what, path: &Path, reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|error| file_error("certificate", &files.cert, pem_reason(&error)))?;
    let Some(leaf) = chain.first() else {
        return Err(file_error(
            "certificate",
            &files.cert,
            "no CERTIFICATE block".into(),
        ));
    };
    within_validity(&files.cert, leaf, now)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|error| file_error("key", &files.key, pem_reason(&error)))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| file_error("key", &files.key, error.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|_| TlsError::Mismatch {
        cert: files.cert.clone(),
        key: files.key.clone(),
    })?;
    Ok(certified)
}

/// A PEM reading error as a reason.
fn pem_reason(error: &rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(error) if error.kind() == io::ErrorKind::NotFound => {
            "no such file".into()
        }
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM block of that kind".into(),
        other => other.to_string(),
    }
}

/// Refuses a certificate outside its validity at `now`.
fn within_validity(path: &Path, der: &CertificateDer<'_>, now: SystemTime) -> Result<(), TlsError> {
    let validity_error = |reason: String| TlsError::Validity {
        path: path.to_owned(),
        reason,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|error| validity_error(format!("not an X.509 certificate: {error}")))?;
    let now_s = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    let validity = cert.validity();
    if now_s > validity.not_after.timestamp() {
        return Err(validity_error(format!("expired on {}", validity.not_after)));
    }
    if now_s < validity.not_before.timestamp() {
        return Err(validity_error(format!(
            "not valid before {}",
            validity.not_before
        )));
    }
    Ok(())
}

/// A connection of a listening address, plain or under TLS.
#[derive(Debug)]
pub enum EdgeStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl EdgeStream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            EdgeStream::Plain(tcp) => tcp,
            EdgeStream::Tls(tls) => tls.get_ref().0,
        }
    }

    /// `socket` as served: its TLS handshake made (within
    /// [`HANDSHAKE_TIMEOUT`]) when `tls` is given.
    ///
    /// # Errors
    /// The handshake failed or took too long.
    pub async fn accept(socket: TcpStream, tls: Option<&TlsAcceptor>) -> io::Result<Self> {
        let Some(acceptor) = tls else {
            return Ok(EdgeStream::Plain(socket));
        };
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
            Ok(stream) => Ok(EdgeStream::Tls(Box::new(stream?))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake took too long",
            )),
        }
    }
}

impl tokio::io::AsyncRead for EdgeStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(tcp) => std::pin::Pin::new(tcp).poll_read(cx, buf),
            EdgeStream::Tls(tls) => std::pin::Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for EdgeStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            EdgeStream::Plain(tcp) => std::pin::Pin::new(tcp).poll_write(cx, data),
            EdgeStream::Tls(tls) => std::pin::Pin::new(tls.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            EdgeStream::Plain(tcp) => std::pin::Pin::new(tcp).poll_write_vectored(cx, bufs),
            EdgeStream::Tls(tls) => std::pin::Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            EdgeStream::Plain(tcp) => tcp.is_write_vectored(),
            EdgeStream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(tcp) => std::pin::Pin::new(tcp).poll_flush(cx),
            EdgeStream::Tls(tls) => std::pin::Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            EdgeStream::Plain(tcp) => std::pin::Pin::new(tcp).poll_shutdown(cx),
            EdgeStream::Tls(tls) => std::pin::Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for EdgeStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp().connect_info()
    }
}
