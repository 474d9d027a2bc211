//! `l1gate edge`: a server over the message bus, until Ctrl-C or SIGTERM.

use anyhow::Context as _;
use l1gate::config;

use crate::{init_logging, shutdown_signal};

pub(crate) fn run(command: l1gate::cli::EdgeCommand) -> anyhow::Result<()> {
    let file = config::load_optional(command.config.as_deref())?;
    let merged = command.settings.or(file);
    anyhow::ensure!(
        merged.data.is_none() && merged.publish_url.is_none(),
        "edge: `data` and `publish_url` are settings of `l1gate serve`; an edge reads only the bus"
    );
    let url = bus::url::BusUrl::parse(&command.nats)
        .map_err(|message| anyhow::anyhow!("--nats: {message}"))?;
    let settings = merged.resolve()?;
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let running = l1gate::bus_edge::start(&url, &settings).await?;
        println!(
            "l1gate edge serving from {url} (market from the checkpoint of block {}): gRPC on {} \
             and HTTP on {}",
            running.started_from, running.server.grpc_addr, running.server.http_addr
        );
        shutdown_signal().await?;
        tracing::info!("shutting down: telling clients, then a last checkpoint and commit");
        let mut running = running;
        running.server.drain().await;
        tokio::task::spawn_blocking(move || drop(running))
            .await
            .context("shutting down")?;
        tracing::info!("stopped");
        Ok(())
    })
}
