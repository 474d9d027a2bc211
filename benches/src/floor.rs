//! The machine's floor under a live path: the shortest chain from a line appended to a file to a
//! sleeping thread holding that line, with no l1gate code in it.
//!
//! A reader thread blocks on an inotify descriptor watching the file; the append wakes it, it
//! reads the new bytes and writes them to a loopback TCP connection (`TCP_NODELAY`); a receiver
//! thread blocked on the other end wakes and takes them. That is two thread wake-ups, a file
//! read and a loopback send — fewer steps than any server can take between a node's append and a
//! subscriber's frame (l1gate adds the watcher's own thread, the engine's fold, the runtime's
//! tasks and HTTP/2 framing on both sides). Measured beside the server in the latency harness,
//! it tells what the machine itself costs: on a virtual machine whose wake-ups are slow, this
//! floor is a large share of any append → frame budget.
//!
//! [`measure_grpc`] is the same chain carried by the libraries every gRPC stream of l1gate
//! rides on, still with no l1gate code: a tonic server-streaming method whose response stream
//! waits on the inotify descriptor in the server's tokio runtime (the readiness wakes the
//! connection's task, which reads the file and writes the message), and a tonic client on a
//! runtime of its own, as the latency harness's clients are. The difference between the two is
//! what tokio, hyper's HTTP/2 and tonic cost on this machine before any server logic; a raw
//! feed record cannot arrive sooner than this floor, and a market frame not sooner than this
//! floor plus the fold of its block.

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures_util::Stream;
use hdrhistogram::Histogram;
use proto::{Record, StreamRequest};
use rustix::fs::inotify;
use tokio::io::unix::AsyncFd;
use tonic::codegen::http;
use tonic::server::{NamedService, ServerStreamingService};
use tonic::transport::Endpoint;
use tonic_prost::ProstCodec;

/// What the floor measured.
#[derive(Debug)]
pub struct Floor {
    /// Append → received, µs, for the appends that were timed.
    pub histogram: Histogram<u64>,
    /// Appends received before the writer had read the clock after writing them (it was
    /// descheduled in between): not timed.
    pub early: u64,
}

impl Floor {
    /// Appends made, timed or not.
    pub fn appends(&self) -> u64 {
        self.histogram.len() + self.early
    }
}

/// Appends `appends` numbered lines to a file under `dir`, one per `interval`, and times each
/// from the end of its write to its receipt on the far side of the chain (module docs).
///
/// # Errors
/// A file, inotify or socket call failing, or a line lost on the way.
pub fn measure(dir: &Path, appends: u32, interval: Duration) -> anyhow::Result<Floor> {
    let path = dir.join("floor.log");
    let mut out = File::create(&path).with_context(|| format!("create {}", path.display()))?;
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC).context("inotify_init1")?;
    inotify::add_watch(&watch, &path, inotify::WatchFlags::MODIFY).context("inotify_add_watch")?;
    let watch = File::from(watch);
    let input = OpenOptions::new().read(true).open(&path)?;
    let listener = TcpListener::bind("127.0.0.1:0").context("bind loopback")?;
    let mut send = TcpStream::connect(listener.local_addr()?).context("connect loopback")?;
    send.set_nodelay(true)?;
    let (recv, _) = listener.accept().context("accept loopback")?;

    let reader = std::thread::Builder::new()
        .name("floor-reader".into())
        .spawn(move || forward(watch, input, &mut send, appends))?;
    let receiver = std::thread::Builder::new()
        .name("floor-receiver".into())
        .spawn(move || receive(recv, appends))?;

    let written = append_timed(&mut out, appends, interval)?;
    let forwarded = join(reader, "reader")?;
    let received = join(receiver, "receiver")?;
    if forwarded != u64::from(appends) {
        bail!("the reader forwarded {forwarded} of {appends} lines");
    }
    floor(&written, &received)
}

/// Like [`measure`], through a tonic server-streaming call instead of two threads and a socket
/// (module docs).
///
/// # Errors
/// A file, runtime or socket call failing, the call failing, or a line lost on the way.
pub fn measure_grpc(dir: &Path, appends: u32, interval: Duration) -> anyhow::Result<Floor> {
    let path = dir.join("floor-grpc.log");
    let mut out = File::create(&path).with_context(|| format!("create {}", path.display()))?;
    // Two runtimes like the latency harness's: the server's and the client's, each with the
    // default worker count (one per core), as `l1gate serve` and the harness build theirs.
    let server = runtime("floor-server")?;
    let client = runtime("floor-client")?;
    let listener = server.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let service = TailService {
        path: Arc::new(path),
    };
    server.spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming),
    );
    let (opened, open) = std::sync::mpsc::channel();
    let receiver = client.spawn(receive_grpc(addr, appends, opened));
    // The stream is open (the server has added its watch) before the first append.
    if open.recv_timeout(Duration::from_secs(10)).is_err() {
        // The client gave up (its error says why) or is still waiting on the server.
        if receiver.is_finished() {
            let failed = client
                .block_on(receiver)
                .context("gRPC floor client task")?;
            bail!("the gRPC floor's stream did not open: {failed:?}");
        }
        receiver.abort();
        bail!("the gRPC floor's stream did not open within 10 s");
    }
    let written = append_timed(&mut out, appends, interval)?;
    let received = client
        .block_on(receiver)
        .context("gRPC floor client task")??;
    server.shutdown_background();
    client.shutdown_background();
    floor(&written, &received)
}

fn runtime(name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(name)
        .enable_all()
        .build()
        .with_context(|| format!("{name} runtime"))
}

/// Appends `appends` numbered lines to `out`, one per `interval`, returning the instant after
/// each write.
fn append_timed(out: &mut File, appends: u32, interval: Duration) -> anyhow::Result<Vec<Instant>> {
    let mut written = Vec::with_capacity(appends as usize);
    let mut due = Instant::now() + interval;
    for k in 1..=appends {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        due += interval;
        out.write_all(format!("{k}\n").as_bytes())?;
        written.push(Instant::now());
    }
    Ok(written)
}

/// Each append's latency, from its write to its receipt.
fn floor(written: &[Instant], received: &[Instant]) -> anyhow::Result<Floor> {
    let mut histogram = crate::live::histogram()?;
    let mut early = 0;
    for (at, got) in written.iter().zip(received) {
        match got.checked_duration_since(*at) {
            Some(latency) => crate::live::record(&mut histogram, latency),
            None => early += 1,
        }
    }
    Ok(Floor { histogram, early })
}

/// The reader: each notification, everything new in the file goes to the socket. Returns the
/// lines forwarded.
fn forward(
    mut watch: File,
    mut input: File,
    send: &mut TcpStream,
    appends: u32,
) -> anyhow::Result<u64> {
    let mut events = [0_u8; 4096];
    let mut data = [0_u8; 4096];
    let mut lines = 0_u64;
    while lines < u64::from(appends) {
        // Blocks until the file changes; the events themselves are not needed.
        if watch.read(&mut events)? == 0 {
            bail!("inotify descriptor closed");
        }
        loop {
            let n = input.read(&mut data)?;
            if n == 0 {
                break;
            }
            send.write_all(&data[..n])?;
            lines += memchr::memchr_iter(b'\n', &data[..n]).count() as u64;
        }
    }
    Ok(lines)
}

/// The receiver: the instant each numbered line arrived, in order.
fn receive(mut recv: TcpStream, appends: u32) -> anyhow::Result<Vec<Instant>> {
    let mut arrivals = Arrivals::new(appends);
    let mut buf = [0_u8; 4096];
    while !arrivals.complete() {
        let n = recv.read(&mut buf)?;
        if n == 0 {
            bail!("loopback closed after {} of {appends} lines", arrivals.seen);
        }
        arrivals.take(&buf[..n], Instant::now())?;
    }
    arrivals.times()
}

/// The numbered lines received so far, and when.
struct Arrivals {
    at: Vec<Option<Instant>>,
    /// The bytes of a line not yet ended.
    partial: Vec<u8>,
    seen: u32,
}

impl Arrivals {
    fn new(appends: u32) -> Self {
        Self {
            at: vec![None; appends as usize],
            partial: Vec::new(),
            seen: 0,
        }
    }

    fn complete(&self) -> bool {
        self.seen as usize >= self.at.len()
    }

    /// Notes every line `bytes` ends as arrived at `now`.
    fn take(&mut self, bytes: &[u8], now: Instant) -> anyhow::Result<()> {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = memchr::memchr(b'\n', &self.partial) {
            let k: usize = std::str::from_utf8(&self.partial[..end])?
                .parse()
                .context("floor line")?;
            let slot = self
                .at
                .get_mut(k.wrapping_sub(1))
                .with_context(|| format!("line {k} out of range"))?;
            *slot = Some(now);
            self.partial.drain(..=end);
            self.seen += 1;
        }
        Ok(())
    }

    fn times(self) -> anyhow::Result<Vec<Instant>> {
        self.at
            .into_iter()
            .enumerate()
            .map(|(k, t)| t.with_context(|| format!("line {} never arrived", k + 1)))
            .collect()
    }
}

/// The gRPC floor's service name; its one method is `Tail`.
const SERVICE: &str = "l1gate.bench.Floor";

/// The gRPC floor's server: one server-streaming method, `Tail`, whose stream sends whatever is
/// appended to the file at `path` as a [`Record`], one per change notification.
#[derive(Clone)]
struct TailService {
    path: Arc<PathBuf>,
}

impl NamedService for TailService {
    const NAME: &'static str = SERVICE;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for TailService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let tail = Tail(Arc::clone(&self.path));
        Box::pin(async move {
            // Whatever the path under the service, the method is `Tail`: this server has no
            // other.
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Record, StreamRequest>::default());
            Ok(grpc.server_streaming(tail, request).await)
        })
    }
}

struct Tail(Arc<PathBuf>);

type Records = Pin<Box<dyn Stream<Item = Result<Record, tonic::Status>> + Send>>;

impl ServerStreamingService<StreamRequest> for Tail {
    type Response = Record;
    type ResponseStream = Records;
    type Future = BoxFuture<tonic::Response<Records>, tonic::Status>;

    fn call(&mut self, _: tonic::Request<StreamRequest>) -> Self::Future {
        let path = Arc::clone(&self.0);
        Box::pin(async move {
            let tail = Tailer::open(&path).map_err(|e| tonic::Status::internal(e.to_string()))?;
            let records = futures_util::stream::unfold(tail, |mut tail| async move {
                let record = tail
                    .next()
                    .await
                    .map_err(|e| tonic::Status::internal(e.to_string()));
                Some((record, tail))
            });
            Ok(tonic::Response::new(Box::pin(records) as Records))
        })
    }
}

/// A file followed through an inotify descriptor registered with the runtime.
struct Tailer {
    watch: AsyncFd<std::os::fd::OwnedFd>,
    input: File,
}

impl Tailer {
    #[allow(unsafe_code)]
    fn open(path: &Path) -> io::Result<Self> {
        let flags = inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK;
        let watch = inotify::init(flags)?;
        inotify::add_watch(&watch, path, inotify::WatchFlags::MODIFY)?;
        // SAFETY: an `OwnedFd` is an open descriptor that nothing else closes; moved into the
        // `AsyncFd`, it stays open and the same until the `AsyncFd` drops it.
        let watch = unsafe { AsyncFd::register(watch) }.map_err(io::Error::from)?;
        Ok(Self {
            watch,
            input: File::open(path)?,
        })
    }

    /// Waits for a change notification, then returns everything new in the file (waiting again
    /// when a notification brought nothing new).
    async fn next(&mut self) -> io::Result<Record> {
        let mut events = [0_u8; 4096];
        loop {
            let mut ready = self.watch.readable().await?;
            // Drain the notifications; their contents are not needed.
            while let Ok(read) = ready.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut events)?))
            {
                read?;
            }
            // A read of a few bytes the page cache holds: it does not block the worker the way a
            // read of a socket could (l1gate's raw feed reads its files in place too).
            let mut data = Vec::new();
            self.input.read_to_end(&mut data)?;
            if !data.is_empty() {
                return Ok(Record {
                    data: data.into(),
                    ..Record::default()
                });
            }
        }
    }
}

/// The gRPC floor's client: opens `Tail`, says so on `opened`, and returns the instant each
/// numbered line arrived.
async fn receive_grpc(
    addr: SocketAddr,
    appends: u32,
    opened: std::sync::mpsc::Sender<()>,
) -> anyhow::Result<Vec<Instant>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    let path = http::uri::PathAndQuery::try_from(format!("/{SERVICE}/Tail"))?;
    let codec = ProstCodec::<StreamRequest, Record>::default();
    let request = tonic::Request::new(StreamRequest::default());
    let mut records = grpc
        .server_streaming(request, path, codec)
        .await?
        .into_inner();
    opened.send(()).context("the floor's writer is gone")?;
    let mut arrivals = Arrivals::new(appends);
    while !arrivals.complete() {
        // A lost line would otherwise leave the harness waiting for ever.
        let next = tokio::time::timeout(Duration::from_secs(10), records.message())
            .await
            .with_context(|| {
                format!(
                    "no record from the gRPC floor for 10 s after {} of {appends} lines",
                    arrivals.seen
                )
            })?;
        let Some(record) = next? else {
            bail!(
                "the gRPC floor's stream ended after {} of {appends} lines",
                arrivals.seen
            );
        };
        arrivals.take(&record.data, Instant::now())?;
    }
    arrivals.times()
}

fn join<T>(handle: std::thread::JoinHandle<anyhow::Result<T>>, name: &str) -> anyhow::Result<T> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("floor {name} thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_append_is_received_and_timed_once() {
        let dir = tempfile::tempdir().unwrap();
        let floor = measure(dir.path(), 20, Duration::from_millis(2)).unwrap();
        assert_eq!(floor.appends(), 20);
        assert!(!floor.histogram.is_empty());
    }

    #[test]
    fn every_append_is_received_through_the_grpc_floor_and_timed_once() {
        let dir = tempfile::tempdir().unwrap();
        let floor = measure_grpc(dir.path(), 20, Duration::from_millis(2)).unwrap();
        assert_eq!(floor.appends(), 20);
        assert!(!floor.histogram.is_empty());
    }
}
