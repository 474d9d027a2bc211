//! The import's reading side: what it hands the fold ([`Read`]), and the
//! reader of by-block fill hours ([`read_hours`]), which decodes each
//! compressed hour file front to back in pieces and cuts its lines into
//! blocks as it goes.
//!
//! # Why not the feed
//!
//! A server reads compressed files through `feeds`, which decodes a whole
//! file into a temporary file first and maps it (the reader may seek,
//! re-read and tail). An import reads each hour once, in order: writing
//! the decoded hour out and mapping it back in cost about half as much
//! again as decoding it (a profile of a simulated mainnet day's import).
//! Here the decoded bytes go from the decoder's buffer into blocks
//! directly, and memory holds the blocks queued for the fold, not an hour.
//!
//! # What it hands over
//!
//! The same blocks the feed and the block aligner would, each as its
//! number, time and line ([`BlockLine`]): from the first line whose block
//! time is at or after the start on (lines before it skipped, as a seek by
//! time skips them), each line that is a whole block envelope, one block
//! per line; a line that is not one is left out, and so is a block not
//! above the last one handed over (a duplicate or a late line), as the
//! aligner leaves them out in by-block mode.
//!
//! # Damage, and checksums
//!
//! A file that cannot be decoded to its end (truncated, corrupt) gives
//! the blocks of its lines before the damage, then the damage. A file
//! whose checksum fails (`lz4` and `zstd` frames, `gzip` members carry one
//! at their end) gives nothing — but its blocks were handed over before
//! the checksum was read. So each hour is framed: [`Read::HourBegins`]
//! before its first block and [`Read::HourEnds`] after its last, or
//! [`Read::HourDiscarded`] when its checksum fails, and the fold then sets
//! itself back to where it was at the hour's beginning, holding what it
//! folded from the hour until the hour ends.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use crossbeam_channel::Sender;
use engine::block::Block;
use feeds::FeedError;
use feeds::codec::{self, Codec, DamageKind};

/// Bytes of a plain (uncompressed) hour file read at once.
const PLAIN_PIECE: usize = 1 << 20;
/// Blocks handed to the fold at once, at most.
pub(super) const READ_BATCH: usize = 512;
/// Decoded bytes of the blocks handed at once, at most (about: a batch
/// ends with the block that reaches it).
pub(super) const READ_BATCH_BYTES: u64 = 4 << 20;

/// What a reading thread hands the fold, in the order it read it.
pub(super) enum Read {
    /// Damaged files met (their lines before the damage are in the blocks
    /// handed over before).
    Damaged(Vec<String>),
    /// Blocks, and the decoded bytes read so far.
    Blocks(Vec<Block>, u64),
    /// Blocks of a by-block dataset, each its one line, and the decoded
    /// bytes read so far (see [`BlockLine`]).
    Lines(Vec<BlockLine>, u64),
    /// Every block read before the damage was handed over: the gap runs
    /// from the last of them (or the damaged hour's start) to the next
    /// block. The reason, and the hour's start.
    DamageEnds(String, Option<i64>),
    /// The files cannot be read.
    Failed(FeedError),
    /// An hour file begins: what the fold folds from here on may be taken
    /// back ([`Read::HourDiscarded`]) until [`Read::HourEnds`].
    HourBegins,
    /// The hour file begun last was read whole and sound.
    HourEnds,
    /// The hour file begun last failed its checksum: none of its blocks
    /// count. Its damage was said just before ([`Read::Damaged`]).
    HourDiscarded,
}

/// A block of a by-block dataset as the reader hands it over: its number,
/// time and one line. The fold makes each the one block it reuses
/// ([`BlockLine::fill`]): a [`Block`] apiece, made by the reader and
/// dropped by the fold, cost an allocation freed on another thread per
/// block.
#[derive(Debug)]
pub(super) struct BlockLine {
    number: u64,
    time_ms: i64,
    line: Bytes,
}

impl BlockLine {
    /// Makes `block` this block, lines and all.
    pub(super) fn fill(self, block: &mut Block) {
        block.number = self.number;
        block.time_ms = self.time_ms;
        block.lines.fills.clear();
        block.lines.fills.push(self.line);
    }
}

/// One hour file of a by-block fill dataset.
#[derive(Debug, Clone)]
pub(super) struct HourFile {
    /// Start of its UTC hour, Unix ms.
    pub hour_ms: i64,
    /// The file.
    pub path: PathBuf,
}

/// Where the reader is in the blocks: what it must not hand over again.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// The first line at or after the start was met.
    started: bool,
    /// The last block handed over.
    emitted: Option<u64>,
}

/// The reading thread for a by-block fill dataset: every block of `files`
/// (in hour order) from the first at or after `from_ms` on, in batches,
/// until the files end or the fold stops taking them. See the module docs.
pub(super) fn read_hours(files: &[HourFile], from_ms: i64, out: &Sender<Read>) {
    // Lines of a block at `from_ms` may sit in the file of the hour before
    // (files are cut on the writing node's clock): start one file earlier.
    let first = files
        .iter()
        .rposition(|file| file.hour_ms <= from_ms.saturating_sub(3_600_000))
        .unwrap_or(0);
    let mut position = Position::default();
    let mut bytes = 0u64;
    for file in &files[first..] {
        if out.send(Read::HourBegins).is_err() {
            return;
        }
        let before = (position, bytes);
        let mut reader = HourReader {
            from_ms,
            position: &mut position,
            bytes: &mut bytes,
            pending: Vec::new(),
            batch: Vec::with_capacity(READ_BATCH),
            batch_from: before.1,
            out,
            stopped: false,
        };
        let decoded = read_file(&file.path, |piece| reader.piece(piece));
        let stopped = reader.stopped || !reader.flush();
        if stopped {
            return;
        }
        let damage = match decoded {
            Ok(damage) => damage,
            Err(error) => {
                let _ = out.send(Read::Failed(error));
                return;
            }
        };
        let Some(damage) = damage else {
            if out.send(Read::HourEnds).is_err() {
                return;
            }
            continue;
        };
        let discarded = damage.kind == DamageKind::ChecksumMismatch;
        let error = FeedError::Damaged {
            path: file.path.clone(),
            damage,
        };
        let mut messages = vec![Read::Damaged(vec![error.to_string()])];
        if discarded {
            // As if the file had no line: the blocks handed over from it
            // are taken back, and the reader is where it was before it.
            (position, bytes) = before;
            messages.push(Read::HourDiscarded);
        } else {
            messages.push(Read::HourEnds);
        }
        messages.push(Read::DamageEnds(error.to_string(), Some(file.hour_ms)));
        if messages
            .into_iter()
            .any(|message| out.send(message).is_err())
        {
            return;
        }
    }
}

/// Decodes `path` (by the codec its name says; a plain file as it is),
/// handing the bytes to `sink` piece by piece, each in a buffer of its own
/// (an archive's LZ4 block is decoded straight into it); the damage met,
/// if any.
fn read_file(
    path: &Path,
    mut sink: impl FnMut(Vec<u8>) -> std::io::Result<()>,
) -> Result<Option<codec::Damage>, FeedError> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if let (_, Some(codec)) = Codec::split_name(name) {
        return codec::decompress_owned(path, codec, sink).map(|decoded| decoded.damage);
    }
    let mut file = std::fs::File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
    loop {
        let mut piece = Vec::with_capacity(PLAIN_PIECE);
        match (&mut file).take(PLAIN_PIECE as u64).read_to_end(&mut piece) {
            Ok(0) => return Ok(None),
            Ok(_) => sink(piece).map_err(|e| FeedError::io("spool", path, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FeedError::io("read", path, &e)),
        }
    }
}

/// Cuts one file's decoded pieces into lines and its lines into blocks.
struct HourReader<'r> {
    from_ms: i64,
    position: &'r mut Position,
    /// Decoded bytes of the lines read, from the start on (as the feed
    /// counts them: each line and its newline).
    bytes: &'r mut u64,
    /// The start of a line whose end has not been decoded yet.
    pending: Vec<u8>,
    batch: Vec<BlockLine>,
    batch_from: u64,
    out: &'r Sender<Read>,
    /// The fold took no more: decoding stops.
    stopped: bool,
}

impl HourReader<'_> {
    /// Takes a decoded piece: its complete lines become blocks, which
    /// share the piece's buffer (no copy); only the line that began in the
    /// piece before and the unfinished one at its end are copied.
    fn piece(&mut self, piece: Vec<u8>) -> std::io::Result<()> {
        let Some(last) = memchr::memrchr(b'\n', &piece) else {
            self.pending.extend_from_slice(&piece);
            return Ok(());
        };
        let piece = Bytes::from(piece);
        let mut at = 0;
        if !self.pending.is_empty() {
            let first = memchr::memchr(b'\n', &piece).unwrap_or(last);
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(&piece[..first]);
            at = first + 1;
            if !self.line(Bytes::from(line)) {
                return Err(self.stop());
            }
        }
        while let Some(end) = memchr::memchr(b'\n', &piece[at..=last]) {
            let line = piece.slice(at..at + end);
            at += end + 1;
            if !self.line(line) {
                return Err(self.stop());
            }
        }
        self.pending.extend_from_slice(&piece[last + 1..]);
        Ok(())
    }

    /// The fold took no more: the decoding stops.
    fn stop(&mut self) -> std::io::Error {
        self.stopped = true;
        std::io::Error::other("the fold stopped")
    }

    /// One complete line; `false` once the fold takes no more.
    fn line(&mut self, line: Bytes) -> bool {
        let Ok(envelope) = feeds::envelope::decode_whole(&line) else {
            // Not a block: skipped before the start, left out after it.
            if self.position.started {
                *self.bytes += line.len() as u64 + 1;
            }
            return true;
        };
        let (number, time_ms) = (envelope.block_number, envelope.block_time_ms);
        if !self.position.started {
            if time_ms < self.from_ms {
                return true;
            }
            self.position.started = true;
        }
        *self.bytes += line.len() as u64 + 1;
        if self
            .position
            .emitted
            .is_some_and(|emitted| number <= emitted)
        {
            return true;
        }
        self.position.emitted = Some(number);
        self.batch.push(BlockLine {
            number,
            time_ms,
            line,
        });
        if self.batch.len() == READ_BATCH
            || self.bytes.saturating_sub(self.batch_from) >= READ_BATCH_BYTES
        {
            return self.flush();
        }
        true
    }

    /// Hands the blocks gathered over; `false` once the fold takes no more.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        let full = std::mem::replace(&mut self.batch, Vec::with_capacity(READ_BATCH));
        self.batch_from = *self.bytes;
        self.out.send(Read::Lines(full, *self.bytes)).is_ok()
    }
}

/// The block time of the first line of `files` that is a whole block
/// envelope (as a feed's first record), decoding no further than it; a
/// damaged file's lines before its damage count.
///
/// # Errors
/// [`FeedError::Io`] when a file cannot be opened or read.
pub(super) fn first_block_ms(files: &[HourFile]) -> Result<Option<i64>, FeedError> {
    for file in files {
        let mut found = None;
        let mut lines = Lines::default();
        let read = read_file(&file.path, |piece| {
            lines.cut(&piece, |line| {
                found = feeds::envelope::decode_whole(line)
                    .ok()
                    .map(|envelope| envelope.block_time_ms);
                found.is_none()
            })
        });
        if found.is_some() {
            return Ok(found);
        }
        read?;
    }
    Ok(None)
}

/// The block time of the last line of `file` when it is a whole block
/// envelope (as a feed's newest record): `None` when it is not, or the
/// file has no line (empty, or it fails its checksum).
///
/// # Errors
/// [`FeedError::Io`] when the file cannot be opened or read.
pub(super) fn last_block_ms(file: &HourFile) -> Result<Option<i64>, FeedError> {
    // The last complete line so far, and the start of the next.
    let (mut last, mut pending): (Option<Vec<u8>>, Vec<u8>) = (None, Vec::new());
    let damage = read_file(&file.path, |piece| {
        if let Some(end) = memchr::memrchr(b'\n', &piece) {
            // Only the last line of each piece can be the file's last.
            let start = memchr::memrchr(b'\n', &piece[..end]).map_or(0, |at| at + 1);
            if start > 0 {
                pending.clear();
            }
            pending.extend_from_slice(&piece[start..end]);
            last = Some(std::mem::take(&mut pending));
            pending.extend_from_slice(&piece[end + 1..]);
        } else {
            pending.extend_from_slice(&piece);
        }
        Ok(())
    })?;
    if damage.is_some_and(|d| d.kind == DamageKind::ChecksumMismatch) {
        return Ok(None);
    }
    Ok(last.and_then(|line| {
        feeds::envelope::decode_whole(&line)
            .ok()
            .map(|envelope| envelope.block_time_ms)
    }))
}

/// Complete lines cut from decoded pieces.
#[derive(Default)]
struct Lines {
    /// The start of a line whose end has not been decoded yet.
    pending: Vec<u8>,
}

impl Lines {
    /// Hands each line `piece` completes to `visit` while it says `true`;
    /// an error once it says `false` (decoding stops there).
    fn cut(&mut self, piece: &[u8], mut visit: impl FnMut(&[u8]) -> bool) -> std::io::Result<()> {
        let mut rest = piece;
        while let Some(end) = memchr::memchr(b'\n', rest) {
            let more = if self.pending.is_empty() {
                visit(&rest[..end])
            } else {
                self.pending.extend_from_slice(&rest[..end]);
                let line = std::mem::take(&mut self.pending);
                visit(&line)
            };
            rest = &rest[end + 1..];
            if !more {
                return Err(std::io::Error::other("enough read"));
            }
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(number: u64, second: u32) -> String {
        format!(
            r#"{{"local_time":"2026-03-14T10:00:{second:02}.5","block_time":"2026-03-14T10:00:{second:02}.000000001","block_number":{number},"events":[]}}"#
        )
    }

    fn ms(second: u32) -> i64 {
        feeds::time::parse_iso8601_ms(&format!("2026-03-14T10:00:{second:02}Z")).unwrap()
    }

    /// Every message `read_hours` sends over `files` from `from_ms`, the
    /// blocks as `(number, time)`.
    fn read(files: &[HourFile], from_ms: i64) -> Vec<String> {
        let (tx, rx) = crossbeam_channel::unbounded();
        read_hours(files, from_ms, &tx);
        drop(tx);
        rx.iter()
            .map(|message| match message {
                Read::Lines(blocks, _) => {
                    let numbers: Vec<String> = blocks
                        .iter()
                        .map(|b| format!("{}@{}", b.number, b.time_ms - ms(0)))
                        .collect();
                    numbers.join(",")
                }
                Read::Blocks(..) => "whole blocks".into(),
                Read::HourBegins => "begins".into(),
                Read::HourEnds => "ends".into(),
                Read::HourDiscarded => "discarded".into(),
                Read::Damaged(_) => "damaged".into(),
                Read::DamageEnds(..) => "damage ends".into(),
                Read::Failed(error) => format!("failed: {error}"),
            })
            .collect()
    }

    #[test]
    fn hands_over_the_blocks_a_feed_and_the_aligner_would() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("9");
        let text = [
            line(4, 1),          // before the start: skipped
            "garbage".into(),    // not a block
            line(5, 2),          // the start
            line(5, 2),          // a duplicate
            "{\"no\":1}".into(), // not a block
            line(7, 3),
            line(6, 3), // late
        ]
        .join("\n");
        std::fs::write(&first, text + "\n").unwrap();
        let second = dir.path().join("10");
        // A partial last line is not a block yet.
        std::fs::write(&second, format!("{}\n{}", line(8, 4), line(9, 5))).unwrap();
        let files = [
            HourFile {
                hour_ms: ms(0) - 3_600_000,
                path: first,
            },
            HourFile {
                hour_ms: ms(0),
                path: second,
            },
        ];
        assert_eq!(
            read(&files, ms(2)),
            [
                "begins",
                "5@2000,7@3000",
                "ends",
                "begins",
                "8@4000",
                "ends"
            ]
        );
        // The first and last block times, as the feed would say them.
        assert_eq!(first_block_ms(&files).unwrap(), Some(ms(1)));
        assert_eq!(last_block_ms(&files[0]).unwrap(), Some(ms(3)));
        assert_eq!(last_block_ms(&files[1]).unwrap(), Some(ms(4)));
    }

    #[test]
    fn starts_one_hour_file_before_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (k, number) in [1u64, 2, 3].into_iter().enumerate() {
            let path = dir.path().join(number.to_string());
            std::fs::write(&path, line(number, number as u32) + "\n").unwrap();
            files.push(HourFile {
                hour_ms: ms(0) + k as i64 * 3_600_000,
                path,
            });
        }
        // A start in the third hour reads from the second file on.
        let from = ms(0) + 2 * 3_600_000 + 1;
        let messages = read(&files, from);
        assert_eq!(messages.iter().filter(|m| *m == "begins").count(), 2);
        // Block times are not in their files' hours here: every line is
        // before the start, so nothing is handed over.
        assert!(!messages.iter().any(|m| m.contains('@')), "{messages:?}");
    }
}
