//! `bench`: every measurement of l1gate, one subcommand each.
//!
//! `cargo run --release -p benches -- <SUBCOMMAND> [OPTIONS]`, e.g.
//! `cargo run --release -p benches -- latency --seconds 15`, or `-- report` for the whole report.
//!
//! - `report` runs the measurements below in order, each as a child process (this binary with
//!   the harness's subcommand), and writes the report's section of `benches/BENCHMARKS.md` from
//!   the typed summaries they hand back (see `report`);
//! - the harnesses the report runs, each rewriting its own section: `sim_throughput`, `replay`,
//!   `replay_cli`, `memory`, `raw_feed`, `latency`, `engine_cpu`, `fanout`, `candles_http`,
//!   `candle_history`, `checkpoint`, `criterion_report`;
//! - `load …`: load tests and measurements the report does not run — they take an hour, or need
//!   a NATS server or a Python environment (see `load`).
//!
//! A harness that needs a process of its own beside the server (a load generator, a stand-in
//! node, a data generator) re-runs this binary as `bench child NAME …` ([`benches::child`]);
//! that subcommand is hidden from `--help`.

use clap::{Parser, Subcommand};

mod candle_history;
mod candles_http;
mod checkpoint;
mod criterion_report;
mod engine_cpu;
mod fanout;
mod latency;
mod load;
mod memory;
mod raw_feed;
mod replay;
mod replay_cli;
mod report;
mod sim_throughput;

/// Every measurement of l1gate; results in `benches/BENCHMARKS.md`.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands, named as the `BENCHMARKS.md` sections they rewrite.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
enum Command {
    /// Every harness below in order, then the report's own section and plots.
    Report(report::Args),
    /// The simulator's generation speed.
    SimThroughput(sim_throughput::Args),
    /// Ingest + fold throughput of the engine beside a scan and a JSON parse.
    Replay(replay::Args),
    /// `l1gate replay` end to end, as a user runs it.
    ReplayCli(replay_cli::Args),
    /// Memory and cold start of a server with a mainnet-size book.
    Memory(memory::Args),
    /// Raw feed replay over gRPC beside reading the files.
    RawFeed(raw_feed::Args),
    /// Append → frame latency per market view.
    Latency(latency::Args),
    /// The engine thread's CPU per block.
    EngineCpu(engine_cpu::Args),
    /// Fan-out to many streams, with stalled ones.
    Fanout(fanout::Args),
    /// HTTP candle lookups from a separate load process.
    CandlesHttp(candles_http::Args),
    /// Importing archive hours into the candle store, and serving it.
    CandleHistory(candle_history::Args),
    /// Engine checkpoints: loading and taking one.
    Checkpoint(checkpoint::Args),
    /// The criterion benches' tables.
    CriterionReport(criterion_report::Args),
    /// Load tests and measurements the report does not run.
    Load {
        #[command(subcommand)]
        which: load::Command,
    },
    /// A harness's child process (`bench child NAME ARGS…`).
    #[command(hide = true)]
    Child {
        /// Which child.
        name: String,
        /// Its arguments, as the harness passed them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Report(args) => report::run(&args),
        Command::SimThroughput(args) => sim_throughput::run(&args),
        Command::Replay(args) => replay::run(&args),
        Command::ReplayCli(args) => replay_cli::run(&args),
        Command::Memory(args) => memory::run(&args),
        Command::RawFeed(args) => raw_feed::run(&args),
        Command::Latency(args) => latency::run(&args),
        Command::EngineCpu(args) => engine_cpu::run(&args),
        Command::Fanout(args) => fanout::run(&args),
        Command::CandlesHttp(args) => candles_http::run(&args),
        Command::CandleHistory(args) => candle_history::run(&args),
        Command::Checkpoint(args) => checkpoint::run(&args),
        Command::CriterionReport(args) => criterion_report::run(&args),
        Command::Load { which } => load::run(which),
        Command::Child { name, args } => child(&name, &args),
    }
}

/// Runs the child `name` of some harness.
fn child(name: &str, args: &[String]) -> anyhow::Result<()> {
    match name {
        candles_http::LOAD_CHILD => candles_http::load_child(args),
        latency::LOAD_CHILD => latency::load_child(args),
        memory::ENGINE_CHILD => memory::engine_child(args),
        replay::GENERATE_CHILD => replay::generate_child(args),
        load::gateway::UPSTREAM_CHILD => load::gateway::upstream_child(args),
        load::gateway::LOAD_CHILD => load::gateway::load_child(args),
        other => anyhow::bail!("no child `{other}`"),
    }
}

/// Parses `args` as the options of the subcommand or child `name` (a child's arguments, the
/// harnesses' tests).
pub(crate) fn parse<A: clap::Args>(name: &str, args: &[impl AsRef<str>]) -> Result<A, clap::Error> {
    #[derive(Debug, Parser)]
    struct Only<A: clap::Args> {
        #[command(flatten)]
        args: A,
    }
    Only::<A>::try_parse_from(std::iter::once(name).chain(args.iter().map(AsRef::as_ref)))
        .map(|o| o.args)
}
