//! Memory and cold start of the `l1gate` server with a full mainnet-size book, measured in a
//! separate server process.
//!
//! `cargo run --release -p benches -- memory [--scales 0.25,0.5,1] [--blocks N]
//! [--behind N,…] [--behind-zstd N,…] [--runs R] [--settle S] [--seed S] [--l1gate PATH] [--keep] [--no-write]`
//!
//! For each scale the simulator (`SimConfig::mainnet(seed, scale)`, by-block layout) writes its
//! starting L4 snapshot and `--blocks` blocks after it (default 100, ≈ 7 s of block time) into a
//! temporary node directory. Then, `--runs` times (default 2), the `l1gate` binary is started
//! as its own process as every harness starts it ([`benches::server`]: `l1gate serve` over DIR
//! on loopback port 0 with a config file, keys file and state directory of its own; simulator
//! block times are in the past, hence the staleness check is off). The clock starts just before
//! the spawn:
//!
//! - `bound`: the server's standard output names its gRPC address;
//! - `serving live`: the first `StreamBbo` frame for BTC arrives. The call is repeated every
//!   5 ms while it answers `UNAVAILABLE` (the engine is still loading the snapshot and
//!   catching up over the blocks after it).
//!
//! `VmRSS` and `VmHWM` of the server are read from `/proc/PID/status` at that moment and again
//! after `--settle` seconds (default 2) with the server idle and the stream open. The server is
//! then stopped (SIGTERM).
//!
//! Catch-up starts (`--behind`, e.g. `26640` ≈ 30 minutes of mainnet, `106560` ≈ 2 hours): at
//! the scale nearest the full book, the simulator writes the snapshot and that many blocks after
//! it (no other snapshot; about 270 kB of node files a block at scale 1, so 29 GB of temporary
//! disk for two hours), and one start is measured the same way: the server folds them all before
//! it serves live. The table sets their
//! peak beside the snapshot start's. Each is then restarted on the state it left (the
//! checkpoint it took when stopped) and measured the same way. `--behind-zstd` does the same over
//! files compressed with zstd an hour at a time as the simulator finishes them: six hours of mainnet-scale files (≈ 86 GB plain) fit a small disk,
//! and the server decodes each hour into a temporary file that it maps like a node file. `--keep` leaves each catch-up's
//! node and state directories in place (their path printed), to start a server over them again.
//!
//! Reference, once per scale, in a fresh child process of this binary: reading the snapshot
//! file, `engine::snapshot::parse` and `Engine::from_snapshot`, timed, with the child's
//! `VmRSS` after the file's bytes are dropped and its `VmHWM`.
//!
//! The `l1gate` binary is built first with the cargo that runs this harness (`$CARGO build
//! -p server --bin l1gate`, same profile and target directory) unless `--l1gate` names one.
//! Prints the table and rewrites the `memory` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::server::{HarnessKey, Role, ServerProcess, harness_settings};
use benches::sys::Rss;
use l1gate::config::ServeArgs;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use serde_json::json;
use tonic::Code;
use tonic::metadata::MetadataValue;

/// Targets of the brief.
const TARGET_RSS_MB: f64 = 200.0;
const TARGET_COLD_START_S: f64 = 2.0;
/// How long a start may take to serve live ...
const READY_WAIT: Duration = Duration::from_secs(300);
/// ... and beyond it, per block a start has to fold first.
const READY_WAIT_PER_BLOCK: Duration = Duration::from_millis(2);
/// Pause between `StreamBbo` attempts while the engine is not ready.
const RETRY: Duration = Duration::from_millis(5);
/// The child running the in-process reference.
pub(crate) const ENGINE_CHILD: &str = "memory-engine";
/// The coin whose BBO stream marks "serving live".
const COIN: &str = "BTC";

#[derive(Debug, clap::Args)]
#[command(
    about = "Memory and cold start of the l1gate server with a full mainnet-size book",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Comma-separated scales (activity and book depth as a fraction of mainnet).
    #[arg(long, default_value = "0.25,0.5,1", value_parser = scales)]
    scales: std::vec::Vec<f64>,
    /// Blocks the simulator writes after its starting snapshot (100 ≈ 7 s of block time).
    #[arg(long, default_value_t = 100)]
    blocks: u64,
    /// Catch-up starts: at the full-book scale, one start over each of these counts of blocks
    /// behind the snapshot (comma-separated; 26640 ≈ 30 minutes of mainnet, 106560 ≈ 2 hours).
    #[arg(long, value_delimiter = ',')]
    behind: Vec<u64>,
    /// Catch-up starts as `--behind`, whose node files are compressed (zstd) an hour at a time as
    /// the simulator finishes them, the plain files removed: hours of mainnet-scale files on a
    /// disk that cannot hold them plain (six hours, 319680 blocks, are ≈ 86 GB plain). The server
    /// decodes each hour as it reaches it (comma-separated block counts).
    #[arg(long, value_delimiter = ',')]
    behind_zstd: Vec<u64>,
    /// Cold starts of the server per scale (the median is reported).
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Seconds the server idles, stream open, before its memory is read again.
    #[arg(long, default_value_t = 2.0)]
    settle: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    server: benches::server::Binary,
    /// Keep each catch-up start's node files and state directory (their path is printed).
    #[arg(long)]
    keep: bool,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

impl Args {
    /// What the types do not check.
    fn check(&self) -> anyhow::Result<()> {
        if self.runs == 0 {
            bail!("--runs must be at least 1");
        }
        if !(self.settle.is_finite() && self.settle >= 0.0) {
            bail!("--settle must be zero or more seconds");
        }
        Ok(())
    }
}

/// `--scales`: a comma-separated list of positive numbers.
fn scales(text: &str) -> Result<Vec<f64>, String> {
    let scales = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("a comma-separated list of numbers: {error}"))?;
    if scales.is_empty() || !scales.iter().all(|s| s.is_finite() && *s > 0.0) {
        return Err("every scale must be positive".to_owned());
    }
    Ok(scales)
}

/// One cold start of the server process.
#[derive(Debug, Clone, Copy)]
struct Start {
    bound_s: f64,
    ready_s: f64,
    at_ready: Rss,
    settled: Rss,
}

/// A start with files behind the snapshot.
#[derive(Debug, Clone, Copy)]
struct Behind {
    blocks: u64,
    /// The node's files, MB (plain: as the simulator wrote them).
    node_mb: f64,
    /// What they took on disk when compressed (`--behind-zstd`), MB.
    zstd_mb: Option<f64>,
    /// Orders resting once the simulator wrote the last block (the book the server holds when
    /// it has caught up; the simulated market's book drifts from the snapshot's over the run).
    orders_at_end: usize,
    start: Start,
    /// The same server started again on the state the first start left: it loads the
    /// checkpoint the first took when it stopped (a restart).
    restart: Start,
}

/// Mainnet's block interval, for block counts as time.
const BLOCK_S: f64 = 3_600.0 / 53_280.0;

/// The in-process reference.
#[derive(Debug, Clone, Copy)]
struct EngineLoad {
    coins: u64,
    orders: u64,
    seconds: f64,
    base_kib: u64,
    rss_kib: u64,
    hwm_kib: u64,
}

/// Everything measured at one scale.
struct AtScale {
    scale: f64,
    snapshot_mb: f64,
    blocks: u64,
    engine: EngineLoad,
    starts: Vec<Start>,
}

impl AtScale {
    fn median(&self, pick: impl Fn(&Start) -> f64) -> f64 {
        let mut v: Vec<f64> = self.starts.iter().map(pick).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            f64::midpoint(v[n / 2 - 1], v[n / 2])
        }
    }

    fn range(&self, pick: impl Fn(&Start) -> f64) -> (f64, f64) {
        self.starts
            .iter()
            .map(pick)
            .fold((f64::MAX, 0.0), |(lo, hi), v| (lo.min(v), hi.max(v)))
    }

    fn ready_s(&self) -> f64 {
        self.median(|s| s.ready_s)
    }

    fn settled_mb(&self) -> f64 {
        self.median(|s| mb(s.settled.rss_kib))
    }

    fn ready_mb(&self) -> f64 {
        self.median(|s| mb(s.at_ready.rss_kib))
    }

    fn peak_mb(&self) -> f64 {
        self.range(|s| mb(s.settled.hwm_kib)).1
    }
}

/// KiB → MB (10^6 bytes).
fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    args.check()?;
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let l1gate = args.server.path()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut scales = Vec::new();
    for &scale in &args.scales {
        scales.push(measure_scale(args, scale, &l1gate, &runtime)?);
    }
    let mut behind = Vec::new();
    if let Some(full) = full_book(&scales).map(|full| full.scale) {
        for &blocks in &args.behind {
            behind.push(measure_behind(
                args, full, blocks, false, &l1gate, &runtime,
            )?);
        }
        for &blocks in &args.behind_zstd {
            behind.push(measure_behind(args, full, blocks, true, &l1gate, &runtime)?);
        }
    }
    let body = render(args, &machine, &command, &l1gate, &scales, &behind);
    println!("{body}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "memory", &body)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("memory: wrote the memory section of {}", path.display());
    }
    benches::summary::emit(&summary(&scales, &behind))?;
    Ok(())
}

/// A node directory in a temporary directory of its own: the simulator's starting snapshot at
/// `scale` and `blocks` blocks after it; with `zstd`, every hour file compressed as soon as the
/// simulator has finished it.
fn node_of(
    args: &Args,
    scale: f64,
    blocks: u64,
    zstd: bool,
) -> anyhow::Result<(
    tempfile::TempDir,
    PathBuf,
    fixtures::Summary,
    Option<Compressed>,
)> {
    let work = tempfile::Builder::new()
        .prefix("l1gate-memory-")
        .tempdir()?;
    let data = work.path().join("node");
    let mut cfg = fixtures::SimConfig::mainnet(args.seed, scale);
    cfg.mode = fixtures::OutputMode::ByBlock;
    // The starting snapshot only: with the simulator's default of one every 10,000 blocks, a
    // start "30 minutes behind" began from the snapshot 6,640 blocks behind.
    cfg.snapshot_every = Some(blocks + 1);
    let run = fixtures::RunOptions {
        blocks: Some(blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    eprintln!("memory: scale {scale}: generating the snapshot and {blocks} blocks after it");
    if !zstd {
        let summary = fixtures::generate(&cfg, &data, &run, &mut |_| {})?;
        return Ok((work, data, summary, None));
    }
    let mut compressed = Compressed::default();
    let mut failed = None;
    let summary = fixtures::generate(&cfg, &data, &run, &mut |_| {
        if failed.is_none()
            && let Err(error) = compressed.hours(&data, true)
        {
            failed = Some(error);
        }
    })?;
    if let Some(error) = failed {
        return Err(error);
    }
    compressed.hours(&data, false)?;
    Ok((work, data, summary, Some(compressed)))
}

/// The bytes of a node directory whose finished hour files are compressed.
#[derive(Debug, Default)]
struct Compressed {
    /// Before compression.
    plain: u64,
    /// The compressed files.
    zstd: u64,
}

impl Compressed {
    /// Compresses every plain hour file under `data` (but each source's newest, the one the
    /// simulator may still write, when `finished_only`) into `H.zst` beside it, and removes the
    /// plain file.
    fn hours(&mut self, data: &Path, finished_only: bool) -> anyhow::Result<()> {
        for mut hours in plain_hours(data)? {
            if finished_only {
                hours.pop();
            }
            for (_, path) in hours {
                let zst = path.with_extension("zst");
                let mut plain = std::fs::File::open(&path)?;
                let out = std::fs::File::create(&zst)?;
                zstd::stream::copy_encode(&mut plain, &out, 1)
                    .with_context(|| format!("compress {}", path.display()))?;
                self.plain += plain.metadata()?.len();
                self.zstd += out.metadata()?.len();
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }
}

/// One source directory's plain hour files (`hourly/YYYYMMDD/H`) by (date, hour).
type HourFiles = Vec<((u32, u32), PathBuf)>;

/// Per source directory, its plain hour files, oldest first.
fn plain_hours(data: &Path) -> anyhow::Result<Vec<HourFiles>> {
    let number = |path: &Path| path.file_name()?.to_str()?.parse::<u32>().ok();
    let mut out = Vec::new();
    for source in std::fs::read_dir(data.join("hl").join("data"))? {
        let hourly = source?.path().join("hourly");
        if !hourly.is_dir() {
            continue;
        }
        let mut hours = Vec::new();
        for date in std::fs::read_dir(&hourly)? {
            let date = date?.path();
            let Some(day) = number(&date) else {
                continue;
            };
            for hour in std::fs::read_dir(&date)? {
                let hour = hour?.path();
                if let Some(h) = number(&hour) {
                    hours.push(((day, h), hour));
                }
            }
        }
        hours.sort();
        out.push(hours);
    }
    Ok(out)
}

fn measure_scale(
    args: &Args,
    scale: f64,
    l1gate: &Path,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<AtScale> {
    let (_work, data, summary, _) = node_of(args, scale, args.blocks, false)?;
    let snapshot = summary
        .snapshots
        .first()
        .context("the simulator wrote no snapshot")?
        .clone();
    let snapshot_mb = std::fs::metadata(&snapshot)?.len() as f64 / 1e6;
    let engine = engine_reference(&snapshot)?;
    eprintln!(
        "memory: scale {scale}: {} coins, {} orders, {snapshot_mb:.1} MB snapshot; in-process load {:.2} s, VmRSS {:.0} MB",
        engine.coins,
        engine.orders,
        engine.seconds,
        mb(engine.rss_kib)
    );
    let mut starts = Vec::new();
    for run in 0..args.runs {
        let start = cold_start(l1gate, &data, None, args.settle, READY_WAIT, runtime)
            .with_context(|| format!("scale {scale}, run {}", run + 1))?;
        eprintln!(
            "memory: scale {scale} run {}: bound {:.3} s, serving live {:.3} s, VmRSS {:.0} MB at ready, {:.0} MB settled, VmHWM {:.0} MB",
            run + 1,
            start.bound_s,
            start.ready_s,
            mb(start.at_ready.rss_kib),
            mb(start.settled.rss_kib),
            mb(start.settled.hwm_kib)
        );
        starts.push(start);
    }
    Ok(AtScale {
        scale,
        snapshot_mb,
        blocks: summary.blocks,
        engine,
        starts,
    })
}

/// One start over `blocks` blocks behind the snapshot at `scale` (their files compressed with
/// `zstd`).
fn measure_behind(
    args: &Args,
    scale: f64,
    blocks: u64,
    zstd: bool,
    l1gate: &Path,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Behind> {
    let (work, data, summary, compressed) = node_of(args, scale, blocks, zstd)?;
    let node_bytes = if let Some(compressed) = &compressed {
        compressed.plain
    } else {
        let mut bytes = 0u64;
        for file in benches::data::files(&data)? {
            bytes += std::fs::metadata(&file)?.len();
        }
        bytes
    };
    // One state directory for both starts: the first is stopped (SIGTERM) once measured and
    // takes a last checkpoint where it ended; the second starts from it (a restart).
    let state = work.path().join("state");
    let wait = READY_WAIT + READY_WAIT_PER_BLOCK * u32::try_from(blocks).unwrap_or(u32::MAX);
    let start = cold_start(l1gate, &data, Some(&state), args.settle, wait, runtime)
        .with_context(|| format!("scale {scale}, {blocks} blocks behind"))?;
    let restart = cold_start(l1gate, &data, Some(&state), args.settle, wait, runtime)
        .with_context(|| format!("scale {scale}, {blocks} blocks behind, restarted"))?;
    eprintln!(
        "memory: {blocks} blocks behind, restarted from its checkpoint: serving live {:.3} s, VmRSS {:.0} MB settled, VmHWM {:.0} MB",
        restart.ready_s,
        mb(restart.settled.rss_kib),
        mb(restart.settled.hwm_kib)
    );
    eprintln!(
        "memory: {blocks} blocks behind: serving live {:.3} s, VmRSS {:.0} MB at ready, {:.0} MB settled, VmHWM {:.0} MB",
        start.ready_s,
        mb(start.at_ready.rss_kib),
        mb(start.settled.rss_kib),
        mb(start.settled.hwm_kib)
    );
    if args.keep {
        eprintln!("memory: kept {}", work.keep().display());
    }
    Ok(Behind {
        blocks,
        node_mb: node_bytes as f64 / 1e6,
        zstd_mb: compressed.map(|c| c.zstd as f64 / 1e6),
        orders_at_end: summary.resting_orders,
        start,
        restart,
    })
}

/// Runs this binary as [`ENGINE_CHILD`] on `snapshot` and reads its one-line JSON answer.
fn engine_reference(snapshot: &Path) -> anyhow::Result<EngineLoad> {
    let output = benches::child(ENGINE_CHILD)?
        .arg(snapshot)
        .stderr(Stdio::inherit())
        .output()
        .context("start the engine reference child")?;
    if !output.status.success() {
        bail!("the engine reference child failed: {}", output.status);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("engine reference child output")?;
    let field = |name: &str| {
        v[name]
            .as_f64()
            .with_context(|| format!("engine reference child: no {name}"))
    };
    Ok(EngineLoad {
        coins: field("coins")? as u64,
        orders: field("orders")? as u64,
        seconds: field("seconds")?,
        base_kib: field("base_kib")? as u64,
        rss_kib: field("rss_kib")? as u64,
        hwm_kib: field("hwm_kib")? as u64,
    })
}

/// The reference child: `ENGINE_CHILD SNAPSHOT`; prints one JSON object.
pub(crate) fn engine_child(args: &[String]) -> anyhow::Result<()> {
    let [snapshot] = args else {
        bail!("{ENGINE_CHILD} takes SNAPSHOT, got {args:?}");
    };
    let base = Rss::of(None)?;
    let started = Instant::now();
    let bytes = std::fs::read(snapshot).with_context(|| format!("read {snapshot}"))?;
    let parsed = engine::snapshot::parse(&bytes).with_context(|| format!("parse {snapshot}"))?;
    drop(bytes);
    let coins = parsed.books.len();
    let orders = parsed.books.order_count();
    let loaded = engine::fold::Engine::from_snapshot(parsed);
    let seconds = started.elapsed().as_secs_f64();
    let after = Rss::of(None)?;
    std::hint::black_box(&loaded);
    println!(
        "{}",
        json!({
            "coins": coins,
            "orders": orders,
            "seconds": seconds,
            "base_kib": base.rss_kib,
            "rss_kib": after.rss_kib,
            "hwm_kib": after.hwm_kib,
        })
    );
    Ok(())
}

/// One cold start: spawn, wait for the address, then for the first BBO frame; read memory.
fn cold_start(
    l1gate: &Path,
    data: &Path,
    state: Option<&Path>,
    settle: f64,
    ready_wait: Duration,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Start> {
    let settings = ServeArgs {
        data: Some(data.to_owned()),
        state_dir: state.map(Path::to_owned),
        ..harness_settings()
    };
    let started = Instant::now();
    let server = ServerProcess::launch(l1gate, Role::Serve, settings, HarnessKey::new()?, None)?;
    let bound_s = started.elapsed().as_secs_f64();
    let key = MetadataValue::try_from(server.keys.key.as_str())?;
    let (ready_s, stream) = runtime.block_on(first_bbo(
        &server.addr.to_string(),
        &key,
        started,
        ready_wait,
    ))?;
    let gone = "the server is gone";
    let at_ready = Rss::of(Some(server.pid())).context(gone)?;
    std::thread::sleep(Duration::from_secs_f64(settle));
    let settled = Rss::of(Some(server.pid())).context(gone)?;
    drop(stream);
    drop(server);
    Ok(Start {
        bound_s,
        ready_s,
        at_ready,
        settled,
    })
}

/// Subscribes to BTC's BBO until the server answers with a frame; returns the seconds since
/// `started` at that frame and the open stream.
async fn first_bbo(
    addr: &str,
    key: &MetadataValue<tonic::metadata::Ascii>,
    started: Instant,
    ready_wait: Duration,
) -> anyhow::Result<(f64, tonic::Streaming<pb::BboUpdate>)> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await
        .with_context(|| format!("connect to {addr}"))?;
    let mut client = MarketStreamingClient::new(channel);
    loop {
        if started.elapsed() > ready_wait {
            bail!(
                "the server did not serve a BBO frame within {} s",
                ready_wait.as_secs()
            );
        }
        let mut request = tonic::Request::new(pb::BboRequest {
            coins: vec![COIN.to_owned()],
        });
        request.metadata_mut().insert("x-api-key", key.clone());
        match client.stream_bbo(request).await {
            Ok(response) => {
                let mut stream = response.into_inner();
                match stream.message().await {
                    Ok(Some(_)) => return Ok((started.elapsed().as_secs_f64(), stream)),
                    Ok(None) => bail!("the BBO stream ended before its first frame"),
                    Err(status) if status.code() == Code::Unavailable => {}
                    Err(status) => bail!("StreamBbo: {status}"),
                }
            }
            Err(status) if status.code() == Code::Unavailable => {}
            Err(status) => bail!("StreamBbo: {status}"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    l1gate: &Path,
    scales: &[AtScale],
    behind: &[Behind],
) -> String {
    let mut s = String::from("## Memory and cold start (`memory`)\n\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed {}, scale X)`, by-block layout: its starting L4 snapshot and {} blocks after it (the engine catches up over them). The simulator's coin count stops growing at scale 1 (200 coins, where mainnet has ≈ 630); resting orders grow with the scale (≈ 440k at 1).",
        args.seed, args.blocks
    );
    let _ = writeln!(
        s,
        "- Server: the `{}` binary (`l1gate serve` over DIR with the harnesses' settings: no staleness check, limits out of the way, defaults otherwise) in its own process, {} cold start(s) per scale (median, range in brackets). Cold start = spawn → first `StreamBbo` frame for {COIN} (retried every {} ms while `UNAVAILABLE`); bound = spawn → the gRPC address on its stdout. RSS = `VmRSS` of `/proc/PID/status` at the first frame and {} s later (settled, idle, stream open); peak = `VmHWM`.",
        l1gate.file_name().map_or_else(
            || l1gate.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        ),
        args.runs,
        RETRY.as_millis(),
        args.settle
    );
    let _ = writeln!(
        s,
        "- Reference (same run, same snapshot file): a fresh process of this harness reads the file, `engine::snapshot::parse` and `Engine::from_snapshot`; its load time, `VmRSS` after dropping the file's bytes, and `VmHWM`. MB = 10^6 bytes.\n"
    );
    let _ = writeln!(
        s,
        "| scale | coins | resting orders | snapshot MB | cold start s | bound s | RSS at ready MB | RSS settled MB | peak MB | engine load s | engine RSS MB | engine peak MB | server / engine RSS |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for sc in scales {
        let (lo, hi) = sc.range(|s| s.ready_s);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {:.3} [{lo:.3}–{hi:.3}] | {:.3} | {:.0} | {:.0} | {:.0} | {:.3} | {:.0} | {:.0} | {:.2} |",
            sc.scale,
            sc.engine.coins,
            sc.engine.orders,
            sc.snapshot_mb,
            sc.ready_s(),
            sc.median(|s| s.bound_s),
            sc.ready_mb(),
            sc.settled_mb(),
            sc.peak_mb(),
            sc.engine.seconds,
            mb(sc.engine.rss_kib),
            mb(sc.engine.hwm_kib),
            sc.settled_mb() / mb(sc.engine.rss_kib),
        );
    }
    if let Some(full) = full_book(scales) {
        let rss = full.settled_mb();
        let ready = full.ready_s();
        let verdict = |ok: bool| if ok { "met" } else { "not met" };
        let _ = writeln!(
            s,
            "\nTargets with {} (scale {}, {} resting orders over {} coins): RSS ≤ {TARGET_RSS_MB:.0} MB — {rss:.0} MB settled (peak {:.0} MB), {}; cold start ≤ {TARGET_COLD_START_S} s — {ready:.3} s, {}. Of the cold start, {:.3} s is the reference's snapshot read + parse + `Engine::from_snapshot` alone.",
            if full.scale >= 1.0 {
                "the full book"
            } else {
                "the largest book measured, smaller than mainnet's"
            },
            full.scale,
            full.engine.orders,
            full.engine.coins,
            full.peak_mb(),
            verdict(rss <= TARGET_RSS_MB),
            verdict(ready <= TARGET_COLD_START_S),
            full.engine.seconds,
        );
    }
    if let Some(full) = full_book(scales).filter(|_| !behind.is_empty()) {
        let _ = writeln!(
            s,
            "\nStarts with files behind the snapshot (scale {}, one start each, the same measures): the engine loads the snapshot (the only one written), then folds every block after it before serving live, taking its checkpoints on the way (every 10,000 blocks). The snapshot start above is the reference.{}\n",
            full.scale,
            if behind.iter().any(|b| b.zstd_mb.is_some()) {
                " Files stored as zstd: each hour compressed (`zstd -1`) as soon as the simulator finished it and its plain file removed, as an archive keeps them and so that hours of mainnet-scale files fit this machine's disk; the server decodes each hour, when it reaches it, into a temporary file that it maps and lets go of as a node file."
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "| blocks behind | block time | node files MB | stored as | resting orders at the end | cold start s | RSS at ready MB | RSS settled MB | peak MB | peak / snapshot start's |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|");
        for b in behind {
            let peak = mb(b.start.settled.hwm_kib);
            let stored = b
                .zstd_mb
                .map_or_else(|| "plain".to_owned(), |zstd| format!("zstd, {zstd:.0} MB"));
            let _ = writeln!(
                s,
                "| {} | {:.0} min | {:.0} | {stored} | {} | {:.3} | {:.0} | {:.0} | {peak:.0} | {:.2}× |",
                b.blocks,
                b.blocks as f64 * BLOCK_S / 60.0,
                b.node_mb,
                b.orders_at_end,
                b.start.ready_s,
                mb(b.start.at_ready.rss_kib),
                mb(b.start.settled.rss_kib),
                peak / full.peak_mb(),
            );
        }
        let _ = writeln!(
            s,
            "\nA restart: the same server started again on the state each start left (stopped with SIGTERM, it took a last checkpoint where it ended); it loads that checkpoint and serves from there.\n"
        );
        let _ = writeln!(
            s,
            "| blocks behind | cold start s | RSS at ready MB | RSS settled MB | peak MB | peak / snapshot start's |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|");
        for b in behind {
            let peak = mb(b.restart.settled.hwm_kib);
            let _ = writeln!(
                s,
                "| {} | {:.3} | {:.0} | {:.0} | {peak:.0} | {:.2}× |",
                b.blocks,
                b.restart.ready_s,
                mb(b.restart.at_ready.rss_kib),
                mb(b.restart.settled.rss_kib),
                peak / full.peak_mb(),
            );
        }
        let worst = behind
            .iter()
            .map(|b| mb(b.start.settled.hwm_kib))
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "\nTarget: peak ≤ {TARGET_RSS_MB:.0} MB for these starts too — {worst:.0} MB at worst, {}.",
            if worst <= TARGET_RSS_MB {
                "met"
            } else {
                "not met"
            }
        );
    }
    s
}

/// The measured scale closest to the mainnet book (scale 1), preferring the larger one.
fn full_book(scales: &[AtScale]) -> Option<&AtScale> {
    scales.iter().min_by(|a, b| {
        (a.scale - 1.0)
            .abs()
            .total_cmp(&(b.scale - 1.0).abs())
            .then(b.scale.total_cmp(&a.scale))
    })
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// The scale of the full book (the one closest to 1), if any scale was measured.
    pub(crate) full_scale: Option<f64>,
    /// One row per scale measured.
    pub(crate) scales: Vec<SummaryScale>,
    /// One row per start with files behind the snapshot (`--behind`).
    pub(crate) behind: Vec<SummaryBehind>,
}

/// The server and the in-process reference at one scale, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryScale {
    /// Simulator scale (1 = mainnet).
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) scale: f64,
    /// Coins in the book.
    pub(crate) coins: u64,
    /// Resting orders in the book.
    pub(crate) orders: u64,
    /// Blocks after the snapshot in the node directory (the report does not read it; the
    /// harness records it here only).
    pub(crate) blocks: u64,
    /// The snapshot file, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) snapshot_mb: f64,
    /// Median spawn → first `StreamBbo` frame, s.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) cold_start_s: f64,
    /// Median settled `VmRSS` of the server, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) rss_settled_mb: f64,
    /// Highest `VmHWM` of the server over the runs, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) peak_mb: f64,
    /// Read + parse + `Engine::from_snapshot` in a bare process, s.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) engine_load_s: f64,
    /// `VmRSS` of that process after the load, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) engine_rss_mb: f64,
    /// `VmRSS` of that process before the load, MB (the report does not read it; the harness
    /// records it here only).
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) engine_base_mb: f64,
}

/// One start with files behind the snapshot, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryBehind {
    /// Blocks behind.
    pub(crate) blocks: u64,
    /// The same as mainnet time, minutes.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) minutes: f64,
    /// The node's files, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) node_mb: f64,
    /// What they took on disk compressed, MB (`--behind-zstd`; `None`: plain).
    #[serde(default)]
    pub(crate) zstd_mb: Option<f64>,
    /// Settled `VmRSS` of the server, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) rss_settled_mb: f64,
    /// `VmHWM` of the server, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) peak_mb: f64,
}

/// The headline figures for the `report` binary (see `benches::summary`).
fn summary(scales: &[AtScale], behind: &[Behind]) -> Summary {
    Summary {
        full_scale: full_book(scales).map(|s| s.scale),
        scales: scales
            .iter()
            .map(|sc| SummaryScale {
                scale: sc.scale,
                coins: sc.engine.coins,
                orders: sc.engine.orders,
                blocks: sc.blocks,
                snapshot_mb: sc.snapshot_mb,
                cold_start_s: sc.ready_s(),
                rss_settled_mb: sc.settled_mb(),
                peak_mb: sc.peak_mb(),
                engine_load_s: sc.engine.seconds,
                engine_rss_mb: mb(sc.engine.rss_kib),
                engine_base_mb: mb(sc.engine.base_kib),
            })
            .collect(),
        behind: behind
            .iter()
            .map(|b| SummaryBehind {
                blocks: b.blocks,
                minutes: b.blocks as f64 * BLOCK_S / 60.0,
                node_mb: b.node_mb,
                zstd_mb: b.zstd_mb,
                rss_settled_mb: mb(b.start.settled.rss_kib),
                peak_mb: mb(b.start.settled.hwm_kib),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(ready_s: f64, rss_kib: u64) -> Start {
        let rss = Rss {
            rss_kib,
            hwm_kib: rss_kib * 2,
        };
        Start {
            bound_s: 0.01,
            ready_s,
            at_ready: rss,
            settled: rss,
        }
    }

    fn scale(scale: f64, starts: Vec<Start>) -> AtScale {
        AtScale {
            scale,
            snapshot_mb: 1.0,
            blocks: 1,
            engine: EngineLoad {
                coins: 1,
                orders: 1,
                seconds: 0.1,
                base_kib: 1,
                rss_kib: 1000,
                hwm_kib: 2000,
            },
            starts,
        }
    }

    #[test]
    fn medians_and_ranges_over_runs() {
        let sc = scale(1.0, vec![start(3.0, 100), start(1.0, 300), start(2.0, 200)]);
        assert!((sc.ready_s() - 2.0).abs() < 1e-12);
        assert_eq!(sc.range(|s| s.ready_s), (1.0, 3.0));
        assert!((sc.settled_mb() - mb(200)).abs() < 1e-12);
        assert!((sc.peak_mb() - mb(600)).abs() < 1e-12);
        let even = scale(1.0, vec![start(1.0, 100), start(2.0, 100)]);
        assert!((even.ready_s() - 1.5).abs() < 1e-12);
    }

    #[test]
    fn the_full_book_is_the_scale_nearest_one() {
        let scales = vec![scale(0.25, vec![]), scale(1.5, vec![]), scale(1.0, vec![])];
        assert_eq!(full_book(&scales).map(|s| s.scale), Some(1.0));
        let scales = vec![scale(0.5, vec![]), scale(1.5, vec![])];
        assert_eq!(full_book(&scales).map(|s| s.scale), Some(1.5));
        assert!(full_book(&[]).is_none());
    }

    #[test]
    fn arguments_are_checked() {
        let parse = |a: &[&str]| -> anyhow::Result<Args> {
            let args = crate::parse::<Args>("memory", a)?;
            args.check()?;
            Ok(args)
        };
        let a = parse(&["--scales", "0.5,1", "--runs", "3"]).unwrap();
        assert_eq!(a.scales, vec![0.5, 1.0]);
        assert_eq!(a.runs, 3);
        assert!(parse(&["--scales", "0"]).is_err());
        assert!(parse(&["--runs", "0"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--blocks"]).is_err());
    }
}
