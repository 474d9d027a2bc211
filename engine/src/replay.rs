//! The library behind `l1gate replay`: a thin driver of the one pipeline —
//! the [`BlockSource`] reads the captured node files as blocks, a
//! [`Market`] folds them from a snapshot, an engine checkpoint
//! ([`ReplayOptions::checkpoint`]) or from empty, and the view's
//! subscriptions, opened through the [`registry`](crate::views::registry),
//! hand their frames, numbered for one subscriber
//! ([`crate::views::numbering`]), to a [`FrameWriter`]: any [`Write`] takes
//! them as JSON, one object per line; the `export` crate's writer as
//! Parquet or CSV tables. The same input always gives byte-identical output,
//! and the same frames a server streams for the same blocks. The pages of
//! the node files read are let go of as the replay goes, so its resident
//! memory does not grow with the files.
//!
//! The subscriptions open at the first folded block (with `--from-block`,
//! the first block at or after it: the blocks from the starting snapshot up
//! to it are folded without printing, so the books are whole): their opening
//! frame(s) show the state after that block (a live-only view, trades or
//! fills, prints that block's frames instead), then every later block adds
//! its frames. The market folds only what the view reads ([`Market::needs`]).
//! When a newer node snapshot lies within the replayed range, the folded
//! books are compared with it at its height and diverged coins are reset
//! (and re-sent as snapshots by the views that do so). A request outside its
//! view's contract fails before any output.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use feeds::{Feed, FeedError, SnapshotFile, Snapshots};
use thiserror::Error;

use crate::align::AlignReport;
use crate::block::Block;
use crate::book::l4::Books;
use crate::checkpoint::{self, CheckpointError};
use crate::fold::{CoinReset, UnknownIds};
use crate::market::{Market, Needs};
use crate::snapshot::{self, L4Snapshot, SnapshotError};
use crate::source::{BlockSource, SourceOptions, snapshot_before};
use crate::views::numbering::Numbering;
pub use crate::views::registry::ViewKind;
use crate::views::registry::{Frame, Key, Producer};
use crate::views::{Selection, ViewError, ViewSettings};

/// What went wrong in a replay.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The view name is not one of the registry's.
    #[error("replay: unknown view {0:?}")]
    UnknownView(String),
    /// The view's request is outside its contract.
    #[error("replay: {0}")]
    Request(#[from] ViewError),
    /// A file could not be read.
    #[error("replay: {0}")]
    Feed(#[from] FeedError),
    /// A snapshot file could not be read.
    #[error("replay: cannot read snapshot {path}: {message}")]
    SnapshotIo {
        /// The file.
        path: PathBuf,
        /// The I/O error's text.
        message: String,
    },
    /// The starting checkpoint is not usable.
    #[error("replay: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// A snapshot file is not usable.
    #[error("replay: snapshot {path}: {error}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// Why.
        error: SnapshotError,
    },
    /// None of the node files the view reads in the data directory (order
    /// statuses or raw book diffs for the book views and TP/SL, fills for
    /// trades, fills and candles).
    #[error("replay: no node files under {0}")]
    NoData(PathBuf),
    /// Writing a frame failed.
    #[error("replay: cannot write output: {0}")]
    Output(String),
}

/// `l1gate replay` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Data directory (node root `hl/data` inside it, or the root itself).
    pub data_dir: PathBuf,
    /// Explicit starting snapshot; else the latest one before the start.
    pub snapshot: Option<PathBuf>,
    /// Start from this engine checkpoint ([`crate::checkpoint`]) instead
    /// of a snapshot: the fold resumes after its block, exactly as the
    /// market that wrote it would have gone on.
    pub checkpoint: Option<PathBuf>,
    /// First block to print frames for (inclusive). The fold starts at the
    /// starting snapshot (the newest one below this block), so the books
    /// are whole when printing starts.
    pub from_block: Option<u64>,
    /// Last block to fold and print (inclusive).
    pub to_block: Option<u64>,
    /// The view to print.
    pub view: ViewKind,
    /// The view's selectors (coins, users, L2 aggregation, interval, …).
    pub selection: Selection,
}

impl ReplayOptions {
    /// Options for `view` over `data_dir`, everything else unset.
    pub fn new(data_dir: impl Into<PathBuf>, view: ViewKind) -> Self {
        Self {
            data_dir: data_dir.into(),
            snapshot: None,
            checkpoint: None,
            from_block: None,
            to_block: None,
            view,
            selection: Selection::default(),
        }
    }
}

/// Progress after each folded block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayProgress {
    /// The block just folded.
    pub block: u64,
    /// Blocks folded so far.
    pub blocks: u64,
    /// Bytes of node records read so far.
    pub bytes: u64,
    /// Frames written so far.
    pub frames: u64,
}

/// What a replay did, for the CLI to print on stderr.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySummary {
    /// The starting snapshot's height, if one was loaded.
    pub snapshot_height: Option<u64>,
    /// The starting checkpoint's block, if the replay started from one.
    pub checkpoint_block: Option<u64>,
    /// First block printed (the subscriptions opened at it).
    pub first_block: Option<u64>,
    /// Last block folded and printed.
    pub last_block: Option<u64>,
    /// Blocks folded and printed.
    pub blocks: u64,
    /// Blocks folded before `--from-block`, without printing.
    pub warmup_blocks: u64,
    /// Blocks skipped (at or below the folded height).
    pub skipped_blocks: u64,
    /// Events in folded blocks.
    pub events: u64,
    /// Frames written.
    pub frames: u64,
    /// Bytes of node records read.
    pub bytes: u64,
    /// Unknown ids per coin.
    pub unknown_ids: BTreeMap<String, UnknownIds>,
    /// Lines or events that did not decode.
    pub decode_errors: u64,
    /// Gaps seen by the fold.
    pub gaps: u64,
    /// Coins reset from newer snapshots.
    pub resets: Vec<CoinReset>,
    /// The aligner's report.
    pub align: AlignReport,
    /// Wall time.
    pub elapsed: Duration,
}

impl ReplaySummary {
    /// Input throughput in MB/s (display only).
    pub fn mb_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.bytes as f64 / 1e6 / secs
        } else {
            0.0
        }
    }
}

impl fmt::Display for ReplaySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unknown: u64 = self.unknown_ids.values().map(UnknownIds::total).sum();
        write!(
            f,
            "replay: {} blocks ({} folded before --from-block, {} skipped), {} events, {} frames, {} unknown ids, {} decode errors, {} gaps, {} resets, {:.1} MB in {:.3} s ({:.1} MB/s)",
            self.blocks,
            self.warmup_blocks,
            self.skipped_blocks,
            self.events,
            self.frames,
            unknown,
            self.decode_errors,
            self.gaps,
            self.resets.len(),
            self.bytes as f64 / 1e6,
            self.elapsed.as_secs_f64(),
            self.mb_per_s()
        )?;
        for (coin, ids) in &self.unknown_ids {
            write!(
                f,
                "\n  {coin}: {} unknown oids, {} new without opening status",
                ids.unknown_oid, ids.missing_status
            )?;
        }
        Ok(())
    }
}

/// Where a replay's frames go, numbered for one subscriber, in order.
///
/// Anything that is [`Write`] takes them as JSON lines (one object per
/// line, the default output); other formats (columnar files) implement it
/// themselves.
pub trait FrameWriter {
    /// Takes one frame.
    ///
    /// # Errors
    /// [`ReplayError::Output`] when it cannot be written.
    fn frame(&mut self, frame: &Frame) -> Result<(), ReplayError>;

    /// Makes everything taken so far durable where it goes (called once
    /// the replay ends, and before a damage error is returned).
    ///
    /// # Errors
    /// [`ReplayError::Output`] when it cannot be written.
    fn flush(&mut self) -> Result<(), ReplayError>;
}

impl<W: Write> FrameWriter for W {
    fn frame(&mut self, frame: &Frame) -> Result<(), ReplayError> {
        serde_json::to_writer(&mut *self, frame).map_err(|e| ReplayError::Output(e.to_string()))?;
        self.write_all(b"\n")
            .map_err(|e| ReplayError::Output(e.to_string()))
    }

    fn flush(&mut self) -> Result<(), ReplayError> {
        Write::flush(self).map_err(|e| ReplayError::Output(e.to_string()))
    }
}

/// The writer with a count of the frames given to it.
struct FrameSink<'a> {
    out: &'a mut dyn FrameWriter,
    frames: u64,
}

impl FrameSink<'_> {
    fn frame(&mut self, frame: &Frame) -> Result<(), ReplayError> {
        self.out.frame(frame)?;
        self.frames += 1;
        Ok(())
    }
}

/// One key's subscription with its subscriber's numbering.
struct Subscriber {
    producer: Producer,
    numbering: Numbering,
}

impl Subscriber {
    fn write(&mut self, frames: Vec<Frame>, sink: &mut FrameSink<'_>) -> Result<(), ReplayError> {
        for frame in frames {
            sink.frame(&frame.numbered(&mut self.numbering))?;
        }
        Ok(())
    }
}

/// Replays `opts` and gives the view's frames to `out` (any [`Write`]: one
/// JSON object per line); `progress` is called after every folded block.
///
/// # Errors
/// [`ReplayError`] for an invalid view request, missing or unreadable
/// files or snapshots, and output failures. Bad lines, unknown ids and gaps
/// are not errors: they are counted in the [`ReplaySummary`].
pub fn run(
    opts: &ReplayOptions,
    out: &mut dyn FrameWriter,
    progress: &mut dyn FnMut(&ReplayProgress),
) -> Result<ReplaySummary, ReplayError> {
    let started = Instant::now();
    let needs = opts.view.needs();
    // Only the streams the view folds are read: `--view trades` reads the
    // fills alone, however large the book diffs beside them are.
    let feeds = needs
        .sources()
        .into_iter()
        .map(|source| Feed::open(&opts.data_dir, source))
        .collect::<Result<Vec<_>, _>>()?;
    if !feeds.iter().any(|feed| feed.source_dir_name().is_some()) {
        return Err(ReplayError::NoData(opts.data_dir.clone()));
    }
    let keys = opts.view.keys(&opts.selection)?;
    let scope = book_scope(&keys);
    let (mut market, snapshot_height, checkpoint_block, later, listed) =
        if let Some(path) = &opts.checkpoint {
            let loaded = checkpoint::load(path, needs)?;
            let listed = Snapshots::open_at_rest(&opts.data_dir)?;
            let later = later_snapshots(listed.list(), loaded.market.height(), opts.to_block);
            let block = loaded.block_number;
            (loaded.market, None, Some(block), later, listed)
        } else {
            let probe = BlockSource::new(feeds.clone(), SourceOptions::from_block(0))?;
            let (start_snapshot, later, listed) =
                snapshots(opts, probe.first_block()?, needs, scope.as_ref())?;
            let snapshot_height = start_snapshot.as_ref().map(|s| s.height);
            let market = match start_snapshot {
                Some(snapshot) => Market::from_snapshot(snapshot, needs),
                None => Market::new(needs),
            };
            (market, snapshot_height, None, later, listed)
        };
    if let Some(coins) = &scope {
        market = market.keeping_books_of(coins.clone());
    }
    if market.needs().fills {
        // The fills view opens after the first printed block and prints
        // that block's fills: keep every block's mapped, from the start.
        market.watch_fills();
    }
    let start = market.height().map_or(0, |h| h + 1);
    let mut source = BlockSource::new(
        feeds,
        SourceOptions {
            to_block: opts.to_block,
            ..SourceOptions::from_block(start)
        },
    )?;
    let mut run = Run {
        from_block: opts.from_block.unwrap_or(0),
        keys,
        subscribers: Vec::new(),
        sink: FrameSink { out, frames: 0 },
        summary: ReplaySummary {
            snapshot_height,
            checkpoint_block,
            first_block: None,
            last_block: None,
            blocks: 0,
            warmup_blocks: 0,
            skipped_blocks: 0,
            events: 0,
            frames: 0,
            bytes: 0,
            unknown_ids: BTreeMap::new(),
            decode_errors: 0,
            gaps: 0,
            resets: Vec::new(),
            align: AlignReport::default(),
            elapsed: Duration::ZERO,
        },
        later: Later {
            files: later.into_iter().peekable(),
            listed,
            scope,
        },
    };
    loop {
        let mut at_end = source.read(0)? == 0;
        let damage = source.take_damage().into_iter().next();
        if damage.is_some() && source.feeds_read() > 1 {
            // Only the blocks every stream delivered are folded: the others
            // would lack the damaged file's lines.
            at_end = false;
        } else if damage.is_some() {
            at_end = true;
        }
        while let Some(block) = source.next_block(at_end) {
            run.fold(&block, &mut market)?;
            // The pages read are let go of as the replay goes.
            source.release_behind();
            progress(&ReplayProgress {
                block: block.number,
                blocks: run.summary.blocks,
                bytes: source.bytes(),
                frames: run.sink.frames,
            });
        }
        if let Some(damage) = damage {
            // What came before the damage is written; then the replay
            // stops, naming the file and where it stops.
            run.sink.out.flush()?;
            return Err(ReplayError::Feed(damage));
        }
        if at_end {
            break;
        }
    }
    run.sink.out.flush()?;
    let mut summary = run.summary;
    summary.frames = run.sink.frames;
    summary.bytes = source.bytes();
    summary.unknown_ids = market.unknown_ids().clone();
    summary.align = source.report().clone();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// One replay in progress.
struct Run<'a> {
    /// Blocks below this are folded without printing.
    from_block: u64,
    keys: Vec<Key>,
    subscribers: Vec<Subscriber>,
    sink: FrameSink<'a>,
    summary: ReplaySummary,
    later: Later,
}

impl Run<'_> {
    fn fold(&mut self, block: &Block, market: &mut Market) -> Result<(), ReplayError> {
        let report = market.apply(block);
        let summary = &mut self.summary;
        if report.skipped {
            summary.skipped_blocks += 1;
            return Ok(());
        }
        summary.events += report.events as u64;
        summary.decode_errors += report.decode_errors.len() as u64;
        summary.gaps += u64::from(report.gap.is_some());
        if block.number < self.from_block {
            summary.warmup_blocks += 1;
        } else if summary.first_block.is_none() {
            summary.blocks += 1;
            summary.first_block = Some(block.number);
            self.open(market)?;
        } else {
            summary.blocks += 1;
            for subscriber in &mut self.subscribers {
                let frames = subscriber.producer.on_block(market);
                subscriber.write(frames, &mut self.sink)?;
            }
        }
        if block.number >= self.from_block {
            self.summary.last_block = Some(block.number);
        }
        if market.needs().books {
            let resets = self.later.check(block.number, market)?;
            self.summary.resets.extend(resets);
        }
        Ok(())
    }

    /// Opens every key at the first folded block and writes the opening
    /// frames (for a live-only view, that block's frames).
    fn open(&mut self, market: &mut Market) -> Result<(), ReplayError> {
        let settings = ViewSettings::default();
        for key in &self.keys {
            let (mut producer, mut frames) = key.open(market, &settings)?;
            if key.kind().live_only() {
                frames.extend(producer.on_block(market));
            }
            let mut subscriber = Subscriber {
                producer,
                numbering: Numbering::default(),
            };
            subscriber.write(frames, &mut self.sink)?;
            self.subscribers.push(subscriber);
        }
        Ok(())
    }
}

/// Newer snapshots to compare with, read when the fold reaches them.
struct Later {
    files: std::iter::Peekable<std::vec::IntoIter<SnapshotFile>>,
    listed: Snapshots,
    /// The coins whose books are kept (`None`: all).
    scope: Option<BTreeSet<String>>,
}

impl Later {
    /// Compares the books with the snapshot at `block`, if there is one;
    /// the coins reset from it.
    fn check(&mut self, block: u64, market: &mut Market) -> Result<Vec<CoinReset>, ReplayError> {
        while self.files.peek().is_some_and(|f| f.height < block) {
            self.files.next();
        }
        let Some(file) = self.files.next_if(|f| f.height == block) else {
            return Ok(Vec::new());
        };
        let snapshot = parse_file(&file.path, &self.listed.read(&file)?, self.scope.as_ref())?;
        market
            .check_snapshot(&snapshot)
            .map_err(|error| ReplayError::Snapshot {
                path: file.path.clone(),
                error,
            })
    }
}

/// The starting snapshot (explicit, else the latest below the start block,
/// else the earliest) and the newer ones to check against, by height. A
/// view that reads no book starts after the snapshot's height without
/// loading its books.
fn snapshots(
    opts: &ReplayOptions,
    first_block: Option<u64>,
    needs: Needs,
    scope: Option<&BTreeSet<String>>,
) -> Result<(Option<L4Snapshot>, Vec<SnapshotFile>, Snapshots), ReplayError> {
    let listed = Snapshots::open_at_rest(&opts.data_dir)?;
    let files = listed.list();
    let start = if let Some(path) = &opts.snapshot {
        let bytes = std::fs::read(path).map_err(|e| ReplayError::SnapshotIo {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Some(parse_file(path, &bytes, scope)?)
    } else {
        let target = opts.from_block.or(first_block);
        let chosen = match target {
            Some(_) => snapshot_before(&files, target)
                .or_else(|| opts.from_block.is_none().then(|| files.first()).flatten()),
            None => files.first(),
        };
        match chosen {
            Some(file) if !needs.books => Some(L4Snapshot {
                height: file.height,
                books: Books::default(),
            }),
            Some(file) => Some(parse_file(&file.path, &listed.read(file)?, scope)?),
            None => None,
        }
    };
    let later = later_snapshots(files, start.as_ref().map(|s| s.height), opts.to_block);
    Ok((start, later, listed))
}

/// The snapshots after the starting height, up to `to_block`, to compare
/// the folded books with.
fn later_snapshots(
    files: Vec<SnapshotFile>,
    start_height: Option<u64>,
    to_block: Option<u64>,
) -> Vec<SnapshotFile> {
    let start_height = start_height.unwrap_or(0);
    files
        .into_iter()
        .filter(|f| f.height > start_height && to_block.is_none_or(|to| f.height <= to))
        .collect()
}

/// The only coins whose books the keys read, when every key names them
/// (see [`Key::book_coins`]): a one-coin replay then keeps one book.
fn book_scope(keys: &[Key]) -> Option<BTreeSet<String>> {
    let mut coins = BTreeSet::new();
    for key in keys {
        coins.extend(key.book_coins()?.into_iter().map(str::to_owned));
    }
    Some(coins)
}

fn parse_file(
    path: &Path,
    bytes: &[u8],
    scope: Option<&BTreeSet<String>>,
) -> Result<L4Snapshot, ReplayError> {
    snapshot::parse_coins(bytes, scope).map_err(|error| ReplayError::Snapshot {
        path: path.to_path_buf(),
        error,
    })
}
