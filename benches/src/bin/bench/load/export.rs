//! `export`: `l1gate replay` writing Parquet (and CSV) beside the same replay writing JSON
//! lines, and what reading each back costs DuckDB.
//!
//! `cargo run --release -p benches -- load export [--blocks N] [--scale X] [--seed S]
//! [--runs R] [--hours H] [--l1gate PATH] [--no-day] [--no-write]`
//!
//! 1. **The slice**: the simulator (`SimConfig::mainnet(seed, scale)`, by-block layout, no
//!    `replica_cmds`) writes its starting L4 snapshot and `--blocks` blocks (the slice
//!    `replay_cli` times), read once into the page cache. Then, `--runs` times, interleaved,
//!    each timed from spawn to exit (its peak resident memory sampled from `/proc` meanwhile): `l1gate replay --data DIR --view V … --format F --out
//!    FILE` for `--view trades --coins BTC` and `--view l2book --coins BTC`, F = `jsonl` (the
//!    reference), `parquet`, `csv`: the same command, the same file handling (written unnamed,
//!    synced, named at the end), only the encoding differs. Throughput = the slice's
//!    event-stream bytes ÷ the median wall time; bytes written = the file's size.
//! 2. **A day of trades** (unless `--no-day`): `--hours` (default 24) of simulated
//!    mainnet-scale fills compressed as the archive is (`benches::data::archive_hours`, made
//!    once under `target/bench-data/`); `l1gate replay --view trades` of the twenty busiest
//!    perps over them as JSON lines and as Parquet, `--runs` times interleaved (the `trades`
//!    target is judged here: over the slice that view reads only a few fills); then DuckDB
//!    (pinned, in the venv
//!    `target/python-research`, made if missing) sums the day's trades from each — count,
//!    Σ size, Σ price × size — `--runs` times in one process, the median reported.
//!
//! The `l1gate` binary is built first with the cargo that runs this harness unless `--l1gate`
//! names one. Prints the tables and rewrites the `export` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

/// Section name in `BENCHMARKS.md`.
const SECTION: &str = "export";
/// Parquet's throughput must be at least this share of JSON lines'.
const TARGET_RATIO: f64 = 0.8;
/// The views timed on the slice: (view, its selection).
const VIEWS: [(&str, &[&str]); 2] = [
    ("trades", &["--coins", "BTC"]),
    ("l2book", &["--coins", "BTC"]),
];
const FORMATS: [&str; 3] = ["jsonl", "parquet", "csv"];
/// The day's trades: the simulator's twenty busiest perps.
const DAY_COINS: &str =
    "BTC,ETH,SOL,HYPE,XRP,DOGE,kPEPE,AVAX,LINK,SUI,BNB,ADA,TRX,LTC,BCH,DOT,NEAR,APT,ARB,OP";
/// DuckDB, as the tests pin it, and where its venv is.
const DUCKDB: &str = "duckdb==2.0.1";
const VENV: &str = "python-research";

#[derive(Debug, clap::Args)]
#[command(
    about = "`l1gate replay` to Parquet and CSV beside JSON lines, and DuckDB reading each",
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
    /// Hours of archive fills for the day of trades.
    #[arg(long, default_value_t = 24)]
    hours: u64,
    /// Skip the day of trades.
    #[arg(long)]
    no_day: bool,
    #[command(flatten)]
    server: benches::server::Binary,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// The wall times and output of one command over the runs.
#[derive(Debug, Default)]
struct Measured {
    walls: Vec<f64>,
    bytes: u64,
    rows: String,
    /// The highest peak resident memory over the runs, KiB.
    peak_kib: u64,
}

impl Measured {
    fn add(&mut self, run: Run) {
        self.walls.push(run.wall);
        self.bytes = run.bytes;
        self.rows = run.rows;
        self.peak_kib = self.peak_kib.max(run.peak_kib);
    }
}

impl Measured {
    fn median(&self) -> f64 {
        let mut walls = self.walls.clone();
        walls.sort_by(f64::total_cmp);
        walls.get(walls.len() / 2).copied().unwrap_or(f64::NAN)
    }

    fn range(&self) -> (f64, f64) {
        let min = self.walls.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.walls.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max)
    }
}

/// One replay: wall time, the file's size, what the replay said it wrote, and its peak
/// resident memory (`VmHWM`, KiB, sampled every 10 ms while it ran).
struct Run {
    wall: f64,
    bytes: u64,
    rows: String,
    peak_kib: u64,
}

/// `l1gate replay --data DATA --view VIEW SELECTION --format FORMAT --out OUT`.
fn replay(
    l1gate: &Path,
    data: &Path,
    view: &str,
    selection: &[&str],
    format: &str,
    out: &Path,
) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut child = Command::new(l1gate)
        .arg("replay")
        .arg("--data")
        .arg(data)
        .args(["--view", view])
        .args(selection)
        .args(["--format", format, "--out"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {}", l1gate.display()))?;
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0;
    while child.try_wait()?.is_none() {
        if let Some(hwm) = std::fs::read_to_string(&status_path)
            .ok()
            .and_then(|status| benches::sys::status_field_kib(&status, "VmHWM"))
        {
            peak_kib = peak_kib.max(hwm);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = child.wait_with_output()?;
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        bail!("l1gate replay --view {view} --format {format} failed: {stderr}");
    }
    let bytes = std::fs::metadata(out)?.len();
    let wrote = stderr
        .lines()
        .find(|l| l.starts_with("wrote "))
        .and_then(|l| l.split(": ").nth(1))
        .and_then(|l| l.split(',').next())
        .unwrap_or("")
        .to_owned();
    Ok(Run {
        wall,
        bytes,
        rows: wrote,
        peak_kib,
    })
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.blocks == 0 || args.runs == 0 {
        bail!("--blocks and --runs must be at least 1");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let l1gate = args.server.path()?;
    let work = tempfile::Builder::new()
        .prefix("l1gate-export-")
        .tempdir_in(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))?;
    let data = work.path().join("node");
    eprintln!(
        "export: generating {} blocks at scale {}",
        args.blocks, args.scale
    );
    fixtures::generate(
        &fixtures::SimConfig::mainnet(args.seed, args.scale),
        &data,
        &fixtures::RunOptions {
            blocks: Some(args.blocks),
            no_replica_cmds: true,
            ..fixtures::RunOptions::default()
        },
        &mut |_| {},
    )?;
    let slice_bytes: u64 = benches::data::files(&data)?
        .iter()
        .filter(|p| p.extension().is_none_or(|e| e != "json"))
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    benches::data::warm(&data)?;

    let mut slice: Vec<Vec<Measured>> = VIEWS
        .iter()
        .map(|_| FORMATS.iter().map(|_| Measured::default()).collect())
        .collect();
    for run in 0..args.runs {
        for (v, (view, selection)) in VIEWS.iter().enumerate() {
            for (f, format) in FORMATS.iter().enumerate() {
                let out = work.path().join(format!("{view}.{format}"));
                let done = replay(&l1gate, &data, view, selection, format, &out)?;
                eprintln!(
                    "export: run {}: {view} {format}: {:.3} s, {:.1} MB",
                    run + 1,
                    done.wall,
                    mb(done.bytes)
                );
                slice[v][f].add(done);
                std::fs::remove_file(&out)?;
            }
        }
    }

    let day = if args.no_day {
        None
    } else {
        Some(day_of_trades(args, &l1gate, work.path())?)
    };
    let body = render(args, &machine, &command, slice_bytes, &slice, day.as_ref());
    println!("{body}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, SECTION, &body)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("export: wrote the {SECTION} section of {}", path.display());
    }
    Ok(())
}

/// The day of trades, written both ways and summed by DuckDB from each.
struct Day {
    hours: benches::data::Hours,
    jsonl: Measured,
    parquet: Measured,
    /// DuckDB's median seconds to sum the day from each, and what it found.
    duckdb_jsonl: (f64, String),
    duckdb_parquet: (f64, String),
}

fn day_of_trades(args: &Args, l1gate: &Path, work: &Path) -> anyhow::Result<Day> {
    let hours = benches::data::archive_hours(args.seed, args.scale, args.hours)?;
    let selection = ["--coins", DAY_COINS];
    let mut jsonl = Measured::default();
    let mut parquet = Measured::default();
    for run in 0..args.runs {
        for (format, m) in [("jsonl", &mut jsonl), ("parquet", &mut parquet)] {
            let out = work.join(format!("day.{format}"));
            let done = replay(l1gate, &hours.dir, "trades", &selection, format, &out)?;
            eprintln!(
                "export: run {}: a day of trades to {format}: {:.1} s",
                run + 1,
                done.wall
            );
            m.add(done);
        }
    }
    let python = duckdb_python()?;
    let script = r#"
import json, sys, time
import duckdb
con = duckdb.connect()
queries = {
    "jsonl": "SELECT count(*), sum(CAST(t.sz AS DECIMAL(38,18))), sum(CAST(t.px AS DOUBLE) * CAST(t.sz AS DOUBLE)) FROM (SELECT unnest(trades) AS t FROM read_json(?, format = 'newline_delimited'))",
    "parquet": "SELECT count(*), sum(sz), sum(px::DOUBLE * sz::DOUBLE) FROM read_parquet(?)",
}
out = {}
for name, path in (("jsonl", sys.argv[1]), ("parquet", sys.argv[2])):
    times, said = [], None
    for _ in range(int(sys.argv[3])):
        started = time.perf_counter()
        said = con.execute(queries[name], [path]).fetchall()[0]
        times.append(time.perf_counter() - started)
    times.sort()
    out[name] = [times[len(times) // 2], f"{said[0]} trades, size {said[1]:.6f}, notional {said[2]:.2f}"]
print(json.dumps(out))
"#;
    let output = Command::new(&python)
        .args(["-c", script])
        .arg(work.join("day.jsonl"))
        .arg(work.join("day.parquet"))
        .arg(args.runs.to_string())
        .output()
        .context("run DuckDB")?;
    if !output.status.success() {
        bail!("DuckDB: {}", String::from_utf8_lossy(&output.stderr));
    }
    let said: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let pick = |name: &str| {
        (
            said[name][0].as_f64().unwrap_or(f64::NAN),
            said[name][1].as_str().unwrap_or("").to_owned(),
        )
    };
    Ok(Day {
        hours,
        jsonl,
        parquet,
        duckdb_jsonl: pick("jsonl"),
        duckdb_parquet: pick("parquet"),
    })
}

/// The venv's python with DuckDB, made if missing.
fn duckdb_python() -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(VENV);
    let python = root.join("bin/python");
    if !python.exists() {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&root)
            .status()
            .context("python3 with venv (Debian: python3-venv) runs DuckDB")?;
        if !made.success() {
            bail!("python3 -m venv {} failed", root.display());
        }
    }
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            DUCKDB,
        ])
        .status()
        .context("pip")?;
    if !pip.success() {
        bail!("pip could not install {DUCKDB} from PyPI");
    }
    Ok(python)
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    slice_bytes: u64,
    slice: &[Vec<Measured>],
    day: Option<&Day>,
) -> String {
    let mut s = String::from("## Replay to Parquet and CSV (`export`)\n\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(
        s,
        "- Slice: simulator `SimConfig::mainnet(seed {}, scale {})`, by-block, its starting snapshot and {} blocks after it: {:.1} MB of event-stream files, page cache warm.",
        args.seed,
        args.scale,
        args.blocks,
        mb(slice_bytes)
    );
    let _ = writeln!(
        s,
        "- Commands: `l1gate replay --data DIR --view V --coins BTC --format F --out FILE`, the same file handling for every format (written unnamed, synced, named at the end). {} runs each, interleaved; wall clock from spawn to exit, median [range]. JSON lines is the reference.\n",
        args.runs
    );
    s.push_str("| view | format | wall (s) | MB/s of node output | × JSON lines | MB written | × JSON lines' bytes | peak RSS (MB) | rows |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    let mut verdicts = Vec::new();
    for ((view, _), formats) in VIEWS.iter().zip(slice) {
        let reference = &formats[0];
        for (format, m) in FORMATS.iter().zip(formats) {
            let (low, high) = m.range();
            let rate = mb(slice_bytes) / m.median();
            let ratio = reference.median() / m.median();
            let _ = writeln!(
                s,
                "| `{view}` | {format} | {:.3} [{low:.3}–{high:.3}] | {rate:.0} | {ratio:.2} | {:.2} | {:.3} | {:.0} | {} |",
                m.median(),
                mb(m.bytes),
                m.bytes as f64 / reference.bytes.max(1) as f64,
                m.peak_kib as f64 * 1.024 / 1000.0,
                m.rows
            );
            if *format == "parquet" {
                verdicts.push((view, ratio));
            }
        }
    }
    let _ = writeln!(
        s,
        "\nMB/s of node output counts every event stream of the slice, as `replay_cli` does; `trades` reads only its fills (a few MB), so over the slice its time is mostly the process's start, and its target is judged on the day of trades below.\n"
    );
    if let Some(day) = day {
        verdicts.retain(|(view, _)| **view != "trades");
        verdicts.insert(0, (&"trades", day.jsonl.median() / day.parquet.median()));
    }
    for (view, ratio) in verdicts {
        let _ = writeln!(
            s,
            "Target `--view {view}` to Parquet: ≥ {TARGET_RATIO}× the throughput of JSON lines. This run: {ratio:.2}× — {}.",
            if ratio >= TARGET_RATIO {
                "met"
            } else {
                "not met"
            }
        );
    }
    if let Some(day) = day {
        let _ = writeln!(
            s,
            "\n### A day of trades\n\n- Data: {} h of simulated mainnet-scale fills ({} blocks, {} fills; {:.0} MB of `.lz4` hours, {:.0} MB decompressed), `benches::data::archive_hours`.\n- `l1gate replay --data DAY --view trades --coins {DAY_COINS}`, {} runs per format, interleaved, median; DuckDB {} sums the day from each file (count, Σ size as `DECIMAL(38,18)`, Σ price × size as `DOUBLE`; from JSON lines by unnesting each frame's `trades`), {} times in one process, median.\n",
            day.hours.blocks / benches::data::BLOCKS_PER_HOUR,
            day.hours.blocks,
            day.hours.fills,
            mb(day.hours.compressed),
            mb(day.hours.decompressed),
            args.runs,
            DUCKDB.trim_start_matches("duckdb=="),
            args.runs
        );
        s.push_str("| format | replay wall (s), median [range] | MB written | peak RSS (MB) | rows | DuckDB sum (s) | DuckDB found |\n|---|---:|---:|---:|---|---:|---|\n");
        for (format, m, (seconds, found)) in [
            ("jsonl", &day.jsonl, &day.duckdb_jsonl),
            ("parquet", &day.parquet, &day.duckdb_parquet),
        ] {
            let _ = writeln!(
                s,
                "| {format} | {:.1} [{:.1}–{:.1}] | {:.1} | {:.0} | {} | {seconds:.3} | {found} |",
                m.median(),
                m.range().0,
                m.range().1,
                mb(m.bytes),
                m.peak_kib as f64 * 1.024 / 1000.0,
                m.rows
            );
        }
        let _ = writeln!(
            s,
            "\nDuckDB sums the day {:.1}× faster from Parquet, which is {:.3}× the bytes of JSON lines.",
            day.duckdb_jsonl.0 / day.duckdb_parquet.0,
            day.parquet.bytes as f64 / day.jsonl.bytes.max(1) as f64
        );
    }
    s
}
