//! `tpsl`: one row per trigger-order diff.

use engine::market::tpsl::TpslDiffType;
use engine::views::tpsl::{TpslSubscription, TpslUpdate};

use super::{Exported, RowSink, SEQUENCE, SNAPSHOT, block_cells, empty_frame_row};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

impl Exported for TpslSubscription {
    const TABLE: Table = Table {
        name: "tpsl",
        row: "one trigger-order diff of a frame, in order (on a snapshot frame, every tracked \
              order in scope as an `add`); a frame with no diff is one row with no diff",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            SNAPSHOT,
            Column::optional("diff", Kind::Text, "`add`, `update` or `remove`"),
            Column::optional("oid", Kind::UInt64, "order id"),
            Column::optional("coin", Kind::Text, "market (a perp)"),
            Column::optional("user", Kind::Text, "the order's owner"),
            Column::optional("side", Kind::Text, "`B` or `A`"),
            Column::optional("trigger_px", Kind::Decimal, "trigger price"),
            Column::optional("limit_px", Kind::Decimal, "limit price"),
            Column::optional(
                "sz",
                Kind::Decimal,
                "effective size (a position TP/SL's from the position)",
            ),
            Column::optional("orig_sz", Kind::Decimal, "the order's own size as written"),
            Column::optional(
                "trigger_condition",
                Kind::Text,
                "the node's trigger condition text",
            ),
            Column::optional(
                "order_type",
                Kind::Text,
                "`Stop Market`, `Take Profit Limit`, …",
            ),
            Column::optional("is_position_tpsl", Kind::Bool, "a position TP/SL"),
            Column::optional("reduce_only", Kind::Bool, "reduce-only"),
            Column::optional("timestamp", Kind::TimeMs, "placement time"),
            Column::optional(
                "reason",
                Kind::Text,
                "on `remove`: the status that removed it",
            ),
            Column::optional("cloid", Kind::Text, "client order id"),
        ],
    };

    fn block(frame: &TpslUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &TpslUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let head = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Bool(frame.snapshot),
        ];
        if frame.diffs.is_empty() {
            return empty_frame_row(out, &head, 16);
        }
        for diff in &frame.diffs {
            let kind = match diff.diff_type {
                TpslDiffType::Add => "add",
                TpslDiffType::Update => "update",
                TpslDiffType::Remove => "remove",
            };
            out.row(&[
                head[0],
                head[1],
                head[2],
                head[3],
                Cell::Text(kind),
                Cell::U64(diff.oid),
                Cell::Text(&diff.coin),
                Cell::Text(&diff.user),
                Cell::Text(diff.side.as_str()),
                Cell::decimal(diff.trigger_px),
                Cell::decimal(diff.limit_px),
                Cell::decimal(diff.sz),
                Cell::decimal(diff.orig_sz),
                Cell::Text(&diff.trigger_condition),
                Cell::Text(&diff.order_type),
                Cell::Bool(diff.is_position_tpsl),
                Cell::Bool(diff.reduce_only),
                Cell::TimeMs(diff.timestamp),
                Cell::text_or_null(diff.reason.as_deref()),
                Cell::text_or_null(diff.cloid.as_deref()),
            ])?;
        }
        Ok(())
    }
}
