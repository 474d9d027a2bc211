//! `statuses`: one row per order status of the subscribed accounts.

use engine::views::statuses::{OrderStatusesUpdate, StatusesSubscription};

use super::order::{STATUS, StatusEvent, status_cells, unreadable};
use super::{Exported, RowSink, SEQUENCE, block_cells};
use crate::table::{BLOCK, Cell, ExportError, Table, join};

const NAME: &str = "statuses";

impl Exported for StatusesSubscription {
    const TABLE: Table = Table {
        name: NAME,
        row: "one order status of a subscribed account, in file order",
        columns: &join::<3, 21, 24>([BLOCK[0], BLOCK[1], SEQUENCE], STATUS),
    };

    fn block(frame: &OrderStatusesUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &OrderStatusesUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        for raw in &frame.statuses {
            let event: StatusEvent<'_> =
                serde_json::from_str(raw.as_str()).map_err(|e| unreadable(NAME, &e))?;
            let mut cells = [Cell::Null; 24];
            cells[..3].copy_from_slice(&[number, time, Cell::U64(frame.sequence)]);
            cells[3..].copy_from_slice(&status_cells(NAME, &event)?);
            out.row(&cells)?;
        }
        Ok(())
    }
}
