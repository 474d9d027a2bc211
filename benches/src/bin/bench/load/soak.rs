//! Soak: a server under steady load for a long time — many subscribers, a few that stall, the
//! node's hourly files rotating and being pruned — sampled for what must stay flat.
//!
//! `cargo run --release -p benches -- load soak [--minutes 60] [--speed 10] [--streams 1000]
//! [--connections 10] [--sample-seconds 30] [--scale 0.2] [--no-write]`
//!
//! A simulator (`SimConfig::mainnet`, `--scale`) appends blocks at `--speed` × mainnet pace;
//! every sample the harness deletes each source's hourly files but the newest two, as a node
//! pruning its output would (so a long run does not fill the disk, and the server's pruning
//! path runs). The server runs in a process of its own (the `l1gate` binary) with default settings. Subscribers:
//! `--streams` `StreamBbo` streams (one coin each, round-robin over the universe, spread over
//! `--connections` connections), checked against one reference stream per coin; plus 1% that
//! stall (read their opening frame, then nothing, over 4 KiB stream windows): once the server
//! has ended them they read again (expecting `DEADLINE_EXCEEDED`) and as many new ones stall in
//! their place, so stalled subscribers exist all along.
//!
//! Each sample: the server's `VmRSS` and open descriptors, blocks folded, frames received
//! against the reference (missing / extra), latency p99 (the block's lines written → frame
//! decoded), and the streams the server ended (by reason). Prints the table and rewrites the
//! `soak` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::{self, LiveNode};
use benches::server::{ServerOptions, ServerProcess};
use benches::streams::{BBO, Readers, Shared, Totals, ended, open_stalled, tally_window};
use fixtures::SimConfig;
use proto::v3 as pb;

/// Blocks written before the server starts.
const WARM_BLOCKS: u64 = 50;
/// Mainnet blocks per second.
const MAINNET_BLOCKS_PER_S: f64 = 14.8;
/// The stream window of the stalling subscribers' connection.
const SLOW_STREAM_WINDOW: u32 = 4_096;
/// The stream window of every other connection.
const STREAM_WINDOW: u32 = 65_535;

#[derive(Debug, clap::Args)]
#[command(
    about = "A server under steady load for a long time, sampled for what must stay flat",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Length of the run, minutes.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Pace of the simulator, × mainnet.
    #[arg(long, default_value_t = 10.0)]
    speed: f64,
    /// `StreamBbo` subscribers (one coin each, round-robin over the universe).
    #[arg(long, default_value_t = 1_000)]
    streams: usize,
    /// Connections the subscribers are spread over.
    #[arg(long, default_value_t = 10)]
    connections: usize,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30.0)]
    sample_seconds: f64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 0.2)]
    scale: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// One sample of the run.
struct Sample {
    at_s: f64,
    rss_kib: u64,
    descriptors: usize,
    height: u64,
    totals: Totals,
    stalls_ended: u64,
    lags_ended: u64,
    pruned: usize,
}

/// Open descriptors of process `pid`.
fn descriptors(pid: u32) -> anyhow::Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// Deletes every source's hourly files but the newest two under the node root of `data`;
/// returns how many went.
fn prune(data: &Path) -> anyhow::Result<usize> {
    let root = feeds::layout::node_root(data);
    let mut removed = 0;
    for entry in std::fs::read_dir(&root)? {
        let hourly = entry?.path().join("hourly");
        if !hourly.is_dir() {
            continue;
        }
        let mut files: Vec<PathBuf> = Vec::new();
        for day in std::fs::read_dir(&hourly)? {
            let day = day?.path();
            for hour in std::fs::read_dir(&day)? {
                files.push(hour?.path());
            }
        }
        // Names sort by time: `YYYYMMDD/H` with the hour compared as a number.
        files.sort_by_key(|path| {
            let hour = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            let day = path
                .parent()
                .and_then(Path::file_name)
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            (day, hour)
        });
        for old in files.iter().rev().skip(2) {
            std::fs::remove_file(old)?;
            removed += 1;
        }
    }
    Ok(removed)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let l1gate = args.server.path()?;
    if args.streams == 0 || args.connections == 0 {
        bail!("--streams and --connections must be positive");
    }
    if !(args.minutes > 0.0 && args.speed > 0.0 && args.sample_seconds > 0.0) {
        bail!("--minutes, --speed and --sample-seconds must be positive");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let load_before = live::load_average();
    let seconds = args.minutes * 60.0;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let max_blocks = (seconds * MAINNET_BLOCKS_PER_S * args.speed * 1.2) as u64 + 1_000;
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!("soak: generating the starting state (scale {})", args.scale);
    let node = LiveNode::start(&cfg, WARM_BLOCKS, args.speed, max_blocks)?;
    let names = node.top_coins(usize::MAX);
    let mut server = ServerProcess::spawn(
        &l1gate,
        node.path(),
        &ServerOptions {
            poll_ms: None,
            ring: None,
            ..ServerOptions::default()
        },
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let samples = runtime.block_on(async {
        let shared = Shared::new(Arc::clone(&node.log));
        let mut channels = Vec::with_capacity(args.connections);
        for _ in 0..args.connections {
            channels.push(server.channel(STREAM_WINDOW).await?);
        }
        let reference_channel = [server.channel(STREAM_WINDOW).await?];
        let slow_channel = [server.channel(SLOW_STREAM_WINDOW).await?];
        let (reference, _) = Readers::open_bbo(
            &server,
            &shared,
            &reference_channel,
            &names,
            0..names.len(),
            true,
        )
        .await?;
        let (fast, _) = Readers::open_bbo(
            &server,
            &shared,
            &channels,
            &names,
            (0..args.streams).map(|i| i % names.len()),
            false,
        )
        .await?;
        let slow_n = (args.streams / 100).max(1);
        // A stalling subscriber's request: the most active coins.
        let stalled_request = |server: &ServerProcess, i: usize| {
            server.request(pb::BboRequest {
                coins: vec![names[i % 4.min(names.len())].clone()],
            })
        };
        let (mut resume_tx, resume_rx) = tokio::sync::watch::channel(false);
        let mut stalled = open_stalled(
            &shared,
            &slow_channel,
            BBO,
            |i| stalled_request(&server, i),
            slow_n,
            &resume_rx,
        )
        .await?;
        let mut stalls_before = ended(&server, "stall")?;
        let mut outcomes: Vec<String> = Vec::new();
        let mut samples = Vec::new();
        let mut window = 0u16;
        eprintln!(
            "soak: {} streams, {slow_n} stalling, for {:.0} min at {}×",
            args.streams, args.minutes, args.speed
        );
        while started.elapsed().as_secs_f64() < seconds {
            window += 1;
            shared.window.store(window, Ordering::Release);
            tokio::time::sleep(Duration::from_secs_f64(args.sample_seconds)).await;
            shared.window.store(0, Ordering::Release);
            tokio::time::sleep(Duration::from_secs(1)).await;
            let w = usize::from(window - 1);
            let totals = tally_window(&fast.tallies, &reference.tallies, w)?;
            // Forget what the next windows no longer need.
            for cell in &fast.tallies {
                if let Some(done) = cell.lock().windows.get_mut(w) {
                    *done = benches::streams::Window::default();
                }
            }
            for cell in &reference.tallies {
                let mut tally = cell.lock();
                let keep_from = tally
                    .windows
                    .get(w)
                    .and_then(|done| done.blocks.first().copied())
                    .unwrap_or(0);
                if let Some(all) = &mut tally.all {
                    all.retain(|&b| b + 10_000 >= keep_from);
                }
            }
            // Replace the stalled subscribers once the server has ended them.
            let stalls = ended(&server, "stall")?;
            if stalls >= stalls_before + slow_n as u64 {
                let _ = resume_tx.send(true);
                for task in stalled.drain(..) {
                    outcomes.push(task.await?);
                }
                let (tx, rx) = tokio::sync::watch::channel(false);
                resume_tx = tx;
                stalled = open_stalled(
                    &shared,
                    &slow_channel,
                    BBO,
                    |i| stalled_request(&server, i),
                    slow_n,
                    &rx,
                )
                .await?;
                stalls_before = stalls;
            }
            let sample = Sample {
                at_s: started.elapsed().as_secs_f64(),
                rss_kib: server.rss_kib()?,
                descriptors: descriptors(server.pid())?,
                height: server.engine_height()?,
                totals,
                stalls_ended: stalls,
                lags_ended: ended(&server, "lag")?,
                pruned: prune(node.path())?,
            };
            eprintln!(
                "soak: {:>5.0} s  rss {:>5.0} MB  fds {:>4}  height {}  frames {}  missing {} extra {}  p99 {:.1} ms  stalls ended {}",
                sample.at_s,
                sample.rss_kib as f64 / 1024.0,
                sample.descriptors,
                sample.height,
                sample.totals.frames,
                sample.totals.missing,
                sample.totals.extra,
                live::percentiles_ms(&sample.totals.histogram)[2],
                sample.stalls_ended
            );
            samples.push(sample);
        }
        // The last batch may not have stalled long enough to be ended: dropped, not judged.
        drop(resume_tx);
        for task in stalled.drain(..) {
            task.abort();
        }
        fast.close();
        reference.close();
        anyhow::Ok((samples, outcomes))
    })?;
    drop(runtime);
    drop(server);
    let written = node.stop()?;
    let (samples, outcomes) = samples;
    let s = render(
        args,
        &machine,
        &command,
        &load_before,
        written,
        &samples,
        &outcomes,
    );
    println!("{s}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "soak", &s)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the soak section of {}", path.display());
    }
    Ok(())
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    load_before: &str,
    written: u64,
    samples: &[Sample],
    outcomes: &[String],
) -> String {
    let mut s = String::from("## Soak (`soak`)\n\n");
    s.push_str(&machine.markdown(command));
    s.push_str(&live::load_line(load_before, machine.cores));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed 1, scale {})` at {}× mainnet pace ({written} blocks), hourly files but the newest two pruned at every sample",
        args.scale, args.speed
    );
    let _ = writeln!(
        s,
        "- {} `StreamBbo` subscribers over {} connections, checked against a reference stream per coin; 1% more stall (4 KiB windows) and are replaced once the server ends them; a sample every {} s\n",
        args.streams, args.connections, args.sample_seconds
    );
    let _ = writeln!(
        s,
        "| at s | server RSS MB | descriptors | engine height | frames | missing | extra | p99 ms | stalls ended | lags ended | files pruned |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for sample in samples {
        let _ = writeln!(
            s,
            "| {:.0} | {:.0} | {} | {} | {} | {} | {} | {:.3} | {} | {} | {} |",
            sample.at_s,
            sample.rss_kib as f64 / 1024.0,
            sample.descriptors,
            sample.height,
            sample.totals.frames,
            sample.totals.missing,
            sample.totals.extra,
            live::percentiles_ms(&sample.totals.histogram)[2],
            sample.stalls_ended,
            sample.lags_ended,
            sample.pruned,
        );
    }
    let lost: u64 = samples.iter().map(|x| x.totals.missing).sum();
    let extra: u64 = samples.iter().map(|x| x.totals.extra).sum();
    let rss: Vec<u64> = samples.iter().map(|x| x.rss_kib).collect();
    let fds: Vec<usize> = samples.iter().map(|x| x.descriptors).collect();
    // Flat: the second half's median within 10% of the first half's (RSS saws up and down
    // as the allocator takes and returns memory; a leak moves the median).
    let half = samples.len() / 2;
    let peak = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let median = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let (early, late) = rss.split_at(half);
    let flat = late.is_empty() || median(late) as f64 <= median(early).max(1) as f64 * 1.1;
    let _ = writeln!(
        s,
        "\nOver {:.0} min: {lost} frames missing and {extra} extra against the reference; server RSS {:.0} → {:.0} MB (peak {:.0} MB; second half's median within 10% of the first half's: {}); descriptors {} → {} (max {}); stalled subscribers ended {} times; outcomes once read again: {}.",
        samples.last().map_or(0.0, |x| x.at_s) / 60.0,
        rss.first().copied().unwrap_or(0) as f64 / 1024.0,
        rss.last().copied().unwrap_or(0) as f64 / 1024.0,
        peak(&rss) as f64 / 1024.0,
        if flat { "yes" } else { "no" },
        fds.first().copied().unwrap_or(0),
        fds.last().copied().unwrap_or(0),
        fds.iter().copied().max().unwrap_or(0),
        samples.last().map_or(0, |x| x.stalls_ended),
        benches::streams::summarize(outcomes),
    );
    s
}
