//! The candle chunk codec: the values of the candle store. A chunk holds
//! the candles of one (market, interval) for one fixed span of time in a
//! columnar, bit-packed layout: about 7 bytes per candle for the mainnet
//! simulation (the store's budget is 16 bytes per candle, key included),
//! while any one candle is read in well under a microsecond, without
//! decoding the rest.
//!
//! # Spans
//!
//! A chunk covers one span, aligned to the Unix epoch: `1s` candles an hour
//! (3,600 buckets), `1m` candles a day (1,440), `5m` candles five days
//! (1,440) ([`span_ms`], [`span_start`]). A bucket's *slot* is its index in
//! the span: `(open_time − span_start) / interval`.
//!
//! # Layout
//!
//! All integers are little-endian. A *varint* is LEB128 (7 bits a byte,
//! low first, at most 19 bytes and 128 bits); a *zvarint* is a varint of the
//! zigzag of a signed value (0, −1, 1, −2 … → 0, 1, 2, 3 …).
//!
//! | Bytes | What |
//! |---|---|
//! | 1 | format version, [`FORMAT_VERSION`] |
//! | 1 | interval: 0 = `1s`, 1 = `1m`, 2 = `5m` |
//! | zvarint | span index: span start / span length |
//! | varint | rows `n`, at most the span's buckets |
//! | 1 | price scale `P`: the largest scale of any open, high, low or close (≤ 18) |
//! | 1 | volume scale `V`: the largest scale of any volume |
//! | 1 + … | slots: mode 0 = a column of `n` increasing slots; 1 = a bitmap, one bit per bucket of the span (bit `s` is bit `s % 8` of byte `s / 8`), `n` bits set; 2 = every bucket (`n` = the span's buckets), nothing follows |
//! | columns | `low`, `low scale`, `volume`, `volume scale` over the `n` rows |
//! | 1 + … | complex rows (below): mode 0 = none, 1 = all, 2 = a bitmap of `n` bits (bit `i` set: row `i` is complex), `m` bits set |
//! | columns | unless no row is complex: `trades`, `open`, `high`, `close`, `open scale`, `high scale`, `close scale`, `price_scale`, `notional`, `notional scale` over the `m` complex rows, in row order |
//! | 4 | CRC-32 (IEEE) of every byte before it |
//!
//! A **column** of `r` rows is: a varint descriptor, `width << 2 | mode <<
//! 1 | has_divisor` with `width` at most 128; a zvarint `base`; a varint
//! `divisor` when `has_divisor` (else the divisor is 1); then `⌈r × width /
//! 8⌉` bytes holding `r` unsigned `width`-bit numbers `k`, row `i`'s at bits
//! `[i × width, (i + 1) × width)` of the bytes read as one little-endian
//! number. Row `i`'s value is `base + divisor × k`. The encoder takes the
//! smallest value as the base and the greatest common divisor of the
//! offsets as the divisor, so a column that is constant over the chunk
//! costs no byte per row, and prices on a tick grid or sizes on a lot grid
//! cost the bits of their steps only. A fixed width puts row `i` at a known
//! bit: any row is read in O(1), and a bucket is found by a binary search of
//! the slot column or a popcount of the bitmap.
//!
//! What a column's value means, in mode 0 (mode 1 is the column's fallback,
//! the plain value, which the encoder takes when it is smaller or when mode
//! 0 cannot hold the chunk exactly):
//!
//! - `low`: the low's units brought to `P` decimals (`units × 10^(P −
//!   scale)`, exact in 128 bits); `open`, `high`, `close`: their value at `P`
//!   decimals minus the low's. One mode only.
//! - `low scale`, `open scale`, `high scale`, `close scale`: the scale
//!   minus the price's *trimmed scale*, the scale of its value at `P`
//!   decimals with trailing zeros dropped but at least one decimal kept (`P`
//!   when `P` is 0): the node prints prices that way (`"81307.0"`,
//!   `"0.1"`), so for its text the column is 0 and costs nothing, while any
//!   other scale (`"0.10"`) still round-trips.
//! - `volume`: the units brought to `V` decimals; its scale column as for
//!   prices, at `V`. The two columns change mode together: the fallback is
//!   the units and the scale, plain (taken when smaller, or when a volume
//!   does not fit 128 bits at `V`).
//! - `trades`: the count; `price_scale`: minus the largest scale of the four
//!   prices.
//! - `notional scale`: minus `price_scale + volume scale`; `notional`: the
//!   units minus `low × volume` (the low at `P` decimals times the volume's
//!   units, brought from `P + volume scale` decimals to the notional's scale,
//!   truncating when that divides). The VWAP lies between the low and the
//!   high, so the residual is below `(high − low) × volume`.
//!
//! A row is **simple** when its candle is what one trade makes: one trade;
//! open, high and close the low's units and scale; `price_scale` the low's
//! scale; the notional exactly low × volume at `low scale + volume scale`.
//! A simple row stores only its slot, low and volume; the rest follows. Most
//! one-second candles of most markets are simple, and without the split
//! their zeros would be packed at the width of the busiest candle.
//!
//! The invariants these predictions lean on (low ≤ open, close ≤ high; the
//! VWAP within them; the node's canonical text; one scale per market) make
//! the encoding small; none is required: anything else costs wider columns
//! or the fallback, and still round-trips exactly.
//!
//! # Size and speed
//!
//! Candles of a simulated mainnet day (`fixtures::SimConfig::mainnet`, 200
//! markets, ~3 fills a block at 14.8 blocks/s), 16 bytes of key and storage
//! overhead counted per chunk: `1s` 6.6 bytes per candle, `1m` 10.0, `5m`
//! 12.1 (a fifth of a span), 7.1 overall (the ignored test
//! `simulated_mainnet_day_bytes_per_candle`). A `1m` or `5m` candle of a
//! busy market carries many trades, so its price spread, volume and notional
//! residual are wider; most `1s` candles are simple. A full hour of a busy
//! market's `1s` candles is about 31 KB; on the 2-core benchmark machine
//! [`Chunk::get`] in it takes under 0.1 µs, [`Chunk::parse`] (the CRC-32 of
//! the 31 KB) 1.0 µs, [`encode`] 0.13 µs a candle (`cargo bench -p benches
//! --bench candle_chunks`).
//!
//! # Reading
//!
//! [`Chunk::parse`] checks the version, the CRC-32 and that every declared
//! length fits the bytes, without decoding a row (the CRC-32 and a popcount
//! of the bitmaps are its only passes over the bytes); the accessors then
//! decode only the rows they return. Damaged or adversarial bytes give an
//! error or `None`, never a panic, and nothing is allocated from a declared
//! length.

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::{MAX_SCALE, Px};

/// Layout version written in every chunk; a chunk of another version is
/// refused ([`ChunkError::Version`]).
pub const FORMAT_VERSION: u8 = 1;

const SECOND_MS: i64 = 1_000;
const HOUR_MS: i64 = 3_600 * SECOND_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The intervals kept in chunks, in the order of their code byte.
const INTERVALS: [Interval; 3] = [Interval::Second1, Interval::Minute1, Interval::Minute5];

/// One stored candle, exactly.
///
/// Note that `Px` compares values, so `==` on two candles does not see a
/// price printed with another scale (`"1.5"` and `"1.50"`); the codec keeps
/// units and scale both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkCandle {
    /// Bucket open, Unix ms, a multiple of the interval.
    pub open_time: i64,
    /// Trades in the bucket.
    pub trades_count: u64,
    /// First trade's price, as the node printed it.
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
    /// Finest price scale seen; with the notional and the volume it gives
    /// the VWAP ([`Candle::vwap`]).
    pub price_scale: u8,
}

impl From<&Candle> for ChunkCandle {
    fn from(candle: &Candle) -> Self {
        Self {
            open_time: candle.open_time,
            trades_count: candle.trades_count,
            open: candle.open,
            high: candle.high,
            low: candle.low,
            close: candle.close,
            volume: candle.volume,
            notional: candle.notional,
            price_scale: candle.price_scale,
        }
    }
}

impl ChunkCandle {
    /// Whether this is what one trade makes (see the module doc): only its
    /// low and volume are stored.
    fn is_simple(&self) -> bool {
        let low = self.low;
        let same = |px: Px| px.units() == low.units() && px.scale() == low.scale();
        self.trades_count == 1
            && same(self.open)
            && same(self.high)
            && same(self.close)
            && self.price_scale == low.scale()
            && simple_notional(low, self.volume) == Some(self.notional)
    }
}

/// The notional of one trade of `volume` at `price`.
fn simple_notional(price: Px, volume: Amount) -> Option<Amount> {
    let units = i128::from(price.units()).checked_mul(volume.units())?;
    Some(Amount::new(
        units,
        price.scale().checked_add(volume.scale())?,
    ))
}

/// Why candles cannot be written as a chunk, or bytes read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The interval is not kept in chunks.
    #[error("chunk: interval {0} is not kept in chunks (only 1s, 1m and 5m)")]
    Interval(Interval),
    /// The span start is not a span boundary of the interval.
    #[error("chunk: span start {span_start} is not a {interval} span boundary")]
    SpanStart {
        /// Interval.
        interval: Interval,
        /// The span start given.
        span_start: i64,
    },
    /// A candle's open time is not a multiple of the interval.
    #[error("chunk: row {row}: open time {open_time} is not on the {interval} grid")]
    OffGrid {
        /// Index of the candle in the input.
        row: usize,
        /// Its open time.
        open_time: i64,
        /// Interval.
        interval: Interval,
    },
    /// A candle's open time is outside the chunk's span.
    #[error(
        "chunk: row {row}: open time {open_time} is outside the span [{span_start}, {span_end})"
    )]
    OutsideSpan {
        /// Index of the candle in the input.
        row: usize,
        /// Its open time.
        open_time: i64,
        /// First open time of the span.
        span_start: i64,
        /// First open time after the span.
        span_end: i64,
    },
    /// A candle has the open time of the one before it.
    #[error("chunk: row {row}: open time {open_time} repeats the previous row's")]
    Duplicate {
        /// Index of the second candle in the input.
        row: usize,
        /// The repeated open time.
        open_time: i64,
    },
    /// A candle opens before the one before it.
    #[error("chunk: row {row}: open time {open_time} is before the previous row's {previous}")]
    Unsorted {
        /// Index of the candle in the input.
        row: usize,
        /// Its open time.
        open_time: i64,
        /// The previous candle's open time.
        previous: i64,
    },
    /// Fewer bytes than any chunk has.
    #[error("chunk: {len} bytes is shorter than the smallest chunk ({MIN_LEN})")]
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// Written in another layout version.
    #[error("chunk: format version {found}, this build reads version {FORMAT_VERSION}")]
    Version {
        /// The version byte found.
        found: u8,
    },
    /// The bytes are not the ones written.
    #[error("chunk: CRC-32 {stored:#010x} stored, {computed:#010x} computed")]
    Checksum {
        /// CRC-32 in the chunk's last four bytes.
        stored: u32,
        /// CRC-32 of the bytes before them.
        computed: u32,
    },
    /// A field does not fit the layout (only a chunk written by a broken
    /// encoder, or damage that kept the CRC-32, gets here).
    #[error("chunk: {field} at byte {offset}: {reason}")]
    Malformed {
        /// The field or column.
        field: &'static str,
        /// Its byte offset in the chunk.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

/// The span a chunk of `interval` covers, in ms: an hour of `1s` candles, a
/// day of `1m`, five days of `5m` (`None` for intervals not kept in
/// chunks).
pub fn span_ms(interval: Interval) -> Option<i64> {
    match interval {
        Interval::Second1 => Some(HOUR_MS),
        Interval::Minute1 => Some(DAY_MS),
        Interval::Minute5 => Some(5 * DAY_MS),
        _ => None,
    }
}

/// Start (Unix ms) of the span holding the bucket opening at `open_time`.
pub fn span_start(interval: Interval, open_time: i64) -> Option<i64> {
    let span = span_ms(interval)?;
    Some(open_time - open_time.rem_euclid(span))
}

/// Buckets in one span of `interval` and the interval's length in ms.
fn geometry(interval: Interval) -> Option<(usize, i64)> {
    let span = span_ms(interval)?;
    let length = interval.fixed_ms()?;
    Some(((span / length) as usize, length))
}

// ---------------------------------------------------------------------------
// Numbers

const POW10: [i128; 39] = {
    let mut table = [1_i128; 39];
    let mut i = 1;
    while i < 39 {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// `10^exp`, `None` past 128 bits.
fn pow10(exp: u32) -> Option<i128> {
    POW10.get(exp as usize).copied()
}

/// The scale `value` (units at `scale`) prints with once trailing zeros
/// are dropped, keeping one decimal when `scale` has any: the node's
/// canonical form.
fn trimmed_scale(value: i128, scale: u8) -> u8 {
    let floor = scale.min(1);
    let mut scale = scale;
    if let Ok(mut small) = i64::try_from(value) {
        while scale > floor && small % 10 == 0 {
            small /= 10;
            scale -= 1;
        }
    } else {
        let mut value = value;
        while scale > floor && value % 10 == 0 {
            value /= 10;
            scale -= 1;
        }
    }
    scale
}

/// `units` at `scale` as units at `to` decimals (`to >= scale`).
fn widen(units: i128, scale: u8, to: u8) -> Option<i128> {
    units.checked_mul(pow10(u32::from(to.checked_sub(scale)?))?)
}

/// Units at `from` decimals as units at `scale` (`scale <= from`), when
/// exact.
fn narrow(value: i128, from: u8, scale: u8) -> Option<i128> {
    let exp = from.checked_sub(scale)?;
    if exp == 0 {
        return Some(value);
    }
    let factor = pow10(u32::from(exp))?;
    // The common case in one machine word (a 128-bit division is a call).
    if let (Ok(value), Ok(factor)) = (i64::try_from(value), i64::try_from(factor)) {
        return (value % factor == 0).then_some(i128::from(value / factor));
    }
    (value % factor == 0).then_some(value / factor)
}

/// The notional predicted from the low (units at `price` decimals) and the
/// volume: their product, at `price + volume_scale` decimals, brought to
/// `notional_scale` (multiplied exactly, or divided truncating).
fn predict_notional(
    low: i128,
    price: u8,
    volume: i128,
    volume_scale: u8,
    notional_scale: u8,
) -> Option<i128> {
    let product = low.checked_mul(volume)?;
    let from = u32::from(price) + u32::from(volume_scale);
    let to = u32::from(notional_scale);
    if to >= from {
        product.checked_mul(pow10(to - from)?)
    } else {
        Some(pow10(from - to).map_or(0, |factor| product / factor))
    }
}

/// Whether `divisor` (above 0) divides `number`: in 64 bits where both
/// fit (a 128-bit division is a call).
fn divides(divisor: u128, number: u128) -> bool {
    match (u64::try_from(divisor), u64::try_from(number)) {
        (Ok(divisor), Ok(number)) => number.is_multiple_of(divisor),
        _ => number.is_multiple_of(divisor),
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    if a == 0 || b == 0 {
        return a | b;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

fn zigzag(value: i128) -> u128 {
    ((value << 1) ^ (value >> 127)) as u128
}

fn unzigzag(value: u128) -> i128 {
    ((value >> 1) as i128) ^ -((value & 1) as i128)
}

fn put_varint(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint_len(value: u128) -> usize {
    (128 - value.leading_zeros() as usize).max(1).div_ceil(7)
}

// ---------------------------------------------------------------------------
// Bits

/// Appends numbers of a fixed width, least significant bit first.
struct BitWriter<'o> {
    out: &'o mut Vec<u8>,
    pending: u64,
    filled: u32,
}

impl<'o> BitWriter<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        Self {
            out,
            pending: 0,
            filled: 0,
        }
    }

    fn push(&mut self, mut value: u128, mut width: u32) {
        while width > 0 {
            let take = width.min(32);
            self.pending |= (value as u64 & ((1 << take) - 1)) << self.filled;
            self.filled += take;
            while self.filled >= 8 {
                self.out.push(self.pending as u8);
                self.pending >>= 8;
                self.filled -= 8;
            }
            value >>= take;
            width -= take;
        }
    }

    fn finish(self) {
        if self.filled > 0 {
            self.out.push(self.pending as u8);
        }
    }
}

/// Eight bytes from byte `at`, zeros past the end.
#[inline]
fn load_u64(data: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    if let Some(bytes) = data.get(at..at.saturating_add(8)) {
        word.copy_from_slice(bytes);
    } else if let Some(rest) = data.get(at..) {
        word[..rest.len()].copy_from_slice(rest);
    }
    u64::from_le_bytes(word)
}

/// The `width`-bit number (`width` ≤ 128) at bit `bit`; zeros past the end.
#[inline]
fn read_bits(data: &[u8], bit: usize, width: u32) -> u128 {
    if width <= 56 {
        let word = load_u64(data, bit / 8) >> (bit % 8);
        return u128::from(word & ((1 << width) - 1));
    }
    let mut value = 0;
    let mut got = 0;
    while got < width {
        let take = (width - got).min(56);
        let at = bit + got as usize;
        let word = load_u64(data, at / 8) >> (at % 8);
        value |= u128::from(word & ((1 << take) - 1)) << got;
        got += take;
    }
    value
}

fn bit_is_set(bitmap: &[u8], bit: usize) -> bool {
    bitmap
        .get(bit / 8)
        .is_some_and(|byte| byte & (1 << (bit % 8)) != 0)
}

/// Set bits of `bitmap` before bit `bit`.
fn rank(bitmap: &[u8], bit: usize) -> usize {
    let whole = (bit / 8).min(bitmap.len());
    let (head, tail) = bitmap[..whole].split_at(whole - whole % 8);
    let mut count: u32 = head
        .chunks_exact(8)
        .map(|word| load_u64(word, 0).count_ones())
        .sum();
    count += tail.iter().map(|byte| byte.count_ones()).sum::<u32>();
    if let Some(byte) = bitmap.get(bit / 8) {
        count += (u32::from(*byte) & ((1 << (bit % 8)) - 1)).count_ones();
    }
    count as usize
}

/// The first set bit at or after `from`.
fn next_set(bitmap: &[u8], from: usize) -> Option<usize> {
    let mut at = from / 8;
    let mut byte = u32::from(*bitmap.get(at)?) >> (from % 8) << (from % 8);
    loop {
        if byte != 0 {
            return Some(at * 8 + byte.trailing_zeros() as usize);
        }
        at += 1;
        byte = u32::from(*bitmap.get(at)?);
    }
}

/// The position of the set bit with `index` set bits before it.
fn select(bitmap: &[u8], index: usize) -> Option<usize> {
    let mut left = index;
    for (at, byte) in bitmap.iter().enumerate() {
        let ones = byte.count_ones() as usize;
        if left < ones {
            let mut byte = *byte;
            for _ in 0..left {
                byte &= byte - 1;
            }
            return Some(at * 8 + byte.trailing_zeros() as usize);
        }
        left -= ones;
    }
    None
}

/// Set bits of a bitmap of `bits` bits, `None` if a bit past them is set.
fn count_ones(bitmap: &[u8], bits: usize) -> Option<usize> {
    let past = bitmap
        .get(bits / 8)
        .is_some_and(|byte| u32::from(*byte) >> (bits % 8) != 0);
    (!past).then(|| bitmap.iter().map(|byte| byte.count_ones() as usize).sum())
}

// ---------------------------------------------------------------------------
// Columns

// Over every row.
const LOW: usize = 0;
const LOW_SCALE: usize = 1;
const VOLUME: usize = 2;
const VOLUME_SCALE: usize = 3;
// Over the complex rows.
const TRADES: usize = 4;
const OPEN: usize = 5;
const HIGH: usize = 6;
const CLOSE: usize = 7;
const OPEN_SCALE: usize = 8;
const HIGH_SCALE: usize = 9;
const CLOSE_SCALE: usize = 10;
const PRICE_SCALE: usize = 11;
const NOTIONAL: usize = 12;
const NOTIONAL_SCALE: usize = 13;
const COLUMNS: usize = 14;
/// Columns before this one are over every row.
const FIRST_COMPLEX: usize = TRADES;

const COLUMN_NAMES: [&str; COLUMNS] = [
    "column low",
    "column low scale",
    "column volume",
    "column volume scale",
    "column trades",
    "column open",
    "column high",
    "column close",
    "column open scale",
    "column high scale",
    "column close scale",
    "column price_scale",
    "column notional",
    "column notional scale",
];

/// Whether a column has a fallback mode.
fn has_fallback(column: usize) -> bool {
    !matches!(column, LOW | TRADES | OPEN | HIGH | CLOSE)
}

/// Values as `base + divisor × packed`, `packed` of a fixed width: the
/// shape of a column's rows (`values`, or the rows of it `only` marks),
/// measured in place, then written from them — no copy of the rows.
#[derive(Debug, Clone, Copy)]
struct Packed<'v> {
    values: &'v [i128],
    only: Option<&'v [bool]>,
    base: i128,
    divisor: u128,
    width: u32,
    rows: usize,
}

impl<'v> Packed<'v> {
    fn new(values: &'v [i128], only: Option<&'v [bool]>) -> Self {
        let mut packed = Self {
            values,
            only,
            base: 0,
            divisor: 1,
            width: 0,
            rows: 0,
        };
        let (mut min, mut rows) = (None::<i128>, 0);
        packed.for_each(|value| {
            min = Some(min.map_or(value, |min| min.min(value)));
            rows += 1;
        });
        packed.base = min.unwrap_or(0);
        packed.rows = rows;
        // Exact: every value is at least the base. The common divisor is
        // given up on as soon as it is 1 (most columns); a number the
        // divisor so far divides leaves it as it is: that test is one
        // machine division, where the gcd is a loop.
        let base = packed.base as u128;
        let (mut largest, mut divisor) = (0, 0);
        packed.for_each(|value| {
            let number = (value as u128).wrapping_sub(base);
            largest = largest.max(number);
            if divisor != 1 && !(divisor > 1 && divides(divisor, number)) {
                divisor = gcd(divisor, number);
            }
        });
        let divisor = divisor.max(1);
        let width = 128 - (largest / divisor).leading_zeros();
        packed.divisor = if width == 0 { 1 } else { divisor };
        packed.width = width;
        packed
    }

    /// Calls `visit` with each row's value, in order.
    #[inline]
    fn for_each(&self, mut visit: impl FnMut(i128)) {
        match self.only {
            Some(only) => {
                let rows = self.values.iter().zip(only);
                rows.filter(|(_, kept)| **kept)
                    .for_each(|(value, _)| visit(*value));
            }
            None => self.values.iter().for_each(|value| visit(*value)),
        }
    }

    fn descriptor(&self, fallback: bool) -> u128 {
        (u128::from(self.width) << 2) | (u128::from(fallback) << 1) | u128::from(self.divisor > 1)
    }

    /// Encoded size in bits.
    fn bits(&self) -> usize {
        let mut bytes = varint_len(self.descriptor(false)) + varint_len(zigzag(self.base));
        if self.divisor > 1 {
            bytes += varint_len(self.divisor);
        }
        bytes * 8 + self.rows * self.width as usize
    }

    fn write(&self, fallback: bool, out: &mut Vec<u8>) {
        put_varint(out, self.descriptor(fallback));
        put_varint(out, zigzag(self.base));
        if self.divisor > 1 {
            put_varint(out, self.divisor);
        }
        let mut bits = BitWriter::new(out);
        let (base, divisor, width) = (self.base as u128, self.divisor, self.width);
        // In 64 bits where they fit: a u128 division is a call.
        let narrow = u64::try_from(divisor).ok().filter(|_| divisor > 1);
        self.for_each(|value| {
            let number = (value as u128).wrapping_sub(base);
            let packed = match (narrow, u64::try_from(number)) {
                (None, _) if divisor == 1 => number,
                (Some(divisor), Ok(number)) => u128::from(number / divisor),
                _ => number / divisor,
            };
            bits.push(packed, width);
        });
        bits.finish();
    }
}

/// One column as parsed: row `i`'s value is `base + divisor × packed[i]`.
#[derive(Debug, Clone, Copy)]
struct Column<'a> {
    base: i128,
    divisor: u128,
    width: u32,
    fallback: bool,
    data: &'a [u8],
}

impl Column<'_> {
    const ABSENT: Column<'static> = Column {
        base: 0,
        divisor: 1,
        width: 0,
        fallback: false,
        data: &[],
    };

    #[inline]
    fn get(&self, row: usize) -> i128 {
        if self.width == 0 {
            return self.base;
        }
        let packed = read_bits(self.data, row * self.width as usize, self.width);
        self.base
            .wrapping_add(packed.wrapping_mul(self.divisor) as i128)
    }
}

// ---------------------------------------------------------------------------
// Encoding

const SLOTS_LIST: u8 = 0;
const SLOTS_BITMAP: u8 = 1;
const SLOTS_FULL: u8 = 2;

const COMPLEX_NONE: u8 = 0;
const COMPLEX_ALL: u8 = 1;
const COMPLEX_BITMAP: u8 = 2;

/// Encodes the candles of one (market, interval) span, in open-time order.
///
/// # Errors
/// [`ChunkError::Interval`] for an interval not kept in chunks,
/// [`ChunkError::SpanStart`] for a start that is not a span boundary, and,
/// naming the first candle that is off the interval's grid, outside the
/// span, or not after the one before it, [`ChunkError::OffGrid`],
/// [`ChunkError::OutsideSpan`], [`ChunkError::Duplicate`] or
/// [`ChunkError::Unsorted`].
pub fn encode(
    interval: Interval,
    span_start: i64,
    candles: &[ChunkCandle],
) -> Result<Vec<u8>, ChunkError> {
    let (Some(code), Some((buckets, length)), Some(span)) = (
        INTERVALS.iter().position(|i| *i == interval),
        geometry(interval),
        span_ms(interval),
    ) else {
        return Err(ChunkError::Interval(interval));
    };
    let span_end = span_start
        .checked_add(span)
        .filter(|_| span_start.rem_euclid(span) == 0)
        .ok_or(ChunkError::SpanStart {
            interval,
            span_start,
        })?;
    let mut slots = Vec::with_capacity(candles.len());
    let mut previous = None;
    for (row, candle) in candles.iter().enumerate() {
        let open_time = candle.open_time;
        if open_time.rem_euclid(length) != 0 {
            return Err(ChunkError::OffGrid {
                row,
                open_time,
                interval,
            });
        }
        if open_time < span_start || open_time >= span_end {
            return Err(ChunkError::OutsideSpan {
                row,
                open_time,
                span_start,
                span_end,
            });
        }
        match previous {
            Some(previous) if open_time == previous => {
                return Err(ChunkError::Duplicate { row, open_time });
            }
            Some(previous) if open_time < previous => {
                return Err(ChunkError::Unsorted {
                    row,
                    open_time,
                    previous,
                });
            }
            _ => previous = Some(open_time),
        }
        slots.push((open_time - span_start) / length);
    }

    let rows = candles.len();
    let mut out = Vec::with_capacity(64 + rows * 8);
    out.push(FORMAT_VERSION);
    out.push(code as u8);
    put_varint(&mut out, zigzag(i128::from(span_start / span)));
    put_varint(&mut out, rows as u128);
    let price_scale = candles
        .iter()
        .flat_map(|c| [c.open, c.high, c.low, c.close])
        .map(Px::scale)
        .max()
        .unwrap_or(0);
    let volume_scale = candles.iter().map(|c| c.volume.scale()).max().unwrap_or(0);
    out.push(price_scale);
    out.push(volume_scale);

    let slot_values: Vec<i128> = slots.iter().map(|slot| i128::from(*slot)).collect();
    let list = Packed::new(&slot_values, None);
    if rows == buckets {
        out.push(SLOTS_FULL);
    } else if buckets <= list.bits() {
        out.push(SLOTS_BITMAP);
        out.extend_from_slice(&bitmap(buckets, slots.iter().map(|slot| *slot as usize)));
    } else {
        out.push(SLOTS_LIST);
        list.write(false, &mut out);
    }

    let values = Values::of(candles, price_scale, volume_scale);
    let complex: Vec<bool> = candles.iter().map(|c| !c.is_simple()).collect();
    let complex_rows = complex.iter().filter(|c| **c).count();
    for column in LOW..FIRST_COMPLEX {
        let (packed, fallback) = values.column(column, None);
        packed.write(fallback, &mut out);
    }
    if complex_rows == 0 {
        out.push(COMPLEX_NONE);
    } else {
        // Every row in the complex columns, or a bitmap and only the
        // complex rows: whichever is smaller (when every row is complex,
        // they are the same rows, packed once).
        let every: Vec<_> = (FIRST_COMPLEX..COLUMNS)
            .map(|column| values.column(column, None))
            .collect();
        let only: Option<Vec<_>> = (complex_rows < rows).then(|| {
            (FIRST_COMPLEX..COLUMNS)
                .map(|column| values.column(column, Some(&complex)))
                .collect()
        });
        let bits = |columns: &[(Packed, bool)]| columns.iter().map(|c| c.0.bits()).sum::<usize>();
        let bitmap_bits = rows.div_ceil(8) * 8;
        let columns = match only {
            Some(only) if bitmap_bits + bits(&only) < bits(&every) => {
                out.push(COMPLEX_BITMAP);
                let set = complex.iter().enumerate().filter(|(_, c)| **c);
                out.extend_from_slice(&bitmap(rows, set.map(|(row, _)| row)));
                only
            }
            _ => {
                out.push(COMPLEX_ALL);
                every
            }
        };
        for (packed, fallback) in columns {
            packed.write(fallback, &mut out);
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// A bitmap of `bits` bits with `set` set.
fn bitmap(bits: usize, set: impl Iterator<Item = usize>) -> Vec<u8> {
    let mut bytes = vec![0; bits.div_ceil(8)];
    for bit in set {
        bytes[bit / 8] |= 1 << (bit % 8);
    }
    bytes
}

/// Every column's values, in mode 0 (`None` when a row does not fit it)
/// and in fallback mode.
struct Values {
    primary: [Option<Vec<i128>>; COLUMNS],
    fallback: [Vec<i128>; COLUMNS],
}

impl Values {
    fn of(candles: &[ChunkCandle], price: u8, volume: u8) -> Self {
        let mut primary: [Vec<i128>; COLUMNS] =
            std::array::from_fn(|_| Vec::with_capacity(candles.len()));
        let mut fallback: [Vec<i128>; COLUMNS] =
            std::array::from_fn(|_| Vec::with_capacity(candles.len()));
        let (mut volume_fits, mut notional_fits) = (true, true);
        for candle in candles {
            let prices = [candle.low, candle.open, candle.high, candle.close];
            // Exact: at most (2^63 − 1) × 10^18 < 2^127.
            let at_price_scale =
                prices.map(|px| i128::from(px.units()) * POW10[usize::from(price - px.scale())]);
            let low = at_price_scale[0];
            primary[LOW].push(low);
            for (column, value) in [OPEN, HIGH, CLOSE].into_iter().zip(&at_price_scale[1..]) {
                primary[column].push(value - low);
            }
            let scale_columns = [LOW_SCALE, OPEN_SCALE, HIGH_SCALE, CLOSE_SCALE];
            for ((column, px), value) in scale_columns.into_iter().zip(prices).zip(at_price_scale) {
                let scale = i128::from(px.scale());
                primary[column].push(scale - i128::from(trimmed_scale(value, price)));
                fallback[column].push(scale);
            }
            primary[TRADES].push(i128::from(candle.trades_count));
            let finest = prices.iter().map(|px| px.scale()).max().unwrap_or(0);
            let price_scale = i128::from(candle.price_scale);
            primary[PRICE_SCALE].push(price_scale - i128::from(finest));
            fallback[PRICE_SCALE].push(price_scale);

            let (units, scale) = (candle.volume.units(), candle.volume.scale());
            if let Some(value) = widen(units, scale, volume) {
                primary[VOLUME].push(value);
                let trimmed = trimmed_scale(value, volume);
                primary[VOLUME_SCALE].push(i128::from(scale) - i128::from(trimmed));
            } else {
                volume_fits = false;
            }
            fallback[VOLUME].push(units);
            fallback[VOLUME_SCALE].push(i128::from(scale));

            let (notional, notional_scale) = (candle.notional.units(), candle.notional.scale());
            primary[NOTIONAL_SCALE]
                .push(i128::from(notional_scale) - price_scale - i128::from(scale));
            fallback[NOTIONAL_SCALE].push(i128::from(notional_scale));
            let residual = predict_notional(low, price, units, scale, notional_scale)
                .and_then(|predicted| notional.checked_sub(predicted));
            if let Some(residual) = residual {
                primary[NOTIONAL].push(residual);
            } else {
                notional_fits = false;
            }
            fallback[NOTIONAL].push(notional);
        }
        let mut primary = std::array::from_fn(|column| {
            let fits = match column {
                VOLUME | VOLUME_SCALE => volume_fits,
                NOTIONAL => notional_fits,
                _ => true,
            };
            fits.then(|| std::mem::take(&mut primary[column]))
        });
        // The volume scale's mode 0 reads the volume at `V`, so the two go
        // to their fallback together when that is smaller.
        if let (Some(volume), Some(scale)) = (&primary[VOLUME], &primary[VOLUME_SCALE]) {
            let bits = |values: &[i128]| Packed::new(values, None).bits();
            let scale = bits(scale).min(bits(&fallback[VOLUME_SCALE]));
            if bits(&fallback[VOLUME]) + bits(&fallback[VOLUME_SCALE]) < bits(volume) + scale {
                primary[VOLUME] = None;
                primary[VOLUME_SCALE] = None;
            }
        }
        Self { primary, fallback }
    }

    /// The column packed in its smaller mode, over the rows `only` marks
    /// (every row when `None`), and whether that is the fallback mode.
    fn column<'v>(&'v self, column: usize, only: Option<&'v [bool]>) -> (Packed<'v>, bool) {
        let pack = |values: &'v [i128]| Packed::new(values, only);
        let primary = self.primary[column].as_deref().map(pack);
        // The volume's mode was chosen with its scale's (see `of`).
        let fallback = has_fallback(column) && !(column == VOLUME && primary.is_some());
        let fallback = fallback.then(|| pack(&self.fallback[column]));
        match (primary, fallback) {
            (Some(primary), Some(fallback)) if fallback.bits() < primary.bits() => (fallback, true),
            (Some(primary), _) => (primary, false),
            (None, Some(fallback)) => (fallback, true),
            // Only the columns with a fallback can lack mode 0.
            (None, None) => (Packed::new(&[], None), false),
        }
    }
}

// ---------------------------------------------------------------------------
// Reading

/// A cursor over a chunk's bytes that names what it failed to read.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn malformed(field: &'static str, at: usize, reason: &'static str) -> ChunkError {
        ChunkError::Malformed {
            field,
            offset: at,
            reason,
        }
    }

    fn byte(&mut self, field: &'static str) -> Result<u8, ChunkError> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| Self::malformed(field, self.at, "past the end"))?;
        self.at += 1;
        Ok(byte)
    }

    fn varint(&mut self, field: &'static str) -> Result<u128, ChunkError> {
        let start = self.at;
        let mut value = 0_u128;
        let mut shift = 0;
        loop {
            let byte = self.byte(field)?;
            let bits = u128::from(byte & 0x7f);
            if shift == 126 && bits > 3 {
                return Err(Self::malformed(field, start, "varint above 128 bits"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 126 {
                return Err(Self::malformed(field, start, "varint above 128 bits"));
            }
        }
    }

    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], ChunkError> {
        let bytes = self
            .at
            .checked_add(len)
            .and_then(|end| self.bytes.get(self.at..end))
            .ok_or_else(|| Self::malformed(field, self.at, "runs past the end"))?;
        self.at += len;
        Ok(bytes)
    }

    fn column(
        &mut self,
        rows: usize,
        field: &'static str,
        fallback_allowed: bool,
    ) -> Result<Column<'a>, ChunkError> {
        let start = self.at;
        let descriptor = self.varint(field)?;
        let Ok(width @ 0..=128) = u32::try_from(descriptor >> 2) else {
            return Err(Self::malformed(field, start, "bit width above 128"));
        };
        let fallback = descriptor & 2 != 0;
        if fallback && !fallback_allowed {
            return Err(Self::malformed(
                field,
                start,
                "fallback mode on a column without one",
            ));
        }
        let base = unzigzag(self.varint(field)?);
        let divisor = if descriptor & 1 == 0 {
            1
        } else {
            self.varint(field)?
        };
        // `rows` is at most the span's buckets, so this cannot overflow.
        let data = self.take((rows * width as usize).div_ceil(8), field)?;
        Ok(Column {
            base,
            divisor,
            width,
            fallback,
            data,
        })
    }
}

/// How a chunk lists the slots it holds.
#[derive(Debug, Clone, Copy)]
enum Slots<'a> {
    /// Every bucket of the span.
    Full,
    /// One bit per bucket.
    Bitmap(&'a [u8]),
    /// Each row's slot, increasing.
    List(Column<'a>),
}

/// Which rows are complex (not what one trade makes).
#[derive(Debug, Clone, Copy)]
enum Complex<'a> {
    None,
    All,
    /// One bit per row.
    Bitmap(&'a [u8]),
}

/// A parsed chunk, borrowing its bytes. The accessors decode only the rows
/// they return; a row that does not decode (only possible for bytes that
/// kept their CRC-32 through damage, or a broken encoder) reads as absent.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    interval: Interval,
    length: i64,
    span_start: i64,
    buckets: usize,
    rows: usize,
    price_scale: u8,
    volume_scale: u8,
    slots: Slots<'a>,
    complex: Complex<'a>,
    columns: [Column<'a>; COLUMNS],
}

/// Bytes of the smallest chunk: version, interval, span, rows, two scales,
/// two modes, four two-byte columns, CRC-32.
const MIN_LEN: usize = 8 + 2 * FIRST_COMPLEX + 4;

impl<'a> Chunk<'a> {
    /// Checks the version, the CRC-32 and that every declared length fits
    /// the bytes (O(columns), plus a popcount of the bitmaps).
    ///
    /// # Errors
    /// [`ChunkError::TooShort`], [`ChunkError::Version`],
    /// [`ChunkError::Checksum`], or [`ChunkError::Malformed`] naming the
    /// field and its offset.
    pub fn parse(bytes: &'a [u8]) -> Result<Chunk<'a>, ChunkError> {
        if bytes.len() < MIN_LEN {
            return Err(ChunkError::TooShort { len: bytes.len() });
        }
        if bytes[0] != FORMAT_VERSION {
            return Err(ChunkError::Version { found: bytes[0] });
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(ChunkError::Checksum { stored, computed });
        }
        let mut cursor = Cursor { bytes: body, at: 1 };
        let at = cursor.at;
        let code = cursor.byte("interval")?;
        let Some((interval, (buckets, length), span)) = INTERVALS
            .get(usize::from(code))
            .and_then(|i| Some((*i, geometry(*i)?, span_ms(*i)?)))
        else {
            return Err(Cursor::malformed("interval", at, "unknown interval code"));
        };
        let at = cursor.at;
        let index = unzigzag(cursor.varint("span")?);
        let span_start = i64::try_from(index)
            .ok()
            .and_then(|index| index.checked_mul(span))
            .filter(|start| start.checked_add(span).is_some())
            .ok_or_else(|| Cursor::malformed("span", at, "span start out of range"))?;
        let at = cursor.at;
        let rows = usize::try_from(cursor.varint("row count")?)
            .ok()
            .filter(|rows| *rows <= buckets)
            .ok_or_else(|| Cursor::malformed("row count", at, "more rows than buckets"))?;
        let at = cursor.at;
        let price_scale = cursor.byte("price scale")?;
        if price_scale > MAX_SCALE {
            return Err(Cursor::malformed("price scale", at, "above 18"));
        }
        let volume_scale = cursor.byte("volume scale")?;

        let at = cursor.at;
        let slots = match cursor.byte("slots")? {
            SLOTS_FULL if rows == buckets => Slots::Full,
            SLOTS_BITMAP => {
                let bitmap = cursor.take(buckets.div_ceil(8), "slot bitmap")?;
                if count_ones(bitmap, buckets) != Some(rows) {
                    return Err(Cursor::malformed(
                        "slot bitmap",
                        at,
                        "bits set are not the rows in the span",
                    ));
                }
                Slots::Bitmap(bitmap)
            }
            SLOTS_LIST => Slots::List(cursor.column(rows, "slot list", false)?),
            _ => return Err(Cursor::malformed("slots", at, "unknown slot mode")),
        };
        let mut columns = [Column::ABSENT; COLUMNS];
        for index in LOW..FIRST_COMPLEX {
            let at = cursor.at;
            columns[index] = cursor.column(rows, COLUMN_NAMES[index], has_fallback(index))?;
            if index == VOLUME_SCALE && columns[VOLUME].fallback && !columns[index].fallback {
                return Err(Cursor::malformed(
                    COLUMN_NAMES[VOLUME_SCALE],
                    at,
                    "mode 0 needs the volume in mode 0",
                ));
            }
        }
        let at = cursor.at;
        let (complex, complex_rows) = match cursor.byte("complex rows")? {
            COMPLEX_NONE => (Complex::None, 0),
            COMPLEX_ALL => (Complex::All, rows),
            COMPLEX_BITMAP => {
                let bitmap = cursor.take(rows.div_ceil(8), "complex bitmap")?;
                let Some(set) = count_ones(bitmap, rows) else {
                    return Err(Cursor::malformed(
                        "complex bitmap",
                        at,
                        "bits set past the rows",
                    ));
                };
                (Complex::Bitmap(bitmap), set)
            }
            _ => return Err(Cursor::malformed("complex rows", at, "unknown mode")),
        };
        if !matches!(complex, Complex::None) {
            for (index, column) in columns.iter_mut().enumerate().skip(FIRST_COMPLEX) {
                *column = cursor.column(complex_rows, COLUMN_NAMES[index], has_fallback(index))?;
            }
        }
        if cursor.at != body.len() {
            return Err(Cursor::malformed(
                "end",
                cursor.at,
                "bytes after the last column",
            ));
        }
        Ok(Chunk {
            interval,
            length,
            span_start,
            buckets,
            rows,
            price_scale,
            volume_scale,
            slots,
            complex,
            columns,
        })
    }

    /// The chunk's interval.
    pub fn interval(&self) -> Interval {
        self.interval
    }

    /// Open time of the span's first bucket, Unix ms.
    pub fn span_start(&self) -> i64 {
        self.span_start
    }

    /// Candles in the chunk.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the chunk holds no candle.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The candle opening at `open_time`, if the chunk holds it: a bit test
    /// and popcount, or a binary search of the slots, then one row decoded.
    pub fn get(&self, open_time: i64) -> Option<ChunkCandle> {
        let offset = open_time.checked_sub(self.span_start)?;
        if offset < 0 || offset % self.length != 0 {
            return None;
        }
        let slot = usize::try_from(offset / self.length).ok()?;
        if slot >= self.buckets {
            return None;
        }
        let row = match self.slots {
            Slots::Full => slot,
            Slots::Bitmap(bitmap) => {
                if !bit_is_set(bitmap, slot) {
                    return None;
                }
                rank(bitmap, slot)
            }
            Slots::List(list) => {
                let row = self.lower_bound(list, slot);
                if row >= self.rows || list.get(row) != slot as i128 {
                    return None;
                }
                row
            }
        };
        let complex = match self.complex {
            Complex::None => None,
            Complex::All => Some(row),
            Complex::Bitmap(bitmap) => bit_is_set(bitmap, row).then(|| rank(bitmap, row)),
        };
        self.decode(row, slot, complex)
    }

    /// The candle of row `index`, in open-time order.
    pub fn row(&self, index: usize) -> Option<ChunkCandle> {
        if index >= self.rows {
            return None;
        }
        let slot = match self.slots {
            Slots::Full => index,
            Slots::Bitmap(bitmap) => select(bitmap, index)?,
            Slots::List(list) => usize::try_from(list.get(index)).ok()?,
        };
        let complex = match self.complex {
            Complex::None => None,
            Complex::All => Some(index),
            Complex::Bitmap(bitmap) => bit_is_set(bitmap, index).then(|| rank(bitmap, index)),
        };
        self.decode(index, slot, complex)
    }

    /// Every candle, in open-time order.
    pub fn iter(&self) -> impl Iterator<Item = ChunkCandle> + '_ {
        self.rows_from(0, 0, self.rows)
    }

    /// The candles opening in `[from, to)`, in open-time order.
    pub fn range(&self, from: i64, to: i64) -> impl Iterator<Item = ChunkCandle> + '_ {
        let (row, slot) = self.first_at_or_after(from);
        let (end, _) = self.first_at_or_after(to);
        self.rows_from(row, slot, end.max(row))
    }

    fn rows_from(&self, row: usize, slot: usize, end: usize) -> Rows<'_, 'a> {
        let complex = match self.complex {
            Complex::None => 0,
            Complex::All => row,
            Complex::Bitmap(bitmap) => rank(bitmap, row),
        };
        Rows {
            chunk: self,
            row,
            end,
            slot,
            complex,
        }
    }

    /// The first row whose bucket opens at or after `time`, and the first
    /// slot it can be at.
    fn first_at_or_after(&self, time: i64) -> (usize, usize) {
        let offset = i128::from(time) - i128::from(self.span_start);
        let length = i128::from(self.length);
        let slot = if offset <= 0 {
            0
        } else {
            let slot = ((offset + length - 1) / length).min(self.buckets as i128);
            usize::try_from(slot).unwrap_or(self.buckets)
        };
        let row = match self.slots {
            Slots::Full => slot,
            Slots::Bitmap(bitmap) => rank(bitmap, slot),
            Slots::List(list) => self.lower_bound(list, slot),
        };
        (row.min(self.rows), slot)
    }

    /// The first row whose slot is not below `slot`.
    fn lower_bound(&self, list: Column<'_>, slot: usize) -> usize {
        let (mut low, mut high) = (0, self.rows);
        let slot = slot as i128;
        while low < high {
            let middle = low + (high - low) / 2;
            if list.get(middle) < slot {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// A column's value plus `predicted`, or its plain value in fallback
    /// mode.
    fn value(&self, column: usize, row: usize, predicted: i128) -> Option<i128> {
        let column = &self.columns[column];
        let stored = column.get(row);
        if column.fallback {
            Some(stored)
        } else {
            predicted.checked_add(stored)
        }
    }

    /// A price from its value at the chunk's price scale and its scale
    /// column.
    fn price(&self, value: i128, column: usize, row: usize) -> Option<Px> {
        let trimmed = i128::from(trimmed_scale(value, self.price_scale));
        let scale = u8::try_from(self.value(column, row, trimmed)?).ok()?;
        let units = i64::try_from(narrow(value, self.price_scale, scale)?).ok()?;
        Px::new(units, scale).ok()
    }

    /// Decodes row `row` (slot `slot`), which is complex row `complex` if
    /// any.
    fn decode(&self, row: usize, slot: usize, complex: Option<usize>) -> Option<ChunkCandle> {
        if slot >= self.buckets {
            return None;
        }
        // In range: the span start was checked to leave a whole span.
        let open_time = self.span_start + slot as i64 * self.length;
        let columns = &self.columns;
        let low_value = columns[LOW].get(row);
        let low = self.price(low_value, LOW_SCALE, row)?;

        let stored = columns[VOLUME].get(row);
        let (volume_units, volume_scale) = if columns[VOLUME].fallback {
            (stored, u8::try_from(columns[VOLUME_SCALE].get(row)).ok()?)
        } else {
            let trimmed = i128::from(trimmed_scale(stored, self.volume_scale));
            let scale = u8::try_from(self.value(VOLUME_SCALE, row, trimmed)?).ok()?;
            (narrow(stored, self.volume_scale, scale)?, scale)
        };
        let volume = Amount::new(volume_units, volume_scale);

        let Some(row) = complex else {
            return Some(ChunkCandle {
                open_time,
                trades_count: 1,
                open: low,
                high: low,
                low,
                close: low,
                volume,
                notional: simple_notional(low, volume)?,
                price_scale: low.scale(),
            });
        };
        let price = |column: usize, scale_column: usize| {
            self.price(
                low_value.checked_add(columns[column].get(row))?,
                scale_column,
                row,
            )
        };
        let open = price(OPEN, OPEN_SCALE)?;
        let high = price(HIGH, HIGH_SCALE)?;
        let close = price(CLOSE, CLOSE_SCALE)?;
        let finest = [low, open, high, close].map(Px::scale).into_iter().max()?;
        let price_scale = u8::try_from(self.value(PRICE_SCALE, row, i128::from(finest))?).ok()?;
        let predicted = i128::from(price_scale) + i128::from(volume_scale);
        let notional_scale = u8::try_from(self.value(NOTIONAL_SCALE, row, predicted)?).ok()?;
        let notional = if columns[NOTIONAL].fallback {
            columns[NOTIONAL].get(row)
        } else {
            let predicted = predict_notional(
                low_value,
                self.price_scale,
                volume_units,
                volume_scale,
                notional_scale,
            )?;
            self.value(NOTIONAL, row, predicted)?
        };
        Some(ChunkCandle {
            open_time,
            trades_count: u64::try_from(columns[TRADES].get(row)).ok()?,
            open,
            high,
            low,
            close,
            volume,
            notional: Amount::new(notional, notional_scale),
            price_scale,
        })
    }
}

/// Rows `row..end` of a chunk, decoded one at a time.
struct Rows<'c, 'a> {
    chunk: &'c Chunk<'a>,
    row: usize,
    end: usize,
    /// The first slot the next row can be at.
    slot: usize,
    /// Complex rows before `row`.
    complex: usize,
}

impl Iterator for Rows<'_, '_> {
    type Item = ChunkCandle;

    fn next(&mut self) -> Option<ChunkCandle> {
        while self.row < self.end {
            let row = self.row;
            self.row += 1;
            let slot = match self.chunk.slots {
                Slots::Full => Some(row),
                Slots::Bitmap(bitmap) => next_set(bitmap, self.slot),
                Slots::List(list) => usize::try_from(list.get(row)).ok(),
            };
            let Some(slot) = slot else {
                self.row = self.end;
                return None;
            };
            self.slot = slot.saturating_add(1);
            let complex = match self.chunk.complex {
                Complex::None => false,
                Complex::All => true,
                Complex::Bitmap(bitmap) => bit_is_set(bitmap, row),
            };
            let index = complex.then_some(self.complex);
            self.complex += usize::from(complex);
            if let Some(candle) = self.chunk.decode(row, slot, index) {
                return Some(candle);
            }
        }
        None
    }
}

/// The union of two candle lists by open time, in open-time order. Where
/// both hold a bucket, the `existing` candle is kept: the store never
/// rewrites a stored bucket.
pub fn merge(existing: &[ChunkCandle], new: &[ChunkCandle]) -> Vec<ChunkCandle> {
    let mut all = Vec::with_capacity(existing.len() + new.len());
    all.extend_from_slice(existing);
    all.extend_from_slice(new);
    // Stable, so of two candles of one bucket the existing one comes first
    // and stays.
    all.sort_by_key(|candle| candle.open_time);
    all.dedup_by_key(|candle| candle.open_time);
    all
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use engine::market::candles::CandlesView;
    use engine::market::trades::Trade;
    use proptest::prelude::*;
    use proptest::sample::{Index, subsequence};

    use super::*;

    /// Every field with its scale (`Px` equality compares values only).
    type Exact = (i64, u64, [(i64, u8); 4], (i128, u8), (i128, u8), u8);

    fn exact(candle: &ChunkCandle) -> Exact {
        let px = |px: Px| (px.units(), px.scale());
        let amount = |amount: Amount| (amount.units(), amount.scale());
        (
            candle.open_time,
            candle.trades_count,
            [
                px(candle.open),
                px(candle.high),
                px(candle.low),
                px(candle.close),
            ],
            amount(candle.volume),
            amount(candle.notional),
            candle.price_scale,
        )
    }

    fn exact_all(candles: impl IntoIterator<Item = ChunkCandle>) -> Vec<Exact> {
        candles.into_iter().map(|c| exact(&c)).collect()
    }

    fn px(units: i64, scale: u8) -> Px {
        Px::new(units, scale).unwrap()
    }

    /// A one-trade candle at `open_time`.
    fn one_trade(open_time: i64, price: Px, volume: Amount) -> ChunkCandle {
        ChunkCandle {
            open_time,
            trades_count: 1,
            open: price,
            high: price,
            low: price,
            close: price,
            volume,
            notional: simple_notional(price, volume).unwrap(),
            price_scale: price.scale(),
        }
    }

    // --- strategies

    fn price_units() -> impl Strategy<Value = i64> {
        prop_oneof![0..1_000_i64, 0..10_000_000_000_i64, 0..=i64::MAX]
    }

    fn any_price() -> impl Strategy<Value = Px> {
        (price_units(), 0..=MAX_SCALE).prop_map(|(units, scale)| px(units, scale))
    }

    fn amount_units() -> impl Strategy<Value = i128> {
        prop_oneof![
            0..1_000_000_i128,
            0..1_000_000_000_000_000_000_000_000_i128,
            0..=i128::MAX,
            (i128::MAX - 1_000_000)..=i128::MAX,
        ]
    }

    fn any_amount() -> impl Strategy<Value = Amount> {
        (amount_units(), 0..=40_u8).prop_map(|(units, scale)| Amount::new(units, scale))
    }

    /// Anything at all: unordered prices of any scale, any sums.
    fn any_candle() -> impl Strategy<Value = ChunkCandle> {
        (
            any::<u64>(),
            [any_price(), any_price(), any_price(), any_price()],
            any_amount(),
            any_amount(),
            any::<u8>(),
        )
            .prop_map(
                |(trades_count, [open, high, low, close], volume, notional, price_scale)| {
                    ChunkCandle {
                        open_time: 0,
                        trades_count,
                        open,
                        high,
                        low,
                        close,
                        volume,
                        notional,
                        price_scale,
                    }
                },
            )
    }

    /// What one trade makes, at any price and size.
    fn one_trade_candle() -> impl Strategy<Value = ChunkCandle> {
        (
            any_price(),
            prop_oneof![0..1_000_000_i128, 0..=i128::from(i64::MAX), amount_units()],
            0..=MAX_SCALE,
        )
            .prop_map(|(price, units, scale)| {
                let volume = Amount::new(units, scale);
                match simple_notional(price, volume) {
                    Some(_) => one_trade(0, price, volume),
                    // Too large for one trade: a smaller one.
                    None => one_trade(0, price, Amount::new(units % 1_000_000, scale)),
                }
            })
    }

    /// A market's candle: prices close to `base`, in the node's text or
    /// with other scales, notional between low and high times the volume.
    fn near_candle(base: Px) -> impl Strategy<Value = ChunkCandle> {
        (
            0..1_000_i64,
            [0..50_i64, 0..50_i64, 0..50_i64],
            [any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()],
            (1..1_000_000_000_i128, 0..=8_u8),
            0..1_000_000_i128,
            (1..200_u64, 0..3_u8),
        )
            .prop_map(
                move |(
                    offset,
                    [to_open, to_high, to_close],
                    canonical,
                    (size, size_scale),
                    extra,
                    (trades, finer),
                )| {
                    let low = base.units() + offset;
                    let high = low + to_high + to_open.max(to_close);
                    let prices = [low, low + to_open, high, low + to_close]
                        .map(|units| px(units, base.scale()));
                    let [low, open, high, close] = [0, 1, 2, 3].map(|i| {
                        if canonical[i] {
                            prices[i].canonical()
                        } else {
                            prices[i]
                        }
                    });
                    // Sizes as the node prints them (trailing zeros dropped) or not.
                    let (mut size, mut size_scale) = (size, size_scale);
                    while canonical[0] && size_scale > 1 && size % 10 == 0 {
                        size /= 10;
                        size_scale -= 1;
                    }
                    let volume = Amount::new(size, size_scale);
                    let (units, scale) = (i128::from(low.units()) * size, low.scale() + size_scale);
                    let finest = [open, high, low, close]
                        .map(Px::scale)
                        .into_iter()
                        .max()
                        .unwrap();
                    ChunkCandle {
                        open_time: 0,
                        trades_count: trades,
                        open,
                        high,
                        low,
                        close,
                        volume,
                        notional: Amount::new(units + extra, scale),
                        price_scale: finest + finest.min(MAX_SCALE - finest).min(finer),
                    }
                },
            )
    }

    fn candle_of(mix: u8, base: Px) -> BoxedStrategy<ChunkCandle> {
        match mix {
            0 => one_trade_candle().boxed(),
            1 => near_candle(base).boxed(),
            2 => prop_oneof![4 => one_trade_candle(), 4 => near_candle(base), 1 => any_candle()]
                .boxed(),
            _ => any_candle().boxed(),
        }
    }

    /// A chunk's input: interval, span start and candles on a random subset
    /// of the span's buckets (sometimes all of them), of one of four mixes.
    fn chunk_input(max_rows: usize) -> impl Strategy<Value = (Interval, i64, Vec<ChunkCandle>)> {
        (
            prop::sample::select(INTERVALS.to_vec()),
            -500_000..500_000_i64,
            (1..10_000_000_000_i64, 0..=8_u8),
            0..4_u8,
            any::<bool>(),
        )
            .prop_flat_map(move |(interval, index, (units, scale), mix, dense)| {
                let (buckets, length) = geometry(interval).unwrap();
                let start = index * span_ms(interval).unwrap();
                let rows = if dense {
                    buckets
                } else {
                    max_rows.min(buckets)
                };
                subsequence((0..buckets).collect::<Vec<_>>(), 0..=rows).prop_flat_map(
                    move |slots| {
                        let candles =
                            prop::collection::vec(candle_of(mix, px(units, scale)), slots.len());
                        (Just(slots), candles).prop_map(move |(slots, mut candles)| {
                            for (candle, slot) in candles.iter_mut().zip(&slots) {
                                candle.open_time = start + *slot as i64 * length;
                            }
                            (interval, start, candles)
                        })
                    },
                )
            })
    }

    /// Every accessor over `bytes`, which must not panic whatever they are.
    fn exercise(bytes: &[u8]) -> Result<usize, ChunkError> {
        let chunk = Chunk::parse(bytes)?;
        let (start, length) = (chunk.span_start(), chunk.interval().fixed_ms().unwrap());
        let mut seen = chunk.iter().count();
        for index in [
            0,
            1,
            chunk.len() / 2,
            chunk.len().saturating_sub(1),
            chunk.len(),
        ] {
            seen += usize::from(chunk.row(index).is_some());
        }
        for slot in [0, 1, 7, 8, 63, 64, 100, 1_439, 1_440, 3_599, 3_600] {
            seen += usize::from(chunk.get(start + slot * length).is_some());
        }
        seen += chunk.range(start + length, start + 100 * length).count();
        seen += chunk.range(i64::MIN, i64::MAX).count();
        Ok(seen)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// `encode`, `parse`, then every accessor gives back exactly the
        /// input: units and scales of every field.
        #[test]
        fn round_trips_exactly(
            (interval, start, candles) in chunk_input(80),
            probes in prop::collection::vec((any::<i64>(), any::<Index>()), 8),
        ) {
            let bytes = encode(interval, start, &candles).unwrap();
            let chunk = Chunk::parse(&bytes).unwrap();
            prop_assert_eq!(chunk.interval(), interval);
            prop_assert_eq!(chunk.span_start(), start);
            prop_assert_eq!(chunk.len(), candles.len());
            let want = exact_all(candles.iter().copied());
            prop_assert_eq!(&exact_all(chunk.iter()), &want);
            for (index, candle) in candles.iter().enumerate() {
                prop_assert_eq!(chunk.row(index).map(|c| exact(&c)), Some(exact(candle)));
                prop_assert_eq!(chunk.get(candle.open_time).map(|c| exact(&c)), Some(exact(candle)));
            }
            prop_assert!(chunk.row(candles.len()).is_none());
            let span = span_ms(interval).unwrap();
            let length = interval.fixed_ms().unwrap();
            let held: BTreeSet<i64> = candles.iter().map(|c| c.open_time).collect();
            for time in [start - length, start - 1, start + 1, start + span, start + span - 1] {
                prop_assert_eq!(chunk.get(time).map(|c| exact(&c)), candles.iter().find(|c| c.open_time == time).map(exact));
            }
            for (time, index) in &probes {
                let absent = start + index.index(span as usize / length as usize) as i64 * length;
                if !held.contains(&absent) {
                    prop_assert!(chunk.get(absent).is_none());
                }
                prop_assert!(chunk.get(*time).is_none() || held.contains(time));
            }
            // Ranges: around, inside and across the span, and arbitrary.
            let mut bounds: Vec<i64> = probes.iter().map(|(time, _)| *time).collect();
            bounds.extend(probes.iter().map(|(_, index)| start - span + index.index(3 * span as usize) as i64));
            bounds.extend([i64::MIN, i64::MAX, start, start + span]);
            for from in &bounds {
                for to in bounds.iter().take(4) {
                    let want = exact_all(candles.iter().copied().filter(|c| (*from..*to).contains(&c.open_time)));
                    prop_assert_eq!(exact_all(chunk.range(*from, *to)), want);
                }
            }
        }

        /// Any byte changed is caught by the CRC-32 (or the version byte).
        #[test]
        fn a_changed_byte_is_refused(
            (interval, start, candles) in chunk_input(40),
            at in any::<Index>(),
            flip in 1..=255_u8,
        ) {
            let mut bytes = encode(interval, start, &candles).unwrap();
            let at = at.index(bytes.len());
            bytes[at] ^= flip;
            let refused = matches!(
                Chunk::parse(&bytes),
                Err(ChunkError::Checksum { .. } | ChunkError::Version { .. })
            );
            prop_assert!(refused);
        }

        /// A chunk cut short or with bytes appended is refused.
        #[test]
        fn a_cut_or_extended_chunk_is_refused(
            (interval, start, candles) in chunk_input(40),
            cut in any::<Index>(),
            tail in prop::collection::vec(any::<u8>(), 1..64),
        ) {
            let bytes = encode(interval, start, &candles).unwrap();
            let cut = &bytes[..cut.index(bytes.len())];
            prop_assert!(exercise(cut).is_err());
            let mut extended = bytes.clone();
            extended.extend_from_slice(&tail);
            prop_assert!(exercise(&extended).is_err());
        }

        /// Arbitrary bytes, and valid chunks with bytes changed behind a
        /// recomputed CRC-32 (so the layout checks and the row decoding
        /// see them), never make any accessor panic.
        #[test]
        fn damaged_bytes_never_panic(
            noise in prop::collection::vec(any::<u8>(), 0..400),
            (interval, start, candles) in chunk_input(40),
            changes in prop::collection::vec((any::<Index>(), any::<u8>()), 1..6),
            cut in any::<Index>(),
        ) {
            let _ = exercise(&noise);
            let mut forged = vec![FORMAT_VERSION];
            forged.extend_from_slice(&noise);
            let crc = crc32fast::hash(&forged);
            forged.extend_from_slice(&crc.to_le_bytes());
            let _ = exercise(&forged);

            let mut bytes = encode(interval, start, &candles).unwrap();
            bytes.truncate(bytes.len() - 4);
            for (at, byte) in &changes {
                let at = 1 + at.index(bytes.len() - 1);
                bytes[at] = *byte;
            }
            let mut body = bytes.clone();
            for body in [&mut body, &mut bytes[..cut.index(bytes.len()).max(1)].to_vec()] {
                let crc = crc32fast::hash(body);
                body.extend_from_slice(&crc.to_le_bytes());
                let _ = exercise(body);
            }
        }
    }

    #[test]
    fn each_slot_layout_round_trips() {
        let price = px(813_070, 1);
        let volume = Amount::new(12_345, 5);
        let hour = 1_753_603_200_000;
        let cases = [
            ("full", (0..3_600).collect::<Vec<i64>>()),
            ("bitmap", (0..3_600).step_by(3).collect()),
            ("list", vec![5, 17, 3_599]),
        ];
        for (layout, slots) in cases {
            let candles: Vec<_> = slots
                .iter()
                .map(|slot| one_trade(hour + slot * 1_000, price, volume))
                .collect();
            let bytes = encode(Interval::Second1, hour, &candles).unwrap();
            let chunk = Chunk::parse(&bytes).unwrap();
            let found = match chunk.slots {
                Slots::Full => "full",
                Slots::Bitmap(_) => "bitmap",
                Slots::List(_) => "list",
            };
            assert_eq!(found, layout);
            assert_eq!(exact_all(chunk.iter()), exact_all(candles.iter().copied()));
            for candle in &candles {
                assert_eq!(
                    chunk.get(candle.open_time).map(|c| exact(&c)),
                    Some(exact(candle))
                );
            }
        }
    }

    #[test]
    fn values_of_128_bits_round_trip() {
        let day = 1_753_574_400_000;
        let price = px(i64::MAX, 18);
        let mut candles = vec![
            one_trade(day, px(1, 0), Amount::new(0, 0)),
            one_trade(day + 60_000, px(1, 0), Amount::new(i128::MAX, 0)),
        ];
        candles.push(ChunkCandle {
            open_time: day + 120_000,
            trades_count: u64::MAX,
            open: price,
            high: price,
            low: px(0, 0),
            close: px(1, 18),
            volume: Amount::new(i128::MIN, 255),
            notional: Amount::new(i128::MAX, 255),
            price_scale: u8::MAX,
        });
        candles.push(ChunkCandle {
            volume: Amount::new(i128::MAX, 0),
            notional: Amount::new(i128::MIN, 0),
            open_time: day + 180_000,
            ..candles[2]
        });
        let bytes = encode(Interval::Minute1, day, &candles).unwrap();
        let chunk = Chunk::parse(&bytes).unwrap();
        assert_eq!(chunk.columns[VOLUME].width, 128);
        assert_eq!(exact_all(chunk.iter()), exact_all(candles.iter().copied()));
    }

    #[test]
    fn encode_refuses_what_a_chunk_cannot_hold_naming_the_row() {
        let hour = 1_753_603_200_000;
        let at = |open_time| one_trade(open_time, px(10, 2), Amount::new(1, 0));
        let cases = [
            (
                Interval::Minute3,
                hour,
                vec![],
                ChunkError::Interval(Interval::Minute3),
            ),
            (
                Interval::Second1,
                hour + 1_000,
                vec![],
                ChunkError::SpanStart {
                    interval: Interval::Second1,
                    span_start: hour + 1_000,
                },
            ),
            (
                Interval::Second1,
                hour,
                vec![at(hour), at(hour + 1_500)],
                ChunkError::OffGrid {
                    row: 1,
                    open_time: hour + 1_500,
                    interval: Interval::Second1,
                },
            ),
            (
                Interval::Second1,
                hour,
                vec![at(hour), at(hour + HOUR_MS)],
                ChunkError::OutsideSpan {
                    row: 1,
                    open_time: hour + HOUR_MS,
                    span_start: hour,
                    span_end: hour + HOUR_MS,
                },
            ),
            (
                Interval::Second1,
                hour,
                vec![at(hour - 1_000)],
                ChunkError::OutsideSpan {
                    row: 0,
                    open_time: hour - 1_000,
                    span_start: hour,
                    span_end: hour + HOUR_MS,
                },
            ),
            (
                Interval::Second1,
                hour,
                vec![at(hour), at(hour + 2_000), at(hour + 2_000)],
                ChunkError::Duplicate {
                    row: 2,
                    open_time: hour + 2_000,
                },
            ),
            (
                Interval::Second1,
                hour,
                vec![at(hour + 2_000), at(hour + 1_000)],
                ChunkError::Unsorted {
                    row: 1,
                    open_time: hour + 1_000,
                    previous: hour + 2_000,
                },
            ),
        ];
        for (interval, start, candles, error) in cases {
            assert_eq!(encode(interval, start, &candles), Err(error));
        }
        let message = encode(Interval::Second1, hour, &[at(hour), at(hour)]).unwrap_err();
        assert_eq!(
            message.to_string(),
            "chunk: row 1: open time 1753603200000 repeats the previous row's"
        );
    }

    #[test]
    fn an_empty_chunk_round_trips() {
        let bytes = encode(Interval::Minute5, 0, &[]).unwrap();
        let chunk = Chunk::parse(&bytes).unwrap();
        assert!(chunk.is_empty());
        assert_eq!(chunk.iter().count(), 0);
        assert_eq!(chunk.get(0), None);
    }

    #[test]
    fn parse_names_what_is_wrong() {
        let hour = 1_753_603_200_000;
        let candles = [one_trade(hour, px(10, 2), Amount::new(3, 1))];
        let good = encode(Interval::Second1, hour, &candles).unwrap();
        let with_crc = |mut body: Vec<u8>| {
            let crc = crc32fast::hash(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            body
        };
        let body = good[..good.len() - 4].to_vec();

        assert_eq!(
            Chunk::parse(&good[..5]).err(),
            Some(ChunkError::TooShort { len: 5 })
        );
        let mut other = good.clone();
        other[0] = FORMAT_VERSION + 1;
        assert_eq!(
            Chunk::parse(&other).err(),
            Some(ChunkError::Version {
                found: FORMAT_VERSION + 1
            })
        );
        let mut flipped = good.clone();
        flipped[3] ^= 1;
        assert!(matches!(
            Chunk::parse(&flipped),
            Err(ChunkError::Checksum { .. })
        ));

        let mut interval = body.clone();
        interval[1] = 9;
        assert_eq!(
            Chunk::parse(&with_crc(interval)).err(),
            Some(ChunkError::Malformed {
                field: "interval",
                offset: 1,
                reason: "unknown interval code"
            })
        );
        // The row count, a varint after the span index (three bytes here),
        // declared as 2^64 rows.
        let mut huge = body[..5].to_vec();
        huge.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02]);
        huge.extend_from_slice(&body[6..]);
        assert_eq!(
            Chunk::parse(&with_crc(huge)).err(),
            Some(ChunkError::Malformed {
                field: "row count",
                offset: 5,
                reason: "more rows than buckets"
            })
        );
        let mut extra = body.clone();
        extra.push(0);
        assert_eq!(
            Chunk::parse(&with_crc(extra)).err(),
            Some(ChunkError::Malformed {
                field: "end",
                offset: body.len(),
                reason: "bytes after the last column"
            })
        );
        let short = body[..body.len() - 1].to_vec();
        assert!(matches!(
            Chunk::parse(&with_crc(short)),
            Err(ChunkError::Malformed {
                reason: "past the end",
                ..
            })
        ));
    }

    /// A chunk written by hand: `body` (version byte first), then its
    /// CRC-32.
    fn forged(body: &[u8]) -> Vec<u8> {
        let mut bytes = body.to_vec();
        bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        bytes
    }

    #[test]
    fn a_forged_slot_past_the_span_reads_as_absent() {
        // `1s`, span 0, one row, scales 0, a slot list whose one slot is
        // 2^64 − 1, four constant columns, no complex row.
        let mut body = vec![FORMAT_VERSION, 0, 0, 1, 0, 0, SLOTS_LIST, 0];
        put_varint(&mut body, zigzag(i128::from(u64::MAX)));
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, COMPLEX_NONE]);
        let bytes = forged(&body);
        let chunk = Chunk::parse(&bytes).unwrap();
        assert_eq!(chunk.len(), 1);
        assert_eq!(chunk.row(0), None);
        assert_eq!(chunk.iter().count(), 0);
        assert_eq!(exercise(&bytes), Ok(0));
    }

    #[test]
    fn a_bitmap_bit_past_its_bits_is_refused() {
        // Three rows of `1m` (bitmap slots: 180 bytes), complex bitmap with
        // bit 3 set.
        let mut body = vec![FORMAT_VERSION, 1, 0, 3, 0, 0, SLOTS_BITMAP, 0b111];
        body.extend_from_slice(&[0; 179]);
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, COMPLEX_BITMAP, 0b1001]);
        assert_eq!(
            Chunk::parse(&forged(&body)).err(),
            Some(ChunkError::Malformed {
                field: "complex bitmap",
                offset: 195,
                reason: "bits set past the rows",
            })
        );
    }

    #[test]
    fn merge_keeps_the_existing_candle_of_a_bucket() {
        let at = |open_time, units| one_trade(open_time, px(units, 1), Amount::new(1, 0));
        let existing = [at(0, 10), at(2_000, 12)];
        let new = [at(1_000, 21), at(2_000, 22), at(3_000, 23)];
        assert_eq!(
            exact_all(merge(&existing, &new)),
            exact_all([at(0, 10), at(1_000, 21), at(2_000, 12), at(3_000, 23)])
        );
        assert_eq!(exact_all(merge(&[], &new)), exact_all(new));
        assert_eq!(exact_all(merge(&existing, &[])), exact_all(existing));
    }

    /// The layout of version 1, byte for byte: a change of layout that
    /// keeps [`FORMAT_VERSION`] fails here.
    #[test]
    fn version_1_layout_is_pinned() {
        let hour = 1_753_603_200_000;
        let candles = [
            one_trade(hour + 5_000, px(813_070, 1), Amount::new(12, 3)),
            ChunkCandle {
                open_time: hour + 6_000,
                trades_count: 3,
                open: px(813_080, 1),
                high: px(813_090, 1),
                low: px(813_060, 1),
                close: px(813_070, 1),
                volume: Amount::new(5, 2),
                // 0.01 at 81308.0, 0.03 at 81306.0, 0.01 at 81307.0.
                notional: Amount::new(4_065_330, 3),
                price_scale: 1,
            },
        ];
        let bytes = encode(Interval::Second1, hour, &candles).unwrap();
        let text = hex::encode(&bytes);
        assert_eq!(text, GOLDEN);
        assert_eq!(
            exact_all(Chunk::parse(&bytes).unwrap().iter()),
            exact_all(candles)
        );
    }

    const GOLDEN: &str = "010090bb3b02010300040a020588a0630a010000051826020000020200060028003c00140000000000000000003c0000af3d4786";

    /// Candles of a mainnet-scale simulation over `minutes` of block time,
    /// by (coin, interval, span start), each list in open-time order. The
    /// trades are the simulator's fill pairs with the price and size text
    /// its node writer prints (`fixtures::format_fixed`), folded by the
    /// engine's candle view.
    fn simulated_chunks(
        seed: u64,
        minutes: i64,
    ) -> BTreeMap<(String, Interval, i64), Vec<ChunkCandle>> {
        let cfg = fixtures::SimConfig::mainnet(seed, 1.0);
        let mut sim = fixtures::Simulator::new(&cfg);
        let mut view = CandlesView::with_intervals(&INTERVALS);
        let end = cfg.start_time_ms + minutes * 60_000;
        let mut chunks: BTreeMap<(String, Interval, i64), Vec<ChunkCandle>> = BTreeMap::new();
        loop {
            let block = sim.next_block();
            let time = block.time_ms();
            let trades: Vec<Trade> = block
                .fills
                .chunks(2)
                .map(|pair| {
                    let fill = &pair[0];
                    assert_eq!(fill.tid, pair[1].tid, "fills come in trade pairs");
                    let market = block.universe.market(fill.coin);
                    let number =
                        |units, scale| Px::parse(&fixtures::format_fixed(units, scale)).unwrap();
                    Trade {
                        coin: market.coin.clone(),
                        side: engine::event::Side::Bid,
                        px: number(fill.px, market.px_decimals),
                        sz: number(fill.sz, market.sz_decimals),
                        time: fill.time_ms,
                        hash: String::new(),
                        tid: fill.tid,
                        users: [String::new(), String::new()],
                    }
                })
                .collect();
            view.apply(block.number, time, &trades);
            for candle in view.closed() {
                let start = span_start(candle.interval, candle.open_time).unwrap();
                chunks
                    .entry((candle.coin.clone(), candle.interval, start))
                    .or_default()
                    .push(ChunkCandle::from(candle));
            }
            if time >= end {
                return chunks;
            }
        }
    }

    /// Encodes every chunk, checks it reads back, and prints and returns
    /// the bytes per candle per interval and overall, counting 16 bytes of
    /// key and storage overhead per chunk.
    fn measure(chunks: &BTreeMap<(String, Interval, i64), Vec<ChunkCandle>>) -> f64 {
        let mut totals: BTreeMap<Interval, (usize, usize, usize)> = BTreeMap::new();
        for ((_, interval, start), candles) in chunks {
            let bytes = encode(*interval, *start, candles).unwrap();
            let chunk = Chunk::parse(&bytes).unwrap();
            assert_eq!(exact_all(chunk.iter()), exact_all(candles.iter().copied()));
            let total = totals.entry(*interval).or_default();
            total.0 += candles.len();
            total.1 += bytes.len() + 16;
            total.2 += 1;
        }
        let (mut candles, mut bytes) = (0, 0);
        for (interval, (n, size, count)) in &totals {
            eprintln!(
                "{interval}: {n} candles in {count} chunks, {size} bytes: {:.2} bytes/candle",
                *size as f64 / *n as f64
            );
            candles += n;
            bytes += size;
        }
        let average = bytes as f64 / candles as f64;
        eprintln!("all: {candles} candles, {bytes} bytes: {average:.2} bytes/candle");
        average
    }

    /// The store's budget: at most 16 bytes per candle on disk, key and
    /// overhead included, measured on candles of the mainnet simulation.
    /// Four simulated minutes keep the test quick; their chunks are only
    /// begun (a `1m` chunk holds a day), so each chunk's header weighs more
    /// than in a full span: the long run below measures full spans.
    #[test]
    fn simulated_mainnet_candles_take_at_most_16_bytes_each() {
        let average = measure(&simulated_chunks(7, 4));
        assert!(average <= 16.0, "{average:.2} bytes per candle");
    }

    /// The same over a simulated day: full `1s` and `1m` spans, a fifth of
    /// a `5m` span; the figures of the module doc. About ten minutes in an
    /// optimised build: `cargo test --profile bench -p server --lib
    /// candles::chunk -- --ignored --nocapture`.
    #[test]
    #[ignore = "a simulated day: run in release"]
    fn simulated_mainnet_day_bytes_per_candle() {
        let average = measure(&simulated_chunks(7, 24 * 60));
        assert!(average <= 16.0, "{average:.2} bytes per candle");
    }
}
