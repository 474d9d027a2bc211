//! One node file as an immutable, memory-mapped view of its complete
//! newline-terminated prefix, re-mapped as the file grows.
//!
//! This module holds the crate's only `unsafe` code, in `map_prefix`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use memmap2::MmapOptions;

use crate::error::FeedError;
use crate::layout::SegmentKey;

/// How far back from the end a growth check reads per step while looking for
/// the last newline.
const SCAN_CHUNK: u64 = 64 * 1024;

/// One file's complete lines as they were at the last [`Segment::grow`].
///
/// Cloning is cheap: the data is a reference-counted view of a mapping.
#[derive(Debug, Clone)]
pub struct Segment {
    key: SegmentKey,
    path: PathBuf,
    /// The complete prefix: every byte up to and including the last `\n`.
    data: Bytes,
    /// File length at the last check (may exceed `data.len()` by a partial
    /// line that has no newline yet).
    seen_len: u64,
    /// Start offsets of every complete line, kept only for files whose
    /// records are addressed by line index (`replica_cmds`).
    line_starts: Option<Vec<u64>>,
}

impl Segment {
    /// An empty view of `path`; call [`Segment::grow`] to map it.
    pub fn new(key: SegmentKey, path: PathBuf, index_lines: bool) -> Segment {
        Segment {
            key,
            path,
            data: Bytes::new(),
            seen_len: 0,
            line_starts: index_lines.then(Vec::new),
        }
    }

    /// The file's identity and order.
    pub fn key(&self) -> &SegmentKey {
        &self.key
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The complete newline-terminated prefix (empty before any line is
    /// complete).
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Length of the complete prefix.
    pub fn complete_len(&self) -> u64 {
        self.data.len() as u64
    }

    /// Start offsets of the complete lines, when this segment indexes them.
    pub fn line_starts(&self) -> Option<&[u64]> {
        self.line_starts.as_deref()
    }

    /// The file's length now, without reading it.
    ///
    /// # Errors
    /// [`FeedError::Io`] when the file cannot be stat'ed.
    pub fn current_len(&self) -> Result<u64, FeedError> {
        std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|e| FeedError::io("stat", &self.path, &e))
    }

    /// A new view including every line completed since this one, or `None`
    /// when the file did not change (`len` is the file's current length from
    /// [`Segment::current_len`]). A returned view may have the same
    /// [`Segment::complete_len`] when only a partial last line grew.
    ///
    /// Old views stay valid: they keep their own mapping alive.
    ///
    /// # Errors
    /// [`FeedError::Truncated`] when the file is shorter than the exposed
    /// prefix; [`FeedError::Io`] when it cannot be opened, read or mapped.
    pub fn grow(&self, len: u64) -> Result<Option<Segment>, FeedError> {
        let complete = self.complete_len();
        if len < complete {
            return Err(FeedError::Truncated {
                path: self.path.clone(),
                had: complete,
                now: len,
            });
        }
        if len == self.seen_len || len == complete {
            return Ok(None);
        }
        let file = File::open(&self.path).map_err(|e| FeedError::io("open", &self.path, &e))?;
        // Bytes in [complete, seen_len) are known to hold no newline.
        let scan_from = complete.max(self.seen_len.min(len));
        let new_complete = last_newline_end(&file, &self.path, scan_from, len)?;
        let mut next = self.clone();
        next.seen_len = len;
        let Some(new_complete) = new_complete else {
            // Only the partial tail grew; remember how far it was scanned.
            return Ok(Some(next));
        };
        next.data = map_prefix(&file, new_complete, &self.path)?;
        if let Some(starts) = &mut next.line_starts {
            let region = next.data.get(complete as usize..).unwrap_or_default();
            starts.push(complete);
            let last = region.len().saturating_sub(1);
            starts.extend(
                memchr::memchr_iter(b'\n', &region[..last]).map(|at| complete + at as u64 + 1),
            );
        }
        Ok(Some(next))
    }
}

/// Offset just past the last `\n` in `[from, to)` of the file, if any.
fn last_newline_end(
    file: &File,
    path: &Path,
    from: u64,
    to: u64,
) -> Result<Option<u64>, FeedError> {
    let mut end = to;
    let mut buf = Vec::new();
    while end > from {
        let start = end.saturating_sub(SCAN_CHUNK).max(from);
        buf.resize((end - start) as usize, 0);
        file.read_exact_at(&mut buf, start)
            .map_err(|e| FeedError::io("read", path, &e))?;
        if let Some(at) = memchr::memrchr(b'\n', &buf) {
            return Ok(Some(start + at as u64 + 1));
        }
        end = start;
    }
    Ok(None)
}

/// Maps the first `len` bytes of `file` read-only and returns them as
/// [`Bytes`] that own the mapping (so slices can leave the crate without a
/// copy and outlive any later re-mapping).
///
/// Callers pass a `len` they have checked: a complete newline-terminated
/// prefix for line files, or a whole verified snapshot file.
///
/// # Errors
/// [`FeedError::Io`] when the mapping fails.
#[allow(unsafe_code)]
pub(crate) fn map_prefix(file: &File, len: u64, path: &Path) -> Result<Bytes, FeedError> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let len = usize::try_from(len).map_err(|_| FeedError::Io {
        op: "map",
        path: path.to_path_buf(),
        kind: std::io::ErrorKind::InvalidInput,
        message: "file larger than the address space".to_owned(),
    })?;
    // SAFETY: a mapping is only sound while nobody changes or shortens the
    // mapped bytes. The node's output files are append-only: bytes once
    // written are never rewritten, and `len` never exceeds what the file held
    // when it was checked (for line files, only the complete prefix up to the
    // last '\n', so a half-written line is never exposed). If an operator
    // truncated a file anyway, reading the vanished pages would raise SIGBUS;
    // refresh reports a shrunken file as `FeedError::Truncated` before
    // mapping it again, but cannot protect views handed out earlier. The map
    // is read-only, so this process never writes through it.
    let map = unsafe { MmapOptions::new().len(len).map(file) }
        .map_err(|e| FeedError::io("map", path, &e))?;
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn key() -> SegmentKey {
        SegmentKey::Hourly {
            date: 20_260_101,
            hour: 0,
        }
    }

    #[test]
    fn exposes_only_complete_lines_and_keeps_old_views() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        let mut file = File::create(&path).unwrap();
        let seg = Segment::new(key(), path.clone(), true);
        assert!(seg.grow(seg.current_len().unwrap()).unwrap().is_none());

        file.write_all(b"one\ntw").unwrap();
        let first = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(&first.data()[..], b"one\n");
        assert_eq!(first.line_starts().unwrap(), [0]);
        assert!(first.grow(first.current_len().unwrap()).unwrap().is_none());

        file.write_all(b"o").unwrap();
        // Length grew but the partial tail has no newline yet.
        let partial = first.grow(first.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(partial.complete_len(), 4);
        file.write_all(b"\nthr").unwrap();
        let first = partial;
        let second = first.grow(first.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(&second.data()[..], b"one\ntwo\n");
        file.write_all(b"ee\nfour").unwrap();
        let third = second.grow(second.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(&third.data()[..], b"one\ntwo\nthree\n");
        assert_eq!(third.line_starts().unwrap(), [0, 4, 8]);
        assert_eq!(&first.data()[..], b"one\n");
    }

    #[test]
    fn a_shrunken_file_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        std::fs::write(&path, b"line one\nline two\n").unwrap();
        let seg = Segment::new(key(), path.clone(), false);
        let seg = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        std::fs::write(&path, b"x\n").unwrap();
        assert_eq!(
            seg.grow(seg.current_len().unwrap()).unwrap_err(),
            FeedError::Truncated {
                path,
                had: 18,
                now: 2
            }
        );
    }
}
