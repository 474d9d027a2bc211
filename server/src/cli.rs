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
    /// Serve a node's data directory: the raw feed and market streams over
    /// gRPC, candle and Info lookups, the node gateway, health and metrics
    /// over HTTP; with no data directory, run the built-in simulator and serve
    /// its output (demo mode).
    Serve(Box<ServeCommand>),
    /// Manage API keys.
    Keys(KeysArgs),
    /// Write realistic node output (all sources, by-block and/or streaming
    /// layouts, L4 snapshots) from a seeded exchange simulator.
    Simulate(SimulateCommand),
    /// Fold captured node files offline and print one view's frames, one JSON
    /// object per line, exactly as the market streams would send them.
    Replay(ReplayCommand),
    /// List, search or get the endpoints this deployment offers: chains,
    /// their networks and nodes, with public URLs (`<key>` where the key
    /// goes); l1gate's own exchange chain first.
    Endpoints(Box<EndpointsCommand>),
    /// List what `serve` with the same settings exposes: every gRPC method,
    /// every HTTP route, how each takes the API key, and the upstreams.
    Routes(Box<RoutesCommand>),
    /// Serve every API of the node host from a NATS JetStream bus that
    /// `serve --publish` fills, with no node files: the market starts from
    /// the publisher's newest engine checkpoint; the same keys, limits and
    /// guarantees as the node host (docs/scale-out.md).
    Edge(Box<EdgeCommand>),
    /// Download hour files of the exchange's public, requester-pays S3
    /// archive of node output (`archive fetch`).
    Archive(crate::archive::ArchiveCommand),
    /// The candle store: backfill it from archive hours (`candles import`).
    Candles(CandlesCommand),
}

/// `l1gate candles`.
#[derive(Debug, clap::Args)]
pub struct CandlesCommand {
    /// What to do.
    #[command(subcommand)]
    pub action: CandlesAction,
}

/// `l1gate candles` subcommands.
#[derive(Debug, Subcommand)]
pub enum CandlesAction {
    /// Backfill the candle store from fill hours: archive files (`.lz4`,
    /// `.zst`, `.gz` or plain) or directories in the archive's layout
    /// (`node_fills_by_block/hourly/YYYYMMDD/H.lz4`, and the older
    /// `node_fills`, `node_trades`). Folds only what the store does not hold
    /// yet, from the candle history start on; resumable; refused while a
    /// server holds the store. Ends with a report of hours, blocks, fills,
    /// candles and every gap.
    Import(CandlesImportArgs),
    /// Write one market's candles of one interval over a time range from
    /// the candle store to a Parquet or CSV file (`1s`, `1m`, `5m` as
    /// stored; larger intervals built from them as Info builds them, with
    /// their exact VWAP). Refused while a server holds the store.
    Export(CandlesExportArgs),
}

/// Where the candle store is, read as `serve` reads it.
#[derive(Debug, Clone, clap::Args)]
pub struct CandleStoreArgs {
    /// TOML config file, as for `serve` (`state_dir`,
    /// `candle_history_start`).
    #[arg(long, env = "L1GATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of the server's own state, holding the candle store.
    /// Default `l1gate-state`.
    #[arg(long, env = "L1GATE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The oldest bucket stored, ISO-8601 UTC. Default 2025-07-27T08:00:00Z.
    #[arg(long, env = "L1GATE_CANDLE_HISTORY_START", value_name = "TIME")]
    pub candle_history_start: Option<String>,
}

impl CandleStoreArgs {
    /// The settings these name (with the config file's below them).
    ///
    /// # Errors
    /// [`crate::config::ConfigError`]: a config file that cannot be read,
    /// or a setting that does not resolve.
    pub fn settings(&self) -> Result<crate::config::Settings, crate::config::ConfigError> {
        let file = crate::config::load_optional(self.config.as_deref())?;
        let given = crate::config::ServeArgs {
            state_dir: self.state_dir.clone(),
            candle_history_start: self.candle_history_start.clone(),
            ..crate::config::ServeArgs::default()
        };
        given.or(file).resolve()
    }
}

/// `l1gate candles export`.
#[derive(Debug, clap::Args)]
pub struct CandlesExportArgs {
    /// Market, as the store names it (`BTC`, `@107`, `xyz:NVDA`).
    #[arg(long, value_name = "COIN")]
    pub market: String,
    /// Interval: 1s 1m 3m 5m 15m 30m 1h 2h 4h 8h 12h 1d 3d 1w 1M.
    #[arg(long, value_name = "I")]
    pub interval: String,
    /// Start: ISO-8601 UTC (`2025-07-27T08:00:00Z`) or Unix ms; the bucket
    /// holding it is the first.
    #[arg(long, value_name = "TIME")]
    pub from: String,
    /// End (exclusive): ISO-8601 UTC or Unix ms. Default: now.
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Parquet)]
    pub format: OutputFormat,
    /// The file to write (named only once whole).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Where the candle store is.
    #[command(flatten)]
    pub store: CandleStoreArgs,
}

impl CandlesExportArgs {
    /// `--from` or `--to` as Unix ms.
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn time(flag: &str, text: &str) -> Result<i64, String> {
        match text.parse::<i64>() {
            Ok(ms) if ms >= 0 => Ok(ms),
            Ok(_) => Err(format!("{flag}: Unix ms before 1970")),
            Err(_) => feeds::time::parse_iso8601_ms(text).map_err(|e| format!("{flag}: {e}")),
        }
    }
}

/// `l1gate candles import`.
#[derive(Debug, clap::Args)]
pub struct CandlesImportArgs {
    /// Hour files, or directories searched for them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Where the candle store is.
    #[command(flatten)]
    pub store: CandleStoreArgs,
    /// No progress bar (the report is printed either way).
    #[arg(long)]
    pub quiet: bool,
    /// Commit to the store at least this often (durable progress: a killed
    /// import resumes from its last commit). Default 10000.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub commit_every_ms: u64,
}

/// `l1gate edge`.
#[derive(Debug, clap::Args)]
pub struct EdgeCommand {
    /// The bus: `nats://HOST:PORT`, `nats://USER:PASS@HOST:PORT` or
    /// `nats://TOKEN@HOST:PORT`.
    #[arg(long = "nats", env = "L1GATE_NATS_URL", value_name = "URL")]
    pub nats: String,

    /// TOML config file, as for `serve` (keys, limits, addresses,
    /// `state_dir`; `data` and `publish_url` do not apply).
    #[arg(long, env = "L1GATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The same settings as `serve` (limits, access, connection limits,
    /// upstreams, `--state-dir` for the edge's copy of the bus, its
    /// checkpoint and its candle store).
    #[command(flatten)]
    pub settings: ServeArgs,
}

/// `l1gate endpoints`.
#[derive(Debug, clap::Args)]
pub struct EndpointsCommand {
    /// What to show.
    #[command(subcommand)]
    pub action: EndpointsAction,

    /// Only chains of this ecosystem.
    #[arg(long, global = true, value_name = "ECOSYSTEM", value_parser = clap::builder::PossibleValuesParser::new(
        ["evm", "substrate", "cosmos", "move", "hyperliquid", "other"]
    ))]
    pub ecosystem: Option<String>,

    /// Only networks whose id or name contains this (case-insensitive):
    /// `mainnet`, `testnet`, or a name.
    #[arg(long, global = true, value_name = "NETWORK")]
    pub network: Option<String>,

    /// Only nodes of this type (case-insensitive).
    #[arg(long, global = true, value_name = "TYPE", ignore_case = true, value_parser = clap::builder::PossibleValuesParser::new(
        ["full", "archive"]
    ))]
    pub node_type: Option<String>,

    /// Only this protocol's URLs.
    #[arg(long, global = true, value_name = "PROTOCOL", value_parser = clap::builder::PossibleValuesParser::new(
        ["https", "wss"]
    ))]
    pub protocol: Option<String>,

    /// Print JSON (`{"ok":true,"data":[…],"meta":{…}}`) instead of a table.
    #[arg(long, global = true)]
    pub json: bool,

    /// TOML config file, as for `serve` (its `[[chains]]`).
    #[arg(long, global = true, env = "L1GATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Also write the API key and the URLs shown, the key in place, into
    /// this environment file (`NAME=value` lines, mode 0600, replaced
    /// atomically; other lines kept). Needs `--key-env` or `--key-stdin`.
    #[arg(long, global = true, value_name = "PATH")]
    pub env_file: Option<PathBuf>,

    /// For `--env-file`: the environment variable holding the API key (a
    /// key is never a command-line argument: those show in process lists).
    #[arg(long, global = true, value_name = "VAR", conflicts_with = "key_stdin")]
    pub key_env: Option<String>,

    /// For `--env-file`: read the API key from the first line of standard
    /// input.
    #[arg(long, global = true)]
    pub key_stdin: bool,

    /// The same settings as `serve`.
    #[command(flatten)]
    pub settings: ServeArgs,
}

/// `l1gate endpoints list | search | get`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum EndpointsAction {
    /// Every chain.
    List,
    /// Chains whose name, or networks whose id or name, contain a keyword
    /// (case-insensitive).
    Search {
        /// The keyword.
        keyword: String,
    },
    /// One chain, by id or name (case-insensitive).
    Get {
        /// The chain.
        chain: String,
    },
}

/// `l1gate routes`.
#[derive(Debug, clap::Args)]
pub struct RoutesCommand {
    /// TOML config file, as for `serve`.
    #[arg(long, env = "L1GATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,

    /// The same settings as `serve`.
    #[command(flatten)]
    pub settings: ServeArgs,
}

/// `l1gate replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayCommand {
    /// Node data directory (containing `hl/data`, or `hl/data` itself).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Starting L4 snapshot; default: the newest snapshot in the data
    /// directory at or before --from-block, else an empty book.
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Start from this engine checkpoint (`state_dir/checkpoints/…`, or one
    /// an edge copied from the bus) instead of a snapshot: the fold goes on
    /// after its block.
    #[arg(long, value_name = "FILE", conflicts_with = "snapshot")]
    pub checkpoint: Option<PathBuf>,
    /// First block to print frames for.
    #[arg(long, value_name = "N")]
    pub from_block: Option<u64>,
    /// Last block to fold.
    #[arg(long, value_name = "M")]
    pub to_block: Option<u64>,
    /// The view to print.
    #[arg(long, value_name = "VIEW", value_parser = clap::builder::PossibleValuesParser::new(
        engine::views::registry::ViewKind::ALL.iter().map(|view| view.name())
    ))]
    pub view: String,
    /// Coins (comma-separated or repeated), exact and case-sensitive.
    #[arg(long, value_delimiter = ',', value_name = "COIN")]
    pub coins: Vec<String>,
    /// Users (0x addresses, case-insensitive).
    #[arg(long, value_delimiter = ',', value_name = "ADDRESS")]
    pub users: Vec<String>,
    /// Builder address (fills view).
    #[arg(long, value_name = "ADDRESS", conflicts_with = "liquidations")]
    pub builder: Option<String>,
    /// Liquidation fills (fills view), of the liquidated `--users` if any.
    #[arg(long)]
    pub liquidations: bool,
    /// L2 levels per side (default 20; 0 = full depth).
    #[arg(long, value_name = "N")]
    pub n_levels: Option<u32>,
    /// L2 price aggregation to 2-5 significant figures.
    #[arg(long, value_name = "N")]
    pub n_sig_figs: Option<u32>,
    /// L2 aggregation mantissa: 1, 2 or 5 (with --n-sig-figs 5).
    #[arg(long, value_name = "M")]
    pub mantissa: Option<u64>,
    /// L2 book: suppress frames whose levels did not change.
    #[arg(long)]
    pub strict: bool,
    /// Exit with an error when the files held anything the fold could not
    /// take as written: lines that are not block envelopes, duplicate or
    /// backwards lines, undecodable events, missing blocks.
    #[arg(long)]
    pub fail_on_bad_data: bool,
    /// Candle interval: 1s 1m 3m 5m 15m 30m 1h 2h 4h 8h 12h 1d 3d 1w 1M.
    #[arg(long, value_name = "I")]
    pub interval: Option<String>,
    /// Output format: the frames as JSON lines, or the view's table (one
    /// row per level, order, diff, trade, fill, candle or mid; schemas in
    /// docs/replay-and-simulate.md) as CSV or Parquet.
    #[arg(long, value_enum, default_value_t = OutputFormat::Jsonl)]
    pub format: OutputFormat,
    /// Write to this file (or, with --partition day, this directory)
    /// instead of standard output; needed for csv and parquet. A file is
    /// named only once it is whole: a replay cut short leaves none.
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Split the output into one file per UTC day of the blocks' times,
    /// `VIEW-YYYY-MM-DD.EXT` in the --out directory.
    #[arg(long, value_enum, default_value_t = OutputPartition::None, requires = "out")]
    pub partition: OutputPartition,
}

/// `--format` of `replay` and `candles export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object per frame and line (replay only).
    Jsonl,
    /// CSV with a header row.
    Csv,
    /// Parquet (zstd).
    Parquet,
}

impl From<OutputFormat> for export::Format {
    fn from(format: OutputFormat) -> Self {
        match format {
            OutputFormat::Jsonl => export::Format::Jsonl,
            OutputFormat::Csv => export::Format::Csv,
            OutputFormat::Parquet => export::Format::Parquet,
        }
    }
}

/// `--partition` of `replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputPartition {
    /// One file.
    None,
    /// One file per UTC day.
    Day,
}

impl From<OutputPartition> for export::Partition {
    fn from(partition: OutputPartition) -> Self {
        match partition {
            OutputPartition::None => export::Partition::None,
            OutputPartition::Day => export::Partition::Day,
        }
    }
}

/// `l1gate simulate`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("length").required(true).args(["blocks", "duration"])))]
pub struct SimulateCommand {
    /// Output directory (node files go under `OUT/hl/data`, snapshots under
    /// `OUT/l4_snapshots`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// PRNG seed: the same seed and options give byte-identical output.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Node output layout.
    #[arg(long, value_enum, default_value_t = SimMode::ByBlock)]
    pub mode: SimMode,
    /// Number of blocks to write.
    #[arg(long, value_name = "N")]
    pub blocks: Option<u64>,
    /// Simulated block time to cover, e.g. `90s`, `10m`, `1h`.
    #[arg(long, value_name = "D", value_parser = common::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Pace blocks in real time (block times start now and follow the wall
    /// clock) and flush every line, for tailing.
    #[arg(long)]
    pub live: bool,
    /// Activity and book depth as a fraction of mainnet (1.0 = mainnet-like).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Small test profile (a dozen coins) instead of the mainnet profile.
    #[arg(long)]
    pub small: bool,
    /// Blocks between L4 snapshot files (0 = none; the starting state is
    /// always written when snapshots are on).
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_every: u64,
}

/// Node output layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SimMode {
    /// `<source>_by_block`: one line per block per source.
    ByBlock,
    /// `<source>_streaming`: one event per line.
    Streaming,
    /// Both layouts side by side.
    Both,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_quota_takes_caps_with_a_period_or_clear_alone() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["l1gate", "keys", "quota", "--key-id", "k_0123456789ab"]
                    .iter()
                    .chain(args),
            )
        };
        let Ok(Cli {
            command:
                Command::Keys(KeysArgs {
                    command:
                        KeysCommand::Quota {
                            requests,
                            bytes,
                            period,
                            clear,
                            ..
                        },
                    ..
                }),
        }) = parse(&["--requests", "1000", "--bytes", "10GB", "--period", "day"])
        else {
            panic!("parses");
        };
        assert_eq!(
            (requests, bytes, period, clear),
            (
                Some(1_000),
                Some(10_000_000_000),
                Some(access::quota::Period::Day),
                false
            )
        );
        assert!(parse(&["--clear"]).is_ok());
        assert!(parse(&[]).is_err(), "nothing to change");
        assert!(parse(&["--bytes", "5MiB", "--period", "month"]).is_ok());
        // A cap needs a period, a period needs a cap, clear stands alone.
        assert!(parse(&["--requests", "10"]).is_err());
        assert!(parse(&["--period", "day"]).is_err());
        assert!(parse(&["--clear", "--period", "day", "--requests", "1"]).is_err());
        assert!(parse(&["--bytes", "10XB", "--period", "day"]).is_err());
        assert!(parse(&["--requests", "1", "--period", "week"]).is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}

/// `l1gate keys [--keys-file FILE] COMMAND`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    /// Keys file (accepted before or after the subcommand).
    #[arg(long, global = true, env = "L1GATE_KEYS_FILE", value_name = "FILE", default_value = crate::config::DEFAULT_KEYS_FILE)]
    pub keys_file: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: KeysCommand,
}

/// `l1gate keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key for an account (created if new). Prints the key once, alone
    /// on the last line of stdout; only its SHA-256 is stored.
    Add {
        /// Account name (A-Z a-z 0-9 _ . -).
        #[arg(long)]
        account: String,
    },
    /// List accounts, key ids (never keys), their state (with pending
    /// rotations), IP allow-lists and quotas.
    List,
    /// Revoke a key by id; a running server stops accepting it within seconds.
    Revoke {
        /// Key id as printed by `keys add` / `keys list` (`k_…`).
        key_id: String,
    },
    /// Add networks to a key's IP allow-list; once it has one, requests from
    /// other source addresses get HTTP 403 / gRPC PERMISSION_DENIED. A running
    /// server applies the change within seconds.
    Allow {
        /// Key id as printed by `keys add` / `keys list` (`k_…`).
        #[arg(long, value_name = "ID")]
        key_id: String,
        /// Network in CIDR form (`10.0.0.0/8`, `2001:db8::/32`) or a single
        /// address; repeat for several.
        #[arg(long, value_name = "CIDR", required = true)]
        cidr: Vec<String>,
    },
    /// Remove networks from a key's IP allow-list; an emptied list leaves the
    /// key usable from any address.
    Disallow {
        /// Key id as printed by `keys add` / `keys list` (`k_…`).
        #[arg(long, value_name = "ID")]
        key_id: String,
        /// Network to remove, as given to `keys allow`; repeat for several.
        #[arg(long, value_name = "CIDR", required = true)]
        cidr: Vec<String>,
    },
    /// Set an account's limits, pooled across all of its keys; unset ones
    /// follow the server defaults. A running server applies them within
    /// seconds.
    Limits {
        /// Account name.
        #[arg(long)]
        account: String,
        /// HTTP requests and unary gRPC calls per second.
        #[arg(long, value_name = "N")]
        requests_per_second: Option<u32>,
        /// Burst allowance of that rate.
        #[arg(long, value_name = "N")]
        request_burst: Option<u32>,
        /// Concurrent gRPC streams.
        #[arg(long, value_name = "N")]
        max_streams: Option<u32>,
        /// Return every limit to the server default first.
        #[arg(long = "default")]
        reset: bool,
    },
    /// Set an account's role: `admin` accounts may also open the status
    /// page (`/{key}/status`); `user` is the default.
    Role {
        /// Account name.
        #[arg(long)]
        account: String,
        /// The role.
        #[arg(value_enum)]
        role: access::keys::Role,
    },
    /// Replace a key: prints a new key for the same account (with the old
    /// key's allow-list and quota) once, alone on the last line of stdout,
    /// and records on the old key that it was rotated. The old key keeps
    /// working until the grace period ends; then it is refused with a
    /// message saying it was rotated, and its open streams end.
    Rotate {
        /// Key id of the key to replace (`k_…`).
        #[arg(long, value_name = "ID")]
        key_id: String,
        /// How long the old key keeps working: `30m`, `24h`, `7d`; `0s`
        /// refuses it at once.
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = common::parse_duration)]
        grace: std::time::Duration,
    },
    /// Set or clear a key's usage quota: at most N admitted requests and/or
    /// N bytes sent to the client per UTC calendar day or month. Replaces
    /// the key's quota as a whole. A running server applies it within
    /// seconds.
    #[command(group(
        clap::ArgGroup::new("caps").args(["requests", "bytes"]).multiple(true)
    ))]
    #[command(group(
        clap::ArgGroup::new("change").args(["requests", "bytes", "clear"]).multiple(true).required(true)
    ))]
    Quota {
        /// Key id (`k_…`).
        #[arg(long, value_name = "ID")]
        key_id: String,
        /// Admitted requests per period (HTTP requests, gRPC calls and
        /// streams opened, WebSocket connections, subscribes and posts).
        #[arg(long, value_name = "N", requires = "period")]
        requests: Option<u64>,
        /// Bytes sent to the client per period: a count or a size such as
        /// `10GB` or `512MiB`.
        #[arg(long, value_name = "N|SIZE", requires = "period", value_parser = access::quota::parse_size)]
        bytes: Option<u64>,
        /// The period usage is counted over (UTC calendar).
        #[arg(long, value_enum, requires = "caps")]
        period: Option<access::quota::Period>,
        /// Remove the key's quota.
        #[arg(long, conflicts_with_all = ["requests", "bytes", "period"])]
        clear: bool,
    },
}
