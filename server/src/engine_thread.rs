//! The engine thread: the single writer of market state. One std thread
//! owns the [`Engine`] and the flow views (trades, fills, TP/SL), folds the
//! node's blocks as the feeds deliver them, and publishes each block's frames
//! to one [`Hub`] ring per view key.
//!
//! Start-up: the newest L4 snapshot in the data directory (if any) is loaded,
//! the files after it are folded (catch-up), then the feeds are tailed. Until
//! catch-up first reaches the end of the files the views are not ready and
//! subscribing fails with [`SubscribeError::NotReady`].
//!
//! Subscribing is a [`Command`] sent to the thread. The thread answers it
//! between two blocks with the opening frame(s) and a hub receiver
//! positioned right after them, so the opening state and the later frames
//! neither overlap nor leave a gap.
//!
//! A view key is a normalised request ([`Key`]): subscribers asking the same
//! thing share one key, whose frames are built once per block and shared by
//! `Arc`. A key exists only while it has receivers; it is dropped (and its
//! engine-side tracking released) at the next block after its last receiver
//! goes away.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use engine::align::{AlignMode, Aligner};
use engine::block::Block;
use engine::fold::Engine;
use engine::hub::{Hub, Receiver};
use engine::views::ViewError;
use engine::views::bbo::{BboRequest, BboSubscription};
use engine::views::candles::{
    CandleError, CandleRequest, CandleSubscription, CandlesView, Interval,
};
use engine::views::fills::{FillsFilter, FillsSubscription, FillsView};
use engine::views::l2book::{L2BookRequest, L2BookSubscription};
use engine::views::l2diff::{L2BookDiffRequest, L2DiffSubscription};
use engine::views::l4book::{L4BookRequest, L4BookSubscription};
use engine::views::l4updates::{L4OrderUpdatesRequest, L4UpdatesSubscription};
use engine::views::mids::{AllMidsRequest, MidsSubscription};
use engine::views::tpsl::{TpslError, TpslSubscription, TpslUpdatesRequest, TpslView};
use engine::views::trades::{TradesRequest, TradesSubscription, TradesView};
use feeds::{Cursor, Feed, Mode, Start};
use proto::v3 as pb;
use thiserror::Error;
use tokio::sync::oneshot;

use crate::coalesce::Coalescer;
use crate::live::LiveFeeds;
use crate::market::convert;
use crate::market::wire::Shared;

/// Records read per feed per round.
const READ_BATCH: usize = 256;

/// Engine thread settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    /// Frames (blocks' worth of one key's frames) each ring retains; rounded
    /// up to a power of two.
    pub ring_capacity: usize,
    /// How long to wait for new data before checking the files again.
    pub poll_interval: Duration,
    /// A block completes at the latest this long after its first line.
    pub align_grace: Duration,
    /// Whether candles are folded and `StreamCandle` is served.
    pub candles: bool,
    /// Minimum block time between two frames of the same live candle.
    pub candle_throttle: Duration,
    /// L2 book / L2 diff coalescing window in block time (zero = every
    /// block).
    pub l2_coalesce: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            ring_capacity: 1024,
            poll_interval: Duration::from_millis(5),
            align_grace: Duration::from_secs(1),
            candles: true,
            candle_throttle: Duration::from_millis(
                u64::try_from(engine::views::candles::DEFAULT_THROTTLE_MS).unwrap_or(500),
            ),
            l2_coalesce: Duration::ZERO,
        }
    }
}

/// A normalised subscription request: the identity of a view key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// Top of book of these coins.
    Bbo(BTreeSet<String>),
    /// Aggregated book: coin, levels, significant figures, mantissa, strict.
    L2Book(String, Option<u32>, Option<u32>, Option<u64>, bool),
    /// L2 diffs: coins, levels, significant figures, mantissa.
    L2Diff(BTreeSet<String>, Option<u32>, Option<u32>, Option<u64>),
    /// L4 book of one coin, and whether its outcome sibling is mirrored.
    L4Book(String, bool),
    /// L4 order updates: coins (empty = all) and lowercased users.
    L4Updates(BTreeSet<String>, BTreeSet<String>),
    /// TP/SL: perp coins (empty = all) and lowercased users.
    Tpsl(BTreeSet<String>, BTreeSet<String>),
    /// Trades of these coins.
    Trades(BTreeSet<String>),
    /// Fills: which ones and the coin scope (empty = all).
    Fills(FillsKey, BTreeSet<String>),
    /// Mids (coin scope, empty = all).
    Mids(BTreeSet<String>),
    /// Book mids of the default exchange's perps only (`StreamAllMids`
    /// without an Info source); a block that moved only other mids sends
    /// nothing.
    PerpMids,
    /// One coin's candles of one interval.
    Candle(String, Interval),
}

/// Which fills a fills key follows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FillsKey {
    /// Every fill.
    All,
    /// One account's fills (lowercased).
    User(String),
    /// Fills attributed to a builder (lowercased).
    Builder(String),
    /// Liquidation fills, optionally of these liquidated users (lowercased).
    Liquidations(BTreeSet<String>),
}

/// One protobuf frame of some view.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `BboUpdate`.
    Bbo(pb::BboUpdate),
    /// `L2BookUpdate`.
    L2Book(pb::L2BookUpdate),
    /// `L2BookDiffUpdate`.
    L2Diff(pb::L2BookDiffUpdate),
    /// `L4BookUpdate`.
    L4Book(pb::L4BookUpdate),
    /// `L4OrderUpdate`.
    L4Updates(pb::L4OrderUpdate),
    /// `TpslUpdate`.
    Tpsl(pb::TpslUpdate),
    /// `TradesUpdate`.
    Trades(pb::TradesUpdate),
    /// `FillsUpdate`.
    Fills(pb::FillsUpdate),
    /// `AllMidsUpdate`.
    Mids(pb::AllMidsUpdate),
    /// `CandleUpdate`.
    Candle(pb::CandleUpdate),
}

/// What one key publishes per block: that block's frames, in order, and
/// their wire encoding, computed by the first subscriber that sends them
/// and shared by every other one (encode once, see [`crate::market`]).
#[derive(Debug, Default)]
pub struct Batch {
    frames: Vec<Frame>,
    wire: OnceLock<Vec<Shared>>,
}

impl Batch {
    /// A batch of `frames`.
    pub fn new(frames: Vec<Frame>) -> Self {
        Self {
            frames,
            wire: OnceLock::new(),
        }
    }

    /// The frames, in order.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Whether the batch has no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames' shared encodings, computed by `encode` on first use.
    pub(crate) fn wire(&self, encode: impl FnOnce(&[Frame]) -> Vec<Shared>) -> &[Shared] {
        self.wire.get_or_init(|| encode(&self.frames))
    }
}

impl From<Vec<Frame>> for Batch {
    fn from(frames: Vec<Frame>) -> Self {
        Self::new(frames)
    }
}

/// Why a subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubscribeError {
    /// The engine is still catching up with the files.
    #[error("market views are not ready yet: the engine is catching up with the node files")]
    NotReady,
    /// The engine thread is gone.
    #[error("the engine has stopped")]
    Stopped,
    /// A listed coin is not in the current universe.
    #[error("coins: unknown coin {0:?}")]
    UnknownCoin(String),
    /// The view refused the request.
    #[error("{0}")]
    View(#[from] ViewError),
    /// The TP/SL view refused the request.
    #[error("{0}")]
    Tpsl(#[from] TpslError),
    /// The candle view refused the request.
    #[error("{0}")]
    Candle(#[from] CandleError),
    /// Candle streaming is switched off in the configuration.
    #[error("candle streaming is disabled on this server (candle_streaming = false)")]
    CandlesDisabled,
}

/// An accepted subscription: the opening frames, then a receiver of every
/// later block's frames.
#[derive(Debug)]
pub struct Opened {
    /// Frames that open the stream (may be empty for live-only views).
    pub opening: Batch,
    /// Later frames, from the block after the opening.
    pub receiver: Receiver<Batch>,
}

/// A request to the engine thread.
#[derive(Debug)]
pub enum Command {
    /// Subscribe to `key`.
    Subscribe {
        /// The view key.
        key: Key,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Opened, SubscribeError>>,
    },
}

/// What the engine thread reports about itself.
#[derive(Debug, Default)]
pub struct EngineStatus {
    ready: AtomicBool,
    height: AtomicU64,
    block_time_ms: AtomicI64,
    keys: AtomicU64,
    error: Mutex<Option<String>>,
    coins: parking_lot::RwLock<Arc<BTreeSet<String>>>,
}

impl EngineStatus {
    /// Whether catch-up reached the end of the files at least once.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
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

    fn publish_coins(&self, coins: &BTreeSet<String>) {
        *self.coins.write() = Arc::new(coins.clone());
    }
}

/// Handle to the running engine thread; dropping it stops the thread.
#[derive(Debug)]
pub struct EngineThread {
    commands: mpsc::Sender<Command>,
    status: Arc<EngineStatus>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl EngineThread {
    /// Starts the thread over `live`'s feeds.
    ///
    /// # Errors
    /// When the OS refuses to start a thread.
    pub fn start(live: Arc<LiveFeeds>, settings: EngineSettings) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let status = Arc::new(EngineStatus::default());
        let stop = Arc::new(AtomicBool::new(false));
        let join = {
            let status = Arc::clone(&status);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("l1gate-engine".into())
                .spawn(move || {
                    let result = Writer::new(&live, settings, &status)
                        .and_then(|writer| writer.run(&inbox, &stop));
                    if let Err(error) = result {
                        tracing::error!(%error, "engine thread stopped");
                        *status.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                    }
                })?
        };
        Ok(Self {
            commands,
            status,
            stop,
            join: Some(join),
        })
    }

    /// The thread's status.
    pub fn status(&self) -> &Arc<EngineStatus> {
        &self.status
    }

    /// A sender of commands to the thread.
    pub fn commands(&self) -> mpsc::Sender<Command> {
        self.commands.clone()
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(join) = self.join.take() {
            // The thread checks the flag at least once per poll interval.
            let _ = join.join();
        }
    }
}

/// Subscribes through `commands`.
///
/// # Errors
/// [`SubscribeError`] from the thread, or `Stopped` when it is gone.
pub async fn subscribe(
    commands: &mpsc::Sender<Command>,
    key: Key,
) -> Result<Opened, SubscribeError> {
    let (reply, answer) = oneshot::channel();
    commands
        .send(Command::Subscribe { key, reply })
        .map_err(|_| SubscribeError::Stopped)?;
    answer.await.map_err(|_| SubscribeError::Stopped)?
}

/// The engine-side producer of one key.
enum Producer {
    Bbo(BboSubscription),
    L2Book(L2BookSubscription),
    L2Diff(L2DiffSubscription),
    L4Book(L4BookSubscription),
    L4Updates(L4UpdatesSubscription),
    Tpsl(TpslSubscription),
    Trades(TradesSubscription),
    Fills(FillsSubscription),
    Mids(MidsSubscription),
    PerpMids(MidsSubscription, Option<pb::AllMidsUpdate>),
    Candle(CandleSubscription),
}

struct Entry {
    producer: Producer,
    hub: Hub<Batch>,
    coalescer: Option<Coalescer>,
}

struct Input {
    feed: Feed,
    cursor: Cursor,
    source: feeds::Source,
}

struct Writer<'s> {
    settings: EngineSettings,
    status: &'s EngineStatus,
    engine: Engine,
    trades: TradesView,
    fills: FillsView,
    tpsl: TpslView,
    candles: Option<CandlesView>,
    universe: BTreeSet<String>,
    inputs: Vec<Input>,
    aligner: Aligner,
    keys: BTreeMap<Key, Entry>,
}

impl<'s> Writer<'s> {
    fn new(
        live: &LiveFeeds,
        settings: EngineSettings,
        status: &'s EngineStatus,
    ) -> Result<Self, String> {
        let engine = match live.snapshots().latest() {
            Some(file) => {
                let bytes = live.snapshots().read(&file).map_err(|e| e.to_string())?;
                let snapshot = engine::snapshot::parse(&bytes)
                    .map_err(|e| format!("snapshot {}: {e}", file.path.display()))?;
                Engine::from_snapshot(snapshot)
            }
            None => Engine::new(),
        };
        let start = engine.height().map_or(0, |h| h + 1);
        let mut mode = AlignMode::ByBlock;
        let mut inputs = Vec::new();
        for source in feeds::Source::EVENT_STREAMS {
            let Some(feed) = live.feed(source) else {
                continue;
            };
            let Some(dir) = feed.source_dir_name() else {
                continue;
            };
            if source.mode_of_dir(&dir) == Some(Mode::Streaming) {
                mode = AlignMode::Streaming;
            }
            let cursor = feed
                .seek(Start::BlockNumber(start))
                .map_err(|e| e.to_string())?;
            inputs.push(Input {
                feed,
                cursor,
                source,
            });
        }
        let sources: Vec<feeds::Source> = inputs.iter().map(|i| i.source).collect();
        let grace = i64::try_from(settings.align_grace.as_millis()).unwrap_or(i64::MAX);
        let mut aligner = Aligner::new(mode, &sources, grace);
        if let Some(height) = engine.height() {
            aligner = aligner.starting_after(height);
        }
        let universe = engine.books().iter().map(|(c, _)| c.to_owned()).collect();
        status.publish_coins(&universe);
        Ok(Self {
            settings,
            status,
            engine,
            trades: TradesView::new(),
            fills: FillsView::new(),
            tpsl: TpslView::new(),
            candles: settings.candles.then(CandlesView::new),
            universe,
            inputs,
            aligner,
            keys: BTreeMap::new(),
        })
    }

    fn run(mut self, inbox: &mpsc::Receiver<Command>, stop: &AtomicBool) -> Result<(), String> {
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(());
            }
            // Commands are answered here, between two blocks.
            while let Ok(command) = inbox.try_recv() {
                self.command(command);
            }
            let read = self.read_round()?;
            let folded = self.fold_ready();
            if read == 0 && folded == 0 {
                self.status.ready.store(true, Ordering::Release);
                let mut readable = false;
                for input in &self.inputs {
                    match input.feed.refresh() {
                        Ok(grew) => readable |= grew,
                        Err(error) => tracing::warn!(%error, "engine: refresh failed"),
                    }
                }
                if readable {
                    // Lines appended since the last look: read them now, not
                    // one poll interval later.
                    continue;
                }
                match inbox.recv_timeout(self.settings.poll_interval) {
                    Ok(command) => self.command(command),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
        }
    }

    fn read_round(&mut self) -> Result<usize, String> {
        let now = crate::unix_now_ms();
        let mut read = 0;
        for input in &mut self.inputs {
            let records = input
                .feed
                .read(&mut input.cursor, READ_BATCH)
                .map_err(|e| e.to_string())?;
            read += records.len();
            for record in records {
                self.aligner.push_line(input.source, record.data, now);
            }
        }
        Ok(read)
    }

    fn fold_ready(&mut self) -> usize {
        let mut folded = 0;
        while let Some(block) = self.aligner.pop(crate::unix_now_ms()) {
            self.fold(&block);
            folded += 1;
        }
        folded
    }

    fn fold(&mut self, block: &Block) {
        let report = self.engine.apply(block);
        if report.skipped {
            return;
        }
        // The flow views only need fills and statuses.
        let mut events = Block::new(block.number, block.time_ms);
        events.lines.fills.clone_from(&block.lines.fills);
        events
            .lines
            .order_statuses
            .clone_from(&block.lines.order_statuses);
        let decoded = events.decode();
        self.trades.apply(&decoded);
        self.fills.apply(&decoded);
        self.tpsl.apply(&decoded);
        if let Some(candles) = self.candles.as_mut() {
            candles.apply_trades_view(&self.trades);
        }
        let known = self.universe.len();
        for frame in self.trades.frames() {
            if !self.universe.contains(&frame.coin) {
                self.universe.insert(frame.coin.clone());
            }
        }
        for (coin, _) in self.engine.books().iter() {
            if !self.universe.contains(coin) {
                self.universe.insert(coin.to_owned());
            }
        }
        if self.universe.len() != known {
            self.status.publish_coins(&self.universe);
        }
        self.publish(
            i64::try_from(block.number).unwrap_or(i64::MAX),
            block.time_ms,
        );
        self.status
            .block_time_ms
            .store(block.time_ms, Ordering::Release);
        self.status.height.store(block.number, Ordering::Release);
    }

    /// Drops keys nobody reads any more, then publishes every other key's
    /// frames of the block just folded.
    fn publish(&mut self, block_number: i64, time_ms: i64) {
        let gone: Vec<Key> = self
            .keys
            .iter()
            .filter(|(_, entry)| entry.hub.receiver_count() == 0)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            if let Some(entry) = self.keys.remove(&key) {
                release(entry.producer, &mut self.engine);
            }
        }
        self.status
            .keys
            .store(self.keys.len() as u64, Ordering::Release);
        for entry in self.keys.values_mut() {
            let batch = block_frames(
                &mut entry.producer,
                &Views {
                    engine: &self.engine,
                    trades: &self.trades,
                    fills: &self.fills,
                    tpsl: &self.tpsl,
                    candles: self.candles.as_ref(),
                },
            );
            let batch = match entry.coalescer.as_mut() {
                Some(coalescer) => coalescer.push(batch, block_number, time_ms),
                None => batch,
            };
            if !batch.is_empty() {
                entry.hub.publish(Batch::new(batch));
            }
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Subscribe { key, reply } => {
                let answer = self.subscribe(key);
                // The subscriber may have gone; nothing to do then.
                let _ = reply.send(answer);
            }
        }
    }

    fn subscribe(&mut self, key: Key) -> Result<Opened, SubscribeError> {
        if !self.status.ready() {
            return Err(SubscribeError::NotReady);
        }
        // The view's own checks (counts, parameters) come first.
        let (producer, opening) = self.open(&key)?;
        if let Err(error) = self.check_universe(&key) {
            release(producer, &mut self.engine);
            return Err(error);
        }
        if let Some(entry) = self.keys.get(&key) {
            // The key exists: its producer keeps running; this opening was
            // computed for the new subscriber only.
            release(producer, &mut self.engine);
            return Ok(Opened {
                opening: Batch::new(opening),
                receiver: entry.hub.subscribe(),
            });
        }
        let hub = Hub::with_capacity(self.settings.ring_capacity);
        let receiver = hub.subscribe();
        let window_ms = i64::try_from(self.settings.l2_coalesce.as_millis()).unwrap_or(i64::MAX);
        let coalescer = matches!(key, Key::L2Book(..) | Key::L2Diff(..))
            .then(|| Coalescer::new(window_ms, self.status.block_time_ms()));
        self.keys.insert(
            key,
            Entry {
                producer,
                hub,
                coalescer,
            },
        );
        self.status
            .keys
            .store(self.keys.len() as u64, Ordering::Release);
        Ok(Opened {
            opening: Batch::new(opening),
            receiver,
        })
    }

    fn check_universe(&self, key: &Key) -> Result<(), SubscribeError> {
        let coins: Box<dyn Iterator<Item = &String>> = match key {
            Key::Bbo(coins)
            | Key::L2Diff(coins, ..)
            | Key::L4Updates(coins, _)
            | Key::Tpsl(coins, _)
            | Key::Trades(coins) => Box::new(coins.iter()),
            Key::L2Book(coin, ..) | Key::L4Book(coin, _) => Box::new(std::iter::once(coin)),
            Key::Fills(..) | Key::Mids(_) | Key::PerpMids | Key::Candle(..) => {
                Box::new(std::iter::empty())
            }
        };
        for coin in coins {
            if !self.universe.contains(coin) {
                return Err(SubscribeError::UnknownCoin(coin.clone()));
            }
        }
        Ok(())
    }

    /// A producer for `key` and the opening frames it gives right now.
    fn open(&mut self, key: &Key) -> Result<(Producer, Vec<Frame>), SubscribeError> {
        let engine = &mut self.engine;
        Ok(match key {
            Key::Bbo(coins) => {
                let request = BboRequest {
                    coins: coins.iter().cloned().collect(),
                };
                let (sub, frames) = BboSubscription::open(engine, &request)?;
                let opening = frames.iter().map(|f| Frame::Bbo(convert::bbo(f))).collect();
                (Producer::Bbo(sub), opening)
            }
            Key::L2Book(coin, n_levels, n_sig_figs, mantissa, strict) => {
                let request = L2BookRequest {
                    coin: coin.clone(),
                    n_levels: *n_levels,
                    n_sig_figs: *n_sig_figs,
                    mantissa: *mantissa,
                    strict: Some(*strict),
                };
                let (sub, frame) = L2BookSubscription::open(engine, &request)?;
                (
                    Producer::L2Book(sub),
                    vec![Frame::L2Book(convert::l2book(&frame))],
                )
            }
            Key::L2Diff(coins, n_levels, n_sig_figs, mantissa) => {
                let request = L2BookDiffRequest {
                    coins: coins.iter().cloned().collect(),
                    n_levels: *n_levels,
                    n_sig_figs: *n_sig_figs,
                    mantissa: *mantissa,
                };
                let (sub, frame) = L2DiffSubscription::open(engine, &request)?;
                (
                    Producer::L2Diff(sub),
                    vec![Frame::L2Diff(convert::l2diff(&frame))],
                )
            }
            Key::L4Book(coin, mirror) => {
                let request = L4BookRequest {
                    coin: coin.clone(),
                    mirror: Some(*mirror),
                };
                let (sub, frame) = L4BookSubscription::open(engine, &request)?;
                (
                    Producer::L4Book(sub),
                    vec![Frame::L4Book(convert::l4book(&frame))],
                )
            }
            Key::L4Updates(coins, users) => {
                let request = L4OrderUpdatesRequest {
                    coins: coins.iter().cloned().collect(),
                    users: users.iter().cloned().collect(),
                };
                let (sub, frame) = L4UpdatesSubscription::open(engine, &request);
                (
                    Producer::L4Updates(sub),
                    vec![Frame::L4Updates(convert::l4updates(&frame))],
                )
            }
            Key::Tpsl(coins, users) => {
                let request = TpslUpdatesRequest {
                    coins: coins.iter().cloned().collect(),
                    users: users.iter().cloned().collect(),
                };
                let (sub, frame) = TpslSubscription::open(&self.tpsl, &request)?;
                (
                    Producer::Tpsl(sub),
                    vec![Frame::Tpsl(convert::tpsl(&frame))],
                )
            }
            Key::Trades(coins) => {
                let request = TradesRequest {
                    coins: coins.iter().cloned().collect(),
                };
                (
                    Producer::Trades(TradesSubscription::new(&request)?),
                    Vec::new(),
                )
            }
            Key::Fills(which, coins) => {
                let filter = match which {
                    FillsKey::All => FillsFilter::All,
                    FillsKey::User(user) => FillsFilter::User(user.clone()),
                    FillsKey::Builder(builder) => FillsFilter::Builder(builder.clone()),
                    FillsKey::Liquidations(users) => FillsFilter::Liquidations(users.clone()),
                };
                let coins: Vec<String> = coins.iter().cloned().collect();
                (
                    Producer::Fills(FillsSubscription::new(filter, &coins)),
                    Vec::new(),
                )
            }
            Key::Candle(coin, interval) => {
                let Some(candles) = self.candles.as_ref() else {
                    return Err(SubscribeError::CandlesDisabled);
                };
                let request = CandleRequest {
                    coin: coin.clone(),
                    interval: interval.as_str().to_owned(),
                };
                let throttle =
                    i64::try_from(self.settings.candle_throttle.as_millis()).unwrap_or(i64::MAX);
                let mut sub = CandleSubscription::new(&request, throttle)?;
                let opening = sub
                    .open(candles)
                    .map(|f| Frame::Candle(convert::candle(&f)))
                    .into_iter()
                    .collect();
                (Producer::Candle(sub), opening)
            }
            Key::PerpMids => {
                let (sub, frame) = MidsSubscription::open(engine, &AllMidsRequest::default());
                let frame = perp_mids(convert::mids(&frame));
                (
                    Producer::PerpMids(sub, Some(frame.clone())),
                    vec![Frame::Mids(frame)],
                )
            }
            Key::Mids(coins) => {
                let request = AllMidsRequest {
                    coins: coins.iter().cloned().collect(),
                };
                let (sub, frame) = MidsSubscription::open(engine, &request);
                (
                    Producer::Mids(sub),
                    vec![Frame::Mids(convert::mids(&frame))],
                )
            }
        })
    }
}

/// Releases what a producer holds in the engine (tracked L2 books, watched
/// L4 coins).
fn release(producer: Producer, engine: &mut Engine) {
    match producer {
        Producer::L2Book(sub) => sub.close(engine),
        Producer::L2Diff(sub) => sub.close(engine),
        Producer::L4Book(sub) => sub.close(engine),
        Producer::Bbo(_)
        | Producer::L4Updates(_)
        | Producer::Tpsl(_)
        | Producer::Trades(_)
        | Producer::Fills(_)
        | Producer::Mids(_)
        | Producer::PerpMids(..)
        | Producer::Candle(_) => {}
    }
}

/// `update` narrowed to the default exchange's perps.
fn perp_mids(mut update: pb::AllMidsUpdate) -> pb::AllMidsUpdate {
    update
        .mids
        .retain(|coin, _| engine::coin::is_default_perp(coin));
    update
}

/// The shared state a producer reads.
struct Views<'v> {
    engine: &'v Engine,
    trades: &'v TradesView,
    fills: &'v FillsView,
    tpsl: &'v TpslView,
    candles: Option<&'v CandlesView>,
}

/// One key's frames of the block just folded.
fn block_frames(producer: &mut Producer, views: &Views<'_>) -> Vec<Frame> {
    let Views {
        engine,
        trades,
        fills,
        tpsl,
        candles,
    } = *views;
    match producer {
        Producer::Bbo(sub) => sub
            .on_block(engine)
            .iter()
            .map(|f| Frame::Bbo(convert::bbo(f)))
            .collect(),
        Producer::L2Book(sub) => sub
            .on_block(engine)
            .map(|f| Frame::L2Book(convert::l2book(&f)))
            .into_iter()
            .collect(),
        Producer::L2Diff(sub) => sub
            .on_block(engine)
            .map(|f| Frame::L2Diff(convert::l2diff(&f)))
            .into_iter()
            .collect(),
        Producer::L4Book(sub) => sub
            .on_block(engine)
            .map(|f| Frame::L4Book(convert::l4book(&f)))
            .into_iter()
            .collect(),
        Producer::L4Updates(sub) => sub
            .on_block(engine)
            .map(|f| Frame::L4Updates(convert::l4updates(&f)))
            .into_iter()
            .collect(),
        Producer::Tpsl(sub) => sub
            .on_block(tpsl)
            .map(|f| Frame::Tpsl(convert::tpsl(&f)))
            .into_iter()
            .collect(),
        Producer::Trades(sub) => sub
            .frames(trades)
            .map(|f| Frame::Trades(convert::trades(f)))
            .collect(),
        Producer::Fills(sub) => sub
            .on_block(fills)
            .map(|f| Frame::Fills(convert::fills(&f)))
            .into_iter()
            .collect(),
        Producer::Mids(sub) => sub
            .on_block(engine)
            .map(|f| Frame::Mids(convert::mids(&f)))
            .into_iter()
            .collect(),
        Producer::PerpMids(sub, last) => {
            let Some(frame) = sub.on_block(engine) else {
                return Vec::new();
            };
            let frame = perp_mids(convert::mids(&frame));
            if last.as_ref().is_some_and(|sent| sent.mids == frame.mids) {
                return Vec::new();
            }
            *last = Some(frame.clone());
            vec![Frame::Mids(frame)]
        }
        Producer::Candle(sub) => candles
            .map(|view| {
                sub.on_block(view)
                    .iter()
                    .map(|f| Frame::Candle(convert::candle(f)))
                    .collect()
            })
            .unwrap_or_default(),
    }
}
