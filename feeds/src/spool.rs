//! A compressed node file made readable as lines: decoded once, front to
//! back, into an unlinked temporary file that is then mapped like a node
//! file (see [`crate::segment`]).
//!
//! The temporary file lives under `$TMPDIR` (the system's temporary
//! directory otherwise) and has no name from the moment it is made: it is
//! freed when the last view of its mapping is dropped, and a crash leaves
//! nothing behind. Decoding writes through the page cache piece by piece,
//! so the process's memory does not grow with the file: an hour of 1.8 GB
//! decoded costs 1.8 GB of temporary disk space while a reader holds it,
//! not 1.8 GB of memory. Only the complete lines are exposed; after damage
//! ([`crate::codec::Damage`]) the lines decoded before it, or none after a
//! checksum mismatch.
//!
//! # Reused temporary files
//!
//! Writing into pages a file does not have yet is what decoding costs most
//! after the decompression itself: the kernel allocates each page, and on
//! a machine whose memory is mostly page cache it reclaims others first
//! (measured here: 0.15 to 2.1 s of system time for 900 MB into a new file,
//! 0.05 s over the pages of an existing one). So when the last view of a
//! decoded file is dropped, its temporary file is kept for the next
//! decoding, which writes over it from the start: at most [`KEPT_FILES`]
//! such files, each no larger than [`KEPT_MAX_BYTES`] (a larger one is
//! let go of at once). A kept file holds no view: nothing maps it until it
//! is written again, whole, by the one decoding that took it; the bytes
//! past what that decoding exposes are stale and never mapped. Kept files
//! have no name: they go when the process does.

use std::fs::File;
use std::io::{BufWriter, Seek as _, SeekFrom, Write};
use std::path::Path;

use parking_lot::Mutex;

use crate::codec::{self, Codec, Damage, DamageKind};
use crate::error::FeedError;

/// Bytes buffered before each write to the temporary file.
const WRITE_BUFFER: usize = 1 << 20;
/// Temporary files kept for reuse once no view maps them.
const KEPT_FILES: usize = 2;
/// The largest temporary file kept for reuse: a decoded hour of the
/// archive is some 50 to 500 MB; a larger one's disk space is given back.
const KEPT_MAX_BYTES: u64 = 512 << 20;

/// Temporary files kept for reuse (see the module docs).
struct Kept {
    files: Mutex<Vec<File>>,
}

impl Kept {
    const fn new() -> Self {
        Self {
            files: Mutex::new(Vec::new()),
        }
    }

    /// A kept file, rewound, if there is one, else a new temporary file.
    fn take(&self) -> std::io::Result<File> {
        let kept = self.files.lock().pop();
        match kept {
            Some(mut file) => {
                file.seek(SeekFrom::Start(0))?;
                Ok(file)
            }
            None => tempfile::tempfile(),
        }
    }

    /// Keeps `file` if it is small enough and fewer than [`KEPT_FILES`]
    /// are kept; lets it go otherwise.
    fn keep(&self, file: File) {
        let small = file.metadata().is_ok_and(|m| m.len() <= KEPT_MAX_BYTES);
        let mut files = self.files.lock();
        if small && files.len() < KEPT_FILES {
            files.push(file);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.files.lock().len()
    }
}

/// The process's kept temporary files.
static KEPT: Kept = Kept::new();

/// Keeps `file` for the next decoding: called once no view maps it.
pub(crate) fn keep_file(file: File) {
    KEPT.keep(file);
}

/// A decoded compressed file.
#[derive(Debug)]
pub(crate) struct Spooled {
    /// The temporary file; its first `lines` bytes are every complete line
    /// (the caller maps them, `crate::segment`). Bytes past them are not
    /// this file's decoding (a kept file's earlier contents, a partial last
    /// line).
    pub file: File,
    /// Bytes of complete lines.
    pub lines: u64,
    /// Bytes decoded (including a partial last line not exposed).
    pub decoded: u64,
    /// Why decoding stopped early, if it did.
    pub damage: Option<Damage>,
}

/// Decodes `path` as `codec` into a temporary file, keeping its complete
/// lines.
///
/// # Errors
/// [`FeedError::Io`] when the file cannot be read, or the temporary file
/// cannot be made or written (op `spool`: a full `$TMPDIR`, say).
pub(crate) fn spool(path: &Path, codec: Codec) -> Result<Spooled, FeedError> {
    spool_into(&KEPT, path, codec)
}

/// [`spool`] into a file of `kept`, or a new one.
fn spool_into(kept: &Kept, path: &Path, codec: Codec) -> Result<Spooled, FeedError> {
    let temporary = kept.take().map_err(|e| FeedError::io("spool", path, &e))?;
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER, temporary);
    let mut written = 0u64;
    let mut complete = 0u64;
    let decoded = codec::decompress(path, codec, |piece| {
        writer.write_all(piece)?;
        if let Some(at) = memchr::memrchr(b'\n', piece) {
            complete = written + at as u64 + 1;
        }
        written += piece.len() as u64;
        Ok(())
    })?;
    let file = writer
        .into_inner()
        .map_err(|e| FeedError::io("spool", path, e.error()))?;
    let keep = match &decoded.damage {
        Some(damage) if damage.kind == DamageKind::ChecksumMismatch => 0,
        _ => complete,
    };
    Ok(Spooled {
        file,
        lines: keep,
        decoded: decoded.len,
        damage: decoded.damage,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Seek as _};

    use super::*;
    use crate::codec::tests::compress;

    /// The complete lines a spool kept.
    fn kept(spooled: &mut Spooled) -> Vec<u8> {
        let mut out = Vec::new();
        spooled.file.rewind().unwrap();
        (&spooled.file)
            .take(spooled.lines)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("{{\"block_number\":{i}}}\n").into_bytes())
            .collect()
    }

    #[test]
    fn exposes_every_complete_line_of_a_whole_file() {
        let tmp = tempfile::tempdir().unwrap();
        let mut data = text(10_000);
        data.extend_from_slice(b"{\"partial\":");
        for codec in Codec::ALL {
            let path = tmp.path().join(format!("5.{}", codec.extension()));
            std::fs::write(&path, compress(codec, &data)).unwrap();
            let mut spooled = spool(&path, codec).unwrap();
            assert_eq!(spooled.damage, None);
            assert_eq!(spooled.decoded, data.len() as u64);
            assert_eq!(kept(&mut spooled), &data[..data.len() - 11], "{codec:?}");
        }
    }

    #[test]
    fn a_kept_file_is_written_over_and_exposes_only_the_new_lines() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let pool = Kept::new();
        let (big, small) = (text(20_000), text(300));
        let (big_path, small_path) = (tmp.path().join("1.lz4"), tmp.path().join("2.zst"));
        std::fs::write(&big_path, compress(Codec::Lz4, &big)).unwrap();
        std::fs::write(&small_path, compress(Codec::Zstd, &small)).unwrap();
        let first = spool_into(&pool, &big_path, Codec::Lz4).unwrap();
        let inode = first.file.metadata().unwrap().ino();
        pool.keep(first.file);
        assert_eq!(pool.len(), 1);
        let mut second = spool_into(&pool, &small_path, Codec::Zstd).unwrap();
        assert_eq!(pool.len(), 0, "the kept file was taken");
        assert_eq!(
            second.file.metadata().unwrap().ino(),
            inode,
            "and written over"
        );
        assert_eq!(second.lines, small.len() as u64);
        assert_eq!(kept(&mut second), small, "none of the earlier file's bytes");
    }

    #[test]
    fn few_and_small_files_are_kept() {
        let kept = Kept::new();
        for _ in 0..KEPT_FILES + 2 {
            kept.keep(tempfile::tempfile().unwrap());
        }
        assert_eq!(kept.len(), KEPT_FILES);
        let kept = Kept::new();
        let large = tempfile::tempfile().unwrap();
        // Sparse: no disk space is taken.
        large.set_len(KEPT_MAX_BYTES + 1).unwrap();
        kept.keep(large);
        assert_eq!(kept.len(), 0, "a file larger than the bound is let go");
    }

    #[test]
    fn a_damaged_file_exposes_the_sound_lines_before_the_damage_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let data = text(50_000);
        let whole = compress(Codec::Lz4, &data);
        let path = tmp.path().join("6.lz4");
        std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
        let mut cut = spool(&path, Codec::Lz4).unwrap();
        assert_eq!(cut.damage.as_ref().unwrap().kind, DamageKind::Truncated);
        let lines = kept(&mut cut);
        assert!(!lines.is_empty());
        assert!(lines.ends_with(b"\n"));
        assert_eq!(&data[..lines.len()], &lines[..]);

        // The content checksum is the last 4 bytes: flipping one there
        // leaves every block decodable and the whole file untrustworthy.
        let mut flipped = whole.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        let mut bad = spool(&path, Codec::Lz4).unwrap();
        assert_eq!(
            bad.damage.as_ref().unwrap().kind,
            DamageKind::ChecksumMismatch
        );
        assert!(kept(&mut bad).is_empty());
    }
}
