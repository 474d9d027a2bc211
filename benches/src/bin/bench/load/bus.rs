//! Scale-out over NATS JetStream: how fast the node host publishes the node's records to the
//! bus, beside a plain read of the same files; how long an appended line takes to reach a
//! client through each of two edges, beside the node host's own streams; and how many market
//! streams two edges hold beside one server.
//!
//! `cargo run --release -p benches -- load bus [--blocks N] [--scale X] [--seconds S]
//! [--streams 1000,4000] [--window W] [--connections C] [--no-write]`
//!
//! Needs `nats-server` (Debian package `nats-server`). Each part starts one `nats-server -js`
//! on a free loopback port with a temporary store and `max_payload: 8MB`.
//!
//! - **Publish throughput**: `--blocks` (1,500) mainnet-scale simulator blocks are generated,
//!   then the `l1gate` binary starts on them with `--publish` in a process of its own; the time from
//!   its start until JetStream acknowledged the last record of every feed, over the bytes of
//!   the six line feeds. Beside it, in the same run: `fs::read` of the same files.
//! - **The live run**: the simulator appends blocks at mainnet pace. The node host (`l1gate
//!   serve` with `--publish`) and two edges (`l1gate edge`) run as processes of their own
//!   ([`benches::server`]), so that each has its own CPU account; the clients
//!   run here. The node host starts first and is taken as up once its engine has caught up
//!   (its engine then takes the checkpoint its publisher puts on the bus); then edge 1, then
//!   edge 2, each up once it has the newest checkpoint, its copy has caught up with the
//!   streams and its engine with its copy.
//! - **Append → frame latency**: on one connection per server, the raw feed's `StreamFills`
//!   live tail (from the write of the block's fills line), and `StreamBbo` and `StreamTrades`
//!   over the 20 most active coins (from the write of the last line the engine folds for the
//!   block: its order statuses, raw book diffs and fills), read on the node host and on both
//!   edges in the same `S`-second window (`--seconds`, 20 by default).
//! - **Stream capacity**: for each N of `--streams` (`0`: none), N `StreamBbo` streams (one
//!   coin each, round-robin over the universe, most active first) on the node host alone over
//!   `C` connections (`--connections`, 100), then the same N streams split N/2 + N/2 over the
//!   two edges, `C`/2 connections each; each setup measured over `W` seconds (`--window`,
//!   10). One reference `StreamBbo` per coin on the node host, on its own connection for the
//!   whole phase, gives the blocks every stream of that coin must receive (an edge serves
//!   frames equal to the node host's for the same blocks, so the reference holds for the edges
//!   too). Counted: frames per second, missing and extra blocks against the reference (per
//!   edge), latency, streams the servers ended (`l1gate_streams_ended_total`), and the CPU
//!   seconds of every process (node host, each edge, `nats-server`, this harness: the clients
//!   and the simulator's writer).
//! - **Anomaly counters**: each server's `/metrics` counters that say its market or its copy
//!   differs from what the node wrote (engine lines dropped or out of order, blocks skipped,
//!   diffs not applied, the edges' bus gaps), after the latency window and at the end.
//!
//! Every process shares the machine's cores: on one 2-core machine the capacity phase shows
//! what each edge costs and that spreading streams over edges keeps them correct, not the
//! capacity gain of edges on machines of their own.
//!
//! Prints the tables and rewrites the `bus` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::{self, AppendLog, LiveNode, Numbered, histogram, percentiles_ms};
use benches::server::{HarnessKey, Role, ServerProcess, harness_settings, metric_sum};
use benches::streams::{Readers, Shared, Totals, summarize, tally_window};
use benches::sys::CpuTime;
use feeds::Source;
use hdrhistogram::Histogram;
use l1gate::config::ServeArgs;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::Streaming;

/// Blocks written before the node host starts (it catches up over them).
const WARM_BLOCKS: u64 = 20;
/// Most live blocks the simulator appends (≈ 45 min at mainnet pace: more than a run takes).
const MAX_LIVE_BLOCKS: u64 = 40_000;
/// Coins of the latency phase's `StreamBbo` and `StreamTrades` (the most active).
const LATENCY_COINS: usize = 20;
/// Pause between the last opening frame and a measured window.
const SETTLE: Duration = Duration::from_secs(2);
/// Longest wait for the latency phase's opening frames.
const OPEN_WAIT: Duration = Duration::from_secs(60);
/// The HTTP/2 stream window of every capacity stream (tonic's default).
const STREAM_WINDOW: u32 = 65_535;
/// `publish_max_bytes` of the publishing servers: JetStream reserves it for each of six
/// streams.
const PUBLISH_MAX_BYTES: &str = "1GiB";

#[derive(Debug, clap::Args)]
#[command(
    about = "Scale-out over NATS JetStream: publish throughput, edge latency, stream capacity",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Simulator blocks of the publish-throughput part.
    #[arg(long, default_value_t = 1_500)]
    blocks: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// The latency window, seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Stream counts of the capacity phase, comma-separated (`0`: none).
    // `std::vec::Vec`: the whole list is one value, parsed by `streams_counts`.
    #[arg(long, value_parser = streams_counts, default_value = "1000,4000")]
    streams: std::vec::Vec<usize>,
    /// The capacity window, seconds.
    #[arg(long, default_value_t = 10.0)]
    window: f64,
    /// Connections to the node host in the capacity phase (half as many to each edge).
    #[arg(long, default_value_t = 100)]
    connections: usize,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// `--streams` as [`benches::counts`] reads it.
fn streams_counts(value: &str) -> anyhow::Result<Vec<usize>> {
    benches::counts(value, "--streams")
}

/// A `nats-server -js` on loopback, killed when dropped.
struct Nats {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

impl Nats {
    fn start() -> anyhow::Result<Nats> {
        let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .context("nats-server not found: `apt-get install -y nats-server`")?;
        let store = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = store.path().join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nmax_payload: 8MB\njetstream {{ store_dir: \"{}\" }}\n",
                store.path().join("js").display()
            ),
        )?;
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("nats-server did not listen");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nats {
            child,
            port,
            _store: store,
        })
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node host's settings: the harness's over `data`, publishing to `nats`.
fn host_args(data: &Path, nats: &str) -> ServeArgs {
    ServeArgs {
        data: Some(data.to_owned()),
        publish_url: Some(nats.to_owned()),
        publish_max_bytes: Some(PUBLISH_MAX_BYTES.to_owned()),
        ..harness_settings()
    }
}

/// Starts the node host (`l1gate serve` publishing to `nats`) over `data`; returns once its
/// engine has caught up.
fn spawn_host(l1gate: &Path, data: &Path, nats: &str) -> anyhow::Result<ServerProcess> {
    ServerProcess::start(
        l1gate,
        Role::Serve,
        host_args(data, nats),
        HarnessKey::new()?,
        None,
    )
}

/// Starts an edge of `nats` (`l1gate edge`); returns once it listens with its engine caught
/// up.
fn spawn_edge(l1gate: &Path, nats: &str) -> anyhow::Result<ServerProcess> {
    ServerProcess::start(
        l1gate,
        Role::Edge { nats },
        harness_settings(),
        HarnessKey::new()?,
        None,
    )
}

/// Every file of the six line feeds.
fn line_files(data: &Path) -> anyhow::Result<Vec<(Source, PathBuf)>> {
    let mut out = Vec::new();
    for source in bus::subjects::BUS_FEEDS {
        let feed = feeds::Feed::open(data, source)?;
        for (_, path, _) in feed.segments() {
            out.push((source, path));
        }
    }
    Ok(out)
}

struct Throughput {
    mb: f64,
    records: u64,
    publish_s: f64,
    read_s: f64,
    gen_s: f64,
    blocks: String,
}

fn publish_throughput(args: &Args, l1gate: &Path) -> anyhow::Result<Throughput> {
    let data = tempfile::tempdir()?;
    let mut cfg = fixtures::SimConfig::mainnet(1, args.scale);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    // Recent block times: within the streams' retention (`publish_max_age`, 24 h).
    cfg.start_time_ms = common::unix_now_ms() - 3_600_000;
    let started = Instant::now();
    let summary = fixtures::generate(
        &cfg,
        data.path(),
        &fixtures::RunOptions {
            blocks: Some(args.blocks),
            ..fixtures::RunOptions::default()
        },
        &mut |_| {},
    )?;
    let gen_s = started.elapsed().as_secs_f64();
    let files = line_files(data.path())?;
    // Reference: read every file and count its lines, as the floor of any reader.
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut records = 0u64;
    for (_, path) in &files {
        let content = std::fs::read(path)?;
        bytes += content.len() as u64;
        records += memchr::memchr_iter(b'\n', &content).count() as u64;
    }
    let read_s = started.elapsed().as_secs_f64();
    let mut lasts = Vec::new();
    for source in bus::subjects::BUS_FEEDS {
        let feed = feeds::Feed::open(data.path(), source)?;
        if let Some(block) = feed.newest().and_then(|h| h.block_number) {
            lasts.push((source, block));
        }
    }

    let nats = Nats::start()?;
    let started = Instant::now();
    let running = spawn_host(l1gate, data.path(), &nats.url())?;
    loop {
        let health = running.health()?;
        let done = lasts.iter().all(|(source, last)| {
            health["bus"]["feeds"][source.feed_id()]["last_block"].as_u64() == Some(*last)
        });
        if done {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("the publisher did not catch up: {}", health["bus"]);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let publish_s = started.elapsed().as_secs_f64();
    drop(running);
    Ok(Throughput {
        mb: bytes as f64 / 1e6,
        records,
        publish_s,
        read_s,
        gen_s,
        blocks: format!(
            "{} blocks ({}..={})",
            summary.blocks,
            summary.first_height.unwrap_or(0),
            summary.last_height
        ),
    })
}

/// The three servers of the live run, with the bus and the node they serve.
struct Cluster {
    node: LiveNode,
    nats: Nats,
    host: ServerProcess,
    edges: [ServerProcess; 2],
    /// Seconds each edge took from its start to listening with its engine caught up.
    edge_start_s: [f64; 2],
    /// The checkpoint block each edge started from (its `/healthz`).
    started_from: [Option<u64>; 2],
    /// The newest checkpoint the node host had put on the bus when the edges were up.
    host_checkpoint: Option<u64>,
}

impl Cluster {
    fn start(args: &Args, l1gate: &Path) -> anyhow::Result<Self> {
        let mut cfg = fixtures::SimConfig::mainnet(2, args.scale);
        // Recent block times: within the streams' retention (`publish_max_age`, 24 h).
        cfg.start_time_ms = common::unix_now_ms();
        eprintln!("bus: generating the starting state (scale {})", args.scale);
        let node = LiveNode::start(&cfg, WARM_BLOCKS, 1.0, MAX_LIVE_BLOCKS)?;
        let nats = Nats::start()?;
        eprintln!("bus: starting the node host (publishing)");
        let host = spawn_host(l1gate, node.path(), &nats.url())?;
        let mut edges = Vec::new();
        let mut edge_start_s = [0.0; 2];
        let mut started_from = [None; 2];
        for (i, (start_s, from)) in edge_start_s.iter_mut().zip(&mut started_from).enumerate() {
            eprintln!("bus: starting edge {}", i + 1);
            let started = Instant::now();
            let edge = spawn_edge(l1gate, &nats.url())?;
            *start_s = started.elapsed().as_secs_f64();
            *from = edge.health()?["bus"]["checkpoint"]["block"].as_u64();
            edges.push(edge);
        }
        let host_checkpoint = host.health()?["bus"]["checkpoint"]["block"].as_u64();
        let Ok(edges) = <[ServerProcess; 2]>::try_from(edges) else {
            bail!("two edges expected");
        };
        Ok(Self {
            node,
            nats,
            host,
            edges,
            edge_start_s,
            started_from,
            host_checkpoint,
        })
    }

    /// The servers with their labels: the node host, then the edges.
    fn servers(&self) -> [(&'static str, &ServerProcess); 3] {
        [
            ("node host", &self.host),
            ("edge 1", &self.edges[0]),
            ("edge 2", &self.edges[1]),
        ]
    }

    /// Every process of the run, with its label, for CPU accounting.
    fn processes(&self) -> [(&'static str, u32); 5] {
        [
            ("node host", self.host.pid()),
            ("edge 1", self.edges[0].pid()),
            ("edge 2", self.edges[1].pid()),
            ("nats-server", self.nats.pid()),
            ("harness", std::process::id()),
        ]
    }

    /// Resident sizes of the three servers, MB.
    fn rss_mb(&self) -> anyhow::Result<[f64; 3]> {
        let mb = |s: &ServerProcess| s.rss_kib().map(|kib| kib as f64 / 1024.0);
        Ok([mb(&self.host)?, mb(&self.edges[0])?, mb(&self.edges[1])?])
    }

    /// The engine and bus anomaly counters of each server, labelled.
    fn anomalies(&self) -> anyhow::Result<Vec<(&'static str, [u64; ANOMALIES.len()])>> {
        self.servers()
            .into_iter()
            .map(|(label, server)| {
                let text = server.metrics()?;
                Ok((
                    label,
                    ANOMALIES.map(|(_, name, labels)| metric_sum(&text, name, labels) as u64),
                ))
            })
            .collect()
    }

    /// How many blocks each edge's engine is behind the node host's (read one after the other,
    /// the node host's first).
    fn edges_behind(&mut self) -> anyhow::Result<[u64; 2]> {
        let host = self.host.engine_height()?;
        let one = self.edges[0].engine_height()?;
        let two = self.edges[1].engine_height()?;
        Ok([host.saturating_sub(one), host.saturating_sub(two)])
    }
}

/// Counters that say a server's market or copy differs from what the node wrote: (column
/// heading, metric, labels).
const ANOMALIES: [(&str, &str, &[&str]); 6] = [
    (
        "lines dropped: block already folded",
        "l1gate_engine_lines_dropped_total",
        &["reason=\"block_already_folded\""],
    ),
    (
        "lines dropped: duplicate",
        "l1gate_engine_lines_dropped_total",
        &["reason=\"duplicate\""],
    ),
    (
        "lines out of order",
        "l1gate_engine_lines_out_of_order_total",
        &[],
    ),
    ("blocks skipped", "l1gate_engine_missing_blocks_total", &[]),
    (
        "diffs not applied",
        "l1gate_engine_diffs_not_applied_total",
        &[],
    ),
    ("bus gaps", "l1gate_bus_gaps_total", &[]),
];

/// The append instant a frame's latency counts from: [`AppendLog::since_fills`] for raw fills
/// records, [`AppendLog::since_folded`] for market frames.
type Since = fn(&AppendLog, u64, Instant) -> Option<Duration>;

/// Window states of the latency phase.
const BEFORE: u8 = 0;
const MEASURING: u8 = 1;
const DONE: u8 = 2;

/// What one stream read in the latency window.
struct Tail {
    /// Latency of the frames timed, µs.
    histogram: Histogram<u64>,
    /// Frames that arrived before the writer noted the write they count from (not timed).
    early: u64,
}

/// Reads `stream`: counts its first message in `opened`, then times every frame of a later
/// block that arrives while `window` is [`MEASURING`], until it is [`DONE`].
async fn tail<T: Numbered>(
    stream: Result<tonic::Response<Streaming<T>>, tonic::Status>,
    since: Since,
    log: Arc<AppendLog>,
    window: Arc<AtomicU8>,
    opened: Arc<AtomicUsize>,
) -> anyhow::Result<Tail> {
    let mut stream = stream
        .map_err(|s| anyhow::anyhow!("open: {s}"))?
        .into_inner();
    let first = tokio::time::timeout(OPEN_WAIT, stream.message())
        .await
        .context("no first message")??
        .context("ended before its first message")?
        .block();
    opened.fetch_add(1, Ordering::AcqRel);
    let mut out = Tail {
        histogram: histogram()?,
        early: 0,
    };
    loop {
        tokio::select! {
            message = stream.message() => {
                let frame = message?.context("ended")?;
                let now = Instant::now();
                match window.load(Ordering::Acquire) {
                    DONE => return Ok(out),
                    MEASURING if frame.block() > first => {}
                    _ => continue,
                }
                if let Some(latency) = since(&log, frame.block(), now) {
                    live::record(&mut out.histogram, latency);
                } else if log.since_first_line(frame.block(), now).is_some() {
                    // The writer began this block but had not yet noted the write this frame
                    // counts from: its thread was descheduled between the write and the clock.
                    out.early += 1;
                }
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                if window.load(Ordering::Acquire) == DONE {
                    return Ok(out);
                }
            }
        }
    }
}

/// The streams of the latency phase, in table order.
const LATENCY_STREAMS: [&str; 3] = [
    "`StreamFills` (raw feed, live tail, unfiltered)",
    "`StreamBbo` (20 coins)",
    "`StreamTrades` (20 coins)",
];

struct LatencyRow {
    stream: &'static str,
    server: &'static str,
    tail: Tail,
}

type LatencyTask = (
    &'static str,
    &'static str,
    tokio::task::JoinHandle<anyhow::Result<Tail>>,
);

/// Spawns [`tail`] of the stream `opening` opens, as `stream` on `server`.
fn spawn_tail<T: Numbered + Send + 'static>(
    stream: &'static str,
    server: &'static str,
    opening: impl Future<Output = Result<tonic::Response<Streaming<T>>, tonic::Status>> + Send + 'static,
    since: Since,
    (log, window, opened): (Arc<AppendLog>, Arc<AtomicU8>, Arc<AtomicUsize>),
) -> LatencyTask {
    let task = tokio::spawn(async move { tail(opening.await, since, log, window, opened).await });
    (stream, server, task)
}

/// Opens [`LATENCY_STREAMS`] on every server of `cluster` (one connection per server) and
/// times them over one window of `seconds`.
async fn append_latency(cluster: &Cluster, seconds: u64) -> anyhow::Result<Vec<LatencyRow>> {
    let coins = cluster.node.top_coins(LATENCY_COINS);
    let log = &cluster.node.log;
    let window = Arc::new(AtomicU8::new(BEFORE));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut tasks: Vec<LatencyTask> = Vec::new();
    for (server_label, server) in cluster.servers() {
        let channel = server.channel(4 << 20).await?;
        let market =
            MarketStreamingClient::new(channel.clone()).max_decoding_message_size(256 << 20);
        let mut raw = VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20);
        let shared = || (Arc::clone(log), Arc::clone(&window), Arc::clone(&opened));
        let [fills, bbo, trades] = LATENCY_STREAMS;
        // No position: the live tail. A fills record's latency counts from the write of its
        // block's fills line.
        let request = server.request(pb::StreamRequest::default())?;
        tasks.push(spawn_tail(
            fills,
            server_label,
            async move { raw.stream_fills(request).await },
            AppendLog::since_fills,
            shared(),
        ));
        let request = server.request(pb::BboRequest {
            coins: coins.clone(),
        })?;
        let mut client = market.clone();
        tasks.push(spawn_tail(
            bbo,
            server_label,
            async move { client.stream_bbo(request).await },
            AppendLog::since_folded,
            shared(),
        ));
        let request = server.request(pb::TradesRequest {
            coins: coins.clone(),
        })?;
        let mut client = market;
        tasks.push(spawn_tail(
            trades,
            server_label,
            async move { client.stream_trades(request).await },
            AppendLog::since_folded,
            shared(),
        ));
    }
    let started = Instant::now();
    while opened.load(Ordering::Acquire) < tasks.len() {
        if let Some(i) = tasks.iter().position(|(_, _, t)| t.is_finished()) {
            let (stream, server, task) = tasks.swap_remove(i);
            let why = match task.await {
                Ok(Ok(_)) => "it ended".to_owned(),
                Ok(Err(error)) => format!("{error:#}"),
                Err(error) => error.to_string(),
            };
            bail!("{stream} on the {server} did not open: {why}");
        }
        if started.elapsed() > OPEN_WAIT {
            bail!("the latency streams did not all open within {OPEN_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(SETTLE).await;
    window.store(MEASURING, Ordering::Release);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    window.store(DONE, Ordering::Release);
    let mut rows = Vec::new();
    for (stream, server, task) in tasks {
        let tail = task
            .await?
            .with_context(|| format!("{stream} on the {server}"))?;
        rows.push(LatencyRow {
            stream,
            server,
            tail,
        });
    }
    Ok(rows)
}

/// The capacity setups.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Every stream on the node host.
    HostAlone,
    /// Half the streams on each edge.
    TwoEdges,
}

impl Setup {
    fn label(self) -> &'static str {
        match self {
            Setup::HostAlone => "node host alone",
            Setup::TwoEdges => "two edges, N/2 each",
        }
    }
}

/// One measured capacity setup.
struct Capacity {
    setup: Setup,
    streams: usize,
    open_s: f64,
    seconds: f64,
    /// Every stream of the setup.
    totals: Totals,
    /// (server, missing, extra) of the streams on each server of the setup.
    per_server: Vec<(&'static str, u64, u64)>,
    /// Streams the servers ended (`l1gate_streams_ended_total`, market service, every reason)
    /// from the setup's opening to the window's end.
    ended: u64,
    /// CPU seconds over the window, per process of [`Cluster::processes`].
    cpu_s: Vec<(&'static str, f64)>,
    /// Blocks each edge's engine was behind the node host's at the window's end.
    behind: [u64; 2],
}

/// `l1gate_streams_ended_total` of the market service, every reason, summed over `servers`.
fn ended(servers: &[&ServerProcess]) -> anyhow::Result<u64> {
    let mut total = 0.0;
    for server in servers {
        total += metric_sum(
            &server.metrics()?,
            "l1gate_streams_ended_total",
            &["service=\"market\""],
        );
    }
    Ok(total as u64)
}

/// The totals of several servers' streams as one.
fn merge(parts: Vec<Totals>) -> anyhow::Result<Totals> {
    let mut all = Totals {
        frames: 0,
        reference: 0,
        required: 0,
        missing: 0,
        extra: 0,
        histogram: histogram()?,
        failures: Vec::new(),
    };
    for part in parts {
        all.frames += part.frames;
        // The same reference streams for every part.
        all.reference = part.reference;
        all.required += part.required;
        all.missing += part.missing;
        all.extra += part.extra;
        all.histogram.add(&part.histogram)?;
        all.failures.extend(part.failures);
    }
    Ok(all)
}

fn cpu(processes: &[(&'static str, u32)]) -> anyhow::Result<Vec<CpuTime>> {
    processes
        .iter()
        .map(|&(_, pid)| Ok(CpuTime::of_process(pid)?))
        .collect()
}

/// The capacity phase: for each count, the node host alone, then the two edges.
async fn capacity(cluster: &mut Cluster, args: &Args) -> anyhow::Result<Vec<Capacity>> {
    let names = cluster.node.top_coins(usize::MAX);
    let shared = Shared::new(Arc::clone(&cluster.node.log));
    let mut host_channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        host_channels.push(cluster.host.channel(STREAM_WINDOW).await?);
    }
    let mut edge_channels = [Vec::new(), Vec::new()];
    for (edge, channels) in cluster.edges.iter().zip(&mut edge_channels) {
        for _ in 0..args.connections / 2 {
            channels.push(edge.channel(STREAM_WINDOW).await?);
        }
    }
    let reference_channel = [cluster.host.channel(STREAM_WINDOW).await?];
    let (reference, _) = Readers::open_bbo(
        &cluster.host,
        &shared,
        &reference_channel,
        &names,
        0..names.len(),
        true,
    )
    .await?;
    let processes = cluster.processes();
    let mut window = 0u16;
    let mut out = Vec::new();
    for &n in &args.streams {
        let coin = |i: usize| i % names.len();
        for setup in [Setup::HostAlone, Setup::TwoEdges] {
            eprintln!("bus: {n} streams, {}", setup.label());
            let servers: Vec<&ServerProcess> = cluster.servers().map(|(_, s)| s).to_vec();
            let ended_before = ended(&servers)?;
            let started = Instant::now();
            let mut opened = Vec::new();
            match setup {
                Setup::HostAlone => {
                    opened.push((
                        "node host",
                        Readers::open_bbo(
                            &cluster.host,
                            &shared,
                            &host_channels,
                            &names,
                            (0..n).map(coin),
                            false,
                        )
                        .await?
                        .0,
                    ));
                }
                Setup::TwoEdges => {
                    // The same list of coins as the node host's, first half to edge 1.
                    let halves = [0..n / 2, n / 2..n];
                    for (((edge, channels), half), label) in cluster
                        .edges
                        .iter()
                        .zip(&edge_channels)
                        .zip(halves)
                        .zip(["edge 1", "edge 2"])
                    {
                        opened.push((
                            label,
                            Readers::open_bbo(
                                edge,
                                &shared,
                                channels,
                                &names,
                                half.map(coin),
                                false,
                            )
                            .await?
                            .0,
                        ));
                    }
                }
            }
            let open_s = started.elapsed().as_secs_f64();
            tokio::time::sleep(SETTLE).await;
            window += 1;
            let cpu_before = cpu(&processes)?;
            let at = Instant::now();
            shared.window.store(window, Ordering::Release);
            tokio::time::sleep(Duration::from_secs_f64(args.window)).await;
            shared.window.store(0, Ordering::Release);
            let cpu_after = cpu(&processes)?;
            let seconds = at.elapsed().as_secs_f64();
            let streams_ended = ended(&servers)?.saturating_sub(ended_before);
            drop(servers);
            let behind = cluster.edges_behind()?;
            // The reference streams share one connection and may take the window's last blocks
            // a little later than the streams compared with them.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut parts = Vec::new();
            let mut per_server = Vec::new();
            for (label, readers) in &opened {
                let part = tally_window(
                    &readers.tallies,
                    &reference.tallies,
                    usize::from(window - 1),
                )?;
                per_server.push((*label, part.missing, part.extra));
                parts.push(part);
            }
            let totals = merge(parts)?;
            let cpu_s = processes
                .iter()
                .zip(cpu_after.iter().zip(&cpu_before))
                .map(|(&(label, _), (after, before))| (label, after.since(before).best_s()))
                .collect();
            eprintln!(
                "bus: {n} streams, {}: {:.0} frames/s (required {:.0}), p99 {:.3} ms",
                setup.label(),
                totals.frames as f64 / seconds,
                totals.required as f64 / seconds,
                percentiles_ms(&totals.histogram)[2]
            );
            out.push(Capacity {
                setup,
                streams: n,
                open_s,
                seconds,
                totals,
                per_server,
                ended: streams_ended,
                cpu_s,
                behind,
            });
            for (_, readers) in opened {
                readers.close();
            }
            tokio::time::sleep(SETTLE).await;
        }
    }
    reference.close();
    Ok(out)
}

/// What the live run found.
struct LiveRun {
    latency: Vec<LatencyRow>,
    capacity: Vec<Capacity>,
    coins: usize,
    edge_start_s: [f64; 2],
    started_from: [Option<u64>; 2],
    host_checkpoint: Option<u64>,
    rss_start_mb: [f64; 3],
    rss_end_mb: [f64; 3],
    /// [`Cluster::anomalies`] after the latency window, then at the end.
    anomalies: [Vec<(&'static str, [u64; ANOMALIES.len()])>; 2],
    blocks: u64,
}

fn live_run(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    l1gate: &Path,
) -> anyhow::Result<LiveRun> {
    let mut cluster = Cluster::start(args, l1gate)?;
    let rss_start_mb = cluster.rss_mb()?;
    let coins = cluster.node.universe.markets.len();
    let (latency, after_latency, capacity) = runtime.block_on(async {
        // Let the edges settle into the stream before measuring.
        tokio::time::sleep(Duration::from_secs(3)).await;
        eprintln!("bus: append → frame latency, {} s", args.seconds);
        let latency = append_latency(&cluster, args.seconds).await?;
        let after_latency = cluster.anomalies()?;
        let capacity = capacity(&mut cluster, args).await?;
        anyhow::Ok((latency, after_latency, capacity))
    })?;
    let rss_end_mb = cluster.rss_mb()?;
    let anomalies = [after_latency, cluster.anomalies()?];
    let Cluster {
        node,
        nats,
        host,
        edges,
        edge_start_s,
        started_from,
        host_checkpoint,
    } = cluster;
    drop(edges);
    drop(host);
    drop(nats);
    let blocks = node.stop()?;
    Ok(LiveRun {
        latency,
        capacity,
        coins,
        edge_start_s,
        started_from,
        host_checkpoint,
        rss_start_mb,
        rss_end_mb,
        anomalies,
        blocks,
    })
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.connections < 2 || !(args.window.is_finite() && args.window > 0.0) || args.seconds == 0
    {
        bail!("--connections must be at least 2, --window and --seconds positive");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let load_before = live::load_average();
    let l1gate = args.server.path()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    eprintln!("bus: publish throughput, {} blocks", args.blocks);
    let throughput = publish_throughput(args, &l1gate)?;
    let run = live_run(&runtime, args, &l1gate)?;
    drop(runtime);
    let s = render(args, &machine, &command, &load_before, &throughput, &run);
    println!("{s}");
    if !args.no_write {
        benches::write_section(&benches::benchmarks_md(), "bus", &s)?;
    }
    Ok(())
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    load_before: &str,
    throughput: &Throughput,
    run: &LiveRun,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Scale-out over NATS JetStream (`bus`)\n");
    s.push_str(&machine.markdown(command));
    s.push_str(&live::load_line(load_before, machine.cores));
    let _ = writeln!(
        s,
        "- Bus: `nats-server -js` (Debian's package, {}) on loopback, file store in a temporary directory, `max_payload: 8MB`, one per part of the run",
        nats_version()
    );
    let _ = writeln!(
        s,
        "- Publish: simulator `SimConfig::mainnet(seed 1, scale {})`, {}, {:.1} MB of line-feed output ({} records; generated in {:.1} s); the `l1gate` binary started with `--publish` on them in a process of its own, timed from its start until JetStream acknowledged the last record of every feed (the server's engine catches up on the same cores meanwhile)",
        args.scale, throughput.blocks, throughput.mb, throughput.records, throughput.gen_s
    );
    let checkpoint = |b: Option<u64>| b.map_or_else(|| "?".to_owned(), |b| b.to_string());
    let _ = writeln!(
        s,
        "- Live run: simulator `SimConfig::mainnet(seed 2, scale {})` appending one block at a time at mainnet pace (≈ 14.8 blocks/s; {} live blocks over the run), by-block layout, every line flushed. The node host (`l1gate serve` with `--publish`) and two edges (`l1gate edge`) each run in a process of their own, so that each has its own CPU account; the clients run in the harness process. The node host started first; edge 1 then edge 2 started after it and listened {:.1} s and {:.1} s after their start, from the checkpoints of blocks {} and {} (the node host's newest on the bus then: {}). Server RSS after the start: node host {:.0} MB, edges {:.0} and {:.0} MB; at the end {:.0}, {:.0} and {:.0} MB",
        args.scale,
        run.blocks,
        run.edge_start_s[0],
        run.edge_start_s[1],
        checkpoint(run.started_from[0]),
        checkpoint(run.started_from[1]),
        checkpoint(run.host_checkpoint),
        run.rss_start_mb[0],
        run.rss_start_mb[1],
        run.rss_start_mb[2],
        run.rss_end_mb[0],
        run.rss_end_mb[1],
        run.rss_end_mb[2],
    );
    let _ = writeln!(
        s,
        "- Every process (node writer, node host, both edges, `nats-server`, clients) shares the machine's {} cores: the capacity table shows what each edge costs and that spreading streams over edges keeps them correct, not the capacity gain of edges on machines of their own\n",
        machine.cores
    );

    let _ = writeln!(s, "| scenario | measured | beside (same run) | ratio |");
    let _ = writeln!(s, "|---|---|---|---:|");
    let publish_mbs = throughput.mb / throughput.publish_s;
    let read_mbs = throughput.mb / throughput.read_s;
    let _ = writeln!(
        s,
        "| publish, all six feeds | {publish_mbs:.0} MB/s ({:.0} records/s, {:.2} s) | `fs::read` + line count of the same files: {read_mbs:.0} MB/s | {:.2}× |",
        throughput.records as f64 / throughput.publish_s,
        throughput.publish_s,
        publish_mbs / read_mbs
    );

    let _ = writeln!(
        s,
        "\n### Append → frame through the edges\n\nOn one connection per server, read in the same {} s window on the node host and on both edges: the raw feed's `StreamFills` live tail, timed from the write of its block's fills line; `StreamBbo` and `StreamTrades` over the {LATENCY_COINS} most active coins, timed from the write of the last line the engine folds for the block (its order statuses, raw book diffs and fills); opening frames excluded. `early`: frames that arrived before the writer thread noted the write they count from (it was descheduled between the write and its clock); they are not in the percentiles, which therefore leave out some of the fastest frames.\n",
        args.seconds
    );
    let _ = writeln!(
        s,
        "| stream | served by | frames timed | early | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ node host's |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for stream in LATENCY_STREAMS {
        let rows: Vec<&LatencyRow> = run.latency.iter().filter(|r| r.stream == stream).collect();
        let host_p50 = rows
            .iter()
            .find(|r| r.server == "node host")
            .map_or(f64::NAN, |r| percentiles_ms(&r.tail.histogram)[0]);
        for r in rows {
            let [p50, p90, p99, _, max] = percentiles_ms(&r.tail.histogram);
            let _ = writeln!(
                s,
                "| {stream} | {} | {} | {} | {p50:.3} | {p90:.3} | {p99:.3} | {max:.3} | {:.2}× |",
                r.server,
                r.tail.histogram.len(),
                r.tail.early,
                p50 / host_p50.max(0.001),
            );
        }
    }
    let _ = writeln!(
        s,
        "\nAn edge's path adds the publisher's read of the node's file, the publish to JetStream (stored before it is delivered), the edge's pull consumer, its write of the line to its copy of the files, and then the node host's own path over that copy: the raw feed's read, or the engine's fold and the market stream."
    );

    if !run.capacity.is_empty() {
        let _ = writeln!(
            s,
            "\n### Streams held: two edges beside one server\n\nFor each N: N `StreamBbo` streams, one coin each, round-robin over the universe's {} coins (most active first), clients decoding each frame's block number only; first all on the node host over {} HTTP/2 connections, then the same list split in halves over the two edges ({} connections each). A reference `StreamBbo` per coin on the node host, on a connection of its own for the whole phase, gives the blocks each stream must receive (\"required\"; \"missing / extra\" compare every stream with it over the span it received; an edge must send the frames the node host sends for the same blocks). Latency = the block's order statuses, raw book diffs and fills written → frame decoded, over a {:.0} s window opening {} s after the last stream opened. \"ended\": `l1gate_streams_ended_total` (market service, lag or stall) of the three servers from the opening to the window's end; \"client errors\": streams the clients saw end. CPU: seconds of each process over the window (`/proc/PID/schedstat`; \"harness\" = the clients and the simulator's writer thread). \"edges behind\": blocks each edge's engine was behind the node host's at the window's end.\n",
            run.coins,
            args.connections,
            args.connections / 2,
            args.window,
            SETTLE.as_secs(),
        );
        let _ = writeln!(
            s,
            "| streams | setup | open s | frames/s | required/s | missing / extra | p50 ms | p99 ms | max ms | ended | client errors | CPU s: node host | edge 1 | edge 2 | nats-server | harness | edges behind |"
        );
        let _ = writeln!(
            s,
            "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"
        );
        for r in &run.capacity {
            let [p50, _, p99, _, max] = percentiles_ms(&r.totals.histogram);
            let cpu: Vec<String> = r.cpu_s.iter().map(|(_, s)| format!("{s:.2}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.0} | {:.0} | {} | {p50:.3} | {p99:.3} | {max:.3} | {} | {} | {} | {} / {} |",
                r.streams,
                r.setup.label(),
                r.open_s,
                r.totals.frames as f64 / r.seconds,
                r.totals.required as f64 / r.seconds,
                missing_extra(r),
                r.ended,
                summarize(&r.totals.failures),
                cpu.join(" | "),
                r.behind[0],
                r.behind[1],
            );
        }
        for &n in &args.streams {
            let find = |setup| {
                run.capacity
                    .iter()
                    .find(|r| r.streams == n && r.setup == setup)
            };
            let (Some(alone), Some(split)) = (find(Setup::HostAlone), find(Setup::TwoEdges)) else {
                continue;
            };
            let serving = |r: &Capacity, which: &[&str]| {
                r.cpu_s
                    .iter()
                    .filter(|(label, _)| which.contains(label))
                    .map(|(_, s)| s)
                    .sum::<f64>()
                    / r.seconds
            };
            let all = ["node host", "edge 1", "edge 2", "nats-server"];
            let _ = writeln!(
                s,
                "\n{n} streams: serving processes (node host, edges, `nats-server`) used {:.2} cores with the node host alone and {:.2} with the two edges (the edges' own share: {:.2} and {:.2}, folding every block whether or not they serve); p99 {:.3} ms vs {:.3} ms.",
                serving(alone, &all),
                serving(split, &all),
                serving(split, &["edge 1"]),
                serving(split, &["edge 2"]),
                percentiles_ms(&alone.totals.histogram)[2],
                percentiles_ms(&split.totals.histogram)[2],
            );
        }
    }
    let _ = writeln!(
        s,
        "\n### Anomaly counters\n\nEach server's `/metrics` counters that say its market or its copy of the files differs from what the node wrote (all 0 on a healthy run), after the latency window and at the end of the run.\n"
    );
    let headings: Vec<&str> = ANOMALIES.iter().map(|(heading, _, _)| *heading).collect();
    let _ = writeln!(s, "| server | read | {} |", headings.join(" | "));
    let _ = writeln!(s, "|---|---|{}", "---:|".repeat(ANOMALIES.len()));
    for (when, readings) in ["after latency", "at the end"].iter().zip(&run.anomalies) {
        for (server, values) in readings {
            let values: Vec<String> = values.iter().map(u64::to_string).collect();
            let _ = writeln!(s, "| {server} | {when} | {} |", values.join(" | "));
        }
    }
    s
}

/// `missing / extra` of a setup, split by server when it has several.
fn missing_extra(r: &Capacity) -> String {
    let mut cell = format!("{} / {}", r.totals.missing, r.totals.extra);
    if r.per_server.len() > 1 {
        let parts: Vec<String> = r
            .per_server
            .iter()
            .map(|(label, missing, extra)| format!("{label}: {missing} / {extra}"))
            .collect();
        let _ = write!(cell, " ({})", parts.join("; "));
    }
    cell
}

fn nats_version() -> String {
    Command::new("/usr/sbin/nats-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "version unknown".to_owned(), |v| v.trim().to_owned())
}
