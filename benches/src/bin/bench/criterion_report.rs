//! Writes the `criterion` section of `benches/BENCHMARKS.md` from the results of the last
//! `cargo bench -p benches --bench feeds`, and the `hub` section from those of
//! `cargo bench -p benches --bench hub`, as criterion stored them (a section whose bench has
//! no results is left as it is).
//!
//! `cargo run --release -p benches -- criterion_report [--dir CRITERION_DIR] [--no-write]`
//!
//! Reads every `<group>/<bench…>/new/{benchmark,estimates}.json` under the criterion directory
//! (default `$CARGO_TARGET_DIR/criterion`, else `target/criterion` of the workspace) for the
//! groups of the `feeds` bench, and tabulates the median time per iteration and the
//! throughput it implies, with each group's rows relative to the `decode` row of the same
//! corpus.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The criterion groups of `benches/benches/feeds.rs`, in report order.
const GROUPS: [&str; 3] = ["decode", "filter_coins", "filter_users"];
/// The criterion groups of `benches/benches/hub.rs`, in report order.
const HUB_GROUPS: [&str; 3] = ["hub_publish", "hub_publish_contended", "hub_round_trip"];

struct Result {
    group: String,
    function: String,
    median_ns: f64,
    lo_ns: f64,
    hi_ns: f64,
    bytes: Option<u64>,
    elements: Option<u64>,
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

fn collect(dir: &Path, out: &mut Vec<Result>) -> anyhow::Result<()> {
    let new = dir.join("new");
    if new.join("estimates.json").is_file() && new.join("benchmark.json").is_file() {
        let bench = read_json(&new.join("benchmark.json"))?;
        let est = read_json(&new.join("estimates.json"))?;
        let median = &est["median"];
        out.push(Result {
            group: bench["group_id"].as_str().unwrap_or_default().to_owned(),
            // `BenchmarkId::new(function, parameter)` stores the parameter apart.
            function: match (bench["function_id"].as_str(), bench["value_str"].as_str()) {
                (Some(function), Some(value)) => format!("{function}/{value}"),
                (Some(function), None) => function.to_owned(),
                (None, value) => value.unwrap_or_default().to_owned(),
            },
            median_ns: median["point_estimate"].as_f64().unwrap_or(f64::NAN),
            lo_ns: median["confidence_interval"]["lower_bound"]
                .as_f64()
                .unwrap_or(f64::NAN),
            hi_ns: median["confidence_interval"]["upper_bound"]
                .as_f64()
                .unwrap_or(f64::NAN),
            bytes: bench["throughput"]["Bytes"].as_u64(),
            elements: bench["throughput"]["Elements"].as_u64(),
        });
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "report") {
            collect(&path, out)?;
        }
    }
    Ok(())
}

fn modified(dir: &Path) -> String {
    // The newest estimates file tells when the bench last ran.
    fn newest(dir: &Path, best: &mut Option<std::time::SystemTime>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                newest(&path, best);
            } else if path.file_name().is_some_and(|n| n == "estimates.json")
                && let Ok(t) = entry.metadata().and_then(|m| m.modified())
            {
                *best = Some(best.map_or(t, |b| b.max(t)));
            }
        }
    }
    let mut best = None;
    newest(dir, &mut best);
    best.map_or_else(|| "unknown".to_owned(), benches::utc)
}

#[derive(Debug, clap::Args)]
#[command(
    about = "Tabulates the last criterion results into BENCHMARKS.md",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Criterion's output directory (default: `target/criterion` of this workspace).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the tables without rewriting BENCHMARKS.md.
    #[arg(long = "no-write", action = clap::ArgAction::SetFalse)]
    write: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let write = args.write;
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
                PathBuf::from,
            )
            .join("criterion")
    });
    let mut results = Vec::new();
    for group in GROUPS.iter().chain(&HUB_GROUPS) {
        let path = dir.join(group);
        if path.is_dir() {
            collect(&path, &mut results)?;
        }
    }
    if results.is_empty() {
        bail!(
            "no criterion results under {}: run `cargo bench -p benches --bench feeds` (or \
             `--bench hub`) first",
            dir.display()
        );
    }
    let rank = |g: &str| {
        GROUPS
            .iter()
            .chain(&HUB_GROUPS)
            .position(|x| *x == g)
            .unwrap_or(GROUPS.len() + HUB_GROUPS.len())
    };
    results.sort_by(|a, b| {
        rank(&a.group)
            .cmp(&rank(&b.group))
            .then_with(|| a.function.cmp(&b.function))
    });
    let (hub, feeds): (Vec<Result>, Vec<Result>) = results
        .into_iter()
        .partition(|r| HUB_GROUPS.contains(&r.group.as_str()));
    let machine = benches::Machine::detect();
    let mut sections = Vec::new();
    if !feeds.is_empty() {
        sections.push(("criterion", feeds_section(&machine, &dir, &feeds)));
    }
    if !hub.is_empty() {
        sections.push(("hub", hub_section(&machine, &dir, &hub)));
    }
    for (name, text) in sections {
        println!("{text}");
        if write {
            let path = benches::benchmarks_md();
            benches::write_section(&path, name, &text)
                .with_context(|| format!("write {}", path.display()))?;
            eprintln!("wrote the {name} section of {}", path.display());
        }
    }
    Ok(())
}

/// Title, machine and command lines, and the criterion results' date, for the section of
/// criterion bench `bench`.
fn section_head(title: &str, bench: &str, machine: &benches::Machine, dir: &Path) -> String {
    let mut s = format!("## {title} (`criterion`, bench `{bench}`)\n\n");
    s.push_str(&machine.markdown(&format!(
        "cargo bench -p benches --bench {bench} && cargo run --release -p benches -- criterion_report"
    )));
    let _ = writeln!(
        s,
        "- Criterion results last written: {} (the report's date above is when it was tabulated)",
        modified(dir)
    );
    s
}

/// The `criterion` section: decode and filter rates of the `feeds` bench.
fn feeds_section(machine: &benches::Machine, dir: &Path, results: &[Result]) -> String {
    let mut s = section_head("Decode and filter per line", "feeds", machine, dir);
    let _ = writeln!(
        s,
        "- Median time per pass over the whole corpus (95% CI in brackets); MB/s = corpus bytes / \
         median time (MB = 10^6 bytes); `× decode` = that row's time over the `decode` time of \
         the same corpus (the filter's cost in decodes).\n"
    );
    let _ = writeln!(
        s,
        "| group | corpus | corpus MB | median ms | MB/s | × decode |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|");
    for r in results {
        let decode = results
            .iter()
            .find(|d| d.group == "decode" && d.function == r.function)
            .map_or(f64::NAN, |d| d.median_ns);
        let mb = r.bytes.map_or(f64::NAN, |b| b as f64 / 1e6);
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.3} [{:.3}–{:.3}] | {:.0} | {:.2} |",
            r.group,
            r.function,
            mb,
            r.median_ns / 1e6,
            r.lo_ns / 1e6,
            r.hi_ns / 1e6,
            mb / (r.median_ns / 1e9),
            r.median_ns / decode
        );
    }
    s
}

/// The `hub` section: the fan-out hub's rates from the `hub` bench.
fn hub_section(machine: &benches::Machine, dir: &Path, results: &[Result]) -> String {
    let mut s = section_head("Fan-out hub operations", "hub", machine, dir);
    let _ = writeln!(
        s,
        "- Median time per iteration (95% CI in brackets); frames/s = frames per iteration \
         (criterion's `Throughput::Elements`: 1 published, or 1 per receiver in \
         `hub_round_trip`) / median time, in millions. `idle/N`: N receivers that never read and have no \
         hook; `hooked/N`: N such receivers each with a `tokio::sync::Notify` hook, as the gRPC \
         edge registers.\n"
    );
    let _ = writeln!(s, "| group | case | median ns | M frames/s |");
    let _ = writeln!(s, "|---|---|---:|---:|");
    for r in results {
        let frames = r.elements.map_or(f64::NAN, |e| e as f64);
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} [{:.1}–{:.1}] | {:.3} |",
            r.group,
            r.function,
            r.median_ns,
            r.lo_ns,
            r.hi_ns,
            frames / (r.median_ns / 1e3)
        );
    }
    s
}
