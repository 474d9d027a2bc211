//! `report`: the whole benchmark report in one command.
//!
//! `cargo run --release -p benches -- report [--quick] [--no-write]`
//!
//! Builds this binary, the `l1gate` server binary and the criterion benches with the cargo that
//! runs it, in one invocation (`$CARGO build -p benches -p server --bins --bench '*'`, same
//! profile and target directory), then runs each scenario as a child process (this binary with
//! the scenario's subcommand), one after the other, each rewriting its own section of
//! `benches/BENCHMARKS.md`:
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
//! Each harness hands its headline figures back through the file named by `L1GATE_BENCH_SUMMARY`
//! (`benches::summary`), as its own `Summary` type (`replay::Summary`, `latency::Summary`, …),
//! which this binary reads back into that type ([`Summaries`]): a summary that does not parse
//! fails its step like a harness that failed. From them this binary writes the `report` section
//! at the top of `BENCHMARKS.md` (commit, date, machine, load, the summary table of targets with
//! the same-run references, the commands and their wall times) and draws the SVG plots under
//! `benches/plots/`. A harness that fails has its section replaced by a note saying so, so that
//! no figure from an earlier run is left standing; the run goes on and exits with an error at
//! the end.
//!
//! The sizes are chosen so that the whole run stays within 15 minutes on a 2-core machine;
//! `--quick` shrinks every scenario to seconds (for checking the plumbing; its figures are
//! not meaningful) and `--no-write` leaves `BENCHMARKS.md` and the plots untouched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::de::DeserializeOwned;

use markdown::render;
use plots::draw_plots;

/// Section of `BENCHMARKS.md` this binary owns.
const SECTION: &str = "report";
/// Wall-clock budget of a full run (scenarios), seconds.
const BUDGET_S: f64 = 15.0 * 60.0;
/// Mainnet blocks per second (the simulator's profile) and per hour.
const MAINNET_BLOCKS_PER_S: f64 = 14.8;
/// Simulator scales of the ingest runs; the last one writes the `replay` section.
const REPLAY_SCALES: [f64; 3] = [0.25, 0.5, 1.0];

/// `report [--quick] [--no-write]`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Runs every harness and rewrites benches/BENCHMARKS.md",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Shorter runs of the same scenarios.
    #[arg(long)]
    quick: bool,
    /// Print the report without rewriting BENCHMARKS.md.
    #[arg(long = "no-write", action = clap::ArgAction::SetFalse)]
    write: bool,
}

/// One child run of a harness (this binary re-run with the harness's subcommand).
struct Step {
    /// Row label in the scenario table.
    label: String,
    /// The harness's subcommand.
    bin: &'static str,
    /// Its arguments.
    args: Vec<String>,
    /// The section it rewrites (None for a `--no-write` run).
    section: Option<&'static str>,
    /// Key of its summary in [`Summaries`]: the harness's subcommand, with `@SCALE` for the
    /// `replay` runs.
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
        let mut s = format!("cargo run --release -p benches -- {}", self.bin);
        for arg in &self.args {
            s.push(' ');
            s.push_str(arg);
        }
        s
    }
}

/// What happened to one step.
struct Outcome {
    /// The step's [`Step::key`].
    key: String,
    label: String,
    command: String,
    section: Option<&'static str>,
    elapsed: Duration,
    /// `Ok` or what went wrong.
    result: Result<(), String>,
}

/// The summaries a run collected, each read back into its harness's type.
#[derive(Debug, Default)]
struct Summaries {
    /// `replay`'s, by simulator scale as its step's key spells it (`0.25`, `0.5`, `1`).
    replay: BTreeMap<String, crate::replay::Summary>,
    replay_cli: Option<crate::replay_cli::Summary>,
    memory: Option<crate::memory::Summary>,
    raw_feed: Option<crate::raw_feed::Summary>,
    latency: Option<crate::latency::Summary>,
    engine_cpu: Option<crate::engine_cpu::Summary>,
    fanout: Option<crate::fanout::Summary>,
    candles_http: Option<crate::candles_http::Summary>,
    candle_history: Option<crate::candle_history::Summary>,
    checkpoint: Option<crate::checkpoint::Summary>,
}

impl Summaries {
    /// Reads `text`, the summary the step `key` wrote, as its harness's `Summary`.
    ///
    /// # Errors
    /// What to report for the step: the harness and serde's message when the text does not
    /// parse as that type, or that the harness has no summary type.
    fn insert(&mut self, key: &str, text: &str) -> Result<(), String> {
        /// `text` parsed into `slot`.
        fn parse<T: DeserializeOwned>(text: &str, slot: &mut Option<T>) -> serde_json::Result<()> {
            *slot = Some(serde_json::from_str(text)?);
            Ok(())
        }
        let (bin, scale) = key
            .split_once('@')
            .map_or((key, None), |(bin, scale)| (bin, Some(scale)));
        let parsed = match (bin, scale) {
            ("replay", Some(scale)) => serde_json::from_str(text).map(|summary| {
                self.replay.insert(scale.to_owned(), summary);
            }),
            ("replay_cli", None) => parse(text, &mut self.replay_cli),
            ("memory", None) => parse(text, &mut self.memory),
            ("raw_feed", None) => parse(text, &mut self.raw_feed),
            ("latency", None) => parse(text, &mut self.latency),
            ("engine_cpu", None) => parse(text, &mut self.engine_cpu),
            ("fanout", None) => parse(text, &mut self.fanout),
            ("candles_http", None) => parse(text, &mut self.candles_http),
            ("candle_history", None) => parse(text, &mut self.candle_history),
            ("checkpoint", None) => parse(text, &mut self.checkpoint),
            _ => return Err(format!("wrote a summary, and `{key}` has no summary type")),
        };
        parsed.map_err(|e| format!("wrote a summary that does not parse as `{bin}::Summary`: {e}"))
    }

    /// `replay`'s summary at simulator scale `scale` (one of [`REPLAY_SCALES`]).
    fn replay_at(&self, scale: f64) -> Option<&crate::replay::Summary> {
        self.replay.get(&scale.to_string())
    }
}

/// Everything the run collected.
#[derive(Default)]
struct Run {
    summaries: Summaries,
    outcomes: Vec<Outcome>,
}

impl Run {
    /// Why the step `key` has no summary, for the table.
    fn missing(&self, key: &str) -> String {
        let bin = key.split('@').next().unwrap_or(key);
        self.outcomes.iter().find(|o| o.key == key).map_or_else(
            || format!("not measured: `{bin}` was not run"),
            |o| match &o.result {
                Ok(()) => format!("not measured: `{bin}` reported no summary"),
                Err(e) => format!("not measured: `{bin}` {e}"),
            },
        )
    }
}

#[cfg(test)]
impl Run {
    /// A run that collected only `summary` (the JSON its harness would have written), under
    /// `key`.
    fn with(key: &str, summary: &serde_json::Value) -> Run {
        let mut run = Run::default();
        if let Err(e) = run.summaries.insert(key, &summary.to_string()) {
            panic!("{key}: {e}");
        }
        run
    }
}

/// Runs every step of the plan, then writes the report's section and plots (see the module
/// docs); fails at the end if any step failed.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
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
    // The harnesses run from the `bench` this build made: the build may have linked it anew
    // (the criterion targets' features), leaving this process's own file unlinked.
    let exe = built
        .executables
        .get("bench")
        .cloned()
        .context("cargo built no bench executable")?;
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
    let mut run = Run::default();
    for mut step in steps {
        if !args.write && step.section.is_some() {
            step.args.push("--no-write".to_owned());
        }
        let summary_file = work
            .path()
            .join(format!("{}.json", step.key.replace('@', "-")));
        eprintln!("report: {} — {}", step.label, step.command());
        let step_started = Instant::now();
        let mut child_args = vec![step.bin.to_owned()];
        child_args.extend(step.args.iter().cloned());
        let mut result = run_child(
            &exe,
            &child_args,
            &summary_file,
            &work.path().join("stdout.log"),
        );
        let elapsed = step_started.elapsed();
        if result.is_ok() {
            // A summary that cannot be read fails the step: its targets say why.
            result = read_summary(&summary_file).and_then(|text| {
                text.map_or(Ok(()), |text| run.summaries.insert(&step.key, &text))
            });
        }
        eprintln!(
            "report: {} took {:.0} s{}",
            step.label,
            elapsed.as_secs_f64(),
            result
                .as_ref()
                .err()
                .map_or_else(String::new, |e| format!(" and failed: {e}"))
        );
        run.outcomes.push(Outcome {
            command: step.command(),
            label: step.label,
            key: step.key,
            section: step.section,
            elapsed,
            result,
        });
    }
    criterion(args, &exe, &bench_build, &mut run, work.path());
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
        args,
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
        vec![
            "--scales",
            "0.25,0.5,1",
            "--runs",
            "2",
            "--behind",
            "26640,106560",
            "--behind-zstd",
            "319680",
        ]
    };
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
    // the raw feed's live tail, in the same run, the reference. Other clients' loads beside the
    // 1× windows: the targets under load are at mainnet pace.
    let latency: &[&str] = if quick {
        &["--seconds", "1", "--rates", "1,10"]
    } else {
        &[
            "--seconds",
            "15",
            "--rates",
            "1,10",
            "--loads",
            "quiet,open-orders,l4-subscribes",
            "--load-rates",
            "1",
        ]
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
    // The harnesses that run the `l1gate` binary run the one this report built.
    for step in &mut steps {
        if RUN_L1GATE.contains(&step.bin) {
            step.args.extend(["--l1gate".to_owned(), l1gate.to_owned()]);
        }
    }
    steps
}

/// The harnesses that run the `l1gate` binary (each takes `--l1gate PATH`).
const RUN_L1GATE: [&str; 8] = [
    "replay_cli",
    "memory",
    "raw_feed",
    "latency",
    "engine_cpu",
    "fanout",
    "candles_http",
    "candle_history",
];

/// Runs `exe` (the `bench` binary) with `args` (a harness's subcommand and its options) and
/// the summary file set; its stdout (the section it printed) goes to `stdout_log`, its stderr
/// (progress) to ours.
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

/// The text of the summary file at `path`; `None` when the harness wrote none.
fn read_summary(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "wrote a summary that could not be read ({}): {e}",
            path.display()
        )),
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
fn criterion(args: &Args, exe: &Path, bench: &[&str], run: &mut Run, work: &Path) {
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
        let mut report_args = vec!["criterion_report".to_owned()];
        if !args.write {
            report_args.push("--no-write".to_owned());
        }
        result = run_child(
            exe,
            &report_args,
            &work.join("criterion.json"),
            &work.join("stdout.log"),
        );
    }
    run.outcomes.push(Outcome {
        key: "criterion".to_owned(),
        label: "Criterion benches".to_owned(),
        command: format!("{command} && cargo run --release -p benches -- criterion_report"),
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

mod markdown;
mod plots;
mod targets;

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            given,
            RUN_L1GATE.len(),
            "every server harness runs the built l1gate"
        );
        let latency = full.iter().find(|s| s.bin == "latency").unwrap();
        assert!(
            !latency.args.iter().any(|a| a == "--polls"),
            "default settings only"
        );
        assert_eq!(plan(true, "/x").len(), full.len());
    }

    #[test]
    fn summaries_are_read_as_their_harness_type() {
        // What the harness writes (`benches::summary::emit`) is what the report reads.
        let written = crate::checkpoint::Summary {
            orders: 440_000,
            coins: 200,
            json_mb: 90.0,
            checkpoint_mb: 40.0,
            json_load_ms: 900.0,
            checkpoint_load_ms: f64::NAN,
            take_ms: 3.0,
        };
        let mut summaries = Summaries::default();
        let text = serde_json::to_string_pretty(&written).unwrap();
        summaries.insert("checkpoint", &text).unwrap();
        let read = summaries.checkpoint.as_ref().unwrap();
        assert_eq!((read.orders, read.json_mb), (440_000, 90.0));
        assert!(read.checkpoint_load_ms.is_nan(), "NaN is written as null");
        // `replay` is kept by scale.
        let replay = serde_json::json!({"scale": 0.5, "blocks": 3, "rows": []});
        summaries.insert("replay@0.5", &replay.to_string()).unwrap();
        assert_eq!(summaries.replay_at(0.5).map(|r| r.blocks), Some(3));
        assert!(summaries.replay_at(1.0).is_none());
        // A renamed key does not parse; the message names the harness and serde's complaint.
        let renamed = text.replace("\"take_ms\"", "\"take\"");
        let e = summaries.insert("checkpoint", &renamed).unwrap_err();
        assert!(
            e.contains("`checkpoint::Summary`") && e.contains("missing field `take_ms`"),
            "{e}"
        );
        assert!(summaries.insert("sim_throughput", "{}").is_err());
    }

    #[test]
    fn a_summary_that_does_not_parse_is_why_its_targets_are_not_measured() {
        let mut run = Run::default();
        let error = run
            .summaries
            .insert("replay@1", r#"{"scale": 1, "blocks": "ten", "rows": []}"#)
            .unwrap_err();
        for (key, result) in [
            ("replay@0.25", Ok(())),
            ("replay@0.5", Ok(())),
            ("replay@1", Err(error)),
        ] {
            run.outcomes.push(Outcome {
                key: key.to_owned(),
                label: format!("Ingest + fold, scale {key}"),
                command: "cargo run --release -p benches -- replay".to_owned(),
                section: None,
                elapsed: Duration::ZERO,
                result,
            });
        }
        let target = targets::ingest_target(&run);
        assert_eq!(target.verdict, "not measured");
        assert!(
            target.measured.starts_with(
                "not measured: `replay` wrote a summary that does not parse as `replay::Summary`: invalid type"
            ),
            "{}",
            target.measured
        );
        assert_eq!(
            run.missing("replay@0.5"),
            "not measured: `replay` reported no summary"
        );
        assert_eq!(
            run.missing("latency"),
            "not measured: `latency` was not run"
        );
    }

    #[test]
    fn arguments_are_checked() {
        let parse = |args: &[&str]| crate::parse::<Args>("report", args);
        assert!(parse(&["--quick"]).unwrap().quick);
        assert!(parse(&[]).unwrap().write);
        assert!(!parse(&["--no-write"]).unwrap().write);
        assert!(parse(&["--bogus"]).is_err());
    }
}
