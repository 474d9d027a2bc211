//! `replay_cli`: `l1gate replay` end to end, as a user runs it — the real binary in its own
//! process, from its start to its exit: process start, snapshot load (for a view that reads the
//! books), reading, folding and printing every frame.
//!
//! `cargo run --release -p benches -- replay_cli [--blocks N] [--scale X] [--seed S]
//! [--runs R] [--l1gate PATH] [--no-write]`
//!
//! The simulator (`SimConfig::mainnet(seed, scale)`, by-block layout, no `replica_cmds`) writes
//! its starting L4 snapshot and `--blocks` blocks after it into a temporary node directory (the
//! same slice the `replay` scenario folds in memory). Every file is read once first, so that
//! every command below reads from the page cache. Then, `--runs` times (default 3), one after the
//! other and each timed by the wall clock from spawn to exit:
//!
//! - `l1gate replay --data DIR --view bbo --coins BTC > /dev/null`
//! - `l1gate replay --data DIR --view trades --coins BTC > /dev/null`
//! - the reference, `sh -c 'cat FILES | wc -l'` over the slice's event-stream files (every node
//!   file but the snapshot): the rate at which a process can merely read the same bytes.
//!
//! MB/s = the slice's event-stream bytes (MB = 10^6 bytes) ÷ the median wall time. The bytes
//! each view actually reads are the ones `l1gate replay` reports on its standard error.
//!
//! The `l1gate` binary is built first with the cargo that runs this harness (`$CARGO build
//! -p server --bin l1gate`, same profile and target directory) unless `--l1gate` names one.
//! Prints the table and rewrites the `replay_cli` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};
use feeds::Source;

/// Section name in `BENCHMARKS.md`.
const SECTION: &str = "replay_cli";
/// Target of the brief, MB/s of node output, for every view measured.
const TARGET_MB_S: f64 = 1_000.0;
/// The coin both views are asked for.
const COIN: &str = "BTC";
/// The views measured.
const VIEWS: [&str; 2] = ["bbo", "trades"];

#[derive(Debug, clap::Args)]
#[command(
    about = "`l1gate replay` end to end, as a user runs it",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Blocks the simulator writes after its starting snapshot.
    #[arg(long, default_value_t = 3_000)]
    blocks: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs of each command (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    server: benches::server::Binary,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// The node files of the slice.
struct Slice {
    /// Event-stream files (every node file but snapshots), sorted.
    files: Vec<PathBuf>,
    /// Their total size, bytes.
    bytes: u64,
    /// Bytes per event stream (feed id), in `Source::EVENT_STREAMS` order; files of no known
    /// stream under "other".
    by_feed: Vec<(String, u64)>,
    /// Snapshot files' total size, bytes.
    snapshot_bytes: u64,
    blocks: u64,
}

/// One timed run of a command.
#[derive(Debug, Clone)]
struct Timed {
    wall_s: f64,
    /// `l1gate replay`'s standard error (its summary line), or the reference's output.
    output: String,
}

/// Every run of one command.
struct Measured {
    command: String,
    runs: Vec<Timed>,
}

impl Measured {
    /// The runs, fastest first.
    fn sorted(&self) -> Vec<&Timed> {
        let mut runs: Vec<&Timed> = self.runs.iter().collect();
        runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
        runs
    }

    fn walls(&self) -> Vec<f64> {
        self.sorted().iter().map(|r| r.wall_s).collect()
    }

    /// The median run (the slower of the middle two for an even count).
    fn median(&self) -> Option<&Timed> {
        let runs = self.sorted();
        runs.get(runs.len() / 2).copied()
    }

    fn median_s(&self) -> f64 {
        self.median().map_or(f64::NAN, |r| r.wall_s)
    }

    /// What the median run said (`l1gate replay`'s summary line).
    fn median_output(&self) -> &str {
        self.median().map_or("", |r| r.output.as_str())
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.blocks == 0 || args.runs == 0 {
        bail!("--blocks and --runs must be at least 1");
    }
    if !(args.scale.is_finite() && args.scale > 0.0) {
        bail!("--scale must be positive");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let l1gate = args.server.path()?;
    let work = tempfile::Builder::new()
        .prefix("l1gate-replay-cli-")
        .tempdir()?;
    let data = work.path().join("node");
    eprintln!(
        "replay_cli: generating {} blocks at scale {}",
        args.blocks, args.scale
    );
    let cfg = fixtures::SimConfig::mainnet(args.seed, args.scale);
    let generated = fixtures::generate(
        &cfg,
        &data,
        &fixtures::RunOptions {
            blocks: Some(args.blocks),
            no_replica_cmds: true,
            ..fixtures::RunOptions::default()
        },
        &mut |_| {},
    )?;
    let slice = slice(&data, generated.blocks)?;
    eprintln!(
        "replay_cli: {} event-stream files, {:.1} MB; reading every file once",
        slice.files.len(),
        slice.bytes as f64 / 1e6
    );
    benches::data::warm(&data)?;

    let mut measured: Vec<Measured> = VIEWS
        .iter()
        .map(|view| Measured {
            command: format!("l1gate replay --data DIR --view {view} --coins {COIN} > /dev/null"),
            runs: Vec::new(),
        })
        .collect();
    measured.push(Measured {
        command: "sh -c 'cat FILES | wc -l'".to_owned(),
        runs: Vec::new(),
    });
    for run in 0..args.runs {
        for (i, view) in VIEWS.iter().enumerate() {
            let timed = replay(&l1gate, &data, view)?;
            eprintln!(
                "replay_cli: run {}: {view}: {:.3} s — {}",
                run + 1,
                timed.wall_s,
                timed.output.lines().next().unwrap_or("")
            );
            measured[i].runs.push(timed);
        }
        let timed = cat_wc(&slice.files)?;
        eprintln!(
            "replay_cli: run {}: cat | wc -l: {:.3} s, {} lines",
            run + 1,
            timed.wall_s,
            timed.output
        );
        measured[VIEWS.len()].runs.push(timed);
    }

    let body = render(args, &machine, &command, &l1gate, &slice, &measured);
    println!("{body}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, SECTION, &body)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!(
            "replay_cli: wrote the {SECTION} section of {}",
            path.display()
        );
    }
    benches::summary::emit(&summary(&slice, &measured))?;
    Ok(())
}

/// Lists the slice's files under `data`: event-stream files by feed, and the snapshots.
fn slice(data: &Path, blocks: u64) -> anyhow::Result<Slice> {
    let all = benches::data::files(data)?;
    let mut files = Vec::new();
    let mut snapshot_bytes = 0;
    let mut by_feed: Vec<(String, u64)> = Source::EVENT_STREAMS
        .iter()
        .map(|s| (s.feed_id().to_owned(), 0))
        .collect();
    let mut other = 0;
    for path in all {
        let len = std::fs::metadata(&path)?.len();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            snapshot_bytes += len;
            continue;
        }
        match feed_of(&path) {
            Some(i) => by_feed[i].1 += len,
            None => other += len,
        }
        files.push(path);
    }
    if other > 0 {
        by_feed.push(("other".to_owned(), other));
    }
    let bytes = by_feed.iter().map(|(_, b)| b).sum();
    if files.is_empty() {
        bail!("the simulator wrote no node file under {}", data.display());
    }
    Ok(Slice {
        files,
        bytes,
        by_feed,
        snapshot_bytes,
        blocks,
    })
}

/// The index in `Source::EVENT_STREAMS` of the stream whose directory holds `path`.
fn feed_of(path: &Path) -> Option<usize> {
    path.components().find_map(|c| {
        let name = c.as_os_str().to_str()?;
        Source::EVENT_STREAMS
            .iter()
            .position(|s| s.dir_names().contains(&name))
    })
}

/// `l1gate replay --data DATA --view VIEW --coins BTC`, standard output to `/dev/null`.
fn replay(l1gate: &Path, data: &Path, view: &str) -> anyhow::Result<Timed> {
    let started = Instant::now();
    let output = Command::new(l1gate)
        .arg("replay")
        .arg("--data")
        .arg(data)
        .args(["--view", view, "--coins", COIN])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create("/dev/null")?)
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("start {}", l1gate.display()))?;
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if !output.status.success() {
        bail!(
            "l1gate replay --view {view} failed ({}): {stderr}",
            output.status
        );
    }
    Ok(Timed {
        wall_s,
        output: stderr,
    })
}

/// `sh -c 'cat FILES | wc -l'`; its output is the line count.
fn cat_wc(files: &[PathBuf]) -> anyhow::Result<Timed> {
    let started = Instant::now();
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"cat -- "$@" | wc -l"#)
        .arg("sh")
        .args(files)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("start sh")?;
    let wall_s = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!("cat | wc -l failed: {}", output.status);
    }
    Ok(Timed {
        wall_s,
        output: String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    })
}

/// The MB of node records `l1gate replay` says it read: the number before ` MB in ` in its
/// summary line.
fn reported_mb(stderr: &str) -> Option<f64> {
    let before = &stderr[..stderr.find(" MB in ")?];
    before.rsplit(' ').next()?.parse().ok()
}

/// The frames `l1gate replay` says it printed: `N frames,`.
fn reported_frames(stderr: &str) -> Option<u64> {
    let before = &stderr[..stderr.find(" frames,")?];
    before.rsplit(' ').next()?.parse().ok()
}

/// The blocks `l1gate replay` says it folded: `replayed N blocks`.
fn reported_blocks(stderr: &str) -> Option<u64> {
    let rest = &stderr[stderr.find("replayed ")? + "replayed ".len()..];
    rest.split(' ').next()?.parse().ok()
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    l1gate: &Path,
    slice: &Slice,
    measured: &[Measured],
) -> String {
    let mut s = String::from("## `l1gate replay` end to end (`replay_cli`)\n\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed {}, scale {})`, by-block layout, no `replica_cmds`: its starting L4 snapshot ({:.1} MB) and {} blocks after it, {} event-stream files of {:.1} MB ({}). Every file was read once before the runs (page cache warm).",
        args.seed,
        args.scale,
        mb(slice.snapshot_bytes),
        slice.blocks,
        slice.files.len(),
        mb(slice.bytes),
        slice
            .by_feed
            .iter()
            .map(|(feed, b)| format!("`{feed}` {:.1} MB", mb(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        s,
        "- Commands: the `{}` binary of this build, as a user runs it (process start, snapshot load, read, fold, every frame printed as JSON to `/dev/null`); reference: `sh -c 'cat FILES | wc -l'` over the same event-stream files. {} run(s) of each, interleaved; wall clock from spawn to exit, median (range in brackets).",
        l1gate.file_name().map_or_else(
            || l1gate.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        ),
        args.runs
    );
    let _ = writeln!(
        s,
        "- MB/s = the slice's {:.1} MB of event-stream files ÷ wall time (MB = 10^6 bytes), whatever each command reads of them; \"MB read\" is what `l1gate replay` reports it read (bytes of node records).\n",
        mb(slice.bytes)
    );
    let reference = measured.last().map_or(f64::NAN, Measured::median_s);
    let reference_rate = mb(slice.bytes) / reference;
    let _ = writeln!(
        s,
        "| command | wall s | MB/s of node output | × `cat \\| wc -l` | MB read | blocks | output |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---|");
    for m in measured {
        let walls = m.walls();
        let median = m.median_s();
        let rate = mb(slice.bytes) / median;
        let is_reference = std::ptr::eq(m, measured.last().unwrap_or(m));
        let output = m.median_output();
        let _ = writeln!(
            s,
            "| `{}` | {median:.3} [{:.3}–{:.3}] | {rate:.0} | {} | {} | {} | {} |",
            m.command.replace('|', "\\|"),
            walls.first().copied().unwrap_or(f64::NAN),
            walls.last().copied().unwrap_or(f64::NAN),
            if is_reference {
                "1.00".to_owned()
            } else {
                format!("{:.2}", rate / reference_rate)
            },
            if is_reference {
                format!("{:.1}", mb(slice.bytes))
            } else {
                reported_mb(output).map_or_else(|| "?".to_owned(), |v| format!("{v:.1}"))
            },
            if is_reference {
                "–".to_owned()
            } else {
                reported_blocks(output).map_or_else(|| "?".to_owned(), |v| v.to_string())
            },
            if is_reference {
                format!("{output} lines")
            } else {
                reported_frames(output).map_or_else(|| "?".to_owned(), |f| format!("{f} frames"))
            },
        );
    }
    let _ = writeln!(s);
    for (m, view) in measured.iter().zip(VIEWS) {
        let output = m.median_output();
        if let Some(line) = output.lines().next() {
            let _ = writeln!(s, "- `--view {view}` said: `{line}`");
        }
    }
    let fills = slice
        .by_feed
        .iter()
        .find(|(f, _)| f == Source::Fills.feed_id())
        .map_or(0, |(_, b)| *b);
    let trades_read = measured.get(1).and_then(|m| reported_mb(m.median_output()));
    let _ = writeln!(
        s,
        "- Bytes each view reads: `bbo` folds the books (order statuses and raw book diffs: {:.1} MB of files); `trades` needs the fills only ({:.1} MB of files, {:.1}% of the slice){}.",
        mb(slice
            .by_feed
            .iter()
            .filter(|(f, _)| {
                f == Source::OrderStatuses.feed_id() || f == Source::RawBookDiffs.feed_id()
            })
            .map(|(_, b)| *b)
            .sum::<u64>()),
        mb(fills),
        100.0 * fills as f64 / slice.bytes.max(1) as f64,
        trades_read.map_or_else(String::new, |read| {
            if read > 1.5 * mb(fills) + 0.1 {
                format!(
                    "; this build's `--view trades` reported reading {read:.1} MB, so it reads more than the fills"
                )
            } else {
                format!("; this build's `--view trades` reported reading {read:.1} MB")
            }
        })
    );
    let _ = writeln!(s);
    for (m, view) in measured.iter().zip(VIEWS) {
        let rate = mb(slice.bytes) / m.median_s();
        let _ = writeln!(
            s,
            "Target `--view {view}`: ≥ {TARGET_MB_S:.0} MB/s of node output. This run: {rate:.0} MB/s ({:.2}× `cat | wc -l`) — {}.",
            rate / reference_rate,
            if rate >= TARGET_MB_S {
                "met"
            } else {
                "not met"
            }
        );
    }
    s
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Blocks in the slice.
    pub(crate) blocks: u64,
    /// The slice's event-stream files, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) mb: f64,
    /// `cat FILES | wc -l` over the same files.
    pub(crate) reference: SummaryReference,
    /// One row per view, in `VIEWS` order.
    pub(crate) rows: Vec<SummaryRow>,
}

/// The reference of a [`Summary`]: `cat FILES | wc -l`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryReference {
    /// The slice's MB over its median wall time.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) mb_s: f64,
}

/// `l1gate replay --view VIEW` in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryRow {
    /// The view (`bbo`, `trades`).
    pub(crate) view: String,
    /// Median wall time from spawn to exit, s.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) wall_s: f64,
    /// The slice's MB over that time.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) mb_s: f64,
    /// The MB `l1gate replay` said it read, when its summary line said so.
    pub(crate) read_mb: Option<f64>,
}

/// The headline figures for the `report` binary (see `benches::summary`).
fn summary(slice: &Slice, measured: &[Measured]) -> Summary {
    let reference = measured.last().map_or(f64::NAN, Measured::median_s);
    Summary {
        blocks: slice.blocks,
        mb: mb(slice.bytes),
        reference: SummaryReference {
            mb_s: mb(slice.bytes) / reference,
        },
        rows: measured
            .iter()
            .take(VIEWS.len())
            .zip(VIEWS)
            .map(|(m, view)| {
                let wall = m.median_s();
                SummaryRow {
                    view: view.to_owned(),
                    wall_s: wall,
                    mb_s: mb(slice.bytes) / wall,
                    read_mb: reported_mb(m.median_output()),
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_of_l1gate_replay_is_read() {
        let line = "replayed 60 blocks (985148182..=985148241) from snapshot 985148181: 4200 events, 61 frames, 15.8 MB in 0.42 s (37.6 MB/s); 0 unknown ids, 0 decode errors, 0 gaps, 0 coin resets";
        assert_eq!(reported_mb(line), Some(15.8));
        assert_eq!(reported_blocks(line), Some(60));
        assert_eq!(reported_frames(line), Some(61));
        assert_eq!(reported_mb("nothing"), None);
    }

    #[test]
    fn files_are_assigned_to_their_stream() {
        let fills = Path::new("/d/hl/data/node_fills_by_block/hourly/20260101/3");
        let i = feed_of(fills).unwrap();
        assert_eq!(Source::EVENT_STREAMS[i], Source::Fills);
        assert_eq!(feed_of(Path::new("/d/other/x")), None);
    }
}
