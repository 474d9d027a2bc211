//! A market's trades and candles without its books: what a candle store's
//! backfill folds from fill files.
//!
//! [`CandleFold::apply`] takes the same steps as a [`Market`](super::Market)
//! that needs candles alone — the block skipped when not above the last one,
//! its fills decoded once, paired into trades without their parties, folded
//! into candles — through the same functions, so the candles are the same.
//! It keeps no more than the candles need: not the trades' running counts
//! per market, nor the list of the candles a block changed (a server's
//! store thread serves those; an import stores only closed candles).
//! Unlike a market it is [`Clone`]: a reader that hands blocks over before
//! it knows they are sound (a compressed file's checksum comes at its end)
//! keeps a copy from before the file and puts it back when the file fails.

use crate::block::{Block, FillRoom};
use crate::fold::BlockReport;

use super::candles::{Candle, CandlesView, Interval};
use super::decode_trades;
use super::trades::{Parties, pair_block};

/// Trades and candles folded block by block. See the module docs.
#[derive(Debug, Clone)]
pub struct CandleFold {
    /// The last block folded.
    height: Option<u64>,
    candles: CandlesView,
    /// The fill list's room, kept between blocks.
    fill_room: FillRoom,
}

impl CandleFold {
    /// Nothing folded yet; candles of `intervals` only.
    pub fn new(intervals: &[Interval]) -> Self {
        Self {
            height: None,
            candles: CandlesView::with_intervals(intervals).without_change_list(),
            fill_room: FillRoom::default(),
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
        let (fills, whole) = decode_trades(block, &mut self.fill_room, &mut report);
        let (number, time) = (block.number, block.time_ms);
        let paired = pair_block(number, time, &fills, &whole, Parties::Left);
        self.fill_room.put_back(fills);
        self.candles.apply(number, time, paired.trades());
        report
    }

    /// The candles: the last block's closed ones, and every open one.
    pub fn candles(&self) -> &CandlesView {
        &self.candles
    }

    /// Takes the candles the last block closed out of the fold (see
    /// [`CandlesView::take_closed`]).
    pub fn take_closed(&mut self) -> Vec<Candle> {
        self.candles.take_closed()
    }

    /// The last block folded.
    pub fn height(&self) -> Option<u64> {
        self.height
    }
}
