//! `bench load …`: load tests and measurements the report does not run.
//!
//! Each still rewrites its own section of `BENCHMARKS.md` with a reference measured in the same
//! run; they stay out of the report because they take long (`soak`), or need what the report's
//! machine may not have (`bus`: a `nats-server`; `export`: a Python environment with DuckDB),
//! or measure a setting that is off by default (`market_compression`), or the node gateway
//! beside a stand-in node (`gateway`), or abuse (`ws_flood`).

use clap::Subcommand;

mod bus;
mod export;
pub(crate) mod gateway;
mod market_compression;
mod soak;
mod ws_flood;

/// The load tests, named as their `BENCHMARKS.md` sections.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub(crate) enum Command {
    /// Scale-out over NATS JetStream: publish throughput, edge latency, streams held.
    Bus(bus::Args),
    /// `l1gate replay` to Parquet and CSV beside JSON lines, read back by DuckDB.
    Export(export::Args),
    /// The node gateway's cost beside requests sent to the node directly.
    Gateway(gateway::Args),
    /// Market frames compressed beside the same frames sent as they are.
    MarketCompression(market_compression::Args),
    /// A server under steady load for a long time.
    Soak(soak::Args),
    /// One client's subscribes while other connections flood the server.
    WsFlood(ws_flood::Args),
}

pub(crate) fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Bus(args) => bus::run(&args),
        Command::Export(args) => export::run(&args),
        Command::Gateway(args) => gateway::run(&args),
        Command::MarketCompression(args) => market_compression::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::WsFlood(args) => ws_flood::run(&args),
    }
}
