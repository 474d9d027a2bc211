//! The engine thread: the single writer of market state, and a thin driver
//! of the engine's pipeline — a [`BlockSource`] over the node files the
//! market folds (order statuses, raw book diffs, fills), one
//! [`Market`] folding each block once, and one [`Hub`] ring per view key
//! publishing each block's frames.
//!
//! # Start-up
//!
//! The market starts from the newest engine checkpoint in
//! `state_dir/checkpoints/` ([`engine::checkpoint`]) that is newer than the
//! newest L4 snapshot in the data directory, lies before the candle store's
//! resume point (the candles it carries are then whole, and the store gets
//! every candle it lacks) — or exactly at the store's last commit when the
//! store can go on from the candles it carries ([`CandleFeed::carried_at`],
//! the checkpoint a stop takes) — and whose next block the node's files
//! still hold;
//! a damaged one, or one of another format version, is logged and passed
//! over for the next older. Without a usable checkpoint the newest L4
//! snapshot (if any) is loaded, as before, and why no checkpoint was used is
//! logged. The files after the starting point are folded (catch-up), then
//! the files are tailed. From a snapshot, with a candle store, the fills
//! from the store's resume point are folded into trades and candles first
//! (see [`crate::candle_thread`]). Until catch-up first reaches the end of
//! the files the views are not ready: a subscription or a read that
//! arrives then waits for them ([`subscribe`], [`read`]), at most the
//! engine's `ready_wait` ([`READY_WAIT_MS`] by default), and only then
//! fails with [`SubscribeError::NotReady`] — a refusal the edges make
//! retryable, never one a client reads as its own mistake.
//!
//! # Checkpoints
//!
//! After each folded block the thread asks its [`Checkpointer`] whether a
//! checkpoint is due ([`CheckpointPolicy`]: every so many blocks, or so much
//! time); when one is, the thread copies the market state out (the only
//! part it pays) and a writer thread serialises it, writes it atomically and
//! keeps the newest few. One is written at a time; a checkpoint that falls
//! due while the previous is being written waits for the block after it.
//!
//! # Waiting
//!
//! When everything readable is folded, the thread sleeps in one place
//! ([`FileWait`]) until the kernel says one of the newest files was written
//! to, its bell rings, or a timeout passes — the aligner's grace deadline
//! of a block still waiting for a stream, or the backup poll, which lists
//! the directories again in case a notification was lost. An append wakes
//! the thread itself, not the file watcher's thread that would then wake it
//! (on this machine that second hand-over cost tens of microseconds at the
//! median); it then re-reads at once: no sleep sits between an append and
//! its fold. The bell rings for a command (a subscription, a read; see
//! [`Commands`]) and for files that came or went (the watcher's listing
//! changes, after which the newest files are watched anew).
//!
//! # Subscribing
//!
//! A subscription is a [`Command`]. The thread answers it between two
//! blocks with the opening frame(s) and a hub receiver positioned right
//! after them, so the opening state and the later frames neither overlap nor
//! leave a gap. Subscribers asking the same thing share one view key
//! ([`Key`]), whose frames are built once per block and shared by `Arc`.
//! A live key keeps its newest opening: a later subscriber is given it with
//! a receiver positioned at the frame that followed it, so it reads the
//! frames published since and its stream is the one it would have had
//! subscribing then; a new opening is built only once the last is older
//! than `EngineSettings::opening_reuse` (or a quarter of the ring behind).
//! That subscriber never reaches the thread: [`subscribe`] takes the opening
//! and its receiver from the status's table of live keys' openings, so a
//! storm of subscribes to a few keys costs the thread a few openings a
//! second, not a wake-up and a command each. A key outlives its last
//! receiver by `EngineSettings::key_linger`: subscribers that come and go
//! (each reading a snapshot, then leaving) find it still live, and the
//! thread neither tears down nor rebuilds its ring and view between them.
//! It is dropped (and what its subscription holds in the market released)
//! at the first block after it has gone unread that long, leaving that
//! table first, under its lock, so that no subscriber takes a receiver of a
//! key being dropped.
//!
//! # Publishing in steps
//!
//! A block is folded in [`Step`]s (`Market::apply_in_steps`): first the
//! books of the coins a BBO, L2 book or L2 diff subscription reads (their
//! diffs alone, before any order status is read), then the fills (trades,
//! fills, candles), then the other books (and what derives from them), then
//! TP/SL. Each key's frames are published at the end of the step that makes
//! its view final for the block ([`engine::views::registry::ViewKind::ready_after`]),
//! so a top of book waits neither for the other books nor for TP/SL, and a
//! trade frame does not wait for the book fold.
//!
//! After publishing the first step's frames the thread yields its CPU once.
//! The runtime worker a publish wakes is often queued on the engine
//! thread's own CPU (the kernel places a wakee near its waker), and would
//! run only when the thread sleeps after the whole block: measured at 1×
//! on two cores, BBO and L2 frames reached the client at a median 0.52 ms
//! with the yield against 0.90–1.05 ms without, the views published later
//! unmoved. Yielding after later steps gained nothing measurable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use engine::block::Block;
use engine::checkpoint::{Bounds, CheckpointPolicy, Checkpointer, PassedOver, Progress};
use engine::hub::{Hub, Receiver as HubReceiver};
use engine::market::{Market, Needs, Step};
use engine::source::{BlockSource, SourceOptions, common_first_block};
use engine::views::ViewError;
use engine::views::ViewSettings;
use engine::views::registry::{Batch, Key, Producer};
use feeds::wait::FileWait;
use feeds::{Source, Start};
use thiserror::Error;
use tokio::sync::oneshot;

use crate::candle_thread::{CandleBlock, CandleMessage};
use crate::wakeups::{Signal, Wakeups};
use edge::live::{LiveFeeds, Pending, Wake};

/// Engine thread settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Frames (blocks' worth of one key's frames) each ring retains; rounded
    /// up to a power of two.
    pub ring_capacity: usize,
    /// How often the files are listed again when no change notification
    /// came (a backup for lost notifications).
    pub backup_poll: Duration,
    /// A block completes at the latest this long after its first line.
    pub align_grace: Duration,
    /// How views run (coalescing, candle throttle, candles on or off).
    pub views: ViewSettings,
    /// Where engine checkpoints are read at start and written (`None`:
    /// neither).
    pub checkpoints: Option<Checkpoints>,
    /// How long a subscription or read waits for the views to be ready.
    pub ready_wait: Duration,
    /// How long a live key's opening is given to later subscribers (with
    /// the frames published since) rather than built again. Keep it well
    /// under the edges' lag and send bounds: those frames are that old when
    /// the subscriber reads them.
    pub opening_reuse: Duration,
    /// How long a key nobody reads is kept live (its frames still made)
    /// before it is dropped, for the next subscriber to find it.
    pub key_linger: Duration,
}

/// Requests (subscriptions, reads) that may wait for the engine thread at
/// once; past it a request is refused as busy ([`SubscribeError::Busy`])
/// rather than the queue growing while the thread is held up.
pub const COMMAND_QUEUE: usize = 4_096;

/// Where commands for the engine thread are sent: its inbox, and the bell
/// that wakes it ([`feeds::wait::Bell`]; the thread sleeps on its files and
/// this bell at once, so each command rings it after entering the inbox).
#[derive(Debug, Clone)]
pub struct Commands {
    inbox: Sender<Command>,
    bell: Arc<feeds::wait::Bell>,
}

impl Commands {
    /// A new inbox of `capacity` commands, its sending side and the
    /// thread's receiving side.
    fn channel(capacity: usize) -> std::io::Result<(Commands, Receiver<Command>)> {
        let (inbox, receiver) = crossbeam_channel::bounded(capacity);
        let bell = Arc::new(feeds::wait::Bell::new()?);
        Ok((Commands { inbox, bell }, receiver))
    }

    /// Queues `command` without waiting for room.
    ///
    /// # Errors
    /// The command back when the inbox is full or the thread gone.
    pub fn try_send(
        &self,
        command: Command,
    ) -> Result<(), crossbeam_channel::TrySendError<Command>> {
        self.inbox.try_send(command)?;
        self.bell.ring();
        Ok(())
    }

    /// How many commands the inbox holds at most.
    pub fn capacity(&self) -> usize {
        self.inbox.capacity().unwrap_or(0)
    }

    /// Queues `command`, waiting for room. (The thread's handle sends
    /// [`Command::Stop`] this way when dropped: the inbox is never left
    /// without senders while the thread sleeps.)
    fn send(&self, command: Command) {
        if self.inbox.send(command).is_ok() {
            self.bell.ring();
        }
    }
}

/// How long a subscription or read that arrives before the engine caught
/// up waits for it, by default (ms): a restart's catch-up from a recent
/// checkpoint takes a fraction of this, and SDKs time their requests out
/// after 10 s or more.
pub const READY_WAIT_MS: u64 = 5_000;

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            ring_capacity: 1024,
            backup_poll: Duration::from_secs(1),
            align_grace: Duration::from_secs(1),
            views: ViewSettings::default(),
            checkpoints: None,
            ready_wait: Duration::from_millis(READY_WAIT_MS),
            opening_reuse: Duration::from_millis(OPENING_REUSE_MS),
            key_linger: Duration::from_millis(KEY_LINGER_MS),
        }
    }
}

/// How long a live key's opening is shared, by default (ms): at the
/// mainnet pace of ~15 blocks a second, a burst of `l4Book` subscribes to
/// one coin costs the engine thread two copies of its book a second, and a
/// subscriber reads at most half a second of frames it would otherwise
/// not have had to wait for.
pub const OPENING_REUSE_MS: u64 = 500;

/// How long a key outlives its last receiver, by default (ms). Measured at
/// 1× beside 1,000 `l4Book` subscribes a second to one coin, each leaving
/// after its snapshot: with the key dropped at the first block it went
/// unread, the engine thread tore the key down and built it again about
/// ten times a second (a ring of slots and a copy of the book each), and
/// its CPU per block rose 1.6×; kept a second, the key stays live and
/// costs a copy of the book twice a second. A key nobody reads costs its
/// view's per-block work meanwhile (a diff for `l4Book`).
pub const KEY_LINGER_MS: u64 = 1_000;

/// Engine checkpoints: where, and when they are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoints {
    /// Their directory (`state_dir/checkpoints`).
    pub dir: PathBuf,
    /// When one is written and how many are kept.
    pub policy: CheckpointPolicy,
    /// Also take one as soon as the fold first catches up with the files
    /// (a publisher does, so that edges have a starting state at once).
    pub at_catch_up: bool,
    /// Where the market must start from.
    pub origin: Origin,
}

/// Where the market starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The node host: the newest usable checkpoint, else the newest node
    /// snapshot (else empty books), with the candle store's resume point
    /// bounding which checkpoint is usable.
    NodeFiles,
    /// An edge: a checkpoint, which must be usable (the bus carries no node
    /// snapshots); the candle store was primed up to it
    /// ([`crate::candle_thread::prime`]), so its resume point does not
    /// apply.
    Checkpoint,
}

impl Checkpoints {
    /// Checkpoints in `state_dir`'s checkpoint directory.
    pub fn under(state_dir: &Path, policy: CheckpointPolicy) -> Self {
        Self {
            dir: state_dir.join(engine::checkpoint::DIR_NAME),
            policy,
            at_catch_up: false,
            origin: Origin::NodeFiles,
        }
    }
}

/// Where a candle store wants the fold of trades to start, and where its
/// candles go.
#[derive(Debug, Clone)]
pub struct CandleFeed {
    /// The store's resume point.
    pub from: Start,
    /// The store's watermark block, when the store can continue from the
    /// candles a checkpoint at exactly that block carries (it holds the
    /// buckets open there whole): such a checkpoint — the one a stop
    /// takes — is used though it lies past the resume point.
    pub carried_at: Option<u64>,
    /// Each folded block's candles.
    pub sink: Sender<CandleMessage>,
}

/// Why the engine thread stopped (it keeps no other error: what it can go
/// on from, it logs and goes on).
#[derive(Debug, Error)]
pub enum EngineError {
    /// Told to start from a checkpoint, and none in the directory is usable.
    #[error(
        "no usable engine checkpoint in {} to start from (the reasons are logged above)",
        .0.display()
    )]
    NoCheckpoint(PathBuf),
    /// The node files cannot be opened at the block to start from.
    #[error("cannot open the node files: {0}")]
    Open(#[source] feeds::FeedError),
    /// After a failed read, the node files cannot be positioned after the
    /// last folded block again.
    #[error("cannot reposition the node files: {0}")]
    Reposition(#[source] feeds::FeedError),
}

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubscribeError {
    /// The engine is still catching up with the files.
    #[error(
        "market views are not ready yet: the engine is still catching up with the node files; \
         retry in a few seconds"
    )]
    NotReady,
    /// The engine thread is gone.
    #[error("the engine has stopped")]
    Stopped,
    /// The engine thread's queue of requests is full: retry with back-off.
    #[error("the market engine is busy: its queue of {0} requests is full; retry with back-off")]
    Busy(usize),
    /// A listed coin is not in the current universe.
    #[error("coins: unknown coin {0:?}")]
    UnknownCoin(String),
    /// The view refused the request.
    #[error("{0}")]
    View(#[from] ViewError),
}

/// An accepted subscription: the opening frames, then a receiver of every
/// later block's frames and the signal that says when there are more.
#[derive(Debug)]
pub struct Opened {
    /// Frames that open the stream (empty for live-only views).
    pub opening: Arc<Batch>,
    /// Later frames, from the block after the opening.
    pub receiver: HubReceiver<Batch>,
    /// Woken after every publish to the receiver's ring (listen before
    /// reading it; see [`crate::wakeups`]).
    pub signal: Arc<Signal>,
}

/// A one-off look at the market between blocks (an Info answer, say); it
/// sends its own answer. It gets the market mutably only so that a look
/// may keep an index of its own up to date (`Market::orders_of`); it
/// changes no state a view or the fold reads.
pub type MarketRead = Box<dyn FnOnce(&mut Market) + Send>;

/// A request to the engine thread, answered between two blocks. Each
/// variant says what it costs the thread at worst.
pub enum Command {
    /// Subscribe to `key`. Sent only when the key is not live or its
    /// newest opening is no longer recent (`EngineSettings::opening_reuse`;
    /// [`subscribe`] gives a recent one and the frames since without the
    /// thread), and nothing is built if one became recent meanwhile; else the view's
    /// opening: for `l4Book` a copy of
    /// the coin's book (every resting order of it: about 51,000 for BTC on
    /// mainnet), for L2 books and BBO the top levels, for mids every book's
    /// top, for open orders a look per book for the account's orders —
    /// and, for an account the books do not follow yet, one walk of every
    /// resting order of every book (about 440,000 on mainnet; at most
    /// `MAX_HELD_USERS` accounts are held) — for the rest little or
    /// nothing. Each later block costs an open orders key one counter read
    /// while its account's orders stay as they were.
    Subscribe {
        /// The view key.
        key: Key,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Opened, SubscribeError>>,
    },
    /// Run a read of the market as it stands (once caught up). Costs what
    /// the read does: Info `openOrders` and `frontendOpenOrders` take the
    /// user's orders shared, a look per book (hundreds) whatever the user
    /// rests, and at most once per user, exchange and form per block (the
    /// answer is kept for that block) — except the first question about a
    /// user (or one let go of, past
    /// `MAX_WATCHED_USERS`), which walks every resting order of every book
    /// once (about 440,000 on mainnet); `l2Book` and `allMids` subscribe
    /// instead.
    Read(MarketRead),
    /// End the thread: a last checkpoint (about 50 ms of this thread for a
    /// mainnet-size book) when it folded past the last one.
    Stop,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Subscribe { key, .. } => {
                f.debug_struct("Subscribe").field("key", key).finish()
            }
            Command::Read(_) => f.write_str("Read"),
            Command::Stop => f.write_str("Stop"),
        }
    }
}

/// What the engine thread reports about itself.
#[derive(Debug, Default)]
pub struct EngineStatus {
    ready: AtomicBool,
    /// Requests refused because the thread's queue was full.
    refused_busy: AtomicU64,
    /// Blocks that waited for room in the candle store thread's queue.
    candle_waits: AtomicU64,
    /// Woken when the views become ready or the thread stops.
    ready_wake: tokio::sync::Notify,
    /// `EngineSettings::ready_wait`, ms.
    ready_wait_ms: AtomicU64,
    height: AtomicU64,
    block_time_ms: AtomicI64,
    keys: AtomicU64,
    error: Mutex<Option<String>>,
    coins: parking_lot::RwLock<Arc<BTreeSet<String>>>,
    anomalies: Anomalies,
    /// The last checkpoint's writing failed (a full disk, say).
    checkpoints_failing: AtomicBool,
    /// Subscriptions answered with an opening built for them, and with a
    /// live key's recent opening.
    openings_built: AtomicU64,
    openings_shared: AtomicU64,
    /// Live keys' newest openings, given to later subscribers without the
    /// engine thread. A key leaves this table (under its lock) before the
    /// thread drops it, and only while it has no receiver: a subscriber
    /// that takes a receiver here, under the lock, keeps the key live.
    reusable: parking_lot::Mutex<BTreeMap<Key, Reusable>>,
    /// `EngineSettings::opening_reuse`, ms.
    opening_reuse_ms: AtomicU64,
}

/// What the engine met in the node's files that it could not fold as
/// written, counted since start (`/metrics`).
#[derive(Debug, Default)]
pub struct Anomalies {
    /// Lines that were not block envelopes (garbage, missing fields,
    /// invalid UTF-8 in the header): dropped.
    pub bad_lines: AtomicU64,
    /// Lines of a block already read from the same stream: dropped.
    pub duplicate_lines: AtomicU64,
    /// Lines of blocks already folded (a block number going backwards):
    /// dropped.
    pub late_lines: AtomicU64,
    /// Lines that arrived out of block order but in time: kept.
    pub out_of_order_lines: AtomicU64,
    /// Blocks missing between folded blocks (skipped block numbers).
    pub missing_blocks: AtomicU64,
    /// Events (order statuses, diffs, fills) that did not decode: dropped.
    pub undecodable_events: AtomicU64,
    /// Book diffs that could not be applied as written.
    pub diffs_not_applied: AtomicU64,
}

impl Anomalies {
    /// The counters as `/metrics` families.
    pub fn families(&self) -> Vec<common::metrics::Family> {
        use common::metrics::Family;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            Family {
                name: "l1gate_engine_lines_dropped_total",
                kind: common::metrics::Kind::Counter,
                help: "Node lines the market engine dropped: not a block envelope (garbage, missing fields), a duplicate of a line already read, or of a block already folded (block numbers going backwards).",
                samples: vec![
                    common::metrics::Sample::by(
                        &[("reason", "not_an_envelope")],
                        n(&self.bad_lines),
                    ),
                    common::metrics::Sample::by(
                        &[("reason", "duplicate")],
                        n(&self.duplicate_lines),
                    ),
                    common::metrics::Sample::by(
                        &[("reason", "block_already_folded")],
                        n(&self.late_lines),
                    ),
                ],
            },
            Family {
                name: "l1gate_engine_lines_out_of_order_total",
                kind: common::metrics::Kind::Counter,
                help: "Node lines that arrived out of block order but in time to be folded.",
                samples: vec![common::metrics::Sample::of(n(&self.out_of_order_lines))],
            },
            Family {
                name: "l1gate_engine_missing_blocks_total",
                kind: common::metrics::Kind::Counter,
                help: "Block numbers skipped between folded blocks.",
                samples: vec![common::metrics::Sample::of(n(&self.missing_blocks))],
            },
            Family {
                name: "l1gate_engine_undecodable_events_total",
                kind: common::metrics::Kind::Counter,
                help: "Order statuses, book diffs and fills that did not decode and were not folded.",
                samples: vec![common::metrics::Sample::of(n(&self.undecodable_events))],
            },
            Family {
                name: "l1gate_engine_diffs_not_applied_total",
                kind: common::metrics::Kind::Counter,
                help: "Raw book diffs that could not be applied to the book as written.",
                samples: vec![common::metrics::Sample::of(n(&self.diffs_not_applied))],
            },
        ]
    }
}

impl EngineStatus {
    /// A live key's recent opening and a receiver of the frames published
    /// since, taken without the engine thread (`None`: none recent enough;
    /// ask the thread).
    fn reuse(&self, key: &Key) -> Option<Opened> {
        let reuse = Duration::from_millis(self.opening_reuse_ms.load(Ordering::Acquire));
        let opened = self.reusable.lock().get(key)?.opened(reuse)?;
        self.openings_shared.fetch_add(1, Ordering::Relaxed);
        Some(opened)
    }

    /// Whether catch-up reached the end of the files at least once.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Waits until the views are ready (or the thread stopped), at most the
    /// engine's `ready_wait`; whether they are ready.
    pub async fn until_ready(&self) -> bool {
        let bound = Duration::from_millis(self.ready_wait_ms.load(Ordering::Acquire));
        let settled = async {
            loop {
                let woken = self.ready_wake.notified();
                tokio::pin!(woken);
                // Registered before the check, so no wake-up falls between.
                woken.as_mut().enable();
                if self.ready() || self.error().is_some() {
                    return;
                }
                woken.await;
            }
        };
        let _ = tokio::time::timeout(bound, settled).await;
        self.ready()
    }

    fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.ready_wake.notify_waiters();
    }

    /// The last folded block (0 before the first).
    pub fn height(&self) -> u64 {
        self.height.load(Ordering::Acquire)
    }

    /// The last folded block's time, Unix ms (0 before the first).
    pub fn block_time_ms(&self) -> i64 {
        self.block_time_ms.load(Ordering::Acquire)
    }

    /// View keys currently alive.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Acquire)
    }

    /// Why the thread stopped, if it did.
    pub fn error(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every coin the engine has seen: the starting snapshot's books plus
    /// coins that appeared in the data since (it only grows).
    pub fn coins(&self) -> Arc<BTreeSet<String>> {
        Arc::clone(&self.coins.read())
    }

    /// What the engine could not fold as written, since start.
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// The engine's metric families: what it could not fold, and the
    /// requests it refused because its queue was full.
    pub fn families(&self) -> Vec<common::metrics::Family> {
        let mut families = self.anomalies.families();
        families.push(common::metrics::Family {
            name: "l1gate_engine_requests_refused_total",
            kind: common::metrics::Kind::Counter,
            help: "Subscriptions and reads refused because the market engine's queue of requests was full (the client is told to retry with back-off).",
            samples: vec![common::metrics::Sample::by(&[("reason", "busy")], self.refused_busy.load(Ordering::Relaxed),
            )],
        });
        families.push(common::metrics::Family {
            name: "l1gate_engine_checkpoints_failing",
            kind: common::metrics::Kind::Gauge,
            help: "1 while engine checkpoints fail to be written (a full disk, say; the next due one is tried as usual), else 0.",
            samples: vec![common::metrics::Sample::of(u64::from(self.checkpoints_failing.load(Ordering::Relaxed)))],
        });
        families.push(common::metrics::Family {
            name: "l1gate_engine_candle_queue_full_total",
            kind: common::metrics::Kind::Counter,
            help: "Folded blocks whose candles waited for room in the candle store thread's queue (its disk held it up); the engine waits, nothing is dropped.",
            samples: vec![common::metrics::Sample::of(self.candle_waits.load(Ordering::Relaxed))],
        });
        families.push(common::metrics::Family {
            name: "l1gate_engine_subscriptions_total",
            kind: common::metrics::Kind::Counter,
            help: "Subscriptions the market engine accepted, by how their opening came: built for them, or a live key's recent opening shared with the frames since (no work on the engine thread).",
            samples: vec![
                common::metrics::Sample::by(&[("opening", "built")], self.openings_built.load(Ordering::Relaxed),
                ),
                common::metrics::Sample::by(&[("opening", "shared")], self.openings_shared.load(Ordering::Relaxed),
                ),
            ],
        });
        families
    }

    fn publish_position(&self, at: engine::market::Position) {
        self.block_time_ms.store(at.time, Ordering::Release);
        self.height.store(at.block_number, Ordering::Release);
    }

    fn publish_coins(&self, coins: &BTreeSet<String>) {
        *self.coins.write() = Arc::new(coins.clone());
    }
}

/// Handle to the running engine thread; dropping it stops the thread.
#[derive(Debug)]
pub struct EngineThread {
    commands: Commands,
    status: Arc<EngineStatus>,
    join: Option<JoinHandle<()>>,
}

impl EngineThread {
    /// Starts the thread over `live`'s feeds; with `candles`, the market
    /// also folds from the candle store's resume point and sends it every
    /// block's candles.
    ///
    /// # Errors
    /// When the OS refuses to start a thread.
    pub fn start(
        live: Arc<LiveFeeds>,
        settings: EngineSettings,
        candles: Option<CandleFeed>,
        wakeups: Wakeups,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = Commands::channel(COMMAND_QUEUE)?;
        let bell = Arc::clone(&commands.bell);
        let status = Arc::new(EngineStatus::default());
        let ready_wait_ms = u64::try_from(settings.ready_wait.as_millis()).unwrap_or(u64::MAX);
        status.ready_wait_ms.store(ready_wait_ms, Ordering::Release);
        let files = FileWait::new(Arc::clone(&bell));
        if !files.watches_writes() {
            tracing::warn!(
                "engine: no inotify instance of its own (the per-user limit?); writes wake it \
                 through the file watcher's thread, one wake-up later"
            );
        }
        let wake = live.wake(&Needs::ALL.sources(), bell, files.watches_writes());
        let join = {
            let status = Arc::clone(&status);
            std::thread::Builder::new()
                .name("l1gate-engine".into())
                .spawn(move || {
                    let result = Writer::new(&live, settings, candles, wakeups, &status)
                        .and_then(|writer| writer.run(&inbox, &wake, files));
                    if let Err(error) = result {
                        tracing::error!(%error, "engine thread stopped");
                        *status.error.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(error.to_string());
                    }
                    // Whoever waits for the views learns that they will not come.
                    status.ready_wake.notify_waiters();
                })?
        };
        Ok(Self {
            commands,
            status,
            join: Some(join),
        })
    }

    /// The thread's status.
    pub fn status(&self) -> &Arc<EngineStatus> {
        &self.status
    }

    /// A sender of commands to the thread.
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.commands.send(Command::Stop);
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
    }
}

/// Runs `read` on the engine thread against the market as it stands
/// between blocks and answers with its result; before the engine caught
/// up, first waits for it ([`EngineStatus::until_ready`]).
///
/// # Errors
/// `NotReady` when the engine did not catch up with the files within its
/// `ready_wait`, `Stopped` when the thread is gone.
pub async fn read<T: Send + 'static>(
    commands: &Commands,
    status: &EngineStatus,
    read: impl FnOnce(&mut Market) -> T + Send + 'static,
) -> Result<T, SubscribeError> {
    if !status.until_ready().await {
        return Err(not_ready(status));
    }
    let (reply, answer) = oneshot::channel();
    queue(
        commands,
        status,
        Command::Read(Box::new(move |market| {
            let _ = reply.send(read(market));
        })),
    )?;
    answer.await.map_err(|_| SubscribeError::Stopped)
}

/// Hands `command` to the engine thread without waiting for room: a full
/// queue is [`SubscribeError::Busy`] (counted in `/metrics`).
fn queue(
    commands: &Commands,
    status: &EngineStatus,
    command: Command,
) -> Result<(), SubscribeError> {
    commands.try_send(command).map_err(|error| match error {
        crossbeam_channel::TrySendError::Full(_) => {
            status.refused_busy.fetch_add(1, Ordering::Relaxed);
            SubscribeError::Busy(commands.capacity())
        }
        crossbeam_channel::TrySendError::Disconnected(_) => SubscribeError::Stopped,
    })
}

/// Subscribes through `commands`; before the engine caught up, first waits
/// for it ([`EngineStatus::until_ready`]).
///
/// # Errors
/// [`SubscribeError`] from the thread, `NotReady` when the engine did not
/// catch up within its `ready_wait`, or `Stopped` when it is gone.
pub async fn subscribe(
    commands: &Commands,
    status: &EngineStatus,
    key: Key,
) -> Result<Opened, SubscribeError> {
    if !status.until_ready().await {
        return Err(not_ready(status));
    }
    if let Some(opened) = status.reuse(&key) {
        return Ok(opened);
    }
    let (reply, answer) = oneshot::channel();
    queue(commands, status, Command::Subscribe { key, reply })?;
    answer.await.map_err(|_| SubscribeError::Stopped)?
}

/// `NotReady`, or `Stopped` when the thread stopped while catching up.
fn not_ready(status: &EngineStatus) -> SubscribeError {
    if status.error().is_some() {
        SubscribeError::Stopped
    } else {
        SubscribeError::NotReady
    }
}

struct Entry {
    producer: Producer,
    hub: Arc<Hub<Batch>>,
    signal: Arc<Signal>,
    /// The step of a block's fold after which its frames are published.
    step: Step,
    /// Since when the key has had no receiver, as last looked at.
    unread_since: Option<Instant>,
}

/// A live key's newest opening — when it was built, the number of the hub
/// frame that followed it — with the key's ring: later subscribers are
/// given it with the frames published since ([`Reusable::opened`]), off the
/// engine thread ([`EngineStatus::reuse`]).
#[derive(Debug)]
struct Reusable {
    batch: Arc<Batch>,
    built: Instant,
    next_frame: u64,
    hub: Arc<Hub<Batch>>,
    signal: Arc<Signal>,
}

impl Reusable {
    fn new(batch: &Arc<Batch>, entry: &Entry) -> Self {
        Self {
            batch: Arc::clone(batch),
            built: Instant::now(),
            next_frame: entry.hub.published(),
            hub: Arc::clone(&entry.hub),
            signal: Arc::clone(&entry.signal),
        }
    }

    /// The opening and a receiver of the frames since, while it is younger
    /// than `reuse` and those frames are under a quarter of the ring (so
    /// that the subscriber starts far from lagging). The stream is the one
    /// the subscriber would have had subscribing when it was built.
    fn opened(&self, reuse: Duration) -> Option<Opened> {
        let since = self.hub.published() - self.next_frame;
        if self.built.elapsed() > reuse || since > self.hub.capacity() as u64 / 4 {
            return None;
        }
        Some(Opened {
            opening: Arc::clone(&self.batch),
            receiver: self.hub.subscribe_at(self.next_frame)?,
            signal: Arc::clone(&self.signal),
        })
    }
}

/// How often, at most, the engine thread has the feeds release the pages
/// read long ago ([`LiveFeeds::release_read`]): each release walks the page
/// tables of the files' mappings, on the feeds' reaper thread.
const RELEASE_EVERY: Duration = Duration::from_secs(1);

struct Writer<'s> {
    settings: EngineSettings,
    status: &'s EngineStatus,
    live: Arc<LiveFeeds>,
    market: Market,
    source: BlockSource,
    keys: BTreeMap<Key, Entry>,
    candles: Option<Sender<CandleMessage>>,
    wakeups: Wakeups,
    last_listing: Instant,
    /// When the feeds last let go of pages read long ago (`None`: never).
    last_release: Option<Instant>,
    /// The block source's alignment counters already added to the status.
    aligned: AlignCounts,
    /// Takes checkpoints as the market folds (`None`: off).
    checkpointer: Option<Checkpointer>,
}

impl Drop for Writer<'_> {
    /// The table of reusable openings holds the keys' rings too: emptied
    /// with the thread's keys, so that every ring closes and its streams
    /// learn that the engine stopped.
    fn drop(&mut self) {
        self.status.reusable.lock().clear();
    }
}

/// The cumulative counters of the block source's alignment report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct AlignCounts {
    bad_lines: u64,
    duplicates: u64,
    late: u64,
    out_of_order: u64,
}

/// How a round of reading ended.
enum Drained {
    /// Everything readable is folded.
    Idle,
    /// A read failed; the files are repositioned for the next round.
    Failed,
    /// The thread was told to stop.
    Stop,
}

/// What to do after waiting.
enum Woken {
    Command(Command),
    Files(Pending),
    Timeout,
    Disconnected,
}

impl<'s> Writer<'s> {
    fn new(
        live: &Arc<LiveFeeds>,
        settings: EngineSettings,
        candles: Option<CandleFeed>,
        wakeups: Wakeups,
        status: &'s EngineStatus,
    ) -> Result<Self, EngineError> {
        let reuse_ms = u64::try_from(settings.opening_reuse.as_millis()).unwrap_or(u64::MAX);
        status.opening_reuse_ms.store(reuse_ms, Ordering::Release);
        let latest_snapshot = live.snapshots().latest();
        let feeds: Vec<_> = Needs::ALL
            .sources()
            .into_iter()
            .filter_map(|source| live.feed(source))
            .collect();
        let origin = settings
            .checkpoints
            .as_ref()
            .map_or(Origin::NodeFiles, |checkpoints| checkpoints.origin);
        let (sink, candle_start, carried_at) = match candles {
            Some(feed) if origin == Origin::NodeFiles => (
                Some(feed.sink),
                first_block_at(live, feed.from),
                feed.carried_at,
            ),
            Some(feed) => (Some(feed.sink), None, None),
            None => (None, None, None),
        };
        let resumed = settings.checkpoints.as_ref().and_then(|checkpoints| {
            let bounds = Bounds {
                above: latest_snapshot.as_ref().map(|file| file.height),
                below: candle_start,
                carried_at,
                files_from: common_first_block(&feeds).unwrap_or(None),
            };
            resume(&checkpoints.dir, bounds)
        });
        let mut market = match resumed {
            Some(market) => market,
            None if origin == Origin::Checkpoint => {
                return Err(EngineError::NoCheckpoint(
                    settings
                        .checkpoints
                        .as_ref()
                        .map(|c| c.dir.clone())
                        .unwrap_or_default(),
                ));
            }
            None => newest_sound_snapshot(live),
        };
        let from_block = market.height().map_or(0, |h| h + 1);
        let grace_ms = i64::try_from(settings.align_grace.as_millis()).unwrap_or(i64::MAX);
        let mut options = SourceOptions {
            grace_ms,
            ..SourceOptions::from_block(from_block)
        };
        let carried = carried_at.is_some() && market.height() == carried_at;
        if carried {
            // The store continues from the candles the checkpoint carries:
            // the buckets open at its block, as the store's live state.
            if let Some(sink) = &sink {
                let _ = sink.send(CandleMessage::Carried(CandleBlock::carried_by(
                    market.candles(),
                )));
            }
        } else if let Some(first) = candle_start.filter(|&first| first < from_block) {
            options.fills_from = Some(Start::BlockNumber(first));
            market = market.with_candles_from(first);
        }
        let source = BlockSource::new(feeds, options).map_err(EngineError::Open)?;
        status.publish_coins(market.universe());
        if market.height().is_some() {
            // Started from a checkpoint or a snapshot: the market is at its
            // block before any other is folded (an edge whose bus has
            // nothing newer yet serves that block, not "block 0").
            status.publish_position(market.position());
        }
        let checkpointer = settings
            .checkpoints
            .as_ref()
            .filter(|checkpoints| checkpoints.policy.enabled())
            .map(|checkpoints| {
                Checkpointer::new(
                    checkpoints.dir.clone(),
                    checkpoints.policy,
                    market.height(),
                    common::unix_now_ms(),
                )
                // What the checkpoint held while taken (its buffers, the
                // sorted positions) is freed by then: give its pages back
                // rather than keep them until the next one.
                .after_write(|| {
                    crate::memory::trim();
                })
            });
        Ok(Self {
            settings,
            status,
            live: live.clone(),
            market,
            source,
            keys: BTreeMap::new(),
            candles: sink,
            wakeups,
            last_listing: Instant::now(),
            last_release: None,
            aligned: AlignCounts::default(),
            checkpointer,
        })
    }

    fn run(
        mut self,
        inbox: &Receiver<Command>,
        wake: &Wake,
        mut files: FileWait,
    ) -> Result<(), EngineError> {
        self.watch_newest(&mut files);
        loop {
            match self.drain(inbox)? {
                Drained::Stop => {
                    self.checkpoint_at_stop();
                    return Ok(());
                }
                Drained::Idle => {
                    if !self.status.ready() {
                        self.status.mark_ready();
                        self.to_candles(CandleMessage::CaughtUp);
                        self.checkpoint_at_catch_up();
                    }
                    self.release_read();
                }
                // A read failed: wait for the next change (or the backup
                // poll) and read again.
                Drained::Failed => {}
            }
            match self.wait(inbox, wake, &mut files) {
                Woken::Command(Command::Stop) | Woken::Disconnected => {
                    self.checkpoint_at_stop();
                    return Ok(());
                }
                Woken::Command(command) => self.command(command),
                Woken::Files(pending) => self.refresh(pending, &mut files),
                Woken::Timeout => {
                    if self.last_listing.elapsed() >= self.settings.backup_poll {
                        self.refresh(Pending::ALL, &mut files);
                    }
                }
            }
        }
    }

    /// With everything readable folded: lets the feeds release the pages
    /// read long ago, at most once per [`RELEASE_EVERY`] (the first time at
    /// once, after the catch-up read the files after the snapshot).
    fn release_read(&mut self) {
        if self
            .last_release
            .is_none_or(|at| at.elapsed() >= RELEASE_EVERY)
        {
            self.live.release_read();
            self.last_release = Some(Instant::now());
        }
    }

    /// Takes a checkpoint on first catching up, when asked to (after the
    /// one being written, if any: that one was captured on the way).
    fn checkpoint_at_catch_up(&mut self) {
        let asked = self
            .settings
            .checkpoints
            .as_ref()
            .is_some_and(|checkpoints| checkpoints.at_catch_up);
        if let Some(checkpointer) = self.checkpointer.as_mut().filter(|_| asked)
            && self.market.height().is_some()
        {
            log_checkpoint(
                self.status,
                checkpointer.take_now(&self.market, common::unix_now_ms()),
            );
        }
    }

    /// When the thread stops after catching up: takes a checkpoint of the
    /// market where it ended, unless one is there already, and waits for
    /// it to be written. The candle store commits up to the same block
    /// when it stops, so the next start continues from both
    /// ([`CandleFeed::carried_at`]) instead of folding again what this run
    /// folded. Before catch-up only a checkpoint being written is finished.
    fn checkpoint_at_stop(&mut self) {
        let Some(checkpointer) = self.checkpointer.as_mut() else {
            return;
        };
        let height = self.market.height();
        let new = height.is_some_and(|h| checkpointer.last_block().is_none_or(|last| last < h));
        if self.status.ready() && new {
            log_checkpoint(
                self.status,
                checkpointer.take_now(&self.market, common::unix_now_ms()),
            );
        }
        log_checkpoint(
            self.status,
            Progress {
                finished: checkpointer.finish(),
                taken: None,
            },
        );
    }

    /// Hands `message` to the candle store thread; when its queue is full
    /// (its disk holds it up), waits for room, counting the wait: back-
    /// pressure, never a dropped block. A store thread that is gone is let
    /// go of.
    fn to_candles(&self, message: CandleMessage) {
        let Some(sink) = &self.candles else {
            return;
        };
        if let Err(crossbeam_channel::TrySendError::Full(message)) = sink.try_send(message) {
            self.status.candle_waits.fetch_add(1, Ordering::Relaxed);
            let _ = sink.send(message);
        }
    }

    /// Waits for a command, a file change or the next deadline (a block's
    /// grace, the backup poll). Writes to the newest files wake the thread
    /// straight from the kernel ([`FileWait`]); commands and listing changes
    /// ring its bell after saying what they want, and the bell is silenced
    /// before they are looked at, so none is missed.
    fn wait(&self, inbox: &Receiver<Command>, wake: &Wake, files: &mut FileWait) -> Woken {
        // What rang while the thread was busy is looked at without sleeping
        // (and the bell silenced first, so that it does not end the sleep
        // below for what is handled now).
        let woke = files.wait(Duration::ZERO);
        if let Some(woken) = Self::woken(inbox, wake, Pending::of(woke)) {
            return woken;
        }
        let poll_left = self
            .settings
            .backup_poll
            .saturating_sub(self.last_listing.elapsed());
        let grace_left = self.source.deadline_ms().map(|deadline| {
            let left = deadline.saturating_sub(common::unix_now_ms()).max(0);
            Duration::from_millis(u64::try_from(left).unwrap_or(0))
        });
        let timeout = grace_left.map_or(poll_left, |grace| grace.min(poll_left));
        let woke = files.wait(timeout);
        Self::woken(inbox, wake, Pending::of(woke)).unwrap_or(Woken::Timeout)
    }

    /// What there is to do without waiting: file changes first (`direct`,
    /// seen by the thread's own watch, and the watcher's), then a command.
    fn woken(inbox: &Receiver<Command>, wake: &Wake, direct: Pending) -> Option<Woken> {
        let pending = wake.take().merged(direct);
        if pending != Pending::NONE {
            return Some(Woken::Files(pending));
        }
        match inbox.try_recv() {
            Ok(command) => Some(Woken::Command(command)),
            Err(crossbeam_channel::TryRecvError::Disconnected) => Some(Woken::Disconnected),
            Err(crossbeam_channel::TryRecvError::Empty) => None,
        }
    }

    /// Looks at the files again: the growth of the newest files written
    /// to, or a listing (after which the newest files are watched, and
    /// looked at once more when one is watched for the first time).
    fn refresh(&mut self, pending: Pending, files: &mut FileWait) {
        let result = if pending.relist {
            self.last_listing = Instant::now();
            self.source.refresh(true).and_then(|found| {
                if self.watch_newest(files) {
                    self.source.refresh_grown(|_| true)
                } else {
                    Ok(found)
                }
            })
        } else {
            self.source
                .refresh_grown(|source| pending.written.contains(source))
        };
        if let Err(error) = result {
            tracing::warn!(%error, "engine: refresh failed");
        }
        // Raw-feed subscribers learn of what this refresh found too.
        self.live.publish_all();
    }

    /// Watches the newest file of each source the market reads; whether
    /// one is watched that was not.
    fn watch_newest(&self, files: &mut FileWait) -> bool {
        let newest: Vec<_> = Needs::ALL
            .sources()
            .iter()
            .filter_map(|&source| Some((source, self.live.feed(source)?.newest_path()?)))
            .collect();
        files.watch(&newest)
    }

    /// Reads and folds until nothing more is readable, answering commands
    /// between rounds.
    fn drain(&mut self, inbox: &Receiver<Command>) -> Result<Drained, EngineError> {
        loop {
            while let Ok(command) = inbox.try_recv() {
                if matches!(command, Command::Stop) {
                    return Ok(Drained::Stop);
                }
                self.command(command);
            }
            let now = common::unix_now_ms();
            let read = match self.source.read(now) {
                Ok(read) => {
                    for damage in self.source.take_damage() {
                        // Read up to the damage, then on with the next file.
                        tracing::error!(error = %damage, "engine: a compressed node file is damaged; its lines before the damage were folded, the rest is skipped");
                    }
                    for refused in self.source.take_refused() {
                        tracing::warn!(
                            path = %refused.path.display(),
                            offset = refused.offset,
                            reason = %refused.reason,
                            "engine: a node file holds a line that is not a whole block envelope; \
                             refused (it never takes its block's place), counted in /metrics \
                             (l1gate_engine_lines_dropped_total); this file's further ones are not logged"
                        );
                    }
                    read
                }
                Err(error) => {
                    // A file pruned under the cursor, for example: start
                    // again after the last block folded (the aligner drops
                    // what comes again).
                    let after = self.market.height().unwrap_or(0);
                    if common::metrics::warn_allowed("engine read", Duration::from_secs(10)) {
                        tracing::warn!(%error, after, "engine: reading failed; repositioning");
                    }
                    self.source
                        .reposition(after)
                        .map_err(EngineError::Reposition)?;
                    return Ok(Drained::Failed);
                }
            };
            let mut folded = 0;
            while let Some(block) = self.source.pop(common::unix_now_ms()) {
                self.fold(&block);
                folded += 1;
            }
            if !self.status.ready() && self.source.release_behind() {
                tracing::debug!(
                    read = self.source.bytes(),
                    "engine: catching up; pages read let go of"
                );
            }
            self.count_alignment();
            if read == 0 && folded == 0 {
                return Ok(Drained::Idle);
            }
        }
    }

    fn fold(&mut self, block: &Block) {
        self.drop_unread_keys();
        let keys = &mut self.keys;
        let report = self
            .market
            .apply_in_steps(block, |step, market| publish(keys, step, market));
        if report.skipped {
            return;
        }
        let anomalies = &self.status.anomalies;
        let missing = report
            .gap
            .as_ref()
            .map_or(0, |gap| gap.got.saturating_sub(gap.expected));
        for (counter, n) in [
            (
                &anomalies.undecodable_events,
                report.decode_errors.len() as u64,
            ),
            (&anomalies.diffs_not_applied, report.issues.len() as u64),
            (&anomalies.missing_blocks, missing),
        ] {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        if (!report.decode_errors.is_empty() || missing > 0)
            && common::metrics::warn_allowed("engine anomalies", Duration::from_secs(10))
        {
            tracing::warn!(
                block = block.number,
                undecodable_events = report.decode_errors.len(),
                missing_blocks = missing,
                first = ?report.decode_errors.first().map(|e| common::bounded(e.to_string())),
                "engine: node data not folded as written; further ones are counted in /metrics \
                 (l1gate_engine_*)"
            );
        }
        if self.candles.is_some() {
            let candles = CandleBlock::of(self.market.candles());
            self.to_candles(CandleMessage::Block(candles));
        }
        if self.market.universe_grew() {
            self.status.publish_coins(self.market.universe());
        }
        self.status.publish_position(self.market.position());
        if let Some(checkpointer) = &mut self.checkpointer {
            log_checkpoint(
                self.status,
                checkpointer.after_block(&self.market, common::unix_now_ms()),
            );
        }
    }

    /// Adds what the block source's aligner counted since the last look to
    /// the status (its counters restart when the source is re-created).
    fn count_alignment(&mut self) {
        let report = self.source.report();
        let now = AlignCounts {
            bad_lines: report.bad_lines,
            duplicates: report.duplicates,
            late: report.late,
            out_of_order: report.out_of_order,
        };
        if now == self.aligned {
            return;
        }
        let delta = |now: u64, seen: u64| if now >= seen { now - seen } else { now };
        let anomalies = &self.status.anomalies;
        for (counter, n) in [
            (
                &anomalies.bad_lines,
                delta(now.bad_lines, self.aligned.bad_lines),
            ),
            (
                &anomalies.duplicate_lines,
                delta(now.duplicates, self.aligned.duplicates),
            ),
            (&anomalies.late_lines, delta(now.late, self.aligned.late)),
            (
                &anomalies.out_of_order_lines,
                delta(now.out_of_order, self.aligned.out_of_order),
            ),
        ] {
            counter.fetch_add(n, Ordering::Relaxed);
        }
        if now.bad_lines + now.duplicates + now.late
            > self.aligned.bad_lines + self.aligned.duplicates + self.aligned.late
            && common::metrics::warn_allowed("engine lines", Duration::from_secs(10))
        {
            tracing::warn!(
                not_envelopes = now.bad_lines,
                duplicates = now.duplicates,
                block_already_folded = now.late,
                "engine: node lines dropped; further ones are counted in /metrics \
                 (l1gate_engine_lines_dropped_total)"
            );
        }
        self.aligned = now;
    }

    /// Drops the keys nobody has read for `EngineSettings::key_linger`.
    fn drop_unread_keys(&mut self) {
        // Each key's first block unread is marked (a read one unmarked). A
        // count seen above zero here may fall to zero after (that key is
        // marked at a later block), but none rises from zero without the
        // table's lock, so only a key due to go needs the lock's second look.
        let now = Instant::now();
        let linger = self.settings.key_linger;
        let due = |entry: &Entry| {
            entry
                .unread_since
                .is_some_and(|since| now.duration_since(since) >= linger)
        };
        let mut any_due = false;
        for entry in self.keys.values_mut() {
            if entry.hub.receiver_count() > 0 {
                entry.unread_since = None;
            } else {
                entry.unread_since.get_or_insert(now);
                any_due |= due(entry);
            }
        }
        if !any_due {
            return;
        }
        let gone: Vec<Key> = {
            // Under the table's lock: no subscriber takes a receiver of a
            // key between its count read here and its removal.
            let mut reusable = self.status.reusable.lock();
            let gone: Vec<Key> = self
                .keys
                .iter()
                .filter(|(_, entry)| entry.hub.receiver_count() == 0 && due(entry))
                .map(|(key, _)| key.clone())
                .collect();
            for key in &gone {
                reusable.remove(key);
            }
            gone
        };
        for key in gone {
            if let Some(entry) = self.keys.remove(&key) {
                entry.producer.close(&mut self.market);
            }
        }
        self.status
            .keys
            .store(self.keys.len() as u64, Ordering::Release);
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Subscribe { key, reply } => {
                let answer = self.subscribe(key);
                // The subscriber may have gone; nothing to do then.
                let _ = reply.send(answer);
            }
            Command::Read(read) => read(&mut self.market),
            Command::Stop => {}
        }
    }

    fn subscribe(&mut self, key: Key) -> Result<Opened, SubscribeError> {
        if !self.status.ready() {
            return Err(SubscribeError::NotReady);
        }
        // A live key with a recent opening (one made since the subscriber
        // looked): that opening, then the frames published since.
        if let Some(opened) = self.status.reuse(&key) {
            return Ok(opened);
        }
        // The view's own checks (counts, parameters) come first.
        let (producer, frames) = key.open(&mut self.market, &self.settings.views)?;
        let universe = self.market.universe();
        if let Some(unknown) = key
            .listed_coins()
            .into_iter()
            .find(|coin| !universe.contains(*coin))
        {
            let unknown = unknown.to_owned();
            producer.close(&mut self.market);
            return Err(SubscribeError::UnknownCoin(unknown));
        }
        let opening = Arc::new(Batch::new(self.market.position(), frames));
        self.status.openings_built.fetch_add(1, Ordering::Relaxed);
        if let Some(entry) = self.keys.get(&key) {
            // The key exists: its producer keeps running; this opening is
            // kept for the subscribers after this one.
            producer.close(&mut self.market);
            let kept = Reusable::new(&opening, entry);
            self.status.reusable.lock().insert(key, kept);
            return Ok(Opened {
                opening,
                receiver: entry.hub.subscribe(),
                signal: Arc::clone(&entry.signal),
            });
        }
        let signal = Arc::new(Signal::default());
        let hub = Arc::new(Hub::with_wake(
            self.settings.ring_capacity,
            self.wakeups.hook(Arc::clone(&signal)),
        ));
        let receiver = hub.subscribe();
        let entry = Entry {
            producer,
            hub,
            signal: Arc::clone(&signal),
            step: key.kind().ready_after(),
            unread_since: None,
        };
        let kept = Reusable::new(&opening, &entry);
        self.status.reusable.lock().insert(key.clone(), kept);
        self.keys.insert(key, entry);
        self.status
            .keys
            .store(self.keys.len() as u64, Ordering::Release);
        Ok(Opened {
            opening,
            receiver,
            signal,
        })
    }
}

/// Publishes the frames of the block being folded for every key whose view
/// is final at the end of `step`.
fn publish(keys: &mut BTreeMap<Key, Entry>, step: Step, market: &Market) {
    let at = market.position();
    let made = common::unix_now_ms();
    let mut published = false;
    for entry in keys.values_mut().filter(|entry| entry.step == step) {
        let frames = entry.producer.on_block(market);
        if !frames.is_empty() {
            entry.hub.publish(Batch::new(at, frames).made_at(made));
            published = true;
        }
    }
    if published && step == Step::FirstBooks {
        // Let the runtime worker this publish woke send the frames now: on
        // a machine where the kernel queues it on this thread's CPU, it
        // would otherwise wait for the whole block's fold (see the module
        // docs).
        std::thread::yield_now();
    }
}

/// The market of the newest usable checkpoint in `dir` within `bounds`,
/// logging which was used and why newer ones were not; `None` (logged) when
/// none is usable.
fn resume(dir: &Path, bounds: Bounds) -> Option<Market> {
    let choice = match engine::checkpoint::newest_usable(dir, Needs::ALL, bounds) {
        Ok(choice) => choice,
        Err(error) => {
            tracing::warn!(%error, "engine checkpoints: cannot list them; starting from the node snapshot");
            return None;
        }
    };
    for (file, why) in &choice.passed_over {
        match why {
            PassedOver::Refused(error) if error.is_damage() => tracing::warn!(
                path = %file.path.display(),
                block = file.block_number,
                "engine checkpoint not used: {why}"
            ),
            _ => tracing::info!(
                path = %file.path.display(),
                block = file.block_number,
                "engine checkpoint not used: {why}"
            ),
        }
    }
    if let Some(loaded) = choice.loaded {
        tracing::info!(
            path = %loaded.path.display(),
            block = loaded.block_number,
            bytes = loaded.bytes,
            orders = loaded.market.books().order_count(),
            load_ms = choice.elapsed.as_millis() as u64,
            "engine: resuming from checkpoint; folding the node files after it"
        );
        return Some(loaded.market);
    }
    if !choice.passed_over.is_empty() {
        tracing::info!(
            dir = %dir.display(),
            "engine: no usable checkpoint; starting from the node snapshot"
        );
    }
    None
}

/// Logs what the checkpointer did: a failure once when checkpoints start
/// failing (then counted in the gauge only), once more when one is written
/// again.
fn log_checkpoint(status: &EngineStatus, progress: Progress) {
    if let Some(taken) = progress.taken {
        tracing::debug!(
            block = taken.block_number,
            orders = taken.orders,
            engine_thread_us = taken.cost.as_micros() as u64,
            "engine checkpoint taken; its writer thread syncs it"
        );
    }
    match progress.finished {
        Some(Ok(finished)) => {
            if status.checkpoints_failing.swap(false, Ordering::AcqRel) {
                tracing::warn!("engine checkpoints are written again");
            }
            tracing::info!(
                path = %finished.written.path.display(),
                block = finished.written.block_number,
                bytes = finished.written.bytes,
                serialize_ms = finished.written.serialize.as_millis() as u64,
                write_ms = finished.written.write.as_millis() as u64,
                pruned = finished.pruned.len(),
                "engine checkpoint written"
            );
        }
        Some(Err(error)) => {
            if status.checkpoints_failing.swap(true, Ordering::AcqRel) {
                tracing::debug!(%error, "engine checkpoint not written");
            } else {
                tracing::warn!(
                    %error,
                    "engine checkpoint not written; the next due one is tried as usual, and \
                     further failures are not logged until one is written again \
                     (l1gate_engine_checkpoints_failing)"
                );
            }
        }
        None => {}
    }
}

/// The market of the newest L4 snapshot that reads and parses, saying why
/// each newer one was passed over (and every file the listing refused);
/// empty books when none does.
fn newest_sound_snapshot(live: &LiveFeeds) -> Market {
    let snapshots = live.snapshots();
    for skipped in snapshots.skipped() {
        tracing::warn!(%skipped, "L4 snapshot not used");
    }
    let mut passed_over = 0;
    for file in snapshots.list().iter().rev() {
        // Pages parsed are let go of as the parse goes: the start holds a
        // window of the file beside the books, not the whole file.
        let parsed = snapshots
            .map(file)
            .map_err(|e| e.to_string())
            .and_then(|mapped| {
                engine::snapshot::parse_releasing(mapped.bytes(), &|below| {
                    mapped.release_below(below);
                })
                .map_err(|e| e.to_string())
            });
        match parsed {
            Ok(snapshot) => {
                if passed_over > 0 {
                    tracing::warn!(
                        path = %file.path.display(),
                        height = file.height,
                        passed_over,
                        "engine: starting from an older L4 snapshot; the newer ones are damaged"
                    );
                }
                return Market::from_snapshot(snapshot, Needs::ALL);
            }
            Err(error) => {
                passed_over += 1;
                tracing::warn!(
                    path = %file.path.display(),
                    height = file.height,
                    %error,
                    "L4 snapshot not used: it does not read as a snapshot; trying the next older"
                );
            }
        }
    }
    if passed_over > 0 {
        tracing::warn!("engine: no L4 snapshot is usable; starting from empty books");
    }
    Market::new(Needs::ALL)
}

/// The first block of the fills feed at or after `from`.
fn first_block_at(live: &LiveFeeds, from: Start) -> Option<u64> {
    let feed = live.feed(Source::Fills)?;
    let mut cursor = feed.seek(from).ok()?;
    feed.read(&mut cursor, 1).ok()?.first()?.block_number
}

#[cfg(test)]
mod tests {
    use engine::checkpoint::{capture, file};
    use engine::hub::Recv;
    use fixtures::{RunOptions, SimConfig};

    use super::*;

    #[test]
    fn failing_checkpoints_show_in_the_gauge_until_one_is_written() {
        let status = EngineStatus::default();
        let gauge = |status: &EngineStatus| {
            status
                .families()
                .into_iter()
                .find(|f| f.name == "l1gate_engine_checkpoints_failing")
                .map(|f| f.samples[0].value)
        };
        assert_eq!(gauge(&status), Some(common::metrics::Number::Count(0)));
        for _ in 0..2 {
            log_checkpoint(
                &status,
                Progress {
                    finished: Some(Err(engine::checkpoint::CheckpointError::Serialize(
                        "no space left on device".into(),
                    ))),
                    taken: None,
                },
            );
            assert_eq!(gauge(&status), Some(common::metrics::Number::Count(1)));
        }
        let written = engine::checkpoint::Finished {
            written: file::Written {
                path: PathBuf::from("checkpoint"),
                block_number: 7,
                bytes: 1,
                serialize: Duration::ZERO,
                write: Duration::ZERO,
            },
            pruned: Vec::new(),
        };
        log_checkpoint(
            &status,
            Progress {
                finished: Some(Ok(written)),
                taken: None,
            },
        );
        assert_eq!(gauge(&status), Some(common::metrics::Number::Count(0)));
    }

    /// The simulator's small profile, 250 blocks (snapshots at its start and
    /// every 100 blocks), and the feeds over it.
    fn node(dir: &Path) -> (Arc<LiveFeeds>, u64) {
        let run = RunOptions {
            blocks: Some(250),
            no_replica_cmds: true,
            ..RunOptions::default()
        };
        let summary = fixtures::generate(&SimConfig::small(5), dir, &run, &mut |_| {}).unwrap();
        let live = LiveFeeds::open(dir).unwrap();
        live.refresh(Pending::ALL);
        (live, summary.last_height)
    }

    /// Folds everything readable, block by block, letting each checkpoint
    /// be written before the next block (as the blocks' pace would).
    fn fold_all(writer: &mut Writer<'_>) {
        for _ in 0..200 {
            let read = writer.source.read(common::unix_now_ms()).unwrap();
            let mut folded = 0;
            while let Some(block) = writer.source.pop(common::unix_now_ms()) {
                writer.fold(&block);
                folded += 1;
                if let Some(checkpointer) = writer.checkpointer.as_mut()
                    && let Some(finished) = checkpointer.finish()
                {
                    finished.unwrap();
                }
            }
            if read == 0 && folded == 0 && writer.source.pending() == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("the files never ran out");
    }

    #[tokio::test]
    async fn a_restart_resumes_from_the_newest_usable_checkpoint() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, last) = node(&tmp.path().join("node"));
        let newest_snapshot = live.snapshots().latest().unwrap().height;
        let (wakeups, _dispatcher) = crate::wakeups::Wakeups::spawn();
        let status = EngineStatus::default();
        let checkpoints = Checkpoints::under(
            &tmp.path().join("state"),
            CheckpointPolicy {
                every_blocks: 15,
                every_ms: 0,
                keep: 2,
            },
        );
        let settings = EngineSettings {
            align_grace: Duration::from_millis(1),
            checkpoints: Some(checkpoints.clone()),
            ..EngineSettings::default()
        };

        // First start: no checkpoint yet, so the newest node snapshot.
        let mut first =
            Writer::new(&live, settings.clone(), None, wakeups.clone(), &status).unwrap();
        assert_eq!(first.market.height(), Some(newest_snapshot));
        fold_all(&mut first);
        assert_eq!(first.market.height(), Some(last));
        let written = file::list(&checkpoints.dir).unwrap();
        assert_eq!(written.len(), 2, "the newest two kept: {written:?}");
        let newest = written[1].block_number;
        assert!(newest > newest_snapshot && newest < last, "{written:?}");

        // A restart resumes from the newest checkpoint and ends where the
        // first run did, in exactly the same state.
        let status = EngineStatus::default();
        let mut second =
            Writer::new(&live, settings.clone(), None, wakeups.clone(), &status).unwrap();
        assert_eq!(second.market.height(), Some(newest));
        // Its block is the status's before anything newer is folded: a
        // market started from a checkpoint is not "at block 0".
        assert_eq!(status.height(), newest);
        assert_eq!(status.block_time_ms(), second.market.position().time);
        assert!(status.block_time_ms() > 0);
        fold_all(&mut second);
        assert_eq!(capture(&second.market), capture(&first.market));

        // A damaged newest one is passed over for the one before it.
        let newest_path = file::list(&checkpoints.dir).unwrap().pop().unwrap();
        let mut bytes = std::fs::read(&newest_path.path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x55;
        std::fs::write(&newest_path.path, &bytes).unwrap();
        let older = file::list(&checkpoints.dir).unwrap()[0].block_number;
        let third = Writer::new(&live, settings.clone(), None, wakeups.clone(), &status).unwrap();
        assert_eq!(third.market.height(), Some(older));

        // None usable (all damaged): the newest node snapshot, as before.
        for listed in file::list(&checkpoints.dir).unwrap() {
            std::fs::write(&listed.path, b"L1GCKPT\0").unwrap();
        }
        let fourth = Writer::new(&live, settings, None, wakeups, &status).unwrap();
        assert_eq!(fourth.market.height(), Some(newest_snapshot));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_before_catch_up_waits_for_it_within_the_bound() {
        let status = Arc::new(EngineStatus::default());
        status.ready_wait_ms.store(60_000, Ordering::Release);
        let waiting = tokio::spawn({
            let status = Arc::clone(&status);
            async move { status.until_ready().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits while catching up");
        status.mark_ready();
        assert!(waiting.await.unwrap(), "and is let through when ready");
        // With no bound left, a request is refused at once as not ready.
        let status = EngineStatus::default();
        assert!(!status.until_ready().await);
        let (commands, _inbox) = Commands::channel(COMMAND_QUEUE).unwrap();
        let refused = read(&commands, &status, |_| ()).await;
        assert_eq!(refused, Err(SubscribeError::NotReady));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_that_stops_while_catching_up_lets_its_waiters_go() {
        let status = Arc::new(EngineStatus::default());
        status.ready_wait_ms.store(60_000, Ordering::Release);
        let waiting = tokio::spawn({
            let status = Arc::clone(&status);
            async move {
                let (commands, _inbox) = Commands::channel(COMMAND_QUEUE).unwrap();
                read(&commands, &status, |_| ()).await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        *status.error.lock().unwrap() = Some("the node files are gone".into());
        status.ready_wake.notify_waiters();
        assert_eq!(waiting.await.unwrap(), Err(SubscribeError::Stopped));
    }

    #[tokio::test]
    async fn a_stopping_engine_checkpoints_where_it_ended_once() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, last) = node(&tmp.path().join("node"));
        let (wakeups, _dispatcher) = crate::wakeups::Wakeups::spawn();
        let status = EngineStatus::default();
        // Far apart: no checkpoint falls due while folding.
        let checkpoints = Checkpoints::under(
            &tmp.path().join("state"),
            CheckpointPolicy {
                every_blocks: 1_000_000,
                every_ms: 0,
                keep: 3,
            },
        );
        let settings = EngineSettings {
            align_grace: Duration::from_millis(1),
            checkpoints: Some(checkpoints.clone()),
            ..EngineSettings::default()
        };
        let mut writer =
            Writer::new(&live, settings.clone(), None, wakeups.clone(), &status).unwrap();
        fold_all(&mut writer);
        // Not caught up yet as far as the thread knows: nothing written.
        writer.checkpoint_at_stop();
        assert!(file::list(&checkpoints.dir).unwrap_or_default().is_empty());
        status.mark_ready();
        writer.checkpoint_at_stop();
        let written = file::list(&checkpoints.dir).unwrap();
        assert_eq!(
            written.iter().map(|c| c.block_number).collect::<Vec<_>>(),
            [last]
        );
        // Stopping again at the same block writes nothing new, and the next
        // start begins where the stopped one ended.
        writer.checkpoint_at_stop();
        assert_eq!(file::list(&checkpoints.dir).unwrap().len(), 1);
        let restarted = Writer::new(&live, settings, None, wakeups, &status).unwrap();
        assert_eq!(restarted.market.height(), Some(last));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_as_busy_and_counts_it() {
        let status = EngineStatus::default();
        status.mark_ready();
        let (commands, _inbox) = Commands::channel(1).unwrap();
        commands.send(Command::Stop);
        assert_eq!(
            read(&commands, &status, |_| ()).await,
            Err(SubscribeError::Busy(1))
        );
        let key = Key::Mids(engine::views::mids::MidsKey::default());
        assert!(matches!(
            subscribe(&commands, &status, key).await,
            Err(SubscribeError::Busy(1))
        ));
        let refused = status
            .families()
            .into_iter()
            .find(|f| f.name == "l1gate_engine_requests_refused_total")
            .unwrap();
        assert_eq!(
            refused.samples,
            vec![common::metrics::Sample::by(&[("reason", "busy")], 2)]
        );
    }

    #[tokio::test]
    async fn a_full_candle_queue_holds_the_engine_back_and_loses_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, last) = node(&tmp.path().join("node"));
        let (wakeups, _dispatcher) = crate::wakeups::Wakeups::spawn();
        let status = EngineStatus::default();
        // A store thread slower than the fold, behind a queue of one.
        let (sink, queued) = crossbeam_channel::bounded(1);
        let store = std::thread::spawn(move || {
            let mut blocks = Vec::new();
            while let Ok(message) = queued.recv() {
                std::thread::sleep(Duration::from_millis(1));
                if let CandleMessage::Block(block) = message {
                    blocks.push(block.number);
                }
            }
            blocks
        });
        {
            let settings = EngineSettings {
                align_grace: Duration::from_millis(1),
                ..EngineSettings::default()
            };
            let feed = CandleFeed {
                from: Start::BlockNumber(0),
                carried_at: None,
                sink,
            };
            let mut writer = Writer::new(&live, settings, Some(feed), wakeups, &status).unwrap();
            fold_all(&mut writer);
        }
        let blocks = store.join().unwrap();
        assert!(status.candle_waits.load(Ordering::Relaxed) > 0, "it waited");
        assert!(blocks.windows(2).all(|w| w[1] == w[0] + 1), "none dropped");
        assert_eq!(blocks.last(), Some(&last));
    }

    #[tokio::test]
    async fn a_live_keys_recent_opening_is_shared_with_the_frames_since() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, _) = node(&tmp.path().join("node"));
        let (wakeups, _dispatcher) = crate::wakeups::Wakeups::spawn();
        let status = EngineStatus::default();
        // A ring of 8: an opening is shared for 2 frames after it (a
        // quarter of the ring), however long that takes here.
        let settings = EngineSettings {
            align_grace: Duration::from_millis(1),
            ring_capacity: 8,
            opening_reuse: Duration::from_secs(3600),
            key_linger: Duration::from_millis(50),
            ..EngineSettings::default()
        };
        let mut writer = Writer::new(&live, settings, None, wakeups, &status).unwrap();
        let mut blocks = Vec::new();
        for _ in 0..200 {
            let read = writer.source.read(common::unix_now_ms()).unwrap();
            while let Some(block) = writer.source.pop(common::unix_now_ms()) {
                blocks.push(block);
            }
            if read == 0 && writer.source.pending() == 0 && !blocks.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(blocks.len() > 40, "{} blocks read", blocks.len());
        let later = blocks.split_off(blocks.len() - 30);
        for block in &blocks {
            writer.fold(block);
        }
        status.mark_ready();
        let key = Key::L4Book(engine::views::l4book::L4BookKey::new("BTC".into(), None));
        let mut first = writer.subscribe(key.clone()).unwrap();
        let second = writer.subscribe(key.clone()).unwrap();
        assert!(!first.opening.frames().is_empty());
        assert!(
            Arc::ptr_eq(&first.opening, &second.opening),
            "one opening, built once"
        );
        // Fold until the key published one frame: a subscriber now gets the
        // same opening and that frame, the stream `first` reads.
        let mut later = later.into_iter();
        let published = |writer: &Writer<'_>| writer.keys[&key].hub.published();
        while published(&writer) < 1 {
            writer.fold(&later.next().expect("BTC moves within 30 blocks"));
        }
        let mut third = writer.subscribe(key.clone()).unwrap();
        assert!(Arc::ptr_eq(&first.opening, &third.opening));
        let (Recv::Frame(a), Recv::Frame(b)) = (first.receiver.recv(), third.receiver.recv())
        else {
            panic!("both read the frame published since the opening");
        };
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.position().block_number > first.opening.position().block_number);
        assert!(matches!(third.receiver.recv(), Recv::Empty));
        // Past 2 frames since: a new opening, at the newest block, read from
        // the head.
        while published(&writer) < 3 {
            writer.fold(&later.next().expect("BTC moves within 30 blocks"));
        }
        let at = writer.market.position();
        let mut fourth = writer.subscribe(key.clone()).unwrap();
        assert!(!Arc::ptr_eq(&first.opening, &fourth.opening));
        assert_eq!(fourth.opening.position(), at);
        assert!(matches!(fourth.receiver.recv(), Recv::Empty));
        // And that one is shared in turn, until it is older than allowed.
        let fifth = writer.subscribe(key.clone()).unwrap();
        assert!(Arc::ptr_eq(&fourth.opening, &fifth.opening));
        status.opening_reuse_ms.store(20, Ordering::Release);
        std::thread::sleep(Duration::from_millis(30));
        let sixth = writer.subscribe(key.clone()).unwrap();
        assert!(!Arc::ptr_eq(&fourth.opening, &sixth.opening));
        // first, fourth and sixth built; second, third and fifth shared.
        let counted = status
            .families()
            .into_iter()
            .find(|f| f.name == "l1gate_engine_subscriptions_total")
            .unwrap();
        assert_eq!(
            counted.samples,
            vec![
                common::metrics::Sample::by(&[("opening", "built")], 3),
                common::metrics::Sample::by(&[("opening", "shared")], 3)
            ]
        );
        // A recent opening is taken without the engine thread: a subscriber
        // whose command could not even be queued (the inbox is full and
        // nobody reads it) is answered with it.
        status.opening_reuse_ms.store(3_600_000, Ordering::Release);
        let (full, _inbox) = Commands::channel(1).unwrap();
        full.send(Command::Stop);
        let seventh = subscribe(&full, &status, key.clone()).await.unwrap();
        assert!(Arc::ptr_eq(&sixth.opening, &seventh.opening));
        // Once the key's last receiver is gone, the thread keeps it for the
        // linger: a subscriber meanwhile takes its opening without the
        // thread, and the key read again is kept however long ago it first
        // went unread.
        let opening = Arc::clone(&sixth.opening);
        drop((first, second, third, fourth, fifth, sixth, seventh));
        writer.drop_unread_keys();
        assert!(writer.keys.contains_key(&key), "kept while it lingers");
        std::thread::sleep(Duration::from_millis(60));
        let eighth = subscribe(&full, &status, key.clone()).await.unwrap();
        assert!(Arc::ptr_eq(&opening, &eighth.opening));
        writer.drop_unread_keys();
        assert!(writer.keys.contains_key(&key), "read again");
        drop(eighth);
        writer.drop_unread_keys();
        assert!(writer.keys.contains_key(&key), "unread since just now");
        // Unread past the linger, it goes, and its opening with it: the next
        // subscriber must ask the thread.
        std::thread::sleep(Duration::from_millis(60));
        writer.drop_unread_keys();
        assert!(!writer.keys.contains_key(&key));
        assert!(matches!(
            subscribe(&full, &status, key).await,
            Err(SubscribeError::Busy(1))
        ));
    }

    #[tokio::test]
    async fn a_damaged_newest_snapshot_is_passed_over_for_the_one_before() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, _) = node(&tmp.path().join("node"));
        let listed = live.snapshots().list();
        let (newest, older) = (
            listed[listed.len() - 1].clone(),
            listed[listed.len() - 2].clone(),
        );
        // Still looks whole ("[height," … "]"), but is not a snapshot.
        std::fs::write(&newest.path, format!("[{},{{\"BTC\":7}}]", newest.height)).unwrap();
        let (wakeups, _dispatcher) = crate::wakeups::Wakeups::spawn();
        let status = EngineStatus::default();
        let settings = EngineSettings {
            align_grace: Duration::from_millis(1),
            ..EngineSettings::default()
        };
        let writer = Writer::new(&live, settings, None, wakeups, &status).unwrap();
        assert_eq!(writer.market.height(), Some(older.height));
    }
}
