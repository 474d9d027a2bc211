//! `l2book`: one row per price level of each frame's aggregated book.

use engine::book::l2::L2Level;
use engine::views::l2book::{L2BookSubscription, L2BookUpdate};

use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table};

/// The side, level index, price, size and order count columns of a book
/// level, shared with `l2diff`.
pub(super) const LEVEL: [Column; 5] = [
    Column::optional(
        "side",
        Kind::Text,
        "`B` (bid) or `A` (ask); empty for an empty book",
    ),
    Column::optional(
        "level",
        Kind::UInt32,
        "0 for the best level of its side, then 1, 2, …",
    ),
    Column::optional(
        "px",
        Kind::Decimal,
        "the level's price (its bucket's, when aggregated)",
    ),
    Column::optional("sz", Kind::Decimal, "total size resting at the level"),
    Column::optional("n", Kind::UInt32, "orders resting at the level"),
];

/// A level's price, size and order count (empty when there is none).
pub(super) fn level_cells(level: Option<&L2Level>) -> [Cell<'static>; 3] {
    match level {
        Some(level) => [
            Cell::decimal(level.px),
            Cell::decimal(level.sz),
            Cell::U32(level.n),
        ],
        None => [Cell::Null; 3],
    }
}

/// Calls `row` with the side, index and cells of every level of `bids`
/// then `asks`; once with empty cells when both are empty.
pub(super) fn each_level(
    bids: &[L2Level],
    asks: &[L2Level],
    mut row: impl FnMut([Cell<'static>; 5]) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    if bids.is_empty() && asks.is_empty() {
        return row([Cell::Null; 5]);
    }
    for (side, levels) in [("B", bids), ("A", asks)] {
        for (index, level) in levels.iter().enumerate() {
            let [px, sz, n] = level_cells(Some(level));
            row([Cell::Text(side), Cell::U32(index as u32), px, sz, n])?;
        }
    }
    Ok(())
}

impl Exported for L2BookSubscription {
    const TABLE: Table = Table {
        name: "l2book",
        row: "one price level of a frame (a coin's aggregated book after a block that touched \
              it): bids best first, then asks best first; a frame of an empty book is one row \
              with no level",
        columns: &[
            BLOCK[0],
            BLOCK[1],
            Column::required("coin", Kind::Text, "market"),
            LEVEL[0],
            LEVEL[1],
            LEVEL[2],
            LEVEL[3],
            LEVEL[4],
        ],
    };

    fn block(frame: &L2BookUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &L2BookUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        each_level(&frame.bids, &frame.asks, |[side, level, px, sz, n]| {
            out.row(&[
                number,
                time,
                Cell::Text(&frame.coin),
                side,
                level,
                px,
                sz,
                n,
            ])
        })
    }
}
