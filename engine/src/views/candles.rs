//! Candles of one (coin, interval) — any of the exchange's fifteen
//! intervals (see [`crate::market::candles`]): the current bucket at once
//! if it has trades, re-sent at most once per throttle window of block time
//! while it changes, and a closed bucket's final state (`closed: true`)
//! before any frame of the next bucket.

use crate::market::candles::{Amount, CandleError, CandleUpdate, CandlesView, Interval};
use crate::market::{Market, Needs};
use crate::table::{BLOCK, Cell, Column, Kind, RowSink, Table, block_cells, join};
use crate::views::{OnLag, Selection, Tabular, View, ViewError, ViewSettings, distinct};

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

// `candles`: one row per candle update; the candle columns are shared with
// the candle store's export (the `export` crate).

/// A candle's columns, in the order [`candle_cells`] fills them.
pub const CANDLE: [Column; 11] = [
    Column::required("coin", Kind::Text, "market"),
    Column::required(
        "interval",
        Kind::Text,
        "`1s`, `1m`, … `1M` (the exchange's names)",
    ),
    Column::required("open_time", Kind::TimeMs, "the bucket's first instant"),
    Column::required(
        "close_time",
        Kind::TimeMs,
        "the bucket's last millisecond (next open − 1 ms)",
    ),
    Column::required("open", Kind::Decimal, "first trade's price"),
    Column::required("high", Kind::Decimal, "highest price"),
    Column::required("low", Kind::Decimal, "lowest price"),
    Column::required("close", Kind::Decimal, "last trade's price"),
    Column::required("volume", Kind::Decimal, "base volume (Σ size)"),
    Column::required("trades_count", Kind::UInt64, "trades in the bucket"),
    Column::required(
        "vwap",
        Kind::Decimal,
        "volume-weighted average price, as the engine rounds it",
    ),
];

fn amount(value: Amount) -> Cell<'static> {
    Cell::Decimal {
        units: value.units(),
        scale: value.scale(),
    }
}

/// The cells of [`CANDLE`] for `candle`.
pub fn candle_cells(candle: &CandleUpdate) -> [Cell<'_>; 11] {
    [
        Cell::Text(&candle.coin),
        Cell::Text(candle.interval.as_str()),
        Cell::TimeMs(candle.open_time),
        Cell::TimeMs(candle.close_time),
        Cell::decimal(candle.open),
        Cell::decimal(candle.high),
        Cell::decimal(candle.low),
        Cell::decimal(candle.close),
        amount(candle.volume),
        Cell::U64(candle.trades_count),
        amount(candle.vwap),
    ]
}

impl Tabular for CandleSubscription {
    const TABLE: Table = Table {
        name: "candles",
        row: "one candle update: the live candle after a block that traded in it, or a closed \
              bucket's final state (`closed`)",
        columns: &join::<2, 12, 14>(
            BLOCK,
            join::<11, 1, 12>(
                CANDLE,
                [Column::required(
                    "closed",
                    Kind::Bool,
                    "true: the bucket's final state",
                )],
            ),
        ),
    };

    fn block(frame: &CandleUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows<S: RowSink>(frame: &CandleUpdate, out: &mut S) -> Result<(), S::Error> {
        let [number, time] = block_cells(Self::block(frame));
        let mut cells = [Cell::Null; 14];
        cells[..2].copy_from_slice(&[number, time]);
        cells[2..13].copy_from_slice(&candle_cells(frame));
        cells[13] = Cell::Bool(frame.closed);
        out.row(&cells)
    }
}
