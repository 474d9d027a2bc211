//! The persistent candle store: every closed `1s`, `1m` and `5m` candle
//! l1gate folded from node files or imported from the exchange's archive,
//! in one embedded database file, `candles.redb` in the state directory.
//!
//! # Layout
//!
//! The storage engine is [redb](https://www.redb.org): one file of
//! copy-on-write B-trees with checksummed, atomic commits. Four tables:
//!
//! - `coins`: market name → a 32-bit id;
//! - `chunks`: `(coin id, interval code, span start)` (13 bytes, big-endian,
//!   so a market's chunks of one interval lie in time order) → one *chunk*:
//!   the candles of that market and interval opening in one fixed span of
//!   time, in the compact columnar encoding of [`super::chunk`] (with its
//!   own CRC-32);
//! - `counts`: the same keys → the chunk's candle count, kept apart so that
//!   the store's count stays exact when a damaged chunk is written anew;
//! - `meta`: the format version, the history start, the watermark (the
//!   last block folded and committed), the candle count, the coverage
//!   ([`Coverage`]: which stretches of block time are complete, and the
//!   gaps known between them with their reasons), and the chunks found
//!   damaged and not rebuilt yet.
//!
//! Nothing is held in memory per candle or per chunk: a lookup reads one
//! chunk through redb's page cache ([`CACHE_BYTES`]), so the resident memory
//! does not grow with the history stored. Only the market names (a few
//! hundred) and the coverage lists are kept in memory.
//!
//! # Writing
//!
//! [`CandleStore::commit`] merges closed candles into their chunks (a
//! bucket already stored is never rewritten), updates the watermark and
//! the coverage, and commits: durable (`fsync`) when it returns, visible to
//! lookups after. A crash leaves the last commit (redb's commit protocol,
//! with quick repair: reopening after a crash does not walk the file).
//!
//! # Damage
//!
//! A chunk whose checksum or structure fails is damage, not a crash: the
//! lookups into it answer that the candles of its span are damaged (not
//! that there were no trades), it is recorded in `meta`, and the candle
//! store thread rebuilds it from the node's files when they still reach
//! back that far ([`crate::candle_thread::repair`]), as an import of the
//! archive's hours does. A byte flipped in a chunk costs that chunk's span
//! until then, never the store. redb checks its own pages when it repairs
//! after a crash; damage to them is a start-up error naming the file.
//!
//! # The first store
//!
//! A `candles-v1.dat` file (the fixed-record store of earlier releases) in
//! the state directory is carried over on open, candle for candle, with its
//! watermark, its coverage and its damaged batches (as gaps the node files
//! may still fill), then renamed `candles-v1.dat.carried-over`.
//!
//! One writer at a time: the store takes an exclusive `flock` on
//! `candles.lock` in the state directory for as long as it is open.

pub mod v1;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;
use parking_lot::{Mutex, RwLock};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::chunk::{self, Chunk, ChunkCandle};

/// Name of the store file in the state directory.
pub const FILE_NAME: &str = "candles.redb";
/// Name of the lock file in the state directory.
pub const LOCK_NAME: &str = "candles.lock";
/// Longest market name the store holds.
pub const MAX_COIN_LEN: usize = 112;
/// The intervals the store keeps, in their code order.
pub const INTERVALS: [Interval; 3] = [Interval::Second1, Interval::Minute1, Interval::Minute5];
/// Memory redb may use to cache the file's pages.
pub const CACHE_BYTES: usize = 16 * 1024 * 1024;
/// The layout version in `meta`.
const FORMAT: u32 = 2;

const COINS: TableDefinition<&str, u32> = TableDefinition::new("coins");
const CHUNKS: TableDefinition<[u8; 13], &[u8]> = TableDefinition::new("chunks");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Rows of each chunk, kept apart from it: a damaged chunk's count is
/// still known when it is written anew.
const COUNTS: TableDefinition<[u8; 13], u32> = TableDefinition::new("counts");

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
    /// The storage engine failed (an I/O error, or a page failing its
    /// checks).
    #[error("candle store {path}: {message}")]
    Engine {
        /// The file.
        path: PathBuf,
        /// redb's words.
        message: String,
    },
}

/// The code of a stored interval (`None` for intervals the store does not
/// keep).
pub fn interval_code(interval: Interval) -> Option<usize> {
    INTERVALS.iter().position(|i| *i == interval)
}

/// The last block folded and committed: where a fold resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    /// The block number (for the older fill formats, the time standing in
    /// for it).
    pub block_number: u64,
    /// Its block time, Unix ms.
    pub block_time_ms: i64,
}

/// A stretch of block time folded whole: every bucket lying inside it
/// (opening at or after `from_ms`, ending by `to_ms`) is complete in the
/// store — stored when it had trades.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span {
    /// First block time folded, Unix ms.
    pub from_ms: i64,
    /// Last block time folded, Unix ms.
    pub to_ms: i64,
}

impl Span {
    /// Whether the bucket `[open, next_open)` lies inside.
    pub fn holds(&self, open: i64, next_open: i64) -> bool {
        open >= self.from_ms && next_open <= self.to_ms
    }
}

/// A stretch of block time whose trades may be missing: between two blocks
/// folded at `from_ms` and `to_ms` something was not read (blocks missing
/// from the files, an hour file missing or damaged, a hand-over between
/// two archive formats, files pruned while l1gate was stopped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The block time before it, Unix ms (exclusive).
    pub from_ms: i64,
    /// The block time after it, Unix ms (exclusive).
    pub to_ms: i64,
    /// Why.
    pub reason: String,
}

impl Gap {
    /// Whether trades of the bucket `[open, next_open)` may lie in it.
    pub fn touches(&self, open: i64, next_open: i64) -> bool {
        open < self.to_ms && next_open > self.from_ms.saturating_add(1)
    }
}

/// What the store holds whole, and what it knows it lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Disjoint spans folded whole, in time order (touching spans merge).
    pub spans: Vec<Span>,
    /// Known gaps, in time order. A gap splits the spans it falls inside;
    /// one that a later span reaches over only in part stays, and lookups
    /// answer it first.
    pub gaps: Vec<Gap>,
}

impl Coverage {
    /// The span holding the bucket `[open, next_open)`, if one does.
    pub fn holding(&self, open: i64, next_open: i64) -> Option<Span> {
        self.spans
            .iter()
            .find(|span| span.holds(open, next_open))
            .copied()
    }

    /// The first gap the bucket `[open, next_open)` touches.
    pub fn gap_touching(&self, open: i64, next_open: i64) -> Option<&Gap> {
        self.gaps.iter().find(|gap| gap.touches(open, next_open))
    }

    /// Adds a span folded whole: it merges with the spans it touches and
    /// fills (removes) the gaps it covers.
    pub fn add_span(&mut self, span: Span) {
        if span.to_ms < span.from_ms {
            return;
        }
        let mut merged = span;
        self.spans.retain(|s| {
            let touches = s.from_ms <= merged.to_ms && merged.from_ms <= s.to_ms;
            if touches {
                merged.from_ms = merged.from_ms.min(s.from_ms);
                merged.to_ms = merged.to_ms.max(s.to_ms);
            }
            !touches
        });
        self.spans.push(merged);
        self.spans.sort();
        // A gap is filled where the new span reaches over both its ends.
        self.gaps
            .retain(|gap| !(merged.from_ms <= gap.from_ms && merged.to_ms >= gap.to_ms));
    }

    /// Adds a gap: spans it falls inside are split around it.
    pub fn add_gap(&mut self, gap: Gap) {
        if gap.to_ms <= gap.from_ms.saturating_add(1) {
            return;
        }
        let mut spans = Vec::with_capacity(self.spans.len() + 1);
        for span in self.spans.drain(..) {
            if span.to_ms <= gap.from_ms || span.from_ms >= gap.to_ms {
                spans.push(span);
                continue;
            }
            if span.from_ms <= gap.from_ms {
                spans.push(Span {
                    from_ms: span.from_ms,
                    to_ms: gap.from_ms,
                });
            }
            if span.to_ms >= gap.to_ms {
                spans.push(Span {
                    from_ms: gap.to_ms,
                    to_ms: span.to_ms,
                });
            }
        }
        self.spans = spans;
        if !self.gaps.contains(&gap) {
            self.gaps.push(gap);
            self.gaps.sort_by_key(|g| (g.from_ms, g.to_ms));
        }
    }

    /// The stretches of `[from_ms, to_ms)` no span covers, in time order.
    pub fn uncovered(&self, from_ms: i64, to_ms: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut at = from_ms;
        for span in &self.spans {
            if span.to_ms < at {
                continue;
            }
            if span.from_ms >= to_ms {
                break;
            }
            if span.from_ms > at {
                out.push((at, span.from_ms));
            }
            at = at.max(span.to_ms);
        }
        if at < to_ms {
            out.push((at, to_ms));
        }
        out
    }
}

/// One stored candle.
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
    /// Finest price scale folded in (what the VWAP's decimals follow).
    pub price_scale: u8,
    /// Volume-weighted average price as the engine rounds it.
    pub vwap: Amount,
}

impl StoredCandle {
    /// A stored candle with its VWAP (`with_vwap`), or with a zero one (a
    /// range read, whose callers build larger candles and want none).
    fn of(interval: Interval, c: &ChunkCandle, with_vwap: bool) -> StoredCandle {
        let mut out = StoredCandle {
            interval,
            open_time: c.open_time,
            trades_count: c.trades_count,
            open: c.open,
            high: c.high,
            low: c.low,
            close: c.close,
            volume: c.volume,
            notional: c.notional,
            price_scale: c.price_scale,
            vwap: Amount::default(),
        };
        if with_vwap {
            out.vwap = out.candle("").vwap().unwrap_or_default();
        }
        out
    }

    /// The engine's candle of `coin` this stored one is (block fields zero:
    /// the store keeps no block).
    pub fn candle(&self, coin: &str) -> Candle {
        Candle {
            coin: coin.to_owned(),
            interval: self.interval,
            open_time: self.open_time,
            next_open: self.interval.next_open(self.open_time),
            open: self.open,
            high: self.high,
            low: self.low,
            close: self.close,
            volume: self.volume,
            notional: self.notional,
            trades_count: self.trades_count,
            price_scale: self.price_scale,
            block_number: 0,
            time: 0,
        }
    }
}

/// A chunk that failed its checks: the candles of one market and interval
/// opening in `[from_ms, to_ms)` are lost until rebuilt (a rebuild from
/// node files that do not reach back to the chunk's start leaves the part
/// before them lost).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DamagedChunk {
    /// Market.
    pub coin: String,
    /// Interval.
    pub interval: Interval,
    /// Span start, Unix ms.
    pub from_ms: i64,
    /// Span end, Unix ms.
    pub to_ms: i64,
}

/// A lookup that found its chunk damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the stored {interval} candles of {coin} opening from {from_ms} to {to_ms} (Unix ms) are damaged and not rebuilt yet"
)]
pub struct Damaged {
    /// Market.
    pub coin: String,
    /// Interval.
    pub interval: Interval,
    /// Span start, Unix ms.
    pub from_ms: i64,
    /// Span end, Unix ms.
    pub to_ms: i64,
}

/// Why a chunk read failed.
enum ChunkRead {
    Damaged,
    Unreadable(LookupError),
}

/// Why a lookup has no answer from the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The chunk holding the candles failed its checks.
    #[error(transparent)]
    Damaged(#[from] Damaged),
    /// The file could not be read (an I/O error, or the store closed).
    #[error("candle store {path}: cannot be read: {message}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// What opening the store found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Candles stored.
    pub candles: u64,
    /// Chunks known damaged and not rebuilt yet.
    pub damaged: Vec<DamagedChunk>,
    /// What was carried over from a first-release `candles-v1.dat`.
    pub carried_over: Option<CarriedOver>,
}

/// A `candles-v1.dat` carried over into the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarriedOver {
    /// Candles it held (all now stored).
    pub candles: usize,
    /// Records it held damaged; their batches' stretches are gaps.
    pub damaged_records: usize,
}

/// What one commit says besides its candles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitInfo {
    /// The last block folded (`None`: unchanged).
    pub watermark: Option<Watermark>,
    /// Block time folded whole by the writer that commits (the span it
    /// folded since it started; it merges with the stored coverage).
    pub covered: Option<Span>,
    /// Gaps the writer found (all since it began: they are holes in
    /// `covered`).
    pub gaps: Vec<Gap>,
    /// Block time the writer folded from its start to this commit having
    /// handed every closed candle of it to the store: a damaged chunk is
    /// whole from the first bucket opening in it on, when the span reaches
    /// the chunk's end or past all the coverage the chunk had (nothing after
    /// the span was stored, so nothing after it was lost).
    pub rebuilt: Option<Span>,
}

/// The lookup side of the store: shared with every request handler.
#[derive(Debug)]
pub struct StoreReader {
    /// The database while the store is open (its writer holds it open; the
    /// file and its lock are let go when the writer is dropped and the last
    /// lookup under way ends).
    db: RwLock<Option<Arc<redb::Database>>>,
    path: PathBuf,
    state: RwLock<Meta>,
    /// Chunks found damaged by lookups, for the writer to record.
    found_damaged: Mutex<BTreeSet<[u8; 13]>>,
}

/// The store's metadata, mirrored in memory.
#[derive(Debug, Clone, Default)]
struct Meta {
    /// Market ids by name (looked up for every candle an import commits
    /// and every lookup: a fast hash, randomly seeded).
    coins: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    names: Vec<Box<str>>,
    watermark: Option<Watermark>,
    coverage: Coverage,
    /// Damaged chunks: the key, and from when on (Unix ms) their candles are
    /// whole again (`i64::MAX`: none is).
    damaged: BTreeMap<[u8; 13], i64>,
    candles: u64,
    history_start_ms: i64,
}

/// The chunk key of `(coin id, interval code, span start)`.
fn chunk_key(id: u32, code: usize, span_start: i64) -> [u8; 13] {
    let mut key = [0u8; 13];
    key[0..4].copy_from_slice(&id.to_be_bytes());
    key[4] = code as u8;
    // Offset binary: negative times sort before positive ones.
    key[5..13].copy_from_slice(&((span_start as u64) ^ (1 << 63)).to_be_bytes());
    key
}

fn key_parts(key: &[u8; 13]) -> (u32, usize, i64) {
    let mut id = [0u8; 4];
    id.copy_from_slice(&key[0..4]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&key[5..13]);
    (
        u32::from_be_bytes(id),
        usize::from(key[4]),
        (u64::from_be_bytes(span) ^ (1 << 63)) as i64,
    )
}

impl StoreReader {
    /// The stored candle of `coin`'s `interval` bucket opening at
    /// `open_time` (`Ok(None)`: none stored).
    ///
    /// # Errors
    /// [`LookupError::Damaged`] when the chunk holding it failed its
    /// checks; [`LookupError::Unreadable`] when the file cannot be read.
    pub fn get(
        &self,
        coin: &str,
        interval: Interval,
        open_time: i64,
    ) -> Result<Option<StoredCandle>, LookupError> {
        let Some(key) = self.key_of(coin, interval, open_time) else {
            return Ok(None);
        };
        let damaged = self
            .state
            .read()
            .damaged
            .get(&key)
            .is_some_and(|whole_from| open_time < *whole_from);
        match self.with_chunk(&key, |chunk| chunk.get(open_time)) {
            Ok(Some(Some(c))) => Ok(Some(StoredCandle::of(interval, &c, true))),
            Ok(_) if damaged => Err(Self::damaged(coin, interval, &key).into()),
            Ok(_) => Ok(None),
            Err(ChunkRead::Damaged) => Err(Self::damaged(coin, interval, &key).into()),
            Err(ChunkRead::Unreadable(error)) => Err(error),
        }
    }

    /// The stored candles of `coin`'s `interval` opening in `[from, to)`, in
    /// time order: the oldest `limit`, or with `newest` the newest `limit`.
    /// Their VWAP is left out (zero): a range read builds larger candles,
    /// whose VWAP is not the stored ones'.
    ///
    /// # Errors
    /// [`LookupError::Damaged`] when a chunk of the range failed its
    /// checks; [`LookupError::Unreadable`] when the file cannot be read.
    pub fn range(
        &self,
        coin: &str,
        interval: Interval,
        from: i64,
        to: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<StoredCandle>, LookupError> {
        let (Some(code), Some(first), Some(last)) = (
            interval_code(interval),
            chunk::span_start(interval, from),
            chunk::span_start(interval, to.saturating_sub(1)),
        ) else {
            return Ok(Vec::new());
        };
        let Some(id) = self.state.read().coins.get(coin).copied() else {
            return Ok(Vec::new());
        };
        if to <= from {
            return Ok(Vec::new());
        }
        let (low, high) = (chunk_key(id, code, first), chunk_key(id, code, last));
        let mut out = Vec::new();
        let db = self.open_db()?;
        let txn = db.begin_read().map_err(|e| self.unreadable(&e))?;
        let table = txn.open_table(CHUNKS).map_err(|e| self.unreadable(&e))?;
        let entries = table.range(low..=high).map_err(|e| self.unreadable(&e))?;
        let damaged = self.state.read().damaged.clone();
        let entries: Box<dyn Iterator<Item = _>> = if newest {
            Box::new(entries.rev())
        } else {
            Box::new(entries)
        };
        for entry in entries {
            let (key, value) = entry.map_err(|e| self.unreadable(&e))?;
            let key = key.value();
            let Ok(chunk) = Chunk::parse(value.value()) else {
                self.found_damaged.lock().insert(key);
                return Err(Self::damaged(coin, interval, &key).into());
            };
            if damaged
                .get(&key)
                .is_some_and(|whole_from| from < *whole_from)
            {
                return Err(Self::damaged(coin, interval, &key).into());
            }
            let rows: Vec<ChunkCandle> = chunk.range(from, to).collect();
            if newest {
                for c in rows.iter().rev() {
                    if out.len() >= limit {
                        break;
                    }
                    out.push(StoredCandle::of(interval, c, false));
                }
            } else {
                for c in &rows {
                    if out.len() >= limit {
                        break;
                    }
                    out.push(StoredCandle::of(interval, c, false));
                }
            }
            if out.len() >= limit {
                break;
            }
        }
        if newest {
            out.reverse();
        }
        Ok(out)
    }

    fn key_of(&self, coin: &str, interval: Interval, open_time: i64) -> Option<[u8; 13]> {
        let code = interval_code(interval)?;
        let span = chunk::span_start(interval, open_time)?;
        let id = *self.state.read().coins.get(coin)?;
        Some(chunk_key(id, code, span))
    }

    /// Runs `f` over the chunk at `key` (`Ok(None)`: no chunk); a chunk
    /// failing its checks is noted for the writer.
    fn with_chunk<T>(
        &self,
        key: &[u8; 13],
        f: impl FnOnce(&Chunk<'_>) -> T,
    ) -> Result<Option<T>, ChunkRead> {
        let unreadable = |e: &dyn std::fmt::Display| ChunkRead::Unreadable(self.unreadable(e));
        let db = self.open_db().map_err(ChunkRead::Unreadable)?;
        let txn = db.begin_read().map_err(|e| unreadable(&e))?;
        let table = txn.open_table(CHUNKS).map_err(|e| unreadable(&e))?;
        let Some(value) = table.get(key).map_err(|e| unreadable(&e))? else {
            return Ok(None);
        };
        if let Ok(chunk) = Chunk::parse(value.value()) {
            Ok(Some(f(&chunk)))
        } else {
            self.found_damaged.lock().insert(*key);
            Err(ChunkRead::Damaged)
        }
    }

    /// The database, unless the store was closed.
    fn open_db(&self) -> Result<Arc<redb::Database>, LookupError> {
        self.db
            .read()
            .clone()
            .ok_or_else(|| LookupError::Unreadable {
                path: self.path.clone(),
                message: "the store is closed".to_owned(),
            })
    }

    fn unreadable(&self, error: &dyn std::fmt::Display) -> LookupError {
        LookupError::Unreadable {
            path: self.path.clone(),
            message: error.to_string(),
        }
    }

    fn damaged(coin: &str, interval: Interval, key: &[u8; 13]) -> Damaged {
        let (_, _, from_ms) = key_parts(key);
        Damaged {
            coin: coin.to_owned(),
            interval,
            from_ms,
            to_ms: from_ms + chunk::span_ms(interval).unwrap_or(0),
        }
    }

    /// Whether `coin` has any stored candle.
    pub fn knows(&self, coin: &str) -> bool {
        self.state.read().coins.contains_key(coin)
    }

    /// The last commit's watermark (`None` for an empty store).
    pub fn watermark(&self) -> Option<Watermark> {
        self.state.read().watermark
    }

    /// What the store holds whole and the gaps it knows.
    pub fn coverage(&self) -> Coverage {
        self.state.read().coverage.clone()
    }

    /// Candles stored.
    pub fn candles(&self) -> u64 {
        self.state.read().candles
    }

    /// The oldest bucket the store serves (Unix ms), as created.
    pub fn history_start_ms(&self) -> i64 {
        self.state.read().history_start_ms
    }

    /// Chunks known damaged and not rebuilt yet.
    pub fn damaged_chunks(&self) -> Vec<DamagedChunk> {
        let state = self.state.read();
        state
            .damaged
            .iter()
            .map(|(key, whole_from)| describe(&state, key, *whole_from))
            .collect()
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CandleStore {
    fn drop(&mut self) {
        // Lookups still under way keep the database until they end; then
        // the file and redb's lock on it are let go, with the writer's lock.
        *self.reader.db.write() = None;
    }
}

fn describe(meta: &Meta, key: &[u8; 13], whole_from: i64) -> DamagedChunk {
    let (id, code, from_ms) = key_parts(key);
    let interval = INTERVALS.get(code).copied().unwrap_or(Interval::Minute1);
    DamagedChunk {
        coin: meta
            .names
            .get(id as usize)
            .map_or_else(|| format!("#{id}"), ToString::to_string),
        interval,
        from_ms,
        to_ms: (from_ms + chunk::span_ms(interval).unwrap_or(0)).min(whole_from),
    }
}

/// The writing side of the store: owned by the candle writer thread (or
/// the import).
#[derive(Debug)]
pub struct CandleStore {
    reader: Arc<StoreReader>,
    /// Held (with its `flock`) for as long as the store is open.
    _lock: File,
}

impl CandleStore {
    /// Opens (or creates) the store in `dir`, carrying over a
    /// `candles-v1.dat` found there. `history_start_ms` is recorded in a new
    /// store.
    ///
    /// # Errors
    /// [`StoreError`] when the directory or file is unusable, another
    /// process holds the store, or the file is not a candle store.
    pub fn open(dir: &Path, history_start_ms: i64) -> Result<(Self, Recovery), StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let lock_path = dir.join(LOCK_NAME);
        let lock = match common::lock_exclusive(&lock_path) {
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
        let db = redb::Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .engine(&path)?;
        let reader = Arc::new(StoreReader {
            db: RwLock::new(Some(Arc::new(db))),
            path: path.clone(),
            state: RwLock::new(Meta::default()),
            found_damaged: Mutex::new(BTreeSet::new()),
        });
        let mut store = CandleStore {
            reader,
            _lock: lock,
        };
        store.load_or_init(history_start_ms)?;
        let carried_over = store.carry_over_v1(dir)?;
        let state = store.reader.state.read();
        let recovery = Recovery {
            candles: state.candles,
            damaged: state
                .damaged
                .iter()
                .map(|(key, whole_from)| describe(&state, key, *whole_from))
                .collect(),
            carried_over,
        };
        drop(state);
        Ok((store, recovery))
    }

    /// The lookup side.
    pub fn reader(&self) -> &Arc<StoreReader> {
        &self.reader
    }

    fn db(&self) -> Result<Arc<redb::Database>, StoreError> {
        self.reader
            .db
            .read()
            .clone()
            .ok_or_else(|| StoreError::Engine {
                path: self.reader.path.clone(),
                message: "the store is closed".to_owned(),
            })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.reader.path
    }

    fn load_or_init(&mut self, history_start_ms: i64) -> Result<(), StoreError> {
        let path = self.reader.path.clone();
        let txn = self.db()?.begin_write().engine(&path)?;
        let meta_state = {
            let mut meta = txn.open_table(META).engine(&path)?;
            let coins_table = txn.open_table(COINS).engine(&path)?;
            txn.open_table(CHUNKS).engine(&path)?;
            txn.open_table(COUNTS).engine(&path)?;
            let format = meta
                .get("format")
                .engine(&path)?
                .map(|v| read_u32(v.value()));
            match format {
                None => {
                    meta.insert("format", FORMAT.to_le_bytes().as_slice())
                        .engine(&path)?;
                    meta.insert("history_start", history_start_ms.to_le_bytes().as_slice())
                        .engine(&path)?;
                }
                Some(Some(FORMAT)) => {}
                Some(other) => {
                    return Err(StoreError::Format {
                        path,
                        message: format!(
                            "format version {}; this build reads {FORMAT}",
                            other.map_or_else(|| "unreadable".to_owned(), |v| v.to_string())
                        ),
                    });
                }
            }
            let mut state = Meta::default();
            for entry in coins_table.iter().engine(&path)? {
                let (name, id) = entry.engine(&path)?;
                let (name, id) = (name.value(), id.value());
                state.coins.insert(name.into(), id);
                let slot = id as usize;
                if state.names.len() <= slot {
                    state.names.resize(slot + 1, Box::from(""));
                }
                state.names[slot] = name.into();
            }
            let get = |key: &str| -> Result<Option<Vec<u8>>, StoreError> {
                Ok(meta.get(key).engine(&path)?.map(|v| v.value().to_vec()))
            };
            state.history_start_ms = get("history_start")?
                .and_then(|v| read_i64(&v))
                .unwrap_or(history_start_ms);
            state.watermark = get("watermark")?.and_then(|v| decode_watermark(&v));
            state.candles = get("candles")?.and_then(|v| read_u64(&v)).unwrap_or(0);
            state.coverage = match get("coverage")? {
                Some(bytes) => decode_coverage(&bytes).ok_or_else(|| StoreError::Format {
                    path: path.clone(),
                    message: "unreadable coverage record".to_owned(),
                })?,
                None => Coverage::default(),
            };
            state.damaged = get("damaged")?
                .map(|v| {
                    v.chunks_exact(21)
                        .filter_map(|entry| {
                            let mut key = [0u8; 13];
                            key.copy_from_slice(&entry[..13]);
                            Some((key, read_i64(&entry[13..])?))
                        })
                        .collect()
                })
                .unwrap_or_default();
            state
        };
        txn.commit().engine(&path)?;
        *self.reader.state.write() = meta_state;
        Ok(())
    }

    /// Carries a first-release store over, once.
    fn carry_over_v1(&mut self, dir: &Path) -> Result<Option<CarriedOver>, StoreError> {
        let old = dir.join(v1::FILE_NAME);
        if !old.is_file() {
            return Ok(None);
        }
        // In batches: the file may hold more candles than memory.
        let mut failed = None;
        let contents = v1::read(&old, |candles| {
            match self.commit(candles, &CommitInfo::default()) {
                Ok(_) => true,
                Err(error) => {
                    failed = Some(error);
                    false
                }
            }
        })
        .map_err(|error| match error {
            v1::ReadError::Io(source) => StoreError::Io {
                path: old.clone(),
                source,
            },
            v1::ReadError::Format(message) => StoreError::Format {
                path: old.clone(),
                message: message.to_owned(),
            },
        })?;
        if let Some(error) = failed {
            return Err(error);
        }
        let mut info = CommitInfo::default();
        if let Some((block_number, block_time_ms, coverage_start_ms)) = contents.watermark {
            info.watermark = Some(Watermark {
                block_number,
                block_time_ms,
            });
            info.covered = Some(Span {
                from_ms: coverage_start_ms,
                to_ms: block_time_ms,
            });
            info.gaps = contents
                .damaged_spans
                .iter()
                .map(|&(after, through)| Gap {
                    from_ms: Interval::Minute5.bucket_open(after),
                    to_ms: Interval::Minute5.next_open(Interval::Minute5.bucket_open(through)),
                    reason: "records of the first candle store (candles-v1.dat) were damaged"
                        .to_owned(),
                })
                .collect();
        }
        // The coverage last, once every candle is in.
        self.commit(&[], &info)?;
        let moved = dir.join(format!("{}.carried-over", v1::FILE_NAME));
        std::fs::rename(&old, &moved).map_err(|source| StoreError::Io { path: old, source })?;
        tracing::info!(
            candles = contents.candles,
            damaged_records = contents.damaged_records,
            file = %moved.display(),
            "candle store: carried over the first store's candles"
        );
        Ok(Some(CarriedOver {
            candles: contents.candles,
            damaged_records: contents.damaged_records,
        }))
    }

    /// Merges closed `candles` into their chunks (a bucket already stored
    /// stays as it is), records `info` (watermark, coverage, gaps, chunks
    /// whose damage is rebuilt), and commits durably, then makes it visible
    /// to lookups. Candles of intervals the store does not keep, or with
    /// names longer than [`MAX_COIN_LEN`], are skipped. Returns how many
    /// candles were added.
    ///
    /// # Errors
    /// [`StoreError::Engine`] when the commit fails; nothing of it is
    /// visible then, and a later commit may retry it.
    pub fn commit(&mut self, candles: &[Candle], info: &CommitInfo) -> Result<usize, StoreError> {
        let path = self.reader.path.clone();
        let mut state = self.reader.state.read().clone();
        let found = std::mem::take(&mut *self.reader.found_damaged.lock());
        let mut meta_changed = !found.is_empty();
        for key in found {
            state.damaged.insert(key, i64::MAX);
        }

        let mut txn = self.db()?.begin_write().engine(&path)?;
        txn.set_quick_repair(true);
        // Candles in the rewritten chunks and those they held before (by
        // their counts: a damaged chunk's are lost), and the candles new to
        // the store.
        let (mut added, mut removed, mut new_candles) = (0u64, 0u64, 0u64);
        {
            let mut coins = txn.open_table(COINS).engine(&path)?;
            let mut chunks = txn.open_table(CHUNKS).engine(&path)?;
            let mut counts = txn.open_table(COUNTS).engine(&path)?;
            // Hashed while the candles are sorted in (an import commits
            // hundreds of thousands at once), then written in key order.
            // By (market id, interval code, span start): the order of
            // their chunk keys, whose bytes are not hashed per candle.
            let mut groups: HashMap<
                (u32, usize, i64),
                Vec<ChunkCandle>,
                foldhash::fast::RandomState,
            > = HashMap::default();
            let mut last_coin: Option<(&str, u32)> = None;
            for candle in candles {
                let (Some(code), Some(span)) = (
                    interval_code(candle.interval),
                    chunk::span_start(candle.interval, candle.open_time),
                ) else {
                    continue;
                };
                if candle.coin.len() > MAX_COIN_LEN || candle.coin.is_empty() {
                    tracing::warn!(
                        coin_len = candle.coin.len(),
                        "candle store: market name unusable (empty or too long); candle skipped"
                    );
                    continue;
                }
                // A market's candles of the three intervals close together.
                let id = if let Some((coin, id)) = last_coin
                    && coin == candle.coin.as_str()
                {
                    id
                } else if let Some(id) = state.coins.get(candle.coin.as_str()) {
                    *id
                } else {
                    let id = state.names.len() as u32;
                    coins.insert(candle.coin.as_str(), id).engine(&path)?;
                    state.coins.insert(candle.coin.as_str().into(), id);
                    state.names.push(candle.coin.as_str().into());
                    id
                };
                last_coin = Some((candle.coin.as_str(), id));
                groups
                    .entry((id, code, span))
                    .or_default()
                    .push(ChunkCandle::from(candle));
            }
            let mut groups: Vec<((u32, usize, i64), Vec<ChunkCandle>)> =
                groups.into_iter().collect();
            groups.sort_unstable_by_key(|(parts, _)| *parts);
            for ((id, code, span), mut new) in groups {
                new.sort_by_key(|c| c.open_time);
                new.dedup_by_key(|c| c.open_time);
                let key = chunk_key(id, code, span);
                let interval = INTERVALS[code];
                let existing: Vec<ChunkCandle> = match chunks.get(&key).engine(&path)? {
                    Some(value) => match Chunk::parse(value.value()) {
                        Ok(chunk) => chunk.iter().collect(),
                        Err(error) => {
                            // Its candles are lost: the chunk is written anew
                            // and stays known damaged until a rebuild.
                            tracing::warn!(%error, "candle store: a damaged chunk is written anew");
                            state.damaged.insert(key, i64::MAX);
                            meta_changed = true;
                            Vec::new()
                        }
                    },
                    None => Vec::new(),
                };
                let merged = chunk::merge(&existing, &new);
                if merged.len() == existing.len() {
                    continue;
                }
                let before = counts
                    .get(&key)
                    .engine(&path)?
                    .map_or(existing.len() as u64, |v| u64::from(v.value()));
                added += merged.len() as u64;
                removed += before;
                new_candles += (merged.len() - existing.len()) as u64;
                counts
                    .insert(&key, u32::try_from(merged.len()).unwrap_or(u32::MAX))
                    .engine(&path)?;
                let bytes =
                    chunk::encode(interval, span, &merged).map_err(|e| StoreError::Format {
                        path: path.clone(),
                        message: format!(
                            "cannot encode the {interval} candles of {} from {}: {e}",
                            state
                                .names
                                .get(key_parts(&key).0 as usize)
                                .map_or("?", |name| &**name),
                            feeds::time::format_iso8601_ms(span)
                        ),
                    })?;
                chunks.insert(&key, bytes.as_slice()).engine(&path)?;
            }
            let mut meta = txn.open_table(META).engine(&path)?;
            if let Some(rebuilt) = info.rebuilt {
                // Every closed candle from `rebuilt.from_ms` on was handed
                // over: a damaged chunk it reaches is whole from there on
                // (whole again when that is its start).
                let before = state.damaged.clone();
                let coverage = &state.coverage;
                state.damaged.retain(|key, whole_from| {
                    let (_, code, from) = key_parts(key);
                    let Some(&interval) = INTERVALS.get(code) else {
                        return true;
                    };
                    let to = from + chunk::span_ms(interval).unwrap_or(0);
                    if rebuilt.to_ms < from || rebuilt.from_ms >= to {
                        return true;
                    }
                    // A rebuild ending inside the chunk restored it only if
                    // nothing after its end was ever stored there: no
                    // coverage reaches past it into the chunk.
                    let stored_after = coverage
                        .spans
                        .iter()
                        .any(|s| s.to_ms > rebuilt.to_ms && s.from_ms < to);
                    if rebuilt.to_ms < to && stored_after {
                        return true;
                    }
                    // The first bucket of the interval opening in the span.
                    let open = interval.bucket_open(rebuilt.from_ms);
                    let first = if open < rebuilt.from_ms {
                        interval.next_open(open)
                    } else {
                        open
                    };
                    if first <= from {
                        return false;
                    }
                    *whole_from = (*whole_from).min(first);
                    true
                });
                meta_changed |= state.damaged != before;
            }
            // The watermark only moves forward: an import of older hours
            // leaves the server's resume point where it was.
            if let Some(watermark) = info.watermark.filter(|w| {
                state
                    .watermark
                    .is_none_or(|old| w.block_time_ms >= old.block_time_ms)
            }) {
                state.watermark = Some(watermark);
                meta.insert("watermark", encode_watermark(watermark).as_slice())
                    .engine(&path)?;
            }
            // The span first: the gaps the same fold found are holes in it.
            if let Some(span) = info.covered {
                state.coverage.add_span(span);
                meta_changed = true;
            }
            for gap in &info.gaps {
                state.coverage.add_gap(gap.clone());
                meta_changed = true;
            }
            if meta_changed {
                meta.insert("coverage", encode_coverage(&state.coverage).as_slice())
                    .engine(&path)?;
                let damaged: Vec<u8> = state
                    .damaged
                    .iter()
                    .flat_map(|(key, whole_from)| {
                        key.iter().copied().chain(whole_from.to_le_bytes())
                    })
                    .collect();
                meta.insert("damaged", damaged.as_slice()).engine(&path)?;
            }
            state.candles = (state.candles + added).saturating_sub(removed);
            if added > 0 {
                meta.insert("candles", state.candles.to_le_bytes().as_slice())
                    .engine(&path)?;
            }
        }
        txn.commit().engine(&path)?;
        *self.reader.state.write() = state;
        Ok(new_candles as usize)
    }

    /// Gives the file's free pages back to the file system (redb's
    /// compaction: live pages move into the holes that rewritten chunks
    /// left, then the file is cut), for a writer that rewrote much of the
    /// store at once (an import). Does nothing while a lookup holds the
    /// database.
    ///
    /// # Errors
    /// [`StoreError::Engine`] when compacting fails; the store stays whole.
    pub fn compact(&mut self) -> Result<(), StoreError> {
        let path = self.reader.path.clone();
        let mut slot = self.reader.db.write();
        if let Some(db) = slot.as_mut().and_then(Arc::get_mut) {
            while db.compact().engine(&path)? {}
        }
        Ok(())
    }

    /// Checks every chunk opening in `[from_ms, ∞)` and records those that
    /// fail (lookups answer that they are damaged; a rebuild clears them).
    /// Returns the chunks known damaged.
    ///
    /// # Errors
    /// [`StoreError::Engine`] when the file cannot be read or the result
    /// recorded.
    pub fn verify_from(&mut self, from_ms: i64) -> Result<Vec<DamagedChunk>, StoreError> {
        let path = self.reader.path.clone();
        let ids: Vec<u32> = self.reader.state.read().coins.values().copied().collect();
        let mut found = BTreeSet::new();
        {
            let txn = self.db()?.begin_read().engine(&path)?;
            let table = txn.open_table(CHUNKS).engine(&path)?;
            for id in ids {
                for (code, interval) in INTERVALS.iter().enumerate() {
                    let first = chunk::span_start(*interval, from_ms).unwrap_or(from_ms);
                    let low = chunk_key(id, code, first);
                    let high = chunk_key(id, code, i64::MAX);
                    for entry in table.range(low..=high).engine(&path)? {
                        let (key, value) = entry.engine(&path)?;
                        if Chunk::parse(value.value()).is_err() {
                            found.insert(key.value());
                        }
                    }
                }
            }
        }
        if !found.is_empty() {
            self.reader.found_damaged.lock().extend(found);
            self.commit(&[], &CommitInfo::default())?;
        }
        Ok(self.reader.damaged_chunks())
    }
}

/// redb's errors as [`StoreError`]s naming the file.
trait EngineResult<T> {
    fn engine(self, path: &Path) -> Result<T, StoreError>;
}

impl<T, E: Into<redb::Error>> EngineResult<T> for Result<T, E> {
    fn engine(self, path: &Path) -> Result<T, StoreError> {
        self.map_err(|error| match error.into() {
            redb::Error::DatabaseAlreadyOpen => StoreError::Locked {
                path: path.to_owned(),
            },
            other => StoreError::Engine {
                path: path.to_owned(),
                message: other.to_string(),
            },
        })
    }
}

fn read_u32(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?))
}

fn read_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}

fn read_i64(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}

fn encode_watermark(w: Watermark) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&w.block_number.to_le_bytes());
    out[8..].copy_from_slice(&w.block_time_ms.to_le_bytes());
    out
}

fn decode_watermark(bytes: &[u8]) -> Option<Watermark> {
    Some(Watermark {
        block_number: read_u64(bytes)?,
        block_time_ms: read_i64(bytes.get(8..)?)?,
    })
}

/// `spans: u32, (from i64, to i64)*, gaps: u32, (from i64, to i64, reason
/// length u16, reason)*`, little-endian.
fn encode_coverage(coverage: &Coverage) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(coverage.spans.len() as u32).to_le_bytes());
    for span in &coverage.spans {
        out.extend_from_slice(&span.from_ms.to_le_bytes());
        out.extend_from_slice(&span.to_ms.to_le_bytes());
    }
    out.extend_from_slice(&(coverage.gaps.len() as u32).to_le_bytes());
    for gap in &coverage.gaps {
        out.extend_from_slice(&gap.from_ms.to_le_bytes());
        out.extend_from_slice(&gap.to_ms.to_le_bytes());
        let reason = &gap.reason.as_bytes()[..gap.reason.len().min(u16::MAX as usize)];
        out.extend_from_slice(&(reason.len() as u16).to_le_bytes());
        out.extend_from_slice(reason);
    }
    out
}

fn decode_coverage(bytes: &[u8]) -> Option<Coverage> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let slice = bytes.get(at..at + n)?;
        at += n;
        Some(slice)
    };
    let mut coverage = Coverage::default();
    let spans = read_u32(take(4)?)?;
    for _ in 0..spans {
        let from_ms = read_i64(take(8)?)?;
        let to_ms = read_i64(take(8)?)?;
        coverage.spans.push(Span { from_ms, to_ms });
    }
    let gaps = read_u32(take(4)?)?;
    for _ in 0..gaps {
        let from_ms = read_i64(take(8)?)?;
        let to_ms = read_i64(take(8)?)?;
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?);
        let reason = String::from_utf8_lossy(take(usize::from(len))?).into_owned();
        coverage.gaps.push(Gap {
            from_ms,
            to_ms,
            reason,
        });
    }
    Some(coverage)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-trade candle of `coin` at `px` (its exact text), 0.25 in size.
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

    /// What a stored candle says, scales included (`Px` compares values).
    fn text(c: &StoredCandle) -> String {
        let px = |p: Px| format!("{}e-{}", p.units(), p.scale());
        format!(
            "{} {} {} {} {} {} {}:{} {}:{} {}",
            c.interval,
            c.open_time,
            px(c.open),
            px(c.high),
            px(c.low),
            px(c.close),
            c.volume.units(),
            c.volume.scale(),
            c.notional.units(),
            c.notional.scale(),
            c.trades_count
        )
    }

    fn of(c: &Candle) -> String {
        let vwap = c.vwap().unwrap_or_default();
        text(&StoredCandle {
            interval: c.interval,
            open_time: c.open_time,
            trades_count: c.trades_count,
            open: c.open,
            high: c.high,
            low: c.low,
            close: c.close,
            volume: c.volume,
            notional: c.notional,
            price_scale: c.price_scale,
            vwap,
        })
    }

    fn info(block: u64, time: i64, from: i64) -> CommitInfo {
        CommitInfo {
            watermark: Some(Watermark {
                block_number: block,
                block_time_ms: time,
            }),
            covered: Some(Span {
                from_ms: from,
                to_ms: time,
            }),
            ..CommitInfo::default()
        }
    }

    const T0: i64 = 1_753_603_200_000;

    #[test]
    fn commits_are_kept_across_opens_and_a_stored_bucket_is_never_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let first = vec![
            candle("BTC", Interval::Second1, T0, "81307.0"),
            candle("BTC", Interval::Second1, T0 + 1_000, "81308.5"),
            candle("PURR/USDC", Interval::Minute1, T0, "0.10"),
            candle("@107", Interval::Minute5, T0, "36.773"),
            // Not a stored interval: skipped.
            candle("BTC", Interval::Hour1, T0, "1.0"),
        ];
        {
            let (mut store, recovery) = CandleStore::open(dir.path(), T0).unwrap();
            assert_eq!(recovery, Recovery::default());
            assert_eq!(
                store.commit(&first, &info(10, T0 + 400_000, T0)).unwrap(),
                4
            );
            // The same buckets again, with other prices: kept as stored.
            let again = vec![candle("BTC", Interval::Second1, T0, "1.0")];
            assert_eq!(
                store.commit(&again, &info(11, T0 + 401_000, T0)).unwrap(),
                0
            );
        }
        let (store, recovery) = CandleStore::open(dir.path(), 0).unwrap();
        assert_eq!(recovery.candles, 4);
        let reader = store.reader();
        assert_eq!(reader.history_start_ms(), T0, "as created");
        assert_eq!(
            reader.watermark(),
            Some(Watermark {
                block_number: 11,
                block_time_ms: T0 + 401_000
            })
        );
        for c in &first[..4] {
            let got = reader
                .get(&c.coin, c.interval, c.open_time)
                .unwrap()
                .unwrap();
            assert_eq!(text(&got), of(c), "{}", c.coin);
            assert_eq!(got.vwap, c.vwap().unwrap());
        }
        assert_eq!(
            reader.get("BTC", Interval::Second1, T0 + 2_000).unwrap(),
            None
        );
        assert_eq!(reader.get("ETH", Interval::Second1, T0).unwrap(), None);
        assert!(reader.knows("@107") && !reader.knows("ETH"));
        let range = reader
            .range("BTC", Interval::Second1, T0, T0 + 60_000, 10, false)
            .unwrap();
        assert_eq!(range.len(), 2);
        let newest = reader
            .range("BTC", Interval::Second1, T0, T0 + 60_000, 1, true)
            .unwrap();
        assert_eq!(newest[0].open_time, T0 + 1_000);
        assert_eq!(
            reader.coverage().spans,
            [Span {
                from_ms: T0,
                to_ms: T0 + 401_000
            }]
        );
        // One writer: a second opener is refused.
        let error = CandleStore::open(dir.path(), 0).unwrap_err();
        assert!(matches!(error, StoreError::Locked { .. }), "{error}");
    }

    #[test]
    fn coverage_merges_spans_splits_them_at_gaps_and_fills_gaps() {
        let span = |from_ms, to_ms| Span { from_ms, to_ms };
        let mut c = Coverage::default();
        c.add_span(span(100, 200));
        c.add_span(span(300, 400));
        c.add_span(span(200, 250));
        assert_eq!(c.spans, [span(100, 250), span(300, 400)]);
        assert_eq!(c.uncovered(0, 500), [(0, 100), (250, 300), (400, 500)]);
        assert_eq!(c.uncovered(120, 240), []);
        let gap = Gap {
            from_ms: 150,
            to_ms: 180,
            reason: "blocks missing".into(),
        };
        c.add_gap(gap.clone());
        assert_eq!(c.spans, [span(100, 150), span(180, 250), span(300, 400)]);
        assert_eq!(c.gap_touching(170, 175), Some(&gap));
        assert_eq!(
            c.gap_touching(140, 151),
            None,
            "ends at the block before it"
        );
        assert_eq!(c.gap_touching(140, 152), Some(&gap));
        assert_eq!(c.holding(180, 250), Some(span(180, 250)));
        assert_eq!(c.holding(140, 160), None);
        // A fold over the gap fills it.
        c.add_span(span(140, 260));
        assert_eq!(c.spans, [span(100, 260), span(300, 400)]);
        assert!(c.gaps.is_empty());
        let bytes = encode_coverage(&c);
        assert_eq!(decode_coverage(&bytes), Some(c));
    }

    #[test]
    fn a_first_release_store_is_carried_over_whole() {
        let dir = tempfile::tempdir().unwrap();
        let batch1 = vec![
            candle("BTC", Interval::Second1, T0 + 1_000, "81307.0"),
            candle("PURR/USDC", Interval::Minute1, T0, "0.19247"),
        ];
        let batch2 = vec![candle("BTC", Interval::Minute5, T0, "81310.50")];
        let old = dir.path().join(v1::FILE_NAME);
        v1::write(
            &old,
            T0,
            &[
                (&batch1, (100, T0 + 61_000, T0)),
                (&batch2, (200, T0 + 301_000, T0)),
            ],
        );
        {
            let (store, recovery) = CandleStore::open(dir.path(), T0).unwrap();
            assert_eq!(
                recovery.carried_over,
                Some(CarriedOver {
                    candles: 3,
                    damaged_records: 0
                })
            );
            let reader = store.reader();
            for c in batch1.iter().chain(&batch2) {
                let got = reader
                    .get(&c.coin, c.interval, c.open_time)
                    .unwrap()
                    .unwrap();
                assert_eq!(text(&got), of(c));
            }
            assert_eq!(reader.watermark().unwrap().block_number, 200);
            assert_eq!(
                reader.coverage().spans,
                [Span {
                    from_ms: T0,
                    to_ms: T0 + 301_000
                }]
            );
        }
        assert!(!old.exists());
        assert!(dir.path().join("candles-v1.dat.carried-over").exists());
        let (_, again) = CandleStore::open(dir.path(), T0).unwrap();
        assert_eq!(again.carried_over, None, "once");
        assert_eq!(again.candles, 3);

        // A damaged record: its batch's stretch becomes a gap.
        let other = tempfile::tempdir().unwrap();
        let path = other.path().join(v1::FILE_NAME);
        v1::write(
            &path,
            T0,
            &[
                (&batch1, (100, T0 + 61_000, T0)),
                (&batch2, (200, T0 + 301_000, T0)),
            ],
        );
        let mut bytes = std::fs::read(&path).unwrap();
        // The second record (BTC's 1s candle) of the first batch.
        bytes[v1::HEADER_LEN + v1::RECORD_LEN + 40] ^= 0x10;
        std::fs::write(&path, bytes).unwrap();
        let (store, recovery) = CandleStore::open(other.path(), T0).unwrap();
        assert_eq!(
            recovery.carried_over,
            Some(CarriedOver {
                candles: 2,
                damaged_records: 1
            })
        );
        let coverage = store.reader().coverage();
        assert_eq!(coverage.gaps.len(), 1, "{coverage:?}");
        assert!(coverage.gap_touching(T0 + 1_000, T0 + 2_000).is_some());
    }

    /// Flips a byte in the middle of every stored chunk of the file.
    fn damage_every_chunk(dir: &Path) -> usize {
        let path = dir.join(FILE_NAME);
        let values: Vec<Vec<u8>> = {
            let db = redb::Database::builder().open_read_only(&path).unwrap();
            let txn = db.begin_read().unwrap();
            let table = txn.open_table(CHUNKS).unwrap();
            table
                .iter()
                .unwrap()
                .map(|entry| entry.unwrap().1.value().to_vec())
                .collect()
        };
        let mut bytes = std::fs::read(&path).unwrap();
        let mut damaged = 0;
        for value in &values {
            if let Some(at) = bytes
                .windows(value.len())
                .position(|w| w == value.as_slice())
            {
                bytes[at + value.len() / 2] ^= 0x20;
                damaged += 1;
            }
        }
        std::fs::write(&path, bytes).unwrap();
        damaged
    }

    #[test]
    fn a_damaged_chunk_is_said_so_kept_apart_and_whole_again_once_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let candles: Vec<Candle> = (0..50)
            .map(|i| candle("BTC", Interval::Second1, T0 + i * 1_000, "81307.0"))
            .collect();
        {
            let (mut store, _) = CandleStore::open(dir.path(), T0).unwrap();
            store.commit(&candles, &info(1, T0 + 60_000, T0)).unwrap();
            let other = [candle("ETH", Interval::Second1, T0, "3000.0")];
            store.commit(&other, &info(2, T0 + 61_000, T0)).unwrap();
        }
        assert_eq!(damage_every_chunk(dir.path()), 2);
        let (mut store, _) = CandleStore::open(dir.path(), T0).unwrap();
        let Err(LookupError::Damaged(damaged)) = store.reader().get("BTC", Interval::Second1, T0)
        else {
            panic!("the damaged chunk answers Damaged");
        };
        assert_eq!(
            damaged.from_ms,
            chunk::span_start(Interval::Second1, T0).unwrap()
        );
        assert_eq!(
            store.verify_from(0).unwrap().len(),
            2,
            "both chunks found and recorded"
        );
        // New candles merged into a damaged chunk: written, but the chunk
        // stays damaged (its older candles are lost).
        let late = [candle("BTC", Interval::Second1, T0 + 100_000, "81300.0")];
        store.commit(&late, &info(3, T0 + 101_000, T0)).unwrap();
        assert!(store.reader().get("BTC", Interval::Second1, T0).is_err());
        assert!(
            store
                .reader()
                .get("BTC", Interval::Second1, T0 + 100_000)
                .unwrap()
                .is_some()
        );
        // A fold from T0 + 20 s that ends before what the store covered
        // (to T0 + 101 s): the candles after it were not handed over, so
        // nothing changes.
        let rebuilt_from = T0 + 20_000;
        let chunk_end = T0 + chunk::span_ms(Interval::Second1).unwrap();
        let rebuilt_to = |to_ms| CommitInfo {
            rebuilt: Some(Span {
                from_ms: rebuilt_from,
                to_ms,
            }),
            ..CommitInfo::default()
        };
        store
            .commit(&candles[20..], &rebuilt_to(T0 + 90_000))
            .unwrap();
        assert!(
            store
                .reader()
                .get("BTC", Interval::Second1, T0 + 55_000)
                .is_err()
        );
        // One past all the store ever covered (not to the chunk's end, an
        // hour on): nothing after it was lost, so whole from T0 + 20 s on.
        store.commit(&[], &rebuilt_to(T0 + 200_000)).unwrap();
        let reader = store.reader();
        assert!(reader.get("BTC", Interval::Second1, T0 + 10_000).is_err());
        assert!(
            reader
                .get("BTC", Interval::Second1, T0 + 30_000)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            reader.get("BTC", Interval::Second1, T0 + 55_000).unwrap(),
            None
        );
        // From the chunk's start (a fold hands over every market's candles):
        // whole again.
        let mut all = candles.clone();
        all.push(candle("ETH", Interval::Second1, T0, "3000.0"));
        store
            .commit(
                &all,
                &CommitInfo {
                    rebuilt: Some(Span {
                        from_ms: chunk::span_start(Interval::Second1, T0).unwrap(),
                        to_ms: chunk_end,
                    }),
                    ..CommitInfo::default()
                },
            )
            .unwrap();
        let reader = store.reader();
        assert!(reader.get("BTC", Interval::Second1, T0).unwrap().is_some());
        assert!(reader.get("ETH", Interval::Second1, T0).unwrap().is_some());
        assert!(reader.damaged_chunks().is_empty());
    }

    #[test]
    fn a_first_release_store_larger_than_a_batch_is_carried_over_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let half = v1::BATCH as i64 / 2 + 7_000;
        let second: Vec<Candle> = (0..2 * half)
            .map(|i| candle("BTC", Interval::Second1, T0 + i * 1_000, "81307.0"))
            .collect();
        let (early, late) = second.split_at(second.len() / 2);
        let end = T0 + 2 * half * 1_000;
        v1::write(
            &dir.path().join(v1::FILE_NAME),
            T0,
            &[(early, (1, T0 + half * 1_000, T0)), (late, (2, end, T0))],
        );
        let (store, recovery) = CandleStore::open(dir.path(), T0).unwrap();
        assert_eq!(recovery.carried_over.map(|c| c.candles), Some(second.len()));
        let reader = store.reader();
        assert_eq!(reader.candles(), second.len() as u64);
        for c in second.iter().step_by(997).chain(second.last()) {
            let got = reader
                .get("BTC", Interval::Second1, c.open_time)
                .unwrap()
                .unwrap();
            assert_eq!(text(&got), of(c));
        }
        assert_eq!(
            reader.coverage().spans,
            [Span {
                from_ms: T0,
                to_ms: end
            }]
        );
    }

    #[test]
    fn the_watermark_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = CandleStore::open(dir.path(), T0).unwrap();
        store.commit(&[], &info(500, T0 + 600_000, T0)).unwrap();
        // An import of older hours commits the blocks it folded.
        store.commit(&[], &info(300, T0 + 120_000, T0)).unwrap();
        assert_eq!(store.reader().watermark().unwrap().block_number, 500);
        store.commit(&[], &info(501, T0 + 600_100, T0)).unwrap();
        assert_eq!(store.reader().watermark().unwrap().block_number, 501);
        drop(store);
        let (store, _) = CandleStore::open(dir.path(), T0).unwrap();
        assert_eq!(store.reader().watermark().unwrap().block_number, 501);
    }

    #[test]
    fn a_lookup_the_file_cannot_answer_is_an_error_not_an_empty_bucket() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = CandleStore::open(dir.path(), T0).unwrap();
        let btc = candle("BTC", Interval::Second1, T0, "81307.0");
        store.commit(&[btc], &info(1, T0 + 2_000, T0)).unwrap();
        let reader = Arc::clone(store.reader());
        assert!(reader.get("BTC", Interval::Second1, T0).unwrap().is_some());
        drop(store);
        assert!(matches!(
            reader.get("BTC", Interval::Second1, T0),
            Err(LookupError::Unreadable { .. })
        ));
        assert!(matches!(
            reader.range("BTC", Interval::Second1, T0, T0 + 5_000, 10, false),
            Err(LookupError::Unreadable { .. })
        ));
    }
}
