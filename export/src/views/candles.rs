//! `candles`: one row per candle update; the candle columns are shared with
//! the candle store's export ([`crate::candles`]).

use engine::market::candles::{Amount, CandleUpdate};
use engine::views::candles::CandleSubscription;

use super::{Exported, RowSink, block_cells};
use crate::table::{BLOCK, Cell, Column, ExportError, Kind, Table, join};

/// A candle's columns, in the order [`candle_cells`] fills them.
pub const CANDLE: [Column; 11] = [
    Column::required("coin", Kind::Text, "market"),
    Column::required(
        "interval",
        Kind::Text,
        "`1s`, `1m`, … `1M` (the exchange's names)",
    ),
    Column::required("open_time", Kind::TimeMs, "the bucket's first instant"),
    Column::required(
        "close_time",
        Kind::TimeMs,
        "the bucket's last millisecond (next open − 1 ms)",
    ),
    Column::required("open", Kind::Decimal, "first trade's price"),
    Column::required("high", Kind::Decimal, "highest price"),
    Column::required("low", Kind::Decimal, "lowest price"),
    Column::required("close", Kind::Decimal, "last trade's price"),
    Column::required("volume", Kind::Decimal, "base volume (Σ size)"),
    Column::required("trades_count", Kind::UInt64, "trades in the bucket"),
    Column::required(
        "vwap",
        Kind::Decimal,
        "volume-weighted average price, as the engine rounds it",
    ),
];

fn amount(value: Amount) -> Cell<'static> {
    Cell::Decimal {
        units: value.units(),
        scale: value.scale(),
    }
}

/// The cells of [`CANDLE`] for `candle`.
pub fn candle_cells(candle: &CandleUpdate) -> [Cell<'_>; 11] {
    [
        Cell::Text(&candle.coin),
        Cell::Text(candle.interval.as_str()),
        Cell::TimeMs(candle.open_time),
        Cell::TimeMs(candle.close_time),
        Cell::decimal(candle.open),
        Cell::decimal(candle.high),
        Cell::decimal(candle.low),
        Cell::decimal(candle.close),
        amount(candle.volume),
        Cell::U64(candle.trades_count),
        amount(candle.vwap),
    ]
}

impl Exported for CandleSubscription {
    const TABLE: Table = Table {
        name: "candles",
        row: "one candle update: the live candle after a block that traded in it, or a closed \
              bucket's final state (`closed`)",
        columns: &join::<2, 12, 14>(
            BLOCK,
            join::<11, 1, 12>(
                CANDLE,
                [Column::required(
                    "closed",
                    Kind::Bool,
                    "true: the bucket's final state",
                )],
            ),
        ),
    };

    fn block(frame: &CandleUpdate) -> (u64, i64) {
        (frame.block_number, frame.time)
    }

    fn rows(frame: &CandleUpdate, out: &mut RowSink<'_>) -> Result<(), ExportError> {
        let [number, time] = block_cells(Self::block(frame));
        let mut cells = [Cell::Null; 14];
        cells[..2].copy_from_slice(&[number, time]);
        cells[2..13].copy_from_slice(&candle_cells(frame));
        cells[13] = Cell::Bool(frame.closed);
        out.row(&cells)
    }
}
