//! `engine_cpu`: CPU time of the server's engine thread per block at mainnet pace, beside the
//! fold alone on the same blocks, and the CPU an idle server burns.
//!
//! `cargo run --release -p benches -- engine_cpu [--seconds S] [--idle-seconds S]
//! [--settle S] [--passes N] [--paced-passes N] [--scale X] [--no-write]`
//!
//! A simulator (`SimConfig::mainnet`, scale 1 by default) appends blocks to a node directory
//! (by-block layout, every line flushed) at mainnet pace (≈ 14.8 blocks/s). The server runs in a
//! process of its own (the `l1gate` binary, `benches::server`) with default settings: the file watcher wakes its
//! engine thread (`l1gate-engine`) on every write, `poll_interval_ms` is the 1000 ms backup
//! poll. No stream is open, so the engine thread's work per block is the live path alone:
//! woken by the watcher, re-check the files, read the new lines, align them into blocks,
//! `Market::apply` with `Needs::ALL` (books, BBO, L2, mids, raw L4, trades, fills, TP/SL,
//! candles), hand the block's candles to the candle writer.
//!
//! 1. Live, `--seconds` (default 20) after `--settle` (default 2 s): the engine thread's CPU
//!    time (`/proc/PID/task/TID/stat` `utime + stime`, and `/proc/PID/task/TID/schedstat` run
//!    time, ns) ÷ the blocks it folded in the window (its own height, asked of the child at
//!    both ends).
//! 2. Idle: the writer stops, and after `--settle` the whole server process's CPU time
//!    (`/proc/PID/stat` `utime + stime`, every thread) over `--idle-seconds` (default 10), as a
//!    share of one core.
//! 3. The same blocks in this process, on one thread, `--passes` times each (default 5,
//!    interleaved, median): `Engine::apply` alone (the book fold) and `Market::apply` with
//!    `Needs::ALL` (what the server folds), from the starting snapshot, the blocks before the
//!    window folded untimed; CPU time from `/proc/thread-self` (read after a 1 ms sleep, so that
//!    the kernel has brought the thread's run time up to date). Then `--paced-passes` times
//!    each (default 3; 0 = none) the same folds paced like the server's, one block per mainnet
//!    block interval with the thread asleep in between (so with caches as cold as the engine
//!    thread finds them), which takes the live window's length per pass. The target holds the
//!    live thread against the paced `Engine::apply` (the same cold caches); back to back, with
//!    warm caches, is reported beside it.
//!
//! Prints the tables and rewrites the `engine_cpu` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::{self, LiveNode};
use benches::server::{ServerOptions, ServerProcess};
use benches::sys::{CpuDelta, CpuTime};
use engine::block::Block;
use engine::fold::Engine;
use engine::market::{Market, Needs};
use engine::snapshot::L4Snapshot;
use engine::source::{BlockSource, SourceOptions};
use feeds::{Feed, Source};
use fixtures::SimConfig;

/// Section name in `BENCHMARKS.md`.
const SECTION: &str = "engine_cpu";
/// Targets of the brief: the live path's CPU per block over `Engine::apply`'s, and the idle
/// server's CPU as a share of one core.
const TARGET_RATIO: f64 = 1.3;
const TARGET_IDLE_PCT: f64 = 1.0;
/// What the two folds of this process are.
const ENGINE_WHAT: &str = "the book fold alone (statuses + raw book diffs into the L4 books)";
const MARKET_WHAT: &str = "what the server's engine thread folds per block (books, BBO, L2, mids, raw L4, trades, fills, TP/SL, candles)";
/// The engine thread's name.
const ENGINE_THREAD: &str = "l1gate-engine";
/// Mainnet blocks per second of the simulator's profile.
const MAINNET_BLOCKS_PER_S: f64 = 14.8;

#[derive(Debug, clap::Args)]
#[command(
    about = "CPU time of the server's engine thread per block at mainnet pace",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Length of the live window, seconds.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Length of the idle window, seconds.
    #[arg(long, default_value_t = 10.0)]
    idle_seconds: f64,
    /// Seconds to wait before each window.
    #[arg(long, default_value_t = 2.0)]
    settle: f64,
    /// Back-to-back passes of each fold in this process (the median is reported).
    #[arg(long, default_value_t = 5)]
    passes: usize,
    /// Passes of each fold paced like the server's (0: none).
    #[arg(long, default_value_t = 3)]
    paced_passes: usize,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// The server at one instant.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    height: u64,
    engine: CpuTime,
    process: CpuTime,
}

/// Reads the engine's height and the CPU counters, with the height asked again after them; a
/// block folded in between makes it try again (the window boundary then falls between blocks).
fn sample(server: &mut ServerProcess, tid: u32) -> anyhow::Result<Sample> {
    let pid = server.pid();
    for _ in 0..20 {
        let before = server.engine_height()?;
        let at = Instant::now();
        let engine = CpuTime::of_thread(pid, tid)?;
        let process = CpuTime::of_process(pid)?;
        if server.engine_height()? == before {
            return Ok(Sample {
                at,
                height: before,
                engine,
                process,
            });
        }
    }
    bail!("the engine's height kept moving while it was sampled")
}

/// What one window measured of the server.
#[derive(Debug, Clone, Copy)]
struct Window {
    seconds: f64,
    blocks: u64,
    first: u64,
    last: u64,
    engine: CpuDelta,
    process: CpuDelta,
}

impl Window {
    fn between(a: &Sample, b: &Sample) -> Self {
        Self {
            seconds: b.at.duration_since(a.at).as_secs_f64(),
            blocks: b.height.saturating_sub(a.height),
            first: a.height + 1,
            last: b.height,
            engine: b.engine.since(&a.engine),
            process: b.process.since(&a.process),
        }
    }
}

/// One fold in this process over the window's blocks.
#[derive(Debug, Clone, Copy)]
struct Pass {
    cpu: CpuDelta,
    wall_s: f64,
}

/// Every pass of one fold.
struct Folds {
    name: &'static str,
    what: &'static str,
    /// One block per mainnet block interval, asleep in between.
    paced: bool,
    passes: Vec<Pass>,
}

impl Folds {
    /// The median pass by CPU time.
    fn median(&self) -> Option<Pass> {
        let mut p = self.passes.clone();
        p.sort_by(|a, b| a.cpu.best_s().total_cmp(&b.cpu.best_s()));
        p.get(p.len() / 2).copied()
    }

    fn range_s(&self) -> (f64, f64) {
        self.passes
            .iter()
            .map(|p| p.cpu.best_s())
            .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            })
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let l1gate = args.server.path()?;
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(args.seconds) || !positive(args.idle_seconds) || !positive(args.scale) {
        bail!("--seconds, --idle-seconds and --scale must be positive");
    }
    if !(args.settle.is_finite() && args.settle >= 0.0) {
        bail!("--settle must be zero or more seconds");
    }
    if args.passes == 0 {
        bail!("--passes must be at least 1");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let load_before = live::load_average();
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!(
        "engine_cpu: generating the starting state (scale {})",
        args.scale
    );
    let node = LiveNode::start(&cfg, 50, 1.0, 100_000)?;
    let mut server = ServerProcess::spawn(
        &l1gate,
        node.path(),
        &ServerOptions {
            poll_ms: None,
            ring: None,
            ..ServerOptions::default()
        },
    )?;
    let pid = server.pid();
    let tid = benches::sys::thread_named(pid, ENGINE_THREAD)?
        .with_context(|| format!("no thread named {ENGINE_THREAD} in the server process"))?;
    std::thread::sleep(Duration::from_secs_f64(args.settle));

    eprintln!("engine_cpu: live window, {} s at 1×", args.seconds);
    let busy_start = sample(&mut server, tid)?;
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let busy_end = sample(&mut server, tid)?;
    let busy = Window::between(&busy_start, &busy_end);
    if busy.blocks == 0 {
        bail!("the server folded no block in the live window");
    }
    eprintln!(
        "engine_cpu: {} blocks ({}..={}) in {:.1} s; engine thread {:.1} ms CPU (utime+stime {:.0} ms), {} wake-ups",
        busy.blocks,
        busy.first,
        busy.last,
        busy.seconds,
        busy.engine.best_s() * 1e3,
        busy.engine.ticks_s * 1e3,
        busy.engine.wakeups
    );

    node.pause();
    eprintln!(
        "engine_cpu: writer paused; idle window, {} s",
        args.idle_seconds
    );
    std::thread::sleep(Duration::from_secs_f64(args.settle));
    let idle_start = sample(&mut server, tid)?;
    std::thread::sleep(Duration::from_secs_f64(args.idle_seconds));
    let idle_end = sample(&mut server, tid)?;
    let idle = Window::between(&idle_start, &idle_end);
    eprintln!(
        "engine_cpu: idle: process {:.1} ms CPU (utime+stime {:.0} ms) in {:.1} s, {} blocks folded",
        idle.process.best_s() * 1e3,
        idle.process.ticks_s * 1e3,
        idle.seconds,
        idle.blocks
    );
    drop(server);

    eprintln!(
        "engine_cpu: the same blocks in this process, {} passes each",
        args.passes
    );
    let (snapshot, blocks) = load(node.path(), &node.snapshot, busy.last)?;
    let split = blocks.partition_point(|blk| blk.number < busy.first);
    let (before, window) = blocks.split_at(split);
    if window.len() as u64 != busy.blocks {
        bail!(
            "read {} blocks of the window {}..={} back from the files, expected {}",
            window.len(),
            busy.first,
            busy.last,
            busy.blocks
        );
    }
    // [market, engine, market paced, engine paced]
    let mut folds = [
        Folds {
            name: "`Market::apply`, `Needs::ALL`",
            what: MARKET_WHAT,
            paced: false,
            passes: Vec::new(),
        },
        Folds {
            name: "`Engine::apply`",
            what: ENGINE_WHAT,
            paced: false,
            passes: Vec::new(),
        },
        Folds {
            name: "`Market::apply`, `Needs::ALL`, paced at 1×",
            what: "the same, one block per mainnet block interval, asleep in between",
            paced: true,
            passes: Vec::new(),
        },
        Folds {
            name: "`Engine::apply`, paced at 1×",
            what: "the same, one block per mainnet block interval, asleep in between",
            paced: true,
            passes: Vec::new(),
        },
    ];
    let pace = Duration::from_secs_f64(1.0 / MAINNET_BLOCKS_PER_S);
    for (passes, pace) in [(args.passes, None), (args.paced_passes, Some(pace))] {
        let at = if pace.is_some() { 2 } else { 0 };
        for _ in 0..passes {
            let mut whole = Market::from_snapshot(snapshot.clone(), Needs::ALL);
            folds[at].passes.push(timed(before, window, pace, |blk| {
                std::hint::black_box(whole.apply(blk));
            })?);
            let mut book_fold = Engine::from_snapshot(snapshot.clone());
            folds[at + 1]
                .passes
                .push(timed(before, window, pace, |blk| {
                    std::hint::black_box(book_fold.apply(blk));
                })?);
        }
    }
    node.resume();
    let written = node.stop()?;

    let body = render(
        args,
        &machine,
        &command,
        &load_before,
        written,
        &busy,
        &idle,
        &folds,
    );
    println!("{}", body.text);
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, SECTION, &body.text)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!(
            "engine_cpu: wrote the {SECTION} section of {}",
            path.display()
        );
    }
    benches::summary::emit(&body.summary)?;
    Ok(())
}

/// Folds `before` untimed, then `window` timed (CPU time of this thread and wall time); with a
/// `pace`, one window block per `pace`, asleep in between (the sleeps take no CPU time).
fn timed(
    before: &[Block],
    window: &[Block],
    pace: Option<Duration>,
    mut fold: impl FnMut(&Block),
) -> anyhow::Result<Pass> {
    for blk in before {
        fold(blk);
    }
    let cpu = CpuTime::this_thread()?;
    let started = Instant::now();
    let mut due = started;
    for blk in window {
        if let Some(pace) = pace {
            due += pace;
            if let Some(left) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
        }
        fold(blk);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let cpu = CpuTime::this_thread()?.since(&cpu);
    Ok(Pass { cpu, wall_s })
}

/// The starting snapshot and every block after it up to `last`, read back from the node files
/// the server tailed (the writer is paused, so the files hold whole blocks).
fn load(dir: &Path, snapshot: &Path, last: u64) -> anyhow::Result<(L4Snapshot, Vec<Block>)> {
    let bytes = std::fs::read(snapshot).with_context(|| format!("read {}", snapshot.display()))?;
    let snapshot = engine::snapshot::parse(&bytes).context("parse the starting snapshot")?;
    drop(bytes);
    let feeds = Source::EVENT_STREAMS
        .into_iter()
        .map(|source| Feed::open(dir, source))
        .collect::<Result<Vec<_>, _>>()?;
    let mut source = BlockSource::new(
        feeds,
        SourceOptions {
            to_block: Some(last),
            ..SourceOptions::from_block(snapshot.height + 1)
        },
    )?;
    let mut blocks = Vec::new();
    loop {
        let read = source.read(0)?;
        while let Some(block) = source.pop(0) {
            blocks.push(block);
        }
        if read == 0 {
            break;
        }
    }
    while let Some(block) = source.finish() {
        blocks.push(block);
    }
    Ok((snapshot, blocks))
}

struct Rendered {
    text: String,
    summary: Summary,
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Blocks the live engine thread folded in the window.
    pub(crate) blocks: u64,
    /// The live engine thread's CPU per block, µs.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) live_us_per_block: f64,
    /// `Engine::apply` back to back on the same blocks, CPU µs per block.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) engine_us_per_block: f64,
    /// `Market::apply` with `Needs::ALL` back to back, CPU µs per block.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) market_us_per_block: f64,
    /// `Engine::apply` paced at 1× like the live thread, CPU µs per block, when a paced pass
    /// ran (and gave a finite figure).
    pub(crate) engine_paced_us_per_block: Option<f64>,
    /// The live path over the fold it is held against (paced if run, else back to back).
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) ratio: f64,
    /// The live path over `Engine::apply` back to back.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) ratio_back_to_back: f64,
    /// The engine thread's share of one core at 1×, %.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) engine_core_pct: f64,
    /// The idle window, s.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) idle_seconds: f64,
    /// The idle server's whole-process CPU, % of one core.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) idle_pct: f64,
}

#[allow(clippy::too_many_arguments)]
fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    load_before: &str,
    written: u64,
    busy: &Window,
    idle: &Window,
    folds: &[Folds; 4],
) -> Rendered {
    let mut s =
        String::from("## Engine thread CPU per block, and the idle server (`engine_cpu`)\n\n");
    s.push_str(&machine.markdown(command));
    s.push_str(&live::load_line(load_before, machine.cores));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed 1, scale {})`, by-block layout, every line flushed, appended at mainnet pace ({MAINNET_BLOCKS_PER_S} blocks/s); {written} live blocks in the whole run; {}",
        args.scale,
        live::WRITER_PACING
    );
    let _ = writeln!(
        s,
        "- Server: the `l1gate` binary in a process of its own, default settings (the file watcher wakes the engine thread; `poll_interval_ms` is the 1000 ms backup poll), no stream open: the engine thread's per-block work is the live path alone (wake-up, re-check and read the files, align, `Market::apply` with `Needs::ALL`, candles to the candle writer)"
    );
    let _ = writeln!(
        s,
        "- Live: the `{ENGINE_THREAD}` thread's CPU time over {:.1} s after {} s of settling, ÷ the {} blocks it folded then ({}..={}, its own height at both ends). CPU time from `/proc/PID/task/TID/schedstat` (run time, ns){}; `utime + stime` of `/proc/PID/task/TID/stat` (10 ms ticks, too coarse for a few hundred blocks) beside it. Wake-ups = its voluntary context switches.",
        busy.seconds,
        args.settle,
        busy.blocks,
        busy.first,
        busy.last,
        if busy.engine.run_s.is_some() {
            ""
        } else {
            " — not reported by this kernel, so `utime + stime` is used"
        }
    );
    let _ = writeln!(
        s,
        "- Same blocks in this process, one thread, {} passes each, interleaved (median by CPU time, range in brackets), then {} paced pass(es) each: each pass starts from the starting snapshot and folds the blocks before the window untimed; CPU time from `/proc/thread-self/schedstat`, read after a 1 ms sleep (a running thread's own run time is brought up to date only when it is switched out)\n",
        args.passes, args.paced_passes
    );
    let live_s = busy.engine.best_s();
    let per_block_us = |cpu_s: f64| cpu_s * 1e6 / busy.blocks as f64;
    let engine_s = folds[1].median().map_or(f64::NAN, |p| p.cpu.best_s());
    let market_s = folds[0].median().map_or(f64::NAN, |p| p.cpu.best_s());
    let _ = writeln!(
        s,
        "| measured | blocks | CPU ms | µs per block | `utime + stime` µs per block | × `Engine::apply` | wall µs per block | wake-ups per block |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| server engine thread, live at 1× | {} | {:.1} | {:.1} | {:.1} | {:.2} | – | {:.1} |",
        busy.blocks,
        live_s * 1e3,
        per_block_us(live_s),
        per_block_us(busy.engine.ticks_s),
        live_s / engine_s,
        busy.engine.wakeups as f64 / busy.blocks as f64,
    );
    for f in folds {
        let Some(p) = f.median() else { continue };
        let (lo, hi) = f.range_s();
        let _ = writeln!(
            s,
            "| {} (this process) | {} | {:.1} [{:.1}–{:.1}] | {:.1} | {:.1} | {:.2} | {} | – |",
            f.name,
            busy.blocks,
            p.cpu.best_s() * 1e3,
            lo * 1e3,
            hi * 1e3,
            per_block_us(p.cpu.best_s()),
            per_block_us(p.cpu.ticks_s),
            p.cpu.best_s() / engine_s,
            if f.paced {
                "–".to_owned()
            } else {
                format!("{:.1}", p.wall_s * 1e6 / busy.blocks as f64)
            },
        );
    }
    let _ = writeln!(s);
    for f in folds.iter().filter(|f| !f.passes.is_empty()) {
        let _ = writeln!(s, "- {}: {}", f.name, f.what);
    }
    let engine_paced_s = folds[3].median().map(|p| p.cpu.best_s());
    let market_paced_s = folds[2].median().map(|p| p.cpu.best_s());
    let _ = writeln!(
        s,
        "- The back-to-back folds run with warm caches; the server's engine thread folds one block every ≈ {:.0} ms, and whatever runs on the machine in between evicts its data, so part of the live path's extra CPU per block is cold caches rather than extra work.{}",
        1e3 / MAINNET_BLOCKS_PER_S,
        engine_paced_s.zip(market_paced_s).map_or_else(String::new, |(engine, market)| format!(
            " Paced the same way, `Engine::apply` takes {:.1} µs per block and `Market::apply` {:.1} µs; the live path is {:.2}× and {:.2}× those.",
            per_block_us(engine),
            per_block_us(market),
            live_s / engine,
            live_s / market
        ))
    );
    let _ = writeln!(
        s,
        "- The engine thread used {:.2}% of one core at 1× ({:.1} ms of CPU per s); the whole server process {:.2}%.",
        100.0 * live_s / busy.seconds,
        1e3 * live_s / busy.seconds,
        100.0 * busy.process.best_s() / busy.seconds,
    );
    // The live thread folds one block per mainnet interval, with caches as cold as the paced
    // fold's: that is the fold it is held against. Back to back is shown beside it.
    let ratio_back_to_back = live_s / engine_s;
    let (ratio, against) = match engine_paced_s {
        Some(paced) => (live_s / paced, "paced at 1× like the live thread"),
        None => (ratio_back_to_back, "back to back (no paced pass was run)"),
    };
    let _ = writeln!(
        s,
        "\nTarget: the live path at most {TARGET_RATIO}× `Engine::apply` per block, the fold {against}. This run: {:.1} µs vs {:.1} µs = {ratio:.2}× — {} (back to back, with warm caches: {:.1} µs, {ratio_back_to_back:.2}×; `Market::apply` with `Needs::ALL` back to back: {:.2}× `Engine::apply`).\n",
        per_block_us(live_s),
        per_block_us(engine_paced_s.unwrap_or(engine_s)),
        if ratio <= TARGET_RATIO {
            "met"
        } else {
            "not met"
        },
        per_block_us(engine_s),
        market_s / engine_s,
    );

    let idle_pct = 100.0 * idle.process.ticks_s / idle.seconds;
    let idle_run_pct = idle.process.run_s.map(|r| 100.0 * r / idle.seconds);
    let _ = writeln!(s, "### Idle server\n");
    let _ = writeln!(
        s,
        "The writer stopped after the live window; {} s later, the server's whole-process CPU time (`utime + stime` of `/proc/PID/stat`, every thread) over {:.1} s with no append{}.\n",
        args.settle,
        idle.seconds,
        if idle.blocks > 0 {
            format!(" ({} blocks were still folded in it)", idle.blocks)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "| window s | process CPU ms (`utime + stime`) | % of one core | process CPU ms (`schedstat`, live threads) | engine thread CPU ms | engine wake-ups per s |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        s,
        "| {:.1} | {:.0} | {idle_pct:.2} | {} | {:.2} | {:.1} |",
        idle.seconds,
        idle.process.ticks_s * 1e3,
        idle.process
            .run_s
            .map_or_else(|| "–".to_owned(), |r| format!("{:.1}", r * 1e3)),
        idle.engine.best_s() * 1e3,
        idle.engine.wakeups as f64 / idle.seconds,
    );
    let _ = writeln!(
        s,
        "\nTarget: an idle server below {TARGET_IDLE_PCT}% of one core. This run: {idle_pct:.2}%{} — {}.",
        idle_run_pct.map_or_else(String::new, |p| format!(" ({p:.2}% by `schedstat`)")),
        if idle_pct < TARGET_IDLE_PCT {
            "met"
        } else {
            "not met"
        }
    );
    let summary = Summary {
        blocks: busy.blocks,
        live_us_per_block: per_block_us(live_s),
        engine_us_per_block: per_block_us(engine_s),
        market_us_per_block: per_block_us(market_s),
        engine_paced_us_per_block: engine_paced_s.map(per_block_us).filter(|us| us.is_finite()),
        ratio,
        ratio_back_to_back,
        engine_core_pct: 100.0 * live_s / busy.seconds,
        idle_seconds: idle.seconds,
        idle_pct,
    };
    Rendered { text: s, summary }
}
