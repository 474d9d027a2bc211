//! A market's trades and candles without its books: what a candle store's
//! backfill folds from fill files.
//!
//! [`CandleFold::apply`] takes the same steps as a [`Market`](super::Market)
//! that needs candles alone — the block skipped when not above the last one,
//! its fills decoded once, paired into trades without their parties, folded
//! into candles — through the same functions, so the candles are the same.
//! Unlike a market it is [`Clone`]: a reader that hands blocks over before
//! it knows they are sound (a compressed file's checksum comes at its end)
//! keeps a copy from before the file and puts it back when the file fails.

use crate::block::Block;
use crate::fold::BlockReport;

use super::candles::{CandlesView, Interval};
use super::trades::{Parties, TradesView};
use super::{decode_trades, fold_trades};

/// Trades and candles folded block by block. See the module docs.
#[derive(Debug, Clone)]
pub struct CandleFold {
    /// The last block folded.
    height: Option<u64>,
    trades: TradesView,
    candles: CandlesView,
}

impl CandleFold {
    /// Nothing folded yet; candles of `intervals` only.
    pub fn new(intervals: &[Interval]) -> Self {
        Self {
            height: None,
            trades: TradesView::new(),
            candles: CandlesView::with_intervals(intervals),
        }
    }

    /// Folds one block, as [`Market::apply`](super::Market::apply) does for
    /// candles. A block at or below the last one folded is skipped
    /// (`report.skipped`) and changes nothing; decode errors are in the
    /// report and their events left out.
    pub fn apply(&mut self, block: &Block) -> BlockReport {
        let mut report = BlockReport {
            block: block.number,
            ..BlockReport::default()
        };
        if self.height.is_some_and(|height| block.number <= height) {
            report.skipped = true;
            return report;
        }
        self.height = Some(block.number);
        let (fills, whole) = decode_trades(block, &mut report);
        let candles = Some(&mut self.candles);
        fold_trades(
            &mut self.trades,
            candles,
            block.number,
            block.time_ms,
            &fills,
            &whole,
            Parties::Left,
        );
        report
    }

    /// The candles: the last block's closed ones, and every open one.
    pub fn candles(&self) -> &CandlesView {
        &self.candles
    }

    /// Takes the candles the last block closed out of the fold (see
    /// [`CandlesView::take_closed`]).
    pub fn take_closed(&mut self) -> Vec<super::candles::Candle> {
        self.candles.take_closed()
    }

    /// The last block folded.
    pub fn height(&self) -> Option<u64> {
        self.height
    }
}
