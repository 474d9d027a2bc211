//! Generation speed of the `fixtures` simulator: blocks/s and MB/s at mainnet scale into a
//! temporary directory.
//!
//! `cargo run --release -p benches -- sim_throughput [--blocks N] [--scale F]
//! [--mode by-block|streaming|both] [--no-replica] [--keep] [--no-write]`
//!
//! Reports the time to build the starting books, the pure simulation rate (no I/O), and the
//! end-to-end rate of `fixtures::generate` (simulation, formatting and buffered writes), with
//! an extrapolation to one hour of mainnet blocks (≈ 53,000). Prints the results and rewrites
//! the `sim_throughput` section of `benches/BENCHMARKS.md` (unless `--no-write`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use fixtures::{OutputMode, RunOptions, SimConfig, Simulator, generate};

#[derive(Debug, clap::Args)]
#[command(
    about = "Generation speed of the fixtures simulator at mainnet scale",
    args_override_self = true
)]
pub(crate) struct Args {
    /// Blocks to generate (the simulation-only rate uses at most 2,000 of them).
    #[arg(long, default_value_t = 3_000)]
    blocks: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// File layout the node writes: by-block, streaming or both.
    #[arg(long, default_value = "by-block", value_parser = mode)]
    mode: OutputMode,
    /// Write no `replica_cmds` files.
    #[arg(long)]
    no_replica: bool,
    /// Keep the generated directory.
    #[arg(long)]
    keep: bool,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// `--mode`: `by-block`, `streaming` or `both`.
fn mode(text: &str) -> Result<OutputMode, String> {
    match text {
        "by-block" => Ok(OutputMode::ByBlock),
        "streaming" => Ok(OutputMode::Streaming),
        "both" => Ok(OutputMode::Both),
        other => Err(format!("unknown mode {other}")),
    }
}

fn measure(args: &Args) -> Result<(), String> {
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let cfg = SimConfig {
        mode: args.mode,
        snapshot_every: None,
        ..SimConfig::mainnet(1, args.scale)
    };

    let t0 = Instant::now();
    let mut sim = Simulator::new(&cfg);
    let build = t0.elapsed();
    let resting = sim.resting_orders();
    let sim_blocks = args.blocks.min(2_000);
    let t1 = Instant::now();
    let mut events = 0usize;
    for _ in 0..sim_blocks {
        let b = sim.next_block();
        events += b.order_statuses.len() + b.book_diffs.len() + b.fills.len();
    }
    let sim_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let mut snap = Vec::new();
    sim.write_snapshot_json(&mut snap)
        .map_err(|e| e.to_string())?;
    let snap_s = t2.elapsed().as_secs_f64();

    let dir: PathBuf = std::env::temp_dir().join(format!("sim_throughput_{}", std::process::id()));
    let run = RunOptions {
        blocks: Some(args.blocks),
        no_replica_cmds: args.no_replica,
        ..RunOptions::default()
    };
    let summary = generate(&cfg, &dir, &run, &mut |_| {}).map_err(|e| e.to_string())?;
    let total_s = summary.elapsed.as_secs_f64();
    let gen_s = (total_s - build.as_secs_f64()).max(1e-9);
    let mb = summary.bytes as f64 / 1e6;
    let bps = summary.blocks as f64 / gen_s;
    let hour_blocks = 53_000.0;
    let rows: Vec<(&str, String)> = vec![
        (
            "run",
            format!(
                "mode {:?}, scale {}, replica_cmds {}",
                args.mode, args.scale, !args.no_replica
            ),
        ),
        (
            "starting books",
            format!(
                "{resting} resting orders built in {:.2} s",
                build.as_secs_f64()
            ),
        ),
        (
            "simulation only",
            format!(
                "{sim_blocks} blocks in {sim_s:.2} s = {:.0} blocks/s, {:.0} events/s",
                sim_blocks as f64 / sim_s,
                events as f64 / sim_s
            ),
        ),
        (
            "L4 snapshot",
            format!("{:.1} MB in {snap_s:.2} s", snap.len() as f64 / 1e6),
        ),
        (
            "generate",
            format!(
                "{} blocks, {} statuses, {} diffs, {} fills, {:.1} MB in {gen_s:.2} s (+{:.2} s books)",
                summary.blocks,
                summary.order_statuses,
                summary.book_diffs,
                summary.fills,
                mb,
                build.as_secs_f64()
            ),
        ),
        (
            "throughput",
            format!(
                "{bps:.0} blocks/s, {:.0} MB/s ({:.1}x real time at 14.8 blocks/s)",
                mb / gen_s,
                bps / 14.8
            ),
        ),
        (
            "one mainnet hour (53,000 blocks)",
            format!(
                "~{:.1} GB in ~{:.0} s",
                mb / summary.blocks as f64 * hour_blocks / 1e3,
                hour_blocks / bps
            ),
        ),
    ];
    for (label, text) in &rows {
        println!("{label}: {text}");
    }
    if !args.no_write {
        let mut md = String::from("## Simulator generation speed (`sim_throughput`)\n\n");
        md.push_str(&machine.markdown(&command));
        md.push_str(
            "- MB = 10^6 bytes; one run (no repeats).\n\n| measure | result |\n|---|---|\n",
        );
        for (label, text) in &rows {
            let _ = writeln!(md, "| {label} | {text} |");
        }
        let path = benches::benchmarks_md();
        benches::write_section(&path, "sim_throughput", &md)
            .map_err(|e| format!("write {}: {e}", path.display()))?;
        println!("wrote the sim_throughput section of {}", path.display());
    }
    if args.keep {
        println!("kept {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
    }
    Ok(())
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    measure(args).map_err(|e| anyhow::anyhow!(e))
}
