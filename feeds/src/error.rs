//! The crate's error type, [`FeedError`], with messages naming the file,
//! byte offset or field involved.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::envelope::EnvelopeError;

/// Anything that can go wrong discovering, mapping, indexing or reading the
/// node's files.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FeedError {
    /// A filesystem call failed.
    #[error("feeds: cannot {op} {}: {message}", path.display())]
    Io {
        /// What was being done (`stat`, `open`, `map`, `list`, `read`, `watch`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's text.
        message: String,
    },
    /// A file became shorter than what was already exposed: the node's files
    /// must be append-only.
    #[error("feeds: {} shrank from {had} to {now} bytes; node files must be append-only", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes already exposed.
        had: u64,
        /// Its length now.
        now: u64,
    },
    /// A line is not the record it should be.
    #[error("feeds: {} at byte {offset}: {source}", path.display())]
    Decode {
        /// The file.
        path: PathBuf,
        /// Offset of the line in the file.
        offset: u64,
        /// What the envelope decoder said.
        source: EnvelopeError,
    },
    /// A snapshot file is not usable.
    #[error("feeds: snapshot {}: {reason}", path.display())]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The source is not a line feed ([`crate::Source::OrderbookSnapshots`]
    /// is served by [`crate::Snapshots`]).
    #[error("feeds: {feed} is not a line feed; open it with Snapshots")]
    NotALineFeed {
        /// The feed id.
        feed: &'static str,
    },
    /// The file a cursor pointed into was removed (pruned) before the cursor
    /// finished it, so records were lost to this reader.
    #[error("feeds: {feed}: the file the cursor was reading ({segment}) is gone")]
    SegmentGone {
        /// The feed id.
        feed: &'static str,
        /// The segment the cursor was in.
        segment: String,
    },
    /// A directory that is not one of the feed's was asked for.
    #[error("feeds: {dir:?} is not a directory of the {feed} feed")]
    UnknownDirectory {
        /// The feed id.
        feed: &'static str,
        /// The name asked for.
        dir: String,
    },
    /// A cursor from another feed was passed in.
    #[error("feeds: a {cursor_feed} cursor was used on the {feed} feed")]
    ForeignCursor {
        /// The feed read.
        feed: &'static str,
        /// The feed the cursor came from.
        cursor_feed: &'static str,
    },
    /// A compressed file stops decoding part-way (see [`crate::codec`]): the
    /// lines before the damage were read, and the rest of the file is
    /// skipped; a reader that goes on continues with the next file.
    #[error("feeds: {}: {damage}", path.display())]
    Damaged {
        /// The compressed file.
        path: PathBuf,
        /// Where and why it stops.
        damage: Damage,
    },
    /// An event filter could not be compiled or applied.
    #[error(transparent)]
    Filter(#[from] crate::filter::FilterError),
}

impl FeedError {
    /// An [`FeedError::Io`] for `op` on `path`.
    pub fn io(op: &'static str, path: &Path, error: &io::Error) -> Self {
        FeedError::Io {
            op,
            path: path.to_path_buf(),
            kind: error.kind(),
            message: error.to_string(),
        }
    }
}

/// How a compressed file is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// The file ends inside a frame: what decoded before the cut is sound.
    Truncated,
    /// A block or header does not decode: what decoded before it is sound.
    Corrupt,
    /// The content checksum disagrees with the decoded bytes: none of them
    /// can be trusted.
    ChecksumMismatch,
}

/// Where and why a compressed file stopped decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// What went wrong.
    pub kind: DamageKind,
    /// Bytes of the compressed file consumed when it was found.
    pub compressed_offset: u64,
    /// Decoded bytes handed out before it.
    pub decoded_offset: u64,
    /// The decoder's own words.
    pub reason: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            DamageKind::Truncated => "truncated",
            DamageKind::Corrupt => "corrupt",
            DamageKind::ChecksumMismatch => "content checksum mismatch",
        };
        write!(
            f,
            "{what} at compressed byte {} (after {} decoded bytes): {}",
            self.compressed_offset, self.decoded_offset, self.reason
        )
    }
}
