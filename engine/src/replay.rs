//! The library behind `l1gate replay`: read captured node files through
//! [`feeds`], align them into blocks, fold them from a snapshot (or from
//! empty), and print one view's frames as JSON, one object per line, in
//! order. The same input always gives byte-identical output.
//!
//! The subscription opens at the first folded block: its opening frame(s)
//! show the state after that block, then every later block adds its frames.
//! When a newer node snapshot lies within the replayed range, the folded
//! state is compared with it at its height and diverged coins are reset
//! (and re-sent as snapshots by the views that do so).
//!
//! Each view is driven by one small function in the `match` of
//! [`driver`]; a request outside its view's contract fails before any
//! output.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use feeds::{Cursor, Feed, FeedError, Mode, SnapshotFile, Snapshots, Source, Start};
use serde::Serialize;
use thiserror::Error;

use crate::align::{AlignMode, AlignReport, Aligner};
use crate::block::Block;
use crate::fold::{CoinReset, Engine, UnknownIds};
use crate::snapshot::{self, L4Snapshot, SnapshotError};
use crate::views::ViewError;
use crate::views::bbo::{BboRequest, BboSubscription};
use crate::views::candles::{
    CandleError, CandleRequest, CandleSubscription, CandlesView, DEFAULT_THROTTLE_MS,
};
use crate::views::fills::{FillsError, FillsSubscription, FillsView};
use crate::views::l2book::{L2BookRequest, L2BookSubscription};
use crate::views::l2diff::{L2BookDiffRequest, L2DiffSubscription};
use crate::views::l4book::{L4BookRequest, L4BookSubscription};
use crate::views::l4updates::{L4OrderUpdatesRequest, L4UpdatesSubscription};
use crate::views::mids::{AllMidsRequest, MidsSubscription};
use crate::views::tpsl::{TpslError, TpslSubscription, TpslUpdatesRequest, TpslView};
use crate::views::trades::{TradesRequest, TradesSubscription, TradesView};

/// Records read per feed per round.
const READ_BATCH: usize = 512;

/// A view `replay` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    /// Aggregated L2 book per coin.
    L2Book,
    /// Best bid and offer.
    Bbo,
    /// L2 diffs.
    L2Diff,
    /// L4 book: snapshot then the node's events.
    L4Book,
    /// Typed L4 order updates.
    L4Updates,
    /// TP/SL trigger-order lifecycle.
    Tpsl,
    /// Trades.
    Trades,
    /// Fills.
    Fills,
    /// Candles.
    Candles,
    /// Mid prices.
    Mids,
}

impl View {
    /// Every view, in CLI order.
    pub const ALL: [View; 10] = [
        View::L2Book,
        View::Bbo,
        View::L2Diff,
        View::L4Book,
        View::L4Updates,
        View::Tpsl,
        View::Trades,
        View::Fills,
        View::Candles,
        View::Mids,
    ];

    /// The CLI name (`l2book`, `bbo`, ...).
    pub fn name(self) -> &'static str {
        match self {
            View::L2Book => "l2book",
            View::Bbo => "bbo",
            View::L2Diff => "l2diff",
            View::L4Book => "l4book",
            View::L4Updates => "l4updates",
            View::Tpsl => "tpsl",
            View::Trades => "trades",
            View::Fills => "fills",
            View::Candles => "candles",
            View::Mids => "mids",
        }
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for View {
    type Err = ReplayError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        View::ALL
            .into_iter()
            .find(|view| view.name() == s)
            .ok_or_else(|| ReplayError::UnknownView(s.to_owned()))
    }
}

/// What went wrong in a replay.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The view name is not one of the ten.
    #[error("replay: unknown view {0:?}")]
    UnknownView(String),
    /// The view's request is outside its contract.
    #[error("replay: {0}")]
    Request(#[from] ViewError),
    /// A fills request is outside its contract.
    #[error("replay: {0}")]
    Fills(#[from] FillsError),
    /// A candle request is outside its contract.
    #[error("replay: {0}")]
    Candle(#[from] CandleError),
    /// A TP/SL request is outside its contract.
    #[error("replay: {0}")]
    Tpsl(#[from] TpslError),
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
    /// A snapshot file is not usable.
    #[error("replay: snapshot {path}: {error}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// Why.
        error: SnapshotError,
    },
    /// No order-status or raw-book-diff files in the data directory.
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
    /// First block to fold (inclusive).
    pub from_block: Option<u64>,
    /// Last block to fold (inclusive).
    pub to_block: Option<u64>,
    /// The view to print.
    pub view: View,
    /// Coins (required or scope list, per view).
    pub coins: Vec<String>,
    /// Users (views with a user filter).
    pub users: Vec<String>,
    /// Builder address (builder fills).
    pub builder: Option<String>,
    /// L2 levels per side (0 = full depth).
    pub n_levels: Option<u32>,
    /// L2 significant figures.
    pub n_sig_figs: Option<u32>,
    /// L2 mantissa.
    pub mantissa: Option<u64>,
    /// L2 book: suppress unchanged frames.
    pub strict: bool,
    /// Candle interval.
    pub interval: Option<String>,
}

impl ReplayOptions {
    /// Options for `view` over `data_dir`, everything else unset.
    pub fn new(data_dir: impl Into<PathBuf>, view: View) -> Self {
        Self {
            data_dir: data_dir.into(),
            snapshot: None,
            from_block: None,
            to_block: None,
            view,
            coins: Vec::new(),
            users: Vec::new(),
            builder: None,
            n_levels: None,
            n_sig_figs: None,
            mantissa: None,
            strict: false,
            interval: None,
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
    /// First and last folded block.
    pub first_block: Option<u64>,
    /// Last folded block.
    pub last_block: Option<u64>,
    /// Blocks folded.
    pub blocks: u64,
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
            "replay: {} blocks ({} skipped), {} events, {} frames, {} unknown ids, {} decode errors, {} gaps, {} resets, {:.1} MB in {:.3} s ({:.1} MB/s)",
            self.blocks,
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

/// Where frames go: one JSON object per line.
pub struct FrameSink<'a> {
    out: &'a mut dyn Write,
    frames: u64,
}

impl FrameSink<'_> {
    /// Writes one frame as a JSON line.
    ///
    /// # Errors
    /// [`ReplayError::Output`] when serialising or writing fails.
    pub fn frame<T: Serialize>(&mut self, frame: &T) -> Result<(), ReplayError> {
        serde_json::to_writer(&mut *self.out, frame)
            .map_err(|e| ReplayError::Output(e.to_string()))?;
        self.out
            .write_all(b"\n")
            .map_err(|e| ReplayError::Output(e.to_string()))?;
        self.frames += 1;
        Ok(())
    }

    /// Writes every frame of a batch.
    ///
    /// # Errors
    /// As [`FrameSink::frame`].
    pub fn frames<T: Serialize>(
        &mut self,
        frames: impl IntoIterator<Item = T>,
    ) -> Result<(), ReplayError> {
        frames.into_iter().try_for_each(|frame| self.frame(&frame))
    }
}

/// Drives one view's subscription(s) through a replay.
pub trait ViewDriver {
    /// Subscribes after the first folded block and writes the opening
    /// frames.
    ///
    /// # Errors
    /// A request outside the view's contract, or an output failure.
    fn open(
        &mut self,
        engine: &mut Engine,
        block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError>;

    /// Writes the frames of a later folded block.
    ///
    /// # Errors
    /// An output failure.
    fn on_block(
        &mut self,
        engine: &Engine,
        block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError>;
}

/// The driver of `opts.view`: one arm, one small function per view.
///
/// # Errors
/// [`ReplayError`] when the request is outside the view's contract.
pub fn driver(opts: &ReplayOptions) -> Result<Box<dyn ViewDriver>, ReplayError> {
    match opts.view {
        View::L2Book => Ok(l2book(opts)),
        View::Bbo => Ok(bbo(opts)),
        View::L2Diff => Ok(l2diff(opts)),
        View::L4Book => Ok(l4book(opts)),
        View::L4Updates => Ok(l4updates(opts)),
        View::Mids => Ok(mids(opts)),
        View::Trades => trades(opts),
        View::Fills => fills(opts),
        View::Candles => candles(opts),
        View::Tpsl => tpsl(opts),
    }
}

/// A driver from two closures: open, then per block.
struct Driver<S, O, B> {
    state: Option<S>,
    open: O,
    block: B,
}

impl<S, O, B> ViewDriver for Driver<S, O, B>
where
    O: FnMut(&mut Engine, &mut FrameSink<'_>) -> Result<S, ReplayError>,
    B: FnMut(&mut S, &Engine, &mut FrameSink<'_>) -> Result<(), ReplayError>,
{
    fn open(
        &mut self,
        engine: &mut Engine,
        _block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError> {
        self.state = Some((self.open)(engine, out)?);
        Ok(())
    }

    fn on_block(
        &mut self,
        engine: &Engine,
        _block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError> {
        match self.state.as_mut() {
            Some(state) => (self.block)(state, engine, out),
            None => Ok(()),
        }
    }
}

fn boxed<S: 'static>(
    open: impl FnMut(&mut Engine, &mut FrameSink<'_>) -> Result<S, ReplayError> + 'static,
    block: impl FnMut(&mut S, &Engine, &mut FrameSink<'_>) -> Result<(), ReplayError> + 'static,
) -> Box<dyn ViewDriver> {
    Box::new(Driver {
        state: None,
        open,
        block,
    })
}

/// Coins in the order given, without repeats.
fn distinct(coins: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for coin in coins {
        if !out.contains(coin) {
            out.push(coin.clone());
        }
    }
    out
}

fn l2book(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let requests: Vec<L2BookRequest> = distinct(&opts.coins)
        .into_iter()
        .map(|coin| L2BookRequest {
            coin,
            n_levels: opts.n_levels,
            n_sig_figs: opts.n_sig_figs,
            mantissa: opts.mantissa,
            strict: Some(opts.strict),
        })
        .collect();
    boxed(
        move |engine, out| {
            if requests.is_empty() {
                return Err(ViewError::MissingCoin { view: "l2book" }.into());
            }
            let mut subs = Vec::new();
            for request in &requests {
                let (sub, frame) = L2BookSubscription::open(engine, request)?;
                out.frame(&frame)?;
                subs.push(sub);
            }
            Ok(subs)
        },
        |subs, engine, out| out.frames(subs.iter().filter_map(|sub| sub.on_block(engine))),
    )
}

fn bbo(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let request = BboRequest {
        coins: opts.coins.clone(),
    };
    boxed(
        move |engine, out| {
            let (sub, frames) = BboSubscription::open(engine, &request)?;
            out.frames(frames)?;
            Ok(sub)
        },
        |sub, engine, out| out.frames(sub.on_block(engine)),
    )
}

fn l2diff(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let request = L2BookDiffRequest {
        coins: opts.coins.clone(),
        n_levels: opts.n_levels,
        n_sig_figs: opts.n_sig_figs,
        mantissa: opts.mantissa,
    };
    boxed(
        move |engine, out| {
            let (sub, frame) = L2DiffSubscription::open(engine, &request)?;
            out.frame(&frame)?;
            Ok(sub)
        },
        |sub, engine, out| out.frames(sub.on_block(engine)),
    )
}

fn l4book(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let coins = distinct(&opts.coins);
    boxed(
        move |engine, out| {
            if coins.is_empty() {
                return Err(ViewError::MissingCoin { view: "l4book" }.into());
            }
            let mut subs = Vec::new();
            for coin in &coins {
                let request = L4BookRequest {
                    coin: coin.clone(),
                    mirror: None,
                };
                let (sub, frame) = L4BookSubscription::open(engine, &request)?;
                out.frame(&frame)?;
                subs.push(sub);
            }
            Ok(subs)
        },
        |subs, engine, out| out.frames(subs.iter().filter_map(|sub| sub.on_block(engine))),
    )
}

fn l4updates(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let request = L4OrderUpdatesRequest {
        coins: opts.coins.clone(),
        users: opts.users.clone(),
    };
    boxed(
        move |engine, out| {
            let (sub, frame) = L4UpdatesSubscription::open(engine, &request);
            out.frame(&frame)?;
            Ok(sub)
        },
        |sub, engine, out| out.frames(sub.on_block(engine)),
    )
}

fn mids(opts: &ReplayOptions) -> Box<dyn ViewDriver> {
    let request = AllMidsRequest {
        coins: opts.coins.clone(),
    };
    boxed(
        move |engine, out| {
            let (sub, frame) = MidsSubscription::open(engine, &request);
            out.frame(&frame)?;
            Ok(sub)
        },
        |sub, engine, out| out.frames(sub.on_block(engine)),
    )
}

/// A driver for the views folded from the block's own events (trades,
/// fills, candles, TP/SL): one step per block, told whether it opens.
struct BlockDriver<S, F> {
    state: S,
    step: F,
}

impl<S, F> ViewDriver for BlockDriver<S, F>
where
    F: FnMut(&mut S, &Block, bool, &mut FrameSink<'_>) -> Result<(), ReplayError>,
{
    fn open(
        &mut self,
        _engine: &mut Engine,
        block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError> {
        (self.step)(&mut self.state, block, true, out)
    }

    fn on_block(
        &mut self,
        _engine: &Engine,
        block: &Block,
        out: &mut FrameSink<'_>,
    ) -> Result<(), ReplayError> {
        (self.step)(&mut self.state, block, false, out)
    }
}

fn block_driver<S: 'static>(
    state: S,
    step: impl FnMut(&mut S, &Block, bool, &mut FrameSink<'_>) -> Result<(), ReplayError> + 'static,
) -> Box<dyn ViewDriver> {
    Box::new(BlockDriver { state, step })
}

/// `block` keeping only its fills (and statuses when asked), so views that
/// need no book events skip decoding them.
fn events_of(block: &Block, with_statuses: bool) -> Block {
    let mut only = Block::new(block.number, block.time_ms);
    only.lines.fills.clone_from(&block.lines.fills);
    if with_statuses {
        only.lines
            .order_statuses
            .clone_from(&block.lines.order_statuses);
    }
    only
}

/// Trades of the listed coins; the first block's trades are printed too
/// (the stream is live only, so it has no opening snapshot).
fn trades(opts: &ReplayOptions) -> Result<Box<dyn ViewDriver>, ReplayError> {
    let subscription = TradesSubscription::new(&TradesRequest {
        coins: opts.coins.clone(),
    })?;
    Ok(block_driver(
        (subscription, TradesView::new()),
        |(subscription, view): &mut (TradesSubscription, TradesView), block, _, out| {
            let events = events_of(block, false);
            view.apply(&events.decode());
            out.frames(subscription.frames(view))
        },
    ))
}

/// Builder fills with `--builder`, else user fills for one `--users`
/// entry, else all fills, within `--coins`.
fn fills(opts: &ReplayOptions) -> Result<Box<dyn ViewDriver>, ReplayError> {
    let subscription =
        FillsSubscription::from_selectors(&opts.users, opts.builder.as_deref(), &opts.coins)?;
    Ok(block_driver(
        (subscription, FillsView::new()),
        |(subscription, view): &mut (FillsSubscription, FillsView), block, _, out| {
            let events = events_of(block, false);
            view.apply(&events.decode());
            out.frames(subscription.on_block(view))
        },
    ))
}

/// One `--interval` candle per `--coins` entry, throttled as live.
fn candles(opts: &ReplayOptions) -> Result<Box<dyn ViewDriver>, ReplayError> {
    let coins = distinct(&opts.coins);
    if coins.is_empty() {
        return Err(ViewError::MissingCoin { view: "candles" }.into());
    }
    let interval = opts.interval.clone().unwrap_or_default();
    let subscriptions = coins
        .into_iter()
        .map(|coin| {
            let request = CandleRequest {
                coin,
                interval: interval.clone(),
            };
            CandleSubscription::new(&request, DEFAULT_THROTTLE_MS)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tracked: Vec<_> = subscriptions
        .iter()
        .map(CandleSubscription::interval)
        .collect();
    let state = (
        subscriptions,
        TradesView::new(),
        CandlesView::with_intervals(&tracked),
    );
    Ok(block_driver(
        state,
        |(subscriptions, trades, candles): &mut (
            Vec<CandleSubscription>,
            TradesView,
            CandlesView,
        ),
         block,
         opening,
         out| {
            let events = events_of(block, false);
            trades.apply(&events.decode());
            candles.apply_trades_view(trades);
            for subscription in subscriptions {
                if opening {
                    out.frames(subscription.open(candles))?;
                } else {
                    out.frames(subscription.on_block(candles))?;
                }
            }
            Ok(())
        },
    ))
}

/// TP/SL for `--coins` (empty = every perp) and `--users`; trigger orders
/// placed before the first replayed block are not known.
fn tpsl(opts: &ReplayOptions) -> Result<Box<dyn ViewDriver>, ReplayError> {
    let request = TpslUpdatesRequest {
        coins: opts.coins.clone(),
        users: opts.users.clone(),
    };
    // Validate before any output.
    TpslSubscription::open(&TpslView::new(), &request)?;
    let state: (Option<TpslSubscription>, TpslView) = (None, TpslView::new());
    Ok(block_driver(
        state,
        move |(subscription, view): &mut (Option<TpslSubscription>, TpslView), block, _, out| {
            let events = events_of(block, true);
            view.apply(&events.decode());
            if let Some(subscription) = subscription {
                return out.frames(subscription.on_block(view));
            }
            let (opened, frame) = TpslSubscription::open(view, &request)?;
            *subscription = Some(opened);
            out.frame(&frame)
        },
    ))
}

struct Input {
    feed: Feed,
    cursor: Cursor,
    source: Source,
    done: bool,
}

/// Replays `opts` and writes the view's frames to `out`, one JSON object per
/// line; `progress` is called after every folded block.
///
/// # Errors
/// [`ReplayError`] for an unsupported or invalid view request, unreadable
/// files or snapshots, and output failures. Bad lines, unknown ids and gaps
/// are not errors: they are counted in the [`ReplaySummary`].
pub fn run(
    opts: &ReplayOptions,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&ReplayProgress),
) -> Result<ReplaySummary, ReplayError> {
    let started = Instant::now();
    let mut view = driver(opts)?;
    let mut inputs = Vec::new();
    let mut mode = AlignMode::ByBlock;
    for source in Source::EVENT_STREAMS {
        let feed = Feed::open(&opts.data_dir, source)?;
        let Some(dir) = feed.source_dir_name() else {
            continue;
        };
        if source.mode_of_dir(&dir) == Some(Mode::Streaming) {
            mode = AlignMode::Streaming;
        }
        let cursor = feed.seek(Start::BlockNumber(0))?;
        inputs.push(Input {
            feed,
            cursor,
            source,
            done: false,
        });
    }
    if !inputs
        .iter()
        .any(|i| matches!(i.source, Source::OrderStatuses | Source::RawBookDiffs))
    {
        return Err(ReplayError::NoData(opts.data_dir.clone()));
    }
    let first_block = first_block_number(&inputs)?;
    let (start_snapshot, later, listed) = snapshots(opts, first_block)?;
    let mut engine = match start_snapshot {
        Some(snapshot) => Engine::from_snapshot(snapshot),
        None => Engine::new(),
    };
    let snapshot_height = engine.height();
    let start = opts
        .from_block
        .unwrap_or(0)
        .max(snapshot_height.map_or(0, |h| h + 1));
    for input in &mut inputs {
        input.cursor = input.feed.seek(Start::BlockNumber(start))?;
    }
    let sources: Vec<Source> = inputs.iter().map(|i| i.source).collect();
    let mut aligner = Aligner::new(mode, &sources, i64::MAX);
    let mut sink = FrameSink { out, frames: 0 };
    let mut summary = ReplaySummary {
        snapshot_height,
        first_block: None,
        last_block: None,
        blocks: 0,
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
    };
    let mut later = Later {
        files: later.into_iter().peekable(),
        listed,
    };
    loop {
        let mut read_any = false;
        for input in inputs.iter_mut().filter(|i| !i.done) {
            let records = input.feed.read(&mut input.cursor, READ_BATCH)?;
            if records.is_empty() {
                input.done = true;
            }
            for record in records {
                if opts
                    .to_block
                    .is_some_and(|to| record.block_number.is_some_and(|n| n > to))
                {
                    input.done = true;
                    break;
                }
                read_any = true;
                summary.bytes += record.data.len() as u64;
                aligner.push_line(input.source, record.data, 0);
            }
        }
        let exhausted = !read_any && inputs.iter().all(|i| i.done);
        loop {
            let block = if exhausted {
                aligner.finish()
            } else {
                aligner.pop(0)
            };
            let Some(block) = block else { break };
            fold_one(
                &block,
                &mut engine,
                view.as_mut(),
                &mut sink,
                &mut summary,
                &mut later,
            )?;
            summary.frames = sink.frames;
            progress(&ReplayProgress {
                block: block.number,
                blocks: summary.blocks,
                bytes: summary.bytes,
                frames: summary.frames,
            });
        }
        if exhausted {
            break;
        }
    }
    sink.out
        .flush()
        .map_err(|e| ReplayError::Output(e.to_string()))?;
    summary.frames = sink.frames;
    summary.unknown_ids = engine.unknown_ids().clone();
    summary.align = aligner.report().clone();
    summary.elapsed = started.elapsed();
    Ok(summary)
}

fn fold_one(
    block: &Block,
    engine: &mut Engine,
    view: &mut dyn ViewDriver,
    sink: &mut FrameSink<'_>,
    summary: &mut ReplaySummary,
    later: &mut Later,
) -> Result<(), ReplayError> {
    let report = engine.apply(block);
    if report.skipped {
        summary.skipped_blocks += 1;
        return Ok(());
    }
    summary.blocks += 1;
    summary.events += report.events as u64;
    summary.decode_errors += report.decode_errors.len() as u64;
    summary.gaps += u64::from(report.gap.is_some());
    if summary.first_block.is_none() {
        summary.first_block = Some(block.number);
        view.open(engine, block, sink)?;
    } else {
        view.on_block(engine, block, sink)?;
    }
    summary.last_block = Some(block.number);
    while later.files.peek().is_some_and(|f| f.height < block.number) {
        later.files.next();
    }
    if let Some(file) = later.files.next_if(|f| f.height == block.number) {
        let snapshot = parse_file(&file.path, &later.listed.read(&file)?)?;
        let resets = engine
            .check_snapshot(&snapshot)
            .map_err(|error| ReplayError::Snapshot {
                path: file.path.clone(),
                error,
            })?;
        summary.resets.extend(resets);
    }
    Ok(())
}

/// The block number of the first record of the statuses or diffs feed.
fn first_block_number(inputs: &[Input]) -> Result<Option<u64>, ReplayError> {
    let mut first: Option<u64> = None;
    for input in inputs {
        let mut cursor = input.feed.seek(Start::BlockNumber(0))?;
        if let Some(n) = input
            .feed
            .read(&mut cursor, 1)?
            .first()
            .and_then(|r| r.block_number)
        {
            first = Some(first.map_or(n, |f| f.min(n)));
        }
    }
    Ok(first)
}

/// Newer snapshots to compare with, read when the fold reaches them.
struct Later {
    files: std::iter::Peekable<std::vec::IntoIter<SnapshotFile>>,
    listed: Snapshots,
}

/// The starting snapshot (explicit, else the latest below the start block,
/// else the earliest) and the newer ones to check against, by height.
fn snapshots(
    opts: &ReplayOptions,
    first_block: Option<u64>,
) -> Result<(Option<L4Snapshot>, Vec<SnapshotFile>, Snapshots), ReplayError> {
    let listed = Snapshots::open_at_rest(&opts.data_dir)?;
    let files = listed.list();
    let start = if let Some(path) = &opts.snapshot {
        let bytes = std::fs::read(path).map_err(|e| ReplayError::SnapshotIo {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Some(parse_file(path, &bytes)?)
    } else {
        let target = opts.from_block.or(first_block);
        let chosen = match target {
            Some(target) => files
                .iter()
                .rev()
                .find(|f| f.height < target)
                .or_else(|| opts.from_block.is_none().then(|| files.first()).flatten()),
            None => files.first(),
        };
        match chosen {
            Some(file) => Some(parse_file(&file.path, &listed.read(file)?)?),
            None => None,
        }
    };
    let start_height = start.as_ref().map_or(0, |s| s.height);
    let later = files
        .into_iter()
        .filter(|f| f.height > start_height && opts.to_block.is_none_or(|to| f.height <= to))
        .collect();
    Ok((start, later, listed))
}

fn parse_file(path: &Path, bytes: &[u8]) -> Result<L4Snapshot, ReplayError> {
    snapshot::parse(bytes).map_err(|error| ReplayError::Snapshot {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_names_round_trip() {
        for view in View::ALL {
            assert_eq!(view.name().parse::<View>().unwrap(), view);
        }
        assert_eq!(
            "l3book".parse::<View>(),
            Err(ReplayError::UnknownView("l3book".into()))
        );
    }
}
