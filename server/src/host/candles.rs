//! The candle store thread: it persists the candles the market folds — the
//! same candle state `StreamCandle` serves — for the HTTP lookups. The
//! engine thread sends it, per folded block, the `1s`/`1m`/`5m` candles
//! that changed or closed ([`CandleBlock`]); this thread keeps open buckets
//! (and closed ones not yet committed) in [`Candles`]' live state for
//! lookups, and commits closed buckets to the [`CandleStore`] in batches.
//! Nothing here reads node files or folds trades.
//!
//! # Where it starts
//!
//! [`resume_point`] tells the engine where its fold of trades must start
//! for the store:
//!
//! - empty store: at the history start (the first block at or after it).
//!   Coverage starts at the history start when the node files reach back
//!   before it, else at the first block's time: a bucket that opened
//!   before the first block on disk would be partial, so it is neither
//!   stored nor served;
//! - store with a watermark (block `B` at time `T`): every bucket that ended
//!   by `T` is stored; the buckets still open at `T` all opened at or after
//!   the `5m` bucket holding `T`. The engine folds trades from that bucket's
//!   open (less [`REPLAY_MARGIN_MS`]) and this thread stores only candles
//!   whose bucket ends after `T`, so nothing is counted twice and the open
//!   buckets are rebuilt whole. The store also refuses a bucket it already
//!   holds.
//!
//! Batches are committed at most every [`COMMIT_EVERY`] (or when
//! [`MAX_PENDING`] candles wait), and once more when the thread stops.
//!
//! # Damage
//!
//! A record that fails its checks is skipped when the store opens (see
//! [`crate::candles::store`]). Before the thread starts, [`repair`] folds
//! the node's fills again over each damaged batch's stretch of block time,
//! while the files still reach back that far, and commits the candles of
//! those buckets: the store keeps what it already holds, so only the lost
//! candles are written. A stretch whose files were pruned stays lost, and
//! says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use engine::market::candles::{Candle, CandlesView, Interval};
use engine::market::{Market, Needs};
use engine::source::{BlockSource, SourceOptions};
use feeds::{Feed, Source, Start};

use crate::candles::Candles;
use crate::candles::store::{CandleStore, DamagedSpan, INTERVALS, Watermark};

/// Longest time closed candles wait before they are committed.
pub const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// Closed candles that force a commit (catch-up over many files).
pub const MAX_PENDING: usize = 65_536;
/// Extra block time folded before the oldest bucket that was open at the
/// watermark (covers fills stamped slightly after their block).
pub const REPLAY_MARGIN_MS: i64 = 60_000;

/// What one folded block did to the stored intervals' candles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandleBlock {
    /// The block.
    pub number: u64,
    /// Its block time, Unix ms.
    pub time_ms: i64,
    /// Open candles the block changed.
    pub changed: Vec<Candle>,
    /// Candles the block closed, in the order they closed.
    pub closed: Vec<Candle>,
}

impl CandleBlock {
    /// The stored intervals' candles that `candles` changed or closed in
    /// its last block.
    pub fn of(candles: &CandlesView) -> Self {
        let (number, time_ms) = candles.position();
        let stored = |candle: &&Candle| INTERVALS.contains(&candle.interval);
        Self {
            number,
            time_ms,
            changed: candles.changed().filter(stored).cloned().collect(),
            closed: candles.closed().iter().filter(stored).cloned().collect(),
        }
    }
}

/// What the engine thread tells the store thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CandleMessage {
    /// A folded block.
    Block(CandleBlock),
    /// The fold reached the end of the files.
    CaughtUp,
}

/// Where the store starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterSettings {
    /// Oldest bucket stored (Unix ms).
    pub history_start_ms: i64,
    /// Whether the node files reach back before the history start (then
    /// coverage starts at the history start; else at the first block).
    pub data_before_history: bool,
}

/// Where the engine's fold of trades must start for `store`: the history
/// start for an empty store, else shortly before the oldest bucket still
/// open at its watermark.
pub fn resume_point(store: &CandleStore, history_start_ms: i64) -> Start {
    match store.reader().watermark() {
        Some(w) => {
            let oldest_open = Interval::Minute5.bucket_open(w.block_time_ms);
            Start::Timestamp(oldest_open.saturating_sub(REPLAY_MARGIN_MS))
        }
        None => Start::Timestamp(history_start_ms),
    }
}

/// What [`repair`] did for one damaged span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The span's buckets were folded again from the node's fills;
    /// `written` candles were missing and are stored again.
    Rebuilt {
        /// The span.
        span: DamagedSpan,
        /// Candles written (0: an earlier start already rebuilt them).
        written: usize,
    },
    /// The node's fills no longer reach back to the span's oldest bucket
    /// (they start at `files_from_ms`, or there are none): its lost
    /// candles stay lost.
    FilesGone {
        /// The span.
        span: DamagedSpan,
        /// Block time of the oldest fills on disk, if any.
        files_from_ms: Option<i64>,
    },
    /// Reading the files or writing the store failed.
    Failed {
        /// The span.
        span: DamagedSpan,
        /// Why.
        error: String,
    },
}

/// Rebuilds the candles of `spans` (the store's damaged batches) from the
/// node's fills in `data_dir`, where they still reach back far enough. See
/// the module docs.
pub fn repair(
    store: &mut CandleStore,
    data_dir: &std::path::Path,
    spans: &[DamagedSpan],
) -> Vec<Repair> {
    spans
        .iter()
        .map(|&span| match rebuild(store, data_dir, span) {
            Ok(Some(written)) => Repair::Rebuilt { span, written },
            Ok(None) => Repair::FilesGone {
                span,
                files_from_ms: oldest_fills_ms(data_dir),
            },
            Err(error) => Repair::Failed { span, error },
        })
        .collect()
}

/// Block time of the oldest fills on disk.
fn oldest_fills_ms(data_dir: &std::path::Path) -> Option<i64> {
    let feed = Feed::open(data_dir, Source::Fills).ok()?;
    let mut cursor = feed.seek(Start::BlockNumber(0)).ok()?;
    feed.read(&mut cursor, 1).ok()?.first()?.timestamp_ms
}

/// One span: the candles written, or `None` when the files start too late.
fn rebuild(
    store: &mut CandleStore,
    data_dir: &std::path::Path,
    span: DamagedSpan,
) -> Result<Option<usize>, String> {
    let Some(watermark) = store.reader().watermark() else {
        return Ok(Some(0));
    };
    // The batch's candles closed in blocks after `after`; the oldest of
    // them opened at or after the 5m bucket holding it.
    let after = span.after_ms.unwrap_or(watermark.coverage_start_ms);
    let oldest_open = Interval::Minute5
        .bucket_open(after)
        .max(watermark.coverage_start_ms);
    let mut market = Market::new(Needs {
        trades: true,
        candles: true,
        ..Needs::NONE
    });
    let mut first_ms = None;
    let mut rebuilt: Vec<Candle> = Vec::new();
    fold_fills(
        data_dir,
        Start::Timestamp(oldest_open.saturating_sub(REPLAY_MARGIN_MS)),
        |block| {
            if block.time_ms > span.through_ms {
                return false;
            }
            let first = *first_ms.get_or_insert(block.time_ms);
            market.apply(&block);
            // Complete buckets only: none that opened before the first block
            // read.
            rebuilt.extend(
                market
                    .candles()
                    .closed()
                    .iter()
                    .filter(|c| {
                        INTERVALS.contains(&c.interval)
                            && c.open_time >= first
                            && c.open_time >= oldest_open
                    })
                    .cloned(),
            );
            true
        },
    )?;
    if first_ms.is_none_or(|first| first > oldest_open) {
        return Ok(None);
    }
    store
        .commit(&rebuilt, watermark)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Primes an edge's candle store: folds the trades of `data_dir`'s fills
/// from the first block through block `through` and hands each block's
/// candles to the store thread through `sink`, as the engine thread would
/// have, had it folded from there. The engine then starts from the
/// checkpoint at `through` and goes on with the next block, so the store
/// covers what the files hold, not only what came after the checkpoint.
/// Returns the blocks folded.
///
/// # Errors
/// When the fills cannot be read.
pub fn prime(
    data_dir: &std::path::Path,
    through: u64,
    sink: &crossbeam_channel::Sender<CandleMessage>,
) -> Result<u64, String> {
    let mut market = Market::new(Needs {
        trades: true,
        candles: true,
        ..Needs::NONE
    });
    let mut folded = 0;
    fold_fills(data_dir, Start::BlockNumber(0), |block| {
        if block.number > through {
            return false;
        }
        market.apply(&block);
        folded += 1;
        sink.send(CandleMessage::Block(CandleBlock::of(market.candles())))
            .is_ok()
    })?;
    Ok(folded)
}

/// Reads `data_dir`'s fills block by block from `from`, handing each to
/// `each` until it answers `false` or the files end.
fn fold_fills(
    data_dir: &std::path::Path,
    from: Start,
    mut each: impl FnMut(engine::block::Block) -> bool,
) -> Result<(), String> {
    let feed = Feed::open(data_dir, Source::Fills).map_err(|e| e.to_string())?;
    let mut source = BlockSource::new(
        vec![feed],
        SourceOptions {
            fills_from: Some(from),
            ..SourceOptions::from_block(0)
        },
    )
    .map_err(|e| e.to_string())?;
    let now = crate::unix_now_ms();
    loop {
        let read = source.read(now).map_err(|e| e.to_string())?;
        while let Some(block) = source.pop(now) {
            if !each(block) {
                return Ok(());
            }
        }
        if read == 0 {
            if let Some(block) = source.finish() {
                each(block);
            }
            return Ok(());
        }
    }
}

/// Handle to the store thread; dropping it stops the thread (after a last
/// commit) and releases the store.
#[derive(Debug)]
pub struct CandleWriter {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl CandleWriter {
    /// Starts the thread writing into `store` and publishing into `candles`;
    /// the engine thread sends it the market's candles through the
    /// returned sender.
    ///
    /// # Errors
    /// When the OS refuses to start a thread.
    pub fn start(
        store: CandleStore,
        candles: Arc<Candles>,
        settings: WriterSettings,
    ) -> std::io::Result<(Self, Sender<CandleMessage>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let (sender, receiver) = crossbeam_channel::unbounded();
        let join = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("l1gate-candles".into())
                .spawn(move || Writer::new(store, candles, settings).run(&receiver, &stop))?
        };
        Ok((
            Self {
                stop,
                join: Some(join),
            },
            sender,
        ))
    }
}

impl Drop for CandleWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
    }
}

struct Writer {
    store: CandleStore,
    candles: Arc<Candles>,
    settings: WriterSettings,
    /// Candles whose bucket ended by this block time are already stored.
    stored_through_ms: i64,
    /// Buckets opening before this are not covered.
    coverage_start_ms: Option<i64>,
    /// Buckets opening in this span are partial and neither stored nor
    /// served: the node's files no longer reached back to the buckets open
    /// at the watermark when the fold resumed.
    partial: Option<(i64, i64)>,
    pending: Vec<Candle>,
    last: Option<(u64, i64)>,
    committed: Option<(u64, i64)>,
    last_commit: Instant,
}

impl Writer {
    fn new(store: CandleStore, candles: Arc<Candles>, settings: WriterSettings) -> Self {
        let watermark = store.reader().watermark();
        if let Some(w) = watermark {
            tracing::info!(
                block = w.block_number,
                block_time_ms = w.block_time_ms,
                candles = store.reader().candles(),
                "candle store: resuming after its last commit"
            );
        }
        let coverage_start_ms = watermark.map(|w| w.coverage_start_ms);
        candles.live.write().coverage_start_ms = coverage_start_ms;
        Self {
            store,
            candles,
            settings,
            stored_through_ms: watermark.map_or(i64::MIN, |w| w.block_time_ms),
            coverage_start_ms,
            partial: None,
            pending: Vec::new(),
            last: None,
            committed: watermark.map(|w| (w.block_number, w.block_time_ms)),
            last_commit: Instant::now(),
        }
    }

    fn run(mut self, messages: &Receiver<CandleMessage>, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let wait = COMMIT_EVERY.saturating_sub(self.last_commit.elapsed());
            match messages.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(CandleMessage::Block(block)) => self.fold(block),
                Ok(CandleMessage::CaughtUp) => self.candles.live.write().caught_up = true,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.last_commit.elapsed() >= COMMIT_EVERY || self.pending.len() >= MAX_PENDING {
                self.commit();
            }
        }
        self.commit();
    }

    fn fold(&mut self, block: CandleBlock) {
        let history_start = self.settings.history_start_ms;
        let data_before_history = self.settings.data_before_history;
        let coverage = *self
            .coverage_start_ms
            .get_or_insert(if data_before_history {
                history_start
            } else {
                block.time_ms.max(history_start)
            });
        let stored_through = self.stored_through_ms;
        if self.last.is_none() && stored_through != i64::MIN {
            // The first block after a restart: the buckets open at the
            // watermark are whole only if the files still reach back to the
            // oldest of them.
            let oldest_open = Interval::Minute5.bucket_open(stored_through);
            if block.time_ms > oldest_open {
                tracing::warn!(
                    from = %feeds::time::format_iso8601_ms(oldest_open),
                    to = %feeds::time::format_iso8601_ms(block.time_ms),
                    "candle store: the node's files no longer reach back to the buckets open at \
                     the last commit; buckets opening in this span are partial and not served"
                );
                self.partial = Some((oldest_open, block.time_ms));
            }
        }
        let partial = self.partial;
        let keep = |candle: &Candle| {
            candle.open_time >= coverage
                && candle.next_open > stored_through
                && partial
                    .is_none_or(|(from, to)| candle.open_time < from || candle.open_time >= to)
        };
        let mut live = self.candles.live.write();
        live.coverage_start_ms = Some(coverage);
        for candle in &block.changed {
            if keep(candle) {
                live.upsert(candle);
            }
        }
        for candle in block.closed {
            if keep(&candle) {
                live.upsert(&candle);
                self.pending.push(candle);
            }
        }
        live.block_number = block.number;
        live.block_time_ms = block.time_ms;
        drop(live);
        self.last = Some((block.number, block.time_ms));
    }

    fn commit(&mut self) {
        self.last_commit = Instant::now();
        let Some((block_number, block_time_ms)) = self.last else {
            return;
        };
        if self.pending.is_empty() && self.committed == self.last {
            return;
        }
        let watermark = Watermark {
            block_number,
            block_time_ms,
            coverage_start_ms: self.coverage_start_ms.unwrap_or(block_time_ms),
        };
        match self.store.commit(&self.pending, watermark) {
            Ok(written) => {
                let mut live = self.candles.live.write();
                for candle in &self.pending {
                    live.remove(candle);
                }
                live.error = None;
                drop(live);
                tracing::debug!(written, block = block_number, "candle store: committed");
                self.pending.clear();
                self.committed = self.last;
            }
            Err(error) => {
                tracing::error!(%error, "candle store: commit failed; will retry");
                self.candles.live.write().error = Some(error.to_string());
            }
        }
    }
}
