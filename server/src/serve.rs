//! `l1gate serve`: wires the feeds, the engine and candle store threads, the
//! gRPC services (raw feed, market streaming, Transaction Stream,
//! reflection, health) and the HTTP edge, and runs them until Ctrl-C or
//! SIGTERM. An edge (`l1gate edge`, [`crate::bus_edge`]) runs the same
//! server over its copy of the bus ([`start_with`]).
//!
//! [`start_with`] reads as the wiring: access control, the node's files,
//! the message bus, the candle store, the market engine, then the edges
//! (the Info source, the HTTP API, the gRPC address), each a named function
//! below it.
//!
//! # Stopping
//!
//! [`Running::drain`] stops the server the way its clients can ride
//! through: the listeners stop accepting; every open stream is ended with
//! a reason a client retries on — gRPC streams with UNAVAILABLE saying the
//! server is shutting down, WebSocket connections with close 1001 (going
//! away), HTTP/2 connections with GOAWAY, HTTP/1 connections once their
//! request is answered — and the server waits up to [`DRAIN`] for them to
//! go. A call or upgrade that still reaches it meanwhile is refused before
//! anything opens (UNAVAILABLE, or 503 with `Retry-After`), so a client
//! retries instead of seeing a stream open and end. Dropping [`Running`]
//! then stops the engine thread (a last checkpoint where it ended) and the
//! candle writer (a last commit at the same block, which the next start
//! goes on from), and saves key usage. A client that reconnects to the
//! restarted server resumes: a raw-feed stream from its last cursor, a
//! market stream from a fresh opening.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::service::interceptor::InterceptedService;

use engine::views::ViewSettings;
use feeds::Source;

use crate::config::Settings;
use access::Access;
use access::auth::Auth;
use access::connections::Connections;
use access::keys::{KeyStore, KeysFile};
use common::metrics::Metrics;
use edge::admission::GrpcAccess as _;
use edge::flow::{FlowSettings, Supervisor};
use edge::live::LiveFeeds;
use edge::upstream::UpstreamClient;
use host::candle_thread::{CandleWriter, WriterSettings};
use host::candles::Candles;
use host::candles::store::CandleStore;
use host::engine::{CandleFeed, EngineSettings, EngineThread};
use market::grpc::market::MarketService;
use market::grpc::raw_feed::RawFeedService;

/// Longest a stopping server waits for its clients to go ([`Running::drain`]).
pub const DRAIN: Duration = Duration::from_secs(5);

/// How often the keys file is checked for changes.
const KEYS_RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Largest Info source answer accepted (`metaAndAssetCtxs` is a few hundred
/// KB; user-state types can be larger).
const INFO_MAX_BODY: usize = 32 << 20;

/// The least an edge's block waits for its lines (`align_grace_ms` on the
/// node host is the node's writing skew). Each feed reaches an edge's copy
/// through its own stream and consumer, so one can fall behind another by
/// more than the node's skew (a busy bus, a starved process); a block
/// folded at a short grace would then miss that feed's line for good.
/// Waiting up to this long keeps an edge's books equal to the node host's
/// through such lags: its data turns late, not wrong.
const EDGE_ALIGN_GRACE: Duration = Duration::from_secs(30);

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No keys file, and serving with none was not asked for.
    #[error(
        "keys file {path} does not exist, so every request would be refused: create a key with \
         `l1gate keys add --account NAME --keys-file {path}`, or start with --allow-no-keys true \
         (L1GATE_ALLOW_NO_KEYS, allow_no_keys) to serve with none until one is added",
        path = .0.display()
    )]
    NoKeysFile(PathBuf),
    /// The keys file does not load.
    #[error(transparent)]
    Keys(#[from] access::keys::KeysError),
    /// No data directory was given.
    #[error("serve: no data directory")]
    NoDataDir,
    /// The data directory cannot be read.
    #[error("data directory {}", path.display())]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: feeds::FeedError,
    },
    /// A listen address cannot be bound.
    #[error("{edge} listen address {addr}")]
    Listen {
        /// `gRPC` or `HTTP`.
        edge: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Publishing to the bus without the checkpoints edges start from.
    #[error(
        "--publish: edges start from the engine checkpoints the publisher puts on the bus; \
         set checkpoint_every_blocks or checkpoint_every_ms above 0"
    )]
    PublishWithoutCheckpoints,
    /// The candle store cannot be opened.
    #[error("candle store (state_dir)")]
    CandleStore(#[source] host::candles::store::StoreError),
    /// An edge's candle store cannot learn the mirror's fills.
    #[error("priming the candle store: {0}")]
    Prime(String),
    /// A thread of the server cannot be started.
    #[error("{what}")]
    Thread {
        /// Which.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A start-up step run off the async threads did not finish (it
    /// panicked).
    #[error("{0} did not finish")]
    Step(&'static str),
    /// gRPC reflection cannot be built from the descriptor set.
    #[error("gRPC reflection: {0:?}")]
    Reflection(tonic_reflection::server::Error),
    /// The node gateway's networks cannot be set up.
    #[error(transparent)]
    Networks(#[from] gateway::node::NetworksError),
    /// The TLS certificate or key cannot be served.
    #[error(transparent)]
    Tls(#[from] edge::tls::TlsError),
}

/// A running server: its bound addresses and the tasks behind it.
#[derive(Debug)]
pub struct Running {
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// Every HTTP route served, as registered
    /// ([`edge::routes::Routed`]).
    pub http_routes: Vec<edge::routes::Served>,
    /// The feeds being served.
    pub live: Arc<LiveFeeds>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The market engine thread (stopped when the server is dropped).
    pub engine: EngineThread,
    /// Candle lookups (set a market resolver here).
    pub candles: Arc<host::candles::Candles>,
    /// Key usage and quotas (written to `state_dir` a last time when the
    /// server is dropped, before the candle writer lets go of it).
    pub usage: access::UsageKeeper,
    /// The candle writer thread (stopped, after a last commit, when the
    /// server is dropped).
    pub candle_writer: CandleWriter,
    /// Cancelled when the server starts stopping: the listeners and the
    /// WebSocket connections watch it.
    shutdown: CancellationToken,
    /// Every supervised stream.
    flow: Supervisor,
    /// The gRPC server, which ends once its connections are gone.
    grpc: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops every task of the server at once.
    pub fn shutdown(self) {
        drop(self);
    }

    /// Tells every client that the server is going and waits up to
    /// [`DRAIN`] for them to go (see the module docs); drop the server
    /// afterwards. Returns the streams still open at the deadline.
    pub async fn drain(&mut self) -> usize {
        let deadline = tokio::time::Instant::now() + DRAIN;
        self.shutdown.cancel();
        self.flow.end_all_for_shutdown();
        if let Some(grpc) = self.grpc.take() {
            let abort = grpc.abort_handle();
            if tokio::time::timeout_at(deadline, grpc).await.is_err() {
                abort.abort();
            }
        }
        while self.flow.watched() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.flow.watched()
    }

    /// [`Running::drain`], then the engine, the candle
    /// writer (a last commit) and the rest stopped, off the async threads.
    pub async fn stop(mut self) {
        let left = self.drain().await;
        if left > 0 {
            tracing::warn!(
                streams = left,
                "shutdown: streams still open after the drain; closing them"
            );
        }
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for task in self.tasks.iter().chain(&self.grpc) {
            task.abort();
        }
    }
}

/// What an edge (`l1gate edge`) brings to [`start_with`] in place of the
/// node's files.
#[derive(Debug)]
pub struct FromBus {
    /// The bus mirror, in the node's layout, written by the edge's
    /// consumers.
    pub live: Arc<LiveFeeds>,
    /// The checkpoint the engine starts from: its directory holds it alone.
    pub checkpoints: std::path::PathBuf,
    /// The checkpoint's block.
    pub block: u64,
    /// The edge's own candle store directory (empty: primed from the
    /// mirror's fills up to `block`).
    pub candles: std::path::PathBuf,
    /// The edge's bus connection and progress (`/healthz`, `/metrics`).
    pub status: Arc<bus::status::BusStatus>,
}

/// Starts serving `settings.data` (which must be set) and returns once the
/// listeners are bound.
///
/// # Errors
/// When the keys file, the data directory or a listen address is unusable.
pub async fn start(settings: &Settings) -> Result<Running, StartError> {
    start_with(settings, None).await
}

/// [`start`], or with `from_bus` an edge's server: every API the node host
/// serves, over the bus mirror, its market started from a checkpoint.
///
/// # Errors
/// As [`start`]; an edge's checkpoint that cannot be used.
pub async fn start_with(
    settings: &Settings,
    from_bus: Option<FromBus>,
) -> Result<Running, StartError> {
    let (access, connections) = access_control(settings)?;
    let tls = settings
        .tls
        .as_ref()
        .map(edge::tls::ServerTls::load)
        .transpose()?;
    let live = node_files(settings, from_bus.as_ref())?;
    let data = live.data_dir().to_owned();
    let (grpc_listener, grpc_addr) = bind("gRPC", settings.grpc_addr).await?;
    let (http_listener, http_addr) = bind("HTTP", settings.http_addr).await?;

    let shutdown = CancellationToken::new();
    let mut tasks = vec![
        live.spawn_refresher(settings.raw_feed.poll_interval),
        access
            .auth()
            .spawn_reloader(settings.keys_file.clone(), KEYS_RELOAD_EVERY),
    ];
    let tls = match &tls {
        Some(tls) => {
            tasks.push(tls.spawn_reloader());
            Some(EdgeTls {
                grpc: tls.acceptor(&[b"h2"])?,
                http: tls.acceptor(&[b"http/1.1"])?,
            })
        }
        None => None,
    };
    let bus = message_bus(settings, from_bus.as_ref(), &live, &access, &mut tasks)?;
    let (store, candle_feed) = candle_store(settings, from_bus.as_ref(), &data, &access).await?;
    let engine = market_engine(settings, from_bus.as_ref(), &live, candle_feed, &mut tasks)?;
    count_engine_and_stores(&access, &engine, &store.candles, &live, &mut tasks);
    // Slow subscribers of both services, and streams whose key is no longer
    // admitted, are ended (edge::flow).
    let (flow, sweeper) = Supervisor::spawn(
        FlowSettings {
            send_timeout: settings.raw_feed.send_timeout,
            market_max_lag: settings.market_max_lag,
        },
        access.metrics().clone(),
        Some({
            let status = engine.status().clone();
            Arc::new(move || status.block_time_ms())
        }),
        Some(access.clone()),
    );
    tasks.push(sweeper);
    let edges = Edges {
        live: live.clone(),
        access: access.clone(),
        connections,
        engine: &engine,
        candles: store.candles.clone(),
        flow: flow.clone(),
        shutdown: shutdown.clone(),
        tls,
    };
    let (info_lookup, info_feed, info_upstream) = info_source(settings, &edges, &mut tasks);
    let networks = gateway::node::Networks::new(
        &settings.chains,
        &settings.upstreams,
        gateway::registry::host_of(&settings.public_http_url).as_deref(),
        &access,
    )?;
    let market = MarketService::new(engine.commands(), engine.status().clone())
        .with_flow(flow.clone())
        .with_stale_after(settings.market_stale_after)
        .with_access(access.clone())
        .with_info(info_feed.clone());
    let http_api = http_api(
        settings,
        &edges,
        &market,
        &networks,
        info_lookup,
        info_feed,
        bus.clone(),
    );
    let grpc = grpc_edge(
        settings,
        &edges,
        market,
        networks.transaction_stream_failures(),
        grpc_listener,
        &mut tasks,
    )
    .await?;
    let health = market::http::Health {
        live: live.clone(),
        max_data_age: settings.max_data_age,
        candles: Some(store.candles.clone()),
        auth: Some(access.auth().clone()),
        networks: Some(networks.health()),
        bus,
        info_source: info_upstream,
    };
    let (http, http_routes) =
        networks.serve(market::http::router(health, access.clone(), http_api));
    // Answers compressed (zstd, gzip) for clients that accept it; event
    // streams, gRPC, small, large (`SizeAtMost`) and already encoded
    // answers are left as they are.
    let http = http.layer(
        tower_http::compression::CompressionLayer::new().compress_when(
            tower_http::compression::Predicate::and(
                tower_http::compression::DefaultPredicate::new(),
                SizeAtMost(settings.http_compress_max_bytes),
            ),
        ),
    );
    tasks.push(tokio::spawn(edge::listen::serve(
        http_listener,
        http,
        edge::listen::Serving {
            connections: edges.connections.clone(),
            timeouts: settings.http_timeouts,
            metrics: access.metrics().clone(),
            tls: edges.tls.as_ref().map(|tls| tls.http.clone()),
            shutdown: shutdown.clone(),
        },
    )));

    tracing::info!(%grpc_addr, %http_addr, data = %data.display(), "serving");
    Ok(Running {
        grpc_addr,
        http_addr,
        http_routes,
        live,
        tasks,
        engine,
        candles: store.candles,
        usage: store.usage,
        candle_writer: store.writer,
        shutdown,
        flow,
        grpc: Some(grpc),
    })
}

/// A listener on `addr` and the address it got.
async fn bind(
    edge: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let error = |source| StartError::Listen { edge, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    Ok((listener, bound))
}

/// What every edge of one server shares.
struct Edges<'a> {
    live: Arc<LiveFeeds>,
    access: Access,
    connections: Connections,
    engine: &'a EngineThread,
    candles: Arc<Candles>,
    flow: Supervisor,
    shutdown: CancellationToken,
    /// TLS on both addresses, if configured.
    tls: Option<EdgeTls>,
}

/// The TLS acceptors of the two addresses: ALPN `h2` on the gRPC one,
/// `http/1.1` on the HTTP one.
struct EdgeTls {
    grpc: tokio_rustls::TlsAcceptor,
    http: tokio_rustls::TlsAcceptor,
}

/// The keys, the access control over them, and the connection limits (the
/// open-files limit less what the node files and the engine keep).
///
/// # Errors
/// When the keys file is missing (unless serving with none is allowed) or
/// unreadable.
fn access_control(settings: &Settings) -> Result<(Access, Connections), StartError> {
    if !settings.allow_no_keys && !settings.keys_file.exists() {
        return Err(StartError::NoKeysFile(settings.keys_file.clone()));
    }
    let keys = KeysFile::load(&settings.keys_file)?;
    let store = KeyStore::new(&keys);
    if store.is_empty() {
        tracing::warn!(
            keys_file = %settings.keys_file.display(),
            "no usable API key: every request will be rejected; create one with `l1gate keys add --account NAME`"
        );
    }
    let access = Access::new(
        Auth::new(store),
        settings.access.clone(),
        Arc::new(Metrics::default()),
    );
    let (limits, asked) = settings.connections.within_descriptors();
    if let Some(asked) = asked {
        tracing::warn!(
            asked,
            max_connections = limits.max_total,
            "max_connections is over what the open-files limit leaves beside the descriptors \
             kept for the node files and the engine; lowered (raise the limit: `ulimit -n`, \
             LimitNOFILE=)"
        );
    }
    tracing::info!(
        max_connections = limits.max_total,
        max_connections_per_ip = limits.max_per_ip,
        open_files_limit = access::connections::open_files_limit().unwrap_or(0),
        kept_for_the_engine = access::connections::DESCRIPTOR_RESERVE,
        "connections: over the caps, refused as accepted; the open-files limit less the \
         descriptors kept for the node files and the engine and the stores bounds the total"
    );
    let connections = Connections::new(limits, access.metrics().clone());
    Ok((access, connections))
}

/// The node's files: the data directory's, or an edge's bus mirror.
///
/// # Errors
/// When the data directory is unset or cannot be opened.
fn node_files(
    settings: &Settings,
    from_bus: Option<&FromBus>,
) -> Result<Arc<LiveFeeds>, StartError> {
    if let Some(edge) = from_bus {
        return Ok(edge.live.clone());
    }
    let data = settings.data.as_deref().ok_or(StartError::NoDataDir)?;
    let live = LiveFeeds::open(data).map_err(|source| StartError::DataDir {
        path: data.to_owned(),
        source,
    })?;
    live.refresh(edge::live::Pending::ALL);
    warn_without_node_output(data, &live);
    Ok(live)
}

/// Scale-out: the node's records to the bus beside serving them
/// (bus::publisher; never in the serving path), or an edge's bus
/// status; what `/healthz` says of it.
///
/// # Errors
/// Publishing without engine checkpoints, which edges start from.
fn message_bus(
    settings: &Settings,
    from_bus: Option<&FromBus>,
    live: &Arc<LiveFeeds>,
    access: &Access,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<market::http::BusProbe>, StartError> {
    let publish = settings.publish.clone().filter(|_| from_bus.is_none());
    if publish.is_some() && !settings.checkpoints.enabled() {
        return Err(StartError::PublishWithoutCheckpoints);
    }
    let checkpoint_dir = settings.state_dir.join(engine::checkpoint::DIR_NAME);
    let status = match from_bus {
        Some(edge) => Some(edge.status.clone()),
        None => publish.map(|publish| {
            let (status, task) = bus::publisher::spawn(
                publish,
                settings.upstreams.tls.clone(),
                live.clone(),
                checkpoint_dir.clone(),
            );
            tasks.push(task);
            status
        }),
    };
    Ok(status.map(|status| {
        let families = status.clone();
        access.metrics().render_also(move || families.families());
        market::http::BusProbe(Arc::new(move || status.json(common::unix_now_ms())))
    }))
}

/// The candle store, opened, repaired and handed to its writer thread, and
/// key usage kept beside it (the engine gets the store's [`CandleFeed`]).
struct CandleParts {
    candles: Arc<Candles>,
    writer: CandleWriter,
    usage: access::UsageKeeper,
}

/// Opens the candle store (a crash repair, a carried-over first store),
/// folds damaged stretches the node's files still reach again, and starts
/// its writer thread; an edge's store first learns the mirror's fills up
/// to its checkpoint. Key usage is kept beside it, under the same
/// one-server-per-`state_dir` lock. What reads files runs off the runtime's
/// workers, which the edges' tasks run on.
///
/// # Errors
/// When the store cannot be opened, repaired or primed.
async fn candle_store(
    settings: &Settings,
    from_bus: Option<&FromBus>,
    data: &std::path::Path,
    access: &Access,
) -> Result<(CandleParts, CandleFeed), StartError> {
    let candle_dir = from_bus.map_or(settings.state_dir.as_path(), |edge| edge.candles.as_path());
    let (candle_store, recovery) = {
        let (dir, start) = (candle_dir.to_owned(), settings.candle_history_start_ms);
        tokio::task::spawn_blocking(move || CandleStore::open(&dir, start))
            .await
            .map_err(|_| StartError::Step("opening the candle store"))?
            .map_err(StartError::CandleStore)?
    };
    let usage = access.keep_usage(&settings.state_dir);
    if let Some(carried) = &recovery.carried_over {
        tracing::info!(
            path = %candle_store.path().display(),
            candles = carried.candles,
            damaged_records = carried.damaged_records,
            "candle store: the first release's store was carried over"
        );
    }
    let candle_store = {
        let data = data.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut store = candle_store;
            for outcome in host::candle_thread::repair(&mut store, &data) {
                log_repair(&outcome);
            }
            store
        })
        .await
        .map_err(|_| StartError::Step("repairing the candle store"))?
    };
    let candles = Arc::new(Candles::new(
        candle_store.reader().clone(),
        settings.candle_history_start_ms,
    ));
    let writer_settings =
        WriterSettings::for_store(&candle_store, settings.candle_history_start_ms);
    let from = writer_settings.fold_start();
    let carried_at = host::candle_thread::carried_at(&candle_store);
    let (writer, sink) = CandleWriter::start(candle_store, candles.clone(), writer_settings)
        .map_err(|source| StartError::Thread {
            what: "candle store thread",
            source,
        })?;
    if let Some(edge) = from_bus {
        let (dir, through, sink) = (data.to_owned(), edge.block, sink.clone());
        let primed =
            tokio::task::spawn_blocking(move || host::candle_thread::prime(&dir, through, &sink))
                .await
                .map_err(|_| StartError::Step("priming the candle store"))?
                .map_err(StartError::Prime)?;
        tracing::info!(
            blocks = primed,
            through = edge.block,
            "edge: candle store primed from the mirrored fills"
        );
    }
    Ok((
        CandleParts {
            candles,
            writer,
            usage,
        },
        CandleFeed {
            from,
            carried_at,
            sink,
        },
    ))
}

/// The market engine thread: from the newest usable checkpoint or
/// snapshot (an edge: from the bus's checkpoint), its candles to the store.
///
/// # Errors
/// When the thread cannot be started.
fn market_engine(
    settings: &Settings,
    from_bus: Option<&FromBus>,
    live: &Arc<LiveFeeds>,
    candles: CandleFeed,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<EngineThread, StartError> {
    let checkpoints = match from_bus {
        Some(edge) => host::engine::Checkpoints {
            dir: edge.checkpoints.clone(),
            policy: engine::checkpoint::CheckpointPolicy {
                every_blocks: 0,
                every_ms: 0,
                keep: 1,
            },
            at_catch_up: false,
            origin: host::engine::Origin::Checkpoint,
        },
        None => host::engine::Checkpoints {
            at_catch_up: settings.publish.is_some(),
            ..host::engine::Checkpoints::under(&settings.state_dir, settings.checkpoints)
        },
    };
    let (wakeups, dispatcher) = host::wakeups::Wakeups::spawn();
    tasks.push(dispatcher);
    let engine = EngineThread::start(
        live.clone(),
        EngineSettings {
            ring_capacity: settings.market_ring_capacity,
            backup_poll: settings.raw_feed.poll_interval,
            align_grace: if from_bus.is_some() {
                settings.align_grace.max(EDGE_ALIGN_GRACE)
            } else {
                settings.align_grace
            },
            views: ViewSettings {
                l2_coalesce_ms: i64::try_from(settings.l2_coalesce.as_millis()).unwrap_or(i64::MAX),
                candle_throttle_ms: i64::try_from(settings.candle_throttle.as_millis())
                    .unwrap_or(i64::MAX),
                candles: settings.candle_streaming,
            },
            checkpoints: Some(checkpoints),
            ready_wait: settings.ready_wait,
            // Shared openings' frames are this old when read: well inside
            // the edges' lag and send bounds.
            opening_reuse: [
                Some(Duration::from_millis(host::engine::OPENING_REUSE_MS)),
                settings.market_max_lag.map(|lag| lag / 4),
                Some(settings.raw_feed.send_timeout / 4),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_default(),
            key_linger: Duration::from_millis(host::engine::KEY_LINGER_MS),
        },
        Some(candles),
        wakeups,
    )
    .map_err(|source| StartError::Thread {
        what: "market engine thread",
        source,
    })?;
    Ok(engine)
}

/// The engine's, the candle store's and the node files' counters on
/// `/metrics`, and the allocator trimmer after bursts of clients.
fn count_engine_and_stores(
    access: &Access,
    engine: &EngineThread,
    candles: &Arc<Candles>,
    live: &Arc<LiveFeeds>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    use common::metrics::{Family, Kind, Sample};
    let metrics = access.metrics();
    let status = Arc::clone(engine.status());
    metrics.render_also(move || status.families());
    let trims = Arc::new(std::sync::atomic::AtomicU64::new(0));
    tasks.push(host::memory::spawn(metrics.clone(), Arc::clone(&trims)));
    metrics.render_also(move || {
        vec![Family {
            name: "l1gate_memory_trims_total",
            kind: Kind::Counter,
            help: "Times the allocator was asked to return its free pages after a burst of clients ended (the clients fell to half a peak at least 256 above them).",
            samples: vec![Sample::of(trims.load(std::sync::atomic::Ordering::Relaxed))],
        }]
    });
    let lookups = candles.clone();
    metrics.render_also(move || {
        let (.., error) = lookups.progress();
        vec![Family {
            name: "l1gate_candle_store_failing",
            kind: Kind::Gauge,
            help: "1 while the candle store's commits fail (a full disk, say; serving goes on and each commit is retried), else 0.",
            samples: vec![Sample::of(u64::from(error.is_some()))],
        }]
    });
    let live = live.clone();
    metrics.render_also(move || {
        vec![
            Family {
                name: "l1gate_feed_page_faults_total",
                kind: Kind::Counter,
                help: "Reads of node-file pages the file no longer backs (truncated) or the disk could not read, answered with zero pages instead of ending the process.",
                samples: vec![Sample::of(feeds::fault::faults())],
            },
            Family {
                name: "l1gate_feed_damaged_files_total",
                kind: Kind::Counter,
                help: "Compressed node files found damaged (truncated, corrupt, or failing their checksum) when decoded; their lines before the damage are read, the rest is skipped.",
                samples: vec![Sample::of(feeds::codec::damaged_files())],
            },
            Family {
                name: "l1gate_feed_unguarded_mappings_total",
                kind: Kind::Counter,
                help: "Node-file mappings made without the SIGBUS guard because its table was full (a fault in one ends the process).",
                samples: vec![Sample::of(feeds::fault::unguarded())],
            },
            Family {
                name: "l1gate_feed_files_replaced_total",
                kind: Kind::Counter,
                help: "Node files found replaced under their name (another file renamed over them, or rotated: a new inode), by feed; each is read anew from its start.",
                samples: per_feed(&live, feeds::Feed::replacements),
            },
            Family {
                name: "l1gate_feed_files_shrunk_total",
                kind: Kind::Counter,
                help: "Node files found shorter than what was already read from them (rewritten or truncated; the node only appends), by feed; each is read anew.",
                samples: per_feed(&live, feeds::Feed::shrinks),
            },
        ]
    });
}

/// The Info source (`info_url`): its lookup, answered from l1gate's own
/// state where it can be, its poller's feed for the Info-derived streams,
/// and its address and client (whose last failure `/healthz` reports).
fn info_source(
    settings: &Settings,
    edges: &Edges<'_>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> (
    market::info::InfoLookup,
    Option<market::info::InfoFeed>,
    Option<(edge::upstream::UpstreamUrl, UpstreamClient)>,
) {
    let upstreams = &settings.upstreams;
    let source = upstreams
        .info_url
        .clone()
        .map(|url| market::info::lookup::InfoSource {
            url,
            client: UpstreamClient::new(upstreams.timeout, INFO_MAX_BODY, &upstreams.tls),
        });
    let feed = source.as_ref().map(|source| {
        let (feed, task) = market::info::poller::spawn(
            source.client.clone(),
            source.url.clone(),
            upstreams.info_poll_interval,
        );
        tasks.push(task);
        feed
    });
    let upstream = source
        .as_ref()
        .map(|source| (source.url.clone(), source.client.clone()));
    let engine = edges.engine;
    let lookup = market::info::InfoLookup::new(
        source,
        upstreams.info_cache,
        engine.status().clone(),
        Some(market::info::local::Local {
            commands: engine.commands(),
            status: engine.status().clone(),
            candles: Some(edges.candles.clone()),
            open_orders: Arc::default(),
            answering: market::info::local::Answering::half_the_cores(),
        }),
    );
    (lookup, feed, upstream)
}

/// The HTTP address's API beside the router's own routes: Info, the
/// exchange node's REST API, the operator status page (admin accounts) and
/// the exchange's WebSocket API.
fn http_api(
    settings: &Settings,
    edges: &Edges<'_>,
    market: &MarketService,
    networks: &gateway::node::Networks,
    lookup: market::info::InfoLookup,
    info: Option<market::info::InfoFeed>,
    bus: Option<market::http::BusProbe>,
) -> edge::routes::Routed {
    let status = crate::status::StatusPage::new(
        edges.live.clone(),
        settings.max_data_age,
        edges.engine.status().clone(),
        edges.access.clone(),
        edges.flow.clone(),
        Some(networks.health()),
        info.clone(),
    )
    .with_bus(bus)
    .with_addresses(crate::status::Addresses {
        grpc: settings.public_grpc_url.clone(),
        http: settings.public_http_url.clone(),
        tls: settings.tls.is_some(),
    });
    let ws = market::ws::WsService {
        relays: market.relays(),
        flow: edges.flow.clone(),
        access: edges.access.clone(),
        info,
        lookup: lookup.clone(),
        limits: market::ws::Limits {
            keepalive: settings.keepalive,
            ..market::ws::Limits::default()
        },
        shutdown: edges.shutdown.clone(),
    };
    lookup
        .routes()
        .merge(networks.exchange_routes())
        .merge(status.routes())
        .merge(ws.routes())
}

/// Compresses an HTTP answer only when its size is unknown (a stream) or
/// at most this many bytes: compression runs on the runtime's workers, and
/// a large answer asked at a key's whole rate (a market maker's
/// `openOrders`) would keep them from the streams' senders
/// ([`crate::config::HTTP_COMPRESS_MAX_BYTES`]). Nothing is compressed at 0.
#[derive(Debug, Clone, Copy)]
struct SizeAtMost(u64);

impl tower_http::compression::Predicate for SizeAtMost {
    fn should_compress<B>(&self, response: &axum::http::Response<B>) -> bool
    where
        B: axum::body::HttpBody,
    {
        self.0 > 0
            && response
                .body()
                .size_hint()
                .exact()
                .is_none_or(|size| size <= self.0)
    }
}

/// The raw feed's service: compressed requests accepted; records sent
/// with zstd to a client that accepts it, and with gzip only when
/// `gzip` (`raw_feed_gzip`): gRPC's C-core and Java clients accept gzip
/// unasked, and gzip at tonic's level costs several times zstd per stream
/// (docs/raw-feed.md).
fn raw_feed_server(
    raw_feed: RawFeedService,
    gzip: bool,
) -> proto::venue_l1_gateway_server::VenueL1GatewayServer<RawFeedService> {
    let server = proto::venue_l1_gateway_server::VenueL1GatewayServer::new(raw_feed)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .send_compressed(CompressionEncoding::Zstd);
    if gzip {
        server.send_compressed(CompressionEncoding::Gzip)
    } else {
        server
    }
}

/// The `MarketStreaming` service: compressed requests accepted; frames
/// sent compressed only with `market_compression`, because a frame is
/// encoded once for every subscriber of a key while compression would be
/// per subscriber (measured in `benches/BENCHMARKS.md`, `market_compression`).
fn market_server(
    market: MarketService,
    compress: bool,
) -> proto::encoded::market_streaming_server::MarketStreamingServer<MarketService> {
    let server = proto::encoded::market_streaming_server::MarketStreamingServer::new(market)
        .max_encoding_message_size(256 << 20)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd);
    if compress {
        server
            .send_compressed(CompressionEncoding::Zstd)
            .send_compressed(CompressionEncoding::Gzip)
    } else {
        server
    }
}

/// The gRPC address: the raw feed, market streaming, the Transaction Stream
/// relay, reflection and health, each behind access control, on connections
/// admitted under the limits. On shutdown: no new connections, GOAWAY on
/// the open ones, and the task ends once they are gone.
///
/// # Errors
/// When reflection cannot be built from the descriptor set.
async fn grpc_edge(
    settings: &Settings,
    edges: &Edges<'_>,
    market: MarketService,
    stream_failures: &edge::upstream::FailureBoard,
    listener: TcpListener,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let access = &edges.access;
    let raw_feed = RawFeedService::new(edges.live.clone(), settings.raw_feed)
        .with_access(access.clone())
        .with_flow(edges.flow.clone());
    let reflection_v1alpha = market::grpc::reflection()
        .build_v1alpha()
        .map_err(StartError::Reflection)?;
    let reflection = market::grpc::reflection()
        .build_v1()
        .map_err(StartError::Reflection)?;
    let (health_reporter, _) = tonic_health::server::health_reporter();
    let health = market::grpc::health::server(health_reporter.clone());
    health_reporter
        .set_serving::<proto::venue_l1_gateway_server::VenueL1GatewayServer<RawFeedService>>()
        .await;
    health_reporter
        .set_serving::<proto::encoded::market_streaming_server::MarketStreamingServer<MarketService>>()
        .await;
    health_reporter
        .set_serving::<proto::aptos::indexer::v1::raw_data_server::RawDataServer<
            gateway::transaction_stream::TransactionStreamService,
        >>()
        .await;
    tasks.push(tokio::spawn(market::http::follow_freshness(
        health_reporter,
        edges.live.clone(),
        settings.max_data_age,
        vec![
            <proto::venue_l1_gateway_server::VenueL1GatewayServer<RawFeedService> as tonic::server::NamedService>::NAME,
            <proto::encoded::market_streaming_server::MarketStreamingServer<MarketService> as tonic::server::NamedService>::NAME,
        ],
    )));
    let check = {
        let access = access.clone();
        move |request| access.intercept(request)
    };
    // The Aptos Transaction Stream relay (served even with no upstream:
    // every call is then FAILED_PRECONDITION).
    let transaction_stream = gateway::transaction_stream::TransactionStreamService::new(
        &settings.chains,
        &settings.upstreams.tls,
        stream_failures,
    )
    .with_access(access.clone())
    .with_flow(edges.flow.clone());
    // A client that stopped (SIGSTOP, a debugger, a frozen VM) while its
    // kernel still takes bytes would hold its streams as long as the socket
    // buffers last: it answers no PING, so keepalive ends it.
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(settings.keepalive))
        .http2_keepalive_timeout(Some(settings.keepalive))
        .add_service(health)
        .add_service(InterceptedService::new(reflection, check.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, check.clone()))
        .add_service(InterceptedService::new(
            raw_feed_server(raw_feed, settings.raw_feed_gzip),
            check.clone(),
        ))
        .add_service(InterceptedService::new(
            transaction_stream.into_server(),
            check.clone(),
        ))
        .add_service(InterceptedService::new(
            market_server(market, settings.market_compression),
            check,
        ));
    let incoming = market::grpc::admitted_incoming(
        listener,
        edges.connections.clone(),
        access.metrics().grpc_writes(),
        edges.tls.as_ref().map(|tls| tls.grpc.clone()),
    );
    let stopping = edges.shutdown.clone().cancelled_owned();
    Ok(tokio::spawn(async move {
        if let Err(error) = router
            .serve_with_incoming_shutdown(incoming, stopping)
            .await
        {
            tracing::error!(%error, "gRPC server stopped");
        }
    }))
}

/// Whether the node's fills reach back before `history_start_ms` (then the
/// candle store covers buckets from the history start on).
/// Says so when `data` holds no node output yet (a mistyped `--data`, or a
/// node that has not started writing): the server starts anyway and picks
/// the feeds up as they appear.
fn warn_without_node_output(data: &std::path::Path, live: &LiveFeeds) {
    let found = feeds::Source::ALL
        .iter()
        .filter_map(|&s| live.feed(s))
        .any(|feed| feed.source_dir_name().is_some());
    if found {
        return;
    }
    let root = feeds::layout::node_root(data);
    let expected: Vec<&str> = feeds::Source::ALL
        .iter()
        .filter_map(|s| s.dir_names().first().copied())
        .collect();
    if data.is_dir() {
        tracing::warn!(
            data = %data.display(),
            node_root = %root.display(),
            "no node output in the data directory (expected directories such as {}); \
             serving nothing until the node writes there",
            expected.join(", ")
        );
    } else {
        tracing::warn!(
            data = %data.display(),
            "the data directory does not exist; serving nothing until it appears"
        );
    }
}

/// Logs what rebuilding one damaged stretch of the candle store did.
fn log_repair(outcome: &host::candle_thread::Repair) {
    use host::candle_thread::Repair;
    match outcome {
        Repair::Rebuilt { what, written } => tracing::info!(
            what,
            written,
            "candle store: folded again from the node's fills (0 written: already rebuilt)"
        ),
        Repair::FilesGone {
            what,
            files_from_ms,
        } => tracing::warn!(
            what,
            files_from = files_from_ms.map(feeds::time::format_iso8601_ms),
            "candle store: the node's fills no longer reach back to it; an import of the \
             archive's hours fills it (l1gate candles import)"
        ),
        Repair::Failed { what, error } => tracing::error!(
            what,
            %error,
            "candle store: folding it again failed"
        ),
    }
}

/// One sample per feed the server reads, labelled `feed`: `count` of it.
fn per_feed(live: &LiveFeeds, count: fn(&feeds::Feed) -> u64) -> Vec<common::metrics::Sample> {
    Source::ALL
        .iter()
        .filter_map(|&source| {
            let feed = live.feed(source)?;
            Some(common::metrics::Sample::by(
                &[("feed", source.feed_id())],
                count(&feed),
            ))
        })
        .collect()
}
