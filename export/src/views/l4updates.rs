//! `l4updates`: one row per order diff.

use engine::views::l4updates::{L4OrderDiffType, L4OrderUpdate, L4UpdatesSubscription};

use super::{Exported, RowSink, SEQUENCE, SNAPSHOT, block_cells, empty_frame_row};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for L4UpdatesSubscription {
    const TABLE: Table = Table {
        name: "l4updates",
        row: "one order diff of a frame, in file order (on a snapshot frame, every resting order \
              in scope as a `new`, in book order per coin); a frame with no diff is one row with \
              no diff",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            SNAPSHOT,
            Column::optional("diff", Kind::Text, "`new`, `update` or `remove`"),
            Column::optional("coin", Kind::Text, "market"),
            Column::optional("oid", Kind::UInt64, "order id"),
            Column::optional("user", Kind::Text, "the order's owner"),
            Column::optional("side", Kind::Text, "`B` or `A`"),
            Column::optional("px", Kind::Decimal, "resting price"),
            Column::optional(
                "sz",
                Kind::Decimal,
                "resting size after the change (0 on `remove`)",
            ),
        ],
    };

    fn block(frame: &L4OrderUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &L4OrderUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let head = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Bool(frame.snapshot),
        ];
        if frame.diffs.is_empty() {
            return empty_frame_row(out, &head, 7);
        }
        for diff in &frame.diffs {
            let kind = match diff.diff_type {
                L4OrderDiffType::New => "new",
                L4OrderDiffType::Update => "update",
                L4OrderDiffType::Remove => "remove",
            };
            out.row(&[
                head[0],
                head[1],
                head[2],
                head[3],
                Cell::Text(kind),
                Cell::Text(&diff.coin),
                Cell::U64(diff.oid),
                Cell::Text(&diff.user),
                Cell::Text(diff.side.as_str()),
                Cell::decimal(diff.px),
                Cell::decimal(diff.sz),
            ])?;
        }
        Ok(())
    }
}
