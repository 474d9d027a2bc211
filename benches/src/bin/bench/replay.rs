//! `replay`: end-to-end throughput of the engine over mainnet-scale simulator output.
//!
//! Generates node files with the simulator (in a child process, so the simulator's own memory
//! does not count in this process's peak RSS), loads the starting L4 snapshot, then measures,
//! in the same run and on the same bytes:
//!
//! - `replay bbo`: `engine::replay::run` for `bbo` on one coin (a cheap view), output to a sink;
//! - `replay l4updates`: `engine::replay::run` for `l4updates` on every coin (a heavy view);
//! - `fold`: `Engine::apply` alone over blocks read and aligned beforehand (with `--repeat N`,
//!   the fastest of N passes, each from a fresh engine);
//! - `fold, cold caches`: the same over the first [`COLD_BLOCKS`] blocks, with the CPU's caches
//!   and address translations emptied before each block (a [`EVICT_MB`] buffer written, untimed):
//!   the live server's case, where a block comes every ≈ 68 ms and whatever ran in between has
//!   evicted the book — measured without the pacing, so it does not swing with the neighbours;
//! - `serde_json::Value`: a full generic parse of every line (the naive way);
//! - `memchr scan`: counting `\n` over the raw file bytes (the physical ceiling).
//!
//! Everything runs on one thread, so every rate is per core. Per-block latencies are recorded
//! in an `hdrhistogram`. The table is printed and written to the `replay` section of
//! `benches/BENCHMARKS.md`, which also keeps the headline row of earlier runs.
//!
//! `cargo run --release -p benches -- replay [--blocks N] [--scale X] [--seed S]
//! [--repeat N] [--no-write] [--fold-only]`
//!
//! `--fold-only` measures the scan and the fold passes alone, warm and cold (no `Value` parse,
//! no replays) and writes nothing: the quick loop for comparing two builds, or for running the
//! fold under a profiler without the other measurements in the profile.

use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use engine::align::{AlignMode, Aligner};
use engine::block::Block;
use engine::fold::Engine;
use engine::replay::{ReplayOptions, ViewKind};
use engine::snapshot::{self, L4Snapshot};
use feeds::{Feed, Start};
use fixtures::{RunOptions, SimConfig};
use hdrhistogram::Histogram;

/// Default block count: about 1 GB of node output at scale 1.
const DEFAULT_BLOCKS: u64 = 4_000;
/// Section name in `BENCHMARKS.md`.
const SECTION: &str = "replay";
/// Earlier runs kept in the history table.
const HISTORY_ROWS: usize = 12;
/// The fold target per core, in MB/s of node output.
const TARGET_MB_S: f64 = 1_000.0;
/// The child that generates into a directory and exits.
pub(crate) const GENERATE_CHILD: &str = "replay-generate";

/// Command-line options.
#[derive(Debug, Clone, clap::Args)]
#[command(
    about = "End-to-end throughput of the engine over mainnet-scale simulator output",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Simulator blocks to generate.
    #[arg(long, default_value_t = DEFAULT_BLOCKS)]
    blocks: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fold passes over the same blocks; the fastest is reported.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
    /// Only the scan and the fold passes (implies `--no-write`).
    #[arg(long)]
    fold_only: bool,
    /// The arguments after the subcommand, as given, for the history row.
    #[arg(skip)]
    given: Vec<String>,
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let args = Args {
        given: benches::harness_args(),
        ..args.clone()
    };
    if args.blocks == 0 {
        bail!("--blocks must be at least 1");
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let dir = tempfile::tempdir().context("temp dir")?;
    let started = Instant::now();
    eprintln!(
        "replay: generating {} mainnet blocks at scale {} into {} ...",
        args.blocks,
        args.scale,
        dir.path().display()
    );
    let status = benches::child(GENERATE_CHILD)?
        .arg(dir.path())
        .arg(args.blocks.to_string())
        .arg(args.scale.to_string())
        .arg(args.seed.to_string())
        .status()
        .context("spawn generator")?;
    if !status.success() {
        bail!("generator failed: {status}");
    }
    eprintln!(
        "replay: generated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let results = measure(dir.path(), &args)?;
    let body = render(&args, &results);
    println!("{body}");
    if !args.no_write && !args.fold_only {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
        write_section(&path, SECTION, &body, &results.history_row)?;
        eprintln!("replay: wrote the {SECTION} section of {}", path.display());
    }
    benches::summary::emit(&summary(&args, &results))?;
    Ok(())
}

/// The headline figures the `report` binary reads (see `benches::summary`): one run at one
/// simulator scale.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Simulator scale of the slice (1 = mainnet).
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) scale: f64,
    /// Blocks in the slice.
    pub(crate) blocks: u64,
    /// One row per measurement (`fold`, `memchr scan`, `serde_json::Value`, …).
    pub(crate) rows: Vec<SummaryRow>,
}

/// One measurement of a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryRow {
    /// The row's name in the section's table.
    pub(crate) name: String,
    /// Node bytes it went through, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) mb: f64,
    /// MB per second.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) mb_s: f64,
    /// Events per second.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) events_s: f64,
}

/// The headline figures for the `report` binary (see `benches::summary`).
fn summary(args: &Args, results: &Results) -> Summary {
    Summary {
        scale: args.scale,
        blocks: results.blocks as u64,
        rows: results
            .rows
            .iter()
            .map(|row| SummaryRow {
                name: row.name.to_owned(),
                mb: row.bytes as f64 / 1e6,
                mb_s: row.mb_s(),
                events_s: row.events_s(),
            })
            .collect(),
    }
}

/// The child process: `replay-generate DIR BLOCKS SCALE SEED`.
pub(crate) fn generate_child(raw: &[String]) -> Result<()> {
    let [dir, blocks, scale, seed] = raw else {
        bail!("{GENERATE_CHILD} DIR BLOCKS SCALE SEED");
    };
    let cfg = SimConfig::mainnet(seed.parse()?, scale.parse()?);
    let run = RunOptions {
        blocks: Some(blocks.parse()?),
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    let summary = fixtures::generate(&cfg, Path::new(dir), &run, &mut |_| {})?;
    eprintln!(
        "replay: {} blocks, {:.1} MB, {} statuses, {} diffs, {} fills, {} resting orders",
        summary.blocks,
        summary.bytes as f64 / 1e6,
        summary.order_statuses,
        summary.book_diffs,
        summary.fills,
        summary.resting_orders
    );
    Ok(())
}

/// One measured pass.
#[derive(Debug, Clone)]
struct Row {
    name: &'static str,
    what: String,
    bytes: u64,
    events: u64,
    elapsed: Duration,
    /// Per-block latency, ns.
    per_block: Option<Histogram<u64>>,
}

impl Row {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }

    fn events_s(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
}

/// Everything one run measured.
struct Results {
    blocks: usize,
    start_height: u64,
    book_orders: usize,
    book_coins: usize,
    snapshot_mb: f64,
    snapshot_parse: Duration,
    rss_book_kb: Option<u64>,
    rows: Vec<Row>,
    history_row: String,
}

fn measure(dir: &Path, args: &Args) -> Result<Results> {
    let first = first_snapshot(dir)?;
    let snapshot_bytes = std::fs::read(&first)?;
    let parse_started = Instant::now();
    let start = snapshot::parse(&snapshot_bytes).context("snapshot")?;
    let snapshot_parse = parse_started.elapsed();
    let snapshot_mb = snapshot_bytes.len() as f64 / 1e6;
    drop(snapshot_bytes);
    let book_orders = start.books.order_count();
    let book_coins = start.books.len();
    let start_height = start.height;
    let loaded = Engine::from_snapshot(start);
    let rss_book_kb = vm_hwm_kb();
    drop(loaded);
    let start = snapshot::parse(&std::fs::read(&first)?).context("snapshot")?;
    eprintln!(
        "replay: snapshot at {start_height}: {book_coins} coins, {book_orders} orders, {snapshot_mb:.1} MB parsed in {:.2} s, VmHWM {} kB",
        snapshot_parse.as_secs_f64(),
        rss_book_kb.map_or_else(|| "?".to_owned(), |kb| kb.to_string())
    );

    let blocks = load_blocks(dir, start_height)?;
    let node_bytes: u64 = blocks.iter().map(block_bytes).sum();
    eprintln!(
        "replay: {} blocks after the snapshot, {:.1} MB of lines",
        blocks.len(),
        node_bytes as f64 / 1e6
    );

    let mut rows = Vec::new();
    rows.push(scan(dir)?);
    if !args.fold_only {
        rows.push(value_parse(&blocks)?);
    }
    let mut best: Option<Row> = None;
    for _ in 0..args.repeat {
        let pass = fold(&start, &blocks)?;
        if best.as_ref().is_none_or(|b| pass.elapsed < b.elapsed) {
            best = Some(pass);
        }
    }
    rows.extend(best);
    rows.push(cold_fold(&start, &blocks[..blocks.len().min(COLD_BLOCKS)])?);
    if !args.fold_only {
        let mut bbo = ReplayOptions::new(dir, ViewKind::Bbo);
        bbo.snapshot = Some(first.clone());
        bbo.selection.coins = vec!["BTC".to_owned()];
        rows.push(replay(
            "replay bbo",
            "`engine::replay::run`, `bbo` on BTC, to a sink",
            &bbo,
        )?);
        let mut l4 = ReplayOptions::new(dir, ViewKind::L4Updates);
        l4.snapshot = Some(first.clone());
        rows.push(replay(
            "replay l4updates",
            "`engine::replay::run`, `l4updates` on every coin, to a sink",
            &l4,
        )?);
    }
    let fold_row = rows.iter().find(|r| r.name == "fold");
    let rate = |name: &str| rows.iter().find(|r| r.name == name).map_or(0.0, Row::mb_s);
    let history_row = format!(
        "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
        benches::utc_now(),
        git_commit(),
        args.given.join(" "),
        fold_row.map_or(0.0, Row::mb_s),
        rate("replay bbo"),
        rate("replay l4updates"),
        rate("serde_json::Value"),
        rate("memchr scan"),
        node_bytes as f64 / 1e6,
    );
    Ok(Results {
        blocks: blocks.len(),
        start_height,
        book_orders,
        book_coins,
        snapshot_mb,
        snapshot_parse,
        rss_book_kb,
        rows,
        history_row,
    })
}

/// The simulator's starting snapshot: the lowest height under `l4_snapshots/` (read
/// directly, since a fresh file is listed by `feeds::Snapshots` only once it has settled).
fn first_snapshot(dir: &Path) -> Result<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(dir.join("l4_snapshots"))? {
        let path = entry?.path();
        let height = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("l4_snapshot_")?.strip_suffix(".json"))
            .and_then(|h| h.parse::<u64>().ok());
        if let Some(height) = height
            && best.as_ref().is_none_or(|(b, _)| height < *b)
        {
            best = Some((height, path));
        }
    }
    best.map(|(_, path)| path)
        .context("the simulator wrote no snapshot")
}

fn block_bytes(block: &Block) -> u64 {
    let lines = &block.lines;
    [
        &lines.order_statuses,
        &lines.raw_book_diffs,
        &lines.fills,
        &lines.misc_events,
        &lines.twap_statuses,
    ]
    .iter()
    .flat_map(|v| v.iter())
    .map(|l| l.len() as u64)
    .sum()
}

/// Every block after `after`, read and aligned as `engine::replay::run` does.
fn load_blocks(dir: &Path, after: u64) -> Result<Vec<Block>> {
    let mut sources = Vec::new();
    let mut records = Vec::new();
    for source in feeds::Source::EVENT_STREAMS {
        let feed = Feed::open(dir, source)?;
        if feed.source_dir_name().is_none() {
            continue;
        }
        let mut cursor = feed.seek(Start::BlockNumber(after + 1))?;
        let read = feed.read(&mut cursor, usize::MAX)?;
        sources.push(source);
        records.push((source, read));
    }
    let mut aligner = Aligner::new(AlignMode::ByBlock, &sources, i64::MAX);
    let mut blocks = Vec::new();
    for (source, read) in records {
        for record in read {
            aligner.push_line(source, record.data, 0);
        }
    }
    while let Some(block) = aligner.pop(0) {
        blocks.push(block);
    }
    while let Some(block) = aligner.finish() {
        blocks.push(block);
    }
    blocks.retain(|b| b.number > after);
    Ok(blocks)
}

/// Node files (not snapshots) under `dir`.
fn node_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            node_files(&path, out)?;
        } else if !path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// `memchr` count of `\n` over every node file's bytes, already in memory; best of 5.
fn scan(dir: &Path) -> Result<Row> {
    let mut files = Vec::new();
    node_files(dir, &mut files)?;
    files.sort();
    let buffers: Vec<Vec<u8>> = files.iter().map(std::fs::read).collect::<io::Result<_>>()?;
    let bytes: u64 = buffers.iter().map(|b| b.len() as u64).sum();
    let mut best = Duration::MAX;
    let mut lines = 0u64;
    for _ in 0..5 {
        let started = Instant::now();
        lines = buffers
            .iter()
            .map(|b| memchr::memchr_iter(b'\n', b).count() as u64)
            .sum();
        best = best.min(started.elapsed());
    }
    std::hint::black_box(lines);
    Ok(Row {
        name: "memchr scan",
        what: "count `\\n` over the raw node files in memory (best of 5; events = lines)"
            .to_owned(),
        bytes,
        events: lines,
        elapsed: best,
        per_block: None,
    })
}

/// `serde_json::from_slice::<Value>` of every line of every block.
fn value_parse(blocks: &[Block]) -> Result<Row> {
    let mut hist = histogram()?;
    let mut bytes = 0;
    let mut lines = 0;
    let started = Instant::now();
    for block in blocks {
        let block_started = Instant::now();
        let l = &block.lines;
        for line in l
            .order_statuses
            .iter()
            .chain(&l.raw_book_diffs)
            .chain(&l.fills)
            .chain(&l.misc_events)
            .chain(&l.twap_statuses)
        {
            let value: serde_json::Value = serde_json::from_slice(line)?;
            std::hint::black_box(&value);
            bytes += line.len() as u64;
            lines += 1;
        }
        record(&mut hist, block_started.elapsed());
    }
    Ok(Row {
        name: "serde_json::Value",
        what: "`serde_json::from_slice::<Value>` of every line (events = lines)".to_owned(),
        bytes,
        events: lines,
        elapsed: started.elapsed(),
        per_block: Some(hist),
    })
}

/// `Engine::apply` over the pre-read blocks, from the starting snapshot.
fn fold(start: &L4Snapshot, blocks: &[Block]) -> Result<Row> {
    let mut engine = Engine::from_snapshot(start.clone());
    let mut hist = histogram()?;
    let mut events = 0u64;
    let mut issues = 0usize;
    let started = Instant::now();
    for block in blocks {
        let block_started = Instant::now();
        let report = engine.apply(block);
        record(&mut hist, block_started.elapsed());
        events += report.events as u64;
        issues += report.issues.len() + report.decode_errors.len();
    }
    let elapsed = started.elapsed();
    if issues > 0 {
        eprintln!("replay: fold reported {issues} issues / decode errors");
    }
    Ok(Row {
        name: "fold",
        what:
            "`Engine::apply` over blocks read and aligned beforehand (fastest of `--repeat` passes)"
                .to_owned(),
        bytes: blocks.iter().map(block_bytes).sum(),
        events,
        elapsed,
        per_block: Some(hist),
    })
}

/// Blocks folded by the cold-cache pass (each costs a write of [`EVICT_MB`]).
const COLD_BLOCKS: usize = 300;

/// The buffer written between blocks of the cold-cache pass: eight times
/// the 32 MB last-level cache of the reference machine, so that the page
/// walks' caches are emptied too (64 MB left a third of the cold cost
/// out there; 128 MB gave 6% less than 256).
const EVICT_MB: usize = 256;

/// `Engine::apply` over `blocks` with the caches emptied before each one.
fn cold_fold(start: &L4Snapshot, blocks: &[Block]) -> Result<Row> {
    let mut engine = Engine::from_snapshot(start.clone());
    let mut evict = vec![0u8; EVICT_MB << 20];
    let mut hist = histogram()?;
    let mut events = 0u64;
    let mut elapsed = Duration::ZERO;
    for block in blocks {
        // One write per cache line: every line, and every page's
        // translation, of a buffer far larger than the caches.
        for byte in evict.iter_mut().step_by(64) {
            *byte = byte.wrapping_add(1);
        }
        std::hint::black_box(&evict);
        let block_started = Instant::now();
        let report = engine.apply(block);
        let took = block_started.elapsed();
        record(&mut hist, took);
        elapsed += took;
        events += report.events as u64;
    }
    Ok(Row {
        name: "fold, cold caches",
        what: format!(
            "`Engine::apply` over the first blocks (at most {COLD_BLOCKS}), a {EVICT_MB} MB buffer written before each (untimed) so that every block starts with the caches emptied, as the live server's one block every ≈ 68 ms does"
        ),
        bytes: blocks.iter().map(block_bytes).sum(),
        events,
        elapsed,
        per_block: Some(hist),
    })
}

/// `engine::replay::run` with `opts`, output to a sink.
fn replay(name: &'static str, what: &str, opts: &ReplayOptions) -> Result<Row> {
    let mut hist = histogram()?;
    let mut last = Instant::now();
    let summary = engine::replay::run(opts, &mut io::sink(), &mut |_| {
        let now = Instant::now();
        record(&mut hist, now - last);
        last = now;
    })?;
    eprintln!("replay: {name}: {summary}");
    Ok(Row {
        name,
        what: what.to_owned(),
        bytes: summary.bytes,
        events: summary.events,
        elapsed: summary.elapsed,
        per_block: Some(hist),
    })
}

fn histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

fn record(hist: &mut Histogram<u64>, elapsed: Duration) {
    hist.saturating_record(elapsed.as_nanos().try_into().unwrap_or(u64::MAX).max(1));
}

/// Peak resident set size of this process, from `/proc/self/status`.
fn vm_hwm_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn render(args: &Args, results: &Results) -> String {
    let mut out = String::new();
    let command = benches::cargo_command();
    let _ = writeln!(out, "## Replay and fold throughput (`replay`)\n");
    let _ = writeln!(out, "- date: {}", benches::utc_now());
    let _ = writeln!(
        out,
        "- machine: {}, {} cores available",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    let _ = writeln!(out, "- rustc: {}", rustc_version());
    let _ = writeln!(
        out,
        "- profile: {} (workspace `[profile.release]`: no cross-crate LTO, 16 codegen units)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let _ = writeln!(out, "- commit: {}", git_commit());
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(
        out,
        "- data: simulator `SimConfig::mainnet(seed {}, scale {})`, {} blocks after the snapshot at {}; starting book {} orders over {} coins ({:.1} MB snapshot, parsed in {:.2} s)",
        args.seed,
        args.scale,
        results.blocks,
        results.start_height,
        results.book_orders,
        results.book_coins,
        results.snapshot_mb,
        results.snapshot_parse.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "- peak RSS (`VmHWM`) after parsing the starting snapshot and loading it into an `Engine` (includes the file's bytes held while parsing): {}",
        results.rss_book_kb.map_or_else(
            || "unknown".to_owned(),
            |kb| format!("{:.0} MB", kb as f64 / 1024.0)
        )
    );
    let _ = writeln!(
        out,
        "- one thread; MB = 10^6 bytes of node lines; events = statuses + diffs + fills\n"
    );
    let value = results
        .rows
        .iter()
        .find(|r| r.name == "serde_json::Value")
        .map_or(0.0, Row::mb_s);
    let scan = results
        .rows
        .iter()
        .find(|r| r.name == "memchr scan")
        .map_or(0.0, Row::mb_s);
    let _ = writeln!(
        out,
        "| Measurement | MB | events | s | MB/s per core | Mevents/s | × `Value` parse | % of scan | per block p50 / p99 / max (µs) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for row in &results.rows {
        let latency = row.per_block.as_ref().map_or_else(
            || "–".to_owned(),
            |h| {
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    h.value_at_quantile(0.5) as f64 / 1e3,
                    h.value_at_quantile(0.99) as f64 / 1e3,
                    h.max() as f64 / 1e3
                )
            },
        );
        let _ = writeln!(
            out,
            "| {} | {:.1} | {} | {:.3} | {:.0} | {:.2} | {:.2} | {:.1}% | {} |",
            row.name,
            row.bytes as f64 / 1e6,
            row.events,
            row.elapsed.as_secs_f64(),
            row.mb_s(),
            row.events_s() / 1e6,
            if value > 0.0 { row.mb_s() / value } else { 0.0 },
            if scan > 0.0 {
                100.0 * row.mb_s() / scan
            } else {
                0.0
            },
            latency
        );
    }
    let _ = writeln!(out);
    for row in &results.rows {
        let _ = writeln!(out, "- {}: {}", row.name, row.what);
    }
    let fold = results
        .rows
        .iter()
        .find(|r| r.name == "fold")
        .map_or(0.0, Row::mb_s);
    let _ = writeln!(
        out,
        "\nTarget: ≥ {TARGET_MB_S:.0} MB/s of node output per core for the fold. This run: {fold:.0} MB/s — {}.",
        if fold >= TARGET_MB_S {
            "met"
        } else {
            "not met"
        }
    );
    out
}

/// Rewrites the `name` section of `path` (creating the file or appending the section when
/// missing), keeping earlier history rows of the section and everything outside it.
fn write_section(path: &Path, name: &str, body: &str, history_row: &str) -> Result<()> {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let history_begin = format!("<!-- {name}:history -->");
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => "# l1gate benchmarks\n".to_owned(),
        Err(e) => return Err(e.into()),
    };
    let span = existing
        .find(&begin)
        .and_then(|b| existing[b..].find(&end).map(|e| (b, b + e + end.len())));
    let mut history: Vec<String> = span
        .map(|(b, e)| &existing[b..e])
        .and_then(|section| section.split_once(&history_begin))
        .map(|(_, rest)| {
            rest.lines()
                .filter(|l| l.starts_with("| 20"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    history.push(history_row.to_owned());
    let skip = history.len().saturating_sub(HISTORY_ROWS);
    let mut section = format!("{begin}\n{body}\n### Runs\n\n{history_begin}\n");
    section.push_str(
        "| date | commit | args | fold MB/s | replay bbo MB/s | replay l4updates MB/s | `Value` MB/s | scan MB/s | MB |\n",
    );
    section.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for row in &history[skip..] {
        section.push_str(row);
        section.push('\n');
    }
    section.push_str(&end);
    let text = if let Some((b, e)) = span {
        format!("{}{section}{}", &existing[..b], &existing[e..])
    } else {
        let sep = if existing.ends_with("\n\n") {
            ""
        } else if existing.ends_with('\n') {
            "\n"
        } else {
            "\n\n"
        };
        format!("{existing}{sep}{section}\n")
    };
    std::fs::write(path, text)?;
    Ok(())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn rustc_version() -> String {
    command_output("rustc", &["--version"]).unwrap_or_else(|| "unknown".to_owned())
}

/// Short commit of the workspace, `-dirty` when the engine or this harness has local changes.
fn git_commit() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.to_string_lossy();
    let Some(commit) = command_output("git", &["-C", &root, "rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let dirty = command_output(
        "git",
        &[
            "-C",
            &root,
            "status",
            "--porcelain",
            "--",
            "engine",
            "benches/src/bin/bench/replay.rs",
        ],
    )
    .is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}
