//! `mids`: one row per coin of each frame's map of mids.

use engine::views::mids::{AllMidsUpdate, MidsSubscription};

use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for MidsSubscription {
    const TABLE: Table = Table {
        name: "mids",
        row: "one coin's mid in a frame (every coin in scope with both sides, sent whole when \
              one of them changed), coins in order; an empty map is one row with no coin",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::optional("coin", Kind::Text, "market"),
            Column::optional("mid", Kind::Decimal, "(best bid + best ask) / 2, exact"),
        ],
    };

    fn block(frame: &AllMidsUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &AllMidsUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        if frame.mids.is_empty() {
            return out.row(&[number, time, Cell::Null, Cell::Null]);
        }
        for (coin, mid) in &frame.mids {
            out.row(&[number, time, Cell::Text(coin), Cell::decimal(*mid)])?;
        }
        Ok(())
    }
}
