//! `bbo`: one row per frame, a coin's best bid and ask.

use engine::views::bbo::{BboSubscription, BboUpdate};

use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for BboSubscription {
    const TABLE: Table = Table {
        name: "bbo",
        row: "one frame: a coin's top of book after a block that changed it (on the first \
              block, every coin's)",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::optional(
                "bid_px",
                Kind::Decimal,
                "best bid price; empty when no bid rests",
            ),
            Column::optional("bid_sz", Kind::Decimal, "size resting at the best bid"),
            Column::optional("bid_n", Kind::UInt32, "orders resting at the best bid"),
            Column::optional(
                "ask_px",
                Kind::Decimal,
                "best ask price; empty when no ask rests",
            ),
            Column::optional("ask_sz", Kind::Decimal, "size resting at the best ask"),
            Column::optional("ask_n", Kind::UInt32, "orders resting at the best ask"),
        ],
    };

    fn block(frame: &BboUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &BboUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let [bid_px, bid_sz, bid_n] = super::l2book::level_cells(frame.bid.as_ref());
        let [ask_px, ask_sz, ask_n] = super::l2book::level_cells(frame.ask.as_ref());
        out.row(&[
            number,
            time,
            Cell::Text(&frame.coin),
            bid_px,
            bid_sz,
            bid_n,
            ask_px,
            ask_sz,
            ask_n,
        ])
    }
}
