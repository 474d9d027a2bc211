//! Compressed node files: the codec a file name announces, and streaming
//! decompression that says where a damaged file stops being readable.
//!
//! An hour file may be stored compressed, `H.lz4` (the LZ4 frame format of
//! the exchange's public archive and of the `lz4` tool), `H.zst` (zstd) or
//! `H.gz` (gzip), beside or instead of the plain `H` the node writes. A
//! compressed file is read whole, front to back, as a finished file: it
//! never grows the way the node's newest plain file does. A file may hold
//! several frames (members) one after another; LZ4 skippable frames are
//! stepped over.
//!
//! [`decompress`] lends each decoded piece; [`decompress_owned`] hands it
//! over in a buffer of its own, decoding an LZ4 file of independent blocks
//! block by block straight into such buffers (a reader that keeps the
//! bytes, as the candle import does, copies nothing).
//!
//! # Damage
//!
//! [`decompress`] hands out decoded bytes as it goes and stops at the first
//! thing it cannot decode, saying what and where ([`Damage`]): the
//! compressed file's byte offset and how many decoded bytes came before.
//!
//! - **Truncated** (the file ends inside a frame or a block): every block
//!   decoded before the cut is whole and is kept.
//! - **Corrupt** (a block or header that does not decode): the blocks
//!   before it decoded and are kept.
//! - **Checksum mismatch** (every block decoded, but the frame's content
//!   checksum disagrees): some decoded byte is wrong and nothing says which,
//!   so nothing of the file can be trusted; callers keep none of it.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::FeedError;
pub use crate::error::{Damage, DamageKind};

/// Decoded bytes buffered per step for the decoders without an output
/// buffer of their own (zstd, gzip); LZ4 hands over each block whole.
const READ_CHUNK: usize = 1 << 20;

/// Damaged files found by this process (see [`damaged_files`]).
static DAMAGED_FILES: AtomicU64 = AtomicU64::new(0);

/// How many compressed files this process found damaged so far (each file,
/// of each size it had, counted once).
pub fn damaged_files() -> u64 {
    DAMAGED_FILES.load(Ordering::Relaxed)
}

pub(crate) fn count_damaged_file() {
    DAMAGED_FILES.fetch_add(1, Ordering::Relaxed);
}

/// A compression format of node files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    /// LZ4 frame format (`.lz4`), one or more frames.
    Lz4,
    /// Zstandard (`.zst`), one or more frames.
    Zstd,
    /// gzip (`.gz`), one or more members.
    Gzip,
}

impl Codec {
    /// Every codec.
    pub const ALL: [Codec; 3] = [Codec::Lz4, Codec::Zstd, Codec::Gzip];

    /// The file-name extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zst",
            Codec::Gzip => "gz",
        }
    }

    /// A file name split into its stem and the codec its extension names:
    /// `"9.lz4"` is `("9", Some(Lz4))`, `"9"` is `("9", None)`; an unknown
    /// extension is part of the stem.
    pub fn split_name(name: &str) -> (&str, Option<Codec>) {
        for codec in Codec::ALL {
            if let Some(stem) = name
                .strip_suffix(codec.extension())
                .and_then(|rest| rest.strip_suffix('.'))
            {
                return (stem, Some(codec));
            }
        }
        (name, None)
    }
}

/// What [`decompress`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Decoded bytes handed to the sink.
    pub len: u64,
    /// Why decoding stopped before the end of the file, if it did.
    pub damage: Option<Damage>,
}

/// Decompresses the file at `path` as `codec`, handing the decoded bytes
/// to `sink` piece by piece (memory stays bounded whatever the file's size).
/// Decoding stops at the first damage, which is returned rather than raised.
///
/// # Errors
/// [`FeedError::Io`] when the file cannot be opened or read (op `read`), or
/// when `sink` fails (op `spool`).
pub fn decompress(
    path: &Path,
    codec: Codec,
    mut sink: impl FnMut(&[u8]) -> io::Result<()>,
) -> Result<Decoded, FeedError> {
    let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
    let file_len = file
        .metadata()
        .map_err(|e| FeedError::io("read", path, &e))?
        .len();
    let mut counted = Counted {
        inner: file,
        consumed: 0,
        failed: None,
    };
    let mut len = 0u64;
    let damage = loop {
        // The sink is handed the decoder's own output buffer where it has
        // one (LZ4: a whole block), else a buffer the output is read into.
        let mut decoder: Box<dyn BufRead + '_> = match codec {
            Codec::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(&mut counted)),
            Codec::Zstd => Box::new(io::BufReader::with_capacity(
                READ_CHUNK,
                zstd::stream::read::Decoder::new(&mut counted)
                    .map_err(|e| FeedError::io("read", path, &e))?,
            )),
            Codec::Gzip => Box::new(io::BufReader::with_capacity(
                READ_CHUNK,
                flate2::read::MultiGzDecoder::new(io::BufReader::new(&mut counted)),
            )),
        };
        let stopped = loop {
            match decoder.fill_buf() {
                Ok([]) => break None,
                Ok(piece) => {
                    let n = piece.len();
                    sink(piece).map_err(|e| FeedError::io("spool", path, &e))?;
                    decoder.consume(n);
                    len += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        drop(decoder);
        if codec != Codec::Lz4 {
            break stopped;
        }
        // The LZ4 decoder stops at the end of each frame, and after the
        // header of a skippable one: the next frame is decoded as long as
        // the file goes on (it reads no further ahead than it needs).
        let Some(size) = stopped.as_ref().and_then(lz4_skippable) else {
            if stopped.is_none() && counted.consumed < file_len {
                continue;
            }
            break stopped;
        };
        match io::copy(&mut (&mut counted).take(u64::from(size)), &mut io::sink()) {
            Ok(skipped) if skipped == u64::from(size) => {}
            Ok(_) => {
                break Some(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ends inside a skippable frame",
                ));
            }
            Err(error) => break Some(error),
        }
    };
    if let Some(error) = counted.failed.take() {
        return Err(FeedError::io("read", path, &error));
    }
    let mut damage = damage.map(|error| Damage {
        kind: classify(&error),
        compressed_offset: counted.consumed,
        decoded_offset: len,
        reason: error.to_string(),
    });
    if damage.is_none() && codec == Codec::Lz4 {
        // The decoder takes a file that ends between two blocks for a
        // finished frame; the frames' own structure says whether it is.
        let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
        let walked = lz4_unfinished_frame(io::BufReader::new(file), file_len)
            .map_err(|e| FeedError::io("read", path, &e))?;
        damage = walked.map(|(offset, reason)| Damage {
            kind: DamageKind::Truncated,
            compressed_offset: offset,
            decoded_offset: len,
            reason: reason.to_owned(),
        });
    }
    Ok(Decoded { len, damage })
}

/// [`decompress`], each piece handed over as a buffer of its own that the
/// sink may keep: no copy between the decoder and what the sink builds.
///
/// A file of LZ4 frames whose blocks are independent (the `lz4` tool's
/// default, and the public archive's files) is decoded block by block, each
/// block straight into a new buffer ([`lz4_block_by_block`]). Anything else
/// — zstd, gzip, linked LZ4 blocks, a file whose frames do not walk whole —
/// goes through [`decompress`], each piece copied into a buffer. Damage is
/// found and reported as [`decompress`] reports it.
///
/// # Errors
/// As [`decompress`].
pub fn decompress_owned(
    path: &Path,
    codec: Codec,
    mut sink: impl FnMut(Vec<u8>) -> io::Result<()>,
) -> Result<Decoded, FeedError> {
    if codec == Codec::Lz4 && lz4_walk(path)?.independent {
        return lz4_block_by_block(path, sink);
    }
    decompress(path, codec, |piece| sink(piece.to_vec()))
}

/// Why [`lz4_block_by_block`] stopped before the end of a file.
enum Lz4Stop {
    /// The file could not be read.
    Read(io::Error),
    /// The sink failed.
    Spool(io::Error),
    /// The bytes are damaged: how, and what was found.
    Damaged(DamageKind, &'static str),
}

/// The LZ4 frames of a file, each block decoded into a buffer of its own
/// and handed to `sink` (see [`decompress_owned`]): frames of independent
/// blocks, as [`lz4_walk`] found them. Checks what the frame decoder
/// checks: the descriptor's checksum, each block's size and checksum, the
/// content size and checksum.
fn lz4_block_by_block(
    path: &Path,
    mut sink: impl FnMut(Vec<u8>) -> io::Result<()>,
) -> Result<Decoded, FeedError> {
    let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
    let mut input = Lz4Input {
        file: io::BufReader::new(file),
        at: 0,
        block: Vec::new(),
    };
    let mut len = 0u64;
    let mut counted = |out: Vec<u8>| {
        len += out.len() as u64;
        sink(out)
    };
    let stop = loop {
        match input.frame(&mut counted) {
            Ok(true) => {}
            Ok(false) => break None,
            Err(stop) => break Some(stop),
        }
    };
    let damage = match stop {
        None => None,
        Some(Lz4Stop::Read(error)) => return Err(FeedError::io("read", path, &error)),
        Some(Lz4Stop::Spool(error)) => return Err(FeedError::io("spool", path, &error)),
        Some(Lz4Stop::Damaged(kind, reason)) => Some(Damage {
            kind,
            compressed_offset: input.at,
            decoded_offset: len,
            reason: reason.to_owned(),
        }),
    };
    Ok(Decoded { len, damage })
}

/// A compressed file read frame by frame, block by block.
struct Lz4Input<R> {
    file: R,
    /// Bytes read from the file.
    at: u64,
    /// The compressed block being read (kept at its largest size).
    block: Vec<u8>,
}

impl<R: Read> Lz4Input<R> {
    /// Fills `buf` from the file; `what` is missing when it ends first.
    fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), Lz4Stop> {
        let n = read_full(&mut self.file, buf).map_err(Lz4Stop::Read)?;
        self.at += n as u64;
        if n < buf.len() {
            return Err(Lz4Stop::Damaged(DamageKind::Truncated, what));
        }
        Ok(())
    }

    fn word(&mut self, what: &'static str) -> Result<u32, Lz4Stop> {
        let mut word = [0u8; 4];
        self.exact(&mut word, what)?;
        Ok(u32::from_le_bytes(word))
    }

    /// Reads the next frame, handing its blocks to `sink`; `false` when the
    /// file ends where a frame would begin.
    fn frame(&mut self, sink: &mut impl FnMut(Vec<u8>) -> io::Result<()>) -> Result<bool, Lz4Stop> {
        let corrupt = |reason| Lz4Stop::Damaged(DamageKind::Corrupt, reason);
        let mut magic = [0u8; 4];
        let n = read_full(&mut self.file, &mut magic).map_err(Lz4Stop::Read)?;
        self.at += n as u64;
        match n {
            0 => return Ok(false),
            4 => {}
            _ => {
                return Err(Lz4Stop::Damaged(
                    DamageKind::Truncated,
                    "the file ends inside a frame's magic number",
                ));
            }
        }
        let magic = u32::from_le_bytes(magic);
        if magic & LZ4_SKIPPABLE_MASK == LZ4_SKIPPABLE_MAGIC {
            let size = self.word("the file ends inside a skippable frame")?;
            let skipped = io::copy(&mut (&mut self.file).take(u64::from(size)), &mut io::sink())
                .map_err(Lz4Stop::Read)?;
            self.at += skipped;
            if skipped < u64::from(size) {
                return Err(Lz4Stop::Damaged(
                    DamageKind::Truncated,
                    "the file ends inside a skippable frame",
                ));
            }
            return Ok(true);
        }
        if magic != LZ4_MAGIC {
            return Err(corrupt("bytes that are not an LZ4 frame"));
        }
        // FLG, BD, the content size when the flags say so, then the
        // descriptor's checksum byte.
        let mut descriptor = [0u8; 10];
        self.exact(
            &mut descriptor[..2],
            "the file ends inside a frame descriptor",
        )?;
        let flags = descriptor[0];
        let mut end = 2;
        if flags & 0x08 != 0 {
            self.exact(
                &mut descriptor[2..10],
                "the file ends inside a frame descriptor",
            )?;
            end = 10;
        }
        let mut check = [0u8; 1];
        self.exact(&mut check, "the file ends inside a frame descriptor")?;
        if (twox_hash::XxHash32::oneshot(0, &descriptor[..end]) >> 8) as u8 != check[0] {
            return Err(corrupt("the frame descriptor's checksum does not match"));
        }
        if flags >> 6 != 1 || flags & 0x20 == 0 || flags & 0x01 != 0 {
            return Err(corrupt("a frame this reader cannot decode block by block"));
        }
        let max = match (descriptor[1] >> 4) & 0x7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => return Err(corrupt("a frame's block size is not one of the format's")),
        };
        let content_size = (end == 10).then(|| {
            let mut size = [0u8; 8];
            size.copy_from_slice(&descriptor[2..10]);
            u64::from_le_bytes(size)
        });
        let mut content = (flags & 0x04 != 0).then(|| twox_hash::XxHash32::with_seed(0));
        let mut frame_len = 0u64;
        loop {
            let word = self.word("the file ends before the frame's end mark")?;
            if word == 0 {
                break;
            }
            let size = (word & 0x7FFF_FFFF) as usize;
            if size > max {
                return Err(corrupt("a block larger than its frame allows"));
            }
            if self.block.len() < size {
                self.block.resize(size, 0);
            }
            let mut block = std::mem::take(&mut self.block);
            let read = self.exact(&mut block[..size], "the file ends inside a block");
            self.block = block;
            read?;
            if flags & 0x10 != 0 {
                let sum = self.word("the file ends inside a block's checksum")?;
                if twox_hash::XxHash32::oneshot(0, &self.block[..size]) != sum {
                    return Err(corrupt("a block's checksum does not match"));
                }
            }
            let block = &self.block[..size];
            let out = if word & 0x8000_0000 != 0 {
                block.to_vec()
            } else {
                lz4_flex::block::decompress(block, max)
                    .map_err(|_| corrupt("a block does not decode"))?
            };
            if let Some(content) = content.as_mut() {
                std::hash::Hasher::write(content, &out);
            }
            frame_len += out.len() as u64;
            sink(out).map_err(Lz4Stop::Spool)?;
        }
        if content_size.is_some_and(|size| size != frame_len) {
            return Err(corrupt(
                "the frame's content size does not match its blocks",
            ));
        }
        if let Some(content) = content {
            let sum = self.word("the file ends inside the content checksum")?;
            if content.finish_32() != sum {
                return Err(Lz4Stop::Damaged(
                    DamageKind::ChecksumMismatch,
                    "the frame's content checksum does not match",
                ));
            }
        }
        Ok(true)
    }
}

/// LZ4 frame format constants (the format's specification).
const LZ4_MAGIC: u32 = 0x184D_2204;
const LZ4_SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
const LZ4_SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// What a walk of a file's LZ4 frames found ([`lz4_frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lz4Walk {
    /// Where the file ends before a frame does: `(compressed offset, what
    /// was missing)`.
    unfinished: Option<(u64, &'static str)>,
    /// Every frame is whole, of the format's version, without a
    /// dictionary, and its blocks are independent: each decodes alone.
    independent: bool,
}

/// [`lz4_frames`] of the file at `path`.
fn lz4_walk(path: &Path) -> Result<Lz4Walk, FeedError> {
    let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
    let size = file
        .metadata()
        .map_err(|e| FeedError::io("read", path, &e))?
        .len();
    lz4_frames(io::BufReader::new(file), size).map_err(|e| FeedError::io("read", path, &e))
}

/// Where the file ends before an LZ4 frame does (see [`lz4_frames`]).
fn lz4_unfinished_frame(
    file: impl Read + Seek,
    file_len: u64,
) -> io::Result<Option<(u64, &'static str)>> {
    lz4_frames(file, file_len).map(|walk| walk.unfinished)
}

/// Walks the LZ4 frames of a file by their headers and block sizes alone
/// (nothing is decoded): where the file ends before a frame does, and
/// whether every block decodes alone. Bytes that do not start a frame are
/// the decoder's business, not this walk's: it stops there (and the file
/// is not taken for independent blocks).
fn lz4_frames(mut file: impl Read + Seek, file_len: u64) -> io::Result<Lz4Walk> {
    let unfinished = |at, what| {
        Ok(Lz4Walk {
            unfinished: Some((at, what)),
            independent: false,
        })
    };
    let mut independent = true;
    let mut at = 0u64;
    loop {
        let mut magic = [0u8; 4];
        match read_full(&mut file, &mut magic)? {
            0 => {
                return Ok(Lz4Walk {
                    unfinished: None,
                    independent,
                });
            }
            4 => {}
            _ => return unfinished(at, "the file ends inside a frame's magic number"),
        }
        at += 4;
        let magic = u32::from_le_bytes(magic);
        if magic & LZ4_SKIPPABLE_MASK == LZ4_SKIPPABLE_MAGIC {
            let Some(size) = read_u32(&mut file)? else {
                return unfinished(at, "the file ends inside a skippable frame");
            };
            at += 4;
            if !skip(&mut file, u64::from(size), file_len)? {
                return unfinished(at, "the file ends inside a skippable frame");
            }
            at += u64::from(size);
            continue;
        }
        if magic != LZ4_MAGIC {
            return Ok(Lz4Walk {
                unfinished: None,
                independent: false,
            });
        }
        let mut descriptor = [0u8; 2];
        if read_full(&mut file, &mut descriptor)? != 2 {
            return unfinished(at, "the file ends inside a frame descriptor");
        }
        let flags = descriptor[0];
        let block_checksums = flags & 0x10 != 0;
        let content_size = flags & 0x08 != 0;
        let content_checksum = flags & 0x04 != 0;
        let dictionary = flags & 0x01 != 0;
        independent &= flags >> 6 == 1 && flags & 0x20 != 0 && !dictionary;
        // Content size, dictionary id, then the header checksum byte.
        let rest = 8 * u64::from(content_size) + 4 * u64::from(dictionary) + 1;
        if !skip(&mut file, rest, file_len)? {
            return unfinished(at, "the file ends inside a frame descriptor");
        }
        at += 2 + rest;
        loop {
            let Some(word) = read_u32(&mut file)? else {
                return unfinished(at, "the file ends before the frame's end mark");
            };
            at += 4;
            if word == 0 {
                break;
            }
            let block = u64::from(word & 0x7FFF_FFFF) + 4 * u64::from(block_checksums);
            if !skip(&mut file, block, file_len)? {
                return unfinished(at, "the file ends inside a block");
            }
            at += block;
        }
        if content_checksum {
            if !skip(&mut file, 4, file_len)? {
                return unfinished(at, "the file ends inside the content checksum");
            }
            at += 4;
        }
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(file: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn read_u32(file: &mut impl Read) -> io::Result<Option<u32>> {
    let mut word = [0u8; 4];
    Ok((read_full(file, &mut word)? == 4).then(|| u32::from_le_bytes(word)))
}

/// Steps over the next `n` bytes of a file of `file_len` bytes (seeking,
/// not reading: the walk costs a few bytes a block); `false` when the file
/// ends first.
fn skip(file: &mut (impl Read + Seek), n: u64, file_len: u64) -> io::Result<bool> {
    let at = file.stream_position()?;
    if at.saturating_add(n) > file_len {
        return Ok(false);
    }
    let by = i64::try_from(n).map_err(|_| io::Error::other("a skip past 2^63 bytes"))?;
    file.seek(io::SeekFrom::Current(by))?;
    Ok(true)
}

/// The first line of a compressed file (without its `\n`), decoding no
/// more than `limit` bytes; `None` when no line ends within them or the
/// file does not decode that far.
///
/// # Errors
/// [`FeedError::Io`] when the file cannot be opened or read.
pub fn first_line(path: &Path, codec: Codec, limit: usize) -> Result<Option<Vec<u8>>, FeedError> {
    let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
    let mut decoder: Box<dyn Read> = match codec {
        Codec::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(file)),
        Codec::Zstd => match zstd::stream::read::Decoder::new(file) {
            Ok(decoder) => Box::new(decoder),
            Err(_) => return Ok(None),
        },
        Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(io::BufReader::new(file))),
    };
    let mut line = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while line.len() < limit {
        let n = match decoder.read(&mut chunk) {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => n,
        };
        if let Some(at) = memchr::memchr(b'\n', &chunk[..n]) {
            line.extend_from_slice(&chunk[..at]);
            return Ok(Some(line));
        }
        line.extend_from_slice(&chunk[..n]);
    }
    Ok(None)
}

/// The size of the skippable frame whose header the LZ4 decoder stopped
/// at, when that is what `error` says.
fn lz4_skippable(error: &io::Error) -> Option<u32> {
    match error.get_ref()?.downcast_ref::<lz4_flex::frame::Error>()? {
        lz4_flex::frame::Error::SkippableFrame(size) => Some(*size),
        _ => None,
    }
}

/// Sorts a decoder's error into a [`DamageKind`].
fn classify(error: &io::Error) -> DamageKind {
    if let Some(lz4) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<lz4_flex::frame::Error>())
    {
        return match lz4 {
            lz4_flex::frame::Error::ContentChecksumError => DamageKind::ChecksumMismatch,
            lz4_flex::frame::Error::IoError(inner)
                if inner.kind() == io::ErrorKind::UnexpectedEof =>
            {
                DamageKind::Truncated
            }
            _ => DamageKind::Corrupt,
        };
    }
    if error.kind() == io::ErrorKind::UnexpectedEof {
        return DamageKind::Truncated;
    }
    let text = error.to_string().to_ascii_lowercase();
    if text.contains("checksum") {
        DamageKind::ChecksumMismatch
    } else if text.contains("incomplete") || text.contains("unexpected end") {
        DamageKind::Truncated
    } else {
        DamageKind::Corrupt
    }
}

/// A reader that counts the bytes it hands out and keeps its own I/O
/// error apart from the decoder's complaints about the bytes.
struct Counted<R> {
    inner: R,
    consumed: u64,
    failed: Option<io::Error>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.consumed += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                let kind = e.kind();
                self.failed = Some(e);
                Err(io::Error::new(
                    kind,
                    "the compressed file could not be read",
                ))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeSet;
    use std::io::Write;

    use super::*;

    fn lines(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            writeln!(
                out,
                r#"{{"block_number":{i},"events":[["0xabc",{{"px":"{i}.5"}}]]}}"#
            )
            .unwrap();
        }
        out
    }

    pub(crate) fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Lz4 => {
                let mut info = lz4_flex::frame::FrameInfo::new();
                info.content_checksum = true;
                info.block_size = lz4_flex::frame::BlockSize::Max64KB;
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
                enc.write_all(data).unwrap();
                enc.finish().unwrap()
            }
            Codec::Zstd => {
                // With a content checksum, as the `zstd` tool writes by default.
                let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
                enc.include_checksum(true).unwrap();
                enc.write_all(data).unwrap();
                enc.finish().unwrap()
            }
            Codec::Gzip => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                enc.write_all(data).unwrap();
                enc.finish().unwrap()
            }
        }
    }

    /// What [`decompress`] decodes of the file, checked against what
    /// [`decompress_owned`] does: the same bytes and the same damage.
    fn decode(path: &Path, codec: Codec) -> (Vec<u8>, Decoded) {
        let mut out = Vec::new();
        let decoded = decompress(path, codec, |piece| {
            out.extend_from_slice(piece);
            Ok(())
        })
        .unwrap();
        let (owned, owned_decoded) = decode_owned(path, codec);
        assert!(
            owned == out,
            "{codec:?}: {} bytes owned, {} decoded",
            owned.len(),
            out.len()
        );
        assert_eq!(owned_decoded.len, decoded.len, "{codec:?}");
        assert_eq!(
            owned_decoded
                .damage
                .as_ref()
                .map(|d| (d.kind, d.decoded_offset)),
            decoded.damage.as_ref().map(|d| (d.kind, d.decoded_offset)),
            "{codec:?}: the same damage owned ({:?})",
            owned_decoded.damage
        );
        (out, decoded)
    }

    fn decode_owned(path: &Path, codec: Codec) -> (Vec<u8>, Decoded) {
        let mut out = Vec::new();
        let decoded = decompress_owned(path, codec, |piece| {
            out.extend_from_slice(&piece);
            Ok(())
        })
        .unwrap();
        (out, decoded)
    }

    #[test]
    fn lz4_frames_of_every_kind_decode_owned_and_only_independent_ones_block_by_block() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
        let data = lines(20_000);
        let tmp = tempfile::tempdir().unwrap();
        for (mode, independent) in [(BlockMode::Independent, true), (BlockMode::Linked, false)] {
            for (block_checksums, content_size) in [(false, false), (true, true)] {
                let mut info = FrameInfo::new();
                info.block_mode = mode;
                info.block_size = BlockSize::Max256KB;
                info.block_checksums = block_checksums;
                info.content_checksum = true;
                info.content_size = content_size.then_some(data.len() as u64);
                let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
                enc.write_all(&data).unwrap();
                let mut file = enc.finish().unwrap();
                // A second frame after a skippable one: a file of several.
                file.extend_from_slice(&(LZ4_SKIPPABLE_MAGIC | 1).to_le_bytes());
                file.extend_from_slice(&2u32.to_le_bytes());
                file.extend_from_slice(b"ok");
                file.extend_from_slice(&compress(Codec::Lz4, &data));
                let path = tmp.path().join("kinds.lz4");
                std::fs::write(&path, &file).unwrap();
                let label = format!("{mode:?} {block_checksums} {content_size}");
                assert_eq!(lz4_walk(&path).unwrap().independent, independent, "{label}");
                let (out, decoded) = decode(&path, Codec::Lz4);
                assert_eq!(decoded.damage, None, "{label}");
                assert_eq!(out.len(), 2 * data.len(), "{label}");
                assert!(out == [&data[..], &data[..]].concat(), "{label}");
            }
        }
    }

    #[test]
    fn bytes_after_the_last_lz4_frame_that_are_no_frame_are_damage() {
        // As the `lz4` tool has it: what follows a frame is another frame.
        let data = lines(3_000);
        let mut file = compress(Codec::Lz4, &data);
        file.extend_from_slice(b"garbage!");
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("tail.lz4");
        std::fs::write(&path, &file).unwrap();
        let (out, decoded) = decode(&path, Codec::Lz4);
        assert!(out == data, "every frame before the bytes is kept");
        let damage = decoded.damage.expect("trailing bytes are reported");
        assert_eq!(damage.kind, DamageKind::Corrupt, "{damage}");
        assert_eq!(damage.decoded_offset, data.len() as u64);
    }

    #[test]
    fn owned_lz4_blocks_find_each_damage_the_frame_decoder_finds() {
        // Block checksums on, so that a flipped byte inside a block is
        // caught there rather than only by the content checksum.
        use lz4_flex::frame::{BlockSize, FrameEncoder, FrameInfo};
        let data = lines(6_000);
        let mut info = FrameInfo::new();
        info.block_size = BlockSize::Max64KB;
        info.block_checksums = true;
        info.content_checksum = true;
        let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
        enc.write_all(&data).unwrap();
        let whole = enc.finish().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("damaged.lz4");
        let mut kinds = BTreeSet::new();
        for at in (0..whole.len())
            .step_by(997)
            .chain([4, 5, 6, whole.len() - 1])
        {
            let mut bad = whole.clone();
            bad[at] ^= 0x04;
            std::fs::write(&path, &bad).unwrap();
            // `decode` compares the two decoders' bytes and damage.
            let (out, decoded) = decode(&path, Codec::Lz4);
            let damage = decoded
                .damage
                .unwrap_or_else(|| panic!("a flip at {at} went unnoticed"));
            kinds.insert(format!("{:?}", damage.kind));
            assert_eq!(&data[..out.len()], &out[..], "{at}: {damage}");
        }
        assert!(
            kinds.contains("Corrupt") && kinds.contains("ChecksumMismatch"),
            "{kinds:?}"
        );
    }

    #[test]
    fn names_split_into_stem_and_codec() {
        assert_eq!(Codec::split_name("9.lz4"), ("9", Some(Codec::Lz4)));
        assert_eq!(Codec::split_name("23.zst"), ("23", Some(Codec::Zstd)));
        assert_eq!(Codec::split_name("0.gz"), ("0", Some(Codec::Gzip)));
        assert_eq!(Codec::split_name("9"), ("9", None));
        assert_eq!(Codec::split_name("9.lz4.tmp"), ("9.lz4.tmp", None));
        assert_eq!(Codec::split_name("lz4"), ("lz4", None));
    }

    #[test]
    fn every_codec_round_trips_and_reads_the_first_line() {
        let data = lines(5_000);
        let tmp = tempfile::tempdir().unwrap();
        for codec in Codec::ALL {
            let path = tmp.path().join(format!("7.{}", codec.extension()));
            std::fs::write(&path, compress(codec, &data)).unwrap();
            let (out, decoded) = decode(&path, codec);
            assert_eq!(decoded.damage, None, "{codec:?}");
            assert_eq!(out, data, "{codec:?}");
            let first = first_line(&path, codec, 1 << 20).unwrap().unwrap();
            assert_eq!(&first[..], &data[..memchr::memchr(b'\n', &data).unwrap()]);
        }
    }

    #[test]
    fn a_cut_file_keeps_what_decoded_before_the_cut() {
        let data = lines(20_000);
        let tmp = tempfile::tempdir().unwrap();
        for codec in Codec::ALL {
            let whole = compress(codec, &data);
            let path = tmp.path().join(format!("cut.{}", codec.extension()));
            std::fs::write(&path, &whole[..whole.len() * 2 / 3]).unwrap();
            let (out, decoded) = decode(&path, codec);
            let damage = decoded.damage.expect("a cut file is reported");
            assert_eq!(damage.kind, DamageKind::Truncated, "{codec:?}: {damage}");
            assert_eq!(damage.decoded_offset, out.len() as u64);
            assert!(damage.compressed_offset <= (whole.len() * 2 / 3) as u64);
            assert_eq!(&data[..out.len()], &out[..], "{codec:?}: a sound prefix");
        }
    }

    #[test]
    fn an_lz4_file_cut_at_a_block_boundary_is_still_truncated() {
        // Cut right before the end mark: every block is whole, but the frame
        // is not finished.
        let data = lines(3_000);
        let whole = compress(Codec::Lz4, &data);
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("8.lz4");
        // End mark (4 bytes) and content checksum (4 bytes).
        std::fs::write(&path, &whole[..whole.len() - 8]).unwrap();
        let (out, decoded) = decode(&path, Codec::Lz4);
        assert_eq!(out, data);
        assert_eq!(
            decoded.damage.map(|d| d.kind),
            Some(DamageKind::Truncated),
            "a frame without its end mark is not a whole file"
        );
    }

    #[test]
    fn the_frame_walk_finds_every_cut_and_passes_whole_frames() {
        // Two frames of several blocks each, a skippable frame between.
        let mut file = compress(Codec::Lz4, &lines(4_000));
        let first_end = file.len();
        file.extend_from_slice(&(LZ4_SKIPPABLE_MAGIC | 3).to_le_bytes());
        file.extend_from_slice(&5u32.to_le_bytes());
        file.extend_from_slice(b"skip!");
        let skippable_end = file.len();
        file.extend_from_slice(&compress(Codec::Lz4, &lines(3_000)));
        let walk = |len: usize| {
            let cut = &file[..len];
            lz4_unfinished_frame(io::Cursor::new(cut), len as u64).unwrap()
        };
        for len in 0..=file.len() {
            let found = walk(len);
            if [0, first_end, skippable_end, file.len()].contains(&len) {
                assert_eq!(found, None, "{len} bytes end where a frame does");
            } else {
                let (offset, what) =
                    found.unwrap_or_else(|| panic!("a cut at {len} went unnoticed"));
                assert!(offset <= len as u64, "{len}: {offset} {what}");
            }
        }
    }

    #[test]
    fn a_flipped_bit_is_never_silent() {
        let data = lines(20_000);
        let tmp = tempfile::tempdir().unwrap();
        for codec in Codec::ALL {
            let whole = compress(codec, &data);
            for at in [whole.len() / 3, whole.len() / 2, whole.len() - 6] {
                let mut bad = whole.clone();
                bad[at] ^= 0x10;
                let path = tmp.path().join(format!("flip.{}", codec.extension()));
                std::fs::write(&path, &bad).unwrap();
                let (out, decoded) = decode(&path, codec);
                let damage = decoded
                    .damage
                    .unwrap_or_else(|| panic!("{codec:?}: flip at {at} went unnoticed"));
                if damage.kind != DamageKind::ChecksumMismatch {
                    assert_eq!(&data[..out.len()], &out[..], "{codec:?}: {damage}");
                }
            }
        }
    }

    #[test]
    fn an_unreadable_file_is_an_io_error() {
        let tmp = tempfile::tempdir().unwrap();
        let error = decompress(&tmp.path().join("absent.lz4"), Codec::Lz4, |_| Ok(())).unwrap_err();
        assert!(matches!(error, FeedError::Io { op: "open", .. }), "{error}");
    }
}
