//! Candle lookups' state: the persistent [`store`] (closed buckets) and
//! the live state the candle store thread keeps (the open buckets, and
//! closed ones waiting for their commit; see [`crate::candle_thread`]), and
//! [`Candles::lookup`], which answers one `1s`, `1m` or `5m` candle from
//! them or says why there is none ([`Miss`]), and [`Candles::snapshot`],
//! the candles of a range in any of the fifteen intervals (Info's
//! `candleSnapshot`). The HTTP route over it is [`crate::http::candles`].
//!
//! # The bucket the data begins in
//!
//! When the node's files begin after the stretch the candle store thread
//! was to cover (a first start: its files begin mid-bucket; a restart
//! after the files were pruned), the bucket of each interval holding the
//! first block read opened before it: it holds only the trades from that
//! block on, as the engine's candle does (the `candle` channel and
//! `StreamCandle` serve the same state). While the engine holds it open,
//! lookups, ranges and snapshots serve that state (never as closed, never
//! cacheable); once it closes it is never stored, and it is served no more
//! (lookups: not covered). The same holds after a restart whose fold
//! begins at the first block the store covers (the files not pruned
//! since), since the engine then holds that bucket as it did.
//!
//! Prices are the node's exact text; volume and VWAP are exact sums in
//! canonical decimal form (see [`engine::market::candles`]).

pub mod chunk;
pub mod export;
mod hours;
pub mod import;
pub mod store;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;
use parking_lot::RwLock;

use store::{Coverage, Gap, INTERVALS, LookupError, Span, StoreReader, interval_code};

/// Default oldest bucket served: 2025-07-27T08:00:00Z.
pub const DEFAULT_HISTORY_START_MS: i64 = 1_753_603_200_000;

/// Stored candles one [`Candles::snapshot`] reads at most (an interval the
/// store does not keep is built from many stored buckets): the newest are
/// read.
pub const MAX_PARTS: usize = 2_000_000;

/// Maps a requested market name to the node's coin (`None`: not known to
/// the resolver; the name is then tried as a coin itself).
pub type MarketResolver = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Open buckets (and closed ones not committed yet) plus the writer's
/// progress, written by the candle writer and read by lookups.
#[derive(Debug, Default)]
pub struct LiveState {
    coins: HashMap<Box<str>, [Vec<Candle>; 3]>,
    /// Last block folded (0 before the first).
    pub block_number: u64,
    /// Its block time, Unix ms.
    pub block_time_ms: i64,
    /// The block time the writer has folded whole since it started (its
    /// span may not be committed yet).
    pub session: Option<Span>,
    /// Gaps the writer found and has not committed yet.
    pub gaps: Vec<Gap>,
    /// Whether the writer has read to the end of the files at least once.
    pub caught_up: bool,
    /// The last store error, until a commit succeeds again.
    pub error: Option<String>,
    /// Where the data the writer folds begins when buckets opened before
    /// it (see the module docs): the first block's time.
    pub partial_from: Option<i64>,
    /// Per coin, per stored interval, the engine's candle of the bucket
    /// holding `partial_from` (trades from that block on), and whether the
    /// engine closed it. Never stored.
    partial: HashMap<Box<str>, [Option<Partial>; 3]>,
}

/// The bucket the data begins in, as the engine holds it.
#[derive(Debug, Clone)]
struct Partial {
    candle: Candle,
    closed: bool,
}

impl LiveState {
    pub(crate) fn upsert(&mut self, candle: &Candle) {
        let Some(code) = interval_code(candle.interval) else {
            return;
        };
        let slots = if let Some(slots) = self.coins.get_mut(candle.coin.as_str()) {
            slots
        } else {
            self.coins
                .entry(candle.coin.clone().into_boxed_str())
                .or_default()
        };
        let series = &mut slots[code];
        if let Some(slot) = series.iter_mut().find(|c| c.open_time == candle.open_time) {
            slot.clone_from(candle);
        } else {
            series.push(candle.clone());
            series.sort_unstable_by_key(|c| c.open_time);
        }
    }

    /// Keeps the engine's state of the bucket the data begins in
    /// (`closed`: the engine closed it).
    pub(crate) fn upsert_partial(&mut self, candle: &Candle, closed: bool) {
        let Some(code) = interval_code(candle.interval) else {
            return;
        };
        let slots = if let Some(slots) = self.partial.get_mut(candle.coin.as_str()) {
            slots
        } else {
            self.partial
                .entry(candle.coin.clone().into_boxed_str())
                .or_default()
        };
        slots[code] = Some(Partial {
            candle: candle.clone(),
            closed,
        });
    }

    /// The bucket the data begins in, of `coin`'s `interval`, open or
    /// closed.
    fn partial(&self, coin: &str, interval: Interval) -> Option<&Partial> {
        let code = interval_code(interval)?;
        self.partial.get(coin)?.get(code)?.as_ref()
    }

    /// The bucket the data begins in, while the engine holds it open.
    fn open_partial(&self, coin: &str, interval: Interval) -> Option<&Candle> {
        self.partial(coin, interval)
            .filter(|partial| !partial.closed)
            .map(|partial| &partial.candle)
    }

    pub(crate) fn remove(&mut self, candle: &Candle) {
        let Some(code) = interval_code(candle.interval) else {
            return;
        };
        if let Some(slots) = self.coins.get_mut(candle.coin.as_str()) {
            slots[code].retain(|c| c.open_time != candle.open_time);
        }
    }

    fn get(&self, coin: &str, interval: Interval, open_time: i64) -> Option<&Candle> {
        let code = interval_code(interval)?;
        self.coins
            .get(coin)?
            .get(code)?
            .iter()
            .find(|c| c.open_time == open_time)
    }

    fn series(&self, coin: &str, interval: Interval) -> &[Candle] {
        interval_code(interval)
            .and_then(|code| self.coins.get(coin).map(|slots| &slots[code]))
            .map_or(&[], Vec::as_slice)
    }
}

/// The candle lookup service: the store's reader, the writer's live state
/// and the market resolver.
pub struct Candles {
    store: Arc<StoreReader>,
    pub(crate) live: RwLock<LiveState>,
    resolver: RwLock<Option<MarketResolver>>,
    history_start_ms: i64,
}

impl std::fmt::Debug for Candles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candles")
            .field("history_start_ms", &self.history_start_ms)
            .finish_non_exhaustive()
    }
}

/// The values of one candle as served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandleValues {
    /// Bucket open, Unix ms.
    pub open_time: i64,
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
    /// Volume-weighted average price.
    pub vwap: Amount,
    /// Trades in the bucket.
    pub trades_count: u64,
    /// Whether the bucket is closed (final).
    pub closed: bool,
}

/// Why a lookup found no candle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// The bucket opens before the history start.
    BeforeHistory {
        /// History start, Unix ms.
        start_ms: i64,
    },
    /// The bucket opens after the wall clock.
    Future {
        /// The wall clock, Unix ms.
        now_ms: i64,
    },
    /// No trade of this market was ever seen and no resolver knows it.
    UnknownMarket,
    /// The bucket lies outside the data this server has folded or
    /// imported.
    NotCovered {
        /// The stretches of block time held whole, oldest first.
        spans: Vec<Span>,
    },
    /// Trades of the bucket may be missing: it touches a known gap (blocks
    /// missing from the files, an hour missing or damaged in the archive,
    /// the hand-over between two archive formats, files pruned while the
    /// server was stopped).
    Gap(Gap),
    /// The stored candles of the bucket's stretch failed their checks and
    /// are not rebuilt yet.
    Damaged {
        /// The damaged stretch's start, Unix ms.
        from_ms: i64,
        /// Its end, Unix ms.
        to_ms: i64,
    },
    /// No trade in the bucket.
    NoTrades {
        /// Whether the data processed so far reaches past the bucket's end.
        complete: bool,
        /// Block time of the last block folded, Unix ms (0 before any).
        processed_ms: i64,
    },
    /// The writer stopped on a store error, or the store cannot be read.
    Unavailable(String),
}

impl From<LookupError> for Miss {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::Damaged(damaged) => Miss::Damaged {
                from_ms: damaged.from_ms,
                to_ms: damaged.to_ms,
            },
            unreadable @ LookupError::Unreadable { .. } => {
                Miss::Unavailable(unreadable.to_string())
            }
        }
    }
}

impl Candles {
    /// A service over `store` serving buckets from `history_start_ms` on.
    pub fn new(store: Arc<StoreReader>, history_start_ms: i64) -> Self {
        Self {
            store,
            live: RwLock::new(LiveState::default()),
            resolver: RwLock::new(None),
            history_start_ms,
        }
    }

    /// Sets (or replaces) the market-name resolver.
    pub fn set_resolver(&self, resolver: MarketResolver) {
        *self.resolver.write() = Some(resolver);
    }

    /// The oldest bucket served, Unix ms.
    pub fn history_start_ms(&self) -> i64 {
        self.history_start_ms
    }

    /// The store's lookup side.
    pub fn store(&self) -> &Arc<StoreReader> {
        &self.store
    }

    /// The writer's progress: `(block_number, block_time_ms, caught_up,
    /// error)`.
    pub fn progress(&self) -> (u64, i64, bool, Option<String>) {
        let live = self.live.read();
        (
            live.block_number,
            live.block_time_ms,
            live.caught_up,
            live.error.clone(),
        )
    }

    /// What the candles cover: the stretches of block time held whole
    /// (stored and this run's), oldest first, and the newest block time
    /// folded.
    pub fn covered(&self) -> (Vec<Span>, i64) {
        let live = self.live.read();
        let mut coverage = self.store.coverage();
        if let Some(session) = live.session {
            coverage.add_span(session);
        }
        (coverage.spans, live.block_time_ms)
    }

    /// The node coin a market name stands for.
    pub fn resolve<'m>(&self, market: &'m str) -> Cow<'m, str> {
        let resolver = self.resolver.read().clone();
        match resolver.and_then(|resolve| resolve(market)) {
            Some(coin) => Cow::Owned(coin),
            None => Cow::Borrowed(market),
        }
    }

    /// The candle of `market`'s `interval` bucket opening at `open_time`
    /// (which must be a bucket open), as of now (`now_ms`, Unix ms).
    ///
    /// # Errors
    /// [`Miss`] saying why there is none.
    pub fn lookup(
        &self,
        market: &str,
        interval: Interval,
        open_time: i64,
        now_ms: i64,
    ) -> Result<CandleValues, Miss> {
        if open_time < self.history_start_ms {
            return Err(Miss::BeforeHistory {
                start_ms: self.history_start_ms,
            });
        }
        if open_time > now_ms {
            return Err(Miss::Future { now_ms });
        }
        let coin = self.resolve(market);
        // Live state first: a candle leaves it only after its commit made it
        // visible in the store, so a miss here and then in the store is a
        // real miss as of the progress read here.
        let (known_live, session, gaps, processed_ms, error, partial) = {
            let live = self.live.read();
            if let Some(candle) = live.get(&coin, interval, open_time) {
                return Ok(live_values(candle, live.block_time_ms));
            }
            let partial = live
                .partial_from
                .zip(live.open_partial(&coin, interval))
                .filter(|(_, candle)| candle.open_time == open_time)
                .map(|(from, candle)| (from, candle.clone()));
            (
                live.coins.contains_key(coin.as_ref()) || live.partial.contains_key(coin.as_ref()),
                live.session,
                live.gaps.clone(),
                live.block_time_ms,
                live.error.clone(),
                partial,
            )
        };
        // The bucket the data begins in, while open: never stored.
        if let Some((from, candle)) = partial
            && partial_whole(&gaps, &self.store.coverage(), from, candle.next_open)
        {
            return Ok(partial_values(&candle));
        }
        match self.store.get(&coin, interval, open_time) {
            Ok(Some(stored)) => {
                return Ok(CandleValues {
                    open_time: stored.open_time,
                    open: stored.open,
                    high: stored.high,
                    low: stored.low,
                    close: stored.close,
                    volume: stored.volume,
                    vwap: stored.vwap,
                    trades_count: stored.trades_count,
                    closed: true,
                });
            }
            Ok(None) => {}
            Err(error @ LookupError::Unreadable { .. }) => return Err(error.into()),
            Err(LookupError::Damaged(damaged)) => {
                // Damage matters inside what the store holds; outside, the
                // bucket was never stored anyway.
                let next_open = interval.next_open(open_time);
                let held = session.is_some_and(|s| s.holds(open_time, next_open))
                    || self
                        .store
                        .coverage()
                        .holding(open_time, next_open)
                        .is_some();
                if held {
                    return Err(Miss::Damaged {
                        from_ms: damaged.from_ms,
                        to_ms: damaged.to_ms,
                    });
                }
            }
        }
        if let Some(error) = error {
            return Err(Miss::Unavailable(format!(
                "it cannot take new candles: {error}"
            )));
        }
        let next_open = interval.next_open(open_time);
        let stored = self.store.coverage();
        if let Some(gap) = gaps
            .iter()
            .chain(&stored.gaps)
            .find(|gap| gap.touches(open_time, next_open))
        {
            return Err(Miss::Gap(gap.clone()));
        }
        let complete = session.is_some_and(|s| s.holds(open_time, next_open))
            || stored.holding(open_time, next_open).is_some();
        // A bucket the running fold entered but has not closed yet.
        let open_now = session.is_some_and(|s| open_time >= s.from_ms && next_open > s.to_ms);
        if !complete && !open_now {
            let mut coverage = stored;
            if let Some(session) = session {
                coverage.add_span(session);
            }
            return Err(Miss::NotCovered {
                spans: coverage.spans,
            });
        }
        if !known_live && !self.store.knows(&coin) {
            return Err(Miss::UnknownMarket);
        }
        Err(Miss::NoTrades {
            complete: next_open <= processed_ms,
            processed_ms,
        })
    }

    /// The candles of `market`'s `interval` (a stored one: `1s`, `1m`,
    /// `5m`) opening in `[from, to)`, stored and live, oldest first: the
    /// oldest `limit`, or with `newest` the newest `limit`. Buckets without
    /// trades have none; the bucket the data begins in is there while it is
    /// open (see the module docs). The stored ones' VWAP is left out
    /// (zero).
    ///
    /// # Errors
    /// [`Miss::Damaged`] when stored candles of the range are damaged,
    /// [`Miss::Unavailable`] when the store cannot be read.
    pub fn range(
        &self,
        market: &str,
        interval: Interval,
        from: i64,
        to: i64,
        limit: usize,
        newest: bool,
    ) -> Result<Vec<CandleValues>, Miss> {
        let coin = self.resolve(market);
        let (live, processed_ms, partial, gaps) = {
            let live = self.live.read();
            let series: Vec<Candle> = live
                .series(&coin, interval)
                .iter()
                .filter(|c| c.open_time >= from && c.open_time < to)
                .cloned()
                .collect();
            let partial = live
                .partial_from
                .zip(live.open_partial(&coin, interval))
                .filter(|(_, c)| c.open_time >= from && c.open_time < to)
                .map(|(start, c)| (start, c.clone()));
            (series, live.block_time_ms, partial, live.gaps.clone())
        };
        let stored = self.store.range(&coin, interval, from, to, limit, newest)?;
        let mut out: Vec<CandleValues> = stored
            .iter()
            .map(|s| CandleValues {
                open_time: s.open_time,
                open: s.open,
                high: s.high,
                low: s.low,
                close: s.close,
                volume: s.volume,
                vwap: s.vwap,
                trades_count: s.trades_count,
                closed: true,
            })
            .collect();
        for candle in &live {
            if out.iter().all(|c| c.open_time != candle.open_time) {
                out.push(live_values(candle, processed_ms));
            }
        }
        // The bucket the data begins in, while open: never stored.
        if let Some((start, candle)) = partial
            && out.iter().all(|c| c.open_time != candle.open_time)
            && partial_whole(&gaps, &self.store.coverage(), start, candle.next_open)
        {
            out.push(partial_values(&candle));
        }
        out.sort_by_key(|c| c.open_time);
        if out.len() > limit {
            if newest {
                out.drain(..out.len() - limit);
            } else {
                out.truncate(limit);
            }
        }
        Ok(out)
    }

    /// The candles of `market`'s `interval` (any of the fifteen) opening in
    /// the buckets from the one holding `from` to before `to`, oldest
    /// first, the newest `limit`. A stored interval's are
    /// [`Candles::range`]'s. Another's are built from the stored buckets
    /// inside each of its buckets ([`stored_under`]: `3m` from `1m`, the
    /// rest from `5m`), whole buckets only ([`Candles::bucket_usable`]),
    /// and the bucket the data begins in while the engine holds it open,
    /// from the first block's trades on (see the module docs). Built
    /// candles carry no VWAP (zero).
    ///
    /// # Errors
    /// As [`Candles::range`], for the stored interval read.
    pub fn snapshot(
        &self,
        market: &str,
        interval: Interval,
        from: i64,
        to: i64,
        limit: usize,
    ) -> Result<Vec<CandleValues>, Miss> {
        let part = stored_under(interval);
        let first = interval.bucket_open(from).max(self.history_start_ms);
        if part == interval {
            return self.range(market, part, first, to, limit, true);
        }
        let parts = self.range(market, part, first, to, MAX_PARTS, true)?;
        let coin = self.resolve(market);
        let (session, gaps, processed_ms, partial) = {
            let live = self.live.read();
            let partial = live.partial_from.map(|start| BeginsIn {
                start,
                part: live.partial(&coin, part).map(|p| p.candle.clone()),
                newest_part: live.series(&coin, part).last().map(|c| c.open_time),
            });
            (live.session, live.gaps.clone(), live.block_time_ms, partial)
        };
        let usable = Usable::new(self.store.coverage(), session, gaps);
        // The bucket of `interval` the data begins in, when it opened
        // before the first block.
        let begins_in = partial
            .as_ref()
            .map(|p| (p, interval.bucket_open(p.start)))
            .filter(|(p, open)| *open < p.start);
        let mut buckets: Vec<CandleValues> = Vec::new();
        for values in parts {
            let open = interval.bucket_open(values.open_time);
            // In the bucket the data begins in, the parts before the first
            // block (stored before the files were pruned, or the partial
            // part, taken below as the engine holds it) are not its trades.
            if begins_in.is_some_and(|(p, b)| open == b && values.open_time < p.start) {
                continue;
            }
            match buckets.last_mut() {
                Some(sum) if sum.open_time == open => {
                    sum.high = sum.high.max(values.high);
                    sum.low = sum.low.min(values.low);
                    sum.close = values.close;
                    let Some(volume) = sum.volume.checked_add(values.volume) else {
                        continue;
                    };
                    sum.volume = volume;
                    sum.trades_count += values.trades_count;
                    sum.closed = values.closed;
                }
                _ => buckets.push(CandleValues {
                    open_time: open,
                    vwap: Amount::default(),
                    ..values
                }),
            }
        }
        let mut partial_bucket = None;
        if let Some((p, open)) = begins_in {
            let next_open = interval.next_open(open);
            // Open as the engine holds it: block time has not reached its
            // end, and no trade of the market fell into a later bucket.
            let open_now =
                next_open > processed_ms && p.newest_part.is_none_or(|newest| newest < next_open);
            if open >= first && open < to && open_now && usable.lacks_nothing(p.start, next_open) {
                let later = buckets.iter().position(|b| b.open_time == open);
                // Its first part is the engine's candle of the stored
                // interval's bucket holding the first block, the rest
                // follow it.
                partial_bucket = match (p.part.as_ref(), later) {
                    (Some(part), Some(at)) => {
                        let sum = &mut buckets[at];
                        sum.volume.checked_add(part.volume).map(|volume| {
                            sum.open = part.open;
                            sum.high = sum.high.max(part.high);
                            sum.low = sum.low.min(part.low);
                            sum.volume = volume;
                            sum.trades_count += part.trades_count;
                            sum.closed = false;
                            open
                        })
                    }
                    (Some(part), None) => {
                        buckets.push(CandleValues {
                            open_time: open,
                            vwap: Amount::default(),
                            ..partial_values(part)
                        });
                        buckets.sort_by_key(|b| b.open_time);
                        Some(open)
                    }
                    (None, Some(at)) => {
                        buckets[at].closed = false;
                        Some(open)
                    }
                    (None, None) => None,
                };
            }
        }
        let mut whole: Vec<CandleValues> = buckets
            .into_iter()
            .filter(|b| {
                Some(b.open_time) == partial_bucket
                    || usable.holds(b.open_time, interval.next_open(b.open_time))
            })
            .collect();
        whole.drain(..whole.len().saturating_sub(limit));
        Ok(whole)
    }

    /// Whether a candle built for the bucket `[open, next_open)` from
    /// stored ones is whole: every trade of it folded and none may be
    /// missing (see [`Usable::holds`]).
    pub fn bucket_usable(&self, open: i64, next_open: i64) -> bool {
        let (session, gaps) = {
            let live = self.live.read();
            (live.session, live.gaps.clone())
        };
        Usable::new(self.store.coverage(), session, gaps).holds(open, next_open)
    }
}

/// The bucket the data begins in, for one market (see the module docs).
struct BeginsIn {
    /// The first block's time.
    start: i64,
    /// The engine's candle of the stored interval's bucket holding it.
    part: Option<Candle>,
    /// The open time of the market's newest bucket of that interval.
    newest_part: Option<i64>,
}

/// What the candles hold whole: the store's coverage with the writer's
/// span added, and the gaps known.
struct Usable {
    coverage: Coverage,
    /// The span holding the newest block folded, if the writer folded one.
    current: Option<Span>,
    gaps: Vec<Gap>,
}

impl Usable {
    fn new(stored: Coverage, session: Option<Span>, live_gaps: Vec<Gap>) -> Self {
        let mut gaps = live_gaps;
        gaps.extend(stored.gaps.iter().cloned());
        let mut coverage = stored;
        // A restart's span starts at the `5m` bucket holding the
        // watermark and so continues the stored one: a bucket that opened
        // before the restart and closes after it is held by the two
        // together, by neither alone.
        if let Some(session) = session {
            coverage.add_span(session);
        }
        let current = session.and_then(|s| {
            coverage
                .spans
                .iter()
                .find(|span| span.from_ms <= s.to_ms && s.to_ms <= span.to_ms)
                .copied()
        });
        Self {
            coverage,
            current,
            gaps,
        }
    }

    /// Whether no gap touches `[from, next_open)`.
    fn lacks_nothing(&self, from: i64, next_open: i64) -> bool {
        !self.gaps.iter().any(|gap| gap.touches(from, next_open))
    }

    /// Whether the bucket `[open, next_open)` is whole: inside what is
    /// covered, or the writer's fold is inside it still and it opened in
    /// the stretch that fold extends; and no gap touches it.
    fn holds(&self, open: i64, next_open: i64) -> bool {
        let held = self.coverage.holding(open, next_open).is_some()
            || self
                .current
                .is_some_and(|span| open >= span.from_ms && next_open > span.to_ms);
        held && self.lacks_nothing(open, next_open)
    }
}

/// Whether the bucket the data begins in, from its first block (`from`)
/// to its end, misses no trade: no gap found since touches it.
fn partial_whole(gaps: &[Gap], stored: &Coverage, from: i64, next_open: i64) -> bool {
    !gaps
        .iter()
        .chain(&stored.gaps)
        .any(|gap| gap.touches(from, next_open))
}

/// The stored interval an interval's candles are built from: itself when
/// the store keeps it, else the longest stored one that divides it (`3m`:
/// `1m`; the others: `5m`).
pub fn stored_under(interval: Interval) -> Interval {
    if INTERVALS.contains(&interval) {
        interval
    } else if interval == Interval::Minute3 {
        Interval::Minute1
    } else {
        Interval::Minute5
    }
}

/// The bucket the data begins in, as served while open.
fn partial_values(candle: &Candle) -> CandleValues {
    CandleValues {
        closed: false,
        ..live_values(candle, i64::MIN)
    }
}

fn live_values(candle: &Candle, processed_ms: i64) -> CandleValues {
    CandleValues {
        open_time: candle.open_time,
        open: candle.open,
        high: candle.high,
        low: candle.low,
        close: candle.close,
        volume: candle.volume,
        vwap: candle.vwap().unwrap_or_default(),
        trades_count: candle.trades_count,
        closed: candle.next_open <= processed_ms,
    }
}
