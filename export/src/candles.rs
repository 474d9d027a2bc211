//! The candle store's table (`l1gate candles export`): the candle columns
//! of the `candles` view, without a block (the store keeps none), with
//! whether the store holds the bucket's whole time.

use engine::market::candles::CandleUpdate;

use crate::table::{Cell, Column, Kind, Table, join};
use engine::views::candles::{CANDLE, candle_cells};

/// `candle_history`: one row per stored (or built) candle.
pub const TABLE: Table = Table {
    name: "candle_history",
    row: "one candle of the store, or one built from stored ones for an interval the store \
          does not keep, in time order; buckets without trades have no row",
    columns: &join::<11, 1, 12>(
        CANDLE,
        [Column::required(
            "complete",
            Kind::Bool,
            "true: the store holds every trade of the bucket's time; false at the edge of \
             stored history or across a known gap",
        )],
    ),
};

/// The row of `candle`.
pub fn cells(candle: &CandleUpdate, complete: bool) -> [Cell<'_>; 12] {
    let mut row = [Cell::Null; 12];
    row[..11].copy_from_slice(&candle_cells(candle));
    row[11] = Cell::Bool(complete);
    row
}
