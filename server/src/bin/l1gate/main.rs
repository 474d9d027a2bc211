//! `l1gate`: market-data engine and access layer beside an exchange-chain
//! node. See `l1gate --help`.

use anyhow::Context as _;
use clap::Parser as _;
use l1gate::cli::{Cli, Command};

mod candles;
mod edge;
mod endpoints;
mod keys;
mod replay;
mod routes;
mod serve;
mod simulate;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(serve) => serve::run(*serve),
        Command::Keys(args) => keys::run(args),
        Command::Simulate(command) => simulate::run(&command),
        Command::Replay(command) => replay::run(command),
        Command::Endpoints(command) => endpoints::run(*command),
        Command::Routes(command) => routes::run(*command),
        Command::Edge(command) => edge::run(*command),
        Command::Archive(archive) => Ok(l1gate::archive::run(archive)?),
        Command::Candles(command) => candles::run(command),
    }
}

/// Logs to stderr: the filter from `L1GATE_LOG`, else `RUST_LOG`, else
/// `info`; colours only when stderr is a terminal (files and journals get
/// plain text).
pub(crate) fn init_logging() {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = ["L1GATE_LOG", "RUST_LOG"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .find_map(|name| tracing_subscriber::EnvFilter::try_from_env(name).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let output = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // The status page's recent warnings see what the log shows.
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .with(l1gate::status::warnings::WarningLayer)
        .init();
}

/// Resolves on Ctrl-C or SIGTERM, so demo data is cleaned up either way.
pub(crate) async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}
