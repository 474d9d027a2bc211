//! `l1gate edge --nats nats://…`: a server with no node files that folds
//! the bus and serves every API of the node host from it — the raw feed,
//! the market streams, the exchange's WebSocket API, candles and Info —
//! with the node host's keys, limits and guarantees.
//!
//! # How it serves
//!
//! One task per feed consumes the feed's JetStream stream (an ephemeral
//! pull consumer, no acks) and appends each record, as one line, to a copy
//! of the node's files under `<state_dir>/bus-mirror` ([`bus::mirror`]).
//! Every record is the node's line byte for byte, positioned by the same
//! block numbers and times. The copy starts empty at each start: an edge
//! copies from the first record the streams still hold.
//!
//! The server over that copy is the node host's own ([`crate::serve`]),
//! with two differences: its market starts from the newest engine
//! checkpoint the publisher put on the bus ([`bus::checkpoints`]),
//! copied into `<state_dir>/bus-checkpoints`, and its candle store
//! (`<state_dir>/bus-candles`, also new at each start) is primed from the
//! copied fills up to that checkpoint before the engine goes on after it
//! ([`host::candle_thread::prime`]). Start-up waits for a checkpoint to
//! exist and for the copy to reach the streams' ends, then listens. The
//! raw feed reads the copy as the node host reads the node's files; the
//! engine is woken by the copy's writes as by the node's.
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
//! Not served here: order-book snapshot files (whole files, not carried by
//! the bus; their RPCs find none).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use async_nats::jetstream::{self, consumer};
use feeds::{Source, SourceSet};
use futures_util::{FutureExt as _, StreamExt as _};

use crate::config::Settings;
use access::keys::KeysFile;
use bus::checkpoints::OnBus;
use bus::mirror::{Mirror, Written};
use bus::status::{BusStatus, FeedState, Role};
use bus::subjects::{BUS_FEEDS, Placement, stream_name};
use bus::url::BusUrl;
use edge::backoff::Backoff;
use edge::live::{LiveFeeds, Pending};

/// How often the bucket is asked again while no checkpoint is there.
const CHECKPOINT_POLL: Duration = Duration::from_millis(500);
/// The lock file an edge holds in its state directory.
const STATE_LOCK: &str = "edge.lock";
/// How often a wait at start-up says where it stands.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(10);
/// Messages written per batch before readers are told.
const WRITE_BATCH: usize = 1024;
/// First wait after a consumer failure; doubled (with jitter) up to
/// [`MAX_BACKOFF`].
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
    /// The bus connection and each feed's progress.
    pub status: Arc<BusStatus>,
    /// The block of the checkpoint the market started from.
    pub started_from: u64,
    /// The server over the mirror (every API of `l1gate serve`; its
    /// addresses and feeds).
    pub server: crate::serve::Running,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// `state_dir/edge.lock`, locked for as long as the edge runs.
    _state_lock: std::fs::File,
}

impl Drop for RunningEdge {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Why an edge did not start.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// A data directory was given: an edge reads only the bus.
    #[error("edge: --data is for `l1gate serve`; an edge reads no node files, only the bus")]
    DataGiven,
    /// The keys file does not load.
    #[error(transparent)]
    Keys(#[from] access::keys::KeysError),
    /// Another edge holds the state directory.
    #[error(
        "state_dir {} is in use by another edge ({} is locked): give each edge a state \
         directory of its own",
        state_dir.display(),
        lock.display()
    )]
    InUse {
        /// The state directory.
        state_dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
    },
    /// One of the edge's own directories cannot be made ready.
    #[error("{what} {}", path.display())]
    Dir {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bus: unreachable, refusing, without JetStream, or failing to
    /// hand over the checkpoint.
    #[error(transparent)]
    Bus(#[from] bus::url::ConnectError),
    /// The bus copy cannot be read as node files.
    #[error("edge mirror {}", path.display())]
    Mirror {
        /// The copy's directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: feeds::FeedError,
    },
    /// The server over the copy did not start.
    #[error(transparent)]
    Serve(#[from] crate::serve::StartError),
}

/// Connects to the bus, copies its streams, waits for the publisher's
/// newest checkpoint and for the copy to reach the streams' ends, then
/// serves; returns once listening.
///
/// # Errors
/// The bus refuses the credentials, cannot be reached, or has no
/// JetStream (each naming the URL, credential hidden); the keys file, the
/// state directory or a listen address is unusable; the checkpoint cannot
/// be used.
pub async fn start(url: &BusUrl, settings: &Settings) -> Result<RunningEdge, EdgeError> {
    if settings.data.is_some() {
        return Err(EdgeError::DataGiven);
    }
    // The keys file is read again by the server below; a broken one is
    // refused before the bus is even asked.
    KeysFile::load(&settings.keys_file)?;
    let state_lock = lock_state_dir(&settings.state_dir)?;
    let client = url.connect("l1gate edge", &settings.upstreams.tls).await?;
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
    let live = LiveFeeds::open(&mirror_root).map_err(|source| EdgeError::Mirror {
        path: mirror_root.clone(),
        source,
    })?;

    let mut tasks = Vec::new();
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

    // The market's starting state: the newest checkpoint on the bus, and
    // the copy of the streams up to at least where they end now.
    let checkpoint = newest_checkpoint(&context, url).await;
    caught_up(&context, &status, url).await;
    let checkpoint_dir = settings.state_dir.join("bus-checkpoints");
    let candle_dir = settings.state_dir.join("bus-candles");
    for dir in [&checkpoint_dir, &candle_dir] {
        empty_dir(dir)?;
    }
    let path = bus::checkpoints::download(&context, &checkpoint, &checkpoint_dir)
        .await
        .map_err(|error| url.error(format!("{error:#}")))?;
    tracing::info!(
        path = %path.display(),
        block = checkpoint.block,
        bytes = checkpoint.bytes,
        "edge: starting from the publisher's engine checkpoint"
    );
    status
        .checkpoint_block
        .store(checkpoint.block, Ordering::Release);
    let server = crate::serve::start_with(
        settings,
        Some(crate::serve::FromBus {
            live: live.clone(),
            checkpoints: checkpoint_dir,
            block: checkpoint.block,
            candles: candle_dir,
            status: status.clone(),
        }),
    )
    .await?;
    tracing::info!(
        grpc_addr = %server.grpc_addr,
        http_addr = %server.http_addr,
        bus = %url,
        "edge serving from the bus"
    );
    Ok(RunningEdge {
        status,
        started_from: checkpoint.block,
        server,
        tasks,
        _state_lock: state_lock,
    })
}

/// Takes an exclusive `flock` on `state_dir/edge.lock`: the edge empties
/// its copy, checkpoint and candle directories at start, so a second edge
/// on the same state directory must be refused before it touches them.
fn lock_state_dir(state_dir: &Path) -> Result<std::fs::File, EdgeError> {
    std::fs::create_dir_all(state_dir).map_err(dir_error("creating", state_dir))?;
    let path = state_dir.join(STATE_LOCK);
    common::lock_exclusive(&path)
        .map_err(dir_error("locking", &path))?
        .ok_or_else(|| EdgeError::InUse {
            state_dir: state_dir.to_owned(),
            lock: path,
        })
}

/// An [`EdgeError::Dir`] of `what` done to `path`.
fn dir_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EdgeError {
    let path = path.to_owned();
    move |source| EdgeError::Dir { what, path, source }
}

/// Waits for a checkpoint on the bus (a publisher puts its first one there
/// once its fold catches up with the node); the newest.
async fn newest_checkpoint(context: &jetstream::Context, url: &BusUrl) -> OnBus {
    let waiting_since = Instant::now();
    let mut last_log: Option<Instant> = None;
    loop {
        let why = match bus::checkpoints::newest(context).await {
            Ok(Some(newest)) => return newest,
            Ok(None) => "the bucket holds none yet".to_owned(),
            Err(error) => url.redact(&format!("{error:#}")),
        };
        if last_log.is_none_or(|at| at.elapsed() >= WAIT_LOG_EVERY) {
            last_log = Some(Instant::now());
            tracing::warn!(
                bucket = bus::checkpoints::BUCKET,
                waited_s = waiting_since.elapsed().as_secs(),
                %why,
                "edge: waiting for the publisher's first engine checkpoint on the bus \
                 (`l1gate serve --publish` puts one there once it has caught up with the node)"
            );
        }
        tokio::time::sleep(CHECKPOINT_POLL).await;
    }
}

/// Waits until the copy holds every record the streams held when asked.
async fn caught_up(context: &jetstream::Context, status: &BusStatus, url: &BusUrl) {
    let mut ends = Vec::new();
    for source in BUS_FEEDS {
        // A feed the node does not write has no stream.
        if let Ok(mut stream) = context.get_stream(stream_name(source)).await
            && let Ok(info) = stream.info().await
            && info.state.last_sequence > 0
            && let Some(state) = status.feed(source)
        {
            ends.push((source, state, info.state.last_sequence));
        }
    }
    let waiting_since = Instant::now();
    let mut last_log = Instant::now();
    while ends
        .iter()
        .any(|(_, state, end)| state.last_sequence.load(Ordering::Acquire) < *end)
    {
        if last_log.elapsed() >= WAIT_LOG_EVERY {
            last_log = Instant::now();
            let behind: Vec<String> = ends
                .iter()
                .map(|(source, state, end)| {
                    format!(
                        "{} {}/{end}",
                        source.feed_id(),
                        state.last_sequence.load(Ordering::Acquire)
                    )
                })
                .collect();
            tracing::info!(
                bus = %url,
                waited_s = waiting_since.elapsed().as_secs(),
                progress = %behind.join(", "),
                "edge: copying the streams before serving"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Empties (or creates) one of the edge's own directories.
fn empty_dir(dir: &Path) -> Result<(), EdgeError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(dir_error("emptying", dir)(error)),
    }
    std::fs::create_dir_all(dir).map_err(dir_error("creating", dir))
}

/// Empties (or creates) the edge's mirror directory: it is the edge's own,
/// rebuilt from the bus at every start.
fn fresh_dir(dir: &Path) -> Result<(), EdgeError> {
    empty_dir(dir)?;
    let data = dir.join("hl").join("data");
    std::fs::create_dir_all(&data).map_err(dir_error("creating", &data))
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
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let feed = self.source.feed_id();
        loop {
            let failure = self.session(&mut backoff).await;
            let failure = self.url.redact(&failure);
            if common::metrics::warn_allowed(
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
            tokio::time::sleep(backoff.next_wait()).await;
        }
    }

    /// Consumes until something fails; returns what.
    async fn session(&mut self, backoff: &mut Backoff) -> String {
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
            backoff.reset();
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
        let read = Placement::from_headers(message.headers.as_ref()).and_then(|placement| {
            bus::subjects::decode_payload(message.headers.as_ref(), &message.payload)
                .map(|line| (placement, line))
        });
        let (placement, line) = match read {
            Ok(read) => read,
            Err(error) => {
                // Not an l1gate record (headers), or one that does not
                // decode (payload): counted and skipped.
                self.state.rejected.fetch_add(1, Ordering::AcqRel);
                if common::metrics::warn_allowed("edge bad message", Duration::from_secs(10)) {
                    tracing::warn!(
                        feed = self.source.feed_id(),
                        sequence,
                        error,
                        "edge: a message on the bus is not an l1gate record it can read; skipped"
                    );
                }
                return Ok(false);
            }
        };
        let written = self
            .mirror
            .append(&placement, &line)
            .map_err(|error| format!("writing the mirror: {error}"))?;
        match written {
            Written::Refused => {
                self.state.rejected.fetch_add(1, Ordering::AcqRel);
                Ok(false)
            }
            Written::Appended | Written::NewFile => {
                self.state
                    .moved(placement.block, placement.time_ms, sequence, line.len());
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
