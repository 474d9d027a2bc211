//! The candle store thread: it persists the candles the market folds — the
//! same candle state `StreamCandle` serves — for the HTTP lookups. The
//! engine thread sends it, per folded block, the `1s`/`1m`/`5m` candles
//! that changed or closed ([`CandleBlock`]); this thread keeps open buckets
//! (and closed ones not yet committed) in [`Candles`]' live state for
//! lookups, and commits closed buckets to the [`CandleStore`] in batches.
//! Nothing here reads node files or folds trades, but [`repair`] before
//! the thread starts. The same [`Writer`] stores what `l1gate candles
//! import` folds from the archive ([`crate::candles::import`]).
//!
//! # Where it starts, and what it covers
//!
//! [`resume_point`] tells the engine where its fold of trades must start
//! for the store, and the writer records, with each commit, the stretch of
//! block time it has folded whole since it started (its *span*, merged
//! into the store's coverage) and the gaps it found:
//!
//! - empty store: the fold starts at the history start (the first block at
//!   or after it). The span starts at the history start when the node files
//!   reach back before it, else at the first block's time: a bucket that
//!   opened before the first block on disk is partial (it holds only the
//!   trades from that block on, as the engine's candle of it does), so it
//!   is never stored; while the engine holds it open, lookups serve that
//!   state, as the `candle` channel does (see [`crate::candles`]);
//! - store with a watermark (block `B` at time `T`): every bucket that ended
//!   by `T` is stored; the buckets still open at `T` all opened at or after
//!   the `5m` bucket holding `T`. The engine folds trades from that bucket's
//!   open (less [`REPLAY_MARGIN_MS`]), so the open buckets are rebuilt
//!   whole and the span continues the stored one; the store keeps the
//!   buckets it holds as they are, so nothing is counted twice. A bucket
//!   that opened before that `5m` bucket and is still open (a `3m`, `15m`
//!   or longer one, built from the stored buckets) is whole in the stored
//!   span and this one together. When the fold's first block is the first
//!   block the stored span holds (the files begin where the store's data
//!   does), the bucket the data begins in is held as on the first start.
//!   When the node's files no longer reach back that far (pruned while
//!   l1gate was stopped), the stretch from `T` to the first block read is a
//!   gap: buckets touching it are partial, never stored, and lookups of
//!   them say so — but for the bucket holding the first block read, which
//!   is served while open as on a first start (the trades from that block
//!   on);
//! - blocks missing between two blocks read (the numbers jump) are a gap
//!   the same way.
//!
//! Batches are committed at most every [`COMMIT_EVERY`] (or when
//! [`MAX_PENDING`] candles wait), and once more when the thread stops.
//!
//! # Damage
//!
//! Before the thread starts, [`repair`] checks the stored chunks the node's
//! files still reach and folds those files again over every damaged chunk
//! and every known gap they cover, and commits: the store keeps what it
//! holds, so only the lost candles are written, and a damaged chunk folded
//! again whole is whole again. A stretch whose files were pruned stays
//! damaged (or a gap), and says so; an import of the archive's hours fills
//! it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use engine::market::candle_fold::CandleFold;
use engine::market::candles::{Candle, CandlesView, Interval};
use engine::market::{Market, Needs};
use engine::source::{BlockSource, SourceOptions};
use feeds::{Feed, Source, Start};

use crate::candles::Candles;
use crate::candles::store::{CandleStore, CommitInfo, Gap, INTERVALS, Span, StoreError, Watermark};

/// Folded blocks that may wait for the candle store thread: when its disk
/// holds it up that long, the engine thread waits for room (counted in
/// `/metrics`) instead of the queue growing without bound; nothing is
/// dropped.
pub const CANDLE_QUEUE: usize = 8_192;

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

    /// Every open candle of the stored intervals that `candles` carries, as
    /// changed at its position (a checkpoint's, to start from).
    pub fn carried_by(candles: &CandlesView) -> Self {
        let (number, time_ms) = candles.position();
        Self {
            number,
            time_ms,
            changed: candles
                .live_candles()
                .filter(|candle| INTERVALS.contains(&candle.interval))
                .cloned()
                .collect(),
            closed: Vec::new(),
        }
    }

    /// The stored intervals' candles that `fold` closed in its last block,
    /// taken out of it, without the open ones it changed: for a writer that
    /// serves no lookups (an import).
    pub fn closed_of(fold: &mut CandleFold) -> Self {
        let (number, time_ms) = fold.candles().position();
        let mut closed = fold.take_closed();
        closed.retain(|candle| INTERVALS.contains(&candle.interval));
        Self {
            number,
            time_ms,
            changed: Vec::new(),
            closed,
        }
    }
}

/// What the engine thread tells the store thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CandleMessage {
    /// A folded block.
    Block(CandleBlock),
    /// The engine starts from a checkpoint at the store's watermark block,
    /// carrying the buckets open there (see [`CandleBlock::carried_by`]):
    /// the store's span goes on from its coverage, with no fold again.
    Carried(CandleBlock),
    /// The fold reached the end of the files.
    CaughtUp,
}

/// Where a writer's span starts (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSettings {
    /// Oldest bucket stored (Unix ms).
    pub history_start_ms: i64,
    /// The earliest the span may start (Unix ms). The fold starts
    /// [`REPLAY_MARGIN_MS`] before it ([`WriterSettings::fold_start`]); the
    /// span starts here when the first block read is not later, else at
    /// that block.
    pub from_ms: i64,
    /// When the span continues the stored coverage, where that ends (Unix
    /// ms): a first block later than `from_ms` then leaves a gap from here
    /// to it, for `gap_reason`.
    pub continues_at_ms: Option<i64>,
    /// Why such a gap is one.
    pub gap_reason: String,
}

impl WriterSettings {
    /// A writer continuing `store`'s watermark over the node's files (or
    /// starting at the history start for an empty store).
    pub fn for_store(store: &CandleStore, history_start_ms: i64) -> Self {
        match store.reader().watermark() {
            Some(w) => Self {
                history_start_ms,
                from_ms: Interval::Minute5.bucket_open(w.block_time_ms),
                continues_at_ms: Some(w.block_time_ms),
                gap_reason: "the node's files no longer reach back to the buckets open at the \
                             last commit (pruned while l1gate was stopped)"
                    .to_owned(),
            },
            None => Self::fresh(history_start_ms, history_start_ms),
        }
    }

    /// A writer covering from `from_ms` on, continuing nothing.
    pub fn fresh(history_start_ms: i64, from_ms: i64) -> Self {
        Self {
            history_start_ms,
            from_ms,
            continues_at_ms: None,
            gap_reason: String::new(),
        }
    }

    /// Where the fold of trades must start for this writer.
    pub fn fold_start(&self) -> Start {
        Start::Timestamp(self.fold_start_ms())
    }

    /// [`WriterSettings::fold_start`] in Unix ms.
    pub fn fold_start_ms(&self) -> i64 {
        self.from_ms.saturating_sub(REPLAY_MARGIN_MS)
    }
}

/// Where the engine's fold of trades must start for `store`: shortly before
/// the history start for an empty store, else shortly before the oldest
/// bucket still open at its watermark.
pub fn resume_point(store: &CandleStore, history_start_ms: i64) -> Start {
    WriterSettings::for_store(store, history_start_ms).fold_start()
}

/// The store's watermark block, when the store holds whole every bucket
/// still open there (its coverage reaches, with no gap, from the open of
/// the `5m` bucket holding the watermark to it): a start from a checkpoint
/// at exactly that block can then continue from the candles the
/// checkpoint carries ([`CandleMessage::Carried`]).
///
/// Not when the stored span began at the data's first block (after the
/// history start) and a fold from the resume point would begin there too:
/// that fold also rebuilds the buckets the data begins in (served while
/// open, never stored), which a checkpoint cannot say it holds.
pub fn carried_at(store: &CandleStore) -> Option<u64> {
    let reader = store.reader();
    let watermark = reader.watermark()?;
    let at = watermark.block_time_ms;
    let open = Interval::Minute5.bucket_open(at);
    let coverage = reader.coverage();
    let span = coverage.holding(open, at)?;
    let data_begins_in_reach =
        span.from_ms > reader.history_start_ms() && resume_from(at) <= span.from_ms;
    (coverage.gap_touching(open, at).is_none() && !data_begins_in_reach)
        .then_some(watermark.block_number)
}

/// Where a fold must start to continue coverage that ends at `at_ms`: the
/// `5m` bucket holding it, less [`REPLAY_MARGIN_MS`].
pub fn resume_from(at_ms: i64) -> i64 {
    Interval::Minute5
        .bucket_open(at_ms)
        .saturating_sub(REPLAY_MARGIN_MS)
}

/// What [`repair`] did for one damaged chunk or gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The stretch was folded again from the node's fills; `written`
    /// candles were missing and are stored again.
    Rebuilt {
        /// What was repaired (a damaged chunk or a gap, in words).
        what: String,
        /// Candles written (0: an earlier start already rebuilt them).
        written: usize,
    },
    /// The node's fills no longer reach back to the stretch (they start at
    /// `files_from_ms`, or there are none): it stays as it is.
    FilesGone {
        /// What could not be repaired.
        what: String,
        /// Block time of the oldest fills on disk, if any.
        files_from_ms: Option<i64>,
    },
    /// Reading the files or writing the store failed.
    Failed {
        /// What could not be repaired.
        what: String,
        /// Why.
        error: String,
    },
}

/// Folds the node's fills in `data_dir` again over every stored chunk found
/// damaged and every gap the files reach, and commits what was lost. See
/// the module docs.
pub fn repair(store: &mut CandleStore, data_dir: &std::path::Path) -> Vec<Repair> {
    let files_from = oldest_fills_ms(data_dir);
    let damaged = match files_from {
        Some(from) => store.verify_from(Interval::Minute5.bucket_open(from)),
        None => Ok(store.reader().damaged_chunks()),
    };
    let mut wanted: Vec<(String, i64, i64)> = match damaged {
        Ok(chunks) => chunks
            .into_iter()
            .map(|c| {
                (
                    format!(
                        "damaged {} candles of {} from {} to {}",
                        c.interval,
                        c.coin,
                        feeds::time::format_iso8601_ms(c.from_ms),
                        feeds::time::format_iso8601_ms(c.to_ms)
                    ),
                    c.from_ms,
                    c.to_ms,
                )
            })
            .collect(),
        Err(error) => {
            return vec![Repair::Failed {
                what: "checking the stored chunks".to_owned(),
                error: error.to_string(),
            }];
        }
    };
    wanted.extend(store.reader().coverage().gaps.iter().map(|gap| {
        (
            format!(
                "gap from {} to {} ({})",
                feeds::time::format_iso8601_ms(gap.from_ms),
                feeds::time::format_iso8601_ms(gap.to_ms),
                gap.reason
            ),
            gap.from_ms,
            gap.to_ms,
        )
    }));
    let Some(files_from) = files_from else {
        return wanted
            .into_iter()
            .map(|(what, _, _)| Repair::FilesGone {
                what,
                files_from_ms: None,
            })
            .collect();
    };
    // Buckets opening before the files' first block cannot be rebuilt.
    let earliest = files_from;
    let mut out = Vec::new();
    let mut stretches: Vec<(i64, i64, Vec<String>)> = Vec::new();
    for (what, from_ms, to_ms) in wanted {
        if to_ms <= earliest {
            out.push(Repair::FilesGone {
                what,
                files_from_ms: Some(files_from),
            });
            continue;
        }
        let from = from_ms.max(earliest);
        match stretches
            .iter_mut()
            .find(|(a, b, _)| from <= *b && *a <= to_ms)
        {
            Some((a, b, names)) => {
                *a = (*a).min(from);
                *b = (*b).max(to_ms);
                names.push(what);
            }
            None => stretches.push((from, to_ms, vec![what])),
        }
    }
    for (from_ms, to_ms, names) in stretches {
        let what = names.join("; ");
        out.push(match rebuild(store, data_dir, from_ms, to_ms) {
            Ok(Some(written)) => Repair::Rebuilt { what, written },
            Ok(None) => Repair::FilesGone {
                what,
                files_from_ms: Some(files_from),
            },
            Err(error) => Repair::Failed { what, error },
        });
    }
    out
}

/// Block time of the oldest fills on disk.
fn oldest_fills_ms(data_dir: &std::path::Path) -> Option<i64> {
    let feed = Feed::open(data_dir, Source::Fills).ok()?;
    let mut cursor = feed.seek(Start::BlockNumber(0)).ok()?;
    feed.read(&mut cursor, 1).ok()?.first()?.timestamp_ms
}

/// Folds `[from_ms, to_ms)` again (from before the `5m` bucket holding
/// `from_ms`, or the files' first block, to past the one holding `to_ms`)
/// and commits the closed candles of buckets opening at or after both
/// `from_ms` and the first block read, with that stretch as folded whole;
/// `None` when the files hold nothing there or blocks are missing in it.
fn rebuild(
    store: &mut CandleStore,
    data_dir: &std::path::Path,
    from_ms: i64,
    to_ms: i64,
) -> Result<Option<usize>, String> {
    let end = Interval::Minute5.next_open(Interval::Minute5.bucket_open(to_ms));
    let mut market = Market::new(Needs {
        candles: true,
        ..Needs::NONE
    })
    .with_candle_intervals(&INTERVALS);
    let mut whole_from = None;
    let mut last: Option<(u64, i64)> = None;
    let mut whole = true;
    let mut rebuilt: Vec<Candle> = Vec::new();
    let mut written = 0;
    let mut failed: Option<StoreError> = None;
    fold_fills(data_dir, Start::Timestamp(resume_from(from_ms)), |block| {
        if let Some((number, _)) = last
            && block.number > number + 1
            && !feeds::legacy::is_time_number(block.number)
        {
            // Blocks are missing: the stretch cannot be rebuilt whole (the
            // batches committed hold buckets that closed before them).
            whole = false;
            return false;
        }
        let from = *whole_from.get_or_insert(block.time_ms.max(from_ms));
        last = Some((block.number, block.time_ms));
        market.apply(&block);
        rebuilt.extend(
            market
                .candles()
                .closed()
                .iter()
                .filter(|c| INTERVALS.contains(&c.interval) && c.open_time >= from)
                .cloned(),
        );
        // In batches, so that memory does not grow with the stretch; the
        // coverage goes with the last one.
        if rebuilt.len() >= MAX_PENDING {
            match store.commit(&rebuilt, &CommitInfo::default()) {
                Ok(n) => written += n,
                Err(error) => {
                    failed = Some(error);
                    return false;
                }
            }
            rebuilt.clear();
        }
        block.time_ms < end
    })?;
    if let Some(error) = failed {
        return Err(error.to_string());
    }
    let (Some((_, last_ms)), Some(from)) = (last, whole_from) else {
        return Ok(None);
    };
    if !whole || last_ms <= from {
        return Ok(None);
    }
    let span = Span {
        from_ms: from,
        to_ms: last_ms.min(end),
    };
    store
        .commit(
            &rebuilt,
            &CommitInfo {
                covered: Some(span),
                rebuilt: Some(span),
                ..CommitInfo::default()
            },
        )
        .map(|n| Some(written + n))
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
///
/// # Errors
/// When the fills cannot be read, or a compressed file among them is
/// damaged.
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
    let now = common::unix_now_ms();
    loop {
        let read = source.read(now).map_err(|e| e.to_string())?;
        // A damaged compressed file: what the caller folded would miss its
        // lines, so the fold fails, naming the file.
        if let Some(damage) = source.take_damage().into_iter().next() {
            return Err(damage.to_string());
        }
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
        let (sender, receiver) = crossbeam_channel::bounded(CANDLE_QUEUE);
        let join = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("l1gate-candles".into())
                .spawn(move || {
                    let mut writer = Writer::new(store, Some(candles), settings);
                    writer.run(&receiver, &stop);
                })?
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

/// Keeps the candles of a fold, in the live state for lookups and in the
/// store once closed, with the span folded and the gaps found. Driven by
/// the candle store thread, or directly by an import.
#[derive(Debug)]
pub struct Writer {
    store: CandleStore,
    /// Where lookups read the open buckets and the writer's progress
    /// (`None`: nobody looks up while this writer runs: an import).
    candles: Option<Arc<Candles>>,
    settings: WriterSettings,
    /// Where this writer's span starts (set by its first block).
    span_from: Option<i64>,
    /// The start of the stored span this writer continues, if any.
    stored_from: Option<i64>,
    /// Where the data begins when buckets opened before it (set by the
    /// first block; see the module docs): their candles are kept for
    /// lookups while open, never stored.
    partial_from: Option<i64>,
    /// Gaps found and not committed yet.
    gaps: Vec<Gap>,
    /// Gaps found since the start (buckets touching them are not kept).
    all_gaps: Vec<Gap>,
    pending: Vec<Candle>,
    last: Option<(u64, i64)>,
    /// Whether the last commit failed (logged once per change).
    failing: bool,
    committed: Option<(u64, i64)>,
    last_commit: Instant,
}

impl Writer {
    /// A writer into `store`, publishing open buckets and progress into
    /// `candles`' live state for lookups (`None`: for nobody, as an import).
    pub fn new(
        store: CandleStore,
        candles: Option<Arc<Candles>>,
        settings: WriterSettings,
    ) -> Self {
        let watermark = store.reader().watermark();
        if let Some(w) = watermark {
            tracing::info!(
                block = w.block_number,
                block_time_ms = w.block_time_ms,
                candles = store.reader().candles(),
                "candle store: resuming after its last commit"
            );
        }
        let stored_from = watermark.and_then(|w| {
            store
                .reader()
                .coverage()
                .spans
                .iter()
                .find(|span| span.from_ms <= w.block_time_ms && w.block_time_ms <= span.to_ms)
                .map(|span| span.from_ms)
        });
        Self {
            store,
            candles,
            settings,
            span_from: None,
            stored_from,
            partial_from: None,
            gaps: Vec::new(),
            all_gaps: Vec::new(),
            pending: Vec::new(),
            last: None,
            failing: false,
            committed: watermark.map(|w| (w.block_number, w.block_time_ms)),
            last_commit: Instant::now(),
        }
    }

    /// The store.
    pub fn store(&self) -> &CandleStore {
        &self.store
    }

    /// The last block folded: `(number, time)`.
    pub fn last(&self) -> Option<(u64, i64)> {
        self.last
    }

    /// The gaps found since the writer started.
    pub fn gaps_found(&self) -> &[Gap] {
        &self.all_gaps
    }

    /// Candles waiting for a commit.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn run(&mut self, messages: &Receiver<CandleMessage>, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let wait = COMMIT_EVERY.saturating_sub(self.last_commit.elapsed());
            match messages.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(message) => self.take(message),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.last_commit.elapsed() >= COMMIT_EVERY || self.pending.len() >= MAX_PENDING {
                self.commit_logged();
            }
        }
        // Told to stop: what the engine sent before it stopped is folded
        // too, so the last commit reaches the block the engine ended at
        // (where its stop checkpoint is).
        for message in messages.try_iter() {
            self.take(message);
        }
        self.commit_logged();
    }

    fn take(&mut self, message: CandleMessage) {
        match message {
            CandleMessage::Block(block) => self.fold(block),
            CandleMessage::Carried(block) => self.carry(block),
            CandleMessage::CaughtUp => {
                if let Some(candles) = &self.candles {
                    candles.live.write().caught_up = true;
                }
            }
        }
    }

    /// Starts from the buckets open at the store's watermark block, as a
    /// checkpoint at that block carries them: the span goes on from where
    /// the stored coverage holds them whole, with no gap and nothing folded
    /// again.
    pub fn carry(&mut self, block: CandleBlock) {
        if self.span_from.is_none() {
            self.span_from = Some(self.settings.from_ms.max(self.settings.history_start_ms));
        }
        self.fold(block);
    }

    /// Records a gap the caller found between two blocks (the archive's
    /// formats changing hands, an hour missing or damaged): buckets
    /// touching it are neither stored nor served.
    pub fn gap(&mut self, gap: Gap) {
        if self
            .all_gaps
            .iter()
            .any(|g| (g.from_ms, g.to_ms) == (gap.from_ms, gap.to_ms))
        {
            return;
        }
        tracing::warn!(
            from = %feeds::time::format_iso8601_ms(gap.from_ms),
            to = %feeds::time::format_iso8601_ms(gap.to_ms),
            reason = %gap.reason,
            "candle store: a gap in the data"
        );
        if let Some(candles) = &self.candles {
            candles.live.write().gaps.push(gap.clone());
        }
        self.all_gaps.push(gap.clone());
        self.gaps.push(gap);
    }

    /// Takes one folded block's candles.
    pub fn fold(&mut self, block: CandleBlock) {
        let span_from = if let Some(from) = self.span_from {
            from
        } else {
            let from = self.first_span_start(&block);
            self.span_from = Some(from);
            from
        };
        if let Some((number, time_ms)) = self.last
            && block.number > number + 1
            && !feeds::legacy::is_time_number(block.number)
        {
            self.gap(Gap {
                from_ms: time_ms,
                to_ms: block.time_ms,
                reason: format!(
                    "blocks {} to {} are missing from the node's files",
                    number + 1,
                    block.number - 1
                ),
            });
        }
        let gaps = &self.all_gaps;
        let keep = |candle: &Candle| {
            candle.open_time >= span_from
                && candle.open_time >= self.settings.history_start_ms
                && !gaps
                    .iter()
                    .any(|gap| gap.touches(candle.open_time, candle.next_open))
        };
        // The bucket the data begins in: served while open, never stored.
        let partial = |candle: &Candle| {
            self.partial_from
                .is_some_and(|from| candle.open_time < from && from < candle.next_open)
        };
        if let Some(candles) = &self.candles {
            let mut live = candles.live.write();
            for candle in &block.changed {
                if keep(candle) {
                    live.upsert(candle);
                } else if partial(candle) {
                    live.upsert_partial(candle, false);
                }
            }
            for candle in &block.closed {
                if keep(candle) {
                    live.upsert(candle);
                } else if partial(candle) {
                    live.upsert_partial(candle, true);
                }
            }
            live.partial_from = self.partial_from;
            live.block_number = block.number;
            live.block_time_ms = block.time_ms;
            live.session = Some(Span {
                from_ms: span_from,
                to_ms: block.time_ms.max(span_from),
            });
        }
        self.pending
            .extend(block.closed.into_iter().filter(|candle| keep(candle)));
        self.last = Some((block.number, block.time_ms));
    }

    /// Where the span starts, decided by the first block (see the module
    /// docs).
    fn first_span_start(&mut self, block: &CandleBlock) -> i64 {
        let history = self.settings.history_start_ms;
        if block.time_ms <= self.settings.from_ms {
            // The fold begins where the stored data does: the bucket that
            // data begins in is held as it was on the first start.
            if self.stored_from == Some(block.time_ms) {
                self.partial_from = self.stored_from;
            }
            return self.settings.from_ms.max(history);
        }
        if let Some(at) = self.settings.continues_at_ms
            && block.time_ms > at
        {
            let reason = self.settings.gap_reason.clone();
            self.gap(Gap {
                from_ms: at,
                to_ms: block.time_ms,
                reason,
            });
        }
        if block.time_ms < history {
            return history;
        }
        self.partial_from = Some(block.time_ms);
        block.time_ms
    }

    /// Commits the closed candles, the watermark, the span and the gaps.
    /// Returns the candles added.
    ///
    /// # Errors
    /// [`StoreError`] when the commit fails; the candles wait for the next.
    pub fn commit(&mut self) -> Result<usize, StoreError> {
        self.last_commit = Instant::now();
        let Some((block_number, block_time_ms)) = self.last else {
            return Ok(0);
        };
        if self.pending.is_empty() && self.committed == self.last && self.gaps.is_empty() {
            return Ok(0);
        }
        // The whole span since the writer began, with every gap it found
        // (holes in it): a span cut at the newest gap would leave out the
        // stretch between the last commit and that gap.
        let span = self.span_from.map(|from| Span {
            from_ms: from,
            to_ms: block_time_ms.max(from),
        });
        let info = CommitInfo {
            watermark: Some(Watermark {
                block_number,
                block_time_ms,
            }),
            covered: span,
            gaps: self.all_gaps.clone(),
            // Every closed candle since the span began was handed over: a
            // damaged chunk inside it is whole again, unless a gap may
            // have cut into it.
            rebuilt: span.filter(|_| self.all_gaps.is_empty()),
        };
        let written = self.store.commit(&self.pending, &info)?;
        let committed_gaps = std::mem::take(&mut self.gaps);
        if let Some(candles) = &self.candles {
            let mut live = candles.live.write();
            for candle in &self.pending {
                live.remove(candle);
            }
            live.gaps.retain(|gap| !committed_gaps.contains(gap));
            live.error = None;
        }
        tracing::debug!(written, block = block_number, "candle store: committed");
        self.pending.clear();
        self.committed = self.last;
        Ok(written)
    }

    /// Commits, saying so once when commits start failing (a full disk,
    /// say: serving goes on, every commit is retried) and once when they
    /// succeed again.
    fn commit_logged(&mut self) {
        let result = self.commit();
        self.note_commit(result);
    }

    fn note_commit(&mut self, result: Result<usize, StoreError>) {
        match result {
            Err(error) => {
                if !self.failing {
                    tracing::error!(
                        %error,
                        "candle store: commits are failing; serving goes on and each commit is \
                         retried (logged again when one succeeds)"
                    );
                }
                self.failing = true;
                if let Some(candles) = &self.candles {
                    candles.live.write().error = Some(error.to_string());
                }
            }
            Ok(_) if self.failing => {
                self.failing = false;
                tracing::info!("candle store: commits succeed again");
            }
            Ok(_) => {}
        }
    }

    /// The store, once the writer is done (after a last commit by the
    /// caller).
    pub fn into_store(self) -> CandleStore {
        self.store
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const T0: i64 = 1_753_603_200_000;

    fn block(number: u64, time_ms: i64) -> CandleBlock {
        CandleBlock {
            number,
            time_ms,
            ..CandleBlock::default()
        }
    }

    fn px(text: &str) -> engine::num::Px {
        engine::num::Px::parse(text).unwrap()
    }

    /// A BTC candle of `trades` trades at `price`.
    fn candle(interval: Interval, open_time: i64, price: &str, trades: u64, time: i64) -> Candle {
        let px = px(price);
        Candle {
            coin: "BTC".into(),
            interval,
            open_time,
            next_open: interval.next_open(open_time),
            open: px,
            high: px,
            low: px,
            close: px,
            volume: engine::market::candles::Amount::new(i128::from(trades), 0),
            notional: engine::market::candles::Amount::new(i128::from(trades), 0),
            trades_count: trades,
            price_scale: 0,
            block_number: 1,
            time,
        }
    }

    /// A fresh store in `dir`, and a writer over it whose candles lookups
    /// read.
    fn serving_writer(dir: &std::path::Path) -> (Writer, Arc<Candles>) {
        let (store, _) = CandleStore::open(dir, T0).unwrap();
        let candles = Arc::new(Candles::new(Arc::clone(store.reader()), T0));
        let writer = Writer::new(
            store,
            Some(Arc::clone(&candles)),
            WriterSettings::fresh(T0, T0),
        );
        (writer, candles)
    }

    #[test]
    fn the_bucket_the_data_begins_in_is_served_while_open_and_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, candles) = serving_writer(dir.path());
        // The files begin at 1m30s: inside the 1m bucket from 1m and the 3m
        // bucket from 0.
        let first = candle(Interval::Minute1, T0 + 60_000, "10", 2, T0 + 90_000);
        writer.fold(CandleBlock {
            changed: vec![first.clone()],
            ..block(1, T0 + 90_000)
        });
        let now = T0 + 3_600_000;
        let served = candles
            .lookup("BTC", Interval::Minute1, T0 + 60_000, now)
            .unwrap();
        assert_eq!((served.trades_count, served.closed), (2, false));
        let built = candles
            .snapshot("BTC", Interval::Minute3, T0, now, 10)
            .unwrap();
        assert_eq!(built.len(), 1);
        assert_eq!((built[0].open_time, built[0].trades_count), (T0, 2));
        // Closed at 2m and followed by a whole bucket: no longer served
        // alone, never stored; the 3m bucket, open still, holds both.
        let second = candle(Interval::Minute1, T0 + 120_000, "11", 3, T0 + 120_000);
        writer.fold(CandleBlock {
            changed: vec![second],
            closed: vec![first],
            ..block(2, T0 + 120_000)
        });
        writer.commit().unwrap();
        assert_eq!(writer.store().reader().candles(), 0);
        assert!(matches!(
            candles.lookup("BTC", Interval::Minute1, T0 + 60_000, now),
            Err(crate::candles::Miss::NotCovered { .. })
        ));
        let built = candles
            .snapshot("BTC", Interval::Minute3, T0, now, 10)
            .unwrap();
        assert_eq!(built.len(), 1);
        assert_eq!((built[0].trades_count, built[0].open), (5, px("10")));
        // Once the 3m bucket closes, it is served no more.
        writer.fold(block(3, T0 + 180_000));
        assert!(
            candles
                .snapshot("BTC", Interval::Minute3, T0, now, 10)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_gap_found_after_a_commit_keeps_the_stretch_before_it_covered() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = CandleStore::open(dir.path(), T0).unwrap();
        let mut writer = Writer::new(store, None, WriterSettings::fresh(T0, T0));
        for (number, at) in [(1, 1_000), (2, 2_000), (3, 3_000)] {
            writer.fold(block(number, T0 + at));
        }
        writer.commit().unwrap();
        // Folded after the commit, then blocks 5 to 9 missing.
        writer.fold(block(4, T0 + 10_000));
        writer.fold(block(10, T0 + 20_000));
        writer.fold(block(11, T0 + 21_000));
        writer.commit().unwrap();
        let coverage = writer.store().reader().coverage();
        let spans: Vec<(i64, i64)> = coverage
            .spans
            .iter()
            .map(|s| (s.from_ms - T0, s.to_ms - T0))
            .collect();
        assert_eq!(spans, [(1_000, 10_000), (20_000, 21_000)]);
        let gaps: Vec<(i64, i64)> = coverage
            .gaps
            .iter()
            .map(|g| (g.from_ms - T0, g.to_ms - T0))
            .collect();
        assert_eq!(gaps, [(10_000, 20_000)]);
        // And once more after a later commit: nothing moves.
        writer.fold(block(12, T0 + 22_000));
        writer.commit().unwrap();
        let again = writer.store().reader().coverage();
        assert_eq!(again.gaps, coverage.gaps);
        assert_eq!(again.spans.len(), 2);
        assert_eq!(again.spans[1].to_ms, T0 + 22_000);
    }

    #[test]
    fn failing_commits_are_told_once_and_their_recovery_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut writer, candles) = serving_writer(dir.path());
        writer.fold(block(1, T0 + 1_000));
        let full = || StoreError::Engine {
            path: dir.path().to_owned(),
            message: "No space left on device".into(),
        };
        writer.note_commit(Err(full()));
        writer.note_commit(Err(full()));
        assert!(writer.failing);
        let (.., error) = candles.progress();
        assert!(error.is_some_and(|e| e.contains("No space left")));
        // Space is back: the next commit goes through and says so.
        writer.commit_logged();
        assert!(!writer.failing);
        assert_eq!(candles.progress().3, None);
    }
}
