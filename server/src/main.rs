//! `l1gate`: market-data engine and access layer beside an exchange-chain
//! node. See `l1gate --help`.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Parser as _;
use l1gate::cli::{Cli, Command, KeysCommand, ServeCommand};
use l1gate::config;
use l1gate::keys::KeysFile;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(serve) => run_serve(*serve),
        Command::Keys(keys) => run_keys(keys),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("L1GATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn run_serve(command: ServeCommand) -> anyhow::Result<()> {
    let file = match &command.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
    let settings = command.settings.or(file).resolve()?;
    if command.print_config {
        println!("{}", toml::to_string_pretty(&settings)?);
        return Ok(());
    }
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let running = l1gate::serve::start(&settings).await?;
        println!(
            "l1gate serving gRPC on {} and HTTP on {}",
            running.grpc_addr, running.http_addr
        );
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        tracing::info!("shutting down");
        running.shutdown();
        Ok(())
    })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn run_keys(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Add { account, keys_file } => {
            let mut file = KeysFile::load(&keys_file)?;
            let (key, stored) = file.add_key(&account, now_ms())?;
            file.save(&keys_file)?;
            println!(
                "created key {} for account {account} in {} (only its SHA-256 is stored; this is the only time it is shown)",
                stored.id,
                keys_file.display()
            );
            println!("{key}");
        }
        KeysCommand::List { keys_file } => {
            let file = KeysFile::load(&keys_file)?;
            for account in &file.accounts {
                for key in &account.keys {
                    let state = if key.revoked { "revoked" } else { "active" };
                    println!(
                        "{}\t{}\t{state}\tcreated_ms={}",
                        account.name, key.id, key.created_ms
                    );
                }
            }
        }
        KeysCommand::Revoke { key_id, keys_file } => {
            let mut file = KeysFile::load(&keys_file)?;
            file.revoke(&key_id)?;
            file.save(&keys_file)?;
            println!("revoked {key_id}");
        }
    }
    Ok(())
}
