//! `openorders`: one row per open order of each frame, newest first; a
//! frame with no open order is one row with empty order columns.

use engine::views::open_orders::{OpenOrdersSubscription, OpenOrdersUpdate};

use super::{Exported, RowSink, SEQUENCE, block_cells, empty_frame_row};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

/// The frame's own columns, before the order's.
const HEAD: usize = 5;
/// The order's columns.
const ORDER: usize = 15;

impl Exported for OpenOrdersSubscription {
    const TABLE: Table = Table {
        name: "openorders",
        row: "one open order of the account after the frame's block (every frame is the whole \
              list, newest first); an account with none is one row with empty order columns",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            SEQUENCE,
            Column::required("user", Kind::Text, "the account"),
            Column::required(
                "dex",
                Kind::Text,
                "the exchange: empty for the default one, else a builder-deployed exchange's name",
            ),
            Column::optional("coin", Kind::Text, "market"),
            Column::optional("side", Kind::Text, "`B` or `A`"),
            Column::optional("limit_px", Kind::Decimal, "limit price"),
            Column::optional("sz", Kind::Decimal, "remaining size"),
            Column::optional("orig_sz", Kind::Decimal, "size as placed"),
            Column::optional("oid", Kind::UInt64, "order id"),
            Column::optional("timestamp", Kind::TimeMs, "placement time"),
            Column::optional("order_type", Kind::Text, "`Limit`, `Stop Limit`, …"),
            Column::optional(
                "tif",
                Kind::Text,
                "time in force (`Gtc`, `Alo`, …), when set",
            ),
            Column::optional("reduce_only", Kind::Bool, "reduce-only"),
            Column::optional("is_trigger", Kind::Bool, "an untriggered trigger order"),
            Column::optional("trigger_px", Kind::Decimal, "trigger price (0 when none)"),
            Column::optional(
                "trigger_condition",
                Kind::Text,
                "`N/A`, or `Triggered` for a triggered order now resting",
            ),
            Column::optional("is_position_tpsl", Kind::Bool, "a position TP/SL"),
            Column::optional("cloid", Kind::Text, "client order id, when set"),
        ],
    };

    fn block(frame: &OpenOrdersUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &OpenOrdersUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let head: [Cell<'_>; HEAD] = [
            number,
            time,
            Cell::U64(frame.sequence),
            Cell::Text(&frame.user),
            Cell::Text(&frame.dex),
        ];
        if frame.orders.is_empty() {
            return empty_frame_row(out, &head, ORDER);
        }
        for open in &frame.orders {
            let order = &open.order;
            let mut cells = [Cell::Null; HEAD + ORDER];
            cells[..HEAD].copy_from_slice(&head);
            cells[HEAD..].copy_from_slice(&[
                Cell::Text(&open.coin),
                Cell::Text(order.side.as_str()),
                Cell::decimal(order.limit_px),
                Cell::decimal(order.sz),
                Cell::decimal(order.orig_sz),
                Cell::U64(order.oid),
                Cell::TimeMs(order.timestamp),
                Cell::Text(&order.order_type),
                Cell::text_or_null(order.tif.as_deref()),
                Cell::Bool(order.reduce_only),
                Cell::Bool(order.is_trigger),
                Cell::decimal(order.trigger_px),
                Cell::Text(&order.trigger_condition),
                Cell::Bool(order.is_position_tpsl),
                Cell::text_or_null(order.cloid.as_deref()),
            ]);
            out.row(&cells)?;
        }
        Ok(())
    }
}
