//! Settings for `l1gate serve`: every knob is a command-line flag, an
//! `L1GATE_*` environment variable and a key of the TOML config file, in that
//! order of precedence, over built-in defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

pub use market::grpc::raw_feed::RawFeedSettings;

/// Default gRPC listen address.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:50051";
/// Default HTTP listen address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:8080";
/// Default keys file.
pub const DEFAULT_KEYS_FILE: &str = "l1gate-keys.toml";
/// Default state directory (the candle store).
pub const DEFAULT_STATE_DIR: &str = "l1gate-state";
/// Default freshness bound of `/healthz`: a node whose newest block is
/// 30 s old is not keeping up with the chain.
pub const DEFAULT_MAX_DATA_AGE: Duration = Duration::from_secs(30);
/// Largest HTTP answer compressed by default. Compression runs on the
/// runtime's workers, beside the streams' senders: gzip at its default
/// level takes JSON at about 35 MB/s on the 2-core benchmark machine, so
/// this much is some 7 ms of a worker, while a market maker's 4.8 MB
/// `openOrders` answer would be about 140 ms, once per request, at a key's
/// whole rate.
pub const HTTP_COMPRESS_MAX_BYTES: u64 = 256 * 1024;

/// The raw knobs as given by flags / environment / config file. Every field
/// is optional so that the three layers can be merged; see [`Settings`] for
/// the resolved values and their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// Node data directory (containing `hl/data`, or the `hl/data` directory
    /// itself). Omitted: run the built-in simulator and serve its output.
    #[arg(long, env = "L1GATE_DATA", value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Keys file (accounts and SHA-256 hashes of their API keys).
    #[arg(long, env = "L1GATE_KEYS_FILE", value_name = "FILE")]
    pub keys_file: Option<PathBuf>,

    /// Serve although the keys file does not exist (every request is then
    /// refused until a key is added; the file is watched). Default false:
    /// a missing keys file is a start-up error.
    #[arg(long, env = "L1GATE_ALLOW_NO_KEYS", value_name = "BOOL")]
    pub allow_no_keys: Option<bool>,

    /// gRPC listen address.
    #[arg(long, env = "L1GATE_GRPC_ADDR", value_name = "HOST:PORT")]
    pub grpc_addr: Option<SocketAddr>,

    /// HTTP listen address (health, metrics, Info lookup, node gateway).
    #[arg(long, env = "L1GATE_HTTP_ADDR", value_name = "HOST:PORT")]
    pub http_addr: Option<SocketAddr>,

    /// Raw feed: a stream with no new record in the feed for this long ends
    /// with UNAVAILABLE (not used by order-book snapshots). Default 30000.
    #[arg(long, env = "L1GATE_IDLE_TIMEOUT_MS", value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,

    /// Raw feed: concurrent historical replays (streams with a start
    /// position still catching up, filtered or not). Beyond it new ones get
    /// RESOURCE_EXHAUSTED. Default 16.
    #[arg(long, env = "L1GATE_MAX_REPLAYS", value_name = "N")]
    pub max_replays: Option<usize>,

    /// Raw feed: a live subscriber further than this many bytes behind the
    /// newest record ends with DEADLINE_EXCEEDED. Default 268435456 (256 MiB).
    #[arg(long, env = "L1GATE_MAX_LAG_BYTES", value_name = "BYTES")]
    pub max_lag_bytes: Option<u64>,

    /// Raw feed: a subscriber that takes no record for this long ends with
    /// DEADLINE_EXCEEDED. Default 10000.
    #[arg(long, env = "L1GATE_SEND_TIMEOUT_MS", value_name = "MS")]
    pub send_timeout_ms: Option<u64>,

    /// Backup poll: how often the node files are listed and checked for
    /// growth when no change notification arrives (a change to a file wakes
    /// the readers at once; this only catches a lost notification, or
    /// serves filesystems that send none). Default 1000.
    #[arg(long, env = "L1GATE_POLL_INTERVAL_MS", value_name = "MS")]
    pub poll_interval_ms: Option<u64>,

    /// Demo mode: simulator seed. Default 1.
    #[arg(long, env = "L1GATE_DEMO_SEED", value_name = "SEED")]
    pub demo_seed: Option<u64>,

    /// Demo mode: simulator scale as a fraction of mainnet. Default 0.05.
    #[arg(long, env = "L1GATE_DEMO_SCALE", value_name = "X")]
    #[serde(default, deserialize_with = "number_or_text")]
    pub demo_scale: Option<String>,

    /// Default request rate per account (HTTP requests and unary gRPC calls
    /// per second, pooled across the account's keys); the keys file can set
    /// it per account. Default 50.
    #[arg(long, env = "L1GATE_REQUESTS_PER_SECOND", value_name = "N")]
    pub requests_per_second: Option<u32>,

    /// Default burst of the per-account request rate. Default 100.
    #[arg(long, env = "L1GATE_REQUEST_BURST", value_name = "N")]
    pub request_burst: Option<u32>,

    /// Default cap of concurrent gRPC streams per account. Default 16.
    #[arg(long, env = "L1GATE_MAX_STREAMS", value_name = "N")]
    pub max_streams: Option<u32>,

    /// Link sent with every HTTP 403 / gRPC PERMISSION_DENIED for a source
    /// address outside a key's IP allow-list (http:// or https://).
    #[arg(long, env = "L1GATE_ALLOW_LIST_URL", value_name = "URL")]
    pub allow_list_url: Option<String>,

    /// Market streaming: frames (one block's worth per view key) each view
    /// ring retains before a slow subscriber lags; rounded up to a power of
    /// two. Default 1024.
    #[arg(long, env = "L1GATE_MARKET_RING_CAPACITY", value_name = "N")]
    pub market_ring_capacity: Option<usize>,
    /// Market engine: a block is folded at the latest this long after its
    /// first line arrived, even if one of the streams it joins (order
    /// statuses, raw book diffs, fills) has not written its line yet.
    /// Default 1000.
    #[arg(long, env = "L1GATE_ALIGN_GRACE_MS", value_name = "MS")]
    pub align_grace_ms: Option<u64>,
    /// Whether `StreamCandle` is served (candles folded for every coin and
    /// interval). Default true; false makes `StreamCandle` answer
    /// FAILED_PRECONDITION.
    #[arg(long, env = "L1GATE_CANDLE_STREAMING", value_name = "BOOL")]
    pub candle_streaming: Option<bool>,
    /// Whether market frames (`MarketStreaming`) are sent compressed to a
    /// client that accepts zstd or gzip. Default false: each subscriber's
    /// copy of a frame is compressed on its own (docs/market-streaming.md).
    #[arg(long, env = "L1GATE_MARKET_COMPRESSION", value_name = "BOOL")]
    pub market_compression: Option<bool>,
    /// Largest HTTP answer compressed for a client that accepts zstd or
    /// gzip; larger ones go as they are (0: none is compressed). Default
    /// 262144 (docs/configuration.md).
    #[arg(long, env = "L1GATE_HTTP_COMPRESS_MAX_BYTES", value_name = "BYTES")]
    pub http_compress_max_bytes: Option<u64>,
    /// Whether raw-feed records are sent gzip-compressed to a client that
    /// accepts gzip, as gRPC's C-core (Python `grpcio`) and Java clients do
    /// without being asked; zstd goes to clients that accept it either way.
    /// Default true (docs/raw-feed.md).
    #[arg(long, env = "L1GATE_RAW_FEED_GZIP", value_name = "BOOL")]
    pub raw_feed_gzip: Option<bool>,
    /// Minimum block time between two frames of the same live candle.
    /// Default 500.
    #[arg(long, env = "L1GATE_CANDLE_THROTTLE_MS", value_name = "MS")]
    pub candle_throttle_ms: Option<u64>,
    /// Market streams answer (and end with) UNAVAILABLE while the newest
    /// folded block is older than this. Default 30000 (the node freshness
    /// guide); 0 turns the check off, e.g. to serve captured files.
    #[arg(long, env = "L1GATE_MARKET_STALE_AFTER_MS", value_name = "MS")]
    pub market_stale_after_ms: Option<u64>,
    /// How long a subscription or an Info request that arrives while the
    /// engine is still catching up with the node's files waits for it
    /// before it is refused as retryable (UNAVAILABLE, HTTP 503, WebSocket
    /// close 1013). Default 5000; 0 refuses at once.
    #[arg(long, env = "L1GATE_READY_WAIT_MS", value_name = "MS")]
    pub ready_wait_ms: Option<u64>,
    /// A market stream whose next frame is this far behind the newest
    /// folded block is lagging: incremental views end with ABORTED,
    /// snapshot views re-open on the newest state. Default 5000; 0 turns the
    /// time bound off (a lapped ring still counts).
    #[arg(long, env = "L1GATE_MARKET_MAX_LAG_MS", value_name = "MS")]
    pub market_max_lag_ms: Option<u64>,
    /// L2 book / L2 diff coalescing window in block time: at most one frame
    /// per window per stream. Default 0 (every block).
    #[arg(long, env = "L1GATE_L2_COALESCE_MS", value_name = "MS")]
    pub l2_coalesce_ms: Option<u64>,

    /// Info source (`http://` or `https://`): answers `POST /info` and feeds
    /// StreamAllMids / StreamActiveAssetCtx, e.g. the node's local info
    /// server `http://127.0.0.1:3001/info` (node run with `--serve-info`).
    /// Default: none (meta/spotMeta derived from the data, mids from books).
    #[arg(long, env = "L1GATE_INFO_URL", value_name = "URL")]
    pub info_url: Option<String>,

    /// How long `meta`, `spotMeta` and `perpDexs` answers are cached.
    /// Default 2000.
    #[arg(long, env = "L1GATE_INFO_CACHE_MS", value_name = "MS")]
    pub info_cache_ms: Option<u64>,

    /// How often the Info source is polled for `allMids` /
    /// `metaAndAssetCtxs` while someone streams them. Default 1000.
    #[arg(long, env = "L1GATE_INFO_POLL_INTERVAL_MS", value_name = "MS")]
    pub info_poll_interval_ms: Option<u64>,

    /// Chain node REST/GraphQL API (`http://` or `https://`) that `/{key}/v1/...` is
    /// relayed to. Default: none (those routes answer 503).
    #[arg(long, env = "L1GATE_NODE_URL", value_name = "URL")]
    pub node_url: Option<String>,
    /// A CA bundle (PEM) that `https://` upstreams (the Info source, the
    /// node gateway's REST, GraphQL and JSON-RPC) are verified against,
    /// beside the system's root certificates.
    #[arg(long, env = "L1GATE_UPSTREAM_CA_FILE", value_name = "PEM")]
    pub upstream_ca_file: Option<PathBuf>,

    /// Longest exchange with the Info source or the node (connect, request
    /// and whole response). Default 10000.
    #[arg(long, env = "L1GATE_UPSTREAM_TIMEOUT_MS", value_name = "MS")]
    pub upstream_timeout_ms: Option<u64>,

    /// Longest `wait_by_hash` exchange with a node (the node itself waits
    /// for the transaction before answering). Default 60000.
    #[arg(long, env = "L1GATE_NODE_WAIT_TIMEOUT_MS", value_name = "MS")]
    pub node_wait_timeout_ms: Option<u64>,

    /// How long a network's ledger info (`GET /v1`) is cached: one node
    /// request per window however many callers. 2000–5000, default 3000.
    #[arg(long, env = "L1GATE_LEDGER_CACHE_MS", value_name = "MS")]
    pub ledger_cache_ms: Option<u64>,

    /// Directory of the server's own state (the candle store). Default
    /// `l1gate-state`; demo mode uses its temporary directory unless set.
    #[arg(long, env = "L1GATE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Engine checkpoints (`state_dir/checkpoints/`, what a restart resumes
    /// from): one every this many folded blocks. Default 10000; with
    /// `checkpoint_every_ms` also 0, no checkpoint is written.
    #[arg(long, env = "L1GATE_CHECKPOINT_EVERY_BLOCKS", value_name = "N")]
    pub checkpoint_every_blocks: Option<u64>,
    /// Engine checkpoints: also one once this much time passed since the
    /// last, if a block was folded since. Default 600000 (10 min); 0 = no
    /// time bound.
    #[arg(long, env = "L1GATE_CHECKPOINT_EVERY_MS", value_name = "MS")]
    pub checkpoint_every_ms: Option<u64>,
    /// Engine checkpoints: how many of the newest are kept. Default 3.
    #[arg(long, env = "L1GATE_CHECKPOINT_KEEP", value_name = "N")]
    pub checkpoint_keep: Option<usize>,

    /// Candle lookups: the oldest bucket served, ISO-8601 UTC; earlier
    /// buckets are 404 and trades before it are not stored. Default
    /// 2025-07-27T08:00:00Z.
    #[arg(long, env = "L1GATE_CANDLE_HISTORY_START", value_name = "TIME")]
    pub candle_history_start: Option<String>,

    /// `/healthz` answers 503 when the newest block time of every feed is
    /// further than this behind the wall clock. Default 30000.
    #[arg(long, env = "L1GATE_MAX_DATA_AGE_MS", value_name = "MS")]
    pub max_data_age_ms: Option<u64>,

    /// Connections open at once over both edges; more are closed as soon as
    /// accepted. Default: the process's open-file limit minus 256 (kept for
    /// the node's files, the engine and accepting).
    #[arg(long, env = "L1GATE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections open at once from one source address, over both edges.
    /// Default: a quarter of `max_connections`, at most 1000.
    #[arg(long, env = "L1GATE_MAX_CONNECTIONS_PER_IP", value_name = "N")]
    pub max_connections_per_ip: Option<usize>,
    /// HTTP: a request's headers must arrive within this. Default 10000.
    #[arg(long, env = "L1GATE_HTTP_HEADER_TIMEOUT_MS", value_name = "MS")]
    pub http_header_timeout_ms: Option<u64>,
    /// HTTP: a connection on which nothing moved this long, with no request
    /// being answered, is closed. Default 60000.
    #[arg(long, env = "L1GATE_HTTP_IDLE_TIMEOUT_MS", value_name = "MS")]
    pub http_idle_timeout_ms: Option<u64>,
    /// gRPC and WebSocket: a connection that sent nothing this long is sent
    /// a PING (HTTP/2, or a WebSocket Ping frame), and closed when nothing
    /// answers within as long again. Default 10000.
    #[arg(long, env = "L1GATE_KEEPALIVE_MS", value_name = "MS")]
    pub keepalive_ms: Option<u64>,

    /// TLS on both listen addresses: the certificate chain (PEM, the
    /// server's certificate first). With `tls_key_file`; a file replaced on
    /// disk is picked up by new connections without a restart.
    #[arg(long, env = "L1GATE_TLS_CERT_FILE", value_name = "PEM")]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "L1GATE_TLS_KEY_FILE", value_name = "PEM")]
    pub tls_key_file: Option<PathBuf>,

    /// The public base URL of the HTTP address (API, WebSocket), as
    /// clients reach it through the deployment's names and proxies; shown
    /// by `l1gate endpoints`. Default `http://` (`https://` with TLS) and
    /// the HTTP listen address.
    #[arg(long, env = "L1GATE_PUBLIC_HTTP_URL", value_name = "URL")]
    pub public_http_url: Option<String>,
    /// The public URL of the gRPC address. Default `http://` (`https://`
    /// with TLS) and the gRPC listen address.
    #[arg(long, env = "L1GATE_PUBLIC_GRPC_URL", value_name = "URL")]
    pub public_grpc_url: Option<String>,
    /// Which network of the exchange chain the node follows (`mainnet`,
    /// `testnet`), as `l1gate endpoints` names it. Default `mainnet`.
    #[arg(long, env = "L1GATE_CHAIN_NETWORK", value_name = "NAME")]
    pub chain_network: Option<String>,
    /// Scale-out: also append every record read from the node's files to
    /// this NATS JetStream bus, one stream per feed (`nats://HOST:PORT`,
    /// `nats://USER:PASS@HOST:PORT` or `nats://TOKEN@HOST:PORT`; see
    /// docs/scale-out.md). Default: none. An unreachable bus does not stop
    /// serving: publishing retries and resumes where the streams end.
    #[arg(long = "publish", env = "L1GATE_PUBLISH_URL", value_name = "URL")]
    pub publish_url: Option<String>,
    /// Scale-out: how long the bus keeps each record, counted from when it
    /// was published: `30m`, `24h`, `7d`. Default 24h.
    #[arg(long, env = "L1GATE_PUBLISH_MAX_AGE", value_name = "DURATION")]
    pub publish_max_age: Option<String>,
    /// Scale-out: the most bytes each feed's stream keeps (oldest records
    /// go first): a count or a size such as `4GiB`; 0 = no size bound.
    /// JetStream reserves it for each of the six streams. Default 4GiB.
    #[arg(long, env = "L1GATE_PUBLISH_MAX_BYTES", value_name = "SIZE")]
    #[serde(default, deserialize_with = "number_or_text")]
    pub publish_max_bytes: Option<String>,
    /// The other chains this deployment offers, with their networks and
    /// nodes (`[[chains]]`, config file only; see docs/endpoints.md).
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<gateway::registry::ChainConfig>,
}

impl ServeArgs {
    /// Fills every knob unset here from `lower` (flags/env over file).
    #[must_use]
    pub fn or(self, lower: ServeArgs) -> ServeArgs {
        ServeArgs {
            data: self.data.or(lower.data),
            keys_file: self.keys_file.or(lower.keys_file),
            allow_no_keys: self.allow_no_keys.or(lower.allow_no_keys),
            grpc_addr: self.grpc_addr.or(lower.grpc_addr),
            http_addr: self.http_addr.or(lower.http_addr),
            idle_timeout_ms: self.idle_timeout_ms.or(lower.idle_timeout_ms),
            max_replays: self.max_replays.or(lower.max_replays),
            max_lag_bytes: self.max_lag_bytes.or(lower.max_lag_bytes),
            send_timeout_ms: self.send_timeout_ms.or(lower.send_timeout_ms),
            poll_interval_ms: self.poll_interval_ms.or(lower.poll_interval_ms),
            demo_seed: self.demo_seed.or(lower.demo_seed),
            demo_scale: self.demo_scale.or(lower.demo_scale),
            requests_per_second: self.requests_per_second.or(lower.requests_per_second),
            request_burst: self.request_burst.or(lower.request_burst),
            max_streams: self.max_streams.or(lower.max_streams),
            allow_list_url: self.allow_list_url.or(lower.allow_list_url),
            market_ring_capacity: self.market_ring_capacity.or(lower.market_ring_capacity),
            align_grace_ms: self.align_grace_ms.or(lower.align_grace_ms),
            candle_streaming: self.candle_streaming.or(lower.candle_streaming),
            market_compression: self.market_compression.or(lower.market_compression),
            http_compress_max_bytes: self
                .http_compress_max_bytes
                .or(lower.http_compress_max_bytes),
            raw_feed_gzip: self.raw_feed_gzip.or(lower.raw_feed_gzip),
            candle_throttle_ms: self.candle_throttle_ms.or(lower.candle_throttle_ms),
            market_stale_after_ms: self.market_stale_after_ms.or(lower.market_stale_after_ms),
            ready_wait_ms: self.ready_wait_ms.or(lower.ready_wait_ms),
            market_max_lag_ms: self.market_max_lag_ms.or(lower.market_max_lag_ms),
            l2_coalesce_ms: self.l2_coalesce_ms.or(lower.l2_coalesce_ms),
            info_url: self.info_url.or(lower.info_url),
            info_cache_ms: self.info_cache_ms.or(lower.info_cache_ms),
            info_poll_interval_ms: self.info_poll_interval_ms.or(lower.info_poll_interval_ms),
            node_url: self.node_url.or(lower.node_url),
            upstream_ca_file: self.upstream_ca_file.or(lower.upstream_ca_file),
            upstream_timeout_ms: self.upstream_timeout_ms.or(lower.upstream_timeout_ms),
            node_wait_timeout_ms: self.node_wait_timeout_ms.or(lower.node_wait_timeout_ms),
            ledger_cache_ms: self.ledger_cache_ms.or(lower.ledger_cache_ms),
            state_dir: self.state_dir.or(lower.state_dir),
            checkpoint_every_blocks: self
                .checkpoint_every_blocks
                .or(lower.checkpoint_every_blocks),
            checkpoint_every_ms: self.checkpoint_every_ms.or(lower.checkpoint_every_ms),
            checkpoint_keep: self.checkpoint_keep.or(lower.checkpoint_keep),
            candle_history_start: self.candle_history_start.or(lower.candle_history_start),
            max_data_age_ms: self.max_data_age_ms.or(lower.max_data_age_ms),
            max_connections: self.max_connections.or(lower.max_connections),
            max_connections_per_ip: self.max_connections_per_ip.or(lower.max_connections_per_ip),
            http_header_timeout_ms: self.http_header_timeout_ms.or(lower.http_header_timeout_ms),
            http_idle_timeout_ms: self.http_idle_timeout_ms.or(lower.http_idle_timeout_ms),
            keepalive_ms: self.keepalive_ms.or(lower.keepalive_ms),
            tls_cert_file: self.tls_cert_file.or(lower.tls_cert_file),
            tls_key_file: self.tls_key_file.or(lower.tls_key_file),
            public_http_url: self.public_http_url.or(lower.public_http_url),
            public_grpc_url: self.public_grpc_url.or(lower.public_grpc_url),
            chain_network: self.chain_network.or(lower.chain_network),
            publish_url: self.publish_url.or(lower.publish_url),
            publish_max_age: self.publish_max_age.or(lower.publish_max_age),
            publish_max_bytes: self.publish_max_bytes.or(lower.publish_max_bytes),
            chains: if self.chains.is_empty() {
                lower.chains
            } else {
                self.chains
            },
        }
    }
}

/// Errors loading the config file or resolving settings.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not valid.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong (names the key).
        message: String,
    },
    /// A value is out of range.
    #[error("setting {name}: {message}")]
    Invalid {
        /// The setting's name.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Reads a TOML config file whose keys are the flag names with `_`.
///
/// # Errors
/// [`ConfigError`] when unreadable or when a key is unknown or mistyped.
pub fn load_file(path: &Path) -> Result<ServeArgs, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// The settings of the config file at `path`; none when no file is given.
///
/// # Errors
/// As [`load_file`].
pub fn load_optional(path: Option<&Path>) -> Result<ServeArgs, ConfigError> {
    path.map_or_else(|| Ok(ServeArgs::default()), load_file)
}

/// Resolved settings of `l1gate serve`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Node data directory; `None` = demo mode.
    pub data: Option<PathBuf>,
    /// Keys file.
    pub keys_file: PathBuf,
    /// Whether a missing keys file is served anyway.
    pub allow_no_keys: bool,
    /// gRPC listen address.
    pub grpc_addr: SocketAddr,
    /// HTTP listen address.
    pub http_addr: SocketAddr,
    /// Raw feed limits.
    pub raw_feed: RawFeedSettings,
    /// Demo simulator seed.
    pub demo_seed: u64,
    /// Demo simulator scale.
    pub demo_scale: f64,
    /// Access-control defaults and links.
    pub access: access::AccessSettings,
    /// Frames each market view ring retains.
    pub market_ring_capacity: usize,
    /// How long a block waits at most for a stream's line.
    pub align_grace: Duration,
    /// Whether `StreamCandle` is served.
    pub candle_streaming: bool,
    /// Whether market frames are sent compressed to clients that accept it.
    pub market_compression: bool,
    /// Largest HTTP answer compressed (0: none).
    pub http_compress_max_bytes: u64,
    /// Whether raw-feed records go gzip-compressed to clients that accept it.
    pub raw_feed_gzip: bool,
    /// Minimum block time between two frames of one live candle.
    pub candle_throttle: Duration,
    /// Newest data older than this makes market streams UNAVAILABLE (None =
    /// never).
    pub market_stale_after: Option<Duration>,
    /// How long a request waits for the engine to catch up before it is
    /// refused as retryable.
    pub ready_wait: Duration,
    /// A market stream this far behind the newest block is lagging (None =
    /// only a lapped ring).
    pub market_max_lag: Option<Duration>,
    /// L2 book / L2 diff coalescing window (zero = every block).
    pub l2_coalesce: Duration,
    /// The Info source and the node gateway's upstream.
    pub upstreams: edge::upstream::UpstreamSettings,
    /// Directory of the candle store.
    pub state_dir: PathBuf,
    /// When engine checkpoints are written under `state_dir/checkpoints/`.
    pub checkpoints: engine::checkpoint::CheckpointPolicy,
    /// Oldest candle bucket served, Unix ms.
    pub candle_history_start_ms: i64,
    /// Data older than this makes `/healthz` answer 503.
    pub max_data_age: Duration,
    /// Connection caps over both edges.
    pub connections: access::connections::ConnectionLimits,
    /// The HTTP edge's timeouts.
    pub http_timeouts: edge::listen::HttpTimeouts,
    /// Keepalive of both edges' streaming connections: PING after this
    /// much silence from the client, close when nothing answers this long.
    pub keepalive: Duration,
    /// TLS on both listen addresses, if configured.
    pub tls: Option<edge::tls::TlsFiles>,
    /// Public base URL of the HTTP address.
    pub public_http_url: String,
    /// Public URL of the gRPC address.
    pub public_grpc_url: String,
    /// The exchange chain's network the node follows.
    pub chain_network: String,
    /// The configured chains (checked).
    pub chains: Vec<gateway::registry::ChainConfig>,
    /// Where the node's records are published for edges (`None`: not
    /// published).
    pub publish: Option<bus::settings::PublishSettings>,
}

impl ServeArgs {
    /// Resolves defaults and checks ranges.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the setting.
    pub fn resolve(self) -> Result<Settings, ConfigError> {
        let defaults = RawFeedSettings::default();
        let tls = match (self.tls_cert_file.clone(), self.tls_key_file.clone()) {
            (Some(cert), Some(key)) => Some(edge::tls::TlsFiles { cert, key }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::Invalid {
                    name: "tls_key_file",
                    message: "required with tls_cert_file".into(),
                });
            }
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    name: "tls_cert_file",
                    message: "required with tls_key_file".into(),
                });
            }
        };
        let positive = |name: &'static str, value: Option<u64>, default: Duration| match value {
            Some(0) => Err(ConfigError::Invalid {
                name,
                message: "must be greater than 0".into(),
            }),
            Some(ms) => Ok(Duration::from_millis(ms)),
            None => Ok(default),
        };
        let max_replays = match self.max_replays {
            Some(0) => {
                return Err(ConfigError::Invalid {
                    name: "max_replays",
                    message: "must be greater than 0".into(),
                });
            }
            Some(n) => n,
            None => defaults.max_replays,
        };
        let demo_scale = match &self.demo_scale {
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x <= 100.0)
                .ok_or_else(|| ConfigError::Invalid {
                    name: "demo_scale",
                    message: format!("{text:?} is not a number in (0, 100]"),
                })?,
            None => 0.05,
        };
        let addr = |value: Option<SocketAddr>, default: &str| {
            value.map_or_else(
                || {
                    default.parse().map_err(|_| ConfigError::Invalid {
                        name: "address",
                        message: format!("bad default {default}"),
                    })
                },
                Ok,
            )
        };
        let candle_history_start_ms = match &self.candle_history_start {
            Some(text) => {
                feeds::time::parse_iso8601_ms(text).map_err(|message| ConfigError::Invalid {
                    name: "candle_history_start",
                    message,
                })?
            }
            None => host::candles::DEFAULT_HISTORY_START_MS,
        };
        Ok(Settings {
            data: self.data,
            keys_file: self
                .keys_file
                .unwrap_or_else(|| PathBuf::from(DEFAULT_KEYS_FILE)),
            allow_no_keys: self.allow_no_keys.unwrap_or(false),
            grpc_addr: addr(self.grpc_addr, DEFAULT_GRPC_ADDR)?,
            http_addr: addr(self.http_addr, DEFAULT_HTTP_ADDR)?,
            raw_feed: RawFeedSettings {
                idle_timeout: positive(
                    "idle_timeout_ms",
                    self.idle_timeout_ms,
                    defaults.idle_timeout,
                )?,
                max_replays,
                max_lag_bytes: self.max_lag_bytes.unwrap_or(defaults.max_lag_bytes),
                send_timeout: positive(
                    "send_timeout_ms",
                    self.send_timeout_ms,
                    defaults.send_timeout,
                )?,
                poll_interval: positive(
                    "poll_interval_ms",
                    self.poll_interval_ms,
                    defaults.poll_interval,
                )?,
            },
            demo_seed: self.demo_seed.unwrap_or(1),
            demo_scale,
            market_ring_capacity: self.market_ring_capacity.unwrap_or(1024).max(1),
            align_grace: positive(
                "align_grace_ms",
                self.align_grace_ms,
                Duration::from_secs(1),
            )?,
            candle_streaming: self.candle_streaming.unwrap_or(true),
            market_compression: self.market_compression.unwrap_or(false),
            http_compress_max_bytes: self
                .http_compress_max_bytes
                .unwrap_or(HTTP_COMPRESS_MAX_BYTES),
            raw_feed_gzip: self.raw_feed_gzip.unwrap_or(true),
            candle_throttle: Duration::from_millis(self.candle_throttle_ms.unwrap_or(500)),
            l2_coalesce: Duration::from_millis(self.l2_coalesce_ms.unwrap_or(0)),
            market_stale_after: match self.market_stale_after_ms.unwrap_or(30_000) {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            ready_wait: Duration::from_millis(
                self.ready_wait_ms.unwrap_or(host::engine::READY_WAIT_MS),
            ),
            market_max_lag: match self.market_max_lag_ms.unwrap_or(5_000) {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            state_dir: self
                .state_dir
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            checkpoints: {
                use engine::checkpoint::CheckpointPolicy as Policy;
                Policy {
                    every_blocks: self
                        .checkpoint_every_blocks
                        .unwrap_or(Policy::DEFAULT_EVERY_BLOCKS),
                    every_ms: self.checkpoint_every_ms.unwrap_or(Policy::DEFAULT_EVERY_MS),
                    keep: at_least_one("checkpoint_keep", self.checkpoint_keep)?
                        .unwrap_or(Policy::DEFAULT_KEEP),
                }
            },
            candle_history_start_ms,
            max_data_age: positive(
                "max_data_age_ms",
                self.max_data_age_ms,
                DEFAULT_MAX_DATA_AGE,
            )?,
            connections: {
                use access::connections::ConnectionLimits;
                let max_total = at_least_one("max_connections", self.max_connections)?
                    .unwrap_or_else(ConnectionLimits::default_total);
                ConnectionLimits {
                    max_total,
                    max_per_ip: at_least_one(
                        "max_connections_per_ip",
                        self.max_connections_per_ip,
                    )?
                    .unwrap_or_else(|| ConnectionLimits::default_per_ip(max_total)),
                }
            },
            http_timeouts: edge::listen::HttpTimeouts {
                header: positive(
                    "http_header_timeout_ms",
                    self.http_header_timeout_ms,
                    Duration::from_secs(10),
                )?,
                idle: positive(
                    "http_idle_timeout_ms",
                    self.http_idle_timeout_ms,
                    Duration::from_secs(60),
                )?,
            },
            keepalive: positive("keepalive_ms", self.keepalive_ms, Duration::from_secs(10))?,
            access: resolve_access(
                self.requests_per_second,
                self.request_burst,
                self.max_streams,
                self.allow_list_url,
            )?,
            public_http_url: public_url(
                "public_http_url",
                self.public_http_url,
                addr(self.http_addr, DEFAULT_HTTP_ADDR)?,
                tls.is_some(),
            )?,
            public_grpc_url: public_url(
                "public_grpc_url",
                self.public_grpc_url,
                addr(self.grpc_addr, DEFAULT_GRPC_ADDR)?,
                tls.is_some(),
            )?,
            tls,
            chain_network: match self.chain_network {
                Some(name) if name.trim().is_empty() => {
                    return Err(ConfigError::Invalid {
                        name: "chain_network",
                        message: "must not be blank".into(),
                    });
                }
                Some(name) => name,
                None => "mainnet".into(),
            },
            publish: match &self.publish_url {
                Some(url) => Some(
                    bus::settings::PublishSettings::resolve(
                        url,
                        self.publish_max_age.as_deref(),
                        self.publish_max_bytes.as_deref(),
                    )
                    .map_err(|(name, message)| ConfigError::Invalid { name, message })?,
                ),
                None if self.publish_max_age.is_some() || self.publish_max_bytes.is_some() => {
                    return Err(ConfigError::Invalid {
                        name: "publish_url",
                        message: "publish_max_age and publish_max_bytes need publish_url"
                            .to_owned(),
                    });
                }
                None => None,
            },
            chains: {
                gateway::registry::check(&self.chains).map_err(|message| ConfigError::Invalid {
                    name: "chains",
                    message,
                })?;
                self.chains
            },
            upstreams: resolve_upstreams(
                self.info_url.as_deref(),
                positive("info_cache_ms", self.info_cache_ms, INFO_CACHE)?,
                positive(
                    "info_poll_interval_ms",
                    self.info_poll_interval_ms,
                    INFO_POLL_INTERVAL,
                )?,
                self.node_url.as_deref(),
                self.upstream_ca_file.as_deref(),
                positive(
                    "upstream_timeout_ms",
                    self.upstream_timeout_ms,
                    UPSTREAM_TIMEOUT,
                )?,
            )?
            .with_node(
                positive(
                    "node_wait_timeout_ms",
                    self.node_wait_timeout_ms,
                    NODE_WAIT_TIMEOUT,
                )?,
                ledger_cache(self.ledger_cache_ms)?,
            ),
        })
    }
}

/// A public URL setting: `http(s)://…`, or `http://` and `listen`.
fn public_url(
    name: &'static str,
    value: Option<String>,
    listen: SocketAddr,
    tls: bool,
) -> Result<String, ConfigError> {
    match value {
        None if tls => Ok(format!("https://{listen}")),
        None => Ok(format!("http://{listen}")),
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => {
            Ok(url.trim_end_matches('/').to_owned())
        }
        Some(url) => Err(ConfigError::Invalid {
            name,
            message: format!("{} is not an http(s) URL", common::quoted(&url)),
        }),
    }
}

/// A count that must be at least 1 when set.
fn at_least_one(name: &'static str, value: Option<usize>) -> Result<Option<usize>, ConfigError> {
    match value {
        Some(0) => Err(ConfigError::Invalid {
            name,
            message: "must be at least 1".to_owned(),
        }),
        other => Ok(other),
    }
}

/// Default `info_cache_ms`.
const INFO_CACHE: Duration = Duration::from_secs(2);
/// Default `info_poll_interval_ms`.
const INFO_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default `upstream_timeout_ms`.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `node_wait_timeout_ms`.
const NODE_WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `ledger_cache_ms`.
const LEDGER_CACHE: Duration = Duration::from_secs(3);

/// `ledger_cache_ms`, within 2–5 s ([`gateway::node::ledger::WINDOW_RANGE`]).
fn ledger_cache(value: Option<u64>) -> Result<Duration, ConfigError> {
    let (low, high) = gateway::node::ledger::WINDOW_RANGE;
    match value.map(Duration::from_millis) {
        None => Ok(LEDGER_CACHE),
        Some(window) if window >= low && window <= high => Ok(window),
        Some(window) => Err(ConfigError::Invalid {
            name: "ledger_cache_ms",
            message: format!(
                "{} is outside {}..={} (the node makes a block about every 4 s)",
                window.as_millis(),
                low.as_millis(),
                high.as_millis()
            ),
        }),
    }
}

fn resolve_upstreams(
    info_url: Option<&str>,
    info_cache: Duration,
    info_poll_interval: Duration,
    node_url: Option<&str>,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<edge::upstream::UpstreamSettings, ConfigError> {
    let url = |name: &'static str, value: Option<&str>| {
        value
            .map(|text| {
                edge::upstream::UpstreamUrl::parse(text).map_err(|e| ConfigError::Invalid {
                    name,
                    message: e.to_string(),
                })
            })
            .transpose()
    };
    Ok(edge::upstream::UpstreamSettings {
        info_url: url("info_url", info_url)?,
        info_cache,
        info_poll_interval,
        node_url: url("node_url", node_url)?,
        timeout,
        node_wait_timeout: NODE_WAIT_TIMEOUT,
        ledger_cache: LEDGER_CACHE,
        tls: edge::upstream::UpstreamTls::new(ca_file).map_err(|error| ConfigError::Invalid {
            name: "upstream_ca_file",
            message: error.to_string(),
        })?,
    })
}

fn resolve_access(
    requests_per_second: Option<u32>,
    request_burst: Option<u32>,
    max_streams: Option<u32>,
    allow_list_url: Option<String>,
) -> Result<access::AccessSettings, ConfigError> {
    let defaults = access::AccessSettings::default();
    let at_least_one = |name: &'static str, value: Option<u32>, default: u32| match value {
        Some(0) => Err(ConfigError::Invalid {
            name,
            message: "must be at least 1".into(),
        }),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    if let Some(url) = &allow_list_url {
        let scheme_ok = url.starts_with("https://") || url.starts_with("http://");
        if !scheme_ok || url.chars().any(char::is_whitespace) {
            return Err(ConfigError::Invalid {
                name: "allow_list_url",
                message: format!("{url:?} is not an http:// or https:// URL"),
            });
        }
    }
    Ok(access::AccessSettings {
        requests_per_second: at_least_one(
            "requests_per_second",
            requests_per_second,
            defaults.requests_per_second,
        )?,
        request_burst: at_least_one("request_burst", request_burst, defaults.request_burst)?,
        max_streams: at_least_one("max_streams", max_streams, defaults.max_streams)?,
        allow_list_url,
        clock: defaults.clock,
    })
}

/// A setting given as a number or as text in the config file (`0.05` or
/// `"0.05"`), kept as text for the same checks as the flag's.
fn number_or_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(f64),
        Text(String),
    }
    Ok(
        Option::<Value>::deserialize(deserializer)?.map(|value| match value {
            Value::Number(number) => number.to_string(),
            Value::Text(text) => text,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_and_defaults_fill_the_rest() {
        let file: ServeArgs = toml::from_str(
            "grpc_addr = \"127.0.0.1:7000\"\nidle_timeout_ms = 500\nmax_replays = 2\n",
        )
        .unwrap();
        let flags = ServeArgs {
            max_replays: Some(5),
            ..ServeArgs::default()
        };
        let settings = flags.or(file).resolve().unwrap();
        assert_eq!(settings.grpc_addr.port(), 7000);
        assert_eq!(settings.raw_feed.idle_timeout, Duration::from_millis(500));
        assert_eq!(settings.raw_feed.max_replays, 5);
        assert_eq!(settings.http_addr.to_string(), DEFAULT_HTTP_ADDR);
    }

    #[test]
    fn the_demo_scale_is_a_number_or_text_in_the_config_file() {
        for text in ["demo_scale = 0.25", "demo_scale = \"0.25\""] {
            let file: ServeArgs = toml::from_str(text).unwrap();
            assert!(
                (file.resolve().unwrap().demo_scale - 0.25).abs() < 1e-12,
                "{text}"
            );
        }
        let file: ServeArgs = toml::from_str("demo_scale = 0").unwrap();
        assert!(file.resolve().is_err(), "out of range");
    }

    #[test]
    fn unknown_config_keys_and_zero_limits_are_named() {
        let err = toml::from_str::<ServeArgs>("grpc_adr = \"x\"").unwrap_err();
        assert!(err.to_string().contains("grpc_adr"));
        let err = ServeArgs {
            max_replays: Some(0),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("max_replays"));
    }

    #[test]
    fn candle_and_health_settings_resolve_and_name_bad_values() {
        let defaults = ServeArgs::default().resolve().unwrap();
        assert_eq!(defaults.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(
            defaults.candle_history_start_ms,
            host::candles::DEFAULT_HISTORY_START_MS
        );
        assert_eq!(defaults.max_data_age, DEFAULT_MAX_DATA_AGE);
        let file: ServeArgs = toml::from_str(
            "state_dir = \"/var/lib/l1gate\"\ncandle_history_start = \"2026-01-01T00:00:00Z\"\nmax_data_age_ms = 5000\n",
        )
        .unwrap();
        let settings = file.resolve().unwrap();
        assert_eq!(settings.state_dir, PathBuf::from("/var/lib/l1gate"));
        assert_eq!(settings.candle_history_start_ms, 1_767_225_600_000);
        assert_eq!(settings.max_data_age, Duration::from_secs(5));
        for (args, name) in [
            (
                ServeArgs {
                    candle_history_start: Some("2026-01-01".into()),
                    ..ServeArgs::default()
                },
                "candle_history_start",
            ),
            (
                ServeArgs {
                    max_data_age_ms: Some(0),
                    ..ServeArgs::default()
                },
                "max_data_age_ms",
            ),
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains(name), "{err} should name {name}");
        }
    }

    #[test]
    fn access_settings_resolve_with_defaults_and_name_bad_values() {
        let file: ServeArgs = toml::from_str(
            "requests_per_second = 5\nallow_list_url = \"https://keys.example/allow\"\n",
        )
        .unwrap();
        let access = file.resolve().unwrap().access;
        assert_eq!(access.requests_per_second, 5);
        assert_eq!(access.request_burst, 100);
        assert_eq!(access.max_streams, 16);
        assert_eq!(
            access.allow_list_url.as_deref(),
            Some("https://keys.example/allow")
        );
        for (args, name) in [
            (
                ServeArgs {
                    max_streams: Some(0),
                    ..ServeArgs::default()
                },
                "max_streams",
            ),
            (
                ServeArgs {
                    request_burst: Some(0),
                    ..ServeArgs::default()
                },
                "request_burst",
            ),
            (
                ServeArgs {
                    allow_list_url: Some("keys.example".into()),
                    ..ServeArgs::default()
                },
                "allow_list_url",
            ),
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains(name), "{err} should name {name}");
        }
    }

    #[test]
    fn upstreams_default_off_and_bad_urls_are_named() {
        let settings = ServeArgs::default().resolve().unwrap();
        assert_eq!(settings.upstreams.info_url, None);
        assert_eq!(settings.upstreams.node_url, None);
        assert_eq!(settings.upstreams.info_cache, Duration::from_secs(2));
        assert_eq!(
            settings.upstreams.info_poll_interval,
            Duration::from_secs(1)
        );
        let file: ServeArgs = toml::from_str(
            "info_url = \"http://127.0.0.1:3001/info\"\nnode_url = \"http://127.0.0.1:8080\"\ninfo_cache_ms = 5000\n",
        )
        .unwrap();
        let upstreams = file.resolve().unwrap().upstreams;
        assert_eq!(
            upstreams.info_url.unwrap().to_string(),
            "http://127.0.0.1:3001/info"
        );
        assert_eq!(upstreams.info_cache, Duration::from_secs(5));
        for (args, name) in [
            (
                ServeArgs {
                    info_url: Some("ftp://api.example/info".into()),
                    ..ServeArgs::default()
                },
                "info_url",
            ),
            (
                ServeArgs {
                    node_url: Some("node:8080".into()),
                    ..ServeArgs::default()
                },
                "node_url",
            ),
            (
                ServeArgs {
                    info_poll_interval_ms: Some(0),
                    ..ServeArgs::default()
                },
                "info_poll_interval_ms",
            ),
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains(name), "{err} should name {name}");
        }
    }
}
