//! The candle writer: one std thread with its own cursor on the fills feed.
//! It pairs fills into trades ([`TradesView`]), folds `1s`/`1m`/`5m`
//! candles ([`CandlesView`]), keeps open buckets (and closed ones not yet
//! committed) in [`Candles`]' live state for lookups, and commits closed
//! buckets to the [`CandleStore`] in batches.
//!
//! # Where it starts
//!
//! - Empty store: at the history start (the first block at or after it).
//!   Coverage starts at the history start when the node files reach back
//!   before it, else at the first block's time: a bucket that opened
//!   before the first block on disk would be partial, so it is neither
//!   stored nor served.
//! - Store with a watermark (block `B` at time `T`): every bucket that ended
//!   by `T` is stored; the buckets still open at `T` all opened at or after
//!   the `5m` bucket holding `T`. The writer replays the fills from that
//!   bucket's open (less [`REPLAY_MARGIN_MS`]) and stores only candles
//!   whose bucket ends after `T`, so nothing is counted twice and the open
//!   buckets are rebuilt whole. The store also refuses a bucket it already
//!   holds.
//!
//! Batches are committed at most every [`COMMIT_EVERY`] (or when
//! [`MAX_PENDING`] candles wait), and once more when the writer stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engine::align::{AlignMode, Aligner};
use engine::block::Block;
use engine::views::candles::{Candle, CandlesView, Interval};
use engine::views::trades::TradesView;
use feeds::{Cursor, Feed, Mode, Source, Start};

use super::Candles;
use super::store::{CandleStore, INTERVALS, Watermark};
use crate::live::LiveFeeds;

/// Records read from the fills feed per round.
const READ_BATCH: usize = 1024;
/// Longest time closed candles wait before they are committed.
pub const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// Closed candles that force a commit (catch-up over many files).
pub const MAX_PENDING: usize = 65_536;
/// Extra block time replayed before the oldest bucket that was open at the
/// watermark (covers fills stamped slightly after their block).
pub const REPLAY_MARGIN_MS: i64 = 60_000;

/// Candle writer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterSettings {
    /// Oldest bucket stored (Unix ms); earlier trades are ignored.
    pub history_start_ms: i64,
    /// How long to wait for new data before checking the files again.
    pub poll_interval: Duration,
    /// A streaming-mode block completes at the latest this long after its
    /// first line.
    pub align_grace: Duration,
}

/// Handle to the writer thread; dropping it stops the thread (after a last
/// commit) and releases the store.
#[derive(Debug)]
pub struct CandleWriter {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl CandleWriter {
    /// Starts the thread over `live`'s fills feed, writing into `store` and
    /// publishing into `candles`.
    ///
    /// # Errors
    /// When the OS refuses to start a thread.
    pub fn start(
        live: &LiveFeeds,
        store: CandleStore,
        candles: Arc<Candles>,
        settings: WriterSettings,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let feed = live.feed(Source::Fills).ok_or_else(|| {
            std::io::Error::other("the fills feed is not open (no line feed for node_fills)")
        })?;
        let join = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("l1gate-candles".into())
                .spawn(move || {
                    let mut writer = Writer::new(feed, store, candles, settings);
                    writer.run(&stop);
                })?
        };
        Ok(Self {
            stop,
            join: Some(join),
        })
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

struct Input {
    cursor: Cursor,
    aligner: Aligner,
}

struct Writer {
    feed: Feed,
    store: CandleStore,
    candles: Arc<Candles>,
    settings: WriterSettings,
    /// Where reading starts (until the feed has a directory to read).
    start: Start,
    input: Option<Input>,
    trades: TradesView,
    view: CandlesView,
    /// Candles whose bucket ended by this block time are already stored.
    stored_through_ms: i64,
    /// Buckets opening before this are not covered.
    coverage_start_ms: Option<i64>,
    /// Whether the node files reach back before the history start (decided
    /// when a fresh store starts reading).
    data_before_history: bool,
    pending: Vec<Candle>,
    last: Option<(u64, i64)>,
    committed: Option<(u64, i64)>,
    last_commit: Instant,
    decode_errors: u64,
}

impl Writer {
    fn new(
        feed: Feed,
        store: CandleStore,
        candles: Arc<Candles>,
        settings: WriterSettings,
    ) -> Self {
        let watermark = store.reader().watermark();
        let (start, stored_through_ms, coverage_start_ms) = match watermark {
            Some(w) => {
                let oldest_open = Interval::Minute5.bucket_open(w.block_time_ms);
                (
                    Start::Timestamp(oldest_open.saturating_sub(REPLAY_MARGIN_MS)),
                    w.block_time_ms,
                    Some(w.coverage_start_ms),
                )
            }
            None => (Start::Timestamp(settings.history_start_ms), i64::MIN, None),
        };
        if let Some(w) = watermark {
            tracing::info!(
                block = w.block_number,
                block_time_ms = w.block_time_ms,
                candles = store.reader().candles(),
                "candle store: resuming after its last commit"
            );
        }
        candles.live.write().coverage_start_ms = coverage_start_ms;
        Self {
            feed,
            store,
            candles,
            settings,
            start,
            input: None,
            trades: TradesView::new(),
            view: CandlesView::with_intervals(&INTERVALS),
            stored_through_ms,
            coverage_start_ms,
            data_before_history: false,
            pending: Vec::new(),
            last: None,
            committed: watermark.map(|w| (w.block_number, w.block_time_ms)),
            last_commit: Instant::now(),
            decode_errors: 0,
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let (read, folded) = match self.round() {
                Ok(counts) => counts,
                Err(error) => {
                    tracing::warn!(%error, "candle writer: reading fills failed; repositioning");
                    self.reposition();
                    (0, 0)
                }
            };
            let due =
                self.last_commit.elapsed() >= COMMIT_EVERY || self.pending.len() >= MAX_PENDING;
            if due {
                self.commit();
            }
            if read == 0 && folded == 0 {
                if self.input.is_some() {
                    self.candles.live.write().caught_up = true;
                }
                match self.feed.refresh() {
                    // New lines: read them now rather than after a sleep.
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, "candle writer: refresh failed"),
                }
                std::thread::sleep(self.settings.poll_interval);
            }
        }
        self.commit();
    }

    /// Reads one batch of fills lines and folds every block it completes.
    fn round(&mut self) -> Result<(usize, usize), feeds::FeedError> {
        if self.input.is_none() && !self.open_input()? {
            return Ok((0, 0));
        }
        let Some(input) = self.input.as_mut() else {
            return Ok((0, 0));
        };
        let now = crate::unix_now_ms();
        let records = self.feed.read(&mut input.cursor, READ_BATCH)?;
        let read = records.len();
        for record in records {
            input.aligner.push_line(Source::Fills, record.data, now);
        }
        let mut blocks = Vec::new();
        while let Some(block) = input.aligner.pop(now) {
            blocks.push(block);
        }
        let folded = blocks.len();
        for block in &blocks {
            self.fold(block);
        }
        Ok((read, folded))
    }

    /// Positions the cursor once the fills directory exists (its name says
    /// whether the node writes by block or streams).
    fn open_input(&mut self) -> Result<bool, feeds::FeedError> {
        let Some(dir) = self.feed.source_dir_name() else {
            return Ok(false);
        };
        let mode = match Source::Fills.mode_of_dir(&dir) {
            Some(Mode::Streaming) => AlignMode::Streaming,
            _ => AlignMode::ByBlock,
        };
        if self.coverage_start_ms.is_none() {
            let mut first = self.feed.seek(Start::BlockNumber(0))?;
            self.data_before_history = self
                .feed
                .read(&mut first, 1)?
                .first()
                .and_then(|record| record.timestamp_ms)
                .is_some_and(|time| time < self.settings.history_start_ms);
        }
        let cursor = self.feed.seek(self.start)?;
        let grace = i64::try_from(self.settings.align_grace.as_millis()).unwrap_or(i64::MAX);
        let mut aligner = Aligner::new(mode, &[Source::Fills], grace);
        if let Some((number, _)) = self.last {
            aligner = aligner.starting_after(number);
        }
        self.input = Some(Input { cursor, aligner });
        Ok(true)
    }

    /// After a read failure (a file pruned under the cursor): start again
    /// after the last folded block.
    fn reposition(&mut self) {
        self.input = None;
        if let Some((number, _)) = self.last {
            self.start = Start::BlockNumber(number + 1);
        }
        std::thread::sleep(self.settings.poll_interval);
    }

    fn fold(&mut self, block: &Block) {
        let decoded = block.decode();
        if !decoded.errors.is_empty() {
            self.decode_errors += decoded.errors.len() as u64;
            tracing::warn!(
                block = block.number,
                errors = decoded.errors.len(),
                first = %decoded.errors[0],
                "candle writer: fills that do not decode were skipped"
            );
        }
        self.trades.apply(&decoded);
        let history_start = self.settings.history_start_ms;
        self.view.apply(
            block.number,
            block.time_ms,
            self.trades
                .last()
                .trades()
                .filter(|trade| trade.time >= history_start),
        );
        for error in self.view.errors() {
            tracing::warn!(%error, "candle writer: trade left out of a candle");
        }
        let coverage = *self
            .coverage_start_ms
            .get_or_insert(if self.data_before_history {
                history_start
            } else {
                block.time_ms.max(history_start)
            });
        let stored_through = self.stored_through_ms;
        let keep =
            |candle: &Candle| candle.open_time >= coverage && candle.next_open > stored_through;
        let mut live = self.candles.live.write();
        live.coverage_start_ms = Some(coverage);
        for candle in self.view.changed() {
            if keep(candle) {
                live.upsert(candle);
            }
        }
        for candle in self.view.closed() {
            if keep(candle) {
                live.upsert(candle);
                self.pending.push(candle.clone());
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
