//! Candle lookup latency and throughput over HTTP/1.1 keep-alive on loopback.
//!
//! `cargo run --release -p benches -- candles_http [--blocks N] [--scale X] [--seed S]
//! [--connections C] [--seconds S] [--warmup S] [--client-threads T] [--no-write]`
//!
//! Generates mainnet-shaped simulator output (`--blocks`, default 6000 ≈ 7 minutes of block
//! time, at `--scale`, default 0.2), starts the `l1gate` binary on it (its own candle store
//! in a temporary state directory), waits until the candle writer has folded every block and
//! stops it with its last commit; then opens the store in this process to pick the candle
//! lookups to send and to look them up straight from it (the same-run reference), and starts
//! the binary again over the same files and store for the load. The lookups are every
//! (market, interval, bucket) of the data that has a candle, as `GET /{key}/v1/candles`. The
//! load comes from a second process — this binary re-run as its child `candles-load` — that
//! drives `--connections` keep-alive connections (tokio + hyper client, one request in flight
//! per connection) for `--seconds` after `--warmup`, cycling through the lookups, and records
//! each request's latency (send to last body byte) in an hdrhistogram. Server and client share
//! the machine's cores.
//!
//! Prints req/s and p50/p90/p99/p99.9/max and rewrites the `candles_http` section of
//! `benches/BENCHMARKS.md` (target: 50,000 req/s with p99 ≤ 2 ms).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::server::{HarnessKey, Role, ServerProcess, harness_settings};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use l1gate::config::ServeArgs;

/// Target throughput.
const TARGET_RPS: f64 = 50_000.0;
/// Target p99, microseconds.
const TARGET_P99_US: u64 = 2_000;
const INTERVALS: [(&str, i64); 3] = [("1s", 1_000), ("1m", 60_000), ("5m", 300_000)];

/// The child that sends the lookups (also run by `candle_history`).
pub(crate) const LOAD_CHILD: &str = "candles-load";

#[derive(Debug, clap::Args)]
#[command(
    about = "Candle lookup latency and throughput over HTTP/1.1 keep-alive on loopback",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Simulator blocks to generate (6000 ≈ 7 minutes of block time).
    #[arg(long, default_value_t = 6_000)]
    blocks: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 0.2)]
    scale: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep-alive connections of the load process (one request in flight on each).
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Measured seconds of load, after the warm-up.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seconds of load before the measure starts.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Tokio worker threads of the load process.
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.connections == 0 || args.client_threads == 0 || args.seconds <= 0.0 || args.warmup < 0.0
    {
        bail!("--connections and --client-threads must be ≥ 1, --seconds > 0, --warmup ≥ 0");
    }
    let command = benches::cargo_command();
    let machine = benches::Machine::detect();

    let work = tempfile::Builder::new()
        .prefix("l1gate-candles-bench-")
        .tempdir()?;
    let data = work.path().join("node");
    let mut cfg = fixtures::SimConfig::mainnet(args.seed, args.scale);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    let run = fixtures::RunOptions {
        blocks: Some(args.blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    eprintln!("generating {} blocks at scale {}…", args.blocks, args.scale);
    let summary = fixtures::generate(&cfg, &data, &run, &mut |_| {})?;
    let queries = candidate_queries(&data)?;

    let l1gate = args.server.path()?;
    let state = work.path().join("state");
    let settings = ServeArgs {
        data: Some(data.clone()),
        state_dir: Some(state.clone()),
        ..harness_settings()
    };
    let last_block = summary.last_height;
    // A first server folds the data into a fresh store; it stops with a last commit, so that
    // the store then holds every candle.
    let started = Instant::now();
    let first = ServerProcess::start(
        &l1gate,
        Role::Serve,
        settings.clone(),
        HarnessKey::new()?,
        None,
    )?;
    first.wait_for_candles(last_block)?;
    let ready_s = started.elapsed().as_secs_f64();
    drop(first);
    // Keep the lookups that find a candle (the hot path; misses are cheaper), and as the
    // same-run reference, look them up straight from the store: one thread, no HTTP.
    let (found, reference_rps, stored) = {
        let (store, _) = host::candles::store::CandleStore::open(&state, 0)?;
        let reader = store.reader();
        let found: Vec<(&str, engine::market::candles::Interval, &str, i64)> = queries
            .iter()
            .filter_map(|(coin, interval, open)| {
                let parsed = engine::market::candles::Interval::parse(interval).ok()?;
                matches!(reader.get(coin, parsed, *open), Ok(Some(_))).then_some((
                    coin.as_str(),
                    parsed,
                    *interval,
                    *open,
                ))
            })
            .collect();
        let reference_started = Instant::now();
        let mut reference_lookups = 0u64;
        while reference_started.elapsed() < Duration::from_secs(1) {
            for (coin, interval, _, open) in &found {
                std::hint::black_box(reader.get(coin, *interval, *open).is_ok());
                reference_lookups += 1;
            }
        }
        let rps = reference_lookups as f64 / reference_started.elapsed().as_secs_f64();
        (found, rps, reader.candles())
    };
    // The measured server: the same data and store, started again.
    let running = ServerProcess::start(&l1gate, Role::Serve, settings, HarnessKey::new()?, None)?;
    running.wait_for_candles(last_block)?;
    let key = &running.keys.key;
    let hits: Vec<String> = found
        .iter()
        .map(|(coin, _, interval, open)| {
            format!(
                "/{key}/v1/candles?market={}&interval={interval}&time={}",
                benches::query_escape(coin),
                feeds::time::format_iso8601_ms(*open)
            )
        })
        .collect();
    if hits.is_empty() {
        bail!("no candle to look up");
    }
    let markets: BTreeSet<&str> = queries.iter().map(|(c, _, _)| c.as_str()).collect();
    eprintln!(
        "{} candles stored, {} lookups that hit over {} markets; ready after {ready_s:.1} s",
        stored,
        hits.len(),
        markets.len()
    );
    // Other processes on the machine compete with both sides; say how busy
    // it was when the load started.
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    let paths_file = work.path().join("paths.txt");
    std::fs::write(&paths_file, hits.join("\n"))?;

    let output = benches::child(LOAD_CHILD)
        .context("own executable")?
        .args(["--addr", &running.http_addr.to_string()])
        .arg("--paths")
        .arg(&paths_file)
        .args(["--connections", &args.connections.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--client-threads", &args.client_threads.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("load generator process")?;
    if !output.status.success() {
        bail!("load generator failed: {}", output.status);
    }
    let result: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("load generator output")?;
    drop(running);

    let report = render(
        &machine,
        &command,
        args,
        &summary,
        stored,
        hits.len(),
        markets.len(),
        ready_s,
        &load_average,
        reference_rps,
        &result,
    );
    println!("{report}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "candles_http", &report)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the candles_http section of {}", path.display());
    }
    let num = |name: &str| result[name].as_f64().unwrap_or(0.0);
    benches::summary::emit(&Summary {
        rps: num("requests") / num("seconds").max(f64::MIN_POSITIVE),
        p99_ms: num("p99_us") / 1e3,
        connections: args.connections as u64,
        curve: serde_json::from_value(result["curve"].clone())
            .context("load generator output: curve")?,
        reference_rps: Some(reference_rps).filter(|r| r.is_finite()),
        reference: "the same lookups straight from the store in the harness (one thread, no HTTP)"
            .to_owned(),
    })?;
    Ok(())
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Requests per second over HTTP, from the load process.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) rps: f64,
    /// Request latency p99, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p99_ms: f64,
    /// Keep-alive connections of the load process.
    pub(crate) connections: u64,
    /// The request latency distribution, `(quantile, ms)` (see `benches::summary::curve`).
    pub(crate) curve: Vec<(f64, f64)>,
    /// The same lookups straight from the store, per second, when finite.
    pub(crate) reference_rps: Option<f64>,
    /// What `reference_rps` measured.
    pub(crate) reference: String,
}

/// Every (coin, interval, bucket open) with a fill of a trade (tid ≠ 0) in the fills files.
fn candidate_queries(data: &Path) -> anyhow::Result<Vec<(String, &'static str, i64)>> {
    let mut files = Vec::new();
    collect_files(&data.join("hl/data/node_fills_by_block"), &mut files)?;
    files.sort();
    let mut out = BTreeSet::new();
    for file in files {
        let bytes = std::fs::read(&file)?;
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let envelope: serde_json::Value = serde_json::from_slice(line)?;
            for event in envelope["events"].as_array().into_iter().flatten() {
                let fill = &event[1];
                if fill["tid"].as_u64().unwrap_or(0) == 0 {
                    continue;
                }
                let (Some(coin), Some(time)) = (fill["coin"].as_str(), fill["time"].as_i64())
                else {
                    continue;
                };
                for (interval, length) in INTERVALS {
                    out.insert((coin.to_owned(), interval, time - time.rem_euclid(length)));
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn render(
    machine: &benches::Machine,
    command: &str,
    args: &Args,
    summary: &fixtures::Summary,
    stored: u64,
    lookups: usize,
    markets: usize,
    ready_s: f64,
    load_average: &str,
    reference_rps: f64,
    result: &serde_json::Value,
) -> String {
    let num = |name: &str| result[name].as_f64().unwrap_or(0.0);
    let int = |name: &str| result[name].as_u64().unwrap_or(0);
    let rps = num("requests") / num("seconds").max(f64::MIN_POSITIVE);
    let p99 = int("p99_us");
    let mut s = String::new();
    let _ = writeln!(s, "## Candle lookups over HTTP (`candles_http`)\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed {}, scale {})`, {} blocks, {} fills; {stored} \
         closed candles in a fresh store; the server was ready (candles committed, market engine \
         caught up) {ready_s:.1} s after start",
        args.seed, args.scale, summary.blocks, summary.fills
    );
    let _ = writeln!(
        s,
        "- Lookups: the {lookups} (market, interval, bucket) of the data whose candle the store \
         holds ({markets} markets; `1s`/`1m`/`5m`), cycled in order, key in the path"
    );
    let _ = writeln!(
        s,
        "- Server: the `l1gate` binary in a process of its own (the harness's settings), started \
         a second time over the store the first start filled; load: a \
         second process, {} keep-alive HTTP/1.1 connections (hyper client, one request in \
         flight each) on {} runtime thread(s), {:.0} s measured after {:.0} s warm-up; both \
         share the machine's cores (1-minute load average when the load started: \
         {load_average}). Latency is send to last body byte.\n",
        args.connections, args.client_threads, args.seconds, args.warmup
    );
    let _ = writeln!(
        s,
        "| requests | non-200 | errors | req/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| {} | {} | {} | {rps:.0} | {} | {} | {p99} | {} | {} |",
        int("requests"),
        int("non_200"),
        int("errors"),
        int("p50_us"),
        int("p90_us"),
        int("p999_us"),
        int("max_us"),
    );
    let met = |ok: bool| if ok { "met" } else { "not met" };
    let _ = writeln!(
        s,
        "\nTarget: ≥ {TARGET_RPS:.0} req/s with p99 ≤ {} ms. This run: {rps:.0} req/s ({}), p99 \
         {:.2} ms ({}).",
        TARGET_P99_US / 1_000,
        met(rps >= TARGET_RPS),
        p99 as f64 / 1_000.0,
        met(p99 <= TARGET_P99_US),
    );
    let _ = writeln!(
        s,
        "\nSame-run reference: the same lookups straight from the candle store in the harness \
         process (one thread, no HTTP, no body): {reference_rps:.0} lookups/s; over HTTP from the \
         load process: {:.2}× of that.",
        rps / reference_rps
    );
    s
}

// ---------------------------------------------------------------------------
// The load generator (child process).

struct LoadArgs {
    addr: SocketAddr,
    paths: PathBuf,
    connections: usize,
    seconds: f64,
    warmup: f64,
    threads: usize,
}

fn parse_load_args(args: &[String]) -> anyhow::Result<LoadArgs> {
    let mut it = args.iter();
    let (mut addr, mut paths) = (None, None);
    let (mut connections, mut seconds, mut warmup, mut threads) = (32, 10.0, 2.0, 1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => addr = Some(value()?.parse().context("bad --addr")?),
            "--paths" => paths = Some(PathBuf::from(value()?)),
            "--connections" => connections = value()?.parse()?,
            "--seconds" => seconds = value()?.parse()?,
            "--warmup" => warmup = value()?.parse()?,
            "--client-threads" => threads = value()?.parse()?,
            other => bail!("unknown load argument {other}"),
        }
    }
    Ok(LoadArgs {
        addr: addr.context("--addr")?,
        paths: paths.context("--paths")?,
        connections,
        seconds,
        warmup,
        threads,
    })
}

#[derive(Default)]
struct Tally {
    requests: u64,
    non_200: u64,
    errors: u64,
}

pub(crate) fn load_child(args: &[String]) -> anyhow::Result<()> {
    let args = parse_load_args(args)?;
    let text = std::fs::read_to_string(&args.paths)?;
    let paths: Arc<Vec<String>> = Arc::new(text.lines().map(str::to_owned).collect());
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let (histogram, tally, seconds) = runtime.block_on(async move {
        let start = tokio::time::Instant::now();
        let measure_from = start + Duration::from_secs_f64(args.warmup);
        let end = measure_from + Duration::from_secs_f64(args.seconds);
        let mut tasks = Vec::new();
        for c in 0..args.connections {
            let paths = paths.clone();
            tasks.push(tokio::spawn(connection(
                args.addr,
                paths,
                c,
                args.connections,
                measure_from,
                end,
            )));
        }
        let mut histogram = new_histogram()?;
        let mut tally = Tally::default();
        for task in tasks {
            let (h, t) = task.await??;
            histogram.add(&h)?;
            tally.requests += t.requests;
            tally.non_200 += t.non_200;
            tally.errors += t.errors;
        }
        let seconds = (end - measure_from).as_secs_f64();
        anyhow::Ok((histogram, tally, seconds))
    })?;
    let out = serde_json::json!({
        "requests": tally.requests,
        "non_200": tally.non_200,
        "errors": tally.errors,
        "seconds": seconds,
        "p50_us": histogram.value_at_quantile(0.50),
        "p90_us": histogram.value_at_quantile(0.90),
        "p99_us": histogram.value_at_quantile(0.99),
        "p999_us": histogram.value_at_quantile(0.999),
        "max_us": histogram.max(),
        "mean_us": histogram.mean(),
        "curve": benches::summary::curve(&histogram, 0.001),
    });
    println!("{out}");
    Ok(())
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}

/// One keep-alive connection sending requests back to back until `end`;
/// requests completed before `measure_from` are not recorded.
async fn connection(
    addr: SocketAddr,
    paths: Arc<Vec<String>>,
    first: usize,
    stride: usize,
    measure_from: tokio::time::Instant,
    end: tokio::time::Instant,
) -> anyhow::Result<(Histogram<u64>, Tally)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut histogram = new_histogram()?;
    let mut tally = Tally::default();
    let mut i = first % paths.len();
    loop {
        let sent = tokio::time::Instant::now();
        if sent >= end {
            break;
        }
        let request = hyper::Request::get(paths[i].as_str())
            .header("host", "l1gate.bench")
            .body(Empty::<Bytes>::new())?;
        i = (i + stride) % paths.len();
        sender.ready().await?;
        let outcome = match sender.send_request(request).await {
            Ok(response) => {
                let status = response.status();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map(http_body_util::Collected::to_bytes);
                if status != 200
                    && let Ok(body) = &body
                    && tally.non_200 < 3
                {
                    // Say what failed (the request before `i` advanced).
                    let sent = (i + paths.len() - stride % paths.len()) % paths.len();
                    eprintln!(
                        "{status} for {}: {}",
                        paths[sent],
                        String::from_utf8_lossy(body)
                    );
                }
                body.map(|_| status == 200)
            }
            Err(error) => return Err(error.into()),
        };
        let done = tokio::time::Instant::now();
        if sent < measure_from {
            continue;
        }
        tally.requests += 1;
        match outcome {
            Ok(true) => {}
            Ok(false) => tally.non_200 += 1,
            Err(_) => tally.errors += 1,
        }
        histogram.record((done - sent).as_micros().max(1) as u64)?;
    }
    Ok((histogram, tally))
}
