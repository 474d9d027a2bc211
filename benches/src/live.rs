//! Pieces shared by the live harnesses (`fanout`, `latency`, `engine_cpu`, …): a node directory
//! the simulator appends to block by block at a chosen pace (which can be paused), remembering
//! the instant each block was appended, and the latency summaries the harnesses print. The
//! server they measure is started by [`crate::server`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use engine::market::Needs;
use feeds::Source;
use fixtures::{
    NodeWriter, OutputMode, RenderedBlock, SimConfig, Simulator, WriterOptions, write_snapshot_file,
};
use hdrhistogram::Histogram;

/// How the stand-in node paces its own work, for the harnesses' method lines.
pub const WRITER_PACING: &str = "the writer makes and renders each block in the middle of the interval before its append, then only appends (a node does that work on cores of its own; here it would otherwise take a core from the server while the server folds and sends the block just appended)";

/// Sleeps until `at` (returns at once when it has passed).
fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// When the writer appended each line of each block, as nanoseconds since a base instant shared
/// by the writer and the clients of one process: a frame's latency counts from the write of the
/// last line it derives from (the market engine folds a block once its order statuses, raw
/// book diffs and fills are written; a raw fills record derives from the fills line alone).
#[derive(Debug)]
pub struct AppendLog {
    base: Instant,
    first: u64,
    /// Slot `(n - first) * STREAMS + i`: nanoseconds since `base` + 1 when block `n`'s line of
    /// `WRITE_ORDER[i]` was written, 0 before.
    written: Box<[AtomicU64]>,
    /// Slot `n - first`: block `n`'s time (Unix ms), 0 before it was written. Block times
    /// rise with the block number.
    times_ms: Box<[AtomicI64]>,
}

/// Event streams per block.
const STREAMS: usize = fixtures::WRITE_ORDER.len();

impl AppendLog {
    fn new(first: u64, blocks: usize) -> Self {
        Self {
            base: Instant::now(),
            first,
            written: (0..blocks * STREAMS).map(|_| AtomicU64::new(0)).collect(),
            times_ms: (0..blocks).map(|_| AtomicI64::new(0)).collect(),
        }
    }

    fn slot(&self, block: u64, source: Source) -> Option<&AtomicU64> {
        let stream = fixtures::WRITE_ORDER.iter().position(|&s| s == source)?;
        let block = usize::try_from(block.checked_sub(self.first)?).ok()?;
        self.written.get(block.checked_mul(STREAMS)? + stream)
    }

    /// Notes that `block`'s line of `source` was written (at the writer's next look at the
    /// clock).
    fn record(&self, block: u64, source: Source, at: Instant) {
        if let Some(slot) = self.slot(block, source) {
            let ns = u64::try_from(at.duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
            slot.store(ns.saturating_add(1), Ordering::Release);
        }
    }

    /// Notes `block`'s block time (Unix ms), before its lines are written.
    fn note_time(&self, block: u64, time_ms: i64) {
        if let Some(slot) = block
            .checked_sub(self.first)
            .and_then(|i| self.times_ms.get(usize::try_from(i).ok()?))
        {
            slot.store(time_ms, Ordering::Release);
        }
    }

    /// The block whose time is `time_ms` (Unix ms), among those written: for frames that
    /// carry their block's time but not its number (the exchange's WebSocket messages).
    pub fn block_at(&self, time_ms: i64) -> Option<u64> {
        let written = self
            .times_ms
            .partition_point(|slot| slot.load(Ordering::Acquire) != 0);
        let times = &self.times_ms[..written];
        let at = times.partition_point(|slot| slot.load(Ordering::Acquire) < time_ms);
        (times.get(at)?.load(Ordering::Acquire) == time_ms).then(|| self.first + at as u64)
    }

    /// Time from the write of the last of `block`'s lines of `sources` to `now`, once every one
    /// of them was recorded by this writer.
    pub fn since_written(&self, block: u64, sources: &[Source], now: Instant) -> Option<Duration> {
        let mut last = 0;
        for &source in sources {
            let ns = self
                .slot(block, source)?
                .load(Ordering::Acquire)
                .checked_sub(1)?;
            last = last.max(ns);
        }
        Some(now.saturating_duration_since(self.base + Duration::from_nanos(last)))
    }

    /// Time from the write of the last line the market engine folds for `block` (its order
    /// statuses, raw book diffs and fills) to `now`.
    pub fn since_folded(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &Needs::ALL.sources(), now)
    }

    /// Time from the write of `block`'s fills line to `now`.
    pub fn since_fills(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &[Source::Fills], now)
    }

    /// Time from the write of `block`'s first line to `now`, once the writer wrote it.
    pub fn since_first_line(&self, block: u64, now: Instant) -> Option<Duration> {
        self.since_written(block, &fixtures::WRITE_ORDER[..1], now)
    }
}

/// A node directory grown by a background thread: a starting L4 snapshot and `warm` blocks
/// written at once, then one block per simulated block interval divided by the speed-up.
#[derive(Debug)]
pub struct LiveNode {
    dir: tempfile::TempDir,
    /// When each live block was appended.
    pub log: Arc<AppendLog>,
    /// The simulator's universe (coin names, activity shares).
    pub universe: Arc<fixtures::Universe>,
    /// The starting L4 snapshot file.
    pub snapshot: PathBuf,
    speedup_milli: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Set by [`LiveNode::pause`]: the writer holds before its next block.
    pause: Arc<AtomicBool>,
    /// Set by the writer while it holds.
    holding: Arc<AtomicBool>,
    writer: Option<JoinHandle<anyhow::Result<u64>>>,
}

impl LiveNode {
    /// Starts writing `cfg`'s blocks (by-block layout, every line flushed as the node does with
    /// output buffering disabled) at `speedup` × the simulated block rate, for at most
    /// `max_blocks` live blocks.
    pub fn start(
        cfg: &SimConfig,
        warm: u64,
        speedup: f64,
        max_blocks: u64,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut sim = Simulator::new(cfg);
        let universe = Arc::clone(sim.universe());
        let (snapshot, _) =
            write_snapshot_file(dir.path(), &sim).context("write the starting snapshot")?;
        let mut writer = NodeWriter::create_with(
            dir.path(),
            OutputMode::ByBlock,
            WriterOptions {
                line_flush: true,
                replica_cmds: false,
                ..WriterOptions::default()
            },
        )?;
        for _ in 0..warm {
            writer.write_block(&sim.next_block())?;
        }
        let log = Arc::new(AppendLog::new(
            sim.height() + 1,
            usize::try_from(max_blocks).unwrap_or(usize::MAX),
        ));
        let speedup_milli = Arc::new(AtomicU64::new(milli(speedup)));
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new(AtomicBool::new(false));
        let holding = Arc::new(AtomicBool::new(false));
        let handle = {
            let (log, speedup_milli, stop, pause, holding) = (
                Arc::clone(&log),
                Arc::clone(&speedup_milli),
                Arc::clone(&stop),
                Arc::clone(&pause),
                Arc::clone(&holding),
            );
            std::thread::Builder::new()
                .name("node-writer".into())
                .spawn(move || {
                    let mut written = 0;
                    let mut last_time = sim.block_time_ns();
                    let mut due = Instant::now();
                    let mut rendered = RenderedBlock::default();
                    // Half the last block interval at the current pace.
                    let mut half_gap = Duration::ZERO;
                    while written < max_blocks && !stop.load(Ordering::Relaxed) {
                        if pause.load(Ordering::Acquire) {
                            holding.store(true, Ordering::Release);
                            while pause.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            holding.store(false, Ordering::Release);
                            // Resume at the current pace from now, not with a burst.
                            due = Instant::now();
                            continue;
                        }
                        // The stand-in node's own work, making and rendering the next block,
                        // waits for the middle of the interval since the last append: a node
                        // does it on cores of its own, and on a small machine it would
                        // otherwise take a core from the server exactly while the server folds
                        // and sends the block just appended.
                        sleep_until(due + half_gap);
                        let block = sim.next_block();
                        writer.render(&block, &mut rendered);
                        let gap = u64::try_from(block.block_time_ns - last_time).unwrap_or(0);
                        last_time = block.block_time_ns;
                        let speedup = speedup_milli.load(Ordering::Relaxed).max(1);
                        let interval = Duration::from_nanos(gap.saturating_mul(1000) / speedup);
                        half_gap = interval / 2;
                        due += interval;
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        } else if now - due > Duration::from_millis(500) {
                            // Fell far behind (a stall, or the rate changed): pace from now.
                            due = now;
                        }
                        log.note_time(block.number, block.block_time_ns / 1_000_000);
                        writer.write_rendered(&rendered, &mut |source| {
                            log.record(block.number, source, Instant::now());
                        })?;
                        written += 1;
                    }
                    writer.flush()?;
                    Ok(written)
                })?
        };
        Ok(Self {
            dir,
            log,
            universe,
            snapshot,
            speedup_milli,
            stop,
            pause,
            holding,
            writer: Some(handle),
        })
    }

    /// Stops appending before the next block and returns once the writer holds (every block
    /// it wrote is complete in the files), or once it has finished.
    pub fn pause(&self) {
        self.pause.store(true, Ordering::Release);
        while !self.holding.load(Ordering::Acquire)
            && self.writer.as_ref().is_some_and(|w| !w.is_finished())
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Appends again at the current pace.
    pub fn resume(&self) {
        self.pause.store(false, Ordering::Release);
    }

    /// The data directory to serve.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Changes the pace to `speedup` × the simulated block rate.
    pub fn set_speedup(&self, speedup: f64) {
        self.speedup_milli.store(milli(speedup), Ordering::Relaxed);
    }

    /// The `n` coins with the most order activity, most active first.
    pub fn top_coins(&self, n: usize) -> Vec<String> {
        let mut markets: Vec<&fixtures::Market> = self.universe.markets.iter().collect();
        markets.sort_by(|a, b| b.activity.total_cmp(&a.activity));
        markets
            .into_iter()
            .take(n)
            .map(|m| m.coin.clone())
            .collect()
    }

    /// Stops the writer; returns how many live blocks it wrote.
    pub fn stop(mut self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => bail!("the node writer panicked"),
            None => Ok(0),
        }
    }
}

impl Drop for LiveNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn milli(speedup: f64) -> u64 {
    (speedup * 1000.0).round().max(1.0) as u64
}

/// The 1-minute load average from `/proc/loadavg` ("?" when unreadable): other jobs on a
/// shared machine show up here, and latency with them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The report line with the 1-minute load average at a run's start and now.
pub fn load_line(before: &str, cores: usize) -> String {
    format!(
        "- Load average (1 min) at start / end: {before} / {} on {cores} cores (every process of the machine, this run's included)\n",
        load_average()
    )
}

/// A latency histogram in microseconds (1 µs .. 100 s, 3 significant digits).
pub fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 100_000_000, 3)?)
}

/// Records `latency` into `histogram` in microseconds (clamped to its bounds).
pub fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(us.clamp(1, histogram.high()));
}

/// `p50 / p90 / p99 / p99.9 / max` of a µs histogram, in ms with three decimals.
pub fn percentiles_ms(histogram: &Histogram<u64>) -> [f64; 5] {
    let ms = |us: u64| us as f64 / 1000.0;
    [
        ms(histogram.value_at_quantile(0.50)),
        ms(histogram.value_at_quantile(0.90)),
        ms(histogram.value_at_quantile(0.99)),
        ms(histogram.value_at_quantile(0.999)),
        ms(histogram.max()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_by_their_time_once_written() {
        let log = AppendLog::new(100, 4);
        log.note_time(100, 5_000);
        log.note_time(101, 5_068);
        assert_eq!(log.block_at(5_068), Some(101));
        assert_eq!(log.block_at(5_000), Some(100));
        assert_eq!(log.block_at(5_001), None);
        assert_eq!(log.block_at(9_999), None);
    }

    #[test]
    fn the_append_log_times_from_the_last_line_a_frame_derives_from() {
        let log = AppendLog::new(100, 4);
        let start = Instant::now();
        let ms = Duration::from_millis;
        for block in [101, 99, 104] {
            for (i, &source) in fixtures::WRITE_ORDER.iter().enumerate() {
                log.record(block, source, start + ms(i as u64));
            }
        }
        let later = start + ms(10);
        let last_folded = fixtures::WRITE_ORDER
            .iter()
            .rposition(|s| Needs::ALL.sources().contains(s))
            .unwrap() as u64;
        assert_eq!(log.since_folded(101, later), Some(ms(10 - last_folded)));
        let fills = fixtures::WRITE_ORDER
            .iter()
            .position(|&s| s == Source::Fills)
            .unwrap() as u64;
        assert_eq!(log.since_fills(101, later), Some(ms(10 - fills)));
        assert_eq!(log.since_first_line(101, later), Some(ms(10)));
        log.record(102, Source::Fills, start);
        assert_eq!(log.since_fills(102, later), Some(ms(10)));
        assert_eq!(
            log.since_folded(102, later),
            None,
            "statuses not written yet"
        );
        assert_eq!(log.since_folded(100, later), None);
        assert_eq!(log.since_folded(99, later), None);
        assert_eq!(log.since_folded(104, later), None);
    }

    #[test]
    fn percentiles_are_reported_in_milliseconds() {
        let mut h = histogram().unwrap();
        for us in 1..=1000 {
            record(&mut h, Duration::from_micros(us));
        }
        let [p50, _, p99, _, max] = percentiles_ms(&h);
        assert!((p50 - 0.5).abs() < 0.01, "{p50}");
        assert!((p99 - 0.99).abs() < 0.01, "{p99}");
        assert!((max - 1.0).abs() < 0.01, "{max}");
    }
}

/// A streamed market message that names its block (to match it with the
/// append log).
pub trait Numbered: Send + 'static {
    /// The frame's block number.
    fn block(&self) -> u64;
}

macro_rules! numbered {
    ($($ty:ty),*) => {$(
        impl Numbered for $ty {
            fn block(&self) -> u64 {
                u64::try_from(self.block_number).unwrap_or(0)
            }
        }
    )*};
}
numbered!(
    proto::v3::BboUpdate,
    proto::v3::L2BookUpdate,
    proto::v3::L4OrderUpdate,
    proto::v3::TradesUpdate
);

/// A raw feed record: its block number (0 when it has none).
impl Numbered for proto::v3::Record {
    fn block(&self) -> u64 {
        self.block_number
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0)
    }
}
