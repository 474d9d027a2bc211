//! The `l1gate` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::ServeArgs;

/// l1gate: market-data engine and access layer beside an exchange-chain node.
#[derive(Debug, Parser)]
#[command(name = "l1gate", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the raw feed (and later market streams and HTTP) from a node's
    /// data directory; with no data directory, run the built-in simulator and
    /// serve its output (demo mode).
    Serve(Box<ServeCommand>),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
}

/// `l1gate serve`.
#[derive(Debug, clap::Args)]
pub struct ServeCommand {
    /// TOML config file whose keys are the flag names with `_` (flags and
    /// `L1GATE_*` variables override it).
    #[arg(long, env = "L1GATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Settings.
    #[command(flatten)]
    pub settings: ServeArgs,
}

/// `l1gate keys`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key for an account (created if new). Prints the key once, alone
    /// on the last line of stdout; only its SHA-256 is stored.
    Add {
        /// Account name (A-Z a-z 0-9 _ . -).
        #[arg(long)]
        account: String,
        /// Keys file.
        #[arg(long, env = "L1GATE_KEYS_FILE", value_name = "FILE", default_value = crate::config::DEFAULT_KEYS_FILE)]
        keys_file: PathBuf,
    },
    /// List accounts and key ids (never keys).
    List {
        /// Keys file.
        #[arg(long, env = "L1GATE_KEYS_FILE", value_name = "FILE", default_value = crate::config::DEFAULT_KEYS_FILE)]
        keys_file: PathBuf,
    },
    /// Revoke a key by id; a running server stops accepting it within seconds.
    Revoke {
        /// Key id as printed by `keys add` / `keys list` (`k_…`).
        key_id: String,
        /// Keys file.
        #[arg(long, env = "L1GATE_KEYS_FILE", value_name = "FILE", default_value = crate::config::DEFAULT_KEYS_FILE)]
        keys_file: PathBuf,
    },
}
