//! `trades`: one row per trade.

use engine::market::trades::TradesUpdate;
use engine::views::trades::TradesSubscription;

use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for TradesSubscription {
    const TABLE: Table = Table {
        name: "trades",
        row: "one trade (both fills of a match are one trade), in the order of its first fill \
              in the block",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::required("side", Kind::Text, "the taker's side: `B` bought, `A` sold"),
            Column::required("px", Kind::Decimal, "execution price"),
            Column::required("sz", Kind::Decimal, "execution size"),
            Column::required("time", Kind::TimeMs, "fill time"),
            Column::required(
                "hash",
                Kind::Text,
                "taker's transaction hash (zeros for a TWAP slice)",
            ),
            Column::required("tid", Kind::UInt64, "trade id, shared by both fills"),
            Column::required("buyer", Kind::Text, "buyer's address"),
            Column::required("seller", Kind::Text, "seller's address"),
        ],
    };

    fn block(frame: &TradesUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &TradesUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        for trade in &frame.trades {
            out.row(&[
                number,
                time,
                Cell::Text(&trade.coin),
                Cell::Text(trade.side.as_str()),
                Cell::decimal(trade.px),
                Cell::decimal(trade.sz),
                Cell::TimeMs(trade.time),
                Cell::Text(&trade.hash),
                Cell::U64(trade.tid),
                Cell::Text(&trade.users[0]),
                Cell::Text(&trade.users[1]),
            ])?;
        }
        Ok(())
    }
}
