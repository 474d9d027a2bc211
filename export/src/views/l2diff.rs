//! `l2diff`: one row per changed level of each coin's entry of a frame.

use engine::views::l2diff::{L2BookDiffUpdate, L2DiffSubscription};

use super::l2book::{LEVEL, each_level};
use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for L2DiffSubscription {
    const TABLE: Table = Table {
        name: "l2diff",
        row: "one changed level of a coin's entry in a frame (`sz` 0 = the level is gone); on \
              a snapshot entry, every level of the coin's book; an entry with no level is one \
              row with no level",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            Column::required(
                "seq",
                Kind::UInt64,
                "the entry's number in the coin's chain",
            ),
            Column::required(
                "prev_seq",
                Kind::UInt64,
                "the coin's previous `seq`; 0 on a snapshot",
            ),
            Column::required(
                "snapshot",
                Kind::Bool,
                "true: the coin's whole book, rebuild from it",
            ),
            LEVEL[0],
            LEVEL[1],
            LEVEL[2],
            LEVEL[3],
            LEVEL[4],
        ],
    };

    fn block(frame: &L2BookDiffUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &L2BookDiffUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        for diff in &frame.diffs {
            each_level(&diff.bids, &diff.asks, |[side, level, px, sz, n]| {
                out.row(&[
                    number,
                    time,
                    Cell::Text(&diff.coin),
                    Cell::U64(diff.seq),
                    Cell::U64(diff.prev_seq),
                    Cell::Bool(diff.snapshot),
                    side,
                    level,
                    px,
                    sz,
                    n,
                ])
            })?;
        }
        Ok(())
    }
}
