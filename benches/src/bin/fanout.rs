//! Market-streaming fan-out: how many concurrent `StreamBbo` / `StreamL2Book` subscribers one
//! server holds, what they receive, how late, and what each costs in server memory; then the
//! same with 1% of subscribers that stop reading.
//!
//! `cargo run --release -p benches --bin fanout -- [--streams 100,1000,10000] [--seconds S]
//! [--connections C] [--scale X] [--ring N] [--slow-at N] [--no-write]`
//!
//! A simulator (`SimConfig::mainnet`, scale 1 by default) appends one block at a time to a
//! node directory at mainnet pace (≈ 14.8 blocks/s), recording the instant each block was
//! appended. The server runs in a child process (this binary re-executed), the clients here,
//! over `C` HTTP/2 connections. For each stream count N: half the streams are `StreamBbo`
//! (one coin each) and half `StreamL2Book` (20 levels), over the 4 most active coins; once
//! every stream has its opening frame the server's `VmRSS` is read again and frames are
//! counted for S seconds. Latency is append → receive: from the instant the writer finished
//! the last line the engine folds for a block (its order statuses, raw book diffs and fills)
//! to the instant a client decoded a frame carrying that `block_number`
//! (opening frames excluded). RSS per stream = (RSS with the N streams open − RSS before) / N.
//!
//! The slow run repeats one N (`--slow-at`, default the largest; pick one the machine keeps up
//! with, or the comparison only shows overload) with 1% of the streams slow: on their own connection,
//! half `StreamL2Book` at full depth and half `StreamL4OrderUpdates`, both on the most active
//! coin, with 4 KiB stream windows that one of their frames fills; they read their opening
//! frame and then nothing. The server runs with a ring of `--ring` blocks (32 by default, ≈ 2 s)
//! so that they fall a whole ring behind within the run. Afterwards they read again: an L4
//! stream must end `ABORTED`; an L2 book stream must jump to the newest state (a gap of more
//! than a ring in `block_number`).
//!
//! Prints the table and rewrites the `fanout` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::{
    self, AppendLog, LiveNode, Numbered, SERVE_FLAG, ServerOptions, ServerProcess,
};
use fixtures::SimConfig;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use tokio::sync::watch;
use tonic::Streaming;
use tonic::transport::Channel;

/// Latency target for the largest stream count.
const TARGET_P99_MS: f64 = 10.0;
/// Blocks written before the server starts (it catches up over them).
const WARM_BLOCKS: u64 = 50;
/// Longest wait for every stream of a run to receive its opening frame.
const OPEN_WAIT: Duration = Duration::from_secs(180);
/// The HTTP/2 stream window of every client stream (tonic's default).
const STREAM_WINDOW: u32 = 65_535;
/// The stream window of the slow streams' connection: one frame of theirs fills it, so the
/// server stops being able to send to them within a block of their last read.
const SLOW_STREAM_WINDOW: u32 = 4_096;

struct Args {
    streams: Vec<usize>,
    seconds: f64,
    connections: usize,
    scale: f64,
    ring: usize,
    slow_at: Option<usize>,
    write: bool,
}

fn parse_args(argv: &[String]) -> anyhow::Result<Args> {
    let mut args = Args {
        streams: vec![100, 1_000, 10_000],
        seconds: 4.0,
        connections: 8,
        scale: 1.0,
        ring: 32,
        slow_at: None,
        write: true,
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--streams" => {
                args.streams = value()?
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--streams: a comma-separated list of counts")?;
            }
            "--seconds" => args.seconds = value()?.parse().context("--seconds")?,
            "--connections" => args.connections = value()?.parse().context("--connections")?,
            "--scale" => args.scale = value()?.parse().context("--scale")?,
            "--ring" => args.ring = value()?.parse().context("--ring")?,
            "--slow-at" => args.slow_at = Some(value()?.parse().context("--slow-at")?),
            "--no-write" => args.write = false,
            other => bail!("unknown argument {other}"),
        }
    }
    if args.streams.is_empty() || args.streams.contains(&0) {
        bail!("--streams: counts must be positive");
    }
    if args.connections == 0 || !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--connections and --seconds must be positive");
    }
    Ok(args)
}

/// What the stream tasks of one run share.
struct Shared {
    log: Arc<AppendLog>,
    opened: AtomicUsize,
    /// Streams that failed before their opening frame.
    refused: AtomicUsize,
    measuring: AtomicBool,
}

/// One fast stream's tally over the measured window.
#[derive(Default)]
struct Tally {
    frames: u64,
    latencies_us: Vec<u32>,
    failure: Option<String>,
}

async fn fast_stream<T: Numbered>(
    stream: Result<tonic::Response<Streaming<T>>, tonic::Status>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Tally {
    let mut tally = Tally::default();
    let mut stream = match stream {
        Ok(response) => response.into_inner(),
        Err(status) => {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            tally.failure = Some(format!("open: {:?}", status.code()));
            return tally;
        }
    };
    let opening = match stream.message().await {
        Ok(Some(first)) => first.block(),
        other => {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            tally.failure = Some(format!(
                "no opening frame: {:?}",
                other.err().map(|s| s.code())
            ));
            return tally;
        }
    };
    shared.opened.fetch_add(1, Ordering::AcqRel);
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return tally,
            message = stream.message() => match message {
                Ok(Some(frame)) => {
                    if shared.measuring.load(Ordering::Acquire) {
                        tally.frames += 1;
                        if frame.block() > opening
                            && let Some(latency) =
                                shared.log.since_folded(frame.block(), Instant::now())
                        {
                            tally
                                .latencies_us
                                .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
                        }
                    }
                }
                Ok(None) => {
                    tally.failure = Some("ended".into());
                    return tally;
                }
                Err(status) => {
                    tally.failure = Some(format!("{:?}", status.code()));
                    return tally;
                }
            },
        }
    }
}

/// How a slow stream ended once it read again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SlowOutcome {
    /// Ended with `ABORTED` (incremental views).
    Aborted,
    /// Carried on from a newer state, `gap` blocks past the last frame it had read.
    Skipped { gap: u64 },
    /// Anything else (a failure of the expectation).
    Other(String),
}

/// Reads the opening frame, stops reading until `resume`, then reads until the stream ends or
/// shows a jump of more than `ring` blocks.
async fn slow_stream<T: Numbered>(
    stream: Result<tonic::Response<Streaming<T>>, tonic::Status>,
    shared: Arc<Shared>,
    mut resume: watch::Receiver<bool>,
    ring: u64,
) -> SlowOutcome {
    let mut stream = match stream {
        Ok(response) => response.into_inner(),
        Err(status) => {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            return SlowOutcome::Other(format!("open: {:?}", status.code()));
        }
    };
    let mut last = match stream.message().await {
        Ok(Some(first)) => first.block(),
        other => {
            shared.refused.fetch_add(1, Ordering::AcqRel);
            return SlowOutcome::Other(format!(
                "no opening frame: {:?}",
                other.err().map(|s| s.code())
            ));
        }
    };
    shared.opened.fetch_add(1, Ordering::AcqRel);
    if resume.wait_for(|go| *go).await.is_err() {
        return SlowOutcome::Other("harness stopped".into());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_) => return SlowOutcome::Other("neither aborted nor skipped within 15 s".into()),
            Ok(Ok(Some(frame))) => {
                let gap = frame.block().saturating_sub(last);
                if gap > ring {
                    return SlowOutcome::Skipped { gap };
                }
                last = last.max(frame.block());
            }
            Ok(Ok(None)) => return SlowOutcome::Other("ended without a status".into()),
            Ok(Err(status)) if status.code() == tonic::Code::Aborted => {
                return SlowOutcome::Aborted;
            }
            Ok(Err(status)) => return SlowOutcome::Other(format!("{:?}", status.code())),
        }
    }
}

struct RunResult {
    streams: usize,
    slow: usize,
    open_s: f64,
    seconds: f64,
    frames: u64,
    histogram: hdrhistogram::Histogram<u64>,
    rss_before_kib: u64,
    rss_open_kib: u64,
    failures: Vec<String>,
    slow_outcomes: Vec<(&'static str, SlowOutcome)>,
}

#[allow(clippy::too_many_arguments)]
async fn run(
    server: &ServerProcess,
    channels: &[Channel],
    slow_channel: Option<&Channel>,
    log: &Arc<AppendLog>,
    coins: &[String],
    streams: usize,
    slow: usize,
    seconds: f64,
    ring: u64,
) -> anyhow::Result<RunResult> {
    let rss_before_kib = server.rss_kib()?;
    let shared = Arc::new(Shared {
        log: Arc::clone(log),
        opened: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
        measuring: AtomicBool::new(false),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let (resume_tx, resume_rx) = watch::channel(false);
    let started = Instant::now();
    let mut fast = Vec::with_capacity(streams);
    for i in 0..streams - slow {
        let mut client = MarketStreamingClient::new(channels[i % channels.len()].clone())
            .max_decoding_message_size(64 << 20);
        let coin = coins[(i / 2) % coins.len()].clone();
        let (shared, stop) = (Arc::clone(&shared), stop_rx.clone());
        fast.push(if i % 2 == 0 {
            let request = server.request(pb::BboRequest { coins: vec![coin] })?;
            tokio::spawn(async move {
                fast_stream(client.stream_bbo(request).await, shared, stop).await
            })
        } else {
            let request = server.request(pb::L2BookRequest {
                coin,
                ..pb::L2BookRequest::default()
            })?;
            tokio::spawn(async move {
                fast_stream(client.stream_l2_book(request).await, shared, stop).await
            })
        });
    }
    let mut slow_tasks = Vec::with_capacity(slow);
    if let Some(channel) = slow_channel {
        for i in 0..slow {
            let mut client =
                MarketStreamingClient::new(channel.clone()).max_decoding_message_size(256 << 20);
            let (shared, resume) = (Arc::clone(&shared), resume_rx.clone());
            slow_tasks.push(if i % 2 == 0 {
                let request = server.request(pb::L2BookRequest {
                    coin: coins[0].clone(),
                    n_levels: Some(0),
                    ..pb::L2BookRequest::default()
                })?;
                (
                    "L2Book full depth",
                    tokio::spawn(async move {
                        slow_stream(client.stream_l2_book(request).await, shared, resume, ring)
                            .await
                    }),
                )
            } else {
                let request = server.request(pb::L4OrderUpdatesRequest {
                    coins: vec![coins[0].clone()],
                    ..pb::L4OrderUpdatesRequest::default()
                })?;
                (
                    "L4OrderUpdates",
                    tokio::spawn(async move {
                        slow_stream(
                            client.stream_l4_order_updates(request).await,
                            shared,
                            resume,
                            ring,
                        )
                        .await
                    }),
                )
            });
        }
    }
    while shared.opened.load(Ordering::Acquire) + shared.refused.load(Ordering::Acquire) < streams {
        if started.elapsed() > OPEN_WAIT {
            bail!(
                "only {} of {streams} streams opened within {OPEN_WAIT:?}",
                shared.opened.load(Ordering::Acquire)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open_s = started.elapsed().as_secs_f64();
    let rss_open_kib = server.rss_kib()?;
    // Let the backlog of the opening burst drain before the window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = Instant::now();
    shared.measuring.store(true, Ordering::Release);
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    shared.measuring.store(false, Ordering::Release);
    let seconds = window.elapsed().as_secs_f64();
    let _ = resume_tx.send(true);
    let mut slow_outcomes = Vec::with_capacity(slow);
    for (kind, task) in slow_tasks {
        slow_outcomes.push((kind, task.await?));
    }
    let _ = stop_tx.send(true);
    let mut histogram = live::histogram()?;
    let (mut frames, mut failures) = (0, Vec::new());
    for task in fast {
        let tally = task.await?;
        frames += tally.frames;
        for us in tally.latencies_us {
            live::record(&mut histogram, Duration::from_micros(u64::from(us)));
        }
        failures.extend(tally.failure);
    }
    Ok(RunResult {
        streams,
        slow,
        open_s,
        seconds,
        frames,
        histogram,
        rss_before_kib,
        rss_open_kib,
        failures,
        slow_outcomes,
    })
}

fn summarize_failures(failures: &[String]) -> String {
    if failures.is_empty() {
        return "none".into();
    }
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for failure in failures {
        *counts.entry(failure.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(what, n)| format!("{n}× {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn slow_summary(outcomes: &[(&'static str, SlowOutcome)]) -> String {
    let mut lines = Vec::new();
    for kind in ["L2Book full depth", "L4OrderUpdates"] {
        let of_kind: Vec<&SlowOutcome> = outcomes
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, o)| o)
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let aborted = of_kind
            .iter()
            .filter(|o| matches!(o, SlowOutcome::Aborted))
            .count();
        let mut gaps: Vec<u64> = of_kind
            .iter()
            .filter_map(|o| match o {
                SlowOutcome::Skipped { gap } => Some(*gap),
                _ => None,
            })
            .collect();
        gaps.sort_unstable();
        let others: Vec<String> = of_kind
            .iter()
            .filter_map(|o| match o {
                SlowOutcome::Other(what) => Some(what.clone()),
                _ => None,
            })
            .collect();
        let mut line = format!(
            "{} {kind}: {aborted} ended `ABORTED`, {} skipped to the newest state",
            of_kind.len(),
            gaps.len()
        );
        if let Some(median) = gaps.get(gaps.len() / 2) {
            let _ = write!(line, " (median jump {median} blocks)");
        }
        if !others.is_empty() {
            let _ = write!(
                line,
                ", {} other: {}",
                others.len(),
                summarize_failures(&others)
            );
        }
        lines.push(line);
    }
    lines.join("; ")
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some(SERVE_FLAG) {
        return live::serve_child(&argv[1..]);
    }
    let args = parse_args(&argv)?;
    let machine = benches::Machine::detect();
    let command = benches::cargo_command("fanout");
    let load_before = live::load_average();
    let largest = *args.streams.iter().max().unwrap_or(&0);
    let slow_at = args.slow_at.unwrap_or(largest);
    let runs = args.streams.len() + 1;
    // Blocks for every run's opening, measuring and draining, with room to spare.
    let max_blocks = 20_000;
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!(
        "fanout: generating the starting state (scale {})",
        args.scale
    );
    let node = LiveNode::start(&cfg, WARM_BLOCKS, 1.0, max_blocks)?;
    let coins = node.top_coins(4);
    eprintln!("fanout: starting the server (ring {} blocks)", args.ring);
    let server = ServerProcess::spawn(
        node.path(),
        &ServerOptions {
            poll_ms: Some(5),
            ring: args.ring,
        },
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = Vec::with_capacity(runs);
    runtime.block_on(async {
        let mut channels = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            channels.push(server.channel(STREAM_WINDOW).await?);
        }
        let slow_channel = server.channel(SLOW_STREAM_WINDOW).await?;
        let mut plan: Vec<(usize, usize)> = args.streams.iter().map(|&n| (n, 0)).collect();
        plan.push((slow_at, (slow_at / 100).max(2)));
        for (streams, slow) in plan {
            eprintln!("fanout: {streams} streams ({slow} slow)");
            // Slow streams need a whole ring of blocks to fall behind.
            let seconds = if slow > 0 {
                args.seconds.max(args.ring as f64 / 14.8 * 2.0 + 1.0)
            } else {
                args.seconds
            };
            let result = run(
                &server,
                &channels,
                (slow > 0).then_some(&slow_channel),
                &node.log,
                &coins,
                streams,
                slow,
                seconds,
                args.ring as u64,
            )
            .await?;
            let [p50, _, p99, _, _] = live::percentiles_ms(&result.histogram);
            eprintln!(
                "fanout: {streams} streams: {:.0} frames/s, p50 {p50:.3} ms, p99 {p99:.3} ms",
                result.frames as f64 / result.seconds
            );
            results.push(result);
            // Let the server drop the finished streams' receivers before the next run.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        anyhow::Ok(())
    })?;
    drop(runtime);
    drop(server);
    let written = node.stop()?;

    let mut s = String::from("## Market-streaming fan-out (`fanout`)\n\n");
    s.push_str(&machine.markdown(&command));
    s.push_str(&live::load_line(&load_before, machine.cores));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed 1, scale {})` appended one block at a time at mainnet pace (≈ 14.8 blocks/s; {written} live blocks over the whole run), by-block layout, every line flushed",
        args.scale
    );
    let _ = writeln!(
        s,
        "- Server: `l1gate` in a child process (defaults except `market_ring_capacity` = {} blocks, `poll_interval_ms` = 5); clients in the harness process over {} HTTP/2 connections (64 KiB stream windows), the slow streams on one more (4 KiB stream windows, so that the server cannot send them more than a frame ahead)",
        args.ring, args.connections
    );
    let _ = writeln!(
        s,
        "- Streams: half `StreamBbo` (1 coin), half `StreamL2Book` (20 levels), over {}; latency = the block's order statuses, raw book diffs and fills written to the node files (what the engine folds) → frame decoded by the client, opening frames excluded, window opening 2 s after the last stream opened; RSS/stream = server `VmRSS` growth with the streams open ÷ streams\n",
        coins.join(", ")
    );
    let _ = writeln!(
        s,
        "| streams | slow | open s | frames/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | server RSS MB before → open | KiB/stream | errors |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"
    );
    for r in &results {
        let [p50, p90, p99, p999, max] = live::percentiles_ms(&r.histogram);
        let per_stream = r.rss_open_kib.saturating_sub(r.rss_before_kib) as f64 / r.streams as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.0} | {p50:.3} | {p90:.3} | {p99:.3} | {p999:.3} | {max:.3} | {:.0} → {:.0} | {per_stream:.1} | {} |",
            r.streams,
            r.slow,
            r.open_s,
            r.frames as f64 / r.seconds,
            r.rss_before_kib as f64 / 1024.0,
            r.rss_open_kib as f64 / 1024.0,
            summarize_failures(&r.failures),
        );
    }
    let held = results.iter().find(|r| r.streams == largest && r.slow == 0);
    let slow = results.iter().find(|r| r.slow > 0);
    let slow_base = results.iter().find(|r| r.streams == slow_at && r.slow == 0);
    if let Some(r) = held {
        let p99 = live::percentiles_ms(&r.histogram)[2];
        let verdict = if r.failures.is_empty() && p99 <= TARGET_P99_MS {
            "met"
        } else {
            "not met"
        };
        let _ = writeln!(
            s,
            "\nTarget: {largest} streams held with p99 ≤ {TARGET_P99_MS} ms. This run: {} of {largest} held, p99 {p99:.3} ms — {verdict}.",
            largest - r.failures.len()
        );
    }
    if let (Some(base), Some(r)) = (slow_base, slow) {
        let base_p99 = live::percentiles_ms(&base.histogram)[2];
        let p99 = live::percentiles_ms(&r.histogram)[2];
        let _ = writeln!(
            s,
            "\nSlow subscribers: {} of {} streams stop reading after their opening frame. The others' p99: {p99:.3} ms (without slow ones: {base_p99:.3} ms). Once read again: {}.",
            r.slow,
            r.streams,
            slow_summary(&r.slow_outcomes)
        );
    }
    println!("{s}");
    if args.write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "fanout", &s)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the fanout section of {}", path.display());
    }
    let runs: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let [p50, p90, p99, p999, max] = live::percentiles_ms(&r.histogram);
            serde_json::json!({
                "streams": r.streams,
                "slow": r.slow,
                "open_s": r.open_s,
                "frames_per_s": r.frames as f64 / r.seconds,
                "p50_ms": p50,
                "p90_ms": p90,
                "p99_ms": p99,
                "p999_ms": p999,
                "max_ms": max,
                "rss_before_kib": r.rss_before_kib,
                "rss_open_kib": r.rss_open_kib,
                "rss_kib_per_stream":
                    r.rss_open_kib.saturating_sub(r.rss_before_kib) as f64 / r.streams as f64,
                "failures": r.failures.len(),
            })
        })
        .collect();
    benches::summary::emit(&serde_json::json!({
        "harness": "fanout",
        "scale": args.scale,
        "ring": args.ring,
        "runs": runs,
    }))?;
    Ok(())
}
