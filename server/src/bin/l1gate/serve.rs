//! `l1gate serve`: the server over a node's files, until Ctrl-C or SIGTERM.

use anyhow::Context as _;
use l1gate::cli::ServeCommand;
use l1gate::config;

use crate::{init_logging, shutdown_signal};

pub(crate) fn run(command: ServeCommand) -> anyhow::Result<()> {
    let file = config::load_optional(command.config.as_deref())?;
    let merged = command.settings.or(file);
    let keys_file_given = merged.keys_file.is_some();
    let state_dir_given = merged.state_dir.is_some();
    // Before the settings: the default connection cap follows the limit.
    let raised = access::connections::raise_open_files_limit();
    let mut settings = merged.resolve()?;
    if command.print_config {
        println!("{}", toml::to_string_pretty(&settings)?);
        return Ok(());
    }
    init_logging();
    if let Some((before, after)) = raised.filter(|(before, after)| before != after) {
        tracing::info!(
            before,
            after,
            "raised the open-files limit to its hard limit (a descriptor per connection)"
        );
    }
    // No data directory: demo mode, serving the simulator's live output.
    let demo = if settings.data.is_none() {
        let demo = l1gate::demo::Demo::start(settings.demo_seed, settings.demo_scale)?;
        settings.data = Some(demo.data_dir().to_owned());
        if !keys_file_given {
            demo.keys_file().clone_into(&mut settings.keys_file);
        }
        if !state_dir_given {
            settings.state_dir = demo.data_dir().join("l1gate-state");
        }
        Some(demo)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let running = l1gate::serve::start(&settings).await?;
        let tls = if settings.tls.is_some() { " (TLS)" } else { "" };
        println!(
            "l1gate serving gRPC on {} and HTTP on {}{tls}",
            running.grpc_addr, running.http_addr
        );
        if let Some(demo) = &demo {
            if keys_file_given {
                println!(
                    "demo mode: using the keys in {}",
                    settings.keys_file.display()
                );
            } else {
                println!(
                    "{}",
                    l1gate::demo::banner(
                        demo.key(),
                        running.grpc_addr,
                        running.http_addr,
                        demo.data_dir(),
                        settings.tls.is_some(),
                    )
                );
            }
        }
        shutdown_signal().await?;
        tracing::info!("shutting down: telling clients, then a last checkpoint and commit");
        running.stop().await;
        drop(demo);
        tracing::info!("stopped");
        Ok(())
    })
}
