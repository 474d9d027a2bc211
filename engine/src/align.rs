//! The aligner: joins the lines of order statuses, raw book diffs, fills,
//! misc events and TWAP statuses by `block_number` into [`Block`]s, emitted
//! strictly in block order.
//!
//! Two modes. [`AlignMode::ByBlock`] (`--batch-by-block`): one line per
//! source per block, empty blocks included; a block is complete once every
//! active source has delivered its line for it (or moved past it).
//! [`AlignMode::Streaming`] (`--stream-with-block-info`): many lines per
//! block, sources out of step, no line for a source with no events; a block
//! is complete once every active source has moved past it. In both modes a
//! block also completes once `grace_ms` have passed since its first line —
//! the caller passes "now" to [`Aligner::push`] and [`Aligner::pop`], so the
//! aligner holds no clock. [`Aligner::finish`] flushes at end of input.
//!
//! Bad input is reported, never fatal: duplicates and late lines (for a
//! block already emitted) are dropped, lines out of order but still in time
//! are kept, gaps in by-block mode are recorded. Every issue is counted and
//! the first [`MAX_ISSUES`] are kept with their block numbers.

use std::collections::BTreeMap;

use bytes::Bytes;
use feeds::Source;
use feeds::envelope::{self, EnvelopeError};
use thiserror::Error;

use crate::block::{Block, BlockLines};

/// Issues kept verbatim in [`AlignReport::issues`] (all are counted).
pub const MAX_ISSUES: usize = 256;

/// The slot of an event stream in the aligner's per-source arrays: its
/// position in [`Source::EVENT_STREAMS`] (`None` for replica blocks and
/// snapshots, which are not part of a block's events).
fn slot(source: Source) -> Option<usize> {
    Source::EVENT_STREAMS.iter().position(|&s| s == source)
}

/// How the node wrote its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignMode {
    /// One line per source per block.
    ByBlock,
    /// Many lines per block, sources out of step.
    Streaming,
}

/// One input problem the aligner worked around.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AlignIssue {
    /// A second by-block line for the same block from the same source
    /// (dropped).
    #[error("align: duplicate {stream} line for block {block}")]
    Duplicate {
        /// Source.
        stream: Source,
        /// Block number.
        block: u64,
    },
    /// A line older than the source's previous one, for a block not yet
    /// emitted (kept).
    #[error("align: {stream} went back from block {last} to block {block}")]
    OutOfOrder {
        /// Source.
        stream: Source,
        /// The line's block.
        block: u64,
        /// The source's newest block before it.
        last: u64,
    },
    /// A line for a block already emitted (dropped).
    #[error("align: {stream} line for block {block} came after the block was emitted")]
    Late {
        /// Source.
        stream: Source,
        /// Block number.
        block: u64,
    },
    /// Blocks missing between two emitted blocks (by-block mode only).
    #[error("align: blocks {from} to {to} missing")]
    Gap {
        /// First missing block.
        from: u64,
        /// Last missing block.
        to: u64,
    },
    /// A line that is not a block envelope (dropped).
    #[error("align: {stream} line is not a block envelope: {error}")]
    BadLine {
        /// Source.
        stream: Source,
        /// Why.
        error: EnvelopeError,
    },
}

/// Counts of every issue, plus the first [`MAX_ISSUES`] of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlignReport {
    /// Duplicate lines dropped.
    pub duplicates: u64,
    /// Lines received out of order (kept).
    pub out_of_order: u64,
    /// Lines for already emitted blocks (dropped).
    pub late: u64,
    /// Gaps between emitted blocks.
    pub gaps: u64,
    /// Blocks missing in those gaps.
    pub missing_blocks: u64,
    /// Lines that were not envelopes.
    pub bad_lines: u64,
    /// Blocks completed by the grace timeout rather than by the sources.
    pub grace_completions: u64,
    /// The first issues, in arrival order.
    pub issues: Vec<AlignIssue>,
}

impl AlignReport {
    fn record(&mut self, issue: AlignIssue) {
        match &issue {
            AlignIssue::Duplicate { .. } => self.duplicates += 1,
            AlignIssue::OutOfOrder { .. } => self.out_of_order += 1,
            AlignIssue::Late { .. } => self.late += 1,
            AlignIssue::Gap { from, to } => {
                self.gaps += 1;
                self.missing_blocks += to - from + 1;
            }
            AlignIssue::BadLine { .. } => self.bad_lines += 1,
        }
        if self.issues.len() < MAX_ISSUES {
            self.issues.push(issue);
        }
    }
}

#[derive(Debug)]
struct Pending {
    time_ms: i64,
    first_seen_ms: i64,
    seen: [bool; 5],
    lines: BlockLines,
}

/// Joins source lines into blocks. See the module docs.
#[derive(Debug)]
pub struct Aligner {
    mode: AlignMode,
    grace_ms: i64,
    active: [bool; 5],
    /// Blocks below this are not expected from the source (it starts later).
    expected_from: [u64; 5],
    last_seen: [Option<u64>; 5],
    pending: BTreeMap<u64, Pending>,
    emitted: Option<u64>,
    report: AlignReport,
}

impl Aligner {
    /// An aligner over `sources` (the streams present), completing a block
    /// at the latest `grace_ms` after its first line.
    pub fn new(mode: AlignMode, sources: &[Source], grace_ms: i64) -> Self {
        let mut active = [false; 5];
        for &source in sources {
            if let Some(i) = slot(source) {
                active[i] = true;
            }
        }
        Self {
            mode,
            grace_ms,
            active,
            expected_from: [0; 5],
            last_seen: [None; 5],
            pending: BTreeMap::new(),
            emitted: None,
            report: AlignReport::default(),
        }
    }

    /// Starts after `block`: lines at or below it count as late.
    #[must_use]
    pub fn starting_after(mut self, block: u64) -> Self {
        self.emitted = Some(block);
        self
    }

    /// Expects `source` only from block `from` on: blocks below it complete
    /// without it (a stream read from a later start than the others).
    #[must_use]
    pub fn expecting(mut self, source: Source, from: u64) -> Self {
        if let Some(i) = slot(source) {
            self.expected_from[i] = from;
        }
        self
    }

    /// Waits for `source` from now on (a stream whose files appeared).
    pub fn activate(&mut self, source: Source) {
        if let Some(i) = slot(source) {
            self.active[i] = true;
        }
    }

    /// Sets the batching mode (known once the node's directories are).
    pub fn set_mode(&mut self, mode: AlignMode) {
        self.mode = mode;
    }

    /// The last block emitted (or the block it started after).
    pub fn emitted(&self) -> Option<u64> {
        self.emitted
    }

    /// What went wrong so far.
    pub fn report(&self) -> &AlignReport {
        &self.report
    }

    /// When the oldest waiting block completes by its grace timeout (its
    /// first line's time plus the grace), Unix ms.
    pub fn deadline_ms(&self) -> Option<i64> {
        let (_, pending) = self.pending.first_key_value()?;
        Some(pending.first_seen_ms.saturating_add(self.grace_ms))
    }

    /// The number of the oldest block waiting to complete.
    pub fn oldest_pending(&self) -> Option<u64> {
        self.pending.first_key_value().map(|(&number, _)| number)
    }

    /// Blocks waiting to complete.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Adds one line whose header is decoded here: only a whole envelope
    /// ([`envelope::decode_whole`]) can take its block's place; anything
    /// else is counted as a bad line.
    pub fn push_line(&mut self, source: Source, line: Bytes, now_ms: i64) {
        match envelope::decode_whole(&line) {
            Ok(env) => {
                let (number, time) = (env.block_number, env.block_time_ms);
                self.push(source, number, time, line, now_ms);
            }
            Err(error) => self.report.record(AlignIssue::BadLine {
                stream: source,
                error,
            }),
        }
    }

    /// Adds one line of `source` for `block_number` (block time `time_ms`),
    /// received at `now_ms`.
    pub fn push(
        &mut self,
        source: Source,
        block_number: u64,
        time_ms: i64,
        line: Bytes,
        now_ms: i64,
    ) {
        let Some(i) = slot(source) else {
            return;
        };
        self.active[i] = true;
        let last = self.last_seen[i];
        if self.mode == AlignMode::ByBlock && last == Some(block_number) {
            self.report.record(AlignIssue::Duplicate {
                stream: source,
                block: block_number,
            });
            return;
        }
        if self.emitted.is_some_and(|emitted| block_number <= emitted) {
            self.report.record(AlignIssue::Late {
                stream: source,
                block: block_number,
            });
            return;
        }
        match last {
            Some(last) if block_number < last => self.report.record(AlignIssue::OutOfOrder {
                stream: source,
                block: block_number,
                last,
            }),
            _ => self.last_seen[i] = Some(block_number),
        }
        let pending = self.pending.entry(block_number).or_insert_with(|| Pending {
            time_ms,
            first_seen_ms: now_ms,
            seen: [false; 5],
            lines: BlockLines::default(),
        });
        if self.mode == AlignMode::ByBlock && pending.seen[i] {
            self.report.record(AlignIssue::Duplicate {
                stream: source,
                block: block_number,
            });
            return;
        }
        pending.seen[i] = true;
        let lines = match source {
            Source::OrderStatuses => &mut pending.lines.order_statuses,
            Source::RawBookDiffs => &mut pending.lines.raw_book_diffs,
            Source::Fills => &mut pending.lines.fills,
            Source::MiscEvents => &mut pending.lines.misc_events,
            Source::TwapStatuses => &mut pending.lines.twap_statuses,
            Source::Blocks | Source::OrderbookSnapshots => return,
        };
        lines.push(line);
    }

    /// The next complete block, if the oldest pending one is complete (every
    /// active source is done with it, or its grace has passed at `now_ms`).
    pub fn pop(&mut self, now_ms: i64) -> Option<Block> {
        let (&number, pending) = self.pending.first_key_value()?;
        let done = |i: usize| {
            !self.active[i]
                || number < self.expected_from[i]
                || self.last_seen[i].is_some_and(|last| last > number)
                || (self.mode == AlignMode::ByBlock && pending.seen[i])
        };
        let complete = (0..5).all(done);
        let expired = now_ms.saturating_sub(pending.first_seen_ms) >= self.grace_ms;
        if !complete && !expired {
            return None;
        }
        if !complete {
            self.report.grace_completions += 1;
        }
        self.take_first()
    }

    /// The next pending block regardless of completeness (end of input).
    pub fn finish(&mut self) -> Option<Block> {
        self.take_first()
    }

    fn take_first(&mut self) -> Option<Block> {
        let (number, pending) = self.pending.pop_first()?;
        if self.mode == AlignMode::ByBlock
            && let Some(emitted) = self.emitted
            && number > emitted + 1
        {
            self.report.record(AlignIssue::Gap {
                from: emitted + 1,
                to: number - 1,
            });
        }
        self.emitted = Some(number);
        Some(Block {
            number,
            time_ms: pending.time_ms,
            lines: pending.lines,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(block: u64, tag: &str) -> Bytes {
        Bytes::from(format!(
            r#"{{"local_time":"2026-01-01T00:00:00.5","block_time":"2026-01-01T00:00:0{}","block_number":{block},"events":["{tag}"]}}"#,
            block % 10
        ))
    }

    const BOOK: [Source; 2] = [Source::OrderStatuses, Source::RawBookDiffs];

    #[test]
    fn by_block_emits_once_every_source_delivered() {
        let mut aligner = Aligner::new(AlignMode::ByBlock, &BOOK, 10_000);
        aligner.push_line(Source::OrderStatuses, line(1, "s1"), 0);
        assert!(aligner.pop(0).is_none());
        aligner.push_line(Source::RawBookDiffs, line(1, "d1"), 0);
        let block = aligner.pop(0).unwrap();
        assert_eq!(block.number, 1);
        assert_eq!(block.time_ms, 1_767_225_601_000);
        assert_eq!(block.lines.order_statuses.len(), 1);
        assert_eq!(block.lines.raw_book_diffs.len(), 1);
        assert!(aligner.pop(0).is_none());
    }

    #[test]
    fn streaming_waits_until_every_source_moved_past() {
        let mut aligner = Aligner::new(AlignMode::Streaming, &BOOK, 10_000);
        aligner.push_line(Source::OrderStatuses, line(5, "a"), 0);
        aligner.push_line(Source::OrderStatuses, line(5, "b"), 0);
        aligner.push_line(Source::RawBookDiffs, line(5, "c"), 0);
        aligner.push_line(Source::OrderStatuses, line(6, "d"), 0);
        assert!(aligner.pop(0).is_none(), "diffs may still write block 5");
        aligner.push_line(Source::RawBookDiffs, line(7, "e"), 0);
        let block = aligner.pop(0).unwrap();
        assert_eq!(block.number, 5);
        assert_eq!(block.lines.order_statuses.len(), 2);
        assert!(aligner.pop(0).is_none(), "statuses may still write block 6");
        assert_eq!(aligner.report().gaps, 0);
    }

    #[test]
    fn grace_completes_a_block_a_source_never_finishes() {
        let mut aligner = Aligner::new(AlignMode::Streaming, &BOOK, 500);
        aligner.push_line(Source::OrderStatuses, line(5, "a"), 1_000);
        assert!(aligner.pop(1_499).is_none());
        assert_eq!(aligner.pop(1_500).unwrap().number, 5);
        assert_eq!(aligner.report().grace_completions, 1);
    }

    #[test]
    fn reports_duplicates_late_lines_out_of_order_and_gaps() {
        let mut aligner = Aligner::new(AlignMode::ByBlock, &BOOK, 10_000);
        for block in [1, 2] {
            aligner.push_line(Source::OrderStatuses, line(block, "s"), 0);
            aligner.push_line(Source::RawBookDiffs, line(block, "d"), 0);
        }
        aligner.push_line(Source::RawBookDiffs, line(2, "again"), 0);
        assert_eq!(aligner.pop(0).unwrap().number, 1);
        aligner.push_line(Source::OrderStatuses, line(1, "late"), 0);
        assert_eq!(aligner.pop(0).unwrap().number, 2);
        aligner.push_line(Source::OrderStatuses, line(6, "s"), 0);
        aligner.push_line(Source::OrderStatuses, line(5, "s"), 0);
        aligner.push_line(Source::RawBookDiffs, line(5, "d"), 0);
        aligner.push_line(Source::RawBookDiffs, line(6, "d"), 0);
        aligner.push_line(Source::Fills, Bytes::from_static(b"{oops"), 0);
        assert_eq!(aligner.pop(0).unwrap().number, 5);
        assert_eq!(aligner.pop(0).unwrap().number, 6);
        let report = aligner.report();
        assert_eq!(
            report.issues,
            [
                AlignIssue::Duplicate {
                    stream: Source::RawBookDiffs,
                    block: 2
                },
                AlignIssue::Late {
                    stream: Source::OrderStatuses,
                    block: 1
                },
                AlignIssue::OutOfOrder {
                    stream: Source::OrderStatuses,
                    block: 5,
                    last: 6
                },
                report.issues[3].clone(),
                AlignIssue::Gap { from: 3, to: 4 },
            ]
        );
        assert!(matches!(
            report.issues[3],
            AlignIssue::BadLine {
                stream: Source::Fills,
                ..
            }
        ));
        assert_eq!(
            (report.duplicates, report.late, report.out_of_order),
            (1, 1, 1)
        );
        assert_eq!(
            (report.gaps, report.missing_blocks, report.bad_lines),
            (1, 2, 1)
        );
    }

    #[test]
    fn a_stream_that_starts_later_is_not_waited_for_before_its_start() {
        let mut aligner =
            Aligner::new(AlignMode::ByBlock, &BOOK, 10_000).expecting(Source::OrderStatuses, 5);
        aligner.push_line(Source::RawBookDiffs, line(3, "d"), 0);
        aligner.push_line(Source::RawBookDiffs, line(4, "d"), 0);
        aligner.push_line(Source::RawBookDiffs, line(5, "d"), 0);
        assert_eq!(aligner.pop(0).unwrap().number, 3);
        assert_eq!(aligner.pop(0).unwrap().number, 4);
        assert!(aligner.pop(0).is_none(), "block 5 waits for the statuses");
        aligner.push_line(Source::OrderStatuses, line(5, "s"), 0);
        assert_eq!(aligner.pop(0).unwrap().number, 5);
    }

    #[test]
    fn finish_flushes_in_block_order() {
        let mut aligner = Aligner::new(AlignMode::Streaming, &BOOK, 10_000);
        aligner.push_line(Source::RawBookDiffs, line(9, "d"), 0);
        aligner.push_line(Source::OrderStatuses, line(8, "s"), 0);
        assert!(aligner.pop(0).is_none());
        assert_eq!(aligner.finish().unwrap().number, 8);
        assert_eq!(aligner.finish().unwrap().number, 9);
        assert!(aligner.finish().is_none());
    }
}
