//! Pieces shared by the live harnesses (`fanout`, `latency`): a node directory the simulator
//! appends to block by block at a chosen pace, remembering the instant each block was
//! appended; the `l1gate` server run in a child process (the harness binary re-executed with
//! [`SERVE_FLAG`]), so that server and clients do not share one runtime or one RSS; and the
//! latency summaries the harnesses print.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fixtures::{NodeWriter, OutputMode, SimConfig, Simulator, WriterOptions, write_snapshot_file};
use hdrhistogram::Histogram;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// First argument that makes a harness binary run as the server child (see [`serve_child`]).
pub const SERVE_FLAG: &str = "--serve-child";

/// When each block was fully appended to the node files, as nanoseconds since a base instant
/// shared by the writer and the clients of one process.
#[derive(Debug)]
pub struct AppendLog {
    base: Instant,
    first: u64,
    /// Slot `n - first`: nanoseconds since `base` + 1 when block `n` was appended, 0 before.
    appended: Box<[AtomicU64]>,
}

impl AppendLog {
    fn new(first: u64, blocks: usize) -> Self {
        Self {
            base: Instant::now(),
            first,
            appended: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn record(&self, block: u64, at: Instant) {
        if let Some(slot) = block
            .checked_sub(self.first)
            .and_then(|i| self.appended.get(usize::try_from(i).ok()?))
        {
            let ns = u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
            slot.store(ns.saturating_add(1), Ordering::Release);
        }
    }

    /// Time from the append of `block` to `now`, if the block was appended by this writer.
    pub fn since_append(&self, block: u64, now: Instant) -> Option<Duration> {
        let slot = self
            .appended
            .get(usize::try_from(block.checked_sub(self.first)?).ok()?)?;
        let ns = slot.load(Ordering::Acquire).checked_sub(1)?;
        let appended = self.base + Duration::from_nanos(ns);
        Some(now.saturating_duration_since(appended))
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
    speedup_milli: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
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
        let handle = {
            let (log, speedup_milli, stop) = (
                Arc::clone(&log),
                Arc::clone(&speedup_milli),
                Arc::clone(&stop),
            );
            std::thread::Builder::new()
                .name("node-writer".into())
                .spawn(move || {
                    let mut written = 0;
                    let mut last_time = sim.block_time_ns();
                    let mut due = Instant::now();
                    while written < max_blocks && !stop.load(Ordering::Relaxed) {
                        let block = sim.next_block();
                        let gap = u64::try_from(block.block_time_ns - last_time).unwrap_or(0);
                        last_time = block.block_time_ns;
                        let speedup = speedup_milli.load(Ordering::Relaxed).max(1);
                        due += Duration::from_nanos(gap.saturating_mul(1000) / speedup);
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        } else if now - due > Duration::from_millis(500) {
                            // Fell far behind (a stall, or the rate changed): pace from now.
                            due = now;
                        }
                        writer.write_block(&block)?;
                        log.record(block.number, Instant::now());
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
            speedup_milli,
            stop,
            writer: Some(handle),
        })
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
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `poll_interval_ms`.
    pub poll_ms: u64,
    /// `market_ring_capacity`.
    pub ring: usize,
}

/// The `l1gate` server in a child process (this binary re-executed with [`SERVE_FLAG`]). It
/// exits when its standard input closes, so it never outlives the harness.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Bound gRPC address.
    pub addr: std::net::SocketAddr,
    /// The API key provisioned for the harness.
    pub key: String,
    _keys: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts the server over `data` and waits until its market engine has caught up.
    pub fn spawn(data: &Path, options: &ServerOptions) -> anyhow::Result<Self> {
        let keys = tempfile::tempdir()?;
        let keys_file = keys.path().join("keys.toml");
        let mut file = l1gate::access::keys::KeysFile::default();
        let (key, _) = file.add_key("bench", 0)?;
        file.save(&keys_file)?;
        let mut child = Command::new(std::env::current_exe()?)
            .arg(SERVE_FLAG)
            .arg(data)
            .arg(&keys_file)
            .arg(options.poll_ms.to_string())
            .arg(options.ring.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start the server child")?;
        let stdout = child.stdout.take().context("server child stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let Some(addr) = line.trim().strip_prefix("ready ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the server child did not start: {line:?}");
        };
        let addr = addr.parse().context("server child address")?;
        Ok(Self {
            child,
            addr,
            key,
            _keys: keys,
        })
    }

    /// The child's resident set size (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        vm_rss_kib(&status).context("no VmRSS in the server's /proc status")
    }

    /// A client channel with an HTTP/2 stream window of `stream_window` bytes and a large
    /// connection window (so one stream's unread data cannot stall the connection's others).
    pub async fn channel(&self, stream_window: u32) -> anyhow::Result<Channel> {
        Ok(Endpoint::from_shared(format!("http://{}", self.addr))?
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

/// The server child's main: `SERVE_FLAG DATA KEYS_FILE POLL_MS RING`. Starts the server on
/// loopback, waits until the market engine has caught up, prints `ready ADDR` and serves until
/// standard input closes.
pub fn serve_child(args: &[String]) -> anyhow::Result<()> {
    let [data, keys_file, poll_ms, ring] = args else {
        bail!("{SERVE_FLAG} takes DATA KEYS_FILE POLL_MS RING, got {args:?}");
    };
    let state = tempfile::tempdir()?;
    let settings = l1gate::config::ServeArgs {
        data: Some(PathBuf::from(data)),
        keys_file: Some(PathBuf::from(keys_file)),
        grpc_addr: Some("127.0.0.1:0".parse()?),
        http_addr: Some("127.0.0.1:0".parse()?),
        poll_interval_ms: Some(poll_ms.parse().context("POLL_MS")?),
        market_ring_capacity: Some(ring.parse().context("RING")?),
        idle_timeout_ms: Some(600_000),
        // Simulated block times lie in the past: no staleness check.
        market_stale_after_ms: Some(0),
        // The candle store lives and dies with the child, not in the working directory.
        state_dir: Some(state.path().to_owned()),
        // One key opens every stream of the harness.
        max_streams: Some(1_000_000),
        requests_per_second: Some(1_000_000),
        request_burst: Some(1_000_000),
        ..l1gate::config::ServeArgs::default()
    }
    .resolve()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let running = runtime.block_on(l1gate::serve::start(&settings))?;
    let started = Instant::now();
    while !running.engine.status().ready() {
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the market engine did not catch up within 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("ready {}", running.grpc_addr);
    // Serve until the parent closes our stdin (or dies).
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(running);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
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
    fn the_append_log_answers_only_for_blocks_it_recorded() {
        let log = AppendLog::new(100, 4);
        let at = Instant::now();
        log.record(101, at);
        log.record(99, at);
        log.record(104, at);
        let later = at + Duration::from_millis(3);
        assert_eq!(log.since_append(101, later), Some(Duration::from_millis(3)));
        assert_eq!(log.since_append(100, later), None);
        assert_eq!(log.since_append(99, later), None);
        assert_eq!(log.since_append(104, later), None);
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
