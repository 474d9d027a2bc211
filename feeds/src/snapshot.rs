//! L4 order-book snapshot files (`[height, [[coin, [bids, asks]], …]]`):
//! discovery, verification, timestamps and zero-copy reads.
//!
//! # Timestamps
//!
//! A snapshot at height `H` holds the book after block `H`. Its
//! [`SnapshotFile::timestamp_ms`] is the block time of `H` when any line feed
//! of the same node root (fills, raw book diffs, order statuses, misc
//! events, TWAP statuses, `replica_cmds`) holds block `H`
//! ([`SnapshotTime::Block`]); otherwise it is the file's modification time
//! in Unix ms ([`SnapshotTime::FileModified`]), i.e. when the file was
//! finished, which is later than the block time. The choice is made once,
//! when the file is first listed, so a snapshot's timestamp never changes.
//!
//! # Completeness
//!
//! A file is listed only once it looks complete: its JSON starts with
//! `[<height>,` matching the file name and ends with `]`, and it is either
//! at least [`SETTLE`] old or had the same length at the previous
//! [`Snapshots::refresh`]. Files at rest — captured files replayed offline,
//! which nothing writes any more — are opened with
//! [`Snapshots::open_at_rest`], which trusts a complete-looking file at once,
//! so the same files always give the same list. A file whose leading height
//! disagrees with its name is never listed and is reported by
//! [`Snapshots::skipped`].

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::error::FeedError;
use crate::feed::{Feed, Start};
use crate::layout::{self, SnapshotPath};
use crate::mapped::MappedFile;
use crate::source::Source;

/// How old a file must be to be trusted complete at first sight.
pub const SETTLE: Duration = Duration::from_secs(1);

/// Where a snapshot's timestamp comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotTime {
    /// The block time of the snapshot's height, from a line feed.
    Block,
    /// The file's modification time (no feed knew the height).
    FileModified,
}

/// One verified snapshot file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Height of the book state (from the file name, checked against the
    /// JSON).
    pub height: u64,
    /// Unix ms; see the module docs for how it is chosen.
    pub timestamp_ms: i64,
    /// Where [`SnapshotFile::timestamp_ms`] came from.
    pub timestamp_source: SnapshotTime,
    /// The file.
    pub path: PathBuf,
    /// Its length when verified.
    pub len: u64,
}

/// The snapshot files of a data directory.
///
/// Cloning is cheap and clones share state; `Snapshots` is `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Snapshots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    data_dir: PathBuf,
    clocks: Vec<Feed>,
    listed: RwLock<Arc<Vec<SnapshotFile>>>,
    refresh: Mutex<Pending>,
    skipped: RwLock<Vec<FeedError>>,
    /// How old a file must be to be trusted at first sight.
    settle: Duration,
}

/// Lengths of files seen but not yet listed.
#[derive(Debug, Default)]
struct Pending {
    seen_len: HashMap<PathBuf, u64>,
}

/// Line sources whose block times can date a snapshot.
const CLOCK_SOURCES: [Source; 6] = [
    Source::OrderStatuses,
    Source::RawBookDiffs,
    Source::Fills,
    Source::MiscEvents,
    Source::TwapStatuses,
    Source::Blocks,
];

impl Snapshots {
    /// Lists the snapshots of `data_dir` (see
    /// [`layout::list_snapshot_files`] for where they are looked for),
    /// opening its own line feeds to date them.
    ///
    /// # Errors
    /// [`FeedError::Io`] when a directory cannot be read or a feed cannot be
    /// opened.
    pub fn open(data_dir: &Path) -> Result<Snapshots, FeedError> {
        Snapshots::open_settling(data_dir, SETTLE)
    }

    /// As [`Snapshots::open`], for files at rest (nothing writes them any
    /// more): a file that starts and ends like a whole snapshot is listed
    /// at once, whatever its age, so the list never depends on when the
    /// files were written.
    ///
    /// # Errors
    /// As [`Snapshots::open`].
    pub fn open_at_rest(data_dir: &Path) -> Result<Snapshots, FeedError> {
        Snapshots::open_settling(data_dir, Duration::ZERO)
    }

    fn open_settling(data_dir: &Path, settle: Duration) -> Result<Snapshots, FeedError> {
        let clocks = CLOCK_SOURCES
            .iter()
            .map(|&source| Feed::open(data_dir, source))
            .collect::<Result<Vec<_>, _>>()?;
        Snapshots::build(data_dir, clocks, settle)
    }

    /// As [`Snapshots::open`], dating snapshots with feeds the caller
    /// already has open (they are refreshed before a new height is looked
    /// up).
    ///
    /// # Errors
    /// [`FeedError::Io`] when a directory cannot be read.
    pub fn with_feeds(data_dir: &Path, feeds: Vec<Feed>) -> Result<Snapshots, FeedError> {
        Snapshots::build(data_dir, feeds, SETTLE)
    }

    fn build(data_dir: &Path, feeds: Vec<Feed>, settle: Duration) -> Result<Snapshots, FeedError> {
        let snapshots = Snapshots {
            inner: Arc::new(Inner {
                data_dir: data_dir.to_path_buf(),
                clocks: feeds,
                listed: RwLock::new(Arc::new(Vec::new())),
                refresh: Mutex::new(Pending::default()),
                skipped: RwLock::new(Vec::new()),
                settle,
            }),
        };
        snapshots.refresh()?;
        Ok(snapshots)
    }

    /// Looks for new snapshot files; `true` when one became listed. Files
    /// that disappeared are dropped from the list.
    ///
    /// # Errors
    /// [`FeedError::Io`] when a directory cannot be read.
    pub fn refresh(&self) -> Result<bool, FeedError> {
        let mut pending = self.inner.refresh.lock();
        let old = self.inner.listed.read().clone();
        let found = layout::list_snapshot_files(&self.inner.data_dir)?;
        let mut listed = Vec::with_capacity(found.len());
        let mut added = false;
        let mut skipped = Vec::new();
        for candidate in found {
            if let Some(known) = old.iter().find(|s| s.path == candidate.path) {
                listed.push(known.clone());
                continue;
            }
            match self.verify(&candidate, &mut pending) {
                Ok(Some(file)) => {
                    pending.seen_len.remove(&candidate.path);
                    listed.push(file);
                    added = true;
                }
                Ok(None) => {}
                Err(error) => skipped.push(error),
            }
        }
        pending
            .seen_len
            .retain(|path, _| listed.iter().all(|s| &s.path != path) && path.exists());
        let removed = old.iter().any(|s| listed.iter().all(|n| n.path != s.path));
        if added || removed {
            *self.inner.listed.write() = Arc::new(listed);
        }
        *self.inner.skipped.write() = skipped;
        Ok(added)
    }

    /// Checks one candidate; `Ok(None)` while it does not look complete.
    fn verify(
        &self,
        candidate: &SnapshotPath,
        pending: &mut Pending,
    ) -> Result<Option<SnapshotFile>, FeedError> {
        let path = &candidate.path;
        let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
        let meta = file
            .metadata()
            .map_err(|e| FeedError::io("stat", path, &e))?;
        let len = meta.len();
        let modified = meta
            .modified()
            .map_err(|e| FeedError::io("stat", path, &e))?;
        let previous = pending.seen_len.insert(path.clone(), len);
        let settled = self.inner.settle.is_zero()
            || modified.elapsed().is_ok_and(|age| age >= self.inner.settle)
            || previous == Some(len);
        let head = read_at_most(&file, path, 0, 32)?;
        if let Some(height) = leading_height(&head) {
            if height != candidate.height {
                return Err(FeedError::Snapshot {
                    path: path.clone(),
                    reason: format!(
                        "file name says height {} but the JSON starts with [{height},",
                        candidate.height
                    ),
                });
            }
        } else if head.len() >= 22 || (settled && len > 0) {
            return Err(FeedError::Snapshot {
                path: path.clone(),
                reason: "does not start with [<height>,".to_owned(),
            });
        } else {
            return Ok(None);
        }
        let tail = read_at_most(&file, path, len.saturating_sub(64), 64)?;
        let ends_closed = tail.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b']');
        if !ends_closed {
            // Unchanged for the settle time and still open: cut short, not
            // being written (one merely paused is listed once it is whole).
            let stale = self.inner.settle.is_zero()
                || modified.elapsed().is_ok_and(|age| age >= self.inner.settle);
            if stale {
                return Err(FeedError::Snapshot {
                    path: path.clone(),
                    reason: "cut short: it does not end with ]".to_owned(),
                });
            }
            return Ok(None);
        }
        if !settled {
            return Ok(None);
        }
        let (timestamp_ms, timestamp_source) = match self.block_time(candidate.height) {
            Some(ms) => (ms, SnapshotTime::Block),
            None => (unix_ms(modified), SnapshotTime::FileModified),
        };
        Ok(Some(SnapshotFile {
            height: candidate.height,
            timestamp_ms,
            timestamp_source,
            path: path.clone(),
            len,
        }))
    }

    /// The block time of `height` from the first feed that holds it.
    fn block_time(&self, height: u64) -> Option<i64> {
        self.inner.clocks.iter().find_map(|feed| {
            // A failed refresh leaves the feed as it was; it may still know.
            let _ = feed.refresh();
            let mut cursor = feed.seek(Start::BlockNumber(height)).ok()?;
            let record = feed.read(&mut cursor, 1).ok()?.pop()?;
            (record.block_number == Some(height))
                .then_some(record.timestamp_ms)
                .flatten()
        })
    }

    /// Every listed snapshot, by height.
    pub fn list(&self) -> Vec<SnapshotFile> {
        self.inner.listed.read().as_ref().clone()
    }

    /// The snapshot with the greatest height.
    pub fn latest(&self) -> Option<SnapshotFile> {
        self.inner.listed.read().last().cloned()
    }

    /// The first snapshot (by height) whose timestamp is at or after `ts_ms`.
    pub fn first_at_or_after(&self, ts_ms: i64) -> Option<SnapshotFile> {
        self.inner
            .listed
            .read()
            .iter()
            .find(|s| s.timestamp_ms >= ts_ms)
            .cloned()
    }

    /// Files found but refused at the last refresh, with the reason.
    pub fn skipped(&self) -> Vec<FeedError> {
        self.inner.skipped.read().clone()
    }

    /// The whole file, memory-mapped (no copy).
    ///
    /// # Errors
    /// [`FeedError::Io`] when it cannot be opened or mapped (e.g. it was
    /// pruned); [`FeedError::Truncated`] when it is shorter than when it was
    /// verified.
    pub fn read(&self, file: &SnapshotFile) -> Result<Bytes, FeedError> {
        self.map(file).map(MappedFile::into_bytes)
    }

    /// [`Snapshots::read`], as a mapping whose pages read can be let go of
    /// while parsing it ([`MappedFile::release_below`]).
    ///
    /// # Errors
    /// As [`Snapshots::read`].
    pub fn map(&self, file: &SnapshotFile) -> Result<MappedFile, FeedError> {
        let path = &file.path;
        let handle = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
        let now = handle
            .metadata()
            .map_err(|e| FeedError::io("stat", path, &e))?
            .len();
        if now < file.len {
            return Err(FeedError::Truncated {
                path: path.clone(),
                had: file.len,
                now,
            });
        }
        MappedFile::of(&handle, file.len, path)
    }
}

/// Up to `max` bytes at `offset`.
fn read_at_most(file: &File, path: &Path, offset: u64, max: usize) -> Result<Vec<u8>, FeedError> {
    let mut buf = vec![0; max];
    let mut filled = 0;
    while filled < max {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FeedError::io("read", path, &e)),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// `H` from a leading `[H,` (whitespace allowed around `H`).
fn leading_height(head: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(head).ok().or_else(|| {
        // A multi-byte character may be cut at the end of the probe.
        let valid = std::str::from_utf8(head).err()?.valid_up_to();
        std::str::from_utf8(&head[..valid]).ok()
    })?;
    let rest = text.trim_start().strip_prefix('[')?;
    let (digits, _) = rest.split_once(',')?;
    let digits = digits.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_leading_height() {
        assert_eq!(leading_height(b"[985148181,[[\"BTC\""), Some(985_148_181));
        assert_eq!(leading_height(b" [ 7 ,[]]"), Some(7));
        assert_eq!(leading_height(b"[\"BTC\",1]"), None);
        assert_eq!(leading_height(b"[12"), None);
        assert_eq!(leading_height(b""), None);
    }
}
