//! The HTTP edge's accept loop: each connection is admitted under the
//! connection limits ([`access::connections`]) before a byte is read,
//! then served by HTTP/1.1 with two timeouts:
//!
//! - **Headers**: a request's headers must arrive within
//!   `http_header_timeout_ms` (a slowloris client trickling bytes is cut).
//! - **Idle**: a connection on which nothing moved for
//!   `http_idle_timeout_ms` and no request is being answered is closed
//!   (an idle keep-alive connection, or one that never sent anything).
//!
//! A WebSocket upgrade hands the connection over (with its admission,
//! [`HeldConnection`]) and these timeouts no longer apply to it.
//!
//! Accept failures (out of descriptors, say) are logged at most every 10 s
//! and retried after a pause instead of spinning.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use access::connections::{ConnectionGuard, Connections};
use common::metrics::Metrics;

use crate::tls::EdgeStream;

/// The HTTP edge's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HttpTimeouts {
    /// A request's headers must arrive within this.
    pub header: Duration,
    /// A connection with nothing moving and no request in flight for this
    /// long is closed.
    pub idle: Duration,
}

/// A connection's admission, in the extensions of each of its requests: a
/// request that takes the connection over (a WebSocket upgrade) keeps it
/// for as long as the connection lives, so the connection goes on counting
/// against the limits after HTTP is done with it.
#[derive(Debug, Clone)]
pub struct HeldConnection {
    _guard: Arc<ConnectionGuard>,
}

/// How long a closing connection may take to finish before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How the HTTP address serves its connections.
pub struct Serving {
    /// The connection limits each is admitted under.
    pub connections: Connections,
    /// Its timeouts.
    pub timeouts: HttpTimeouts,
    /// Where timeouts are counted.
    pub metrics: Arc<Metrics>,
    /// TLS, if configured: each connection's handshake is made in its own
    /// task, within [`crate::tls::HANDSHAKE_TIMEOUT`].
    pub tls: Option<TlsAcceptor>,
    /// Cancelled when the server stops.
    pub shutdown: CancellationToken,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving")
            .field("timeouts", &self.timeouts)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves `router` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, router: Router, serving: Serving) {
    let Serving {
        connections,
        timeouts,
        metrics,
        tls,
        shutdown,
    } = serving;
    loop {
        let accepted = tokio::select! {
            // Stopping comes first: a client told to reconnect by the
            // shutdown (WebSocket close 1001) must not get in again here.
            biased;
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        if shutdown.is_cancelled() {
            // Accepted as the shutdown began: dropped, not served.
            return;
        }
        let (socket, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                if common::metrics::warn_allowed("http accept", Duration::from_secs(10)) {
                    tracing::warn!(%error, "HTTP accept failed; retrying");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over a limit: closed before anything is read.
        let Ok(guard) = connections.admit("http", peer.ip()) else {
            continue;
        };
        let _ = socket.set_nodelay(true);
        let (router, metrics, shutdown, tls) = (
            router.clone(),
            Arc::clone(&metrics),
            shutdown.clone(),
            tls.clone(),
        );
        tokio::spawn(async move {
            match EdgeStream::accept(socket, tls.as_ref()).await {
                Ok(stream) => {
                    serve_connection(stream, peer, router, timeouts, guard, metrics, shutdown)
                        .await;
                }
                Err(error) => tracing::debug!(%error, %peer, "HTTP: TLS handshake failed"),
            }
        });
    }
}

async fn serve_connection(
    socket: EdgeStream,
    peer: SocketAddr,
    router: Router,
    timeouts: HttpTimeouts,
    guard: ConnectionGuard,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let held = HeldConnection {
        _guard: Arc::new(guard),
    };
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        inner: socket,
        activity: Arc::clone(&activity),
    });
    let tower = TowerToHyperService::new(router);
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(held.clone());
            let busy = activity.busy();
            let answer = hyper::service::Service::call(&tower, request);
            async move {
                let response = answer.await;
                drop(busy);
                response
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(connection);
    let check = (timeouts.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    if error.is_timeout() {
                        metrics.http_timeout("header");
                    }
                    tracing::debug!(%error, "HTTP connection ended");
                }
                return;
            }
            // Stopping: the request being answered is finished, then the
            // connection closes.
            () = shutdown.cancelled(), if closing.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing = Some(Instant::now());
            }
            () = tokio::time::sleep(check) => {
                if let Some(since) = closing {
                    if since.elapsed() >= CLOSE_GRACE {
                        return;
                    }
                } else if activity.idle_for() >= timeouts.idle && !activity.in_flight() {
                    metrics.http_timeout("idle");
                    connection.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
            }
        }
    }
}

/// When bytes last moved on a connection, and whether a request is being
/// answered.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    /// Marks a request in flight until the returned guard drops.
    fn busy(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }
}

/// A request being answered.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket that notes when bytes move.
struct Tracked {
    inner: EdgeStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
