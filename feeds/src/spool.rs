//! A compressed node file made readable as lines: decoded once, front to
//! back, into an unlinked temporary file that is then mapped like a node
//! file (see [`crate::segment`]).
//!
//! The temporary file lives under `$TMPDIR` (the system's temporary
//! directory otherwise) and has no name from the moment it is made: it is
//! freed when the last view of its mapping is dropped, and a crash leaves
//! nothing behind. Decoding writes through the page cache in 1 MiB pieces,
//! so the process's memory does not grow with the file: an hour of 1.8 GB
//! decoded costs 1.8 GB of temporary disk space while a reader holds it,
//! not 1.8 GB of memory. Only the complete lines are exposed; after damage
//! ([`crate::codec::Damage`]) the lines decoded before it, or none after a
//! checksum mismatch.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use crate::codec::{self, Codec, Damage, DamageKind};
use crate::error::FeedError;

/// Bytes buffered before each write to the temporary file.
const WRITE_BUFFER: usize = 1 << 20;

/// A decoded compressed file.
#[derive(Debug)]
pub(crate) struct Spooled {
    /// The temporary file; its first `lines` bytes are every complete line
    /// (the caller maps them, `crate::segment`).
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
    let temporary = tempfile::tempfile().map_err(|e| FeedError::io("spool", path, &e))?;
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
    if keep < written {
        // Give the space of what is not exposed back at once.
        file.set_len(keep)
            .map_err(|e| FeedError::io("spool", path, &e))?;
    }
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
