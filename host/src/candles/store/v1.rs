//! The first candle store's file, `candles-v1.dat`, read once to carry its
//! candles over into the current store (see [`super::CandleStore::open`]).
//! Nothing writes this format any more, but the tests, which make one to
//! check the carrying over.
//!
//! # Layout
//!
//! A 64-byte header (magic `L1GCNDL\0`, format version 1, record size 128,
//! the history start it was created with, creation time, CRC-32 of the
//! rest), then 128-byte records, each starting with the CRC-32 of its other
//! 124 bytes and a kind byte: **coin** (a market name and the id candle
//! records use), **candle** (coin id, interval code, bucket open, trade
//! count, open / high / low / close units and scales, price scale, volume,
//! Σ px·sz and VWAP as 128-bit units with scales), **commit** (the block
//! number and time folded, the start of the store's coverage). A batch is
//! its coin and candle records then its commit; what follows the last good
//! commit is a torn batch and is ignored; a record before it that fails
//! its checks is damage: its candle is lost, its batch's stretch of block
//! time is reported. All integers little-endian.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;

/// Name of the file in the state directory.
pub const FILE_NAME: &str = "candles-v1.dat";
/// Bytes of the file header.
pub const HEADER_LEN: usize = 64;
/// Bytes of one record.
pub const RECORD_LEN: usize = 128;
/// The intervals the file kept, in their code order.
const INTERVALS: [Interval; 3] = [Interval::Second1, Interval::Minute1, Interval::Minute5];
const MAGIC: &[u8; 8] = b"L1GCNDL\0";
const VERSION: u32 = 1;
const KIND_COIN: u8 = 1;
const KIND_CANDLE: u8 = 2;
const KIND_COMMIT: u8 = 3;
const MAX_COIN_LEN: usize = 112;
/// Committed candles handed over at once.
pub const BATCH: usize = 65_536;

/// What a v1 file held, besides its candles.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// Committed candles (closed buckets) handed over.
    pub candles: usize,
    /// The last commit: block number, block time (Unix ms) and the start of
    /// coverage (Unix ms); `None` for a file with no commit.
    pub watermark: Option<(u64, i64, i64)>,
    /// Records before the last commit that failed their checks.
    pub damaged_records: usize,
    /// The stretches of block time whose batches held damaged records:
    /// `(after_ms, through_ms)`, `after_ms` the previous commit's time (the
    /// coverage start for the first batch).
    pub damaged_spans: Vec<(i64, i64)>,
}

/// Why a v1 file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It cannot be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a v1 candle store.
    #[error("{0}")]
    Format(&'static str),
}

/// Reads a v1 file record by record, handing its committed candles to
/// `each` in file order, at most [`BATCH`] at a time, so that memory does
/// not grow with the file; `each` answers `false` to stop the reading.
///
/// # Errors
/// [`ReadError`] when it cannot be read or is not a v1 candle store.
pub fn read(path: &Path, each: impl FnMut(&[Candle]) -> bool) -> Result<Contents, ReadError> {
    let mut file = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let format = ReadError::Format;
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => format("shorter than its header"),
        _ => ReadError::Io(e),
    })?;
    if header.iter().all(|b| *b == 0) {
        // Created, then stopped before its header was durable: empty.
        return Ok(Contents::default());
    }
    if &header[0..8] != MAGIC {
        return Err(format("not a v1 candle store (bad magic)"));
    }
    if crc32fast::hash(&header[..60]) != u32_at(&header, 60) {
        return Err(format("v1 header checksum mismatch"));
    }
    if u32_at(&header, 8) != VERSION || u32_at(&header, 12) as usize != RECORD_LEN {
        return Err(format("not a v1 candle store (version or record size)"));
    }
    scan(file, each)
}

/// The records after the header; a partial record at the end is a torn
/// write, like a batch without its commit.
fn scan(
    mut file: impl std::io::Read,
    mut each: impl FnMut(&[Candle]) -> bool,
) -> Result<Contents, ReadError> {
    let mut out = Contents::default();
    let mut committed: Vec<Candle> = Vec::new();
    let mut coins: HashMap<u32, String> = HashMap::new();
    let mut pending_coins: Vec<(u32, String)> = Vec::new();
    let mut pending: Vec<(u32, Candle)> = Vec::new();
    let mut pending_bad = 0usize;
    let mut coverage_start = None;
    let mut buffer = [0u8; RECORD_LEN];
    loop {
        match file.read_exact(&mut buffer) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(ReadError::Io(e)),
        }
        let record = &buffer[..];
        if record[0..4] != crc32fast::hash(&record[4..]).to_le_bytes() {
            pending_bad += 1;
            continue;
        }
        match record[4] {
            KIND_COIN => match decode_coin(record) {
                Some(name) => pending_coins.push((u32_at(record, 8), name.to_owned())),
                None => pending_bad += 1,
            },
            KIND_CANDLE => match decode_candle(record) {
                Some(candle) => pending.push((u32_at(record, 8), candle)),
                None => pending_bad += 1,
            },
            KIND_COMMIT => {
                coins.extend(pending_coins.drain(..));
                for (id, mut candle) in pending.drain(..) {
                    match coins.get(&id) {
                        Some(coin) => {
                            candle.coin.clone_from(coin);
                            committed.push(candle);
                        }
                        None => pending_bad += 1,
                    }
                }
                let block_number = u64_at(record, 8);
                let block_time_ms = i64_at(record, 16);
                let coverage = i64_at(record, 24);
                if pending_bad > 0 {
                    let after = out.watermark.map_or(coverage, |(_, time, _)| time);
                    out.damaged_spans.push((after, block_time_ms));
                    out.damaged_records += pending_bad;
                    pending_bad = 0;
                }
                coverage_start.get_or_insert(coverage);
                out.watermark = Some((block_number, block_time_ms, coverage));
                if committed.len() >= BATCH {
                    out.candles += committed.len();
                    if !each(&committed) {
                        return Ok(out);
                    }
                    committed.clear();
                }
            }
            _ => pending_bad += 1,
        }
    }
    if !committed.is_empty() {
        out.candles += committed.len();
        each(&committed);
    }
    Ok(out)
}

fn decode_coin(r: &[u8]) -> Option<&str> {
    let len = usize::from(r[12]);
    if len == 0 || len > MAX_COIN_LEN {
        return None;
    }
    std::str::from_utf8(&r[16..16 + len]).ok()
}

fn decode_candle(r: &[u8]) -> Option<Candle> {
    let interval = *INTERVALS.get(usize::from(r[12]))?;
    let px = |i: usize| Px::new(i64_at(r, 32 + 8 * i), r[64 + i]).ok();
    let amount = |i: usize| {
        let scale = r[68 + i];
        (scale <= 36).then(|| Amount::new(i128_at(r, 72 + 16 * i), scale))
    };
    let open_time = i64_at(r, 16);
    Some(Candle {
        coin: String::new(),
        interval,
        open_time,
        next_open: interval.next_open(open_time),
        open: px(0)?,
        high: px(1)?,
        low: px(2)?,
        close: px(3)?,
        volume: amount(0)?,
        notional: amount(1)?,
        trades_count: u64_at(r, 24),
        price_scale: r[13],
        block_number: 0,
        time: 0,
    })
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

/// One batch of a v1 file: its candles and its commit (block number, block
/// time, coverage start).
#[cfg(test)]
pub(crate) type Batch<'a> = (&'a [Candle], (u64, i64, i64));

/// Writes a v1 file as the first store did, for the tests of the carrying
/// over: one batch per `(candles, watermark)` given.
#[cfg(test)]
pub(crate) fn write(path: &Path, history_start_ms: i64, batches: &[Batch<'_>]) {
    fn seal(mut r: [u8; RECORD_LEN]) -> [u8; RECORD_LEN] {
        let crc = crc32fast::hash(&r[4..]);
        r[0..4].copy_from_slice(&crc.to_le_bytes());
        r
    }
    let mut out = vec![0u8; HEADER_LEN];
    out[0..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&history_start_ms.to_le_bytes());
    let crc = crc32fast::hash(&out[..60]);
    out[60..64].copy_from_slice(&crc.to_le_bytes());
    let mut ids: HashMap<String, u32> = HashMap::new();
    for (candles, (block, time, coverage)) in batches {
        for c in *candles {
            let next = ids.len() as u32;
            let id = *ids.entry(c.coin.clone()).or_insert_with(|| {
                let mut r = [0u8; RECORD_LEN];
                r[4] = KIND_COIN;
                r[8..12].copy_from_slice(&next.to_le_bytes());
                r[12] = c.coin.len() as u8;
                r[16..16 + c.coin.len()].copy_from_slice(c.coin.as_bytes());
                out.extend_from_slice(&seal(r));
                next
            });
            let mut r = [0u8; RECORD_LEN];
            r[4] = KIND_CANDLE;
            r[8..12].copy_from_slice(&id.to_le_bytes());
            r[12] = INTERVALS.iter().position(|i| *i == c.interval).unwrap() as u8;
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
            out.extend_from_slice(&seal(r));
        }
        let mut r = [0u8; RECORD_LEN];
        r[4] = KIND_COMMIT;
        r[8..16].copy_from_slice(&block.to_le_bytes());
        r[16..24].copy_from_slice(&time.to_le_bytes());
        r[24..32].copy_from_slice(&coverage.to_le_bytes());
        out.extend_from_slice(&seal(r));
    }
    std::fs::write(path, out).unwrap();
}
