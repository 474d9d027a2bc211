//! Candles: OHLCV, trade count and VWAP per (coin, interval), folded from
//! trades (one trade = one execution; the two fills of a trade are never
//! counted twice), with the frames of `StreamCandle` subscriptions and the
//! candles that closed in each block for a persistent store.
//!
//! # Buckets
//!
//! Every interval the exchange offers is tracked — `1m 3m 5m 15m 30m 1h 2h
//! 4h 8h 12h 1d 3d 1w 1M` — plus `1s`. Boundaries are UTC:
//!
//! - fixed intervals up to `3d` open at multiples of their length since the
//!   Unix epoch (so `1d` opens at 00:00 UTC and `3d` at epoch-aligned
//!   three-day steps);
//! - `1w` is also epoch-aligned, which puts its open at **Thursday 00:00
//!   UTC** (1970-01-01 was a Thursday). This mirrors the exchange, whose
//!   weekly candles open on Thursdays, rather than the Monday convention of
//!   charting tools;
//! - `1M` is the calendar month: it opens at 00:00 UTC on the 1st.
//!
//! `close_time` is the next bucket's open minus 1 ms (the exchange's `T`).
//!
//! # Values
//!
//! `open`/`high`/`low`/`close` are trade prices exactly as printed; `volume`
//! is the exact sum of base sizes; `trades_count` counts trades. `vwap` is
//! `Σ(px·sz) / Σsz`, computed exactly in 128-bit integers and rounded half
//! up to [`VWAP_EXTRA_DECIMALS`] more decimals than the finest price of the
//! bucket (capped at 18), then printed in the node's canonical form
//! (trailing zeros trimmed, at least one decimal): a BTC bucket whose prices
//! have one decimal gets a VWAP with up to five.
//!
//! Candles are sparse: a bucket without trades has no candle.
//!
//! # Closing and frames
//!
//! A live candle closes when a trade falls into a later bucket of its
//! series, or when a block's time reaches the next bucket's open —
//! whichever comes first. Closed candles of a block are listed by
//! [`CandlesView::closed`] in the order they closed. A subscription gets a
//! candle's final state (`closed: true`) before any frame of the next bucket
//! of its series. Within a bucket, changes are re-emitted at most once per
//! `throttle_ms` of **block time** (a change inside the window is held and
//! sent with the first block past it), so the view stays pure. A trade
//! older than its series' current or last closed bucket is counted in
//! [`CandlesView::late_trades`] and ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use feeds::time::{civil_from_days, days_from_civil};
use serde::Serialize;
use thiserror::Error;

use crate::market::trades::{Trade, TradesView};
use crate::num::Px;

/// Extra decimals of the VWAP beyond the bucket's finest price.
pub const VWAP_EXTRA_DECIMALS: u8 = 4;

/// Default re-emit throttle of a candle subscription, in block-time ms.
pub const DEFAULT_THROTTLE_MS: i64 = 500;

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// A candle interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Interval {
    /// `1s`.
    Second1,
    /// `1m`.
    Minute1,
    /// `3m`.
    Minute3,
    /// `5m`.
    Minute5,
    /// `15m`.
    Minute15,
    /// `30m`.
    Minute30,
    /// `1h`.
    Hour1,
    /// `2h`.
    Hour2,
    /// `4h`.
    Hour4,
    /// `8h`.
    Hour8,
    /// `12h`.
    Hour12,
    /// `1d`.
    Day1,
    /// `3d`.
    Day3,
    /// `1w` (opens Thursday 00:00 UTC).
    Week1,
    /// `1M` (calendar month).
    Month1,
}

impl Interval {
    /// Every interval, shortest first.
    pub const ALL: [Interval; 15] = [
        Interval::Second1,
        Interval::Minute1,
        Interval::Minute3,
        Interval::Minute5,
        Interval::Minute15,
        Interval::Minute30,
        Interval::Hour1,
        Interval::Hour2,
        Interval::Hour4,
        Interval::Hour8,
        Interval::Hour12,
        Interval::Day1,
        Interval::Day3,
        Interval::Week1,
        Interval::Month1,
    ];

    /// The exchange's name (`"1m"`, `"1M"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Second1 => "1s",
            Interval::Minute1 => "1m",
            Interval::Minute3 => "3m",
            Interval::Minute5 => "5m",
            Interval::Minute15 => "15m",
            Interval::Minute30 => "30m",
            Interval::Hour1 => "1h",
            Interval::Hour2 => "2h",
            Interval::Hour4 => "4h",
            Interval::Hour8 => "8h",
            Interval::Hour12 => "12h",
            Interval::Day1 => "1d",
            Interval::Day3 => "3d",
            Interval::Week1 => "1w",
            Interval::Month1 => "1M",
        }
    }

    /// Parses an exchange interval name (case-sensitive: `1m` ≠ `1M`).
    ///
    /// # Errors
    /// [`CandleError::UnknownInterval`] for any other text.
    pub fn parse(text: &str) -> Result<Self, CandleError> {
        Self::ALL
            .into_iter()
            .find(|interval| interval.as_str() == text)
            .ok_or_else(|| CandleError::UnknownInterval(text.chars().take(16).collect()))
    }

    /// Length in ms, for every interval but `1M`.
    pub fn fixed_ms(self) -> Option<i64> {
        Some(match self {
            Interval::Second1 => SECOND_MS,
            Interval::Minute1 => MINUTE_MS,
            Interval::Minute3 => 3 * MINUTE_MS,
            Interval::Minute5 => 5 * MINUTE_MS,
            Interval::Minute15 => 15 * MINUTE_MS,
            Interval::Minute30 => 30 * MINUTE_MS,
            Interval::Hour1 => HOUR_MS,
            Interval::Hour2 => 2 * HOUR_MS,
            Interval::Hour4 => 4 * HOUR_MS,
            Interval::Hour8 => 8 * HOUR_MS,
            Interval::Hour12 => 12 * HOUR_MS,
            Interval::Day1 => DAY_MS,
            Interval::Day3 => 3 * DAY_MS,
            Interval::Week1 => 7 * DAY_MS,
            Interval::Month1 => return None,
        })
    }

    /// Open time (Unix ms) of the bucket holding `time_ms`.
    pub fn bucket_open(self, time_ms: i64) -> i64 {
        if let Some(length) = self.fixed_ms() {
            return time_ms - time_ms.rem_euclid(length);
        }
        let (year, month, _) = civil_from_days(time_ms.div_euclid(DAY_MS));
        days_from_civil(year, month, 1) * DAY_MS
    }

    /// Open time of the bucket after the one opening at `open_ms`.
    pub fn next_open(self, open_ms: i64) -> i64 {
        if let Some(length) = self.fixed_ms() {
            return open_ms + length;
        }
        let (year, month, _) = civil_from_days(open_ms.div_euclid(DAY_MS));
        let (year, month) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        days_from_civil(year, month, 1) * DAY_MS
    }

    /// `close_time` of the bucket opening at `open_ms`: next open − 1 ms.
    pub fn close_time(self, open_ms: i64) -> i64 {
        self.next_open(open_ms) - 1
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Interval {
    type Err = CandleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Interval {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A candle request or fold outside the contract.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CandleError {
    /// Not one of the 15 interval names.
    #[error("candles: unknown interval {0:?}")]
    UnknownInterval(String),
    /// The request has no coin.
    #[error("candles: a candle subscription needs a coin")]
    MissingCoin,
    /// A sum left 128 bits; the trade was not folded into this candle.
    #[error("candles: {coin} {interval} overflowed at block {block}")]
    Overflow {
        /// Market.
        coin: String,
        /// Interval.
        interval: Interval,
        /// Block number.
        block: u64,
    },
}

/// An exact non-negative sum: `units / 10^scale` in 128 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Amount {
    units: i128,
    scale: u8,
}

fn pow10_wide(exp: u8) -> Option<i128> {
    10_i128.checked_pow(u32::from(exp))
}

impl Amount {
    /// `units / 10^scale`.
    pub fn new(units: i128, scale: u8) -> Self {
        Self { units, scale }
    }

    /// The integer units.
    pub fn units(self) -> i128 {
        self.units
    }

    /// Digits after the decimal point.
    pub fn scale(self) -> u8 {
        self.scale
    }

    /// Exact sum; `None` on overflow.
    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        if self.scale == other.scale {
            // A market's sizes and prices keep their decimals: nearly every
            // sum is of one scale, and needs no (128-bit, checked) scaling.
            return Some(Amount {
                units: self.units.checked_add(other.units)?,
                scale: self.scale,
            });
        }
        let scale = self.scale.max(other.scale);
        let a = self.units.checked_mul(pow10_wide(scale - self.scale)?)?;
        let b = other.units.checked_mul(pow10_wide(scale - other.scale)?)?;
        Some(Amount {
            units: a.checked_add(b)?,
            scale,
        })
    }

    /// `self / divisor` rounded half up (away from zero) to `scale`
    /// decimals, by long division so no intermediate leaves 128 bits while
    /// the quotient fits. `None` when `divisor` is zero or not positive, or
    /// on overflow.
    pub fn div_round(self, divisor: Amount, scale: u8) -> Option<Amount> {
        if divisor.units <= 0 || self.units < 0 {
            return None;
        }
        // self / divisor = (n / 10^sn) / (d / 10^sd) = (n * 10^sd) / (d * 10^sn)
        let (mut numerator, mut denominator) = (self.units, divisor.units);
        if divisor.scale >= self.scale {
            numerator = numerator.checked_mul(pow10_wide(divisor.scale - self.scale)?)?;
        } else {
            denominator = denominator.checked_mul(pow10_wide(self.scale - divisor.scale)?)?;
        }
        // One division when the scaled numerator fits 128 bits (nearly
        // always); else digit by digit, each step's remainder scaled.
        let (mut quotient, remainder) =
            if let Some(scaled) = pow10_wide(scale).and_then(|p| numerator.checked_mul(p)) {
                (scaled / denominator, scaled % denominator)
            } else {
                let mut quotient = numerator / denominator;
                let mut remainder = numerator % denominator;
                for _ in 0..scale {
                    let shifted = remainder.checked_mul(10)?;
                    quotient = quotient
                        .checked_mul(10)?
                        .checked_add(shifted / denominator)?;
                    remainder = shifted % denominator;
                }
                (quotient, remainder)
            };
        if remainder >= denominator - remainder {
            quotient = quotient.checked_add(1)?;
        }
        Some(Amount {
            units: quotient,
            scale,
        })
    }
}

impl fmt::Display for Amount {
    /// The node's canonical form: trailing zeros trimmed, at least one
    /// decimal (`"0.0"`, `"12.5"`, `"3.0"`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut units = self.units;
        let mut scale = self.scale;
        while scale > 1 && units % 10 == 0 {
            units /= 10;
            scale -= 1;
        }
        let negative = units < 0;
        let magnitude = units.unsigned_abs();
        if scale == 0 {
            return write!(f, "{}{magnitude}.0", if negative { "-" } else { "" });
        }
        let factor = 10_u128.pow(u32::from(scale));
        write!(
            f,
            "{}{}.{:0width$}",
            if negative { "-" } else { "" },
            magnitude / factor,
            magnitude % factor,
            width = usize::from(scale)
        )
    }
}

impl Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One bucket's running state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candle {
    /// Market.
    pub coin: String,
    /// Interval.
    pub interval: Interval,
    /// Bucket open, Unix ms.
    pub open_time: i64,
    /// Next bucket's open, Unix ms.
    pub next_open: i64,
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
    /// Trades folded in.
    pub trades_count: u64,
    /// Finest price scale seen (drives the VWAP's decimals).
    pub price_scale: u8,
    /// Block that last changed the candle.
    pub block_number: u64,
    /// That block's time, Unix ms.
    pub time: i64,
}

impl Candle {
    fn start(trade: &Trade, interval: Interval, open_time: i64, block: u64, time: i64) -> Self {
        let (units, scale) = trade.px.mul_wide(trade.sz);
        Self {
            coin: trade.coin.clone(),
            interval,
            open_time,
            next_open: interval.next_open(open_time),
            open: trade.px,
            high: trade.px,
            low: trade.px,
            close: trade.px,
            volume: Amount::new(i128::from(trade.sz.units()), trade.sz.scale()),
            notional: Amount::new(units, scale),
            trades_count: 1,
            price_scale: trade.px.scale(),
            block_number: block,
            time,
        }
    }

    /// Folds one more trade of this bucket. Nothing changes on overflow.
    fn add(&mut self, trade: &Trade, block: u64, time: i64) -> Option<()> {
        let (units, scale) = trade.px.mul_wide(trade.sz);
        let volume = self
            .volume
            .checked_add(Amount::new(i128::from(trade.sz.units()), trade.sz.scale()))?;
        let notional = self.notional.checked_add(Amount::new(units, scale))?;
        self.volume = volume;
        self.notional = notional;
        self.high = self.high.max(trade.px);
        self.low = self.low.min(trade.px);
        self.close = trade.px;
        self.trades_count += 1;
        self.price_scale = self.price_scale.max(trade.px.scale());
        self.block_number = block;
        self.time = time;
        Some(())
    }

    /// `close_time`: next open − 1 ms.
    pub fn close_time(&self) -> i64 {
        self.next_open - 1
    }

    /// The exact VWAP rounded as the module doc states (`None` only on
    /// overflow or a zero volume).
    pub fn vwap(&self) -> Option<Amount> {
        let scale = self.price_scale.saturating_add(VWAP_EXTRA_DECIMALS).min(18);
        self.notional.div_round(self.volume, scale)
    }

    /// This state as a frame.
    pub fn to_update(&self, closed: bool) -> CandleUpdate {
        CandleUpdate {
            coin: self.coin.clone(),
            interval: self.interval,
            open_time: self.open_time,
            close_time: self.close_time(),
            open: self.open,
            high: self.high,
            low: self.low,
            close: self.close,
            volume: self.volume,
            trades_count: self.trades_count,
            vwap: self.vwap().unwrap_or_default(),
            block_number: self.block_number,
            time: self.time,
            closed,
        }
    }
}

/// `CandleUpdate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CandleUpdate {
    /// Market.
    pub coin: String,
    /// Interval name.
    pub interval: Interval,
    /// Bucket open, Unix ms.
    pub open_time: i64,
    /// Bucket close, Unix ms (`open_time + interval − 1`).
    pub close_time: i64,
    /// Open.
    pub open: Px,
    /// High.
    pub high: Px,
    /// Low.
    pub low: Px,
    /// Close.
    pub close: Px,
    /// Base volume.
    pub volume: Amount,
    /// Trades in the bucket.
    pub trades_count: u64,
    /// Volume-weighted average price.
    pub vwap: Amount,
    /// Block that last changed this candle.
    pub block_number: u64,
    /// That block's time.
    pub time: i64,
    /// Final state of a closed bucket.
    pub closed: bool,
}

/// One (coin, interval) series: its live bucket and the open time below
/// which trades are late.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    pub(crate) live: Option<Candle>,
    pub(crate) floor: i64,
    /// The fold count of the block that last changed it (listed once per
    /// block in `changed`).
    pub(crate) changed_at: u64,
}

/// One coin's series, one per tracked interval (in `intervals` order), and
/// the coin's name as `closing` and `changed` share it (kept beside the
/// series, so that a block finds both with one search of the names).
#[derive(Debug, Clone)]
struct CoinSeries {
    name: Arc<str>,
    list: Vec<Series>,
}

/// Shared state: the live candle of every (coin, interval) with trades, and
/// what the last block changed and closed.
#[derive(Debug, Clone)]
pub struct CandlesView {
    intervals: Vec<Interval>,
    /// Per coin, one series per tracked interval (in `intervals` order), in
    /// the order the coins first traded. Coin names are shared with
    /// `closing` and `changed`, which a block updates for every series it
    /// touches: a count, not a copy.
    series: Vec<CoinSeries>,
    /// Each coin's place in `series`, by name (the order coins are listed
    /// in).
    coins: BTreeMap<Arc<str>, usize>,
    /// Live candles by next open, to close them as block time passes, with
    /// their coin's place in `series` (a close as time passes then costs
    /// no search by name).
    closing: BTreeMap<(i64, Arc<str>, Interval), usize>,
    closed: Vec<Candle>,
    changed: BTreeSet<(Arc<str>, Interval)>,
    /// Whether `changed` is kept ([`CandlesView::without_change_list`]).
    lists_changes: bool,
    block_number: u64,
    time: i64,
    /// Blocks folded, from 1 (the stamp of `Series::changed_at`).
    folds: u64,
    late_trades: u64,
    errors: Vec<CandleError>,
}

impl Default for CandlesView {
    fn default() -> Self {
        Self::new()
    }
}

/// What folding one trade into one series may touch besides the series.
struct Block<'v> {
    number: u64,
    time: i64,
    fold: u64,
    closing: &'v mut BTreeMap<(i64, Arc<str>, Interval), usize>,
    closed: &'v mut Vec<Candle>,
    /// `None` when the view lists no changes.
    changed: Option<&'v mut BTreeSet<(Arc<str>, Interval)>>,
    late_trades: &'v mut u64,
    errors: &'v mut Vec<CandleError>,
}

impl Block<'_> {
    fn mark_changed(&mut self, series: &mut Series, coin: &Arc<str>, interval: Interval) {
        if series.changed_at != self.fold {
            series.changed_at = self.fold;
            if let Some(changed) = self.changed.as_deref_mut() {
                changed.insert((coin.clone(), interval));
            }
        }
    }

    /// Folds `trade` into `series`, the `interval` series of the coin at
    /// place `at`.
    fn fold_trade(
        &mut self,
        series: &mut Series,
        (coin, at): (&Arc<str>, usize),
        trade: &Trade,
        interval: Interval,
    ) {
        let open_time = interval.bucket_open(trade.time);
        if open_time < series.floor {
            *self.late_trades += 1;
            return;
        }
        if let Some(live) = series.live.as_mut() {
            if open_time == live.open_time {
                if live.add(trade, self.number, self.time).is_some() {
                    self.mark_changed(series, coin, interval);
                } else {
                    self.errors.push(CandleError::Overflow {
                        coin: trade.coin.clone(),
                        interval,
                        block: self.number,
                    });
                }
                return;
            }
            if open_time < live.open_time {
                *self.late_trades += 1;
                return;
            }
            let next_open = live.next_open;
            self.closing.remove(&(next_open, coin.clone(), interval));
            self.close(series, coin, interval);
        }
        let candle = Candle::start(trade, interval, open_time, self.number, self.time);
        self.closing
            .insert((candle.next_open, coin.clone(), interval), at);
        series.live = Some(candle);
        self.mark_changed(series, coin, interval);
    }

    fn close(&mut self, series: &mut Series, coin: &Arc<str>, interval: Interval) {
        if let Some(candle) = series.live.take() {
            series.floor = candle.next_open;
            if series.changed_at == self.fold {
                series.changed_at = 0;
                if let Some(changed) = self.changed.as_deref_mut() {
                    changed.remove(&(coin.clone(), interval));
                }
            }
            self.closed.push(candle);
        }
    }
}

impl CandlesView {
    /// Tracks every interval.
    pub fn new() -> Self {
        Self::with_intervals(&Interval::ALL)
    }

    /// Tracks only `intervals` (e.g. `1s`, `1m`, `5m` for a candle store).
    pub fn with_intervals(intervals: &[Interval]) -> Self {
        let mut intervals = intervals.to_vec();
        intervals.sort_unstable();
        intervals.dedup();
        Self {
            intervals,
            series: Vec::new(),
            coins: BTreeMap::new(),
            closing: BTreeMap::new(),
            closed: Vec::new(),
            changed: BTreeSet::new(),
            lists_changes: true,
            block_number: 0,
            time: 0,
            folds: 0,
            late_trades: 0,
            errors: Vec::new(),
        }
    }

    /// A view as a checkpoint left it: the intervals tracked (sorted,
    /// distinct), every coin's series (one per interval, in that order), its
    /// position, fold count and late trades. The last block's closed and
    /// changed lists are not carried (the next block replaces them); which
    /// candles close when is rebuilt from the live ones.
    pub(crate) fn restored(
        intervals: Vec<Interval>,
        series: BTreeMap<String, Vec<Series>>,
        position: (u64, i64),
        folds: u64,
        late_trades: u64,
    ) -> Self {
        let series: Vec<CoinSeries> = series
            .into_iter()
            .map(|(coin, list)| CoinSeries {
                name: Arc::from(coin),
                list,
            })
            .collect();
        let coins = (series.iter().enumerate())
            .map(|(at, coin)| (coin.name.clone(), at))
            .collect();
        let closing = (series.iter().enumerate())
            .flat_map(|(at, CoinSeries { name, list })| {
                list.iter()
                    .filter_map(|series| series.live.as_ref())
                    .map(move |live| ((live.next_open, name.clone(), live.interval), at))
            })
            .collect();
        Self {
            intervals,
            series,
            coins,
            closing,
            closed: Vec::new(),
            changed: BTreeSet::new(),
            lists_changes: true,
            block_number: position.0,
            time: position.1,
            folds,
            late_trades,
            errors: Vec::new(),
        }
    }

    /// Every coin's series, one per tracked interval (in
    /// [`CandlesView::intervals`] order).
    pub(crate) fn all_series(&self) -> impl Iterator<Item = (&str, &[Series])> + '_ {
        self.coins
            .iter()
            .map(|(coin, &at)| (&**coin, self.series[at].list.as_slice()))
    }

    /// Blocks folded so far (the stamp of a series' last change).
    pub(crate) fn folds(&self) -> u64 {
        self.folds
    }

    /// Folds the trades of the block the trades view last folded.
    pub fn apply_trades_view(&mut self, trades: &TradesView) {
        let (block_number, time) = trades.position();
        self.apply(block_number, time, trades.last().trades());
    }

    /// Folds one block's trades, then closes every candle whose bucket
    /// ended at or before the block's time.
    pub fn apply<'t>(
        &mut self,
        block_number: u64,
        time: i64,
        trades: impl IntoIterator<Item = &'t Trade>,
    ) {
        self.closed.clear();
        self.changed.clear();
        self.errors.clear();
        self.block_number = block_number;
        self.time = time;
        self.folds += 1;
        let mut block = Block {
            number: block_number,
            time,
            fold: self.folds,
            closing: &mut self.closing,
            closed: &mut self.closed,
            changed: self.lists_changes.then_some(&mut self.changed),
            late_trades: &mut self.late_trades,
            errors: &mut self.errors,
        };
        // Trades come frame by frame, a coin's together: its series are
        // looked up once for each run of them.
        let mut current: Option<usize> = None;
        for trade in trades {
            let coin = trade.coin.as_str();
            let at = match current {
                Some(at) if &*self.series[at].name == coin => at,
                _ => {
                    let at = if let Some(&at) = self.coins.get(coin) {
                        at
                    } else {
                        let name = Arc::<str>::from(coin);
                        let list = vec![Series::default(); self.intervals.len()];
                        self.coins.insert(name.clone(), self.series.len());
                        self.series.push(CoinSeries { name, list });
                        self.series.len() - 1
                    };
                    current = Some(at);
                    at
                }
            };
            let CoinSeries { name, list } = &mut self.series[at];
            for (series, &interval) in list.iter_mut().zip(&self.intervals) {
                block.fold_trade(series, (name, at), trade, interval);
            }
        }
        while let Some((first, _)) = block.closing.first_key_value() {
            if first.0 > time {
                break;
            }
            let Some(((_, coin, interval), at)) = block.closing.pop_first() else {
                break;
            };
            let place = self.intervals.binary_search(&interval).ok();
            if let Some(series) = (self.series.get_mut(at))
                .and_then(|series| place.and_then(|place| series.list.get_mut(place)))
            {
                block.close(series, &coin, interval);
            }
        }
    }

    /// The series of `(coin, interval)`, if it has seen a trade.
    fn series(&self, coin: &str, interval: Interval) -> Option<&Series> {
        let at = self.intervals.binary_search(&interval).ok()?;
        self.series.get(*self.coins.get(coin)?)?.list.get(at)
    }

    /// The last folded block: `(block_number, time)`.
    pub fn position(&self) -> (u64, i64) {
        (self.block_number, self.time)
    }

    /// The intervals tracked.
    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// The live candle of `(coin, interval)`, if its bucket has trades.
    pub fn live(&self, coin: &str, interval: Interval) -> Option<&Candle> {
        self.series(coin, interval)?.live.as_ref()
    }

    /// Every live candle, by (coin, interval).
    pub fn live_candles(&self) -> impl Iterator<Item = &Candle> {
        (self.coins.values())
            .flat_map(|&at| &self.series[at].list)
            .filter_map(|series| series.live.as_ref())
    }

    /// Candles whose bucket closed in the last block, final state, in the
    /// order they closed: what a persistent candle store consumes.
    pub fn closed(&self) -> &[Candle] {
        &self.closed
    }

    /// The view without the list of the candles each block changed:
    /// [`CandlesView::changed`] lists none (and [`CandlesView::was_changed`]
    /// still answers), for a consumer of closed candles alone.
    #[must_use]
    pub fn without_change_list(mut self) -> Self {
        self.lists_changes = false;
        self
    }

    /// Takes [`CandlesView::closed`] out of the view (the list is empty
    /// after, until the next block): for a consumer that keeps them, instead
    /// of copying each.
    pub fn take_closed(&mut self) -> Vec<Candle> {
        // The list left in the view has room for as many as this one: a
        // block that closes candles closes about as many as the last one
        // that did (a bucket boundary closes every market's), and a list
        // grown from empty moves them several times. A block that closed
        // none keeps that room.
        if self.closed.is_empty() {
            return Vec::new();
        }
        let room = self.closed.len();
        std::mem::replace(&mut self.closed, Vec::with_capacity(room))
    }

    /// Live candles the last block changed (opened or updated).
    pub fn changed(&self) -> impl Iterator<Item = &Candle> {
        self.changed
            .iter()
            .filter_map(|(coin, interval)| self.live(coin, *interval))
    }

    /// Whether the last block changed the live candle of `(coin, interval)`.
    pub fn was_changed(&self, coin: &str, interval: Interval) -> bool {
        self.folds > 0
            && self
                .series(coin, interval)
                .is_some_and(|series| series.changed_at == self.folds)
    }

    /// Trades ignored because their bucket had already closed.
    pub fn late_trades(&self) -> u64 {
        self.late_trades
    }

    /// Overflows of the last block (trades left out of a candle).
    pub fn errors(&self) -> &[CandleError] {
        &self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::exact_multiple(Amount::new(30, 1), Amount::new(10, 1), 2, "3.0")]
    #[case::rounds_half_up(Amount::new(2, 0), Amount::new(3, 0), 2, "0.67")]
    #[case::rounds_down(Amount::new(1, 0), Amount::new(3, 0), 3, "0.333")]
    #[case::half_exactly(Amount::new(1, 0), Amount::new(8, 0), 2, "0.13")]
    #[case::mixed_scales(Amount::new(1_234_567, 6), Amount::new(5, 1), 4, "2.4691")]
    fn divides_exactly_then_rounds(
        #[case] numerator: Amount,
        #[case] divisor: Amount,
        #[case] scale: u8,
        #[case] printed: &str,
    ) {
        assert_eq!(
            numerator.div_round(divisor, scale).unwrap().to_string(),
            printed
        );
    }

    /// The digit-by-digit division `div_round` must equal.
    fn div_round_by_digits(dividend: Amount, divisor: Amount, scale: u8) -> Option<Amount> {
        if divisor.units <= 0 || dividend.units < 0 {
            return None;
        }
        let (mut numerator, mut denominator) = (dividend.units, divisor.units);
        if divisor.scale >= dividend.scale {
            numerator = numerator.checked_mul(pow10_wide(divisor.scale - dividend.scale)?)?;
        } else {
            denominator = denominator.checked_mul(pow10_wide(dividend.scale - divisor.scale)?)?;
        }
        let (mut quotient, mut remainder) = (numerator / denominator, numerator % denominator);
        for _ in 0..scale {
            let shifted = remainder.checked_mul(10)?;
            quotient = quotient
                .checked_mul(10)?
                .checked_add(shifted / denominator)?;
            remainder = shifted % denominator;
        }
        if remainder >= denominator - remainder {
            quotient = quotient.checked_add(1)?;
        }
        Some(Amount {
            units: quotient,
            scale,
        })
    }

    proptest::proptest! {
        #[test]
        fn one_division_equals_the_digit_by_digit_one(
            n in proptest::prop_oneof![0i128..1_000_000, 0i128..i128::MAX / 1_000, 0i128..=i128::MAX],
            d in proptest::prop_oneof![1i128..1_000, 1i128..1_000_000_000_000, 1i128..=i128::MAX],
            sn in 0u8..=36,
            sd in 0u8..=36,
            scale in 0u8..=22,
        ) {
            let (a, b) = (Amount::new(n, sn), Amount::new(d, sd));
            proptest::prop_assert_eq!(a.div_round(b, scale), div_round_by_digits(a, b, scale));
        }
    }

    /// The sum [`Amount::checked_add`] must equal: both scaled a digit at
    /// a time to the finer scale, then added, every step checked.
    fn sum_by_digits(a: Amount, b: Amount) -> Option<Amount> {
        let scale = a.scale.max(b.scale);
        let widen =
            |x: Amount| (x.scale..scale).try_fold(x.units, |units, _| units.checked_mul(10));
        Some(Amount {
            units: widen(a)?.checked_add(widen(b)?)?,
            scale,
        })
    }

    proptest::proptest! {
        #[test]
        fn a_sum_equals_the_digit_by_digit_one(
            x in proptest::prop_oneof![-1_000_000i128..1_000_000, i128::MIN / 2..=i128::MAX / 2, proptest::prelude::any::<i128>()],
            y in proptest::prop_oneof![-1_000_000i128..1_000_000, i128::MIN / 2..=i128::MAX / 2, proptest::prelude::any::<i128>()],
            sx in 0u8..=20,
            // Mostly the same scale (the common case), sometimes another.
            sy in proptest::option::weighted(0.25, 0u8..=20),
        ) {
            let (a, b) = (Amount::new(x, sx), Amount::new(y, sy.unwrap_or(sx)));
            proptest::prop_assert_eq!(a.checked_add(b), sum_by_digits(a, b));
        }
    }

    #[test]
    fn division_by_zero_is_none() {
        assert_eq!(Amount::new(1, 0).div_round(Amount::default(), 2), None);
    }

    #[rstest]
    #[case::zero(0, 0, "0.0")]
    #[case::integer(50, 0, "50.0")]
    #[case::trims(1_500, 3, "1.5")]
    #[case::keeps_digits(123_456, 4, "12.3456")]
    fn prints_canonically(#[case] units: i128, #[case] scale: u8, #[case] printed: &str) {
        assert_eq!(Amount::new(units, scale).to_string(), printed);
    }

    #[test]
    fn every_interval_round_trips_its_name() {
        for interval in Interval::ALL {
            assert_eq!(Interval::parse(interval.as_str()), Ok(interval));
        }
        assert_eq!(
            Interval::parse("2w"),
            Err(CandleError::UnknownInterval("2w".into()))
        );
    }
}
