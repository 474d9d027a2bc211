//! `market_compression`: live market frames sent compressed (zstd) against the same frames sent
//! as they are — what `market_compression` costs the server and saves on the wire.
//!
//! `cargo run --release -p benches -- load market_compression [--seconds S] [--scale X]
//! [--l2 N] [--bbo N] [--no-write]`
//!
//! A paced simulator (`SimConfig::mainnet(1, scale)`, 1× the mainnet block rate) appends to a
//! node directory; the server runs in a process of its own (the `l1gate` binary, `benches::server`), once with the default
//! settings and once with `market_compression = true`. Each time the harness opens `--l2`
//! `StreamL2Book` streams of BTC (20 levels) and `--bbo` `StreamBbo` streams of the 20 busiest
//! coins, every client accepting zstd, spread over 8 connections, and measures `--seconds`:
//! frames received, append → frame latency (p50, p99), the server's CPU time (`/proc/PID/stat`)
//! and the bytes its gRPC sockets took (`l1gate_grpc_socket_write_bytes_total`). Rewrites
//! the `market_compression` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use benches::live::LiveNode;
use benches::server::{ServerOptions, ServerProcess};
use benches::streams::{self, Shared, Tally, TallyCell};
use fixtures::SimConfig;
use tonic::codec::CompressionEncoding;

const SECTION: &str = "market_compression";
const CONNECTIONS: usize = 8;

#[derive(Debug, clap::Args)]
#[command(
    about = "Market frames compressed (zstd) against uncompressed: server CPU, bytes, latency",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Seconds measured per server.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// `StreamL2Book` BTC subscribers.
    #[arg(long, default_value_t = 100)]
    l2: usize,
    /// `StreamBbo` subscribers (20 coins each).
    #[arg(long, default_value_t = 100)]
    bbo: usize,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// One server's window.
struct Measured {
    compressed: bool,
    frames: u64,
    latencies_us: Vec<u32>,
    cpu_s: f64,
    written: u64,
    seconds: f64,
    failures: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let l1gate = args.server.path()?;
    if !(args.seconds.is_finite() && args.seconds > 0.0) || args.l2 + args.bbo == 0 {
        bail!("--seconds must be positive and some stream asked for");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!("market_compression: generating the starting state");
    let node = LiveNode::start(&cfg, 50, 1.0, 200_000)?;
    let coins = node.top_coins(20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = Vec::new();
    for compressed in [false, true] {
        let server = ServerProcess::spawn(
            &l1gate,
            node.path(),
            &ServerOptions {
                market_compression: compressed,
                ..ServerOptions::default()
            },
        )?;
        let measured = runtime.block_on(measure(&server, &node, &coins, args, compressed))?;
        eprintln!(
            "market_compression: compressed {compressed}: {} frames, {:.1} MB written, {:.2} s CPU",
            measured.frames,
            measured.written as f64 / 1e6,
            measured.cpu_s
        );
        results.push(measured);
        drop(server);
    }
    drop(runtime);
    node.stop()?;
    let body = render(args, &machine, &command, &results);
    println!("{body}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, SECTION, &body)?;
        eprintln!(
            "market_compression: wrote the {SECTION} section of {}",
            path.display()
        );
    }
    Ok(())
}

/// Bytes the server's gRPC sockets took so far (`l1gate_grpc_socket_write_bytes_total`).
fn written(server: &ServerProcess) -> anyhow::Result<u64> {
    let text = server.metrics()?;
    Ok(benches::server::metric_sum(&text, "l1gate_grpc_socket_write_bytes_total", &[]) as u64)
}

async fn measure(
    server: &ServerProcess,
    node: &LiveNode,
    coins: &[String],
    args: &Args,
    compressed: bool,
) -> anyhow::Result<Measured> {
    let accept = Some(CompressionEncoding::Zstd);
    let shared = Shared::new(Arc::clone(&node.log));
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(server.channel(4 << 20).await?);
    }
    let mut tallies: Vec<TallyCell> = Vec::new();
    let mut tasks = Vec::new();
    for n in 0..args.l2 + args.bbo {
        let channel = channels[n % CONNECTIONS].clone();
        let tally: TallyCell = Arc::new(parking_lot::Mutex::new(Tally::default()));
        tallies.push(Arc::clone(&tally));
        let stream = if n < args.l2 {
            let request = server.request(proto::L2BookRequest {
                coin: "BTC".into(),
                ..proto::L2BookRequest::default()
            })?;
            streams::open_accepting(channel, streams::L2_BOOK, request, accept).await
        } else {
            let request = server.request(proto::BboRequest {
                coins: coins.to_vec(),
            })?;
            streams::open_accepting(channel, streams::BBO, request, accept).await
        };
        tasks.push(tokio::spawn(streams::reader(
            stream,
            Arc::clone(&shared),
            tally,
        )));
    }
    let wanted = args.l2 + args.bbo;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire) < wanted {
        if tokio::time::Instant::now() > deadline {
            bail!("the streams did not open within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Settle, then measure one window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu_before = benches::sys::CpuTime::of_process(server.pid())?;
    let written_before = written(server)?;
    let started = std::time::Instant::now();
    shared.window.store(1, Ordering::Release);
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    shared.window.store(0, Ordering::Release);
    let seconds = started.elapsed().as_secs_f64();
    let cpu_s = benches::sys::CpuTime::of_process(server.pid())?
        .since(&cpu_before)
        .best_s();
    let written = written(server)?.saturating_sub(written_before);
    for task in tasks {
        task.abort();
    }
    let mut frames = 0;
    let mut latencies_us = Vec::new();
    let mut failures = 0;
    for tally in &tallies {
        let tally = tally.lock();
        failures += usize::from(tally.failure.is_some());
        if let Some(window) = tally.windows.first() {
            frames += window.blocks.len() as u64;
            latencies_us.extend(&window.latencies_us);
        }
    }
    Ok(Measured {
        compressed,
        frames,
        latencies_us,
        cpu_s,
        written,
        seconds,
        failures,
    })
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    f64::from(sorted[at]) / 1000.0
}

fn render(args: &Args, machine: &benches::Machine, command: &str, results: &[Measured]) -> String {
    let mut s = String::from("## Market frames compressed or not (`market_compression`)\n\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Load: a paced simulator (`SimConfig::mainnet(1, {})`, 1× the block rate); {} `StreamL2Book` BTC (20 levels) and {} `StreamBbo` (20 coins) subscribers, every client accepting zstd, over {CONNECTIONS} connections; one window of {} s per server, after a 2 s settle.\n- Server: the `l1gate` binary in a process of its own, default settings, then `market_compression = true`. CPU from `/proc/PID/stat`; bytes written = what its gRPC sockets took (`l1gate_grpc_socket_write_bytes_total`, HTTP/2 framing included).\n",
        args.scale, args.l2, args.bbo, args.seconds
    );
    s.push_str("| frames sent | frames received | bytes written per frame | × uncompressed | server CPU (ms per s) | × uncompressed | p50 (ms) | p99 (ms) | streams ended |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let reference = results.iter().find(|m| !m.compressed);
    for m in results {
        let mut sorted = m.latencies_us.clone();
        sorted.sort_unstable();
        let per_frame = m.written as f64 / (m.frames.max(1)) as f64;
        let cpu = m.cpu_s * 1000.0 / m.seconds;
        let (bytes_x, cpu_x) = reference.map_or((f64::NAN, f64::NAN), |r| {
            let r_per_frame = r.written as f64 / (r.frames.max(1)) as f64;
            (
                per_frame / r_per_frame,
                cpu / (r.cpu_s * 1000.0 / r.seconds),
            )
        });
        let _ = writeln!(
            s,
            "| {} | {} | {per_frame:.0} | {bytes_x:.2} | {cpu:.0} | {cpu_x:.2} | {:.3} | {:.3} | {} |",
            if m.compressed { "zstd" } else { "as they are" },
            m.frames,
            percentile(&sorted, 0.5),
            percentile(&sorted, 0.99),
            m.failures
        );
    }
    s
}
