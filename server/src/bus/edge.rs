//! `l1gate edge --nats nats://…`: a server with no node files that serves
//! the raw feed (`VenueL1Gateway`) from the bus, with the node host's keys,
//! limits and guarantees.
//!
//! # How it serves
//!
//! One task per feed consumes the feed's JetStream stream (an ephemeral
//! pull consumer, no acks) and appends each record, as one line, to a copy
//! of the node's files under `<state_dir>/bus-mirror` ([`crate::bus::mirror`]);
//! the raw feed service reads that copy exactly as the node host reads the
//! node's files. Every record is the node's line byte for byte, positioned
//! by the same block numbers and times, with the same filters, replay
//! permits, idle timeout, slow-subscriber cut-offs and statuses. The copy
//! starts empty at each start: an edge catches up from the first record the
//! stream still holds.
//!
//! # Outages
//!
//! The edge remembers the stream sequence of the last record it wrote.
//! When the bus goes away it keeps serving what it has; `/healthz` turns
//! 503 (`stale`) once the newest record is older than `max_data_age_ms`,
//! gRPC health turns `NOT_SERVING`, and live streams end `UNAVAILABLE`
//! after the idle timeout, as on the node host. When the bus is back the
//! consumer is created again from the next sequence: no gap, no duplicate
//! (a sequence at or before the last written is dropped; sequences that
//! retention removed meanwhile are counted in `l1gate_bus_gaps_total` and
//! logged).
//!
//! Not served here: order-book snapshots (whole files, not carried by the
//! bus; their RPCs find none) and everything the market engine feeds
//! (market streams, the WebSocket API, candles, Info), which needs the
//! engine fed from the bus.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer};
use feeds::{Source, SourceSet};
use futures_util::{FutureExt as _, StreamExt as _};
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;

use crate::access::Access;
use crate::access::auth::Auth;
use crate::access::connections::Connections;
use crate::access::keys::{KeyStore, KeysFile};
use crate::bus::mirror::{Mirror, Written};
use crate::bus::status::{BusStatus, FeedState, Role};
use crate::bus::subjects::{BUS_FEEDS, Placement, stream_name};
use crate::bus::url::BusUrl;
use crate::config::Settings;
use crate::grpc::flow::{FlowSettings, Supervisor};
use crate::grpc::raw_feed::RawFeedService;
use crate::host::feeds::{LiveFeeds, Pending};
use crate::metrics::Metrics;

/// How often the keys file is checked for changes.
const KEYS_RELOAD_EVERY: Duration = Duration::from_secs(1);
/// Messages written per batch before readers are told.
const WRITE_BATCH: usize = 1024;
/// First wait after a consumer failure; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Idle heartbeat the server sends while a consumer has nothing: a silent
/// bus is noticed within two of them.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// How often mirrored files past the stream's retention are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// A running edge: its addresses and tasks (stopped when dropped).
#[derive(Debug)]
pub struct RunningEdge {
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// The mirrored feeds being served.
    pub live: Arc<LiveFeeds>,
    /// The bus connection and each feed's progress.
    pub status: Arc<BusStatus>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for RunningEdge {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Connects to the bus and starts serving; returns once listening.
///
/// # Errors
/// The bus refuses the credentials, cannot be reached, or has no
/// JetStream (each naming the URL, credential hidden); the keys file, the
/// state directory or a listen address is unusable.
pub async fn start(url: &BusUrl, settings: &Settings) -> anyhow::Result<RunningEdge> {
    anyhow::ensure!(
        settings.data.is_none(),
        "edge: --data is for `l1gate serve`; an edge reads no node files, only the bus"
    );
    let keys = KeysFile::load(&settings.keys_file)?;
    let store = KeyStore::new(&keys);
    if store.is_empty() {
        tracing::warn!(
            keys_file = %settings.keys_file.display(),
            "no usable API key: every request will be rejected; create one with `l1gate keys add --account NAME`"
        );
    }
    let client = url.connect("l1gate edge").await?;
    // JetStream answers its API subject; a plain NATS server has no
    // responder there.
    let answer = client
        .request("$JS.API.INFO", bytes::Bytes::new())
        .await
        .map_err(|error| {
            url.error(format!(
                "JetStream is not available (start nats-server with -js): {error}"
            ))
        })?;
    if let Ok(reply) = serde_json::from_slice::<serde_json::Value>(&answer.payload)
        && let Some(error) = reply.get("error")
    {
        return Err(url
            .error(format!("JetStream refused this account: {error}"))
            .into());
    }
    let context = jetstream::new(client.clone());
    let status = BusStatus::new(Role::Edge, url);
    status.set_client(client);

    let mirror_root = mirror_dir(&settings.state_dir);
    fresh_dir(&mirror_root)?;
    let live = LiveFeeds::open(&mirror_root)
        .with_context(|| format!("edge mirror {}", mirror_root.display()))?;

    let auth = Auth::new(store);
    let access = Access::new(
        auth.clone(),
        settings.access.clone(),
        Arc::new(Metrics::default()),
    );
    let connections = Connections::new(settings.connections, access.metrics().clone());
    let grpc_listener = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| format!("gRPC listen address {}", settings.grpc_addr))?;
    let http_listener = TcpListener::bind(settings.http_addr)
        .await
        .with_context(|| format!("HTTP listen address {}", settings.http_addr))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;

    let mut tasks = vec![
        live.spawn_refresher(settings.raw_feed.poll_interval),
        auth.spawn_reloader(settings.keys_file.clone(), KEYS_RELOAD_EVERY),
    ];
    for source in BUS_FEEDS {
        let Some(state) = status.feed(source) else {
            continue;
        };
        let consumer = FeedConsumer {
            source,
            context: context.clone(),
            live: live.clone(),
            state,
            url: url.clone(),
            mirror: Mirror::new(&mirror_root, source),
            last_sequence: 0,
            max_age: None,
            last_prune: Instant::now(),
        };
        tasks.push(tokio::spawn(consumer.run()));
    }
    {
        let status = status.clone();
        access.metrics().render_also(move || status.families());
    }

    let (flow, sweeper) = Supervisor::spawn(
        FlowSettings {
            send_timeout: settings.raw_feed.send_timeout,
            market_max_lag: settings.market_max_lag,
        },
        access.metrics().clone(),
        None,
        Some(access.clone()),
    );
    tasks.push(sweeper);
    let raw_feed = RawFeedService::new(live.clone(), settings.raw_feed)
        .with_access(access.clone())
        .with_flow(flow);
    let reflection_v1alpha = crate::grpc::reflection()
        .build_v1alpha()
        .context("gRPC reflection (v1alpha)")?;
    let reflection = crate::grpc::reflection()
        .build_v1()
        .context("gRPC reflection")?;
    let (health_reporter, health) = tonic_health::server::health_reporter();
    tasks.push(tokio::spawn(crate::http::follow_freshness(
        health_reporter,
        live.clone(),
        settings.max_data_age,
        vec![<proto::venue_l1_gateway_server::VenueL1GatewayServer<RawFeedService> as tonic::server::NamedService>::NAME],
    )));
    let check = {
        let access = access.clone();
        move |request| access.intercept(request)
    };
    let router = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(InterceptedService::new(reflection, check.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, check.clone()))
        .add_service(InterceptedService::new(
            proto::venue_l1_gateway_server::VenueL1GatewayServer::new(raw_feed),
            check,
        ));
    let incoming = crate::grpc::admitted_incoming(
        grpc_listener,
        connections.clone(),
        access.metrics().grpc_writes(),
    );
    tasks.push(tokio::spawn(async move {
        if let Err(error) = router.serve_with_incoming(incoming).await {
            tracing::error!(%error, "gRPC server stopped");
        }
    }));

    let bus_probe = {
        let status = status.clone();
        crate::http::BusProbe(Arc::new(move || status.json(crate::unix_now_ms())))
    };
    let health = crate::http::Health {
        live: live.clone(),
        max_data_age: settings.max_data_age,
        candles: None,
        auth: Some(access.auth().clone()),
        networks: None,
        bus: Some(bus_probe),
    };
    let metrics = access.metrics().clone();
    let http = crate::http::router(health, access, axum::Router::new());
    tasks.push(tokio::spawn(crate::http::listen::serve(
        http_listener,
        http,
        connections,
        settings.http_timeouts,
        metrics,
    )));
    tracing::info!(%grpc_addr, %http_addr, bus = %url, "edge serving the raw feed from the bus");
    Ok(RunningEdge {
        grpc_addr,
        http_addr,
        live,
        status,
        tasks,
    })
}

/// Empties (or creates) the edge's mirror directory: it is the edge's own,
/// rebuilt from the bus at every start.
fn fresh_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("emptying {}", dir.display()));
        }
    }
    std::fs::create_dir_all(dir.join("hl").join("data"))
        .with_context(|| format!("creating {}", dir.display()))
}

/// Consumes one feed's stream into its mirror.
struct FeedConsumer {
    source: Source,
    context: jetstream::Context,
    live: Arc<LiveFeeds>,
    state: Arc<FeedState>,
    url: BusUrl,
    mirror: Mirror,
    /// Stream sequence of the last message taken (written or refused).
    last_sequence: u64,
    /// The stream's retention by age, once known.
    max_age: Option<Duration>,
    last_prune: Instant,
}

impl FeedConsumer {
    async fn run(mut self) {
        let mut backoff = FIRST_BACKOFF;
        let feed = self.source.feed_id();
        loop {
            let failure = self.session(&mut backoff).await;
            let failure = self.url.redact(&failure);
            if crate::metrics::warn_allowed(
                &format!("edge consume {feed}"),
                Duration::from_secs(10),
            ) {
                tracing::warn!(
                    feed,
                    url = %self.url,
                    error = %failure,
                    last_sequence = self.last_sequence,
                    "edge: consuming the bus stopped; resuming from the next sequence"
                );
            }
            self.state.set_error(Some(failure));
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Consumes until something fails; returns what.
    async fn session(&mut self, backoff: &mut Duration) -> String {
        let name = stream_name(self.source);
        let stream = match self.context.get_stream(&name).await {
            Ok(stream) => stream,
            Err(error) => {
                return format!("stream {name}: {error} (is a publisher running?)");
            }
        };
        self.max_age = Some(stream.cached_info().config.max_age).filter(|age| !age.is_zero());
        let stream_last = stream.cached_info().state.last_sequence;
        if stream_last < self.last_sequence {
            // Deleted and created again: its sequences start over, and what
            // this edge holds no longer matches them.
            return format!(
                "stream {name} ends at sequence {stream_last}, before the {} this edge already                  holds: it was deleted and created again; restart the edge to copy it anew",
                self.last_sequence
            );
        }
        let deliver_policy = if self.last_sequence == 0 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: self.last_sequence + 1,
            }
        };
        let created = stream
            .create_consumer(consumer::pull::Config {
                deliver_policy,
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(30),
                description: Some(format!("l1gate edge {}", self.source.feed_id())),
                ..consumer::pull::Config::default()
            })
            .await;
        let pull = match created {
            Ok(pull) => pull,
            Err(error) => return format!("creating a consumer on {name}: {error}"),
        };
        let messages = pull
            .stream()
            .max_messages_per_batch(WRITE_BATCH)
            .heartbeat(HEARTBEAT)
            .expires(HEARTBEAT * 5)
            .messages()
            .await;
        let mut messages = match messages {
            Ok(messages) => messages,
            Err(error) => return format!("pulling from {name}: {error}"),
        };
        self.state.set_error(None);
        loop {
            let first = match messages.next().await {
                Some(Ok(message)) => message,
                Some(Err(error)) => return format!("{name}: {error}"),
                None => return format!("{name}: the consumer ended"),
            };
            *backoff = FIRST_BACKOFF;
            let mut relist = false;
            let mut failure = None;
            match self.take(&first) {
                Ok(new_file) => relist |= new_file,
                Err(error) => failure = Some(error),
            }
            let mut taken = 1;
            while failure.is_none() && taken < WRITE_BATCH {
                let Some(Some(next)) = messages.next().now_or_never() else {
                    break;
                };
                let result = match next {
                    Ok(message) => self.take(&message),
                    Err(error) => Err(format!("{name}: {error}")),
                };
                match result {
                    Ok(new_file) => relist |= new_file,
                    Err(error) => failure = Some(error),
                }
                taken += 1;
            }
            if let Err(error) = self.mirror.flush() {
                return format!("writing the mirror: {error}");
            }
            self.live.refresh(Pending {
                relist,
                written: SourceSet::EMPTY.with(self.source),
            });
            self.prune();
            if let Some(failure) = failure {
                return failure;
            }
        }
    }

    /// Writes one message to the mirror; `true` when it started a file.
    fn take(&mut self, message: &jetstream::Message) -> Result<bool, String> {
        let info = message
            .info()
            .map_err(|error| format!("a message without its stream sequence: {error}"))?;
        let sequence = info.stream_sequence;
        if sequence <= self.last_sequence {
            // Delivered again after a reconnect: already written.
            return Ok(false);
        }
        if self.last_sequence > 0 && sequence > self.last_sequence + 1 {
            let missing = sequence - self.last_sequence - 1;
            self.state.gaps.fetch_add(missing, Ordering::AcqRel);
            tracing::error!(
                feed = self.source.feed_id(),
                after = self.last_sequence,
                next = sequence,
                missing,
                "edge: stream sequences were removed by retention before this edge read them; \
                 the records between are missing here"
            );
        }
        self.last_sequence = sequence;
        let placement = match Placement::from_headers(message.headers.as_ref()) {
            Ok(placement) => placement,
            Err(error) => {
                self.state.rejected.fetch_add(1, Ordering::AcqRel);
                if crate::metrics::warn_allowed("edge bad message", Duration::from_secs(10)) {
                    tracing::warn!(
                        feed = self.source.feed_id(),
                        sequence,
                        error,
                        "edge: a message on the bus is not an l1gate record; skipped"
                    );
                }
                return Ok(false);
            }
        };
        let written = self
            .mirror
            .append(&placement, &message.payload)
            .map_err(|error| format!("writing the mirror: {error}"))?;
        match written {
            Written::Refused => {
                self.state.rejected.fetch_add(1, Ordering::AcqRel);
                Ok(false)
            }
            Written::Appended | Written::NewFile => {
                self.state.moved(
                    placement.block,
                    placement.time_ms,
                    sequence,
                    message.payload.len(),
                );
                Ok(written == Written::NewFile)
            }
        }
    }

    /// Drops mirrored files the stream's retention has dropped too.
    fn prune(&mut self) {
        if self.last_prune.elapsed() < PRUNE_EVERY {
            return;
        }
        self.last_prune = Instant::now();
        let Some(max_age) = self.max_age else { return };
        // An hour's slack: a file holds up to an hour of records.
        let Some(cutoff) = SystemTime::now().checked_sub(max_age + Duration::from_secs(3_600))
        else {
            return;
        };
        if self.mirror.prune(cutoff) > 0 {
            self.live.refresh(Pending::ALL);
        }
    }
}

/// The mirror directory of an edge with `state_dir`.
pub fn mirror_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("bus-mirror")
}
