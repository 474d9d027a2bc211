//! Pieces shared by the live harnesses (`fanout`, `latency`, `engine_cpu`): a node directory
//! the simulator appends to block by block at a chosen pace (which can be paused), remembering
//! the instant each block was appended; the `l1gate` server run in a child process (the harness
//! binary re-executed with [`SERVE_CHILD`]), so that server and clients do not share one
//! runtime, one RSS or one CPU account, and which answers the height of its market engine on
//! request; and the latency summaries the harnesses print.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::market::Needs;
use feeds::Source;
use fixtures::{
    NodeWriter, OutputMode, RenderedBlock, SimConfig, Simulator, WriterOptions, write_snapshot_file,
};
use hdrhistogram::Histogram;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// How the stand-in node paces its own work, for the harnesses' method lines.
pub const WRITER_PACING: &str = "the writer makes and renders each block in the middle of the interval before its append, then only appends (a node does that work on cores of its own; here it would otherwise take a core from the server while the server folds and sends the block just appended)";

/// Sleeps until `at` (returns at once when it has passed).
fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// The name of the server child (see [`serve_child`] and [`crate::child`]).
pub const SERVE_CHILD: &str = "serve";

/// When the writer appended each line of each block, as nanoseconds since a base instant shared
/// by the writer and the clients of one process: a frame's latency counts from the write of the
/// last line it derives from (the market engine folds a block once its order statuses, raw
/// book diffs and fills are written; a raw fills record derives from the fills line alone).
#[derive(Debug)]
pub struct AppendLog {
    base: Instant,
    first: u64,
    /// Slot `(n - first) * STREAMS + i`: nanoseconds since `base` + 1 when block `n`'s line of
    /// `WRITE_ORDER[i]` was written, 0 before.
    written: Box<[AtomicU64]>,
    /// Slot `n - first`: block `n`'s time (Unix ms), 0 before it was written. Block times
    /// rise with the block number.
    times_ms: Box<[AtomicI64]>,
}

/// Event streams per block.
const STREAMS: usize = fixtures::WRITE_ORDER.len();

impl AppendLog {
    fn new(first: u64, blocks: usize) -> Self {
        Self {
            base: Instant::now(),
            first,
            written: (0..blocks * STREAMS).map(|_| AtomicU64::new(0)).collect(),
            times_ms: (0..blocks).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    fn slot(&self, block: u64, source: Source) -> Option<&AtomicU64> {
        let stream = fixtures::WRITE_ORDER.iter().position(|&s| s == source)?;
        let block = usize::try_from(block.checked_sub(self.first)?).ok()?;
        self.written.get(block.checked_mul(STREAMS)? + stream)
    }

    /// Notes that `block`'s line of `source` was written (at the writer's next look at the
    /// clock).
    fn record(&self, block: u64, source: Source, at: Instant) {
        if let Some(slot) = self.slot(block, source) {
            let ns = u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
            slot.store(ns.saturating_add(1), Ordering::Release);
        }
    }

    /// Notes `block`'s block time (Unix ms), before its lines are written.
    fn note_time(&self, block: u64, time_ms: i64) {
        if let Some(slot) = block
            .checked_sub(self.first)
            .and_then(|i| self.times_ms.get(usize::try_from(i).ok()?))
        {
            slot.store(time_ms, Ordering::Release);
        }
    }

    /// The block whose time is `time_ms` (Unix ms), among those written: for frames that
    /// carry their block's time but not its number (the exchange's WebSocket messages).
    pub fn block_at(&self, time_ms: i64) -> Option<u64> {
        let written = self
            .times_ms
            .partition_point(|slot| slot.load(Ordering::Acquire) != 0);
        let times = &self.times_ms[..written];
        let at = times.partition_point(|slot| slot.load(Ordering::Acquire) < time_ms);
        (times.get(at)?.load(Ordering::Acquire) == time_ms).then(|| self.first + at as u64)
    }

    /// Time from the write of the last of `block`'s lines of `sources` to `now`, once every one
    /// of them was recorded by this writer.
    pub fn since_written(&self, block: u64, sources: &[Source], now: Instant) -> Option<Duration> {
        let mut last = 0;
        for &source in sources {
            let ns = self
                .slot(block, source)?
                .load(Ordering::Acquire)
                .checked_sub(1)?;
            last = last.max(ns);
        }
        Some(now.saturating_duration_since(self.base + Duration::from_nanos(last)))
    }

    /// Time from the write of the last line the market engine folds for `block` (its order
    /// statuses, raw book diffs and fills) to `now`.
    pub fn since_folded(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &Needs::ALL.sources(), now)
    }

    /// Time from the write of `block`'s fills line to `now`.
    pub fn since_fills(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &[Source::Fills], now)
    }

    /// Time from the write of `block`'s first line to `now`, once the writer wrote it.
    pub fn since_first_line(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &fixtures::WRITE_ORDER[..1], now)
    }
}

/// A node directory grown by a background thread: a starting L4 snapshot and `warm` blocks
/// written at once, then one block per simulated block interval divided by the speed-up.
#[derive(Debug)]
pub struct LiveNode {
    dir: tempfile::TempDir,
    /// When each live block was appended.
    pub log: Arc<AppendLog>,
    /// The simulator's universe (coin names, activity shares).
    pub universe: Arc<fixtures::Universe>,
    /// The starting L4 snapshot file.
    pub snapshot: PathBuf,
    speedup_milli: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Set by [`LiveNode::pause`]: the writer holds before its next block.
    pause: Arc<AtomicBool>,
    /// Set by the writer while it holds.
    holding: Arc<AtomicBool>,
    writer: Option<JoinHandle<anyhow::Result<u64>>>,
}

impl LiveNode {
    /// Starts writing `cfg`'s blocks (by-block layout, every line flushed as the node does with
    /// output buffering disabled) at `speedup` × the simulated block rate, for at most
    /// `max_blocks` live blocks.
    pub fn start(
        cfg: &SimConfig,
        warm: u64,
        speedup: f64,
        max_blocks: u64,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut sim = Simulator::new(cfg);
        let universe = Arc::clone(sim.universe());
        let (snapshot, _) =
            write_snapshot_file(dir.path(), &sim).context("write the starting snapshot")?;
        let mut writer = NodeWriter::create_with(
            dir.path(),
            OutputMode::ByBlock,
            WriterOptions {
                line_flush: true,
                replica_cmds: false,
                ..WriterOptions::default()
            },
        )?;
        for _ in 0..warm {
            writer.write_block(&sim.next_block())?;
        }
        let log = Arc::new(AppendLog::new(
            sim.height() + 1,
            usize::try_from(max_blocks).unwrap_or(usize::MAX),
        ));
        let speedup_milli = Arc::new(AtomicU64::new(milli(speedup)));
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicBool::new(false));
        let holding = Arc::new(AtomicBool::new(false));
        let handle = {
            let (log, speedup_milli, stop, pause, holding) = (
                Arc::clone(&log),
                Arc::clone(&speedup_milli),
                Arc::clone(&stop),
                Arc::clone(&pause),
                Arc::clone(&holding),
            );
            std::thread::Builder::new()
                .name("node-writer".into())
                .spawn(move || {
                    let mut written = 0;
                    let mut last_time = sim.block_time_ns();
                    let mut due = Instant::now();
                    let mut rendered = RenderedBlock::default();
                    // Half the last block interval at the current pace.
                    let mut half_gap = Duration::ZERO;
                    while written < max_blocks && !stop.load(Ordering::Relaxed) {
                        if pause.load(Ordering::Acquire) {
                            holding.store(true, Ordering::Release);
                            while pause.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            holding.store(false, Ordering::Release);
                            // Resume at the current pace from now, not with a burst.
                            due = Instant::now();
                            continue;
                        }
                        // The stand-in node's own work, making and rendering the next block,
                        // waits for the middle of the interval since the last append: a node
                        // does it on cores of its own, and on a small machine it would
                        // otherwise take a core from the server exactly while the server folds
                        // and sends the block just appended.
                        sleep_until(due + half_gap);
                        let block = sim.next_block();
                        writer.render(&block, &mut rendered);
                        let gap = u64::try_from(block.block_time_ns - last_time).unwrap_or(0);
                        last_time = block.block_time_ns;
                        let speedup = speedup_milli.load(Ordering::Relaxed).max(1);
                        let interval = Duration::from_nanos(gap.saturating_mul(1000) / speedup);
                        half_gap = interval / 2;
                        due += interval;
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        } else if now - due > Duration::from_millis(500) {
                            // Fell far behind (a stall, or the rate changed): pace from now.
                            due = now;
                        }
                        log.note_time(block.number, block.block_time_ns / 1_000_000);
                        writer.write_rendered(&rendered, &mut |source| {
                            log.record(block.number, source, Instant::now());
                        })?;
                        written += 1;
                    }
                    writer.flush()?;
                    Ok(written)
                })?
        };
        Ok(Self {
            dir,
            log,
            universe,
            snapshot,
            speedup_milli,
            stop,
            pause,
            holding,
            writer: Some(handle),
        })
    }

    /// Stops appending before the next block and returns once the writer holds (every block
    /// it wrote is complete in the files), or once it has finished.
    pub fn pause(&self) {
        self.pause.store(true, Ordering::Release);
        while !self.holding.load(Ordering::Acquire)
            && self.writer.as_ref().is_some_and(|w| !w.is_finished())
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Appends again at the current pace.
    pub fn resume(&self) {
        self.pause.store(false, Ordering::Release);
    }

    /// The data directory to serve.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Changes the pace to `speedup` × the simulated block rate.
    pub fn set_speedup(&self, speedup: f64) {
        self.speedup_milli.store(milli(speedup), Ordering::Relaxed);
    }

    /// The `n` coins with the most order activity, most active first.
    pub fn top_coins(&self, n: usize) -> Vec<String> {
        let mut markets: Vec<&fixtures::Market> = self.universe.markets.iter().collect();
        markets.sort_by(|a, b| b.activity.total_cmp(&a.activity));
        markets
            .into_iter()
            .take(n)
            .map(|m| m.coin.clone())
            .collect()
    }

    /// Stops the writer; returns how many live blocks it wrote.
    pub fn stop(mut self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => bail!("the node writer panicked"),
            None => Ok(0),
        }
    }
}

impl Drop for LiveNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn milli(speedup: f64) -> u64 {
    (speedup * 1000.0).round().max(1.0) as u64
}

/// Server settings a harness varies.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// `poll_interval_ms` (the backup poll of the file watcher); `None` = the server's
    /// default.
    pub poll_ms: Option<u64>,
    /// `market_ring_capacity`; `None` = the server's default.
    pub ring: Option<usize>,
    /// TLS on both addresses, with a certificate of the harness's own authority (the
    /// channels of [`ServerProcess::channel`] trust it).
    pub tls: bool,
    /// `market_compression`: market frames sent compressed to clients that accept it.
    pub market_compression: bool,
}

/// A keys file holding one key for the harness, in a temporary directory of its own.
#[derive(Debug)]
pub struct HarnessKey {
    dir: tempfile::TempDir,
    /// The keys file.
    pub file: PathBuf,
    /// The key (`l1g_…`).
    pub key: String,
    /// One key each of [`LOAD_ACCOUNTS`] further accounts, for load beside the harness's own
    /// streams (an account's limits are its own).
    pub load_keys: Vec<String>,
}

/// Accounts a [`HarnessKey`] file holds besides the harness's own, with the server's default
/// limits.
pub const LOAD_ACCOUNTS: usize = 4;

impl HarnessKey {
    /// Writes a keys file with one fresh key for the harness and one for each of
    /// [`LOAD_ACCOUNTS`] load accounts, all with the server's default limits.
    ///
    /// # Errors
    /// When the directory or the file cannot be written.
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("keys.toml");
        let mut keys = access::keys::KeysFile::default();
        let (key, _) = keys.add_key("bench", 0)?;
        let load_keys = (1..=LOAD_ACCOUNTS)
            .map(|n| Ok(keys.add_key(&format!("load{n}"), 0)?.0))
            .collect::<anyhow::Result<Vec<String>>>()?;
        keys.save(&file)?;
        Ok(Self {
            dir,
            file,
            key,
            load_keys,
        })
    }
}

/// The `l1gate` server in a child process (this binary re-executed with [`SERVE_CHILD`], or with
/// a harness's own arguments: [`ServerProcess::spawn_child`]). It exits when its standard input
/// closes, so it never outlives the harness.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// The child's answers (after its `ready` line).
    replies: BufReader<ChildStdout>,
    /// Bound gRPC address.
    pub addr: std::net::SocketAddr,
    /// Bound HTTP address (`/metrics`, `/healthz`, Info, candles).
    pub http_addr: std::net::SocketAddr,
    /// The API key provisioned for the harness.
    pub key: String,
    /// Keys of the load accounts ([`HarnessKey::load_keys`]).
    pub load_keys: Vec<String>,
    /// The authority the server's certificate is of, when it serves TLS.
    ca: Option<String>,
    _keys: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts the server over `data` and waits until its market engine has caught up.
    pub fn spawn(data: &Path, options: &ServerOptions) -> anyhow::Result<Self> {
        let keys = HarnessKey::new()?;
        let tls = if options.tls {
            Some(crate::tls::test_certificate(keys.dir.path())?)
        } else {
            None
        };
        let (cert, key): (OsString, OsString) = match &tls {
            Some((files, _)) => (files.cert.clone().into(), files.key.clone().into()),
            None => (DEFAULT.into(), DEFAULT.into()),
        };
        let args: Vec<OsString> = vec![
            data.into(),
            keys.file.clone().into(),
            options
                .poll_ms
                .map_or_else(|| DEFAULT.to_owned(), |ms| ms.to_string())
                .into(),
            options
                .ring
                .map_or_else(|| DEFAULT.to_owned(), |n| n.to_string())
                .into(),
            cert,
            key,
            options.market_compression.to_string().into(),
        ];
        let mut process = Self::spawn_child(SERVE_CHILD, &args, keys)?;
        process.ca = tls.map(|(_, ca)| ca);
        Ok(process)
    }

    /// Starts this binary re-executed with `args` as a server child that speaks as
    /// [`serve_child`] does: one `ready GRPC_ADDR HTTP_ADDR` line once it serves (see
    /// [`answer_parent`]), then `height N` for each `height` line it is sent, until its standard
    /// input closes. `keys` holds the key the harness opens its streams with; its keys file
    /// lives as long as the child.
    pub fn spawn_child(name: &str, args: &[OsString], keys: HarnessKey) -> anyhow::Result<Self> {
        let mut child = crate::child(name)?
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start the server child")?;
        let stdout = child.stdout.take().context("server child stdout")?;
        let mut replies = BufReader::new(stdout);
        let mut line = String::new();
        replies.read_line(&mut line)?;
        let Some((addr, http_addr)) = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|addrs| addrs.split_once(' '))
        else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the server child did not start: {line:?}");
        };
        let addr = addr.parse().context("server child gRPC address")?;
        let http_addr = http_addr.parse().context("server child HTTP address")?;
        Ok(Self {
            child,
            replies,
            addr,
            http_addr,
            key: keys.key,
            load_keys: keys.load_keys,
            ca: None,
            _keys: keys.dir,
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last block the server's market engine folded (its `EngineStatus::height`), asked
    /// of the child over its standard input.
    pub fn engine_height(&mut self) -> anyhow::Result<u64> {
        let stdin = self.child.stdin.as_mut().context("server child stdin")?;
        stdin.write_all(b"height\n")?;
        stdin.flush()?;
        // Anything else the child prints on its standard output is skipped.
        let mut line = String::new();
        loop {
            line.clear();
            if self.replies.read_line(&mut line)? == 0 {
                bail!("the server child ended before answering");
            }
            if let Some(height) = line.trim().strip_prefix("height ") {
                return height
                    .parse()
                    .with_context(|| format!("server child answer {line:?}"));
            }
        }
    }

    /// The server's `/metrics` text (Prometheus exposition), over a fresh HTTP/1.1
    /// connection.
    pub fn metrics(&self) -> anyhow::Result<String> {
        metrics_text(self.http_addr)
    }

    /// The child's resident set size (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        vm_rss_kib(&status).context("no VmRSS in the server's /proc status")
    }

    /// A client channel with an HTTP/2 stream window of `stream_window` bytes and a large
    /// connection window (so one stream's unread data cannot stall the connection's others).
    /// Over TLS when the server serves it.
    pub async fn channel(&self, stream_window: u32) -> anyhow::Result<Channel> {
        let endpoint = match &self.ca {
            Some(ca) => Endpoint::from_shared(format!("https://localhost:{}", self.addr.port()))?
                .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                    .domain_name("localhost"),
            )?,
            None => Endpoint::from_shared(format!("http://{}", self.addr))?,
        };
        Ok(endpoint
            .initial_stream_window_size(stream_window)
            .initial_connection_window_size(256 << 20)
            .connect()
            .await?)
    }

    /// `message` with this server's key.
    pub fn request<T>(&self, message: T) -> anyhow::Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("x-api-key", MetadataValue::try_from(self.key.as_str())?);
        Ok(request)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Closing its stdin ends the child; kill it if it does not go.
        drop(self.child.stdin.take());
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 1-minute load average from `/proc/loadavg` ("?" when unreadable): other jobs on a
/// shared machine show up here, and latency with them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The report line with the 1-minute load average at a run's start and now.
pub fn load_line(before: &str, cores: usize) -> String {
    format!(
        "- Load average (1 min) at start / end: {before} / {} on {cores} cores (every process of the machine, this run's included)\n",
        load_average()
    )
}

/// `VmRSS` in KiB from the text of a `/proc/PID/status` file.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The `POLL_MS` argument of [`serve_child`] that leaves `poll_interval_ms` at its default.
const DEFAULT: &str = "default";

/// The server child's main: `SERVE_CHILD DATA KEYS_FILE POLL_MS RING CERT KEY COMPRESS`
/// (`default` leaves a setting unset; `COMPRESS` is `market_compression`, true or false). Starts the server on loopback, waits until the market
/// engine has caught up, prints `ready ADDR`, then serves until standard input closes,
/// answering each `height` line on it with `height N` (the engine's last folded block).
pub fn serve_child(args: &[String]) -> anyhow::Result<()> {
    let [data, keys_file, poll_ms, ring, cert, key, compress] = args else {
        bail!("{SERVE_CHILD} takes DATA KEYS_FILE POLL_MS RING CERT KEY COMPRESS, got {args:?}");
    };
    let file = |path: &String| (path != DEFAULT).then(|| PathBuf::from(path));
    let poll_interval_ms = if poll_ms == DEFAULT {
        None
    } else {
        Some(poll_ms.parse().context("POLL_MS")?)
    };
    init_child_log();
    let state = tempfile::tempdir()?;
    let settings = l1gate::config::ServeArgs {
        data: Some(PathBuf::from(data)),
        poll_interval_ms,
        market_ring_capacity: if ring == DEFAULT {
            None
        } else {
            Some(ring.parse().context("RING")?)
        },
        tls_cert_file: file(cert),
        tls_key_file: file(key),
        market_compression: Some(compress.parse().context("COMPRESS")?),
        ..child_serve_args(Path::new(keys_file), state.path())
    }
    .resolve()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let running = runtime.block_on(l1gate::serve::start(&settings))?;
    wait_caught_up(&running)?;
    answer_parent(&running)?;
    drop(running);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Logs a server child to its standard error when asked (`RUST_LOG=info` or `L1GATE_LOG`);
/// silent otherwise.
pub fn init_child_log() {
    if let Some(filter) = ["L1GATE_LOG", "RUST_LOG"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .find_map(|name| tracing_subscriber::EnvFilter::try_from_env(name).ok())
    {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
}

/// The settings every server child shares: loopback on free ports, `keys_file`, `state_dir`,
/// no staleness check, a long idle timeout, and limits wide enough for one key to open every
/// stream of the harness.
pub fn child_serve_args(keys_file: &Path, state_dir: &Path) -> l1gate::config::ServeArgs {
    l1gate::config::ServeArgs {
        keys_file: Some(keys_file.to_owned()),
        grpc_addr: "127.0.0.1:0".parse().ok(),
        http_addr: "127.0.0.1:0".parse().ok(),
        idle_timeout_ms: Some(600_000),
        // Simulated block times lie in the past: no staleness check.
        market_stale_after_ms: Some(0),
        // The candle store lives and dies with the child, not in the working directory.
        state_dir: Some(state_dir.to_owned()),
        // One key opens every stream of the harness, over as many connections as it likes.
        max_streams: Some(1_000_000),
        max_connections: Some(1_000_000),
        max_connections_per_ip: Some(1_000_000),
        requests_per_second: Some(1_000_000),
        request_burst: Some(1_000_000),
        ..l1gate::config::ServeArgs::default()
    }
}

/// Waits until `running`'s market engine has caught up with its files once.
///
/// # Errors
/// When that takes longer than 300 s.
pub fn wait_caught_up(running: &l1gate::serve::Running) -> anyhow::Result<()> {
    let started = Instant::now();
    while !running.engine.status().ready() {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the market engine did not catch up within 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A server child's side of [`ServerProcess`]: prints `ready GRPC_ADDR HTTP_ADDR`, then
/// answers each `height` line on standard input with `height N` (the engine's last folded
/// block) until standard input closes (the parent ended or dropped its [`ServerProcess`]).
///
/// # Errors
/// When standard output cannot be written.
pub fn answer_parent(running: &l1gate::serve::Running) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready {} {}", running.grpc_addr, running.http_addr)?;
    stdout.flush()?;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "height" {
            writeln!(stdout, "height {}", running.engine.status().height())?;
            stdout.flush()?;
        }
    }
    Ok(())
}

/// The `/metrics` text of the server whose HTTP address is `http_addr`, over a fresh
/// HTTP/1.1 connection.
///
/// # Errors
/// When it cannot be reached or answers other than 200 with a plain body.
pub fn metrics_text(http_addr: std::net::SocketAddr) -> anyhow::Result<String> {
    let mut stream = std::net::TcpStream::connect(http_addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {http_addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("/metrics: no end of headers")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("/metrics answered {}", head.lines().next().unwrap_or(""));
    }
    if head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"))
    {
        bail!("/metrics: chunked answers are not read here");
    }
    Ok(body.to_owned())
}

/// The sum of the samples of metric `name` in a Prometheus text whose labels contain every
/// one of `labels` (each written `key="value"`).
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let matches = (rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|label| rest.contains(label));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// A latency histogram in microseconds (1 µs .. 100 s, 3 significant digits).
pub fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 100_000_000, 3)?)
}

/// Records `latency` into `histogram` in microseconds (clamped to its bounds).
pub fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(us.clamp(1, histogram.high()));
}

/// `p50 / p90 / p99 / p99.9 / max` of a µs histogram, in ms with three decimals.
pub fn percentiles_ms(histogram: &Histogram<u64>) -> [f64; 5] {
    let ms = |us: u64| us as f64 / 1000.0;
    [
        ms(histogram.value_at_quantile(0.50)),
        ms(histogram.value_at_quantile(0.90)),
        ms(histogram.value_at_quantile(0.99)),
        ms(histogram.value_at_quantile(0.999)),
        ms(histogram.max()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_from_proc_status_text() {
        let status = "Name:\tl1gate\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\nThreads:\t4\n";
        assert_eq!(vm_rss_kib(status), Some(123_456));
        assert_eq!(vm_rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn blocks_are_found_by_their_time_once_written() {
        let log = AppendLog::new(100, 4);
        log.note_time(100, 5_000);
        log.note_time(101, 5_068);
        assert_eq!(log.block_at(5_068), Some(101));
        assert_eq!(log.block_at(5_000), Some(100));
        assert_eq!(log.block_at(5_001), None);
        assert_eq!(log.block_at(9_999), None);
    }

    #[test]
    fn the_append_log_times_from_the_last_line_a_frame_derives_from() {
        let log = AppendLog::new(100, 4);
        let start = Instant::now();
        let ms = Duration::from_millis;
        for block in [101, 99, 104] {
            for (i, &source) in fixtures::WRITE_ORDER.iter().enumerate() {
                log.record(block, source, start + ms(i as u64));
            }
        }
        let later = start + ms(10);
        let last_folded = fixtures::WRITE_ORDER
            .iter()
            .rposition(|s| Needs::ALL.sources().contains(s))
            .unwrap() as u64;
        assert_eq!(log.since_folded(101, later), Some(ms(10 - last_folded)));
        let fills = fixtures::WRITE_ORDER
            .iter()
            .position(|&s| s == Source::Fills)
            .unwrap() as u64;
        assert_eq!(log.since_fills(101, later), Some(ms(10 - fills)));
        assert_eq!(log.since_first_line(101, later), Some(ms(10)));
        log.record(102, Source::Fills, start);
        assert_eq!(log.since_fills(102, later), Some(ms(10)));
        assert_eq!(
            log.since_folded(102, later),
            None,
            "statuses not written yet"
        );
        assert_eq!(log.since_folded(100, later), None);
        assert_eq!(log.since_folded(99, later), None);
        assert_eq!(log.since_folded(104, later), None);
    }

    #[test]
    fn percentiles_are_reported_in_milliseconds() {
        let mut h = histogram().unwrap();
        for us in 1..=1000 {
            record(&mut h, Duration::from_micros(us));
        }
        let [p50, _, p99, _, max] = percentiles_ms(&h);
        assert!((p50 - 0.5).abs() < 0.01, "{p50}");
        assert!((p99 - 0.99).abs() < 0.01, "{p99}");
        assert!((max - 1.0).abs() < 0.01, "{max}");
    }
}

/// A streamed market message that names its block (to match it with the
/// append log).
pub trait Numbered: Send + 'static {
    /// The frame's block number.
    fn block(&self) -> u64;
}

macro_rules! numbered {
    ($($ty:ty),*) => {$(
        impl Numbered for $ty {
            fn block(&self) -> u64 {
                u64::try_from(self.block_number).unwrap_or(0)
            }
        }
    )*};
}
numbered!(
    proto::v3::BboUpdate,
    proto::v3::L2BookUpdate,
    proto::v3::L4OrderUpdate,
    proto::v3::TradesUpdate
);

/// A raw feed record: its block number (0 when it has none).
impl Numbered for proto::v3::Record {
    fn block(&self) -> u64 {
        self.block_number
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0)
    }
}
