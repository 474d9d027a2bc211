//! Candles of one (coin, interval) — any of the exchange's fifteen
//! intervals (see [`crate::market::candles`]): the current bucket at once
//! if it has trades, re-sent at most once per throttle window of block time
//! while it changes, and a closed bucket's final state (`closed: true`)
//! before any frame of the next bucket.

use crate::market::candles::{CandleError, CandleUpdate, CandlesView, Interval};
use crate::market::{Market, Needs};
use crate::views::{OnLag, Selection, View, ViewError, ViewSettings, distinct};

/// `CandleRequest`, normalised.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CandleKey {
    /// Market.
    pub coin: String,
    /// Interval.
    pub interval: Interval,
}

/// One candle subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandleSubscription {
    coin: String,
    interval: Interval,
    throttle_ms: i64,
    /// Open time of the bucket last sent and the block time it was sent at.
    last_sent: Option<(i64, i64)>,
    /// A change inside the throttle window waits to be sent.
    held: bool,
    /// The last block looked at.
    seen_block: Option<u64>,
}

impl CandleSubscription {
    /// A subscription of `key`; `throttle_ms` is the minimum block time
    /// between two frames of the same live bucket (0 = every change).
    ///
    /// # Errors
    /// [`CandleError::MissingCoin`] for an empty coin.
    pub fn new(key: &CandleKey, throttle_ms: i64) -> Result<Self, CandleError> {
        if key.coin.is_empty() {
            return Err(CandleError::MissingCoin);
        }
        Ok(Self {
            coin: key.coin.clone(),
            interval: key.interval,
            throttle_ms: throttle_ms.max(0),
            last_sent: None,
            held: false,
            seen_block: None,
        })
    }

    /// The opening frame: the current bucket, if it is tracked.
    pub fn opening(&mut self, view: &CandlesView) -> Option<CandleUpdate> {
        let (block_number, time) = view.position();
        self.seen_block = Some(block_number);
        let candle = view.live(&self.coin, self.interval)?;
        self.last_sent = Some((candle.open_time, time));
        self.held = false;
        Some(candle.to_update(false))
    }

    /// The frames of the last folded block: a closed bucket's final state
    /// first, then the live bucket when it is new or the throttle allows.
    /// A block already seen (by [`CandleSubscription::opening`] or an
    /// earlier call) yields nothing.
    pub fn frames(&mut self, view: &CandlesView) -> Vec<CandleUpdate> {
        let (block_number, time) = view.position();
        let mut frames = Vec::new();
        if self.seen_block.replace(block_number) == Some(block_number) {
            return frames;
        }
        for candle in view.closed() {
            if candle.coin == self.coin && candle.interval == self.interval {
                frames.push(candle.to_update(true));
                self.last_sent = None;
                self.held = false;
            }
        }
        let Some(candle) = view.live(&self.coin, self.interval) else {
            return frames;
        };
        let changed = view.was_changed(&self.coin, self.interval);
        let due = match self.last_sent {
            Some((open_time, _)) if open_time != candle.open_time => true,
            None => changed,
            Some((_, at)) => (changed || self.held) && time - at >= self.throttle_ms,
        };
        if due {
            self.last_sent = Some((candle.open_time, time));
            self.held = false;
            frames.push(candle.to_update(false));
        } else if changed {
            self.held = true;
        }
        frames
    }
}

impl View for CandleSubscription {
    type Key = CandleKey;
    type Frame = CandleUpdate;
    const NAME: &'static str = "candles";
    const ON_LAG: OnLag = OnLag::SkipToNewest;
    const NEEDS: Needs = Needs {
        trades: true,
        candles: true,
        ..Needs::NONE
    };

    /// One key per coin, all of `--interval`.
    fn keys(selection: &Selection) -> Result<Vec<CandleKey>, ViewError> {
        let coins = distinct(&selection.coins);
        if coins.is_empty() {
            return Err(ViewError::MissingCoin { view: Self::NAME });
        }
        let interval = Interval::parse(selection.interval.as_deref().unwrap_or_default())?;
        Ok(coins
            .into_iter()
            .map(|coin| CandleKey { coin, interval })
            .collect())
    }

    /// A candle of a coin the market has never seen is refused, as every
    /// other coin's view is.
    fn listed_coins(key: &CandleKey) -> Vec<&str> {
        vec![key.coin.as_str()]
    }

    fn open(
        market: &mut Market,
        key: &CandleKey,
        settings: &ViewSettings,
    ) -> Result<(Self, Vec<CandleUpdate>), ViewError> {
        if !settings.candles {
            return Err(ViewError::Disabled { view: Self::NAME });
        }
        let mut subscription = Self::new(key, settings.candle_throttle_ms)?;
        let opening = subscription.opening(market.candles());
        Ok((subscription, opening.into_iter().collect()))
    }

    fn on_block(&mut self, market: &Market) -> Vec<CandleUpdate> {
        self.frames(market.candles())
    }
}
