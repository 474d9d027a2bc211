//! Reading one source as an ordered sequence of records: positioning
//! ([`Feed::seek`]), reading and tailing ([`Feed::read`]), discovering new
//! data ([`Feed::refresh`]) and measuring lag ([`Feed::head`], [`Feed::lag`]).
//!
//! # Model
//!
//! A feed is the ordered list of a source's files (hourly, or `replica_cmds`
//! by height), each exposed as its complete newline-terminated prefix. A
//! [`Cursor`] is a committed position: a file and a byte offset that is
//! always the start of a line. [`Feed::read`] returns whole lines after the
//! cursor and moves it file by file: a file is read to its last complete
//! line before the next file is entered, and nothing is ever skipped by
//! seeking to an end.
//!
//! Nothing changes under a reader until [`Feed::refresh`] runs. Refresh
//! re-lists the directory (new hours, new files) and re-stats the newest
//! files (growth); it is the only call that does directory or metadata I/O,
//! is cheap when nothing changed, and is safe to call every few
//! milliseconds from a timer, from a [`crate::Watcher`] callback, or both.
//! Polling alone is enough: watcher events are only wake-up hints.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::segment::RESIDENT_TAIL;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::FeedError;
use crate::index::{
    Header, Target, envelope_header, first_line_where, line_at, line_start_containing,
    replica_time_ms,
};
use crate::layout::{self, SegmentKey, SourceDir};
use crate::legacy::{self, LineFormat};
use crate::segment::Segment;
use crate::source::Source;

/// How often [`Feed::refresh`] re-lists every date directory (to notice
/// pruned files); in between only the newest dates are listed.
const FULL_LIST_EVERY: Duration = Duration::from_secs(1);

/// Bytes of node files a reader catching up (the server's engine) or
/// replaying reads between two [`Feed::release_read`]s: it holds about this
/// much of them resident, not all it read.
pub const RELEASE_EVERY_READ: u64 = 4 << 20;

/// A reader of a decoded compressed file lets go of the pages behind it
/// each time it has read this much more of it, so that its resident memory
/// does not grow with the file.
const RELEASE_BEHIND: u64 = 64 * 1024 * 1024;

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Start {
    /// The first record with `block_number >= n` (inclusive).
    BlockNumber(u64),
    /// The first record whose block time in Unix ms is `>= t` (inclusive).
    Timestamp(i64),
    /// Just past the last complete record: only records written from now on.
    Tail,
}

/// A committed read position in one feed.
///
/// When a [`Start`] lies beyond the newest record, the cursor sits at the
/// tail and remembers the target: later records before it are skipped, so a
/// read starts exactly at the requested block or time once it is written.
#[derive(Debug, Clone)]
pub struct Cursor {
    source: Source,
    at: Option<(SegmentKey, u64)>,
    target: Option<Target>,
    /// The decoded view of the compressed file the cursor is in, held while
    /// the cursor is there (see [`Segment::live`]).
    pin: Option<Arc<Segment>>,
    /// The damaged compressed file whose damage this cursor reported.
    reported: Option<SegmentKey>,
    /// How far the pinned view's pages were let go behind the cursor.
    released: u64,
}

impl PartialEq for Cursor {
    fn eq(&self, other: &Self) -> bool {
        (self.source, &self.at, self.target) == (other.source, &other.at, other.target)
    }
}

impl Eq for Cursor {}

impl std::hash::Hash for Cursor {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.source, &self.at, self.target).hash(state);
    }
}

impl Cursor {
    /// The feed this cursor belongs to.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The file the cursor is in (`None` before the feed's first file).
    pub fn segment(&self) -> Option<&SegmentKey> {
        self.at.as_ref().map(|(key, _)| key)
    }

    /// Byte offset of the next line in [`Cursor::segment`].
    pub fn offset(&self) -> u64 {
        self.at.as_ref().map_or(0, |(_, offset)| *offset)
    }

    /// The block or time the cursor still waits for, if it was positioned
    /// beyond the newest record.
    pub fn pending_target(&self) -> Option<Target> {
        self.target
    }
}

/// One record: a complete line of a node file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The block height: the envelope's `block_number`, or for `replica_cmds`
    /// the file's first height plus the line index. `None` when the line does
    /// not decode.
    pub block_number: Option<u64>,
    /// The block time in Unix ms (`block_time`, or `abci_block.time`).
    /// `None` when the line does not decode.
    pub timestamp_ms: Option<i64>,
    /// The exact line without its `\n`, sliced from the file's mapping.
    pub data: Bytes,
    /// Whether `data` was found a whole block envelope
    /// ([`crate::envelope::decode_whole`]) and the header above read from
    /// it: a reader need not decode it again to know that. False for the
    /// older formats' lines, handed out inside an envelope made here.
    pub whole_envelope: bool,
}

/// One source's files as an ordered, tailable run of records.
///
/// Cloning is cheap and clones share state; `Feed` is `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    source: Source,
    data_dir: PathBuf,
    /// The one directory this feed reads, when its opener chose it
    /// ([`Feed::open_dir`]); else the first of [`Source::dir_names`] found.
    only_dir: Option<&'static str>,
    state: RwLock<Arc<State>>,
    refresh: Mutex<RefreshState>,
    /// Refreshes that made new complete records readable, whoever ran them.
    readable_generation: AtomicU64,
    /// Files found shorter than what was already read from them.
    shrinks: AtomicU64,
    /// Files found replaced under their name (another inode).
    replacements: AtomicU64,
    /// Files with lines refused as not whole envelopes.
    refused: Mutex<Refusals>,
}

/// The files in which a read refused a line ([`RefusedLine`]), each noted
/// once, whichever reader met it first.
#[derive(Debug, Default)]
struct Refusals {
    files: std::collections::HashSet<PathBuf>,
    fresh: Vec<RefusedLine>,
}

/// The first line of a file that a read refused: not a whole block
/// envelope ([`crate::envelope::decode_whole`]) — cut short, pieced
/// together, damaged or not UTF-8. It is handed out without a block number
/// (so no reader takes it for a block), and the file's later refused lines
/// are not noted again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedLine {
    /// The file.
    pub path: PathBuf,
    /// Where the line starts in it (in its decompressed bytes for a
    /// compressed file).
    pub offset: u64,
    /// Why it was refused.
    pub reason: String,
}

#[derive(Debug, Default)]
struct RefreshState {
    last_full_list: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    dir: Option<SourceDir>,
    segments: Vec<Arc<Segment>>,
    /// Header of each segment's first complete line (default when empty).
    firsts: Vec<Header>,
    /// Sum of the complete lengths of the segments before each one.
    bases: Vec<u64>,
    total: u64,
}

impl State {
    fn locate(&self, key: &SegmentKey) -> Result<usize, usize> {
        self.segments.binary_search_by(|s| s.key().cmp(key))
    }
}

impl Feed {
    /// Opens a source under `data_dir` (the node root is `data_dir/hl/data`
    /// when that exists, else `data_dir`) and maps what is there. An absent
    /// source is an empty feed that [`Feed::refresh`] picks up once the node
    /// creates it.
    ///
    /// # Errors
    /// [`FeedError::NotALineFeed`] for [`Source::OrderbookSnapshots`] (see
    /// [`crate::Snapshots`]); [`FeedError::Io`] or [`FeedError::Truncated`]
    /// when existing files cannot be listed or mapped.
    pub fn open(data_dir: &Path, source: Source) -> Result<Feed, FeedError> {
        Feed::open_in(data_dir, source, None)
    }

    /// Opens `source` reading only its directory `dir_name` (one of
    /// [`Source::dir_names`]: `node_fills`, say, in an archive that also
    /// holds `node_fills_by_block`), as [`Feed::open`] otherwise.
    ///
    /// # Errors
    /// [`FeedError::UnknownDirectory`] when `dir_name` is not one of the
    /// source's; as [`Feed::open`] otherwise.
    pub fn open_dir(data_dir: &Path, source: Source, dir_name: &str) -> Result<Feed, FeedError> {
        let Some(&name) = source.dir_names().iter().find(|n| **n == dir_name) else {
            return Err(FeedError::UnknownDirectory {
                feed: source.feed_id(),
                dir: dir_name.to_owned(),
            });
        };
        Feed::open_in(data_dir, source, Some(name))
    }

    /// A line feed of `source`, reading `only_dir` when given, mapped.
    fn open_in(
        data_dir: &Path,
        source: Source,
        only_dir: Option<&'static str>,
    ) -> Result<Feed, FeedError> {
        if !source.is_line_feed() {
            return Err(FeedError::NotALineFeed {
                feed: source.feed_id(),
            });
        }
        let feed = Feed {
            inner: Arc::new(Inner {
                source,
                data_dir: data_dir.to_path_buf(),
                only_dir,
                state: RwLock::new(Arc::new(State::default())),
                refresh: Mutex::new(RefreshState::default()),
                readable_generation: AtomicU64::new(0),
                shrinks: AtomicU64::new(0),
                replacements: AtomicU64::new(0),
                refused: Mutex::new(Refusals::default()),
            }),
        };
        feed.refresh()?;
        Ok(feed)
    }

    /// The source this feed reads.
    pub fn source(&self) -> Source {
        self.inner.source
    }

    /// The directory in use, e.g. `node_fills_by_block` (`None` while the
    /// source does not exist yet).
    pub fn source_dir_name(&self) -> Option<String> {
        self.state().dir.as_ref().map(|d| d.name.to_owned())
    }

    /// The files currently known, in read order.
    pub fn segments(&self) -> Vec<(SegmentKey, PathBuf, u64)> {
        self.state()
            .segments
            .iter()
            .map(|s| (s.key().clone(), s.path().to_path_buf(), s.complete_len()))
            .collect()
    }

    fn state(&self) -> Arc<State> {
        self.inner.state.read().clone()
    }

    /// Lets go of this process's resident pages of the feed's files except
    /// the newest file's last `keep` bytes (see [`Segment::release_below`]):
    /// pages read once stay mapped otherwise, so a reader that went through
    /// an hour of node output would show all of it in its resident memory,
    /// though the kernel holds it in the page cache either way. The work (a
    /// walk of the mappings' page tables) is done on the reaper thread
    /// (`crate::reaper`), never in the caller's.
    pub fn release_read(&self, keep: u64) {
        let state = self.state();
        let newest = state.segments.len().saturating_sub(1);
        let jobs = state
            .segments
            .iter()
            .enumerate()
            .map(|(at, segment)| {
                // A compressed hour's lines are read from its decoded view:
                // those are the pages to let go of.
                let read = segment
                    .materialized()
                    .unwrap_or_else(|| Arc::clone(segment));
                let below = if at == newest {
                    read.complete_len().saturating_sub(keep)
                } else {
                    read.complete_len()
                };
                (read, below)
            })
            .filter(|(_, below)| *below > 0)
            .collect();
        crate::reaper::release(jobs);
    }

    /// The files whose first refused line was met since the last call,
    /// once each for the life of the feed (see [`RefusedLine`]).
    pub fn take_refused(&self) -> Vec<RefusedLine> {
        std::mem::take(&mut self.inner.refused.lock().fresh)
    }

    /// Notes a refused line of `segment` at `offset` unless its file has
    /// one noted.
    fn refuse(&self, segment: &Segment, offset: u64, line: &[u8]) {
        let mut refused = self.inner.refused.lock();
        if refused.files.contains(segment.path()) {
            return;
        }
        refused.files.insert(segment.path().to_path_buf());
        let reason = crate::envelope::decode_whole(line)
            .err()
            .map_or_else(|| "not a block envelope".to_owned(), |e| e.to_string());
        refused.fresh.push(RefusedLine {
            path: segment.path().to_path_buf(),
            offset,
            reason,
        });
    }

    /// How many times a file of this feed was found replaced under its name
    /// (another file renamed over it, or rotated: a new inode, the open one
    /// left behind); each was then read anew from its start.
    pub fn replacements(&self) -> u64 {
        self.inner.replacements.load(Ordering::Acquire)
    }

    /// How many times a file of this feed was found shorter than what had
    /// been read from it (each was then read anew).
    pub fn shrinks(&self) -> u64 {
        self.inner.shrinks.load(Ordering::Acquire)
    }

    /// Looks for new data: the source directory if it was absent, new files
    /// (a new hour, a new `replica_cmds` file) and growth of the newest
    /// files. Returns `true` when new complete records became readable.
    ///
    /// After a new file appears, the file before it is re-stat'ed in the same
    /// call, so whatever the node wrote to an hour before opening the next is
    /// readable before any reader moves on. Files that disappear (pruned) are
    /// dropped, releasing their mappings once no record references them.
    ///
    /// # Errors
    /// [`FeedError::Io`] when a directory or file cannot be read. A file
    /// that shrank is not an error: it is counted ([`Feed::shrinks`]) and
    /// read anew; nor is one replaced under its name
    /// ([`Feed::replacements`]).
    pub fn refresh(&self) -> Result<bool, FeedError> {
        let mut guard = self.inner.refresh.lock();
        let source = self.inner.source;
        let old = self.state();
        let dir = if let Some(dir) = &old.dir {
            dir.clone()
        } else {
            let root = layout::node_root(&self.inner.data_dir);
            let found = match self.inner.only_dir {
                Some(name) => {
                    let path = root.join(name);
                    path.is_dir().then_some(SourceDir { name, path })
                }
                None => layout::find_source_dir(&root, source),
            };
            let Some(dir) = found else {
                return Ok(false);
            };
            dir
        };
        let full = old.dir.is_none()
            || guard
                .last_full_list
                .is_none_or(|t| t.elapsed() >= FULL_LIST_EVERY);
        let min_date = if full {
            None
        } else {
            old.segments.last().and_then(|s| match s.key() {
                SegmentKey::Hourly { date, .. } => Some(*date),
                SegmentKey::Replica { .. } => None,
            })
        };
        let listed = layout::list_segments(&dir.path, source, min_date)?;
        if full {
            guard.last_full_list = Some(Instant::now());
        }

        // Merge the listing with the known segments, reusing their views.
        let mut segments: Vec<Arc<Segment>> = Vec::with_capacity(listed.len() + 1);
        if let Some(min) = min_date {
            segments.extend(
                old.segments
                    .iter()
                    .filter(|s| matches!(s.key(), SegmentKey::Hourly { date, .. } if *date < min))
                    .cloned(),
            );
        }
        let mut set_changed = false;
        for file in listed {
            if let Ok(i) = old.locate(&file.key) {
                segments.push(old.segments[i].clone());
            } else {
                set_changed = true;
                segments.push(Arc::new(match file.codec {
                    Some(codec) => Segment::compressed(file.key, file.path, codec),
                    None => Segment::new(file.key, file.path, source == Source::Blocks),
                }));
            }
        }
        set_changed |= segments.len() != old.segments.len();

        // Re-stat the previously newest segment and everything after it.
        let first_to_check = old
            .segments
            .last()
            .map_or(0, |last| segments.partition_point(|s| s.key() < last.key()));
        let mut readable = false;
        let mut grew = false;
        for slot in segments.iter_mut().skip(first_to_check) {
            // Another file under the same name: the open one is the old
            // file, which nobody writes any more. Read the new one from its
            // start (readers inside the old one are told by the count).
            if slot.replaced_on_disk()? {
                self.inner.replacements.fetch_add(1, Ordering::AcqRel);
                let fresh = Segment::new(
                    slot.key().clone(),
                    slot.path().to_path_buf(),
                    source == Source::Blocks,
                );
                let fresh = match fresh.grow(fresh.current_len()?)? {
                    Some(grown) => grown,
                    None => fresh,
                };
                readable = true;
                grew = true;
                *slot = Arc::new(fresh);
                continue;
            }
            let len = match slot.current_len() {
                Ok(len) => len,
                // Removed between listing and stat: the next refresh drops it.
                Err(FeedError::Io {
                    kind: std::io::ErrorKind::NotFound,
                    ..
                }) => continue,
                Err(error) => return Err(error),
            };
            match slot.grow(len) {
                Ok(Some(next)) => {
                    // A compressed file (new, or of a new size) holds lines
                    // nobody read yet, though none is decoded.
                    readable |= next.complete_len() != slot.complete_len() || next.is_dormant();
                    grew = true;
                    *slot = Arc::new(next);
                }
                Ok(None) => {}
                // Rewritten under us: the node never does this, an operator
                // or an attacker might. Views handed out earlier read zeros
                // past the new end instead of faulting; the file is read
                // anew from its start (readers inside it move on or see a
                // broken line, which they skip and count).
                Err(FeedError::Truncated { now, .. }) => {
                    slot.defuse_past(now);
                    self.inner.shrinks.fetch_add(1, Ordering::AcqRel);
                    let fresh = Segment::new(
                        slot.key().clone(),
                        slot.path().to_path_buf(),
                        source == Source::Blocks,
                    );
                    let fresh = match fresh.grow(now)? {
                        Some(grown) => grown,
                        None => fresh,
                    };
                    readable = true;
                    grew = true;
                    *slot = Arc::new(fresh);
                }
                Err(error) => return Err(error),
            }
        }
        if !set_changed && !grew && old.dir.is_some() {
            return Ok(false);
        }
        // Only the newest file is appended to; the others let go of their
        // descriptors and reservations (they were re-stat'ed above one last
        // time).
        if let Some((_, older)) = segments.split_last_mut() {
            for slot in older.iter_mut().filter(|slot| slot.is_open()) {
                *slot = Arc::new(slot.sealed()?);
            }
        }

        let format = LineFormat::of_dir(dir.name);
        let mut firsts = Vec::with_capacity(segments.len());
        let mut bases = Vec::with_capacity(segments.len());
        let mut total = 0u64;
        for segment in &segments {
            let cached = old
                .locate(segment.key())
                .ok()
                .map(|i| old.firsts[i])
                .filter(|h| *h != Header::default());
            firsts.push(cached.unwrap_or_else(|| first_header(format, segment)));
            bases.push(total);
            total += segment.weight();
        }
        // Files gone from the listing: their last references here are let
        // go on the reaper thread (see crate::reaper).
        let removed: Vec<Arc<Segment>> = old
            .segments
            .iter()
            .filter(|s| segments.iter().all(|n| n.key() != s.key()))
            .cloned()
            .collect();
        *self.inner.state.write() = Arc::new(State {
            dir: Some(dir),
            segments,
            firsts,
            bases,
            total,
        });
        drop(old);
        crate::reaper::reap(removed);
        if readable {
            self.inner
                .readable_generation
                .fetch_add(1, Ordering::Release);
        }
        Ok(readable)
    }

    /// Looks for growth of the newest file only, without listing any
    /// directory: the cheap refresh for a change notification that says a
    /// file was written to (the node appends to its newest files). New
    /// files are found by [`Feed::refresh`]. Returns `true` when new complete
    /// records became readable.
    ///
    /// # Errors
    /// As [`Feed::refresh`].
    pub fn refresh_grown(&self) -> Result<bool, FeedError> {
        let guard = self.inner.refresh.lock();
        let old = self.state();
        let Some(last) = old.segments.last() else {
            drop(guard);
            return self.refresh();
        };
        let len = match last.current_len() {
            Ok(len) => len,
            Err(FeedError::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }) => return Ok(false),
            Err(error) => return Err(error),
        };
        let next = match last.grow(len) {
            Ok(Some(next)) => next,
            Ok(None) => return Ok(false),
            // A shrunken file is handled by the full refresh.
            Err(FeedError::Truncated { .. }) => {
                drop(guard);
                return self.refresh();
            }
            Err(error) => return Err(error),
        };
        let readable = next.complete_len() != last.complete_len();
        let mut segments = old.segments.clone();
        let at = segments.len() - 1;
        let total = old.bases[at] + next.weight();
        segments[at] = Arc::new(next);
        let mut firsts = old.firsts.clone();
        if firsts[at] == Header::default() {
            firsts[at] = first_header(format_of(self.inner.source, &old), &segments[at]);
        }
        *self.inner.state.write() = Arc::new(State {
            dir: old.dir.clone(),
            segments,
            firsts,
            bases: old.bases.clone(),
            total,
        });
        if readable {
            self.inner
                .readable_generation
                .fetch_add(1, Ordering::Release);
        }
        Ok(readable)
    }

    /// How many refreshes so far made new complete records readable. Several
    /// threads may refresh one feed (each reader wants fresh data), and only
    /// the one whose call saw the growth gets `true`; a component that
    /// notifies waiting readers compares this count instead, so it never
    /// misses growth another thread's refresh found.
    pub fn readable_generation(&self) -> u64 {
        self.inner.readable_generation.load(Ordering::Acquire)
    }

    /// A cursor at `start`.
    ///
    /// Block and time positions land on the first record at or after them
    /// (for streaming-mode files, the first line of the block). The search
    /// is a binary search over files by their first record, then over byte
    /// offsets within one file, decoding only line headers. A position
    /// before the first record lands on the first record; one after the
    /// newest lands on the tail and waits for it (see [`Cursor`]).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for index failures.
    pub fn seek(&self, start: Start) -> Result<Cursor, FeedError> {
        let target = match start {
            Start::Tail => return Ok(self.head()),
            Start::BlockNumber(n) => Target::BlockNumber(n),
            Start::Timestamp(t) => Target::TimestampMs(t),
        };
        let state = self.state();
        let source = self.inner.source;
        let format = format_of(source, &state);
        let filled: Vec<usize> = (0..state.segments.len())
            .filter(|&i| state.segments[i].complete_len() > 0 || state.segments[i].is_dormant())
            .collect();
        // A compressed file whose first line does not decode (damaged) says
        // nothing of where it lies: it sides with the next file that does,
        // so that the search stays a search over ordered headers.
        let before = |at: usize| {
            filled[at..]
                .iter()
                .map(|&i| first_of(format, &state, i))
                .find(|header| *header != Header::default())
                .is_some_and(|header| !target.reached(&header))
        };
        let (mut k, mut end) = (0, filled.len());
        while k < end {
            let mid = k + (end - k) / 2;
            if before(mid) {
                k = mid + 1;
            } else {
                end = mid;
            }
        }
        if k > 0 {
            let segment = state.segments[filled[k - 1]].live()?;
            let offset = find_in_segment(format, &segment, target);
            if offset < segment.complete_len() {
                let mut cursor = self.cursor_at(segment.key().clone(), offset, None);
                cursor.pin = segment.codec().map(|_| segment);
                return Ok(cursor);
            }
        }
        if let Some(&i) = filled.get(k) {
            // A compressed file's lines may start before the target when its
            // first line did not decode: the read skips them.
            let pending = state.segments[i].is_dormant().then_some(target);
            return Ok(self.cursor_at(state.segments[i].key().clone(), 0, pending));
        }
        let mut cursor = head_of(source, &state);
        cursor.target = Some(target);
        Ok(cursor)
    }

    fn cursor_at(&self, key: SegmentKey, offset: u64, target: Option<Target>) -> Cursor {
        Cursor {
            source: self.inner.source,
            at: Some((key, offset)),
            target,
            pin: None,
            reported: None,
            released: 0,
        }
    }

    /// The view of `state`'s segment `index` a read goes through: the
    /// segment itself, or for a compressed file the cursor's pinned view of
    /// it, else a live one (decoded now unless another reader holds it).
    fn readable(state: &State, index: usize, cursor: &Cursor) -> Result<Arc<Segment>, FeedError> {
        let slot = &state.segments[index];
        if !slot.is_dormant() {
            return Ok(Arc::clone(slot));
        }
        match &cursor.pin {
            Some(pin) if pin.same_file(slot) => Ok(Arc::clone(pin)),
            _ => slot.live(),
        }
    }

    /// Up to `max_records` complete records after `cursor`, in order,
    /// advancing it past them. Empty when the reader has caught up (call
    /// [`Feed::refresh`], or wait for it, and read again).
    ///
    /// # Errors
    /// [`FeedError::ForeignCursor`] for another feed's cursor;
    /// [`FeedError::SegmentGone`] when the file the cursor was in has been
    /// removed.
    pub fn read(&self, cursor: &mut Cursor, max_records: usize) -> Result<Vec<Record>, FeedError> {
        let source = self.inner.source;
        if cursor.source != source {
            return Err(FeedError::ForeignCursor {
                feed: source.feed_id(),
                cursor_feed: cursor.source.feed_id(),
            });
        }
        let state = self.state();
        if state.segments.is_empty() || max_records == 0 {
            return Ok(Vec::new());
        }
        let format = format_of(source, &state);
        let (mut index, mut offset) = match &cursor.at {
            None => (0, 0u64),
            Some((key, offset)) => match state.locate(key) {
                Ok(i) => (i, *offset),
                Err(_) => {
                    return Err(FeedError::SegmentGone {
                        feed: source.feed_id(),
                        segment: key.to_string(),
                    });
                }
            },
        };
        let mut records = Vec::new();
        let mut segment = Self::readable(&state, index, cursor)?;
        while records.len() < max_records {
            let data = segment.data();
            let Some((line, next)) = usize::try_from(offset)
                .ok()
                .and_then(|start| line_at(data, start))
            else {
                if let Some(damage) = segment.damage()
                    && cursor.reported.as_ref() != Some(segment.key())
                {
                    if !records.is_empty() {
                        // Reported by the next call, after these records.
                        break;
                    }
                    cursor.reported = Some(segment.key().clone());
                    cursor.at = Some((segment.key().clone(), offset));
                    return Err(FeedError::Damaged {
                        path: segment.path().to_path_buf(),
                        damage: damage.clone(),
                    });
                }
                if index + 1 < state.segments.len() {
                    if !records.is_empty() && state.segments[index + 1].is_dormant() {
                        // Decoding the next file waits for the next call.
                        break;
                    }
                    index += 1;
                    offset = 0;
                    segment = Self::readable(&state, index, cursor)?;
                    continue;
                }
                break;
            };
            let header = record_header(format, &segment, offset, &data[line.clone()]);
            if format == LineFormat::Envelope && header.block_number.is_none() {
                self.refuse(&segment, offset, &data[line.clone()]);
            }
            offset = next as u64;
            if let Some(target) = cursor.target {
                if !target.reached(&header) {
                    continue;
                }
                cursor.target = None;
            }
            // An older format's line is handed out inside an envelope (see
            // crate::legacy); one without a time as it is, for the reader
            // to count as a bad line.
            let data = match format {
                LineFormat::Fill | LineFormat::Trade => {
                    legacy::envelope(format, &data[line.clone()])
                        .unwrap_or_else(|| data.slice(line))
                }
                LineFormat::Envelope | LineFormat::Replica => data.slice(line),
            };
            records.push(Record {
                block_number: header.block_number,
                timestamp_ms: header.timestamp_ms,
                data,
                whole_envelope: format == LineFormat::Envelope && header.block_number.is_some(),
            });
        }
        let key = segment.key().clone();
        if cursor
            .pin
            .as_ref()
            .is_none_or(|pin| !Arc::ptr_eq(pin, &segment))
        {
            cursor.released = 0;
        }
        if segment.codec().is_some() {
            if offset >= cursor.released.saturating_add(RELEASE_BEHIND) {
                segment.release_below(offset);
                cursor.released = offset;
            }
            cursor.pin = Some(segment);
        } else {
            cursor.pin = None;
        }
        cursor.at = Some((key, offset));
        Ok(records)
    }

    /// The newest file, as of the last [`Feed::refresh`]: the one the node
    /// appends to (`None` while the source has none).
    pub fn newest_path(&self) -> Option<PathBuf> {
        let state = self.state();
        state
            .segments
            .last()
            .map(|segment| segment.path().to_path_buf())
    }

    /// Block number and block time of the newest complete record (the last
    /// line of the newest non-empty file), as of the last [`Feed::refresh`];
    /// `None` while the feed has no record. Fields the line lacks are `None`.
    pub fn newest(&self) -> Option<Header> {
        let state = self.state();
        let format = format_of(self.inner.source, &state);
        let segment = state
            .segments
            .iter()
            .rev()
            .find(|segment| segment.complete_len() > 0 || segment.is_dormant())?;
        if segment.is_dormant() {
            // Remembered once the file was decoded; decoded now otherwise.
            let line = match segment.last_line() {
                Some(line) => line,
                None => segment.live().ok()?.last_line()?,
            };
            return Some(record_header(format, segment, 0, &line));
        }
        let data = segment.data();
        // The complete prefix ends with `\n`: the last line starts after the
        // newline before it.
        let start = line_start_containing(data, data.len().saturating_sub(1));
        let (line, _) = line_at(data, start)?;
        Some(record_header(format, segment, start as u64, &data[line]))
    }

    /// The position just past the newest complete record.
    pub fn head(&self) -> Cursor {
        head_of(self.inner.source, &self.state())
    }

    /// Bytes of complete records between `cursor` and [`Feed::head`] (0 when
    /// caught up). Reflects the last [`Feed::refresh`].
    pub fn lag(&self, cursor: &Cursor) -> u64 {
        let state = self.state();
        let position = match &cursor.at {
            None => 0,
            Some((key, offset)) => match state.locate(key) {
                Ok(i) => state.bases[i].saturating_add(*offset),
                Err(i) => state.bases.get(i).copied().unwrap_or(state.total),
            },
        };
        state.total.saturating_sub(position)
    }
}

fn head_of(source: Source, state: &State) -> Cursor {
    Cursor {
        source,
        // Past a compressed file's end, which is not known until decoded:
        // a compressed file is finished, so nothing is ever written past it.
        at: state.segments.last().map(|s| {
            let end = if s.is_dormant() {
                u64::MAX
            } else {
                s.complete_len()
            };
            (s.key().clone(), end)
        }),
        target: None,
        pin: None,
        reported: None,
        released: 0,
    }
}

/// Header of the record starting at `offset` of `segment`.
fn record_header(format: LineFormat, segment: &Segment, offset: u64, line: &[u8]) -> Header {
    match (segment.key(), segment.line_starts()) {
        (SegmentKey::Replica { height, .. }, Some(starts)) => Header {
            block_number: starts
                .binary_search(&offset)
                .ok()
                .map(|index| height + index as u64),
            timestamp_ms: replica_time_ms(line),
        },
        _ => match format {
            LineFormat::Envelope => envelope_header(line),
            LineFormat::Fill | LineFormat::Trade => legacy::header(format, line),
            LineFormat::Replica => Header::default(),
        },
    }
}

/// How `state`'s files are written: by the directory in use, else by the
/// source's own kind.
fn format_of(source: Source, state: &State) -> LineFormat {
    match &state.dir {
        Some(dir) => LineFormat::of_dir(dir.name),
        None if source.is_envelope() => LineFormat::Envelope,
        None => LineFormat::Replica,
    }
}

/// The header of a segment's first record; unknown (the default) for a
/// dormant compressed file, whose first line is decoded only when a seek
/// asks for it ([`first_of`]).
fn first_header(format: LineFormat, segment: &Segment) -> Header {
    if segment.is_dormant() {
        return Header::default();
    }
    line_at(segment.data(), 0).map_or(Header::default(), |(line, _)| {
        record_header(format, segment, 0, &segment.data()[line])
    })
}

/// The header of segment `i`'s first record, decoding a dormant compressed
/// file's first line when it is not known yet.
fn first_of(format: LineFormat, state: &State, i: usize) -> Header {
    let known = state.firsts[i];
    let segment = &state.segments[i];
    if known != Header::default() || !segment.is_dormant() {
        return known;
    }
    segment.first_line().map_or(Header::default(), |line| {
        record_header(format, segment, 0, &line)
    })
}

/// Offset of the first record of `segment` at or after `target`, or its
/// complete length when none is.
fn find_in_segment(format: LineFormat, segment: &Segment, target: Target) -> u64 {
    let data = segment.data();
    match (segment.key(), segment.line_starts()) {
        (SegmentKey::Replica { height, .. }, Some(starts)) => {
            let index = match target {
                Target::BlockNumber(n) => {
                    usize::try_from(n.saturating_sub(*height)).unwrap_or(usize::MAX)
                }
                Target::TimestampMs(_) => starts.partition_point(|&start| {
                    let line = usize::try_from(start)
                        .ok()
                        .and_then(|s| line_at(data, s))
                        .map(|(line, _)| &data[line]);
                    line.is_none_or(|l| {
                        !target.reached(&Header {
                            block_number: None,
                            timestamp_ms: replica_time_ms(l),
                        })
                    })
                }),
            };
            starts.get(index).copied().unwrap_or(segment.complete_len())
        }
        _ => first_line_where(data, |line| {
            target.reached(&record_header(format, segment, 0, line))
        }) as u64,
    }
}
