//! `l1gate candles import`: backfills the candle store from fill hours — the
//! exchange's public archive (`l1gate archive fetch`), or any node's or
//! capture's fill files — folding them exactly as the server's engine folds
//! a node's files, through the same [`Writer`].
//!
//! # What it reads
//!
//! Each path is an hour file (`…/<dataset>/hourly/YYYYMMDD/H[.lz4|.zst|.gz]`)
//! or a directory searched for such files, where `<dataset>` is
//! `node_fills_by_block`, `node_fills_streaming` or the older
//! `node_fills` and `node_trades` (see `feeds::legacy`). The files found are
//! linked into a staging directory in the archive's layout and read as one
//! feed per dataset: a directory of several datasets reads like the bucket.
//!
//! # What it folds
//!
//! Every stretch of block time from the history start on that the store
//! does not hold whole yet ([`Coverage::uncovered`]); nothing else is read
//! twice. Datasets hand over by time: each folds from its first block up to
//! the first block of the next newer one (the archive's `node_trades` until
//! 2025-05-25, `node_fills` until 2025-07-27 08:50, then
//! `node_fills_by_block`). A stretch that continues stored coverage starts
//! shortly before the `5m` bucket open at its end, so the buckets open there
//! are rebuilt whole; one that cannot (the next dataset starts later, at
//! the hand-over) leaves a gap.
//!
//! # Gaps
//!
//! Recorded in the store with their reason, so that a lookup inside one
//! answers that trades may be missing rather than that there were none:
//! blocks missing between two blocks read (by-block numbering), an hour
//! file missing from an older dataset (which has no block numbers), a
//! damaged file (read up to its damage, then the next file), and the
//! hand-over between datasets. Buckets touching a gap are not stored.
//!
//! # Threads
//!
//! A stretch is read, folded and committed by three threads joined by
//! bounded queues ([`fold_stretch`]): the fold's thread sets the pace on two
//! cores, and the reading thread decodes ahead of it. By-block hours are
//! decoded piece by piece as they are read and cut into blocks straight
//! from the decoder's output ([`super::hours`]); the older layouts go
//! through the feed and the block aligner. The fold is a
//! [`CandleFold`]: a market's trades and candles alone, folded as the
//! server's market folds them. What is folded and stored does not depend
//! on the threads.
//!
//! # Safety
//!
//! The import takes the store's one-writer lock: beside a running server
//! on the same state directory it is refused, naming the lock file. It
//! commits durably every [`COMMIT_EVERY`], whenever [`IMPORT_PENDING`] closed
//! candles wait (so that memory does not grow with the import's speed), and
//! at the end, so a killed import loses at most that much work: run again, it goes on from the last
//! commit (the uncovered stretches begin there), and an import of what the
//! store already holds reads a few minutes and writes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use engine::block::Block;
use engine::market::candle_fold::CandleFold;
use engine::source::{BlockSource, SourceOptions};
use feeds::layout::SegmentKey;
use feeds::{Feed, FeedError, LineFormat, Source, Start};

use crate::candle_thread::{CandleBlock, MAX_PENDING, Writer, WriterSettings};
use crate::candles::hours::{self, BlockLine, HourFile, READ_BATCH, READ_BATCH_BYTES, Read};
use crate::candles::store::{CandleStore, Gap, INTERVALS, StoreError};

/// Longest time between two commits of an import, by default.
pub const COMMIT_EVERY: Duration = Duration::from_secs(10);
/// The datasets read, oldest format first.
pub const DATASETS: [&str; 4] = [
    "node_trades",
    "node_fills",
    "node_fills_streaming",
    "node_fills_by_block",
];
/// Closed candles that force an import's commit: four times the server's
/// bound, because each commit re-encodes every open chunk it touches (a
/// `1m` chunk holds a day, a `5m` chunk five), and an import closes candles
/// hundreds of times faster than a live node. About 50 MB of candles wait
/// at most; measured, it takes 30% off a day's import.
const IMPORT_PENDING: usize = 4 * MAX_PENDING;
/// Blocks between two progress reports.
const PROGRESS_EVERY: u64 = 8_192;
/// Block time folded past the end of a stretch that a stored span follows,
/// so the buckets open at its end close.
const CLOSE_MARGIN_MS: i64 = 6 * 60_000;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The candle store cannot be opened (in use by a server, say).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A path given cannot be read.
    #[error("import: cannot read {path}: {message}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// No hour file of a fill dataset under the paths given.
    #[error(
        "import: no fill hour files under {0}; expected …/node_fills_by_block/hourly/YYYYMMDD/H.lz4 (or node_fills, node_trades)"
    )]
    NothingToRead(String),
    /// A dataset's files cannot be read.
    #[error("import: {0}")]
    Feed(#[from] FeedError),
    /// One of the import's threads could not start, or failed (a bug).
    #[error("import: a thread failed: {0}")]
    Thread(String),
}

/// What to import, and where.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Hour files and directories.
    pub paths: Vec<PathBuf>,
    /// The state directory holding the store.
    pub state_dir: PathBuf,
    /// The oldest bucket stored (Unix ms).
    pub history_start_ms: i64,
    /// Commit at least this often ([`COMMIT_EVERY`] by default).
    pub commit_every: Duration,
}

/// Where an import is, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImportProgress {
    /// Share of the block time to fold that is folded, 0–1.
    pub done: f64,
    /// The block time reached, Unix ms.
    pub at_ms: i64,
    /// Decoded bytes of fill lines read so far.
    pub bytes: u64,
    /// Candles written so far.
    pub candles: u64,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Hour files found, per dataset.
    pub hours: BTreeMap<String, usize>,
    /// Blocks folded.
    pub blocks: u64,
    /// Fill events (or whole trades) folded.
    pub fills: u64,
    /// Decoded bytes of fill lines read.
    pub bytes: u64,
    /// Candles written to the store.
    pub candles: u64,
    /// Gaps found in what was read.
    pub gaps: Vec<Gap>,
    /// Hours missing between a dataset's first and last hour:
    /// `(dataset, YYYYMMDD, hour)`.
    pub missing_hours: Vec<(String, u32, u32)>,
    /// Damaged files, with where they stop.
    pub damaged: Vec<String>,
    /// Candles stored after the import.
    pub stored: u64,
}

/// One dataset found.
#[derive(Debug)]
struct Dataset {
    name: &'static str,
    feed: Feed,
    first_ms: i64,
    last_ms: i64,
    /// The stretches of hour files missing, as UTC hours `[start, end)`.
    missing: Vec<(i64, i64)>,
}

/// Runs an import. See the module docs.
///
/// # Errors
/// [`ImportError`] when the store cannot be opened, a path cannot be read,
/// or no fill hours are found. A damaged file is not an error: it is
/// reported and its gap recorded.
pub fn run(
    options: &ImportOptions,
    progress: &mut dyn FnMut(&ImportProgress),
) -> Result<ImportReport, ImportError> {
    let (store, recovery) = CandleStore::open(&options.state_dir, options.history_start_ms)?;
    tracing::debug!(candles = recovery.candles, "import: store opened");
    let staging = tempfile::Builder::new()
        .prefix("import-staging-")
        .tempdir_in(&options.state_dir)
        .map_err(|e| ImportError::Path {
            path: options.state_dir.clone(),
            message: e.to_string(),
        })?;
    let mut report = ImportReport::default();
    stage(&options.paths, staging.path(), &mut report)?;
    if report.hours.is_empty() {
        return Err(ImportError::NothingToRead(
            options
                .paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    let datasets = open_datasets(staging.path(), &mut report)?;
    let mut store = Some(store);
    let total: i64 = plan_total(&datasets, options.history_start_ms);
    let mut folded_ms = 0i64;
    for (k, dataset) in datasets.iter().enumerate() {
        let own_end = datasets.get(k + 1).map_or(i64::MAX, |next| next.first_ms);
        let Some(current) = store.take() else { break };
        let coverage = current.reader().coverage();
        let begin = dataset.first_ms.max(options.history_start_ms);
        let end = own_end.min(dataset.last_ms.saturating_add(1));
        let mut current = Some(current);
        for (a, b) in coverage.uncovered(options.history_start_ms, end) {
            if b <= begin {
                continue;
            }
            let Some(store_now) = current.take() else {
                break;
            };
            let continues = store_now
                .reader()
                .coverage()
                .spans
                .iter()
                .any(|span| span.to_ms == a);
            let start = a.max(begin);
            // Continuing stored coverage: a first block later than its end
            // (this dataset starting later, at the hand-over) is a gap.
            let settings = if continues {
                WriterSettings {
                    history_start_ms: options.history_start_ms,
                    from_ms: engine::market::candles::Interval::Minute5.bucket_open(a),
                    continues_at_ms: Some(a),
                    gap_reason: handover_reason(&datasets, k),
                }
            } else {
                WriterSettings::fresh(options.history_start_ms, start)
            };
            // A stored span follows at `b`: fold past it so the buckets open
            // there close; at the hand-over to the next dataset, not past it.
            let stop = if b < own_end {
                b.saturating_add(CLOSE_MARGIN_MS).min(own_end)
            } else {
                own_end
            };
            let mut writer = Writer::new(store_now, None, settings.clone());
            fold_stretch(
                dataset,
                &settings,
                options.commit_every,
                stop,
                &mut writer,
                &mut report,
                &mut |at_ms, bytes, written| {
                    let into = (at_ms.min(stop) - start).max(0);
                    progress(&ImportProgress {
                        done: if total > 0 {
                            ((folded_ms + into) as f64 / total as f64).min(1.0)
                        } else {
                            1.0
                        },
                        at_ms,
                        bytes,
                        candles: written,
                    });
                },
            )?;
            folded_ms += (stop.min(dataset.last_ms) - start).max(0);
            current = Some(writer.into_store());
        }
        store = current;
    }
    if let Some(store) = &mut store {
        // An import rewrites chunks many times over (each commit merges
        // into the open ones): give the pages they left behind back.
        store.compact()?;
        report.stored = store.reader().candles();
    }
    Ok(report)
}

/// The block time an import will fold, for its progress.
fn plan_total(datasets: &[Dataset], history_start_ms: i64) -> i64 {
    datasets
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let end = datasets
                .get(k + 1)
                .map_or(d.last_ms, |next| next.first_ms.min(d.last_ms));
            (end - d.first_ms.max(history_start_ms)).max(0)
        })
        .sum()
}

fn handover_reason(datasets: &[Dataset], k: usize) -> String {
    match k.checked_sub(1).and_then(|before| datasets.get(before)) {
        Some(before) => format!(
            "no fills between the archive's {} (which ends here) and {} (which starts here)",
            before.name, datasets[k].name
        ),
        None => format!(
            "the {} hours read do not reach back to the end of the stored candles",
            datasets[k].name
        ),
    }
}

/// Folds one dataset from `settings.fold_start()` to `stop` (exclusive)
/// into `writer`, committing every `commit_every`, whenever
/// [`IMPORT_PENDING`] candles wait, and at the end.
///
/// Three threads share the work, in a pipeline of bounded queues: one
/// reads (decompressing the hours and cutting their lines into blocks),
/// this one folds them, and one commits the candles they closed. A day of
/// the archive spends about a quarter of its CPU time reading and a fifth
/// committing, so on two cores the fold's thread sets the pace. What is
/// folded and committed, and in what order, is the same as in one thread.
fn fold_stretch(
    dataset: &Dataset,
    settings: &WriterSettings,
    commit_every: Duration,
    stop: i64,
    writer: &mut Writer,
    report: &mut ImportReport,
    progress: &mut dyn FnMut(i64, u64, u64),
) -> Result<(), ImportError> {
    let from_ms = settings.fold_start_ms();
    // By-block hours are decoded as they are read (`hours`); the other
    // layouts go through the feed, which joins or wraps their lines.
    let reading = if dataset.name == BY_BLOCK {
        Reading::Hours(hour_files(&dataset.feed))
    } else {
        Reading::Feed(Box::new(BlockSource::new(
            vec![dataset.feed.clone()],
            SourceOptions {
                fills_from: Some(Start::Timestamp(from_ms)),
                ..SourceOptions::from_block(0)
            },
        )?))
    };
    let bytes_before = match &reading {
        Reading::Feed(source) => source.bytes(),
        Reading::Hours(_) => 0,
    };
    let written = AtomicU64::new(0);
    let counted = &written;
    let committing = &mut *writer;
    let (read_tx, read_rx) = crossbeam_channel::bounded(READ_QUEUE);
    let (write_tx, write_rx) = crossbeam_channel::bounded(WRITE_QUEUE);
    let (folded, read, wrote) = std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("import-read".into())
            .spawn_scoped(scope, move || match reading {
                Reading::Feed(source) => read_blocks(*source, &read_tx),
                Reading::Hours(files) => {
                    hours::read_hours(&files, from_ms, &read_tx);
                    Ok(())
                }
            });
        let committer = std::thread::Builder::new()
            .name("import-commit".into())
            // The queue's receiver goes with the thread: a failed commit
            // ends the fold's next send instead of leaving it waiting.
            .spawn_scoped(scope, move || {
                commit_candles(committing, &write_rx, commit_every, counted)
            });
        let folded = match (&reader, &committer) {
            (Ok(_), Ok(_)) => {
                let (bytes_base, candles_base) = (report.bytes, report.candles);
                fold_blocks(
                    dataset,
                    stop,
                    &read_rx,
                    &write_tx,
                    report,
                    &mut |at_ms, bytes| {
                        progress(
                            at_ms,
                            bytes_base + bytes.saturating_sub(bytes_before),
                            candles_base + counted.load(Ordering::Relaxed),
                        );
                    },
                )
            }
            // Said below, with the thread that did not start.
            _ => Ok(0),
        };
        // The reader stops at its next send, the committer commits what
        // it was handed and ends.
        drop(read_rx);
        drop(write_tx);
        let read = reader.map(joined);
        let wrote = committer.map(joined);
        (folded, read, wrote)
    });
    let bytes = folded?;
    let not_started = |error: std::io::Error| ImportError::Thread(error.to_string());
    read.map_err(not_started)??;
    wrote.map_err(not_started)??;
    report.bytes += bytes.saturating_sub(bytes_before);
    report.candles += written.load(Ordering::Relaxed);
    report.gaps.extend(writer.gaps_found().iter().cloned());
    progress(
        writer.last().map_or(stop, |(_, time)| time),
        report.bytes,
        report.candles,
    );
    Ok(())
}

/// Batches of blocks read ahead of the fold, at most `READ_QUEUE ×
/// READ_BATCH_BYTES` of lines: the reading thread decodes as it goes (by-
/// block hours; the feed decodes an older layout's hour whole first), so
/// a few batches keep the fold fed.
const READ_QUEUE: usize = 8;
/// Blocks' closed candles handed to the committing thread at once.
const WRITE_BATCH: usize = 512;
/// Batches waiting for the committing thread.
const WRITE_QUEUE: usize = 256;

/// What the fold hands the committing thread, in block order.
enum Write {
    /// Folded blocks' closed candles.
    Blocks(Vec<CandleBlock>),
    /// A gap found by the fold (a damaged or missing hour).
    Gap(Gap),
}

/// How a stretch's blocks are read.
enum Reading {
    /// Through the feed and the block aligner.
    Feed(Box<BlockSource>),
    /// By-block hour files decoded as they are read.
    Hours(Vec<HourFile>),
}

/// The by-block fills dataset, read through [`hours`].
const BY_BLOCK: &str = "node_fills_by_block";

/// A feed's hour files, in hour order.
fn hour_files(feed: &Feed) -> Vec<HourFile> {
    feed.segments()
        .into_iter()
        .filter_map(|(key, path, _)| match key {
            SegmentKey::Hourly { date, hour } => Some(HourFile {
                hour_ms: hour_start_ms((date, hour))?,
                path,
            }),
            SegmentKey::Replica { .. } => None,
        })
        .collect()
}

/// The reading thread: every block of `source`, in batches, until the
/// files end or the fold stops taking them.
fn read_blocks(mut source: BlockSource, out: &Sender<Read>) -> Result<(), ImportError> {
    // Blocks gather across reads (a read takes a few dozen lines): the
    // queue's bound is then one in blocks, enough to span the decoding of
    // the next hour file.
    let mut batch = Vec::with_capacity(READ_BATCH);
    let mut batch_from = source.bytes();
    loop {
        let read = match source.read(0) {
            Ok(read) => read,
            Err(error) => {
                let _ = out.send(Read::Blocks(std::mem::take(&mut batch), source.bytes()));
                let _ = out.send(Read::Failed(error));
                return Ok(());
            }
        };
        let damage = source.take_damage();
        if !damage.is_empty() {
            let texts = damage.iter().map(ToString::to_string).collect();
            if out.send(Read::Damaged(texts)).is_err() {
                return Ok(());
            }
        }
        // At a damage, every block read before it goes first (the last
        // one waits in the aligner for the next line), so that the gap
        // runs from the last sound block to the next file's first.
        let drain = read == 0 || !damage.is_empty();
        while let Some(block) = source.next_block(drain) {
            batch.push(block);
            let bytes = source.bytes();
            if batch.len() == READ_BATCH || bytes.saturating_sub(batch_from) >= READ_BATCH_BYTES {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(READ_BATCH));
                batch_from = bytes;
                if out.send(Read::Blocks(full, bytes)).is_err() {
                    return Ok(());
                }
            }
        }
        if drain {
            let rest = std::mem::replace(&mut batch, Vec::with_capacity(READ_BATCH));
            batch_from = source.bytes();
            if out.send(Read::Blocks(rest, batch_from)).is_err() {
                return Ok(());
            }
        }
        if let Some(error) = damage.last()
            && out
                .send(Read::DamageEnds(error.to_string(), damaged_hour_ms(error)))
                .is_err()
        {
            return Ok(());
        }
        if read == 0 && damage.is_empty() {
            return Ok(());
        }
    }
}

/// The committing thread: folds each block's closed candles into `writer`,
/// commits by time and by size, and once more when the fold ends.
fn commit_candles(
    writer: &mut Writer,
    input: &Receiver<Write>,
    commit_every: Duration,
    written: &AtomicU64,
) -> Result<(), ImportError> {
    let mut last_commit = Instant::now();
    for message in input {
        match message {
            Write::Gap(gap) => writer.gap(gap),
            Write::Blocks(blocks) => {
                for block in blocks {
                    writer.fold(block);
                }
            }
        }
        // By time (what a kill loses), and by size (what memory holds).
        if last_commit.elapsed() >= commit_every || writer.pending() >= IMPORT_PENDING {
            written.fetch_add(writer.commit()? as u64, Ordering::Relaxed);
            last_commit = Instant::now();
        }
    }
    written.fetch_add(writer.commit()? as u64, Ordering::Relaxed);
    Ok(())
}

/// The fold's thread: folds the blocks read, up to `stop`, handing their
/// closed candles on; records the gaps of damaged and missing hours.
/// Returns the decoded bytes read (as `BlockSource::bytes` counts them),
/// which it also tells `progress` with the block time reached.
fn fold_blocks(
    dataset: &Dataset,
    stop: i64,
    input: &Receiver<Read>,
    output: &Sender<Write>,
    report: &mut ImportReport,
    progress: &mut dyn FnMut(i64, u64),
) -> Result<u64, ImportError> {
    let mut fold = CandleFold::new(&INTERVALS);
    let mut last_time: Option<i64> = None;
    // The damaged file met last: why, and its hour's start.
    let mut damaged: Option<(String, Option<i64>)> = None;
    // The missing hours of an older dataset already recorded as gaps.
    let mut missing_seen: BTreeSet<i64> = BTreeSet::new();
    let mut bytes = 0u64;
    let mut out = Outbox::new(output);
    // Where the fold was when the hour file being read began.
    let mut hour_start: Option<HourStart> = None;
    let mut reached_stop = false;
    // The block each line of a by-block hour is folded as.
    let mut reused = Block::new(0, 0);
    let legacy = dataset
        .feed
        .source_dir_name()
        .is_some_and(|name| LineFormat::of_dir(&name).is_legacy());
    'read: for message in input {
        let (blocks, read_bytes) = match message {
            Read::Failed(error) => return Err(error.into()),
            Read::Damaged(texts) => {
                for text in texts {
                    tracing::error!(error = %text, "import: a damaged file: its lines before the damage are folded, the rest skipped");
                    report.damaged.push(text);
                }
                continue;
            }
            Read::DamageEnds(reason, hour_ms) => {
                damaged = Some((reason, hour_ms));
                continue;
            }
            Read::HourBegins => {
                if !out.hold() {
                    break 'read;
                }
                hour_start = Some(HourStart {
                    fold: fold.clone(),
                    last_time,
                    damaged: damaged.clone(),
                    blocks: report.blocks,
                    fills: report.fills,
                });
                continue;
            }
            Read::HourEnds => {
                hour_start = None;
                if !out.release() {
                    break 'read;
                }
                continue;
            }
            Read::HourDiscarded => {
                if let Some(start) = hour_start.take() {
                    start.count_back(report);
                    fold = start.fold;
                    last_time = start.last_time;
                    damaged = start.damaged;
                }
                out.discard();
                continue;
            }
            Read::Blocks(blocks, read_bytes) => (Batch::Whole(blocks), read_bytes),
            Read::Lines(lines, read_bytes) => (Batch::Lines(lines), read_bytes),
        };
        bytes = read_bytes;
        // Each block of the batch; `false` ends the reading.
        let mut fold_block = |block: &Block| -> bool {
            if block.time_ms >= stop {
                reached_stop = true;
                return false;
            }
            let mut gaps = Vec::new();
            if let Some((reason, hour_ms)) = damaged.take()
                && let Some(from_ms) = last_time.or(hour_ms)
                && from_ms < block.time_ms
            {
                gaps.push(Gap {
                    from_ms,
                    to_ms: block.time_ms,
                    reason,
                });
            }
            if legacy
                && let Some(before) = last_time
                && let Some(&(from, to)) = dataset
                    .missing
                    .iter()
                    .find(|(from, to)| before < *to && block.time_ms >= *from)
                && missing_seen.insert(from)
            {
                // Once per missing hour: the blocks of its last minutes that
                // spilled into the next hour's file lie inside the gap.
                gaps.push(Gap {
                    from_ms: before,
                    to_ms: block.time_ms.max(to),
                    reason: format!(
                        "the {} hour file of {} is missing",
                        dataset.name,
                        feeds::time::format_iso8601_ms(from)
                    ),
                });
            }
            // In order: after the blocks before them.
            if !gaps.into_iter().all(|gap| out.gap(gap)) {
                return false;
            }
            let folded = fold.apply(block);
            if folded.skipped {
                return true;
            }
            report.blocks += 1;
            report.fills += folded.events as u64;
            last_time = Some(block.time_ms);
            if !out.block(CandleBlock::closed_of(&mut fold)) {
                return false;
            }
            if report.blocks.is_multiple_of(PROGRESS_EVERY) {
                progress(block.time_ms, bytes);
            }
            true
        };
        let go_on = match blocks {
            Batch::Whole(blocks) => blocks.iter().all(&mut fold_block),
            Batch::Lines(lines) => lines.into_iter().all(|line| {
                line.fill(&mut reused);
                fold_block(&reused)
            }),
        };
        if !go_on {
            break 'read;
        }
    }
    if reached_stop && let Some(start) = hour_start.take() {
        // The hour `stop` fell in counts up to there once it is read whole:
        // its checksum is at its end.
        for message in input {
            match message {
                Read::HourEnds => break,
                Read::HourDiscarded => {
                    start.count_back(report);
                    out.discard();
                    break;
                }
                Read::Damaged(texts) => report.damaged.extend(texts),
                Read::Failed(error) => return Err(error.into()),
                Read::Blocks(..) | Read::Lines(..) | Read::DamageEnds(..) | Read::HourBegins => {}
            }
        }
    }
    out.release();
    Ok(bytes)
}

/// A batch of blocks from the reading thread.
enum Batch {
    Whole(Vec<Block>),
    Lines(Vec<BlockLine>),
}

/// The fold as it was when an hour file began: what a failed checksum
/// sets it back to.
struct HourStart {
    fold: CandleFold,
    last_time: Option<i64>,
    damaged: Option<(String, Option<i64>)>,
    blocks: u64,
    fills: u64,
}

impl HourStart {
    /// The report's counts put back to where they were when the hour began.
    fn count_back(&self, report: &mut ImportReport) {
        report.blocks = self.blocks;
        report.fills = self.fills;
    }
}

/// The fold's way to the committing thread: blocks' closed candles in
/// batches and gaps in order, held back while an hour file may still be
/// discarded ([`Outbox::hold`]). A send fails only when the committing
/// thread ended (with its error): each method says `false` then.
struct Outbox<'s> {
    output: &'s Sender<Write>,
    batch: Vec<CandleBlock>,
    /// Messages held back, while holding.
    held: Option<Vec<Write>>,
}

impl<'s> Outbox<'s> {
    fn new(output: &'s Sender<Write>) -> Self {
        Self {
            output,
            batch: Vec::with_capacity(WRITE_BATCH),
            held: None,
        }
    }

    fn block(&mut self, block: CandleBlock) -> bool {
        self.batch.push(block);
        self.batch.len() < WRITE_BATCH || self.flush()
    }

    fn gap(&mut self, gap: Gap) -> bool {
        self.flush() && self.send(Write::Gap(gap))
    }

    /// Sends (or holds) what is batched.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        let full = std::mem::replace(&mut self.batch, Vec::with_capacity(WRITE_BATCH));
        self.send(Write::Blocks(full))
    }

    fn send(&mut self, message: Write) -> bool {
        match &mut self.held {
            Some(held) => {
                held.push(message);
                true
            }
            None => self.output.send(message).is_ok(),
        }
    }

    /// Sends what came before, then holds what comes next until
    /// [`Outbox::release`] or [`Outbox::discard`].
    fn hold(&mut self) -> bool {
        let sent = self.release();
        self.held = Some(Vec::new());
        sent
    }

    /// Sends everything held and batched, and holds no more.
    fn release(&mut self) -> bool {
        let flushed = self.flush();
        let held = self.held.take().unwrap_or_default();
        flushed
            && held
                .into_iter()
                .all(|message| self.output.send(message).is_ok())
    }

    /// Drops everything held and batched since [`Outbox::hold`].
    fn discard(&mut self) {
        self.batch.clear();
        if let Some(held) = &mut self.held {
            held.clear();
        }
    }
}

/// A scoped thread's result, a panic as an error.
fn joined<T>(
    handle: std::thread::ScopedJoinHandle<'_, Result<T, ImportError>>,
) -> Result<T, ImportError> {
    handle.join().unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(ImportError::Thread(what))
    })
}

/// The block time of a feed's first record.
fn first_record_ms(feed: &Feed) -> Result<Option<i64>, ImportError> {
    let mut cursor = feed.seek(Start::BlockNumber(0))?;
    loop {
        match feed.read(&mut cursor, 1) {
            Ok(records) => return Ok(records.first().and_then(|r| r.timestamp_ms)),
            Err(FeedError::Damaged { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
}

/// Opens the staged datasets that have lines, oldest format first, with
/// their first and last block times and missing hours.
fn open_datasets(root: &Path, report: &mut ImportReport) -> Result<Vec<Dataset>, ImportError> {
    let mut out = Vec::new();
    for name in DATASETS {
        if !root.join(name).is_dir() {
            continue;
        }
        let feed = Feed::open_dir(root, Source::Fills, name)?;
        // By-block hours are read front to back by `hours` (the feed would
        // decode the first and the last hour whole to know where they
        // begin and end); the older layouts through the feed.
        let by_block = (name == BY_BLOCK).then(|| hour_files(&feed));
        let first = match &by_block {
            Some(files) => hours::first_block_ms(files)?,
            None => first_record_ms(&feed)?,
        };
        let Some(first_ms) = first else {
            continue;
        };
        let hours: Vec<(u32, u32)> = feed
            .segments()
            .iter()
            .filter_map(|(key, _, _)| match key {
                SegmentKey::Hourly { date, hour } => Some((*date, *hour)),
                SegmentKey::Replica { .. } => None,
            })
            .collect();
        // The newest line's time; when it does not decode, the end of the
        // hour after the newest file's (files spill over by minutes).
        let newest_ms = match by_block.as_deref().and_then(<[HourFile]>::last) {
            Some(file) => hours::last_block_ms(file)?,
            None => feed.newest().and_then(|header| header.timestamp_ms),
        };
        let last_ms = newest_ms
            .or_else(|| Some(hour_start_ms(*hours.last()?)? + 2 * 3_600_000))
            .unwrap_or(first_ms);
        let mut missing = Vec::new();
        for pair in hours.windows(2) {
            let (Some(a), Some(b)) = (hour_start_ms(pair[0]), hour_start_ms(pair[1])) else {
                continue;
            };
            let mut at = a + 3_600_000;
            while at < b {
                missing.push((at, at + 3_600_000));
                if let Some((date, hour)) = date_hour(at) {
                    report.missing_hours.push((name.to_owned(), date, hour));
                }
                at += 3_600_000;
            }
        }
        out.push(Dataset {
            name,
            feed,
            first_ms,
            last_ms,
            missing,
        });
    }
    // The by-block and streaming layouts of the same years: keep by-block.
    if out.iter().any(|d| d.name == "node_fills_by_block") {
        out.retain(|d| d.name != "node_fills_streaming");
    }
    out.sort_by_key(|d| d.first_ms);
    Ok(out)
}

/// The start of the hour a damaged file holds (`…/YYYYMMDD/H.lz4`).
fn damaged_hour_ms(error: &FeedError) -> Option<i64> {
    let FeedError::Damaged { path, .. } = error else {
        return None;
    };
    let hour = path.file_stem()?.to_str()?.parse().ok()?;
    let date = path.parent()?.file_name()?.to_str()?.parse().ok()?;
    hour_start_ms((date, hour))
}

/// Unix ms of `(YYYYMMDD, H)` read as UTC.
fn hour_start_ms((date, hour): (u32, u32)) -> Option<i64> {
    let text = format!(
        "{:04}-{:02}-{:02}T{:02}:00:00Z",
        date / 10_000,
        date / 100 % 100,
        date % 100,
        hour
    );
    feeds::time::parse_iso8601_ms(&text).ok()
}

fn date_hour(ms: i64) -> Option<(u32, u32)> {
    let text = feeds::time::format_iso8601_ms(ms);
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    let date = digits.get(0..8)?.parse().ok()?;
    let hour = digits.get(8..10)?.parse().ok()?;
    Some((date, hour))
}

/// Links every fill hour file under `paths` into `root` in the archive's
/// layout, counting them per dataset. The first file of an hour wins.
fn stage(paths: &[PathBuf], root: &Path, report: &mut ImportReport) -> Result<(), ImportError> {
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| ImportError::Path {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let mut files = Vec::new();
        if meta.is_dir() {
            walk(path, &mut files, &mut BTreeSet::new())?;
        } else {
            files.push(path.clone());
        }
        for file in files {
            let Some((dataset, date, name)) = hour_file_parts(&file) else {
                continue;
            };
            let (stem, _) = feeds::codec::Codec::split_name(&name);
            let slot = PathBuf::from(dataset).join("hourly").join(&date).join(stem);
            if !seen.insert(slot) {
                tracing::warn!(file = %file.display(), "import: this hour was given twice; the first is read");
                continue;
            }
            let dir = root.join(dataset).join("hourly").join(&date);
            std::fs::create_dir_all(&dir).map_err(|e| ImportError::Path {
                path: dir.clone(),
                message: e.to_string(),
            })?;
            let target = std::fs::canonicalize(&file).map_err(|e| ImportError::Path {
                path: file.clone(),
                message: e.to_string(),
            })?;
            std::os::unix::fs::symlink(&target, dir.join(&name)).map_err(|e| {
                ImportError::Path {
                    path: file.clone(),
                    message: e.to_string(),
                }
            })?;
            *report.hours.entry(dataset.to_owned()).or_default() += 1;
        }
    }
    Ok(())
}

/// `(dataset, YYYYMMDD, file name)` of `…/<dataset>/hourly/<date>/<H[.ext]>`.
fn hour_file_parts(file: &Path) -> Option<(&'static str, String, String)> {
    let name = file.file_name()?.to_str()?.to_owned();
    let date_dir = file.parent()?;
    let date = date_dir.file_name()?.to_str()?.to_owned();
    let hourly = date_dir.parent()?;
    if hourly.file_name()? != "hourly" {
        return None;
    }
    let dataset = hourly.parent()?.file_name()?.to_str()?;
    let dataset = DATASETS.into_iter().find(|d| *d == dataset)?;
    let (stem, _) = feeds::codec::Codec::split_name(&name);
    let hour_ok = !stem.is_empty()
        && stem.len() <= 2
        && stem.bytes().all(|b| b.is_ascii_digit())
        && stem.parse::<u32>().is_ok_and(|h| h < 24);
    let date_ok = date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit());
    (hour_ok && date_ok).then_some((dataset, date, name))
}

/// The files under `dir`, following links to directories once each (a
/// link loop ends there); an error names the path that failed.
fn walk(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    visited: &mut BTreeSet<PathBuf>,
) -> Result<(), ImportError> {
    let failed = |path: &Path, e: std::io::Error| ImportError::Path {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let real = std::fs::canonicalize(dir).map_err(|e| failed(dir, e))?;
    if !visited.insert(real) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).map_err(|e| failed(dir, e))? {
        let path = entry.map_err(|e| failed(dir, e))?.path();
        let kind = std::fs::metadata(&path).map_err(|e| failed(&path, e))?;
        if kind.is_dir() {
            walk(&path, out, visited)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// A one-line progress bar on standard error: redrawn in place a few times
/// a second on a terminal, a line every ten seconds otherwise.
#[derive(Debug)]
pub struct ProgressBar {
    enabled: bool,
    terminal: bool,
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
}

impl ProgressBar {
    /// A bar (`enabled`: drawn at all).
    pub fn new(enabled: bool) -> Self {
        use std::io::IsTerminal as _;
        Self {
            enabled,
            terminal: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last: None,
            drawn: false,
        }
    }

    /// Shows `progress`.
    pub fn show(&mut self, progress: &ImportProgress) {
        if !self.enabled {
            return;
        }
        let every = if self.terminal {
            Duration::from_millis(250)
        } else {
            Duration::from_secs(10)
        };
        if self.last.is_some_and(|at| at.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        let line = progress_line(progress, self.started.elapsed());
        if self.terminal {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        self.drawn = true;
    }

    /// Ends the bar's line.
    pub fn finish(&mut self) {
        if self.enabled && self.terminal && self.drawn {
            eprintln!();
        }
    }
}

/// `[#####-----]  47.3%  at 2025-08-14T13:00:00.000Z  12.4 GB read (1,02 GB/s)  3.1 M candles  ETA 4 min 12 s`
fn progress_line(p: &ImportProgress, elapsed: Duration) -> String {
    const WIDTH: usize = 24;
    let filled = ((p.done * WIDTH as f64).round() as usize).min(WIDTH);
    let secs = elapsed.as_secs_f64().max(0.001);
    let eta = if p.done > 0.0 && p.done < 1.0 {
        let left = secs / p.done * (1.0 - p.done);
        format!("ETA {}", common::duration_text(left))
    } else {
        "ETA –".to_owned()
    };
    format!(
        "[{}{}] {:5.1}%  at {}  {:.2} GB read ({:.2} GB/s)  {} candles  {eta}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
        p.done * 100.0,
        feeds::time::format_iso8601_ms(p.at_ms),
        p.bytes as f64 / 1e9,
        p.bytes as f64 / 1e9 / secs,
        p.candles
    )
}

/// The import's closing report, as printed by `l1gate candles import`.
pub fn render_report(report: &ImportReport) -> String {
    use std::fmt::Write as _;
    let iso = feeds::time::format_iso8601_ms;
    let mut out = String::new();
    let hours: Vec<String> = report
        .hours
        .iter()
        .map(|(dataset, n)| format!("{n} {dataset}"))
        .collect();
    let _ = writeln!(out, "hours read: {}", hours.join(", "));
    let _ = writeln!(
        out,
        "blocks folded: {}; fills: {}; {:.2} GB of fill lines",
        report.blocks,
        report.fills,
        report.bytes as f64 / 1e9
    );
    let _ = writeln!(
        out,
        "candles written: {} (the store holds {})",
        report.candles, report.stored
    );
    if report.missing_hours.is_empty() {
        let _ = writeln!(out, "missing hours: none");
    } else {
        let _ = writeln!(out, "missing hours ({}):", report.missing_hours.len());
        for (dataset, date, hour) in &report.missing_hours {
            let _ = writeln!(out, "  {dataset}/hourly/{date}/{hour}");
        }
    }
    if report.gaps.is_empty() {
        let _ = writeln!(out, "gaps: none");
    } else {
        let _ = writeln!(
            out,
            "gaps ({}; buckets touching them are not stored, and lookups there answer `gap`):",
            report.gaps.len()
        );
        for gap in &report.gaps {
            let _ = writeln!(
                out,
                "  {} to {}: {}",
                iso(gap.from_ms),
                iso(gap.to_ms),
                gap.reason
            );
        }
    }
    if !report.damaged.is_empty() {
        let _ = writeln!(out, "damaged files ({}):", report.damaged.len());
        for damage in &report.damaged {
            let _ = writeln!(out, "  {damage}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A by-block line of block `number` at second `second` of an hour, no
    /// fill in it.
    fn block(number: u64, second: u32) -> Block {
        let line = format!(
            r#"{{"local_time":"2026-03-14T10:00:{second:02}.5","block_time":"2026-03-14T10:00:{second:02}.000000001","block_number":{number},"events":[]}}"#
        );
        let time = feeds::time::parse_iso8601_ms(&format!("2026-03-14T10:00:{second:02}Z"));
        let mut block = Block::new(number, time.unwrap());
        block.lines.fills.push(bytes::Bytes::from(line));
        block
    }

    /// What `fold_blocks` hands the committing thread for `messages`, with
    /// `stop` at second `stop`: the block numbers of each batch and the
    /// gaps; and the blocks the report counts.
    fn fold(messages: Vec<Read>, stop: u32) -> (Vec<String>, u64) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join(BY_BLOCK)).unwrap();
        let dataset = Dataset {
            name: BY_BLOCK,
            feed: Feed::open_dir(root.path(), Source::Fills, BY_BLOCK).unwrap(),
            first_ms: 0,
            last_ms: 0,
            missing: Vec::new(),
        };
        let (input, read) = crossbeam_channel::unbounded();
        for message in messages {
            input.send(message).unwrap();
        }
        drop(input);
        let (output, written) = crossbeam_channel::unbounded();
        let mut report = ImportReport::default();
        let stop = block(0, stop).time_ms;
        fold_blocks(&dataset, stop, &read, &output, &mut report, &mut |_, _| {}).unwrap();
        drop(output);
        let said = written
            .iter()
            .map(|write| match write {
                Write::Blocks(blocks) => {
                    let numbers: Vec<String> =
                        blocks.iter().map(|b| b.number.to_string()).collect();
                    numbers.join(",")
                }
                Write::Gap(gap) => format!("gap: {}", gap.reason),
            })
            .collect();
        (said, report.blocks)
    }

    #[test]
    fn an_hour_that_fails_its_checksum_is_taken_back_even_past_the_stop() {
        let hour = |blocks: Vec<Block>| Read::Blocks(blocks, 0);
        let discarded = || {
            vec![
                Read::Damaged(vec!["checksum".into()]),
                Read::HourDiscarded,
                Read::DamageEnds("checksum".into(), None),
            ]
        };
        // The stop inside the second hour, which then fails: only the first
        // hour's blocks are handed on.
        let mut messages = vec![Read::HourBegins, hour(vec![block(1, 1), block(2, 2)])];
        messages.extend([Read::HourEnds, Read::HourBegins]);
        messages.push(hour(vec![block(3, 3), block(4, 5), block(5, 6)]));
        messages.extend(discarded());
        assert_eq!(fold(messages, 5), (vec!["1,2".to_owned()], 2));

        // The same hour sound: its blocks before the stop count.
        let mut messages = vec![Read::HourBegins, hour(vec![block(1, 1), block(2, 2)])];
        messages.extend([Read::HourEnds, Read::HourBegins]);
        messages.push(hour(vec![block(3, 3), block(4, 5), block(5, 6)]));
        messages.push(Read::HourEnds);
        assert_eq!(
            fold(messages, 5),
            (vec!["1,2".to_owned(), "3".to_owned()], 3)
        );

        // A failed hour before the stop: a gap from the last sound block to
        // the next hour's first, none of its blocks.
        let mut messages = vec![Read::HourBegins, hour(vec![block(1, 1)])];
        messages.extend([Read::HourEnds, Read::HourBegins]);
        messages.push(hour(vec![block(2, 2), block(3, 3)]));
        messages.extend(discarded());
        messages.extend([Read::HourBegins, hour(vec![block(4, 4)]), Read::HourEnds]);
        let (said, blocks) = fold(messages, 50);
        assert_eq!(said, ["1", "gap: checksum", "4"]);
        assert_eq!(blocks, 2);
    }
}
