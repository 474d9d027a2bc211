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
pub mod store;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use engine::market::candles::{Amount, Candle, Interval};
use engine::num::Px;
use parking_lot::RwLock;

use store::{StoreReader, interval_code};

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
    /// Buckets opening before this are not covered.
    pub coverage_start_ms: Option<i64>,
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
    /// The bucket opens before the data the store was built from.
    NotCovered {
        /// First covered bucket open, Unix ms.
        coverage_start_ms: i64,
    },
    /// No trade in the bucket.
    NoTrades {
        /// Whether the data processed so far reaches past the bucket's end.
        complete: bool,
        /// Block time of the last block folded, Unix ms (0 before any).
        processed_ms: i64,
    },
    /// The writer stopped on a store error.
    Unavailable(String),
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

    /// What the candles cover: the oldest bucket open served (`None`
    /// before the writer's first block) and the newest block time folded.
    pub fn covered(&self) -> (Option<i64>, i64) {
        let live = self.live.read();
        (live.coverage_start_ms, live.block_time_ms)
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
        let (known_live, coverage, processed_ms, error) = {
            let live = self.live.read();
            if let Some(candle) = live.get(&coin, interval, open_time) {
                return Ok(live_values(candle, live.block_time_ms));
            }
            (
                live.coins.contains_key(coin.as_ref()),
                live.coverage_start_ms,
                live.block_time_ms,
                live.error.clone(),
            )
        };
        if let Some(stored) = self.store.get(&coin, interval, open_time) {
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
        if let Some(error) = error {
            return Err(Miss::Unavailable(error));
        }
        if let Some(coverage_start_ms) = coverage
            && open_time < coverage_start_ms
        {
            return Err(Miss::NotCovered { coverage_start_ms });
        }
        if !known_live && !self.store.knows(&coin) {
            return Err(Miss::UnknownMarket);
        }
        Err(Miss::NoTrades {
            complete: interval.next_open(open_time) <= processed_ms,
            processed_ms,
        })
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
