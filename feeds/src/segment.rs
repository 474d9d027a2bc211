//! One node file as an immutable, memory-mapped view of its complete
//! newline-terminated prefix.
//!
//! A growing file is tailed without a system call per append beyond one
//! `fstat`: the file stays open, and its mapping reaches
//! [`RESERVE_AHEAD`] bytes past its end, so lines the node appends later are
//! read through the same mapping (pages past the end of a shared file
//! mapping become readable as the file grows). The file is mapped again only
//! when its complete prefix outgrows the reservation.
//!
//! A compressed file (`H.lz4`, `H.zst`, `H.gz`, see [`crate::codec`]) is a
//! finished file: it starts *dormant*, with nothing decoded but, on demand,
//! its first line, and is made [live](Segment::live) when a reader needs its
//! lines: decoded whole into a temporary file ([`crate::spool`]) that is
//! mapped like a node file. The feed's own list keeps only dormant views;
//! readers hold the live one while they read it, and share it.
//!
//! This module holds the crate's `unsafe` mapping code: `map_file`, and
//! the page advice of `Segment::defuse_past` and `Segment::release_below`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use memmap2::MmapOptions;
use parking_lot::Mutex;

use crate::codec::{self, Codec, Damage};
use crate::error::FeedError;
use crate::index::line_at;
use crate::layout::SegmentKey;

/// Longest first line decoded from a dormant compressed file to learn its
/// first record's position.
const FIRST_LINE_LIMIT: usize = 256 * 1024 * 1024;

/// How far past a growing file's end its mapping reaches: the file is
/// mapped again each time this much more of it is complete. Address space
/// only: no memory is used for pages nobody reads.
pub const RESERVE_AHEAD: u64 = 256 * 1024 * 1024;

/// One file's complete lines as they were at the last [`Segment::grow`].
///
/// Cloning is cheap: the data is a reference-counted view of a mapping.
#[derive(Debug, Clone)]
pub struct Segment {
    key: SegmentKey,
    path: PathBuf,
    /// The file, open from the first growth on (`fstat` instead of a path
    /// lookup per check).
    file: Option<Arc<File>>,
    /// The mapping: the file's bytes as they were checked, and the
    /// reservation past them. Only `..seen_len` is ever read.
    map: Bytes,
    /// The complete prefix: every byte up to and including the last `\n`
    /// (a slice of `map`).
    data: Bytes,
    /// File length at the last check (may exceed `data.len()` by a partial
    /// line that has no newline yet).
    seen_len: u64,
    /// Start offsets of every complete line, kept only for files whose
    /// records are addressed by line index (`replica_cmds`).
    line_starts: Option<Vec<u64>>,
    /// For a compressed file: what is known of it, shared by every view of
    /// it (`None` for a plain file).
    packed: Option<Arc<Packed>>,
    /// Whether this view of a compressed file holds its decoded lines.
    materialized: bool,
}

/// What is learnt of one compressed file (of one size), shared by its
/// dormant and materialized views.
#[derive(Debug)]
struct Packed {
    codec: Codec,
    /// Its first line, decoded alone (`None`: none within the limit, or it
    /// does not decode).
    first_line: OnceLock<Option<Bytes>>,
    /// Its last complete line, once materialized.
    last_line: OnceLock<Option<Bytes>>,
    /// Bytes decoded and the damage, once materialized.
    decoded: OnceLock<(u64, Option<Damage>)>,
    /// The materialized view while anybody holds it, so that readers of the
    /// same file share one decoding.
    live: Mutex<Weak<Segment>>,
}

impl Packed {
    fn new(codec: Codec) -> Self {
        Packed {
            codec,
            first_line: OnceLock::new(),
            last_line: OnceLock::new(),
            decoded: OnceLock::new(),
            live: Mutex::new(Weak::new()),
        }
    }
}

impl Segment {
    /// An empty view of `path`; call [`Segment::grow`] to map it.
    pub fn new(key: SegmentKey, path: PathBuf, index_lines: bool) -> Segment {
        Segment {
            key,
            path,
            file: None,
            map: Bytes::new(),
            data: Bytes::new(),
            seen_len: 0,
            line_starts: index_lines.then(Vec::new),
            packed: None,
            materialized: false,
        }
    }

    /// An empty, dormant view of a file compressed with `codec`.
    pub fn compressed(key: SegmentKey, path: PathBuf, codec: Codec) -> Segment {
        Segment {
            packed: Some(Arc::new(Packed::new(codec))),
            ..Segment::new(key, path, false)
        }
    }

    /// The codec of a compressed file (`None` for a plain one).
    pub fn codec(&self) -> Option<Codec> {
        self.packed.as_ref().map(|packed| packed.codec)
    }

    /// Whether this is a compressed file whose lines are not decoded in
    /// this view ([`Segment::data`] is empty; see [`Segment::live`]).
    pub fn is_dormant(&self) -> bool {
        self.packed.is_some() && !self.materialized
    }

    /// Whether `other` is a view of the same compressed file, of the same
    /// size, as this one.
    pub fn same_file(&self, other: &Segment) -> bool {
        match (&self.packed, &other.packed) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The damage found when this compressed file was decoded (`None` for
    /// a plain file, a sound one, or one not decoded yet).
    pub fn damage(&self) -> Option<&Damage> {
        self.packed
            .as_ref()
            .and_then(|packed| packed.decoded.get())
            .and_then(|(_, damage)| damage.as_ref())
    }

    /// The file's first complete line: read from the data, or for a dormant
    /// compressed file decoded alone (once; later calls reuse it).
    pub fn first_line(&self) -> Option<Bytes> {
        match &self.packed {
            Some(packed) if !self.materialized => packed
                .first_line
                .get_or_init(|| {
                    codec::first_line(&self.path, packed.codec, FIRST_LINE_LIMIT)
                        .ok()
                        .flatten()
                        .map(Bytes::from)
                })
                .clone(),
            _ => line_at(&self.data, 0).map(|(line, _)| self.data.slice(line)),
        }
    }

    /// The file's last complete line: read from the data, or for a dormant
    /// compressed file remembered from its last materialization (`None`
    /// when it never was).
    pub fn last_line(&self) -> Option<Bytes> {
        match &self.packed {
            Some(packed) if !self.materialized => packed.last_line.get().cloned().flatten(),
            _ => last_line_of(&self.data),
        }
    }

    /// Bytes this file counts for in a feed's lag: its complete prefix, or
    /// for a dormant compressed file its decoded length once known and its
    /// size on disk before.
    pub fn weight(&self) -> u64 {
        match &self.packed {
            Some(packed) if !self.materialized => packed
                .decoded
                .get()
                .map_or(self.seen_len, |(decoded, _)| *decoded),
            _ => self.complete_len(),
        }
    }

    /// The view whose lines a reader reads: for a dormant compressed file,
    /// its materialized view — decoded whole into a temporary file (see
    /// [`crate::spool`]) unless another reader holds one already, which is
    /// then shared; any other segment as it is. The decoded lines live as
    /// long as the returned view or a slice of its data.
    ///
    /// # Errors
    /// [`FeedError::Io`] when the file cannot be read or the temporary file
    /// written. Damage is not an error: see [`Segment::damage`].
    pub fn live(&self) -> Result<Arc<Segment>, FeedError> {
        let Some(packed) = self.packed.as_ref().filter(|_| !self.materialized) else {
            return Ok(Arc::new(self.clone()));
        };
        let mut live = packed.live.lock();
        if let Some(segment) = live.upgrade() {
            return Ok(segment);
        }
        let spooled = crate::spool::spool(&self.path, packed.codec)?;
        let data =
            map_spooled(spooled.file, spooled.lines, &self.path).map_err(|error| match error {
                FeedError::Io { kind, message, .. } => FeedError::Io {
                    op: "spool",
                    path: self.path.clone(),
                    kind,
                    message,
                },
                other => other,
            })?;
        // A copy: a slice would hold the whole decoded file.
        let _ = packed
            .last_line
            .set(last_line_of(&data).map(|line| Bytes::copy_from_slice(&line)));
        let damaged = spooled.damage.is_some();
        if packed
            .decoded
            .set((spooled.decoded, spooled.damage))
            .is_ok()
            && damaged
        {
            codec::count_damaged_file();
        }
        let segment = Arc::new(Segment {
            map: data.clone(),
            data,
            materialized: true,
            ..self.clone()
        });
        *live = Arc::downgrade(&segment);
        Ok(segment)
    }

    /// A compressed file's decoded view while a reader holds it (see
    /// [`Segment::live`]); `None` for a plain file or one nobody reads.
    pub fn materialized(&self) -> Option<Arc<Segment>> {
        self.packed
            .as_ref()
            .filter(|_| !self.materialized)
            .and_then(|packed| packed.live.lock().upgrade())
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

    /// Whether the file is held open (it grew at least once and has not
    /// been [sealed](Segment::sealed)).
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// The same view without the open file and without the reservation
    /// past its end, for a file the node no longer appends to (a newer one
    /// exists): a long-running reader holds one descriptor and one
    /// reservation per feed, not one per file it ever read. The complete
    /// prefix is mapped again at its exact length; views handed out earlier
    /// keep the old mapping until they are dropped. A later
    /// [`Segment::grow`] opens the file again.
    ///
    /// # Errors
    /// [`FeedError::Io`] when the file cannot be mapped again.
    pub fn sealed(&self) -> Result<Segment, FeedError> {
        if self.packed.is_some() {
            return Ok(self.clone());
        }
        let mut sealed = Segment {
            file: None,
            ..self.clone()
        };
        if let Some(file) = &self.file
            && self.map.len() > self.data.len()
        {
            sealed.map = map_file(file, self.complete_len(), &self.path)?;
            sealed.data = sealed.map.clone();
        }
        Ok(sealed)
    }

    /// The file's length now, without reading it: `fstat` of the open file,
    /// or a `stat` of the path before the first growth.
    ///
    /// # Errors
    /// [`FeedError::Io`] when the file cannot be stat'ed.
    pub fn current_len(&self) -> Result<u64, FeedError> {
        match &self.file {
            Some(file) => file.metadata(),
            None => std::fs::metadata(&self.path),
        }
        .map(|m| m.len())
        .map_err(|e| FeedError::io("stat", &self.path, &e))
    }

    /// Whether another file now stands under this one's path: renamed over
    /// it or rotated (a new inode), where the open file is the old one and
    /// would never grow again. False while the file is not open (the next
    /// growth opens the path anyway), for a compressed file (read whole: one
    /// of another size is another file already) and when the path is gone
    /// (the next listing drops it).
    ///
    /// # Errors
    /// [`FeedError::Io`] when either cannot be stat'ed.
    pub fn replaced_on_disk(&self) -> Result<bool, FeedError> {
        use std::os::unix::fs::MetadataExt as _;
        let Some(file) = self.file.as_ref().filter(|_| self.packed.is_none()) else {
            return Ok(false);
        };
        let open = file
            .metadata()
            .map_err(|e| FeedError::io("stat", &self.path, &e))?;
        match std::fs::metadata(&self.path) {
            Ok(now) => Ok((now.dev(), now.ino()) != (open.dev(), open.ino())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(FeedError::io("stat", &self.path, &e)),
        }
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
    /// prefix; [`FeedError::Io`] when it cannot be opened or mapped.
    pub fn grow(&self, len: u64) -> Result<Option<Segment>, FeedError> {
        if let Some(packed) = &self.packed {
            // A compressed file is read whole; one of another size (still
            // being copied in, or replaced) is another file.
            if len == self.seen_len {
                return Ok(None);
            }
            return Ok(Some(Segment {
                seen_len: len,
                ..Segment::compressed(self.key.clone(), self.path.clone(), packed.codec)
            }));
        }
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
        let file = match &self.file {
            Some(file) => Arc::clone(file),
            None => {
                Arc::new(File::open(&self.path).map_err(|e| FeedError::io("open", &self.path, &e))?)
            }
        };
        let mut map = self.map.clone();
        if (map.len() as u64) < len {
            map = map_file(&file, len.saturating_add(RESERVE_AHEAD), &self.path)?;
        }
        // Bytes in [complete, seen_len) are known to hold no newline; every
        // byte below `len` is written and, the file being append-only, final.
        let scan_from = to_usize(complete.max(self.seen_len.min(len)), &self.path)?;
        let end = to_usize(len, &self.path)?;
        let new_complete =
            memchr::memrchr(b'\n', &map[scan_from..end]).map(|at| scan_from + at + 1);
        let mut next = self.clone();
        next.file = Some(file);
        next.seen_len = len;
        if let Some(new_complete) = new_complete {
            next.data = map.slice(..new_complete);
            if let Some(starts) = &mut next.line_starts {
                let region = next.data.get(complete as usize..).unwrap_or_default();
                starts.push(complete);
                let last = region.len().saturating_sub(1);
                index_lines(&region[..last], complete, INDEX_CHUNK, starts, |scanned| {
                    release_mapped(&map, scanned.saturating_sub(RESIDENT_TAIL) as usize);
                });
            }
        }
        next.map = map;
        Ok(Some(next))
    }
}

impl Segment {
    /// After the file shrank to `now` bytes (see [`FeedError::Truncated`]):
    /// the pages of this segment's mapping wholly past the file's new end
    /// are replaced by private zero pages, so that views handed out earlier
    /// (records queued for subscribers, say) read zeros there instead of
    /// raising SIGBUS. The bytes they held are gone from the file anyway.
    /// Returns the bytes replaced.
    #[allow(unsafe_code)]
    pub fn defuse_past(&self, now: u64) -> usize {
        let map = &self.map;
        if map.is_empty() {
            return 0;
        }
        let page = rustix::param::page_size();
        let start = map.as_ptr() as usize;
        let end = start + map.len();
        let Some(from) = usize::try_from(now)
            .ok()
            .and_then(|now| start.checked_add(now))
            .map(|at| at.div_ceil(page) * page)
        else {
            return 0;
        };
        if from >= end {
            return 0;
        }
        // SAFETY: `map` owns a read-only mapping of `[start, end)` (it is
        // the whole mapping `map_file` made, never a slice of it) and keeps
        // it alive for as long as any view of it exists. `[from, end)` is a
        // whole number of pages inside it (`start` is page-aligned, `end` is
        // the mapping's end); MAP_FIXED replaces exactly those pages with
        // private anonymous zero pages of the same protection, so every
        // address a view may read stays mapped and readable, and the
        // mapping's final munmap releases them with the rest. Nothing else
        // lives in that range.
        let replaced = unsafe {
            rustix::mm::mmap_anonymous(
                from as *mut std::ffi::c_void,
                end - from,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED,
            )
        };
        match replaced {
            Ok(_) => end - from,
            Err(_) => 0,
        }
    }

    /// Lets go of this process's resident pages of the mapping that hold
    /// bytes below `below` (capped at the complete prefix), so that bytes
    /// every reader has long passed stop counting in the server's resident
    /// memory. The pages stay in the page cache: a reader that comes back to
    /// them (a replay, a lagging subscriber) maps them again on first touch,
    /// from the same file. Returns the length of the range released, whole
    /// pages (0 when `below` is 0 or nothing is mapped).
    pub fn release_below(&self, below: u64) -> usize {
        let upto = usize::try_from(below.min(self.complete_len())).unwrap_or(usize::MAX);
        release_mapped(&self.map, upto)
    }
}

/// How much of each source's newest file stays resident after
/// [`crate::Feed::release_read`] by the readers that release as they go (the
/// server's engine, `l1gate replay`), and after a long file is indexed: several
/// mainnet blocks' worth, what a live reader reads next or has just read (a
/// reader further behind maps its pages again from the page cache).
pub const RESIDENT_TAIL: u64 = 2 << 20;

/// Bytes of a file indexed line by line ([`Segment::line_starts`]) between
/// two releases of what the scan read: a file met whole (the `replica_cmds`
/// hours on disk when the server starts, gigabytes of them) is indexed
/// without staying resident; a live file's appends are smaller and are not
/// released.
const INDEX_CHUNK: usize = 64 << 20;

/// Appends to `starts` the offset (from `base`, the offset of `region` in
/// the file) of every line after a newline of `region`, scanning `chunk`
/// bytes at a time; when `region` is longer than one chunk, `release` is
/// told after each chunk the file offset the scan has reached.
fn index_lines(
    region: &[u8],
    base: u64,
    chunk: usize,
    starts: &mut Vec<u64>,
    mut release: impl FnMut(u64),
) {
    let chunk = chunk.max(1);
    let mut from = 0;
    while from < region.len() {
        let to = region.len().min(from.saturating_add(chunk));
        starts.extend(
            memchr::memchr_iter(b'\n', &region[from..to]).map(|at| base + (from + at) as u64 + 1),
        );
        if region.len() > chunk {
            release(base + to as u64);
        }
        from = to;
    }
}

/// Lets go of this process's resident pages of `map` — a whole mapping made
/// by [`map_file`] — holding its first `upto` bytes (rounded up to whole
/// pages, capped at the mapping). Bytes below `upto` must be final (the
/// files are append only; a snapshot is whole when mapped). Returns the
/// length released.
#[allow(unsafe_code)]
pub(crate) fn release_mapped(map: &Bytes, upto: usize) -> usize {
    let page = rustix::param::page_size();
    let upto = upto.min(map.len());
    // The mapping covers whole pages, so the page holding `upto` is in it.
    let len = upto.div_ceil(page) * page;
    if len == 0 {
        return 0;
    }
    // SAFETY: `map` owns a read-only shared mapping of the file starting
    // at `map.as_ptr()` (the whole mapping `map_file` made, page-aligned)
    // and keeps it alive while any view of it exists; `[start, start +
    // len)` is a whole number of pages inside it. MADV_DONTNEED on a
    // shared file mapping only removes this process's page-table entries:
    // the address range stays mapped with the same protection, and the
    // next read of any of it faults the page in again from the file. The
    // bytes below `upto` are final, so a view reads the same bytes before
    // and after; a file shortened by hand behaves as it does for any first
    // read (the SIGBUS guard, `crate::fault`). Pages `defuse_past` replaced
    // with private zero pages read as zeros again. This process never
    // writes through the mapping, so nothing is discarded.
    let released = unsafe {
        rustix::mm::madvise(
            map.as_ptr().cast_mut().cast(),
            len,
            rustix::mm::Advice::LinuxDontNeed,
        )
    };
    if released.is_ok() { len } else { 0 }
}

/// The last complete line of newline-terminated `data`.
fn last_line_of(data: &Bytes) -> Option<Bytes> {
    let end = data.len().checked_sub(1)?;
    let start = memchr::memrchr(b'\n', &data[..end]).map_or(0, |at| at + 1);
    Some(data.slice(start..end))
}

fn to_usize(len: u64, path: &Path) -> Result<usize, FeedError> {
    usize::try_from(len).map_err(|_| FeedError::Io {
        op: "map",
        path: path.to_path_buf(),
        kind: std::io::ErrorKind::InvalidInput,
        message: "file larger than the address space".to_owned(),
    })
}

/// Maps the first `len` bytes of a whole file that does not change (a
/// verified snapshot, a decoded compressed file) read-only, as [`Bytes`]
/// that own the mapping.
///
/// # Errors
/// [`FeedError::Io`] when the mapping fails.
pub(crate) fn map_prefix(file: &File, len: u64, path: &Path) -> Result<Bytes, FeedError> {
    map_file(file, len, path)
}

/// Maps `len` bytes of `file` read-only — possibly more than it holds yet —
/// and returns them as [`Bytes`] that own the mapping (so slices can leave
/// the crate without a copy and outlive any later re-mapping).
///
/// Callers only ever read bytes the file held when they checked its length:
/// a complete newline-terminated prefix and the partial line after it for
/// line files, or a whole verified snapshot file.
///
/// # Errors
/// [`FeedError::Io`] when the mapping fails.
#[allow(unsafe_code)]
fn map_file(file: &File, len: u64, path: &Path) -> Result<Bytes, FeedError> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let len = to_usize(len, path)?;
    // SAFETY: a mapping is only sound while nobody changes or shortens the
    // bytes read through it. The node's output files are append-only: bytes
    // once written are never rewritten, and callers read only bytes below a
    // length the file had when they checked it (for line files, only the
    // complete prefix up to the last '\n' leaves this module, so a
    // half-written line is never exposed). Pages past the file's end are
    // mapped but never read until the file has grown past them, at which
    // point the shared mapping shows the appended bytes. If an operator
    // truncated a file anyway (or a disk cannot read a page), reading the
    // vanished pages would raise SIGBUS: the mapping is registered with the
    // SIGBUS guard (`crate::fault`), which answers such a fault by replacing
    // the pages from the faulting one on with zero pages; refresh notices
    // the shrink, does the same for the views handed out earlier
    // (`Segment::defuse_past`) and maps the file anew. A decoded compressed
    // file (`crate::spool`) is mapped by `map_spooled`, not here.
    // The map is read-only, so this process never writes through it.
    Ok(Bytes::from_owner(unsafe { guarded_map(file, len, path)? }))
}

/// Maps `len` bytes of `file` read-only and registers the mapping with the
/// SIGBUS guard ([`crate::fault`]).
///
/// # Safety
/// Nobody may change or shorten the bytes read through the mapping while
/// it lives (see the callers for why each file qualifies).
///
/// # Errors
/// [`FeedError::Io`] when the mapping fails.
#[allow(unsafe_code)]
unsafe fn guarded_map(file: &File, len: usize, path: &Path) -> Result<GuardedMap, FeedError> {
    // SAFETY: the caller's promise above.
    let map = unsafe { MmapOptions::new().len(len).map(file) }
        .map_err(|e| FeedError::io("map", path, &e))?;
    let guard = crate::fault::guard(map.as_ptr() as usize, map.len());
    Ok(GuardedMap { guard, map })
}

/// Maps the first `len` bytes of a decoded compressed file's temporary
/// file ([`crate::spool`]) read-only, as [`Bytes`] that own the mapping and
/// the file: when the last view is dropped the mapping goes, then the file
/// is kept for the next decoding ([`crate::spool::keep_file`]).
///
/// # Errors
/// [`FeedError::Io`] when the mapping fails.
#[allow(unsafe_code)]
fn map_spooled(file: File, len: u64, path: &Path) -> Result<Bytes, FeedError> {
    if len == 0 {
        crate::spool::keep_file(file);
        return Ok(Bytes::new());
    }
    let len = to_usize(len, path)?;
    // SAFETY: the file has no name and only this process holds it. Its
    // first `len` bytes were written whole before this mapping, and nothing
    // writes to it while the mapping lives: the file is handed back for
    // reuse only by the owner's drop below, after the mapping is unmapped,
    // and a decoding takes a file only from the kept ones or new.
    let map = unsafe { guarded_map(&file, len, path)? };
    Ok(Bytes::from_owner(SpooledMap {
        map: Some(map),
        file: Some(file),
    }))
}

/// A decoded file's mapping and its temporary file, kept for reuse once
/// the mapping is gone.
struct SpooledMap {
    map: Option<GuardedMap>,
    file: Option<File>,
}

impl AsRef<[u8]> for SpooledMap {
    fn as_ref(&self) -> &[u8] {
        self.map.as_ref().map_or(&[], |m| &m.map)
    }
}

impl Drop for SpooledMap {
    fn drop(&mut self) {
        drop(self.map.take());
        if let Some(file) = self.file.take() {
            crate::spool::keep_file(file);
        }
    }
}

/// A mapping registered with the SIGBUS guard ([`crate::fault`]). Fields
/// drop in order: the registration goes before the mapping is unmapped.
struct GuardedMap {
    #[allow(dead_code)]
    guard: crate::fault::Guarded,
    map: memmap2::Mmap,
}

impl AsRef<[u8]> for GuardedMap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
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
    fn a_file_met_whole_is_indexed_without_staying_resident() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        let mut line = vec![b'x'; 1023];
        line.push(b'\n');
        let lines = (3 * INDEX_CHUNK + 4096) / line.len();
        let mut file = std::io::BufWriter::new(File::create(&path).unwrap());
        for _ in 0..lines {
            file.write_all(&line).unwrap();
        }
        drop(file);
        let seg = Segment::new(key(), path.clone(), true);
        let whole = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(whole.line_starts().unwrap().len(), lines);
        // Without the release behind the scan, all three chunks' pages stay mapped in.
        let resident = crate::resident::of(&path).unwrap() / 1024;
        assert!(
            resident * 1024 < INDEX_CHUNK as u64,
            "{resident} KiB of a {} MiB file resident after indexing it",
            (lines * line.len()) >> 20
        );
    }

    #[test]
    fn a_region_longer_than_a_chunk_is_indexed_alike_and_let_go_of_behind_the_scan() {
        let region = b"a\nbb\nccc\n\ndddd\neeeee\nf";
        let base = 100;
        let whole: Vec<u64> = memchr::memchr_iter(b'\n', region)
            .map(|at| base + at as u64 + 1)
            .collect();
        for chunk in [1, 2, 3, 5, 8, region.len(), region.len() + 10] {
            let mut starts = Vec::new();
            let mut released = Vec::new();
            index_lines(region, base, chunk, &mut starts, |at| released.push(at));
            assert_eq!(starts, whole, "chunk {chunk}");
            if chunk >= region.len() {
                assert!(released.is_empty(), "one chunk: nothing let go of");
            } else {
                assert_eq!(released.last(), Some(&(base + region.len() as u64)));
                assert!(released.windows(2).all(|w| w[0] < w[1]), "{released:?}");
            }
        }
    }

    #[test]
    fn appends_are_read_through_one_mapping_and_a_sealed_view_reopens() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        let mut file = File::create(&path).unwrap();
        file.write_all(b"a\n").unwrap();
        let seg = Segment::new(key(), path.clone(), false);
        let first = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        assert!(first.is_open());
        assert_eq!(first.map.len() as u64, 2 + RESERVE_AHEAD);
        file.write_all(b"bb\nc").unwrap();
        let second = first.grow(first.current_len().unwrap()).unwrap().unwrap();
        assert_eq!(&second.data()[..], b"a\nbb\n");
        assert_eq!(second.map.as_ptr(), first.map.as_ptr(), "not mapped again");

        let sealed = second.sealed().unwrap();
        assert!(!sealed.is_open());
        assert_eq!(&sealed.data()[..], b"a\nbb\n");
        assert_eq!(sealed.map.len(), 5, "no reservation past the end");
        file.write_all(b"\n").unwrap();
        let third = sealed.grow(sealed.current_len().unwrap()).unwrap().unwrap();
        assert!(third.is_open());
        assert_eq!(&third.data()[..], b"a\nbb\nc\n");
        assert_eq!(&second.data()[..], b"a\nbb\n", "old views keep their bytes");
    }

    #[test]
    fn views_of_a_shrunken_file_read_zeros_instead_of_faulting() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        let line = [b'a'; 99];
        let mut text = Vec::new();
        for _ in 0..400 {
            text.extend_from_slice(&line);
            text.push(b'\n');
        }
        std::fs::write(&path, &text).unwrap();
        let seg = Segment::new(key(), path.clone(), false);
        let seg = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        let view = seg.data().clone();
        assert_eq!(view.len(), 40_000);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        assert!(matches!(
            seg.grow(seg.current_len().unwrap()),
            Err(FeedError::Truncated { now: 10, .. })
        ));
        assert!(seg.defuse_past(10) > 0);
        // Without the zero pages this read would raise SIGBUS.
        let tail: u64 = view[8192..].iter().map(|&b| u64::from(b)).sum();
        assert_eq!(tail, 0);
        assert_eq!(&view[..10], &text[..10]);
    }

    #[test]
    fn a_read_of_a_vanished_page_before_any_refresh_reads_zeros() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0");
        let mut text = Vec::new();
        for _ in 0..400 {
            text.extend_from_slice(&[b'b'; 99]);
            text.push(b'\n');
        }
        std::fs::write(&path, &text).unwrap();
        let seg = Segment::new(key(), path.clone(), false);
        let seg = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
        let view = seg.data().clone();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        // No refresh, no defuse: the guard answers the fault.
        let before = crate::fault::faults();
        let tail: u64 = view[20_000..].iter().map(|&b| u64::from(b)).sum();
        assert_eq!(tail, 0);
        assert!(crate::fault::faults() > before);
        assert_eq!(&view[..100], &text[..100]);
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
