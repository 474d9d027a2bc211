//! The persistent candle store: one append-only file of fixed-width,
//! checksummed records, memory-mapped for lookups.
//!
//! # File layout (`candles-v1.dat`)
//!
//! A 64-byte header (magic `L1GCNDL\0`, format version, record size, the
//! history start it was created with, creation time, CRC-32 of the rest),
//! then 128-byte records, each starting with the CRC-32 of its other 124
//! bytes and a kind byte:
//!
//! - **coin**: a market name (up to [`MAX_COIN_LEN`] bytes) and the id the
//!   candle records of that market use;
//! - **candle**: coin id, interval, bucket open, trade count, open / high /
//!   low / close (exact decimals), volume, Σ px·sz and the VWAP (exact
//!   128-bit decimals);
//! - **commit**: the block number and block time the writer had folded when
//!   it wrote the batch, and the start of the store's coverage.
//!
//! All integers are little-endian.
//!
//! # Crash safety
//!
//! A batch is one positioned write of its coin and candle records followed
//! by a commit record, then `fdatasync`; only then does it become visible to
//! lookups. Records are never rewritten. On open, records are checked in
//! order; everything after the last good commit record (a torn batch,
//! garbage, the zeroed preallocation) is dropped and the file is cut there.
//! A record before the last good commit that fails its checksum, kind or
//! content check is damage, not a crash: it is skipped and reported, and
//! every other record is kept (one flipped byte costs one candle, not the
//! store).
//! The file grows in preallocated steps, so the mapping is replaced only when
//! it grows; readers keep the mapping they started with, which stays valid
//! because committed bytes are never truncated.
//!
//! One writer at a time: the store takes an exclusive `flock` on
//! `candles.lock` in the state directory for as long as it is open.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;
use memmap2::Mmap;
use parking_lot::RwLock;

/// Name of the store file in the state directory.
pub const FILE_NAME: &str = "candles-v1.dat";
/// Name of the lock file in the state directory.
pub const LOCK_NAME: &str = "candles.lock";
/// Bytes of the file header.
pub const HEADER_LEN: u64 = 64;
/// Bytes of one record.
pub const RECORD_LEN: usize = 128;
/// Longest market name the store holds.
pub const MAX_COIN_LEN: usize = 112;
/// The intervals the store keeps, in their on-disk code order.
pub const INTERVALS: [Interval; 3] = [Interval::Second1, Interval::Minute1, Interval::Minute5];

const MAGIC: &[u8; 8] = b"L1GCNDL\0";
const VERSION: u32 = 1;
const KIND_COIN: u8 = 1;
const KIND_CANDLE: u8 = 2;
const KIND_COMMIT: u8 = 3;
/// Smallest preallocation step; later steps double up to [`MAX_GROW`].
const MIN_GROW: u64 = 1 << 20;
const MAX_GROW: u64 = 1 << 30;

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file operation failed.
    #[error("candle store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Another process holds the store.
    #[error("candle store {path} is in use by another l1gate process")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// The file is not a candle store of a version this build reads.
    #[error("candle store {path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The code of a stored interval (`None` for intervals the store does not
/// keep).
pub fn interval_code(interval: Interval) -> Option<usize> {
    INTERVALS.iter().position(|i| *i == interval)
}

/// How far the committed data reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    /// The last block folded before the commit.
    pub block_number: u64,
    /// Its block time, Unix ms. Every candle whose bucket ended at or
    /// before it (and that had trades) is in the store.
    pub block_time_ms: i64,
    /// Buckets opening at or after this time (Unix ms) are complete in the
    /// store; earlier ones are not covered.
    pub coverage_start_ms: i64,
}

/// One stored candle, decoded from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredCandle {
    /// Interval.
    pub interval: Interval,
    /// Bucket open, Unix ms.
    pub open_time: i64,
    /// Trades in the bucket.
    pub trades_count: u64,
    /// First trade's price.
    pub open: Px,
    /// Highest price.
    pub high: Px,
    /// Lowest price.
    pub low: Px,
    /// Last trade's price.
    pub close: Px,
    /// Σ sz.
    pub volume: Amount,
    /// Σ px·sz.
    pub notional: Amount,
    /// Volume-weighted average price as the engine rounds it.
    pub vwap: Amount,
}

/// What opening the store found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Candle records committed.
    pub candles: u64,
    /// Bytes after the last commit that were dropped (a torn batch or
    /// garbage; the zeroed preallocation is not counted).
    pub dropped_bytes: u64,
    /// Offsets of records before the last commit that failed their checks
    /// (corruption, not a crash): skipped, their candles lost, everything
    /// around them kept. They stay in the file and are reported again at
    /// every open.
    pub damaged_records: Vec<u64>,
    /// Where the damaged records' candles belong: the block time each
    /// damaged batch covered, one span per batch, oldest first.
    pub damaged_spans: Vec<DamagedSpan>,
}

/// The stretch of block time one damaged batch covered: its candles closed
/// in blocks after `after_ms` (the previous commit's block time; `None`:
/// the first commit) up to `through_ms` (its own commit's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamagedSpan {
    /// The previous commit's block time, Unix ms.
    pub after_ms: Option<i64>,
    /// The batch's commit block time, Unix ms.
    pub through_ms: i64,
    /// Damaged records in the batch.
    pub records: usize,
}

/// The lookup side of the store: shared with every request handler.
#[derive(Debug)]
pub struct StoreReader {
    index: RwLock<Index>,
}

#[derive(Debug)]
struct Index {
    map: Arc<Mmap>,
    coins: HashMap<Box<str>, u32>,
    /// Per coin id, per interval code: `(open_time, record offset)` sorted
    /// by open time.
    series: Vec<[Vec<(i64, u64)>; 3]>,
    watermark: Option<Watermark>,
    candles: u64,
}

impl StoreReader {
    /// The committed candle of `coin`'s `interval` bucket opening at
    /// `open_time`.
    pub fn get(&self, coin: &str, interval: Interval, open_time: i64) -> Option<StoredCandle> {
        let code = interval_code(interval)?;
        let index = self.index.read();
        let id = *index.coins.get(coin)?;
        let series = &index.series.get(id as usize)?[code];
        let at = series
            .binary_search_by_key(&open_time, |(time, _)| *time)
            .ok()?;
        let offset = usize::try_from(series[at].1).ok()?;
        let record = index.map.get(offset..offset + RECORD_LEN)?;
        decode_candle(record)
    }

    /// Whether `coin` has any committed candle.
    pub fn knows(&self, coin: &str) -> bool {
        self.index.read().coins.contains_key(coin)
    }

    /// The last commit's watermark (`None` for an empty store).
    pub fn watermark(&self) -> Option<Watermark> {
        self.index.read().watermark
    }

    /// Candles committed.
    pub fn candles(&self) -> u64 {
        self.index.read().candles
    }
}

/// The writing side of the store: owned by the candle writer thread.
#[derive(Debug)]
pub struct CandleStore {
    path: PathBuf,
    file: File,
    /// Held (with its `flock`) for as long as the store is open.
    _lock: File,
    /// End of the committed records.
    end: u64,
    /// Bytes the file has been preallocated to.
    capacity: u64,
    /// The writer's copy of the coin ids (readers learn a coin at commit).
    coins: HashMap<String, u32>,
    reader: Arc<StoreReader>,
}

impl CandleStore {
    /// Opens (or creates) the store in `dir`, recovering from a torn tail.
    /// `history_start_ms` is recorded in a new file's header.
    ///
    /// # Errors
    /// [`StoreError`] when the directory or file is unusable, another
    /// process holds the store, or the file is not a candle store.
    pub fn open(dir: &Path, history_start_ms: i64) -> Result<(Self, Recovery), StoreError> {
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| StoreError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock_path = dir.join(LOCK_NAME);
        let lock = match crate::lock_exclusive(&lock_path) {
            Ok(Some(lock)) => lock,
            Ok(None) => return Err(StoreError::Locked { path: lock_path }),
            Err(source) => {
                return Err(StoreError::Io {
                    path: lock_path,
                    source,
                });
            }
        };
        let path = dir.join(FILE_NAME);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let len = file.metadata().map_err(io_err(&path))?.len();
        if len < HEADER_LEN || is_zero_header(&file, &path)? {
            // New, or a creation that crashed before its header was durable.
            file.set_len(0).map_err(io_err(&path))?;
            file.write_all_at(&header(history_start_ms), 0)
                .map_err(io_err(&path))?;
            file.sync_all().map_err(io_err(&path))?;
        } else {
            check_header(&file, &path)?;
        }
        let len = file.metadata().map_err(io_err(&path))?.len();
        let map = map_file(&file, len).map_err(io_err(&path))?;
        let scanned = scan(&map);
        // Past the last commit: a torn batch or garbage, then the zeroed
        // preallocation (which is not worth reporting).
        let tail = map.get(scanned.end as usize..).unwrap_or_default();
        let dropped_bytes = tail
            .iter()
            .rposition(|b| *b != 0)
            .map_or(0, |at| at as u64 + 1);
        drop(map);
        let recovery = Recovery {
            candles: scanned.candles,
            dropped_bytes,
            damaged_records: scanned.damaged.clone(),
            damaged_spans: scanned.spans.clone(),
        };
        if scanned.end < len {
            file.set_len(scanned.end).map_err(io_err(&path))?;
            file.sync_all().map_err(io_err(&path))?;
        }
        let capacity = scanned.end + MIN_GROW;
        file.set_len(capacity).map_err(io_err(&path))?;
        let map = Arc::new(map_file(&file, capacity).map_err(io_err(&path))?);
        let coins: HashMap<String, u32> = scanned
            .coins
            .iter()
            .map(|(name, id)| (name.to_string(), *id))
            .collect();
        let reader = Arc::new(StoreReader {
            index: RwLock::new(Index {
                map,
                coins: scanned.coins,
                series: scanned.series,
                watermark: scanned.watermark,
                candles: scanned.candles,
            }),
        });
        Ok((
            Self {
                path,
                file,
                _lock: lock,
                end: scanned.end,
                capacity,
                coins,
                reader,
            },
            recovery,
        ))
    }

    /// The lookup side.
    pub fn reader(&self) -> &Arc<StoreReader> {
        &self.reader
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `candles` (closed buckets, final state) and a commit record
    /// for `watermark`, makes them durable, then visible to lookups.
    /// Candles of intervals the store does not keep, with names longer than
    /// [`MAX_COIN_LEN`], or already stored are skipped. Returns how many
    /// were written.
    ///
    /// # Errors
    /// [`StoreError::Io`] when writing, growing or syncing fails; nothing
    /// of the batch is visible then, and a later commit may retry it.
    pub fn commit(
        &mut self,
        candles: &[Candle],
        watermark: Watermark,
    ) -> Result<usize, StoreError> {
        let mut bytes = Vec::with_capacity((candles.len() + 1) * RECORD_LEN);
        let mut new_coins: Vec<(String, u32)> = Vec::new();
        let mut placed: Vec<(u32, usize, i64, u64)> = Vec::with_capacity(candles.len());
        for candle in candles {
            let Some(code) = interval_code(candle.interval) else {
                continue;
            };
            if candle.coin.len() > MAX_COIN_LEN {
                tracing::warn!(
                    coin_len = candle.coin.len(),
                    "candle store: market name too long to store; candle skipped"
                );
                continue;
            }
            let id = if let Some(id) = self.coins.get(&candle.coin) {
                *id
            } else if let Some((_, id)) = new_coins.iter().find(|(c, _)| *c == candle.coin) {
                *id
            } else {
                let id = (self.coins.len() + new_coins.len()) as u32;
                bytes.extend_from_slice(&coin_record(id, &candle.coin));
                new_coins.push((candle.coin.clone(), id));
                id
            };
            let duplicate = self.reader.contains(id, code, candle.open_time)
                || placed
                    .iter()
                    .any(|(i, c, t, _)| (*i, *c, *t) == (id, code, candle.open_time));
            if duplicate {
                tracing::debug!(coin = %candle.coin, interval = %candle.interval, open_time = candle.open_time,
                    "candle store: bucket already stored; skipped");
                continue;
            }
            let offset = self.end + bytes.len() as u64;
            bytes.extend_from_slice(&candle_record(id, code, candle));
            placed.push((id, code, candle.open_time, offset));
        }
        bytes.extend_from_slice(&commit_record(watermark));
        let needed = self.end + bytes.len() as u64;
        if needed > self.capacity {
            let step = self.capacity.clamp(MIN_GROW, MAX_GROW);
            let capacity = needed.max(self.capacity + step);
            self.file.set_len(capacity).map_err(self.io())?;
            let map = map_file(&self.file, capacity).map_err(self.io())?;
            // Readers only look at committed bytes, which both maps hold.
            self.reader.index.write().map = Arc::new(map);
            self.capacity = capacity;
        }
        self.file
            .write_all_at(&bytes, self.end)
            .map_err(self.io())?;
        self.file.sync_data().map_err(self.io())?;
        self.end = needed;
        for (coin, id) in &new_coins {
            self.coins.insert(coin.clone(), *id);
        }
        let mut index = self.reader.index.write();
        for (coin, id) in new_coins {
            index.coins.insert(coin.into_boxed_str(), id);
        }
        for &(id, code, open_time, offset) in &placed {
            index.insert(id, code, open_time, offset);
        }
        index.watermark = Some(watermark);
        index.candles += placed.len() as u64;
        Ok(placed.len())
    }

    fn io(&self) -> impl FnOnce(io::Error) -> StoreError + use<> {
        let path = self.path.clone();
        move |source| StoreError::Io { path, source }
    }
}

impl StoreReader {
    fn contains(&self, id: u32, code: usize, open_time: i64) -> bool {
        let index = self.index.read();
        index.series.get(id as usize).is_some_and(|series| {
            series[code]
                .binary_search_by_key(&open_time, |(time, _)| *time)
                .is_ok()
        })
    }
}

impl Index {
    fn insert(&mut self, id: u32, code: usize, open_time: i64, offset: u64) {
        insert_series(&mut self.series, id, code, open_time, offset);
    }
}

/// Adds one candle's place to a series index, keeping it sorted by open
/// time (buckets close in order, so this is almost always a push).
fn insert_series(
    series: &mut Vec<[Vec<(i64, u64)>; 3]>,
    id: u32,
    code: usize,
    open_time: i64,
    offset: u64,
) {
    let id = id as usize;
    if series.len() <= id {
        series.resize_with(id + 1, Default::default);
    }
    let series = &mut series[id][code];
    match series.last() {
        Some((last, _)) if *last >= open_time => {
            if let Err(at) = series.binary_search_by_key(&open_time, |(time, _)| *time) {
                series.insert(at, (open_time, offset));
            }
        }
        _ => series.push((open_time, offset)),
    }
}

/// Maps the first `len` bytes of `file` read-only.
#[allow(unsafe_code)]
fn map_file(file: &File, len: u64) -> io::Result<Mmap> {
    let len = usize::try_from(len).map_err(|_| io::Error::other("store larger than memory"))?;
    // SAFETY: a mapping is only unsound if the mapped bytes change or vanish
    // under it. The store file lives in l1gate's own state directory and is
    // written only by this process under an exclusive lock: committed bytes
    // are never rewritten, and the file is only cut (on open, before any
    // reader exists) past the last commit, which no reader maps into. Bytes
    // past the committed end may be written while mapped; readers never look
    // at them. An outside process truncating the file would fault readers,
    // as it would for any memory-mapped database.
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }
}

fn is_zero_header(file: &File, path: &Path) -> Result<bool, StoreError> {
    let mut bytes = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|source| StoreError::Io {
            path: path.to_owned(),
            source,
        })?;
    Ok(bytes.iter().all(|b| *b == 0))
}

fn header(history_start_ms: i64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&history_start_ms.to_le_bytes());
    h[24..32].copy_from_slice(&crate::unix_now_ms().to_le_bytes());
    let crc = crc32fast::hash(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

fn check_header(file: &File, path: &Path) -> Result<(), StoreError> {
    let mut h = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut h, 0)
        .map_err(|source| StoreError::Io {
            path: path.to_owned(),
            source,
        })?;
    let format = |message: String| StoreError::Format {
        path: path.to_owned(),
        message,
    };
    if &h[0..8] != MAGIC {
        return Err(format("not a candle store (bad magic)".into()));
    }
    if crc32fast::hash(&h[..60]) != u32_at(&h, 60) {
        return Err(format("header checksum mismatch".into()));
    }
    let version = u32_at(&h, 8);
    if version != VERSION {
        return Err(format(format!(
            "format version {version}; this build reads {VERSION}"
        )));
    }
    let record_len = u32_at(&h, 12);
    if record_len as usize != RECORD_LEN {
        return Err(format(format!(
            "record size {record_len}, expected {RECORD_LEN}"
        )));
    }
    Ok(())
}

struct Scanned {
    end: u64,
    coins: HashMap<Box<str>, u32>,
    series: Vec<[Vec<(i64, u64)>; 3]>,
    watermark: Option<Watermark>,
    candles: u64,
    /// Offsets of damaged records before the last good commit.
    damaged: Vec<u64>,
    /// The batches they were in.
    spans: Vec<DamagedSpan>,
}

/// Reads every record; keeps what the last good commit covers. A record
/// whose checksum, kind or content is wrong is skipped, not an end: before
/// the last good commit it is damage (counted in `damaged`, its candle is
/// lost, the records around it are kept); after it, it belongs to the tail
/// a crash left (a torn batch, then the zeroed preallocation).
fn scan(map: &[u8]) -> Scanned {
    let mut out = Scanned {
        end: HEADER_LEN,
        coins: HashMap::new(),
        series: Vec::new(),
        watermark: None,
        candles: 0,
        damaged: Vec::new(),
        spans: Vec::new(),
    };
    let mut pending_coins: Vec<(Box<str>, u32)> = Vec::new();
    let mut pending: Vec<(u32, usize, i64, u64)> = Vec::new();
    let mut pending_bad: Vec<u64> = Vec::new();
    let mut offset = HEADER_LEN as usize;
    while let Some(record) = map.get(offset..offset + RECORD_LEN) {
        let at = offset as u64;
        offset += RECORD_LEN;
        if record[0..4] != crc32fast::hash(&record[4..]).to_le_bytes() {
            pending_bad.push(at);
            continue;
        }
        match record[4] {
            KIND_COIN => match decode_coin(record) {
                Some(name) => pending_coins.push((name.into(), u32_at(record, 8))),
                None => pending_bad.push(at),
            },
            KIND_CANDLE => {
                let code = usize::from(record[12]);
                if code >= INTERVALS.len() || decode_candle(record).is_none() {
                    pending_bad.push(at);
                } else {
                    pending.push((u32_at(record, 8), code, i64_at(record, 16), at));
                }
            }
            KIND_COMMIT => {
                for (name, id) in pending_coins.drain(..) {
                    out.coins.insert(name, id);
                }
                for (id, code, open_time, at) in pending.drain(..) {
                    insert_series(&mut out.series, id, code, open_time, at);
                    out.candles += 1;
                }
                let watermark = Watermark {
                    block_number: u64_at(record, 8),
                    block_time_ms: i64_at(record, 16),
                    coverage_start_ms: i64_at(record, 24),
                };
                if !pending_bad.is_empty() {
                    out.spans.push(DamagedSpan {
                        after_ms: out.watermark.map(|w| w.block_time_ms),
                        through_ms: watermark.block_time_ms,
                        records: pending_bad.len(),
                    });
                }
                out.damaged.append(&mut pending_bad);
                out.watermark = Some(watermark);
                out.end = at + RECORD_LEN as u64;
            }
            _ => pending_bad.push(at),
        }
    }
    out
}

fn seal(mut record: [u8; RECORD_LEN]) -> [u8; RECORD_LEN] {
    let crc = crc32fast::hash(&record[4..]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
    record
}

fn coin_record(id: u32, name: &str) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    r[4] = KIND_COIN;
    r[8..12].copy_from_slice(&id.to_le_bytes());
    r[12] = name.len() as u8;
    r[16..16 + name.len()].copy_from_slice(name.as_bytes());
    seal(r)
}

fn decode_coin(r: &[u8]) -> Option<&str> {
    let len = usize::from(r[12]);
    if len == 0 || len > MAX_COIN_LEN {
        return None;
    }
    std::str::from_utf8(&r[16..16 + len]).ok()
}

fn candle_record(id: u32, code: usize, c: &Candle) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    r[4] = KIND_CANDLE;
    r[8..12].copy_from_slice(&id.to_le_bytes());
    r[12] = code as u8;
    r[13] = c.price_scale;
    r[16..24].copy_from_slice(&c.open_time.to_le_bytes());
    r[24..32].copy_from_slice(&c.trades_count.to_le_bytes());
    for (i, px) in [c.open, c.high, c.low, c.close].into_iter().enumerate() {
        r[32 + 8 * i..40 + 8 * i].copy_from_slice(&px.units().to_le_bytes());
        r[64 + i] = px.scale();
    }
    let vwap = c.vwap().unwrap_or_default();
    for (i, amount) in [c.volume, c.notional, vwap].into_iter().enumerate() {
        r[68 + i] = amount.scale();
        r[72 + 16 * i..88 + 16 * i].copy_from_slice(&amount.units().to_le_bytes());
    }
    seal(r)
}

fn decode_candle(r: &[u8]) -> Option<StoredCandle> {
    if r.len() != RECORD_LEN || r[4] != KIND_CANDLE {
        return None;
    }
    let interval = *INTERVALS.get(usize::from(r[12]))?;
    let px = |i: usize| Px::new(i64_at(r, 32 + 8 * i), r[64 + i]).ok();
    let amount = |i: usize| {
        let scale = r[68 + i];
        (scale <= 36).then(|| Amount::new(i128_at(r, 72 + 16 * i), scale))
    };
    Some(StoredCandle {
        interval,
        open_time: i64_at(r, 16),
        trades_count: u64_at(r, 24),
        open: px(0)?,
        high: px(1)?,
        low: px(2)?,
        close: px(3)?,
        volume: amount(0)?,
        notional: amount(1)?,
        vwap: amount(2)?,
    })
}

fn commit_record(w: Watermark) -> [u8; RECORD_LEN] {
    let mut r = [0u8; RECORD_LEN];
    r[4] = KIND_COMMIT;
    r[8..16].copy_from_slice(&w.block_number.to_le_bytes());
    r[16..24].copy_from_slice(&w.block_time_ms.to_le_bytes());
    r[24..32].copy_from_slice(&w.coverage_start_ms.to_le_bytes());
    seal(r)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(x)
}

fn i128_at(b: &[u8], at: usize) -> i128 {
    let mut x = [0u8; 16];
    x.copy_from_slice(&b[at..at + 16]);
    i128::from_le_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candle(coin: &str, interval: Interval, open_time: i64, px: &str) -> Candle {
        let px = Px::parse(px).unwrap();
        let sz = Px::parse("0.25").unwrap();
        let (units, scale) = px.mul_wide(sz);
        Candle {
            coin: coin.to_owned(),
            interval,
            open_time,
            next_open: interval.next_open(open_time),
            open: px,
            high: px,
            low: px,
            close: px,
            volume: Amount::new(i128::from(sz.units()), sz.scale()),
            notional: Amount::new(units, scale),
            trades_count: 1,
            price_scale: px.scale(),
            block_number: 1,
            time: open_time,
        }
    }

    fn mark(block_number: u64) -> Watermark {
        Watermark {
            block_number,
            block_time_ms: block_number as i64 * 1_000,
            coverage_start_ms: 0,
        }
    }

    #[test]
    fn grows_past_its_preallocation_and_reopens_with_everything() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery, Recovery::default());
        // 12,000 records of 128 bytes: past the first 1 MiB step.
        for batch in 0..12 {
            let candles: Vec<Candle> = (0..1_000)
                .map(|i| {
                    let second = batch * 1_000 + i;
                    candle("xyz:NVDA", Interval::Second1, second * 1_000, "181.25")
                })
                .collect();
            assert_eq!(
                store.commit(&candles, mark(batch as u64 + 1)).unwrap(),
                1_000
            );
        }
        let reader = store.reader().clone();
        let got = reader
            .get("xyz:NVDA", Interval::Second1, 11_999_000)
            .unwrap();
        assert_eq!(got.open.to_string(), "181.25");
        assert_eq!(got.vwap.to_string(), "181.25");
        assert_eq!(got.volume.to_string(), "0.25");
        assert_eq!(reader.candles(), 12_000);
        drop(store);
        let (store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery.dropped_bytes, 0);
        assert_eq!(store.reader().candles(), 12_000);
        assert_eq!(store.reader().watermark(), Some(mark(12)));
        for second in [0, 5_000, 11_999] {
            assert!(
                store
                    .reader()
                    .get("xyz:NVDA", Interval::Second1, second * 1_000)
                    .is_some()
            );
        }
        assert!(
            store
                .reader()
                .get("xyz:NVDA", Interval::Minute1, 0)
                .is_none()
        );
        assert!(store.reader().get("BTC", Interval::Second1, 0).is_none());
    }

    #[test]
    fn a_flipped_byte_costs_one_candle_not_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = CandleStore::open(dir.path(), 0).unwrap();
        for batch in 0..10i64 {
            let candles: Vec<Candle> = (0..10)
                .map(|i| candle("BTC", Interval::Second1, (batch * 10 + i) * 1_000, "1.0"))
                .collect();
            store.commit(&candles, mark(batch as u64 + 1)).unwrap();
        }
        assert_eq!(store.reader().candles(), 100);
        drop(store);
        // One byte of a candle record of the third batch: header, a coin
        // record, then batches of 10 candles and a commit.
        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let victim = HEADER_LEN as usize + RECORD_LEN * (1 + 2 * 11 + 3) + 40;
        bytes[victim] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let (store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery.damaged_records.len(), 1, "{recovery:?}");
        assert_eq!(
            recovery.damaged_spans,
            vec![DamagedSpan {
                after_ms: Some(mark(2).block_time_ms),
                through_ms: mark(3).block_time_ms,
                records: 1
            }]
        );
        assert_eq!(recovery.dropped_bytes, 0);
        assert_eq!(store.reader().candles(), 99);
        assert_eq!(store.reader().watermark(), Some(mark(10)));
        let lost = (0..100)
            .filter(|i| {
                store
                    .reader()
                    .get("BTC", Interval::Second1, i * 1_000)
                    .is_none()
            })
            .count();
        assert_eq!(lost, 1);
        // Still writable after it, and the damage is reported again.
        let (mut store, _) = {
            drop(store);
            CandleStore::open(dir.path(), 0).unwrap()
        };
        store
            .commit(
                &[candle("BTC", Interval::Second1, 500_000, "2.0")],
                mark(11),
            )
            .unwrap();
        drop(store);
        let (store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery.damaged_records.len(), 1);
        assert_eq!(store.reader().candles(), 100);
    }

    #[test]
    fn a_bucket_is_stored_once_and_other_intervals_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = CandleStore::open(dir.path(), 0).unwrap();
        let first = candle("BTC", Interval::Minute1, 60_000, "81307.0");
        let again = candle("BTC", Interval::Minute1, 60_000, "99999.0");
        let hourly = candle("BTC", Interval::Hour1, 0, "1.0");
        assert_eq!(store.commit(&[first, hourly], mark(1)).unwrap(), 1);
        assert_eq!(store.commit(&[again.clone(), again], mark(2)).unwrap(), 0);
        let got = store
            .reader()
            .get("BTC", Interval::Minute1, 60_000)
            .unwrap();
        assert_eq!(got.close.to_string(), "81307.0");
        assert_eq!(store.reader().watermark(), Some(mark(2)));
    }

    #[test]
    fn an_uncommitted_tail_is_dropped_and_a_foreign_file_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = CandleStore::open(dir.path(), 0).unwrap();
        store
            .commit(
                &[candle("@107", Interval::Minute5, 300_000, "37.826")],
                mark(1),
            )
            .unwrap();
        let end = store.end;
        drop(store);
        // A torn batch: a valid coin record, half a candle, no commit.
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join(FILE_NAME))
            .unwrap();
        let mut torn = coin_record(9, "PURR/USDC").to_vec();
        torn.extend_from_slice(
            &candle_record(9, 0, &candle("PURR/USDC", Interval::Second1, 0, "0.1"))[..60],
        );
        torn.push(0xEE);
        file.write_all_at(&torn, end).unwrap();
        drop(file);
        let (store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery.dropped_bytes, torn.len() as u64);
        assert_eq!(store.reader().candles(), 1);
        assert!(!store.reader().knows("PURR/USDC"));
        assert!(
            store
                .reader()
                .get("@107", Interval::Minute5, 300_000)
                .is_some()
        );
        drop(store);

        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join(FILE_NAME), vec![7u8; 4096]).unwrap();
        let error = CandleStore::open(other.path(), 0).unwrap_err();
        assert!(error.to_string().contains("not a candle store"), "{error}");
    }
}
