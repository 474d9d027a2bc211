//! Checkpoint files: the header, writing one atomically, reading one back
//! through a memory map with every check before use, and the directory that
//! keeps the newest few.
//!
//! # Layout
//!
//! A 64-byte header, then the rkyv archive of a
//! [`CheckpointState`](super::state::CheckpointState). All integers are
//! little-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `L1GCKPT\0` |
//! | 8..12 | format version ([`FORMAT_VERSION`]) |
//! | 12..16 | header length (64) |
//! | 16..24 | block number (the last block folded) |
//! | 24..32 | that block's time, Unix ms |
//! | 32..40 | body length |
//! | 40..44 | CRC-32 of the body |
//! | 44..48 | what the market folds (the state's `needs` bits) |
//! | 48..64 | zero |
//!
//! The body starts 64 bytes in, so a page-aligned mapping leaves it aligned
//! for rkyv. Reading checks, in order: the magic, the version (a checkpoint
//! of another format version is refused as such, before anything else is
//! read), the length, the checksum (a flipped bit anywhere is caught here:
//! rkyv's validation only proves the bytes are a well-formed archive), then
//! rkyv's validation (`bytecheck`), then the state's own rules while the
//! market is rebuilt. Each failure is an error naming the file.
//!
//! # Names and writing
//!
//! `checkpoint-<block number, 20 digits>.ckpt`, so names sort by block. A
//! checkpoint is written to a hidden temporary name in the same directory,
//! synced, renamed over its final name and the directory synced: a crash
//! leaves either the whole file or none (and a stale temporary file, which
//! the next prune removes). The archive is streamed into the file as rkyv
//! makes it, its checksum taken on the way and the header written last, so
//! writing a checkpoint never holds its whole archive in memory (tens of
//! MB with a mainnet-size book) beside the state it was made from.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::error::CheckpointError;
use super::state::{
    self, ArchivedCheckpointState, CheckpointState, FORMAT_VERSION, archived_block_number,
};
use super::stream::Streamed;
use crate::market::{Market, Needs};

/// Bytes of the header.
pub const HEADER_LEN: usize = 64;

/// The first eight bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"L1GCKPT\0";

/// The file-name prefix and suffix of a checkpoint.
const PREFIX: &str = "checkpoint-";
const SUFFIX: &str = ".ckpt";
/// Temporary files: `.checkpoint-<block>.ckpt.tmp`.
const TEMP_SUFFIX: &str = ".tmp";

/// The name of the checkpoint at `block_number`.
pub fn file_name(block_number: u64) -> String {
    format!("{PREFIX}{block_number:020}{SUFFIX}")
}

/// The block number a checkpoint's file name carries.
pub fn block_of_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The fixed-size header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// The last block folded.
    pub block_number: u64,
    /// Its time, Unix ms.
    pub time_ms: i64,
    /// Bytes of the body.
    pub body_len: u64,
    /// CRC-32 of the body.
    pub crc: u32,
    /// The state's `needs` bits.
    pub needs: u32,
}

impl Header {
    /// The header of a checkpoint at `block_number` (its time and needs
    /// bits) whose body is `body_len` bytes with CRC-32 `crc`.
    fn of(block_number: u64, time_ms: i64, needs: u8, body_len: u64, crc: u32) -> Self {
        Self {
            version: FORMAT_VERSION,
            block_number,
            time_ms,
            body_len,
            crc,
            needs: u32::from(needs),
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        out[16..24].copy_from_slice(&self.block_number.to_le_bytes());
        out[24..32].copy_from_slice(&self.time_ms.to_le_bytes());
        out[32..40].copy_from_slice(&self.body_len.to_le_bytes());
        out[40..44].copy_from_slice(&self.crc.to_le_bytes());
        out[44..48].copy_from_slice(&self.needs.to_le_bytes());
        out
    }

    /// Reads the header of `bytes` (the whole file), checking the magic and
    /// the format version first, then the header length and the file's
    /// length.
    ///
    /// # Errors
    /// [`CheckpointError::NotACheckpoint`], [`CheckpointError::Version`] or
    /// [`CheckpointError::Length`], naming `path`.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let not_one = || CheckpointError::NotACheckpoint {
            path: path.to_path_buf(),
        };
        if bytes.get(0..8) != Some(&MAGIC[..]) {
            return Err(not_one());
        }
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
        };
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let version = u32_at(8).ok_or_else(not_one)?;
        if version != FORMAT_VERSION {
            return Err(CheckpointError::Version {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let header_len = u32_at(12).ok_or_else(|| length(path, HEADER_LEN as u64, bytes))?;
        if header_len as usize != HEADER_LEN || bytes.len() < HEADER_LEN {
            return Err(length(path, HEADER_LEN as u64, bytes));
        }
        let header = Header {
            version,
            block_number: u64_at(16).unwrap_or_default(),
            time_ms: u64_at(24).unwrap_or_default() as i64,
            body_len: u64_at(32).unwrap_or_default(),
            crc: u32_at(40).unwrap_or_default(),
            needs: u32_at(44).unwrap_or_default(),
        };
        let expected = header.body_len.saturating_add(HEADER_LEN as u64);
        if expected != bytes.len() as u64 {
            return Err(length(path, expected, bytes));
        }
        Ok(header)
    }
}

fn length(path: &Path, expected: u64, bytes: &[u8]) -> CheckpointError {
    CheckpointError::Length {
        path: path.to_path_buf(),
        expected,
        found: bytes.len() as u64,
    }
}

/// The header of `state`'s checkpoint whose body is `body_len` bytes with
/// CRC-32 `crc`.
fn header_of(state: &CheckpointState, body_len: u64, crc: u32) -> Header {
    Header::of(
        state.block_number(),
        state.time_ms,
        state.needs,
        body_len,
        crc,
    )
}

/// Serialises `state` into one buffer: the header, then the archive (for
/// tools and tests; [`write`] streams it into its file instead).
///
/// # Errors
/// [`CheckpointError::Serialize`] when rkyv cannot serialise it.
pub fn encode(state: &CheckpointState) -> Result<AlignedVec, CheckpointError> {
    // Room for the whole archive up front (orders are ~96 bytes archived),
    // so the buffer is not copied while it grows.
    let mut buffer = AlignedVec::<16>::with_capacity(
        HEADER_LEN + 104 * state.order_count() + (state.texts.len() + 1) * 64 + (1 << 20),
    );
    buffer.extend_from_slice(&[0u8; HEADER_LEN]);
    let mut buffer = rkyv::api::high::to_bytes_in::<_, rancor::Error>(state, buffer)
        .map_err(|e| CheckpointError::Serialize(e.to_string()))?;
    let body = &buffer[HEADER_LEN..];
    let header = header_of(state, body.len() as u64, crc32fast::hash(body));
    buffer[..HEADER_LEN].copy_from_slice(&header.encode());
    Ok(buffer)
}

/// Bytes buffered between rkyv and the checkpoint file.
const WRITE_BUFFER: usize = 1 << 20;

/// A writer that sums what passes through it: its CRC-32 and length, and
/// the first write error (rkyv reports it only as its own).
pub(super) struct Summed<W> {
    pub(super) inner: W,
    crc: crc32fast::Hasher,
    pub(super) len: u64,
    pub(super) failed: Option<std::io::Error>,
}

impl<W> Summed<W> {
    pub(super) fn new(inner: W) -> Self {
        Self {
            inner,
            crc: crc32fast::Hasher::new(),
            len: 0,
            failed: None,
        }
    }

    /// The CRC-32 of what passed so far.
    pub(super) fn crc(&self) -> u32 {
        self.crc.clone().finalize()
    }
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.inner.write(bytes) {
            Ok(n) => {
                self.crc.update(&bytes[..n]);
                self.len += n as u64;
                Ok(n)
            }
            Err(error) => {
                let kind = error.kind();
                self.failed.get_or_insert(error);
                Err(kind.into())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `state`'s checkpoint into `file` (new and empty, at `path`): a
/// blank header, the archive as rkyv makes it (the same bytes [`encode`]
/// makes, positions counted from the file's start), then the header over
/// the blank. Returns the file's length.
fn stream_into(state: &CheckpointState, file: &File, path: &Path) -> Result<u64, CheckpointError> {
    let io = |e: &std::io::Error| CheckpointError::io(path, "write", e);
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, file);
    out.write_all(&[0u8; HEADER_LEN]).map_err(|e| io(&e))?;
    let summed = Summed::new(out);
    let writer = rkyv::ser::writer::IoWriter::with_pos(summed, HEADER_LEN);
    let mut summed = match rkyv::api::high::to_bytes_in::<_, rancor::Error>(state, writer) {
        Ok(writer) => writer.into_inner(),
        Err(error) => return Err(CheckpointError::Serialize(error.to_string())),
    };
    if let Some(error) = summed.failed.take() {
        return Err(io(&error));
    }
    summed.flush().map_err(|e| io(&e))?;
    let header = header_of(state, summed.len, summed.crc());
    file.write_all_at(&header.encode(), 0).map_err(|e| io(&e))?;
    Ok(HEADER_LEN as u64 + summed.len)
}

/// Checks the header, the length and the checksum of a checkpoint's bytes
/// and validates the archive; returns the header and the archived state.
///
/// # Errors
/// As [`Header::decode`]; [`CheckpointError::Checksum`], or
/// [`CheckpointError::Damaged`] when rkyv's validation fails.
pub fn validate<'b>(
    bytes: &'b [u8],
    path: &Path,
) -> Result<(Header, &'b ArchivedCheckpointState), CheckpointError> {
    let header = Header::decode(bytes, path)?;
    let body = &bytes[HEADER_LEN..];
    if crc32fast::hash(body) != header.crc {
        return Err(CheckpointError::Checksum {
            path: path.to_path_buf(),
        });
    }
    let archived = rkyv::access::<ArchivedCheckpointState, rancor::Error>(body).map_err(|e| {
        CheckpointError::Damaged {
            path: path.to_path_buf(),
            reason: format!("invalid archive: {e}"),
        }
    })?;
    let in_body = archived_block_number(archived);
    if in_body != header.block_number {
        return Err(CheckpointError::Damaged {
            path: path.to_path_buf(),
            reason: format!(
                "header says block {}, the state block {in_body}",
                header.block_number
            ),
        });
    }
    Ok((header, archived))
}

/// Rebuilds the market a checkpoint's bytes hold (see [`validate`]),
/// folding `needs` from here on. Bytes that are not aligned for rkyv are
/// copied once first (a mapping always is).
///
/// # Errors
/// As [`validate`]; [`CheckpointError::Needs`] when the checkpoint folded
/// less than `needs` (or kept only some coins' books while `needs` has
/// books), [`CheckpointError::Damaged`] when the state breaks its rules.
pub fn decode(bytes: &[u8], needs: Needs, path: &Path) -> Result<Market, CheckpointError> {
    decode_releasing(bytes, needs, path, &mut || {}, &mut |_| {})
}

/// [`decode`], telling `read_below` as the books are rebuilt how far into
/// `bytes` everything is read (an offset, rising): the archive lays the
/// books out first, one after another, so a caller holding the bytes in a
/// mapping can let go of the pages behind.
fn decode_releasing(
    bytes: &[u8],
    needs: Needs,
    path: &Path,
    validated: &mut dyn FnMut(),
    read_below: &mut dyn FnMut(usize),
) -> Result<Market, CheckpointError> {
    let aligned;
    let bytes = if (bytes.as_ptr() as usize).is_multiple_of(16) {
        bytes
    } else {
        let mut copy = AlignedVec::<16>::with_capacity(bytes.len());
        copy.extend_from_slice(bytes);
        aligned = copy;
        &aligned[..]
    };
    let (_, archived) = validate(bytes, path)?;
    let held = state::held_needs(archived);
    let some_books = needs.books && archived.book_coins.is_some();
    if !state::covers(held, needs) || some_books {
        return Err(CheckpointError::Needs {
            path: path.to_path_buf(),
            held: if some_books {
                "the books of some coins only".to_owned()
            } else {
                state::describe(held)
            },
            wanted: state::describe(needs),
        });
    }
    validated();
    let start = bytes.as_ptr() as usize;
    let mut read_to = |end: *const u8| read_below((end as usize).saturating_sub(start));
    state::restore(archived, needs, &mut read_to).map_err(|damage| CheckpointError::Damaged {
        path: path.to_path_buf(),
        reason: damage.to_string(),
    })
}

/// A market rebuilt from a checkpoint file.
#[derive(Debug)]
pub struct Loaded {
    /// The market, as it stood after the checkpoint's block.
    pub market: Market,
    /// The file.
    pub path: PathBuf,
    /// The last block folded into it.
    pub block_number: u64,
    /// That block's time, Unix ms.
    pub time_ms: i64,
    /// Bytes of the file.
    pub bytes: u64,
}

/// Maps the checkpoint at `path`, checks and validates it, and rebuilds its
/// market, folding `needs` from here on.
///
/// # Errors
/// [`CheckpointError::Io`] when it cannot be opened or mapped; otherwise as
/// [`decode`].
pub fn load(path: &Path, needs: Needs) -> Result<Loaded, CheckpointError> {
    let file = File::open(path).map_err(|e| CheckpointError::io(path, "open", &e))?;
    let len = file
        .metadata()
        .map_err(|e| CheckpointError::io(path, "stat", &e))?
        .len();
    if len < HEADER_LEN as u64 {
        let mut head = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut head)
            .map_err(|e| CheckpointError::io(path, "read", &e))?;
        Header::decode(&head, path)?;
        return Err(length(path, HEADER_LEN as u64, &head));
    }
    let mapped = feeds::MappedFile::of(&file, len, path).map_err(|e| CheckpointError::Io {
        path: path.to_path_buf(),
        op: "map",
        message: e.to_string(),
    })?;
    let header = Header::decode(mapped.bytes(), path)?;
    let market = decode_mapped(&mapped, needs, path, &mut |_| {})?;
    Ok(Loaded {
        market,
        path: path.to_path_buf(),
        block_number: header.block_number,
        time_ms: header.time_ms,
        bytes: len,
    })
}

/// [`decode`] of a mapped file: the checksum and the validation read it
/// whole, then its pages are let go of, and those of what is rebuilt as the
/// rebuild goes on ([`RELEASE_STEP`] at a time, then `released` is told how
/// far): the file (50 MB for a mainnet-size book, more with the positions
/// of hours of fills) and the market it becomes are not both resident at
/// once.
fn decode_mapped(
    mapped: &feeds::MappedFile,
    needs: Needs,
    path: &Path,
    released: &mut dyn FnMut(usize),
) -> Result<Market, CheckpointError> {
    let mut below_done = 0;
    decode_releasing(
        mapped.bytes(),
        needs,
        path,
        &mut || mapped.release_below(mapped.bytes().len()),
        &mut |below| {
            if below >= below_done + RELEASE_STEP {
                mapped.release_below(below);
                below_done = below;
                released(below);
            }
        },
    )
}

/// How much more of a checkpoint is rebuilt between two releases of its
/// pages ([`load`]).
const RELEASE_STEP: usize = 4 << 20;

/// A checkpoint file in a directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CheckpointFile {
    /// Its block number (from its name).
    pub block_number: u64,
    /// The file.
    pub path: PathBuf,
}

/// The checkpoints in `dir`, oldest first (an absent directory has none).
/// Files with other names are ignored.
///
/// # Errors
/// [`CheckpointError::Io`] when the directory cannot be listed.
pub fn list(dir: &Path) -> Result<Vec<CheckpointFile>, CheckpointError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CheckpointError::io(dir, "list", &e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io(dir, "list", &e))?;
        let name = entry.file_name();
        if let Some(block_number) = name.to_str().and_then(block_of_name) {
            files.push(CheckpointFile {
                block_number,
                path: entry.path(),
            });
        }
    }
    files.sort();
    Ok(files)
}

/// What [`write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The checkpoint written.
    pub path: PathBuf,
    /// Its block number.
    pub block_number: u64,
    /// Its size.
    pub bytes: u64,
    /// Time until the whole archive was in the file: serialising into it
    /// ([`write`]), or writing the pieces as they came ([`write_pieces`]).
    pub serialize: Duration,
    /// Time spent syncing and renaming.
    pub write: Duration,
}

/// Writes `state` into `dir` (created if missing) as
/// [`file_name`]`(block)`, atomically: a temporary file, synced, renamed
/// into place, the directory synced.
///
/// # Errors
/// [`CheckpointError::Serialize`], or [`CheckpointError::Io`] naming the
/// file or directory that failed.
pub fn write(dir: &Path, state: &CheckpointState) -> Result<Written, CheckpointError> {
    write_with(dir, state.block_number(), |file, temp| {
        stream_into(state, file, temp)
    })
}

/// A piece of a checkpoint serialised elsewhere ([`super::stream`]): the
/// archive's bytes in order, then its header.
#[derive(Debug)]
pub enum Piece {
    /// The next bytes of the archive.
    Bytes(Vec<u8>),
    /// The archive is whole: its header.
    End(Header),
    /// The archive could not be made: why.
    Failed(String),
}

/// The header of a streamed archive of `body_len` bytes with CRC-32 `crc`.
pub fn header_of_streamed(streamed: &Streamed, body_len: u64, crc: u32) -> Header {
    Header::of(
        streamed.block_number,
        streamed.time_ms,
        streamed.needs,
        body_len,
        crc,
    )
}

/// Writes the checkpoint at `block_number` whose [`Piece`]s arrive on
/// `pieces`, as [`write`] does: a temporary file, synced, renamed into
/// place. Pieces that stop before their header (the serialising side
/// failed) leave no file.
///
/// # Errors
/// [`CheckpointError::Io`] naming the file; [`CheckpointError::Serialize`]
/// when the pieces stop before the header.
pub fn write_pieces(
    dir: &Path,
    block_number: u64,
    pieces: &std::sync::mpsc::Receiver<Piece>,
) -> Result<Written, CheckpointError> {
    write_with(dir, block_number, |mut file, temp| {
        let io = |e: &std::io::Error| CheckpointError::io(temp, "write", e);
        file.write_all(&[0u8; HEADER_LEN]).map_err(|e| io(&e))?;
        loop {
            match pieces.recv() {
                Ok(Piece::Bytes(bytes)) => file.write_all(&bytes).map_err(|e| io(&e))?,
                Ok(Piece::End(header)) => {
                    file.write_all_at(&header.encode(), 0).map_err(|e| io(&e))?;
                    return Ok(HEADER_LEN as u64 + header.body_len);
                }
                Ok(Piece::Failed(why)) => return Err(CheckpointError::Serialize(why)),
                Err(_) => {
                    return Err(CheckpointError::Serialize(
                        "the archive stopped before it was whole".to_owned(),
                    ));
                }
            }
        }
    })
}

/// Writes the checkpoint at `block_number` into `dir` (created if
/// missing) atomically: `fill` writes the whole file into a temporary one
/// (returning its length), which is synced and renamed into place, the
/// directory synced. A failure leaves no file.
fn write_with(
    dir: &Path,
    block_number: u64,
    fill: impl FnOnce(&File, &Path) -> Result<u64, CheckpointError>,
) -> Result<Written, CheckpointError> {
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, "create", &e))?;
    let name = file_name(block_number);
    let path = dir.join(&name);
    let temp = dir.join(format!(".{name}{TEMP_SUFFIX}"));
    let mut serialize = Duration::ZERO;
    let started = Instant::now();
    let result = (|| {
        let file = File::create(&temp).map_err(|e| CheckpointError::io(&temp, "create", &e))?;
        let bytes = fill(&file, &temp)?;
        serialize = started.elapsed();
        file.sync_all()
            .map_err(|e| CheckpointError::io(&temp, "sync", &e))?;
        drop(file);
        std::fs::rename(&temp, &path).map_err(|e| CheckpointError::io(&path, "rename", &e))?;
        sync_dir(dir)?;
        Ok(bytes)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    let bytes = result?;
    Ok(Written {
        path,
        block_number,
        bytes,
        serialize,
        write: started.elapsed().saturating_sub(serialize),
    })
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| CheckpointError::io(dir, "sync", &e))
}

/// Keeps the newest `keep` checkpoints in `dir` (at least one) and removes
/// the others and any temporary file a crash left; returns what it removed.
///
/// # Errors
/// [`CheckpointError::Io`] when the directory cannot be listed or a file
/// cannot be removed.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, CheckpointError> {
    let files = list(dir)?;
    let excess = files.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for file in files.into_iter().take(excess) {
        std::fs::remove_file(&file.path)
            .map_err(|e| CheckpointError::io(&file.path, "remove", &e))?;
        removed.push(file.path);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::io(dir, "list", &e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let stale = name.to_str().is_some_and(|name| {
            name.strip_prefix('.')
                .and_then(|rest| rest.strip_suffix(TEMP_SUFFIX))
                .and_then(block_of_name)
                .is_some()
        });
        if stale {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| CheckpointError::io(&path, "remove", &e))?;
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Which checkpoints a fold may start from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// Only checkpoints past this block (the newest node snapshot's height:
    /// an older checkpoint is not worth more than the snapshot).
    pub above: Option<u64>,
    /// Only checkpoints before this block (where the fold must start for
    /// another reason, such as a candle store's resume point).
    pub below: Option<u64>,
    /// A block whose checkpoint is usable though not before `below`: the
    /// candle store closed every candle up to it and continues from the
    /// candles the checkpoint carries (a checkpoint taken at a stop).
    pub carried_at: Option<u64>,
    /// The first block from which every file the fold reads is on disk: a
    /// checkpoint at `H` needs block `H + 1` there.
    pub files_from: Option<u64>,
}

/// Why a checkpoint was passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassedOver {
    /// Not past the node snapshot the fold would start from otherwise.
    NotNewer {
        /// The snapshot's height.
        snapshot: u64,
    },
    /// Not before where the fold must start.
    TooLate {
        /// The first block the fold must fold.
        start: u64,
    },
    /// The node's files no longer reach back to the block after it.
    FilesPruned {
        /// The first block every file holds now.
        files_from: u64,
    },
    /// It could not be used.
    Refused(CheckpointError),
}

impl std::fmt::Display for PassedOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassedOver::NotNewer { snapshot } => {
                write!(f, "not newer than the node snapshot at {snapshot}")
            }
            PassedOver::TooLate { start } => write!(
                f,
                "past block {start}, where the fold must start (the candle store's resume point)"
            ),
            PassedOver::FilesPruned { files_from } => write!(
                f,
                "the node's files no longer reach back to the block after it (they start at {files_from})"
            ),
            PassedOver::Refused(error) => write!(f, "{error}"),
        }
    }
}

/// What [`newest_usable`] found.
#[derive(Debug, Default)]
pub struct Choice {
    /// The newest checkpoint within the bounds that loaded.
    pub loaded: Option<Loaded>,
    /// Every newer checkpoint passed over, newest first, with why.
    pub passed_over: Vec<(CheckpointFile, PassedOver)>,
    /// How long loading took (the successful load and the failed ones).
    pub elapsed: Duration,
}

/// Loads the newest checkpoint in `dir` within `bounds` that is whole and
/// holds `needs`; a damaged one, or one of another format version, is
/// passed over (and said why) for the next older one.
///
/// # Errors
/// [`CheckpointError::Io`] when the directory cannot be listed.
pub fn newest_usable(dir: &Path, needs: Needs, bounds: Bounds) -> Result<Choice, CheckpointError> {
    let started = Instant::now();
    let mut choice = Choice::default();
    for file in list(dir)?.into_iter().rev() {
        let height = file.block_number;
        let too_late = bounds
            .below
            .filter(|&start| height >= start && bounds.carried_at != Some(height));
        let not_newer = bounds.above.filter(|&snapshot| height <= snapshot);
        let pruned = bounds
            .files_from
            .filter(|&first| first > height.saturating_add(1));
        let why = match (too_late, not_newer, pruned) {
            (Some(start), _, _) => Some(PassedOver::TooLate { start }),
            (None, Some(snapshot), _) => Some(PassedOver::NotNewer { snapshot }),
            (None, None, Some(files_from)) => Some(PassedOver::FilesPruned { files_from }),
            (None, None, None) => None,
        };
        let stop = matches!(
            why,
            Some(PassedOver::NotNewer { .. } | PassedOver::FilesPruned { .. })
        );
        if let Some(why) = why {
            // Older checkpoints are no newer than the snapshot either, nor
            // any better covered by the files.
            choice.passed_over.push((file, why));
            if stop {
                break;
            }
            continue;
        }
        match load(&file.path, needs) {
            Ok(loaded) => {
                choice.loaded = Some(loaded);
                break;
            }
            Err(error) => choice.passed_over.push((file, PassedOver::Refused(error))),
        }
    }
    choice.elapsed = started.elapsed();
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::state::{BookState, DecimalState, LevelState, OrderState, capture};

    /// A state of `books` books of `orders` orders each, resting at one bid.
    fn deep_state(books: usize, orders: u64) -> CheckpointState {
        let mut state = capture(&Market::new(Needs::ALL));
        state.texts = [
            "0x0000000000000000000000000000000000000001",
            "N/A",
            "Limit",
            "Gtc",
        ]
        .map(String::from)
        .to_vec();
        for k in 0..books {
            state.books.push(BookState {
                coin: format!("COIN{k:03}"),
                levels: vec![LevelState {
                    bid: true,
                    px: DecimalState {
                        units: 100,
                        scale: 0,
                    },
                    total: None,
                    orders: orders as u32,
                }],
                orders: (0..orders)
                    .map(|oid| OrderState {
                        oid: k as u64 * orders + oid,
                        timestamp: 1,
                        limit_px: 100,
                        sz: 1,
                        trigger_px: 0,
                        orig_sz: 1,
                        user: 0,
                        trigger_condition: 1,
                        order_type: 2,
                        tif: 3,
                        cloid: u32::MAX,
                        cloid_bytes: [0; 16],
                        scales: [0; 4],
                        flags: 0,
                    })
                    .collect(),
            });
        }
        state
    }

    #[test]
    fn a_load_lets_go_of_the_pages_of_the_books_it_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        // About 29 MB of orders over eight books.
        let written = write(dir.path(), &deep_state(8, 37_500)).unwrap();
        let mapped = feeds::MappedFile::open(&written.path).unwrap();
        // Read once, as the checksum reads it first.
        std::hint::black_box(crc32fast::hash(mapped.bytes()));
        let whole = feeds::resident::of(&written.path).unwrap() / 1024;
        assert!(
            whole * 1024 >= written.bytes - 4096,
            "read whole: {whole} KiB"
        );
        let mut seen = Vec::new();
        let market = decode_mapped(&mapped, Needs::ALL, &written.path, &mut |below| {
            seen.push((below, feeds::resident::of(&written.path).unwrap() / 1024));
        })
        .unwrap();
        assert_eq!(market.books().len(), 8);
        assert!(seen.len() >= 4, "{seen:?}");
        for (below, resident) in seen {
            // What lies past `below`, and no more than the pages around it
            // (the one holding `below` is kept).
            let left = (written.bytes - below as u64).div_ceil(1024) + 8;
            assert!(
                resident <= left,
                "{resident} KiB resident past {below}: {left} KiB left"
            );
            // What the checksum and the validation read is let go of before
            // the rebuild: no more than about a step's pages are resident.
            let step = (2 * RELEASE_STEP / 1024) as u64;
            assert!(resident <= step, "{resident} KiB resident at {below}");
        }
    }
}
