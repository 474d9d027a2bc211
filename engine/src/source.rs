//! The block source: the node's event-stream files as complete blocks, in
//! block order. It finds how the node batched its files (by block or
//! streaming, from the directory names), seeks every feed to the first
//! block wanted, reads what the files hold, and aligns the lines of its
//! streams by block number ([`crate::align`]); a fold reads only the
//! streams it needs ([`crate::market::Needs::sources`]). The same source serves
//! a one-off replay of captured files and a server tailing a live node:
//!
//! - replay: [`BlockSource::read`] until it reads nothing, then
//!   [`BlockSource::finish`] flushes the last blocks;
//! - tail: read, pop the blocks complete so far ([`BlockSource::pop`], with
//!   the aligner's grace timeout), and when nothing is left, wait for a
//!   change to the files (or [`BlockSource::deadline_ms`]) and
//!   [`BlockSource::refresh`].
//!
//! A feed whose directory does not exist yet joins when it appears. With
//! [`SourceOptions::fills_from`], the fills feed starts earlier than the
//! others (the blocks before them carry fills only), which is how a candle
//! store resumes before the snapshot the books start from.
//!
//! Which node snapshot a fold starts from is chosen here too
//! ([`snapshot_before`]).

use bytes::Bytes;
use feeds::{Cursor, Feed, FeedError, Mode, SnapshotFile, Source, Start};

use crate::align::{AlignMode, AlignReport, Aligner};
use crate::block::Block;

/// Records read per feed per [`BlockSource::read`]: at mainnet's ~150 KB a
/// block over the streams the market folds, about 5 MB read ahead of the
/// fold (a catch-up keeps its file pages resident until they are folded).
pub const READ_BATCH: usize = 32;

/// Blocks a feed is read ahead of the last block the aligner emitted, at
/// most: past it the feed waits for the others. Without the bound, a feed
/// that starts far ahead of another (the order statuses at the snapshot's
/// height while the fills start hours earlier for the candles) would be
/// read to its end while the other catches up — every line of it held by
/// the aligner and its pages resident.
pub const READ_AHEAD: u64 = READ_BATCH as u64;

/// Where a [`BlockSource`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceOptions {
    /// First block to read (every feed but an earlier fills start).
    pub from_block: u64,
    /// Where the fills feed starts instead, when earlier than `from_block`.
    pub fills_from: Option<Start>,
    /// Last block to read (inclusive); later records are not read.
    pub to_block: Option<u64>,
    /// A block completes at the latest this long after its first line
    /// (`i64::MAX`: only when every stream moved past it, or at the end).
    pub grace_ms: i64,
}

impl SourceOptions {
    /// Every block from `from_block` on, completed only by the streams.
    pub fn from_block(from_block: u64) -> Self {
        Self {
            from_block,
            fills_from: None,
            to_block: None,
            grace_ms: i64::MAX,
        }
    }
}

struct Input {
    feed: Feed,
    source: Source,
    /// `None` while the feed's directory does not exist.
    cursor: Option<Cursor>,
    /// Past `to_block`: nothing more is read.
    done: bool,
    /// The feed's [`Feed::replacements`] as of the last read.
    replacements: u64,
    /// The block number of the last record read.
    last_block: Option<u64>,
    /// The last read of this feed took fewer records than it asked for:
    /// what its files hold now is read.
    drained: bool,
}

/// The node's files as blocks. See the module docs.
pub struct BlockSource {
    inputs: Vec<Input>,
    aligner: Aligner,
    mode: Option<AlignMode>,
    options: SourceOptions,
    bytes: u64,
    /// [`BlockSource::bytes`] at the last [`BlockSource::release_behind`].
    released_at: u64,
    /// Damaged compressed files met by reads and not taken yet.
    damage: Vec<FeedError>,
}

impl std::fmt::Debug for BlockSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSource")
            .field("mode", &self.mode)
            .field("options", &self.options)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl BlockSource {
    /// A source over `feeds` (any of the event streams; others are
    /// ignored), positioned as `options` says.
    ///
    /// # Errors
    /// [`FeedError`] when a feed cannot be positioned.
    pub fn new(feeds: Vec<Feed>, options: SourceOptions) -> Result<Self, FeedError> {
        let inputs: Vec<Input> = feeds
            .into_iter()
            .filter(|feed| Source::EVENT_STREAMS.contains(&feed.source()))
            .map(|feed| Input {
                source: feed.source(),
                replacements: feed.replacements(),
                feed,
                cursor: None,
                done: false,
                last_block: None,
                drained: false,
            })
            .collect();
        let sources: Vec<Source> = inputs.iter().map(|input| input.source).collect();
        let first = options
            .fills_from
            .map_or(options.from_block, |_| options.from_block.min(1));
        // A stream is waited for once its feed has files (see
        // `join_new_feeds`): a node that writes no TWAP statuses, or a
        // capture of fills alone, holds no block up.
        let mut aligner = Aligner::new(AlignMode::ByBlock, &[], options.grace_ms);
        if let Some(before) = first.checked_sub(1) {
            aligner = aligner.starting_after(before);
        }
        if options.fills_from.is_some() {
            for &source in &sources {
                if source != Source::Fills {
                    aligner = aligner.expecting(source, options.from_block);
                }
            }
        }
        let mut source = Self {
            inputs,
            aligner,
            mode: None,
            options,
            bytes: 0,
            released_at: 0,
            damage: Vec::new(),
        };
        source.join_new_feeds()?;
        Ok(source)
    }

    /// How the node batches its files (`None` until a feed's directory
    /// exists).
    pub fn mode(&self) -> Option<AlignMode> {
        self.mode
    }

    /// Whether any event-stream feed has files (or a directory for them).
    pub fn has_files(&self) -> bool {
        self.inputs.iter().any(|input| input.cursor.is_some())
    }

    /// Whether the feed of `source` is read.
    pub fn reads(&self, source: Source) -> bool {
        self.inputs
            .iter()
            .any(|input| input.source == source && input.cursor.is_some())
    }

    /// The first block number in the files, over every feed read.
    ///
    /// # Errors
    /// [`FeedError`] when a feed cannot be read.
    pub fn first_block(&self) -> Result<Option<u64>, FeedError> {
        let mut first: Option<u64> = None;
        for input in &self.inputs {
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

    /// Reads what the files hold now, up to [`READ_BATCH`] records per feed,
    /// into the aligner; returns how many records were read (0: nothing new,
    /// or the end of captured files). A feed more than [`READ_AHEAD`] blocks
    /// ahead of the last block emitted is read only when no other has lines.
    ///
    /// # Errors
    /// [`FeedError`] when a file cannot be read (a pruned file under the
    /// cursor, for example).
    pub fn read(&mut self, now_ms: i64) -> Result<usize, FeedError> {
        let emitted = self.aligner.emitted();
        let mut read = 0;
        let mut ahead = Vec::new();
        for at in 0..self.inputs.len() {
            let input = &self.inputs[at];
            if let (Some(last), Some(emitted)) = (input.last_block, emitted)
                && last > emitted.saturating_add(READ_AHEAD)
            {
                ahead.push(at);
                continue;
            }
            read += self.read_input(at, emitted, now_ms)?;
        }
        // Only the feeds ahead have lines left: read them, so that `0`
        // still means nothing is left anywhere.
        if read == 0 {
            for at in ahead {
                read += self.read_input(at, emitted, now_ms)?;
            }
        }
        Ok(read)
    }

    /// Reads up to [`READ_BATCH`] records of input `at` into the aligner.
    fn read_input(
        &mut self,
        at: usize,
        emitted: Option<u64>,
        now_ms: i64,
    ) -> Result<usize, FeedError> {
        let input = &mut self.inputs[at];
        if input.done {
            return Ok(0);
        }
        let Some(cursor) = input.cursor.as_mut() else {
            return Ok(0);
        };
        // A file of this feed was replaced under its name: what the
        // cursor's offset points at in the new one is not what it read
        // up to. Read the feed again after the last block emitted (the
        // aligner drops what it already holds as duplicates).
        let replacements = input.feed.replacements();
        if replacements != input.replacements {
            input.replacements = replacements;
            *cursor = input
                .feed
                .seek(Start::BlockNumber(emitted.map_or(0, |n| n + 1)))?;
        }
        let records = match input.feed.read(cursor, READ_BATCH) {
            Ok(records) => {
                input.drained = records.len() < READ_BATCH;
                records
            }
            // The cursor is past the damaged file's sound lines: the
            // feed goes on with the next file; the caller decides
            // what the damage means for it.
            Err(damage @ FeedError::Damaged { .. }) => {
                self.damage.push(damage);
                return Ok(0);
            }
            Err(error) => return Err(error),
        };
        let mut read = 0;
        for record in records {
            if self
                .options
                .to_block
                .is_some_and(|to| record.block_number.is_some_and(|n| n > to))
            {
                input.done = true;
                break;
            }
            read += 1;
            self.bytes += record.data.len() as u64 + 1;
            if record.block_number.is_some() {
                input.last_block = record.block_number;
            }
            match (
                record.whole_envelope,
                record.block_number,
                record.timestamp_ms,
            ) {
                // Checked whole by the feed already: no second decode.
                (true, Some(number), Some(time_ms)) => {
                    self.aligner
                        .push(input.source, number, time_ms, record.data, now_ms);
                }
                _ => self.aligner.push_line(input.source, record.data, now_ms),
            }
        }
        Ok(read)
    }

    /// The files in which a read met its first line that is not a whole
    /// block envelope since the last call, once each (see
    /// [`feeds::RefusedLine`]): such a line never takes its block's place;
    /// the aligner counts it as a bad line.
    pub fn take_refused(&mut self) -> Vec<feeds::RefusedLine> {
        self.inputs
            .iter()
            .flat_map(|input| input.feed.take_refused())
            .collect()
    }

    /// The damaged compressed files reads met since the last call, each a
    /// [`FeedError::Damaged`] naming the file and where it stops. The
    /// lines before the damage were read; the reads went on with the next
    /// file.
    pub fn take_damage(&mut self) -> Vec<FeedError> {
        std::mem::take(&mut self.damage)
    }

    /// How many event-stream feeds are read.
    pub fn feeds_read(&self) -> usize {
        self.inputs
            .iter()
            .filter(|input| input.cursor.is_some())
            .count()
    }

    /// Adds one line as if read from `source` (tests and tools that feed
    /// lines by hand).
    pub fn push_line(&mut self, source: Source, line: Bytes, now_ms: i64) {
        self.bytes += line.len() as u64 + 1;
        self.aligner.push_line(source, line, now_ms);
    }

    /// The next complete block, if any (complete: every stream moved past
    /// it, or its grace passed at `now_ms`).
    pub fn pop(&mut self, now_ms: i64) -> Option<Block> {
        // The grace is for a stream the node has not written yet, not for
        // one this source has not read yet: while a feed behind the oldest
        // waiting block still has lines to read (the fills hours before the
        // snapshot, for the candles, say), that block does not complete by
        // time, or the lines read after it would be dropped as late.
        let oldest = self.aligner.oldest_pending();
        let behind = self.inputs.iter().any(|input| {
            input.cursor.is_some()
                && !input.done
                && !input.drained
                && input
                    .last_block
                    .is_none_or(|last| oldest.is_some_and(|oldest| last < oldest))
        });
        self.aligner.pop(if behind { i64::MIN } else { now_ms })
    }

    /// The next pending block whether complete or not (end of input).
    pub fn finish(&mut self) -> Option<Block> {
        self.aligner.finish()
    }

    /// The next block for a reader that reads without a clock (a replay,
    /// an import): at the end of its input (`at_end`) any pending one
    /// ([`BlockSource::finish`]), else the next complete one
    /// ([`BlockSource::pop`], no grace).
    pub fn next_block(&mut self, at_end: bool) -> Option<Block> {
        if at_end { self.finish() } else { self.pop(0) }
    }

    /// Looks for new data in every feed: the growth of the newest files
    /// only ([`Feed::refresh_grown`], what a write notification calls for),
    /// or, with `relist`, the directories listed again for new files and
    /// for feeds whose directory appeared ([`Feed::refresh`]). `true` when
    /// new records became readable.
    ///
    /// # Errors
    /// [`FeedError`] when a directory or file cannot be read.
    pub fn refresh(&mut self, relist: bool) -> Result<bool, FeedError> {
        let mut grew = false;
        for input in &self.inputs {
            grew |= if relist {
                input.feed.refresh()?
            } else {
                input.feed.refresh_grown()?
            };
        }
        if relist {
            grew |= self.join_new_feeds()?;
        }
        Ok(grew)
    }

    /// Looks for growth of the newest file of the sources `written` picks
    /// (a change notification named them); returns whether any grew.
    ///
    /// # Errors
    /// As [`BlockSource::refresh`].
    pub fn refresh_grown(&mut self, written: impl Fn(Source) -> bool) -> Result<bool, FeedError> {
        let mut grew = false;
        for input in self.inputs.iter().filter(|input| written(input.source)) {
            grew |= input.feed.refresh_grown()?;
        }
        Ok(grew)
    }

    /// When the oldest waiting block completes by its grace timeout, Unix
    /// ms (`None`: no block waits).
    pub fn deadline_ms(&self) -> Option<i64> {
        self.aligner.deadline_ms()
    }

    /// After a read failure (a file pruned under the cursor): every feed
    /// starts again after the last block handed out, which the aligner
    /// drops if it comes again.
    ///
    /// # Errors
    /// [`FeedError`] when a feed cannot be positioned.
    pub fn reposition(&mut self, after: u64) -> Result<(), FeedError> {
        for input in &mut self.inputs {
            if input.cursor.is_some() {
                input.cursor = Some(input.feed.seek(Start::BlockNumber(after + 1))?);
                input.last_block = None;
            }
        }
        Ok(())
    }

    /// Bytes of the files read so far: every record and its `\n` (a feed
    /// exposes only complete lines).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Once [`feeds::RELEASE_EVERY_READ`] more bytes were read since the
    /// last time, lets go of the mapped pages its feeds have read but each
    /// newest file's [`feeds::RESIDENT_TAIL`] (shared with every clone of
    /// the feeds), so that a reader catching up or replaying holds about
    /// that much of the files resident, not all it read. Whether it did.
    pub fn release_behind(&mut self) -> bool {
        if self.bytes < self.released_at + feeds::RELEASE_EVERY_READ {
            return false;
        }
        for input in &self.inputs {
            input.feed.release_read(feeds::RESIDENT_TAIL);
        }
        self.released_at = self.bytes;
        true
    }

    /// Blocks waiting to complete.
    pub fn pending(&self) -> usize {
        self.aligner.pending()
    }

    /// What the aligner worked around so far.
    pub fn report(&self) -> &AlignReport {
        self.aligner.report()
    }

    /// Positions the feeds whose directory exists now but had no cursor;
    /// `true` when one joined. The first directory found decides the mode.
    fn join_new_feeds(&mut self) -> Result<bool, FeedError> {
        let mut joined = false;
        for input in &mut self.inputs {
            if input.cursor.is_some() {
                continue;
            }
            let Some(dir) = input.feed.source_dir_name() else {
                continue;
            };
            if self.mode.is_none() {
                let mode = match input.source.mode_of_dir(&dir) {
                    Some(Mode::Streaming) => AlignMode::Streaming,
                    _ => AlignMode::ByBlock,
                };
                self.mode = Some(mode);
                self.aligner.set_mode(mode);
            }
            let start = match (input.source, self.options.fills_from) {
                (Source::Fills, Some(start)) => start,
                _ => Start::BlockNumber(self.options.from_block),
            };
            input.cursor = Some(input.feed.seek(start)?);
            input.last_block = None;
            self.aligner.activate(input.source);
            joined = true;
        }
        Ok(joined)
    }
}

/// The first block from which every feed of `feeds` that has lines holds
/// them: the latest of their first blocks (`None`: no feed has a line). A
/// fold that resumes after block `H` needs this to be at most `H + 1`.
///
/// # Errors
/// [`FeedError`] when a feed cannot be read.
pub fn common_first_block(feeds: &[Feed]) -> Result<Option<u64>, FeedError> {
    let mut latest: Option<u64> = None;
    for feed in feeds {
        if feed.source_dir_name().is_none() {
            continue;
        }
        let mut cursor = feed.seek(Start::BlockNumber(0))?;
        if let Some(first) = feed
            .read(&mut cursor, 1)?
            .first()
            .and_then(|record| record.block_number)
        {
            latest = Some(latest.map_or(first, |latest| latest.max(first)));
        }
    }
    Ok(latest)
}

/// The snapshot a fold of blocks from `first_block` on starts from: the
/// newest one below it; with no first block (nothing written yet), the
/// newest of all.
pub fn snapshot_before(files: &[SnapshotFile], first_block: Option<u64>) -> Option<&SnapshotFile> {
    match first_block {
        Some(first) => files.iter().rev().find(|file| file.height < first),
        None => files.last(),
    }
}
