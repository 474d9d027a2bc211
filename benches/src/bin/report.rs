//! `report`: the whole benchmark report in one command.
//!
//! `cargo run --release -p benches --bin report -- [--quick] [--no-write]`
//!
//! Builds every harness binary, the `l1gate` server binary and the criterion benches with the
//! cargo that runs it, in one invocation (`$CARGO build -p benches -p server --bins --bench '*'`,
//! same profile and target directory), then runs each scenario as a child process, one after
//! the other, each rewriting its own section of `benches/BENCHMARKS.md`:
//!
//! 1. simulator speed (`sim_throughput`);
//! 2. ingest + fold beside a memchr scan and a `serde_json::Value` parse of the same bytes
//!    (`replay`, at three simulator scales; the scale-1 run writes the section);
//! 3. `l1gate replay --view bbo` / `--view trades` run as a user runs them (the `l1gate`
//!    binary, process start to exit) over the same scale-1 slice, beside `cat FILES | wc -l`
//!    (`replay_cli`);
//! 4. memory and cold start of a separate server process with the full book (`memory`);
//! 5. raw feed replay over gRPC beside `fs::read` (`raw_feed`);
//! 6. append → frame latency per view at mainnet pace and 10×, server with default settings,
//!    beside the raw feed's live tail (`latency`);
//! 7. the engine thread's CPU per block at mainnet pace beside `Engine::apply` and
//!    `Market::apply` on the same blocks, and the idle server's CPU (`engine_cpu`);
//! 8. fan-out to 100 / 1,000 / 10,000 streams, then with 1% stalled ones, and what stalled
//!    streams hold (`fanout`);
//! 9. HTTP candle lookups from a separate load process (`candles_http`);
//! 10. the candle history: importing a simulated day of archive hours beside `lz4 -dc`, the
//!     store's bytes per candle over seven days, the server's memory and lookups over it
//!     (`candle_history`);
//! 11. engine checkpoints: loading the full book from one beside the node's JSON snapshot of
//!     the same book, and what taking one costs the engine thread (`checkpoint`);
//! 12. the criterion benches (`cargo bench -p benches --bench '*'`, release profile) and their
//!     table (`criterion_report`).
//!
//! A harness binary this checkout does not have is reported as not built. Each harness hands
//! its headline figures back through the file named by `L1GATE_BENCH_SUMMARY`
//! (`benches::summary`); from them this binary writes the `report` section at the top of
//! `BENCHMARKS.md` (commit, date, machine, load, the summary table of targets with the
//! same-run references, the commands and their wall times) and draws the SVG plots under
//! `benches/plots/`. A harness that fails has its section replaced by a note saying so, so that
//! no figure from an earlier run is left standing; the run goes on and exits with an error at
//! the end.
//!
//! The sizes are chosen so that the whole run stays within 15 minutes on a 2-core machine;
//! `--quick` shrinks every scenario to seconds (for checking the plumbing; its figures are
//! not meaningful) and `--no-write` leaves `BENCHMARKS.md` and the plots untouched.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::plot::{Axis, Corner, LineChart, Scale, Series};
use benches::summary::FANOUT_BBO;
use serde_json::Value;

/// Section of `BENCHMARKS.md` this binary owns.
const SECTION: &str = "report";
/// Wall-clock budget of a full run (scenarios), seconds.
const BUDGET_S: f64 = 15.0 * 60.0;
/// Mainnet blocks per second (the simulator's profile) and per hour.
const MAINNET_BLOCKS_PER_S: f64 = 14.8;
/// Simulator scales of the ingest runs; the last one writes the `replay` section.
const REPLAY_SCALES: [f64; 3] = [0.25, 0.5, 1.0];

struct Args {
    quick: bool,
    write: bool,
}

fn parse_args(argv: &[String]) -> anyhow::Result<Args> {
    let mut args = Args {
        quick: false,
        write: true,
    };
    for flag in argv {
        match flag.as_str() {
            "--quick" => args.quick = true,
            "--no-write" => args.write = false,
            "-h" | "--help" => {
                println!("report [--quick] [--no-write]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

/// One child run of a harness binary.
struct Step {
    /// Row label in the scenario table.
    label: String,
    /// Harness binary name.
    bin: &'static str,
    /// Its arguments.
    args: Vec<String>,
    /// The section it rewrites (None for a `--no-write` run).
    section: Option<&'static str>,
    /// Key of its summary in [`Run::summaries`].
    key: String,
}

impl Step {
    fn new(label: &str, bin: &'static str, args: &[&str], section: Option<&'static str>) -> Self {
        Self {
            label: label.to_owned(),
            bin,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            section,
            key: bin.to_owned(),
        }
    }

    fn command(&self) -> String {
        let mut s = format!("cargo run --release -p benches --bin {}", self.bin);
        if !self.args.is_empty() {
            s.push_str(" -- ");
            s.push_str(&self.args.join(" "));
        }
        s
    }
}

/// What happened to one step.
struct Outcome {
    label: String,
    command: String,
    section: Option<&'static str>,
    elapsed: Duration,
    /// `Ok` or what went wrong.
    result: Result<(), String>,
}

/// Everything the run collected.
struct Run {
    summaries: BTreeMap<String, Value>,
    outcomes: Vec<Outcome>,
}

impl Run {
    fn summary(&self, key: &str) -> Option<&Value> {
        self.summaries.get(key)
    }

    /// Why `key` has no summary, for the table.
    fn missing(&self, key: &str) -> String {
        let bin = key.split('@').next().unwrap_or(key);
        self.outcomes
            .iter()
            .find(|o| o.label.contains(bin) || o.command.contains(&format!("--bin {bin}")))
            .map_or_else(
                || format!("not measured: no `{bin}` harness in this checkout"),
                |o| match &o.result {
                    Ok(()) => format!("not measured: `{bin}` reported no summary"),
                    Err(e) => format!("not measured: `{bin}` {e}"),
                },
            )
    }
}

fn main() -> anyhow::Result<()> {
    let args = parse_args(&std::env::args().skip(1).collect::<Vec<_>>())?;
    let started = Instant::now();
    let machine = benches::Machine::detect();
    let commit = commit_id();
    let load_start = benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned());
    let work = tempfile::Builder::new()
        .prefix("l1gate-report-")
        .tempdir()?;

    eprintln!("report: building the harnesses and the server");
    // The criterion targets in the same invocation: their dev-dependencies' features unify
    // with the binaries' once, instead of a second build recompiling the shared dependencies.
    let built =
        benches::cargo::build(&["-p", "benches", "-p", "server", "--bins", "--bench", "*"])?;
    let l1gate = built
        .executables
        .get("l1gate")
        .cloned()
        .context("cargo built no l1gate executable")?;
    let mut bench_build = vec!["bench"];
    if benches::cargo::release() {
        bench_build.extend(["--profile", "release"]);
    }
    // Only the criterion targets (`--benches` would add the lib's and bins' test harnesses).
    bench_build.extend(["-p", "benches", "--bench", "*"]);
    let bench_started = Instant::now();
    run_cargo(&[bench_build.as_slice(), &["--no-run"]].concat())?;
    let build_s = built.elapsed.as_secs_f64() + bench_started.elapsed().as_secs_f64();
    let scenarios_started = Instant::now();

    let l1gate_arg = l1gate.to_string_lossy().into_owned();
    let steps = plan(args.quick, &l1gate_arg);
    let mut run = Run {
        summaries: BTreeMap::new(),
        outcomes: Vec::new(),
    };
    for mut step in steps {
        if !args.write && step.section.is_some() {
            step.args.push("--no-write".to_owned());
        }
        let Some(exe) = built.executables.get(step.bin) else {
            eprintln!(
                "report: no `{}` harness in this checkout, skipped",
                step.bin
            );
            run.outcomes.push(Outcome {
                label: step.label.clone(),
                command: step.command(),
                section: None,
                elapsed: Duration::ZERO,
                result: Err("not built: no such harness in this checkout".to_owned()),
            });
            continue;
        };
        let summary_file = work
            .path()
            .join(format!("{}.json", step.key.replace('@', "-")));
        eprintln!("report: {} — {}", step.label, step.command());
        let step_started = Instant::now();
        let result = run_child(
            exe,
            &step.args,
            &summary_file,
            &work.path().join("stdout.log"),
        );
        let elapsed = step_started.elapsed();
        eprintln!(
            "report: {} took {:.0} s{}",
            step.label,
            elapsed.as_secs_f64(),
            result
                .as_ref()
                .err()
                .map_or_else(String::new, |e| format!(" and failed: {e}"))
        );
        if result.is_ok() {
            match read_summary(&summary_file) {
                Ok(Some(v)) => {
                    run.summaries.insert(step.key.clone(), v);
                }
                Ok(None) => {}
                Err(e) => eprintln!("report: {}: {e:#}", step.label),
            }
        }
        run.outcomes.push(Outcome {
            command: step.command(),
            label: step.label,
            section: step.section,
            elapsed,
            result,
        });
    }
    criterion(&args, &bench_build, &built, &mut run, work.path());
    let scenarios_s = scenarios_started.elapsed().as_secs_f64();

    let failed: Vec<&Outcome> = run.outcomes.iter().filter(|o| o.result.is_err()).collect();
    let mut plots = Vec::new();
    if args.write {
        for outcome in &failed {
            if let (Some(section), Err(error)) = (outcome.section, &outcome.result) {
                let note = format!(
                    "## `{section}`\n\nNot measured by the last `report` run (commit {commit}, {}): `{}` {error}.\n",
                    machine.date, outcome.command
                );
                benches::write_section(&benches::benchmarks_md(), section, &note)?;
            }
        }
        remove_old_plots(&plots_dir())?;
        plots = draw_plots(&run, &plots_dir())?;
    }
    let load_end = benches::sys::loadavg().unwrap_or_else(|| "unknown".to_owned());
    let timing = Timing {
        build_s,
        scenarios_s,
        total_s: started.elapsed().as_secs_f64(),
        end: benches::utc_now(),
    };
    let body = render(
        &args,
        &machine,
        &commit,
        (&load_start, &load_end),
        &timing,
        &run,
        &plots,
    );
    println!("{body}");
    if args.write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, SECTION, &body)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("report: wrote {}", path.display());
    }
    eprintln!(
        "report: scenarios {:.0} s, build {:.0} s, total {:.0} s",
        timing.scenarios_s, timing.build_s, timing.total_s
    );
    if !failed.is_empty() {
        bail!(
            "{} step(s) failed: {}",
            failed.len(),
            failed
                .iter()
                .map(|o| o.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// The steps of a run, in order.
fn plan(quick: bool, l1gate: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let sim: &[&str] = if quick {
        &["--blocks", "200"]
    } else {
        &["--blocks", "2000"]
    };
    steps.push(Step::new(
        "Simulator speed",
        "sim_throughput",
        sim,
        Some("sim_throughput"),
    ));
    let replay_blocks = if quick { "60" } else { "3000" };
    for (i, scale) in REPLAY_SCALES.iter().enumerate() {
        let last = i + 1 == REPLAY_SCALES.len();
        let scale = scale.to_string();
        // The fold's rate is the fastest of three passes over the same
        // blocks: on a shared machine one pass can lose a third to others.
        let mut args = vec![
            "--blocks",
            replay_blocks,
            "--scale",
            scale.as_str(),
            "--repeat",
            "3",
        ];
        if !last {
            args.push("--no-write");
        }
        let mut step = Step::new(
            &format!("Ingest + fold, scale {scale}"),
            "replay",
            &args,
            last.then_some("replay"),
        );
        step.key = format!("replay@{scale}");
        steps.push(step);
    }
    // The same slice as the scale-1 ingest run, through the real binary.
    let replay_cli: Vec<&str> = if quick {
        vec!["--blocks", replay_blocks, "--runs", "1"]
    } else {
        vec!["--blocks", replay_blocks, "--scale", "1", "--runs", "3"]
    };
    let replay_cli = [replay_cli.as_slice(), &["--l1gate", l1gate]].concat();
    steps.push(Step::new(
        "Replay CLI end to end",
        "replay_cli",
        &replay_cli,
        Some("replay_cli"),
    ));
    let memory: Vec<&str> = if quick {
        vec![
            "--scales", "0.05,0.1", "--runs", "1", "--blocks", "20", "--settle", "0.2",
        ]
    } else {
        vec!["--scales", "0.25,0.5,1", "--runs", "2"]
    };
    let memory = [memory.as_slice(), &["--l1gate", l1gate]].concat();
    steps.push(Step::new(
        "Memory and cold start",
        "memory",
        &memory,
        Some("memory"),
    ));
    let raw: &[&str] = if quick {
        &["--blocks", "60", "--repeat", "1"]
    } else {
        &["--blocks", "1500"]
    };
    steps.push(Step::new("Raw feed", "raw_feed", raw, Some("raw_feed")));
    // Default server settings only (no `--polls`): the event-driven path is the headline and
    // the raw feed's live tail, in the same run, the reference.
    let latency: &[&str] = if quick {
        &["--seconds", "1", "--rates", "1,10"]
    } else {
        &["--seconds", "15", "--rates", "1,10"]
    };
    steps.push(Step::new(
        "End to end latency",
        "latency",
        latency,
        Some("latency"),
    ));
    let engine_cpu: &[&str] = if quick {
        &[
            "--seconds",
            "2",
            "--idle-seconds",
            "2",
            "--settle",
            "1",
            "--passes",
            "1",
        ]
    } else {
        &["--seconds", "20", "--idle-seconds", "10", "--passes", "5"]
    };
    steps.push(Step::new(
        "Engine thread CPU",
        "engine_cpu",
        engine_cpu,
        Some("engine_cpu"),
    ));
    let fanout: &[&str] = if quick {
        &["--streams", "10,100", "--seconds", "1", "--stalled", "20"]
    } else {
        &["--streams", "100,1000,10000", "--seconds", "10"]
    };
    steps.push(Step::new("Fan-out", "fanout", fanout, Some("fanout")));
    let candles: &[&str] = if quick {
        &["--blocks", "400", "--seconds", "2", "--warmup", "1"]
    } else {
        &["--blocks", "6000", "--seconds", "10", "--warmup", "2"]
    };
    steps.push(Step::new(
        "HTTP candle lookups",
        "candles_http",
        candles,
        Some("candles_http"),
    ));
    let history: &[&str] = if quick {
        &["--hours", "1", "--days", "2", "--seconds", "2"]
    } else {
        &["--hours", "24", "--days", "7", "--seconds", "10"]
    };
    steps.push(Step::new(
        "Candle history",
        "candle_history",
        history,
        Some("candle_history"),
    ));
    let checkpoint: &[&str] = if quick {
        &["--scale", "0.05", "--blocks", "20", "--runs", "1"]
    } else {
        &["--runs", "5"]
    };
    steps.push(Step::new(
        "Engine checkpoints",
        "checkpoint",
        checkpoint,
        Some("checkpoint"),
    ));
    steps
}

/// Runs `exe ARGS` with the summary file set; its stdout (the section it printed) goes to
/// `stdout_log`, its stderr (progress) to ours.
fn run_child(exe: &Path, args: &[String], summary: &Path, stdout_log: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(summary);
    let log = std::fs::File::create(stdout_log).map_err(|e| format!("log file: {e}"))?;
    let status = Command::new(exe)
        .args(args)
        .env(benches::summary::ENV, summary)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("failed ({status})"))
    }
}

fn read_summary(path: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Runs cargo with `args` from this crate's directory, output to our stderr.
fn run_cargo(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(benches::cargo::cargo())
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("start cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed: {status}", args.join(" "));
    }
    Ok(())
}

/// The criterion step: every bench target, then `criterion_report` to tabulate them.
fn criterion(
    args: &Args,
    bench: &[&str],
    built: &benches::cargo::Built,
    run: &mut Run,
    work: &Path,
) {
    let mut bench: Vec<&str> = bench.to_vec();
    if args.quick {
        bench.extend(["--", "--quick"]);
    }
    // As typed in a shell: the target pattern quoted.
    let shown: Vec<&str> = bench
        .iter()
        .map(|a| if *a == "*" { "'*'" } else { a })
        .collect();
    let command = format!("cargo {}", shown.join(" "));
    eprintln!("report: criterion benches — {command}");
    let started = Instant::now();
    let mut result = run_cargo(&bench).map_err(|e| format!("{e:#}"));
    if result.is_ok() {
        let mut report_args = Vec::new();
        if !args.write {
            report_args.push("--no-write".to_owned());
        }
        result = match built.executables.get("criterion_report") {
            Some(exe) => run_child(
                exe,
                &report_args,
                &work.join("criterion.json"),
                &work.join("stdout.log"),
            ),
            None => Err("not built: no criterion_report in this checkout".to_owned()),
        };
    }
    run.outcomes.push(Outcome {
        label: "Criterion benches".to_owned(),
        command: format!("{command} && cargo run --release -p benches --bin criterion_report"),
        section: Some("criterion"),
        elapsed: started.elapsed(),
        result,
    });
}

/// `git rev-parse --short HEAD`, with `-dirty` when tracked files other than the report's own
/// outputs (`BENCHMARKS.md`, `benches/plots/`) differ from it.
fn commit_id() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown (not a git checkout)".to_owned();
    };
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.get(3..))
        .any(|p| !p.ends_with("BENCHMARKS.md") && !p.starts_with("benches/plots/"));
    format!("{}{}", head.trim(), if dirty { "-dirty" } else { "" })
}

/// Removes the SVG files of an earlier run, so that a plot this run could not draw does not
/// stay behind.
fn remove_old_plots(dir: &Path) -> anyhow::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("list {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "svg") {
            std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
        }
    }
    Ok(())
}

fn plots_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("plots")
}

struct Timing {
    build_s: f64,
    scenarios_s: f64,
    total_s: f64,
    end: String,
}

// ---- reading the summaries ----

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64()
}

fn rows<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn curve(v: &Value) -> Vec<(f64, f64)> {
    v.get("curve")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
        .collect()
}

/// The replay row `name` of a replay summary.
fn replay_row<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    rows(v, "rows").find(|r| text(r, "name") == name)
}

/// A ratio as `1.23×`, with two significant digits below 0.1.
fn times(x: f64) -> String {
    if x.is_finite() && x > 0.0 && x < 0.1 {
        let digits = (-x.log10()).ceil() as usize + 1;
        format!("{x:.digits$}×")
    } else {
        format!("{x:.2}×")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

fn secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{} min {:02.0} s", (s / 60.0).floor(), s % 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// One line of the summary table.
struct Target {
    what: String,
    goal: String,
    measured: String,
    reference: String,
    ratio: String,
    verdict: String,
}

impl Target {
    fn missing(what: &str, goal: &str, why: String) -> Self {
        Self {
            what: what.to_owned(),
            goal: goal.to_owned(),
            measured: why,
            reference: "–".to_owned(),
            ratio: "–".to_owned(),
            verdict: "not measured".to_owned(),
        }
    }
}

fn ingest_target(run: &Run) -> Target {
    let (what, goal) = ("Ingest + fold, per core", "≥ 1,000 MB/s");
    let key = format!("replay@{}", REPLAY_SCALES[REPLAY_SCALES.len() - 1]);
    let Some(v) = run.summary(&key) else {
        return Target::missing(what, goal, run.missing(&key));
    };
    let (Some(fold), Some(scan), Some(value)) = (
        replay_row(v, "fold"),
        replay_row(v, "memchr scan"),
        replay_row(v, "serde_json::Value"),
    ) else {
        return Target::missing(what, goal, "not measured: replay rows missing".to_owned());
    };
    let rate = |r: &Value| num(r, "mb_s").unwrap_or(f64::NAN);
    let blocks = num(v, "blocks").unwrap_or(0.0);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{:.0} MB/s, {:.2} M events/s (fold of {:.0} MB: {blocks:.0} blocks at scale {})",
            rate(fold),
            num(fold, "events_s").unwrap_or(0.0) / 1e6,
            num(fold, "mb").unwrap_or(0.0),
            num(v, "scale").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "memchr scan {:.0} MB/s; `serde_json::Value` parse {:.0} MB/s",
            rate(scan),
            rate(value)
        ),
        ratio: format!(
            "{} `Value`; {:.1}% of scan",
            times(rate(fold) / rate(value)),
            100.0 * rate(fold) / rate(scan)
        ),
        verdict: verdict(rate(fold) >= 1_000.0).to_owned(),
    }
}

/// Whether a latency row is of the server with default settings (no `poll_interval_ms`).
fn default_config(r: &Value) -> bool {
    r.get("poll_ms").is_none_or(Value::is_null)
}

/// The worst `key` (`p50_ms`, `p99_ms`) over the market views of the default server at `rate`,
/// with the view it belongs to.
fn latency_worst(v: &Value, rate: f64, key: &str) -> Option<(f64, String)> {
    rows(v, "rows")
        .filter(|r| {
            default_config(r)
                && !r.get("reference").and_then(Value::as_bool).unwrap_or(false)
                && num(r, "frames").unwrap_or(0.0) > 0.0
                && num(r, "rate").is_some_and(|x| (x - rate).abs() < 1e-9)
        })
        .filter_map(|r| Some((num(r, key)?, text(r, "stream").to_owned())))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// `key` of the raw feed reference of the default server at `rate`.
fn latency_reference(v: &Value, rate: f64, key: &str) -> Option<f64> {
    rows(v, "rows")
        .find(|r| {
            default_config(r)
                && r.get("reference").and_then(Value::as_bool).unwrap_or(false)
                && num(r, "frames").unwrap_or(0.0) > 0.0
                && num(r, "rate").is_some_and(|x| (x - rate).abs() < 1e-9)
        })
        .and_then(|r| num(r, key))
}

/// The latency targets: (label, goal, rate, summary key, target in ms).
const LATENCY_GOALS: [(&str, &str, f64, &str, f64); 3] = [
    (
        "Append → frame p50 at 1× (worst market view)",
        "≤ 500 µs",
        1.0,
        "p50_ms",
        0.5,
    ),
    (
        "Append → frame p99 at 1× (worst market view)",
        "≤ 2 ms",
        1.0,
        "p99_ms",
        2.0,
    ),
    (
        "Append → frame p99 at 10× (worst market view)",
        "≤ 10 ms",
        10.0,
        "p99_ms",
        10.0,
    ),
];

fn latency_targets(run: &Run) -> Vec<Target> {
    LATENCY_GOALS
        .iter()
        .map(|&(what, goal, rate, key, target_ms)| {
            let Some(v) = run.summary("latency") else {
                return Target::missing(what, goal, run.missing("latency"));
            };
            let Some((value, stream)) = latency_worst(v, rate, key) else {
                return Target::missing(
                    what,
                    goal,
                    format!("not measured: no frames at {rate}× with default settings"),
                );
            };
            let quantile = key.trim_end_matches("_ms");
            let (mut reference, ratio) = latency_reference(v, rate, key).map_or_else(
                || ("–".to_owned(), "–".to_owned()),
                |r| {
                    (
                        format!(
                            "{r:.3} ms: raw feed `StreamFills` live tail, unfiltered ({quantile}, no fold)"
                        ),
                        times(value / r),
                    )
                },
            );
            for (field, name, what) in [
                (
                    "machine_floor",
                    "machine floor",
                    "append → inotify → read → loopback TCP, no l1gate code, at the 1× interval",
                ),
                (
                    "grpc_floor",
                    "gRPC floor",
                    "the same through a tonic stream between two tokio runtimes, no l1gate code",
                ),
            ] {
                if let Some(floor) = v.get(field).and_then(|f| num(f, key)) {
                    let _ = write!(reference, "; {name} {floor:.3} ms ({what})");
                }
            }
            Target {
                what: what.to_owned(),
                goal: goal.to_owned(),
                measured: format!(
                    "{value:.3} ms, server with default settings (worst: {stream})"
                ),
                reference,
                ratio,
                verdict: verdict(value <= target_ms).to_owned(),
            }
        })
        .collect()
}

fn replay_cli_targets(run: &Run) -> Vec<Target> {
    ["bbo", "trades"]
        .iter()
        .map(|view| {
            let what = format!("`l1gate replay --view {view} --coins BTC`, end to end");
            let goal = "≥ 1,000 MB/s";
            let Some(v) = run.summary("replay_cli") else {
                return Target::missing(&what, goal, run.missing("replay_cli"));
            };
            let Some(row) = rows(v, "rows").find(|r| text(r, "view") == *view) else {
                return Target::missing(&what, goal, format!("not measured: no `{view}` row"));
            };
            let rate = num(row, "mb_s").unwrap_or(f64::NAN);
            let reference = v
                .get("reference")
                .and_then(|r| num(r, "mb_s"))
                .unwrap_or(f64::NAN);
            Target {
                what,
                goal: goal.to_owned(),
                measured: format!(
                    "{rate:.0} MB/s of node output ({:.0} MB, {:.0} blocks, {:.2} s from spawn to exit; it read {})",
                    num(v, "mb").unwrap_or(0.0),
                    num(v, "blocks").unwrap_or(0.0),
                    num(row, "wall_s").unwrap_or(f64::NAN),
                    num(row, "read_mb").map_or_else(|| "? MB".to_owned(), |m| format!("{m:.0} MB")),
                ),
                reference: format!("`cat FILES \\| wc -l` of the same files: {reference:.0} MB/s"),
                ratio: times(rate / reference),
                verdict: verdict(rate >= 1_000.0).to_owned(),
            }
        })
        .collect()
}

fn engine_cpu_targets(run: &Run) -> [Target; 2] {
    let (what_live, goal_live) = (
        "Engine thread CPU per block, live at 1×",
        "≤ 1.3× `Engine::apply` folding at the same pace",
    );
    let (what_idle, goal_idle) = ("Idle server CPU", "< 1% of one core");
    let Some(v) = run.summary("engine_cpu") else {
        return [
            Target::missing(what_live, goal_live, run.missing("engine_cpu")),
            Target::missing(what_idle, goal_idle, run.missing("engine_cpu")),
        ];
    };
    let ratio = num(v, "ratio").unwrap_or(f64::NAN);
    let idle = num(v, "idle_pct").unwrap_or(f64::NAN);
    [
        Target {
            what: what_live.to_owned(),
            goal: goal_live.to_owned(),
            measured: format!(
                "{:.0} µs per block ({:.0} blocks, no stream open); `Market::apply` with `Needs::ALL` alone: {:.0} µs",
                num(v, "live_us_per_block").unwrap_or(f64::NAN),
                num(v, "blocks").unwrap_or(0.0),
                num(v, "market_us_per_block").unwrap_or(f64::NAN),
            ),
            reference: format!(
                "`Engine::apply` on the same blocks{}; back to back with warm caches {:.0} µs (live {})",
                num(v, "engine_paced_us_per_block").map_or_else(String::new, |paced| format!(
                    " paced at 1× like the live thread (caches as cold as its): {paced:.0} µs per block"
                )),
                num(v, "engine_us_per_block").unwrap_or(f64::NAN),
                times(num(v, "ratio_back_to_back").unwrap_or(f64::NAN)),
            ),
            ratio: times(ratio),
            verdict: verdict(ratio <= 1.3).to_owned(),
        },
        Target {
            what: what_idle.to_owned(),
            goal: goal_idle.to_owned(),
            measured: format!(
                "{idle:.2}% of one core (whole process, {:.0} s with no append)",
                num(v, "idle_seconds").unwrap_or(f64::NAN)
            ),
            reference: format!(
                "engine thread at 1×: {:.2}% of one core",
                num(v, "engine_core_pct").unwrap_or(f64::NAN)
            ),
            ratio: "–".to_owned(),
            verdict: verdict(idle < 1.0).to_owned(),
        },
    ]
}

fn fanout_targets(run: &Run) -> [Target; 2] {
    let (what, goal) = (
        "Fan-out: 10,000 `StreamBbo` streams",
        "all held, every frame, p99 ≤ 100 ms (goal 10 ms)",
    );
    let (slow_what, slow_goal) = (
        "Fan-out with 1% stalled readers",
        "stalled ones ended; others' p99 unchanged",
    );
    let Some(v) = run.summary("fanout") else {
        return [
            Target::missing(what, goal, run.missing("fanout")),
            Target::missing(slow_what, slow_goal, run.missing("fanout")),
        ];
    };
    let by_streams = |a: &&&Value, b: &&&Value| {
        num(a, "streams")
            .unwrap_or(0.0)
            .total_cmp(&num(b, "streams").unwrap_or(0.0))
    };
    // The section also compares edges (WebSocket, gRPC L2 book) at the same stream counts;
    // the targets are about `StreamBbo` streams.
    let bbo = || rows(v, "runs").filter(|r| text(r, "label") == FANOUT_BBO);
    let fast: Vec<&Value> = bbo().filter(|r| num(r, "slow") == Some(0.0)).collect();
    let slow_row = bbo().find(|r| num(r, "slow").unwrap_or(0.0) > 0.0);
    let (Some(big), Some(small)) = (
        fast.iter().max_by(by_streams),
        fast.iter().min_by(by_streams),
    ) else {
        let none = || "not measured: no fan-out rows".to_owned();
        return [
            Target::missing(what, goal, none()),
            Target::missing(slow_what, slow_goal, none()),
        ];
    };
    let p99 = num(big, "p99_ms").unwrap_or(f64::NAN);
    let streams = num(big, "streams").unwrap_or(0.0);
    let failures = num(big, "failures").unwrap_or(0.0);
    let wrong = num(big, "missing").unwrap_or(f64::NAN) + num(big, "extra").unwrap_or(f64::NAN);
    let small_p99 = num(small, "p99_ms").unwrap_or(f64::NAN);
    let held = Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{streams:.0} streams: p99 {p99:.3} ms, {:.0} frames/s of {:.0} required, {wrong:.0} missing or extra, {failures:.0} failed, {:.1} frames per write, {:.1} KiB server RSS per stream",
            num(big, "frames_per_s").unwrap_or(0.0),
            num(big, "required_per_s").unwrap_or(0.0),
            num(big, "frames_per_write").unwrap_or(f64::NAN),
            num(big, "rss_kib_per_stream").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "{:.0} streams: p99 {small_p99:.3} ms",
            num(small, "streams").unwrap_or(0.0)
        ),
        ratio: format!("{} p99", times(p99 / small_p99)),
        verdict: verdict(streams >= 10_000.0 && failures == 0.0 && wrong == 0.0 && p99 <= 100.0)
            .to_owned(),
    };
    let slow = match (slow_row, v.get("slow")) {
        (Some(row), Some(outcome)) => {
            let with = num(row, "p99_ms").unwrap_or(f64::NAN);
            let count = num(outcome, "streams").unwrap_or(0.0);
            let deadline = num(outcome, "deadline_exceeded").unwrap_or(0.0);
            let ended = num(outcome, "ended_after_s");
            Target {
                what: slow_what.to_owned(),
                goal: slow_goal.to_owned(),
                measured: format!(
                    "{count:.0} stalled: {deadline:.0} ended `DEADLINE_EXCEEDED`, all within {}; others' p99 {with:.3} ms; {:.1} KiB RSS per stalled full-depth L2 stream",
                    ended.map_or_else(|| "— (not all ended)".to_owned(), |s| format!("{s:.1} s")),
                    num(v, "stalled_kib_per_stream").unwrap_or(f64::NAN),
                ),
                reference: format!("without them: p99 {p99:.3} ms"),
                ratio: format!("{} p99", times(with / p99)),
                // "Unchanged within noise": this machine's runs swing 15–25%.
                verdict: verdict(ended.is_some() && deadline >= count && with <= p99 * 1.25)
                    .to_owned(),
            }
        }
        _ => Target::missing(slow_what, slow_goal, "not measured: no slow run".to_owned()),
    };
    [held, slow]
}

fn memory_targets(run: &Run) -> [Target; 2] {
    let what_rss = "RSS with the full book";
    let what_cold = "Cold start to serving live";
    let Some(v) = run.summary("memory") else {
        return [
            Target::missing(what_rss, "≤ 200 MB", run.missing("memory")),
            Target::missing(what_cold, "≤ 2 s", run.missing("memory")),
        ];
    };
    let full_scale = num(v, "full_scale");
    let Some(full) = rows(v, "scales").find(|r| num(r, "scale") == full_scale) else {
        return [
            Target::missing(
                what_rss,
                "≤ 200 MB",
                "not measured: no memory rows".to_owned(),
            ),
            Target::missing(
                what_cold,
                "≤ 2 s",
                "not measured: no memory rows".to_owned(),
            ),
        ];
    };
    let book = format!(
        "{:.0} orders, {:.0} coins",
        num(full, "orders").unwrap_or(0.0),
        num(full, "coins").unwrap_or(0.0)
    );
    let rss = num(full, "rss_settled_mb").unwrap_or(f64::NAN);
    let engine_rss = num(full, "engine_rss_mb").unwrap_or(f64::NAN);
    let cold = num(full, "cold_start_s").unwrap_or(f64::NAN);
    let load = num(full, "engine_load_s").unwrap_or(f64::NAN);
    [
        Target {
            what: what_rss.to_owned(),
            goal: "≤ 200 MB".to_owned(),
            measured: format!(
                "{rss:.0} MB `VmRSS` settled, peak {:.0} MB (server process; {book})",
                num(full, "peak_mb").unwrap_or(f64::NAN)
            ),
            reference: format!("`Engine::from_snapshot` in a bare process: {engine_rss:.0} MB"),
            ratio: times(rss / engine_rss),
            verdict: verdict(rss <= 200.0).to_owned(),
        },
        Target {
            what: what_cold.to_owned(),
            goal: "≤ 2 s".to_owned(),
            measured: format!(
                "{cold:.2} s spawn → first `StreamBbo` frame ({book}, snapshot {:.0} MB)",
                num(full, "snapshot_mb").unwrap_or(f64::NAN)
            ),
            reference: format!("read + parse + `Engine::from_snapshot`: {load:.2} s"),
            ratio: times(cold / load),
            verdict: verdict(cold <= 2.0).to_owned(),
        },
    ]
}

fn raw_feed_target(run: &Run) -> Target {
    let (what, goal) = ("Raw feed replay, unfiltered", "≥ 1,000 MB/s");
    let Some(v) = run.summary("raw_feed") else {
        return Target::missing(what, goal, run.missing("raw_feed"));
    };
    let find = |feed: &str, layer: &str| {
        rows(v, "rows").find(|r| {
            text(r, "feed") == feed && text(r, "layer") == layer && text(r, "filter") == "none"
        })
    };
    let feed = "order_statuses";
    let (Some(grpc), Some(fs)) = (find(feed, "gRPC"), find(feed, "fs::read")) else {
        return Target::missing(what, goal, "not measured: raw feed rows missing".to_owned());
    };
    let g = num(grpc, "source_mb_s").unwrap_or(f64::NAN);
    let f = num(fs, "source_mb_s").unwrap_or(f64::NAN);
    let diffs = find("raw_book_diffs", "gRPC").and_then(|r| num(r, "source_mb_s"));
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{g:.0} MB/s over gRPC (`{feed}`, {:.0} MB){}",
            num(grpc, "source_mb").unwrap_or(0.0),
            diffs.map_or_else(String::new, |d| format!("; `raw_book_diffs` {d:.0} MB/s"))
        ),
        reference: format!("`fs::read` of the same files: {f:.0} MB/s"),
        ratio: times(g / f),
        verdict: verdict(g >= 1_000.0).to_owned(),
    }
}

fn checkpoint_target(run: &Run) -> Target {
    let (what, goal) = ("Load the full book from an engine checkpoint", "≤ 200 ms");
    let Some(v) = run.summary("checkpoint") else {
        return Target::missing(what, goal, run.missing("checkpoint"));
    };
    let load = num(v, "checkpoint_load_ms").unwrap_or(f64::NAN);
    let json = num(v, "json_load_ms").unwrap_or(f64::NAN);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{load:.0} ms ({:.0} orders, {:.0} coins, {:.0} MB file); taking one cost the engine thread {:.0} ms",
            num(v, "orders").unwrap_or(f64::NAN),
            num(v, "coins").unwrap_or(f64::NAN),
            num(v, "checkpoint_mb").unwrap_or(f64::NAN),
            num(v, "take_ms").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "the node's JSON snapshot of the same book ({:.0} MB): read + parse + `Market::from_snapshot` {json:.0} ms",
            num(v, "json_mb").unwrap_or(f64::NAN)
        ),
        ratio: times(load / json),
        verdict: verdict(load <= 200.0).to_owned(),
    }
}

fn candle_history_targets(run: &Run) -> Vec<Target> {
    let what = [
        "Candle import, per core",
        "Candle store size",
        "Memory, long candle history",
        "Candle lookups, long history",
        "Info `candleSnapshot`, 5,000 `1m`",
    ];
    let goal = [
        "≥ 1,000 MB/s",
        "≤ 16 bytes per candle",
        "RSS within 20 MB of a 1-day store",
        "≥ 50,000 req/s, p99 ≤ 2 ms",
        "≤ 10 ms",
    ];
    let Some(v) = run.summary("candle_history") else {
        return (0..what.len())
            .map(|i| Target::missing(what[i], goal[i], run.missing("candle_history")))
            .collect();
    };
    let n = |k: &str| num(v, k).unwrap_or(f64::NAN);
    vec![
        Target {
            what: what[0].to_owned(),
            goal: goal[0].to_owned(),
            measured: format!(
                "{:.0} MB/s of decompressed fills ({:.0} MB over {:.0} h of simulated mainnet fills, LZ4)",
                n("import_mb_per_cpu_s"),
                n("decompressed_mb"),
                n("hours")
            ),
            reference: format!("`lz4 -dc` alone: {:.0} MB/s", n("lz4_mb_per_cpu_s")),
            ratio: times(n("import_mb_per_cpu_s") / n("lz4_mb_per_cpu_s")),
            verdict: verdict(n("import_mb_per_cpu_s") >= 1_000.0).to_owned(),
        },
        Target {
            what: what[1].to_owned(),
            goal: goal[1].to_owned(),
            measured: format!(
                "{:.2} bytes per candle over {:.0} days ({:.0} candles); {:.1} GB extrapolated since 2025-07-27",
                n("bytes_per_candle"),
                n("days"),
                n("candles"),
                n("extrapolated_gb")
            ),
            reference: "the first store: 128 bytes on disk + 16 in memory".to_owned(),
            ratio: times(n("bytes_per_candle") / 144.0),
            verdict: verdict(n("bytes_per_candle") <= 16.0).to_owned(),
        },
        Target {
            what: what[2].to_owned(),
            goal: goal[2].to_owned(),
            measured: format!(
                "{:.1} MiB RSS over {:.0} days",
                n("long_rss_mib"),
                n("days")
            ),
            reference: format!("over the 1-day store: {:.1} MiB", n("day_rss_mib")),
            ratio: format!("{:+.1} MiB", n("long_rss_mib") - n("day_rss_mib")),
            verdict: verdict((n("long_rss_mib") - n("day_rss_mib")).abs() <= 20.0).to_owned(),
        },
        Target {
            what: what[3].to_owned(),
            goal: goal[3].to_owned(),
            measured: format!(
                "{:.0} req/s, p99 {:.2} ms (random buckets over {:.0} days)",
                n("long_rps"),
                n("long_p99_ms"),
                n("days")
            ),
            reference: format!("the 1-day store: {:.0} req/s", n("day_rps")),
            ratio: times(n("long_rps") / n("day_rps")),
            verdict: verdict(n("long_rps") >= 50_000.0 && n("long_p99_ms") <= 2.0).to_owned(),
        },
        Target {
            what: what[4].to_owned(),
            goal: goal[4].to_owned(),
            measured: format!(
                "p50 {:.2} ms, p90 {:.2} ms",
                n("snapshot_p50_ms"),
                n("snapshot_p90_ms")
            ),
            reference: "–".to_owned(),
            ratio: "–".to_owned(),
            verdict: verdict(n("snapshot_p50_ms") <= 10.0).to_owned(),
        },
    ]
}

fn candles_target(run: &Run) -> Target {
    let (what, goal) = ("HTTP candle lookups", "≥ 50,000 req/s");
    let Some(v) = run.summary("candles_http") else {
        return Target::missing(what, goal, run.missing("candles_http"));
    };
    let rps = num(v, "rps").unwrap_or(f64::NAN);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{rps:.0} req/s, p99 {:.3} ms ({:.0} connections from a separate process)",
            num(v, "p99_ms").unwrap_or(f64::NAN),
            num(v, "connections").unwrap_or(f64::NAN)
        ),
        reference: num(v, "reference_rps").map_or_else(
            || "–".to_owned(),
            |r| format!("{r:.0} lookups/s: {}", text(v, "reference")),
        ),
        ratio: num(v, "reference_rps").map_or_else(|| "–".to_owned(), |r| times(rps / r)),
        verdict: verdict(rps >= 50_000.0).to_owned(),
    }
}

// ---- plots ----

/// Draws every plot whose data this run has; returns `(file name, caption)` of each.
fn draw_plots(run: &Run, dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut drawn = Vec::new();
    let mut draw = |name: &str, caption: &str, chart: &LineChart| -> anyhow::Result<()> {
        if chart.series.iter().all(|s| s.points.is_empty()) {
            return Ok(());
        }
        benches::plot::write_svg(chart, &dir.join(name))?;
        drawn.push((name.to_owned(), caption.to_owned()));
        Ok(())
    };

    if let Some(v) = run.summary("latency") {
        // The server with default settings: every view and rate, and the raw feed reference.
        let series: Vec<Series> = rows(v, "rows")
            .filter(|r| num(r, "frames").unwrap_or(0.0) > 0.0 && default_config(r))
            .map(|r| {
                let stream = if r.get("reference").and_then(Value::as_bool) == Some(true) {
                    "raw feed StreamFills (reference)"
                } else {
                    text(r, "stream")
                };
                Series::new(
                    format!("{stream} · {}×", num(r, "rate").unwrap_or(0.0)),
                    curve(r),
                )
            })
            .collect();
        draw(
            "latency.svg",
            "Append → frame latency distribution per view, server with default settings (`latency`)",
            &LineChart {
                title: "Append → frame received, per view".to_owned(),
                x: Axis::new("quantile", Scale::Nines),
                y: Axis::new("latency, ms", Scale::Log10),
                series,
                references: vec![
                    ("target p50 at 1× 0.5 ms".to_owned(), 0.5),
                    ("target p99 at 1× 2 ms".to_owned(), 2.0),
                    ("target p99 at 10× 10 ms".to_owned(), 10.0),
                ],
                legend: Corner::LowerRight,
            },
        )?;
    }

    let replays: Vec<&Value> = REPLAY_SCALES
        .iter()
        .filter_map(|s| run.summary(&format!("replay@{s}")))
        .collect();
    if !replays.is_empty() {
        let line = |name: &str| {
            Series::new(
                name,
                replays
                    .iter()
                    .filter_map(|v| Some((num(v, "scale")?, num(replay_row(v, name)?, "mb_s")?)))
                    .collect(),
            )
        };
        draw(
            "ingest_scale.svg",
            "Ingest throughput per core vs simulator scale (`replay`)",
            &LineChart {
                title: "Ingest per core vs simulator scale (same bytes per scale)".to_owned(),
                x: Axis::new("simulator scale (1 = mainnet)", Scale::Linear),
                y: Axis::new("MB/s per core", Scale::Log10),
                series: vec![
                    line("fold"),
                    line("replay bbo"),
                    line("replay l4updates"),
                    line("serde_json::Value"),
                    line("memchr scan"),
                ],
                references: vec![("target 1,000 MB/s".to_owned(), 1_000.0)],
                legend: Corner::LowerRight,
            },
        )?;
    }

    if let Some(v) = run.summary("memory") {
        let by_orders = |key: &str| -> Vec<(f64, f64)> {
            rows(v, "scales")
                .filter_map(|r| Some((num(r, "orders")? / 1e3, num(r, key)?)))
                .collect()
        };
        draw(
            "memory_scale.svg",
            "Server RSS vs resting orders (`memory`)",
            &LineChart {
                title: "Server memory vs book size".to_owned(),
                x: Axis::new("resting orders, thousands", Scale::Linear),
                y: Axis::new("MB", Scale::Linear),
                series: vec![
                    Series::new("server VmRSS settled", by_orders("rss_settled_mb")),
                    Series::new("server VmHWM (peak)", by_orders("peak_mb")),
                    Series::new(
                        "Engine::from_snapshot alone (VmRSS)",
                        by_orders("engine_rss_mb"),
                    ),
                ],
                references: vec![("target 200 MB".to_owned(), 200.0)],
                legend: Corner::UpperLeft,
            },
        )?;
        draw(
            "cold_start_scale.svg",
            "Cold start vs resting orders (`memory`)",
            &LineChart {
                title: "Cold start vs book size".to_owned(),
                x: Axis::new("resting orders, thousands", Scale::Linear),
                y: Axis::new("seconds", Scale::Linear),
                series: vec![
                    Series::new("spawn → first StreamBbo frame", by_orders("cold_start_s")),
                    Series::new(
                        "read + parse + Engine::from_snapshot",
                        by_orders("engine_load_s"),
                    ),
                ],
                references: vec![("target 2 s".to_owned(), 2.0)],
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = run.summary("fanout") {
        let fast: Vec<&Value> = rows(v, "runs")
            .filter(|r| num(r, "slow") == Some(0.0))
            .collect();
        let line = |name: &str, key: &str| {
            Series::new(
                name,
                fast.iter()
                    .filter_map(|r| Some((num(r, "streams")?, num(r, key)?)))
                    .collect(),
            )
        };
        draw(
            "fanout_latency.svg",
            "Fan-out latency vs concurrent streams (`fanout`)",
            &LineChart {
                title: "Fan-out: append → frame latency vs streams".to_owned(),
                x: Axis::new("concurrent streams", Scale::Log10),
                y: Axis::new("latency, ms", Scale::Log10),
                series: vec![
                    line("p50", "p50_ms"),
                    line("p99", "p99_ms"),
                    line("max", "max_ms"),
                ],
                references: vec![("target p99 10 ms".to_owned(), 10.0)],
                legend: Corner::UpperLeft,
            },
        )?;
        draw(
            "fanout_throughput.svg",
            "Fan-out frames/s vs concurrent streams (`fanout`)",
            &LineChart {
                title: "Fan-out: frames delivered per second vs streams".to_owned(),
                x: Axis::new("concurrent streams", Scale::Log10),
                y: Axis::new("frames/s", Scale::Log10),
                series: vec![line("frames/s (all streams)", "frames_per_s")],
                references: Vec::new(),
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = run.summary("candles_http") {
        draw(
            "candles_latency.svg",
            "HTTP candle lookup latency distribution (`candles_http`)",
            &LineChart {
                title: "Candle lookups: request latency".to_owned(),
                x: Axis::new("quantile", Scale::Nines),
                y: Axis::new("latency, ms", Scale::Log10),
                series: vec![Series::new("GET /v1/candles", curve(v))],
                references: Vec::new(),
                legend: Corner::UpperLeft,
            },
        )?;
    }
    Ok(drawn)
}

// ---- the section ----

fn render(
    args: &Args,
    machine: &benches::Machine,
    commit: &str,
    load: (&str, &str),
    timing: &Timing,
    run: &Run,
    plots: &[(String, String)],
) -> String {
    let mut s = String::from("## Summary (`report`)\n\n");
    let command = if args.quick {
        "cargo run --release -p benches --bin report -- --quick"
    } else {
        "cargo run --release -p benches --bin report"
    };
    let _ = writeln!(
        s,
        "Generated by one command, `{command}`; every figure in this file comes from its last run.{}\n",
        if args.quick {
            " **Quick run: reduced sizes, the figures are not meaningful.**"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "- Commit: `{commit}` (`git rev-parse --short HEAD`; `-dirty` = tracked files other than this file and `benches/plots/` differ from it)"
    );
    let _ = writeln!(s, "- Date: {} → {}", machine.date, timing.end);
    let _ = writeln!(
        s,
        "- Machine: {}, {} cores, {:.0} GiB memory; load average (1/5/15 min) {} at the start, {} at the end (other builds share the machine)",
        machine.cpu, machine.cores, machine.memory_gib, load.0, load.1
    );
    let _ = writeln!(
        s,
        "- Compiler: {}, profile {}",
        machine.rustc, machine.profile
    );
    let _ = writeln!(
        s,
        "- Wall time: scenarios {} (budget {}: {}), build {}, total {} (from the `report` binary's start; compiling `report` itself comes before)",
        secs(timing.scenarios_s),
        secs(BUDGET_S),
        if timing.scenarios_s <= BUDGET_S {
            "within"
        } else {
            "over"
        },
        secs(timing.build_s),
        secs(timing.total_s)
    );
    if let Some(v) = run.summary(&format!(
        "replay@{}",
        REPLAY_SCALES[REPLAY_SCALES.len() - 1]
    )) {
        let blocks = num(v, "blocks").unwrap_or(0.0);
        let _ = writeln!(
            s,
            "- Ingest slice: {blocks:.0} blocks of mainnet-scale simulator output ({:.0} MB of node lines, ≈ {:.0} s of block time = {:.1}% of a mainnet hour of ≈ {:.0} blocks, which would be ≈ {:.1} GB){}",
            replay_row(v, "fold")
                .and_then(|r| num(r, "mb"))
                .unwrap_or(0.0),
            blocks / MAINNET_BLOCKS_PER_S,
            100.0 * blocks / (MAINNET_BLOCKS_PER_S * 3600.0),
            MAINNET_BLOCKS_PER_S * 3600.0,
            replay_row(v, "fold")
                .and_then(|r| num(r, "mb"))
                .map_or(0.0, |mb| mb / blocks * MAINNET_BLOCKS_PER_S * 3600.0 / 1e3),
            if args.quick {
                ""
            } else {
                ": the largest slice that keeps the whole report within the budget on this machine (the harness holds the slice in memory and measures five passes over it)"
            }
        );
    }
    let _ = writeln!(s);

    let mut targets = vec![ingest_target(run)];
    targets.extend(replay_cli_targets(run));
    targets.extend(latency_targets(run));
    targets.extend(engine_cpu_targets(run));
    targets.extend(fanout_targets(run));
    targets.extend(memory_targets(run));
    targets.push(raw_feed_target(run));
    targets.push(candles_target(run));
    targets.extend(candle_history_targets(run));
    targets.push(checkpoint_target(run));
    let _ = writeln!(
        s,
        "| target | goal | measured | reference (same run, same data) | ratio | verdict |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for t in &targets {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            t.what, t.goal, t.measured, t.reference, t.ratio, t.verdict
        );
    }
    let met = targets
        .iter()
        .filter(|t| t.verdict == verdict(true))
        .count();
    let _ = writeln!(
        s,
        "\n{met} of {} targets met. Each scenario's own section below has its full table, method and caveats.\n",
        targets.len()
    );

    let _ = writeln!(s, "### Scenarios run\n");
    let _ = writeln!(s, "| scenario | command | section | wall time | result |");
    let _ = writeln!(s, "|---|---|---|---:|---|");
    for o in &run.outcomes {
        let _ = writeln!(
            s,
            "| {} | `{}` | {} | {} | {} |",
            o.label,
            o.command,
            o.section
                .map_or_else(|| "– (plot points only)".to_owned(), |n| format!("`{n}`")),
            secs(o.elapsed.as_secs_f64()),
            match &o.result {
                Ok(()) => "ok".to_owned(),
                Err(e) => e.clone(),
            }
        );
    }
    let _ = writeln!(
        s,
        "\n`replay_cli` and `memory` are given the `l1gate` binary of the same build (`--l1gate PATH`); run alone they build it themselves."
    );
    if !plots.is_empty() {
        let _ = writeln!(s, "\n### Plots\n");
        for (file, caption) in plots {
            let _ = writeln!(s, "- [{caption}](plots/{file})");
        }
        let _ = writeln!(s);
        for (file, caption) in plots {
            let _ = writeln!(s, "![{caption}](plots/{file})\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_with(key: &str, v: Value) -> Run {
        let mut summaries = BTreeMap::new();
        summaries.insert(key.to_owned(), v);
        Run {
            summaries,
            outcomes: Vec::new(),
        }
    }

    #[test]
    fn ingest_verdict_follows_the_fold_rate() {
        let v = json!({"scale": 1.0, "blocks": 10, "rows": [
            {"name": "fold", "mb_s": 1200.0, "mb": 5.0, "events_s": 1e6},
            {"name": "memchr scan", "mb_s": 6000.0},
            {"name": "serde_json::Value", "mb_s": 100.0},
        ]});
        let t = ingest_target(&run_with("replay@1", v));
        assert_eq!(t.verdict, "**met**");
        assert!(t.ratio.starts_with("12.00×"), "{}", t.ratio);
        let missing = ingest_target(&run_with("other", json!({})));
        assert_eq!(missing.verdict, "not measured");
        assert!(
            missing.measured.contains("no `replay` harness"),
            "{}",
            missing.measured
        );
    }

    #[test]
    fn latency_targets_take_the_worst_market_view_of_the_default_server() {
        let v = json!({"rows": [
            {"poll_ms": null, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 0.3, "p99_ms": 1.0},
            {"poll_ms": null, "rate": 1, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 0.4, "p99_ms": 3.0},
            {"poll_ms": null, "rate": 1, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 0.2, "p99_ms": 1.5},
            {"poll_ms": null, "rate": 10, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 2.0, "p99_ms": 8.0},
            {"poll_ms": null, "rate": 10, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 1.0, "p99_ms": 4.0},
            {"poll_ms": 5, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 9.0, "p99_ms": 9.0},
            {"poll_ms": null, "rate": 10, "stream": "bbo", "reference": false, "frames": 0, "p50_ms": 99.0, "p99_ms": 99.0},
        ], "machine_floor": {"p50_ms": 0.17, "p99_ms": 0.4}, "grpc_floor": {"p50_ms": 0.31, "p99_ms": 0.9}});
        let t = latency_targets(&run_with("latency", v));
        assert_eq!(t.len(), 3);
        assert!(t[0].measured.starts_with("0.400 ms"), "{}", t[0].measured);
        assert_eq!(t[0].verdict, "**met**");
        assert_eq!(t[0].ratio, "2.00×");
        assert!(t[1].measured.contains("worst: l4"), "{}", t[1].measured);
        assert!(t[1].reference.starts_with("1.500 ms"), "{}", t[1].reference);
        for (at, floor) in [
            (0, "machine floor 0.170 ms"),
            (1, "machine floor 0.400 ms"),
            (0, "gRPC floor 0.310 ms"),
            (1, "gRPC floor 0.900 ms"),
        ] {
            assert!(t[at].reference.contains(floor), "{}", t[at].reference);
        }
        assert_eq!(t[1].verdict, "**not met**");
        assert!(t[2].measured.starts_with("8.000 ms"), "{}", t[2].measured);
        assert_eq!(t[2].ratio, "2.00×");
        assert_eq!(t[2].verdict, "**met**");
        let missing = latency_targets(&run_with("other", json!({})));
        assert!(missing.iter().all(|t| t.verdict == "not measured"));
    }

    #[test]
    fn replay_cli_and_engine_cpu_targets_read_their_summaries() {
        let v = json!({"mb": 791.0, "blocks": 3000, "reference": {"mb_s": 2000.0}, "rows": [
            {"view": "bbo", "mb_s": 500.0, "wall_s": 1.6, "read_mb": 791.0},
            {"view": "trades", "mb_s": 1500.0, "wall_s": 0.5, "read_mb": 1.0},
        ]});
        let t = replay_cli_targets(&run_with("replay_cli", v));
        assert_eq!(t[0].verdict, "**not met**");
        assert_eq!(t[0].ratio, "0.25×");
        assert_eq!(t[1].verdict, "**met**");
        let v = json!({"ratio": 1.2, "live_us_per_block": 360.0, "engine_us_per_block": 300.0,
            "market_us_per_block": 330.0, "blocks": 296, "idle_pct": 1.5, "idle_seconds": 10.0,
            "engine_core_pct": 0.5});
        let [live, idle] = engine_cpu_targets(&run_with("engine_cpu", v));
        assert_eq!(live.verdict, "**met**");
        assert_eq!(live.ratio, "1.20×");
        assert_eq!(idle.verdict, "**not met**");
    }

    #[test]
    fn fanout_targets_read_the_stream_bbo_rows_only() {
        let row = |label: &str, streams: u64, slow: u64, p99: f64| {
            json!({"label": label, "streams": streams, "slow": slow, "p99_ms": p99,
                   "frames_per_s": 1.0, "required_per_s": 1.0, "missing": 0, "extra": 0,
                   "failures": 0, "frames_per_write": 1.0, "rss_kib_per_stream": 1.0})
        };
        let v = json!({"runs": [
            row(FANOUT_BBO, 100, 0, 4.0),
            row(FANOUT_BBO, 10_000, 0, 48.0),
            row(FANOUT_BBO, 10_000, 100, 44.0),
            // The edge comparison at the same count, listed after: not the target's streams.
            row("gRPC StreamL2Book", 10_000, 0, 296.0),
        ], "slow": {"streams": 100, "deadline_exceeded": 100, "ended_after_s": 17.0}});
        let [held, slow] = fanout_targets(&run_with("fanout", v));
        assert!(
            held.measured.starts_with("10000 streams: p99 48.000 ms"),
            "{}",
            held.measured
        );
        assert_eq!(held.reference, "100 streams: p99 4.000 ms");
        assert_eq!(held.verdict, "**met**");
        assert!(
            slow.measured.contains("others' p99 44.000 ms"),
            "{}",
            slow.measured
        );
        assert_eq!(slow.reference, "without them: p99 48.000 ms");
    }

    #[test]
    fn memory_targets_use_the_full_scale_row() {
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 0.5, "orders": 2e5, "coins": 150, "rss_settled_mb": 90.0, "engine_rss_mb": 60.0,
             "cold_start_s": 0.5, "engine_load_s": 0.4, "peak_mb": 100.0, "snapshot_mb": 80.0},
            {"scale": 1.0, "orders": 4.4e5, "coins": 200, "rss_settled_mb": 180.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0, "peak_mb": 400.0, "snapshot_mb": 160.0},
        ]});
        let [rss, cold] = memory_targets(&run_with("memory", v));
        assert_eq!(rss.verdict, "**met**");
        assert_eq!(rss.ratio, "1.50×");
        assert_eq!(cold.verdict, "**not met**");
        assert!(cold.measured.contains("440000 orders"), "{}", cold.measured);
    }

    #[test]
    fn plots_are_drawn_only_from_data_present() {
        let dir = tempfile::tempdir().unwrap();
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 0.5, "orders": 2e5, "rss_settled_mb": 90.0, "peak_mb": 100.0, "engine_rss_mb": 60.0,
             "cold_start_s": 0.5, "engine_load_s": 0.4},
            {"scale": 1.0, "orders": 4.4e5, "rss_settled_mb": 180.0, "peak_mb": 400.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0},
        ]});
        let drawn = draw_plots(&run_with("memory", v), dir.path()).unwrap();
        let names: Vec<&str> = drawn.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["memory_scale.svg", "cold_start_scale.svg"]);
        assert!(dir.path().join("memory_scale.svg").is_file());
        assert!(!dir.path().join("latency.svg").exists());
    }

    #[test]
    fn the_plan_covers_every_scenario_and_quick_is_smaller() {
        let full = plan(false, "/x/l1gate");
        let bins: Vec<&str> = full.iter().map(|s| s.bin).collect();
        for bin in [
            "sim_throughput",
            "replay",
            "replay_cli",
            "engine_cpu",
            "memory",
            "raw_feed",
            "latency",
            "fanout",
            "candles_http",
            "checkpoint",
        ] {
            assert!(bins.contains(&bin), "{bin} missing");
        }
        let writers = full.iter().filter(|s| s.section == Some("replay")).count();
        assert_eq!(writers, 1, "one replay run writes the section");
        let given = full
            .iter()
            .filter(|s| s.args.windows(2).any(|w| w == ["--l1gate", "/x/l1gate"]))
            .count();
        assert_eq!(given, 2, "replay_cli and memory run the built l1gate");
        let latency = full.iter().find(|s| s.bin == "latency").unwrap();
        assert!(
            !latency.args.iter().any(|a| a == "--polls"),
            "default settings only"
        );
        assert_eq!(plan(true, "/x").len(), full.len());
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(times(1.234), "1.23×");
        assert_eq!(times(0.0071), "0.0071×");
        assert_eq!(times(0.05), "0.050×");
        assert_eq!(times(f64::NAN), "NaN×");
    }

    #[test]
    fn arguments_are_checked() {
        assert!(parse_args(&["--quick".to_owned()]).unwrap().quick);
        assert!(!parse_args(&["--no-write".to_owned()]).unwrap().write);
        assert!(parse_args(&["--bogus".to_owned()]).is_err());
    }
}
