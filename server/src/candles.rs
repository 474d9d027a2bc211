//! Candle lookups' state: the persistent [`store`] (closed buckets) and
//! the live state the candle store thread keeps (the open buckets, and
//! closed ones waiting for their commit; see [`crate::host::candles`]), and
//! [`Candles::lookup`], which answers one `1s`, `1m` or `5m` candle from
//! them or says why there is none ([`Miss`]). The HTTP route over it is
//! [`crate::http::candles`].
//!
//! Prices are the node's exact text; volume and VWAP are exact sums in
//! canonical decimal form (see [`engine::market::candles`]).

pub mod chunk;
pub mod import;
pub mod store;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;
use parking_lot::RwLock;

use store::{Gap, LookupError, Span, StoreReader, interval_code};

/// Default oldest bucket served: 2025-07-27T08:00:00Z.
pub const DEFAULT_HISTORY_START_MS: i64 = 1_753_603_200_000;

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
        let (known_live, session, gaps, processed_ms, error) = {
            let live = self.live.read();
            if let Some(candle) = live.get(&coin, interval, open_time) {
                return Ok(live_values(candle, live.block_time_ms));
            }
            (
                live.coins.contains_key(coin.as_ref()),
                live.session,
                live.gaps.clone(),
                live.block_time_ms,
                live.error.clone(),
            )
        };
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
    /// trades have none. The stored ones' VWAP is left out (zero).
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
        let (live, processed_ms) = {
            let live = self.live.read();
            let series: Vec<Candle> = live
                .series(&coin, interval)
                .iter()
                .filter(|c| c.open_time >= from && c.open_time < to)
                .cloned()
                .collect();
            (series, live.block_time_ms)
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

    /// Whether a candle built for the bucket `[open, next_open)` from
    /// stored ones is whole: every trade of it folded (the bucket lies in
    /// the stored coverage or this run's span, or this run's fold is inside
    /// it still) and none may be missing (it touches no gap).
    pub fn bucket_usable(&self, open: i64, next_open: i64) -> bool {
        let (session, gaps) = {
            let live = self.live.read();
            (live.session, live.gaps.clone())
        };
        let stored = self.store.coverage();
        let held = session.is_some_and(|s| {
            s.holds(open, next_open) || (open >= s.from_ms && next_open > s.to_ms)
        }) || stored.holding(open, next_open).is_some();
        held && !gaps
            .iter()
            .chain(&stored.gaps)
            .any(|gap| gap.touches(open, next_open))
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
