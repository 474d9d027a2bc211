//! Frames as rows of typed tables, for research tools: a table is a list
//! of typed [`Column`]s, and a row is one [`Cell`] per column, in column
//! order. Each view says what one of its rows is beside its frame
//! ([`crate::views::Tabular`]), so a field added to a frame is one file
//! away from its column; the encoders (Parquet, CSV) live in the `export`
//! crate and take rows of any table through a [`RowSink`].
//!
//! Rules every view's table follows:
//! - it starts with the frame's block: `block_number`, `block_time`;
//! - views whose frames are numbered per subscriber carry `sequence`;
//! - one row per level, order, diff, trade, fill, candle or mid, as suits
//!   the view; a frame with nothing of that kind (an empty book, a diff of
//!   an untouched coin) is one row whose per-item columns are empty, so
//!   every frame is in the table;
//! - prices, sizes and amounts are exact decimals, ids and counts integers,
//!   times instants, sides `B`/`A`, and enumerations lower-case words.

pub mod order;

use thiserror::Error;

use crate::num::Decimal;

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An unsigned 64-bit integer (block numbers, order and trade ids).
    UInt64,
    /// An unsigned 32-bit integer (order counts, level indexes).
    UInt32,
    /// A true/false flag.
    Bool,
    /// UTF-8 text (coins, addresses, enumerations, the node's JSON).
    Text,
    /// An exact decimal: Parquet `DECIMAL(38, 18)` (every number the
    /// engine holds fits, none is rounded); in CSV, the number as the node
    /// wrote it (its own decimals, `81307.0` stays `81307.0`).
    Decimal,
    /// An instant, milliseconds since the Unix epoch: Parquet
    /// `TIMESTAMP(MILLIS, UTC)`; in CSV, ISO 8601 UTC (`2026-05-05T17:39:00.123Z`;
    /// `…:00Z` on a whole second).
    TimeMs,
}

impl Kind {
    /// The type's name in the documentation.
    pub fn name(self) -> &'static str {
        match self {
            Kind::UInt64 => "uint64",
            Kind::UInt32 => "uint32",
            Kind::Bool => "bool",
            Kind::Text => "text",
            Kind::Decimal => "decimal(38,18)",
            Kind::TimeMs => "timestamp(ms, UTC)",
        }
    }
}

/// One column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name (snake case).
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// Whether a row may leave it empty (null in Parquet, an empty field in
    /// CSV).
    pub nullable: bool,
    /// What it means, for the documentation.
    pub doc: &'static str,
}

impl Column {
    /// A column every row fills.
    pub const fn required(name: &'static str, kind: Kind, doc: &'static str) -> Self {
        Self {
            name,
            kind,
            nullable: false,
            doc,
        }
    }

    /// A column a row may leave empty.
    pub const fn optional(name: &'static str, kind: Kind, doc: &'static str) -> Self {
        Self {
            name,
            kind,
            nullable: true,
            doc,
        }
    }
}

/// A table: its name and what one of its rows is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// The table's name (the view's name, or `candles`).
    pub name: &'static str,
    /// What one row is, for the documentation.
    pub row: &'static str,
    /// Its columns, in order.
    pub columns: &'static [Column],
}

/// The two columns every view's table starts with: the block whose fold
/// produced the row's frame.
pub const BLOCK: [Column; 2] = [
    Column::required(
        "block_number",
        Kind::UInt64,
        "the block that produced the frame",
    ),
    Column::required("block_time", Kind::TimeMs, "that block's time"),
];

/// `a` then `b`, for tables built from shared column groups (`N` must be
/// their total: a compile-time error otherwise).
pub const fn join<const A: usize, const B: usize, const N: usize>(
    a: [Column; A],
    b: [Column; B],
) -> [Column; N] {
    assert!(A + B == N, "join: N is the number of columns of both");
    let mut out = [Column::required("", Kind::Text, ""); N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < B {
        out[A + j] = b[j];
        j += 1;
    }
    out
}

/// One value of a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// For a [`Kind::UInt64`] column.
    U64(u64),
    /// For a [`Kind::UInt32`] column.
    U32(u32),
    /// For a [`Kind::Bool`] column.
    Bool(bool),
    /// For a [`Kind::Text`] column.
    Text(&'a str),
    /// For a [`Kind::Decimal`] column: `units / 10^scale`, `scale <= 18`.
    Decimal {
        /// The integer units.
        units: i128,
        /// Digits after the point.
        scale: u8,
    },
    /// For a [`Kind::TimeMs`] column.
    TimeMs(i64),
    /// No value (a nullable column only).
    Null,
}

impl Cell<'_> {
    /// An engine decimal.
    pub fn decimal(value: Decimal) -> Cell<'static> {
        Cell::Decimal {
            units: i128::from(value.units()),
            scale: value.scale(),
        }
    }

    /// An optional text.
    pub fn text_or_null(value: Option<&str>) -> Cell<'_> {
        value.map_or(Cell::Null, Cell::Text)
    }

    /// Whether this value may stand in a column of `kind`.
    pub fn fits(&self, kind: Kind) -> bool {
        matches!(
            (self, kind),
            (Cell::U64(_), Kind::UInt64)
                | (Cell::U32(_), Kind::UInt32)
                | (Cell::Bool(_), Kind::Bool)
                | (Cell::Text(_), Kind::Text)
                | (Cell::Decimal { .. }, Kind::Decimal)
                | (Cell::TimeMs(_), Kind::TimeMs)
                | (Cell::Null, _)
        )
    }
}

/// Scale of every [`Kind::Decimal`] column in Parquet.
pub const DECIMAL_SCALE: u8 = 18;
/// Precision of every [`Kind::Decimal`] column in Parquet.
pub const DECIMAL_PRECISION: u8 = 38;

/// `units / 10^scale` as units of [`DECIMAL_SCALE`], when it fits the
/// column's 38 digits.
pub fn decimal_units(units: i128, scale: u8) -> Option<i128> {
    let factor = 10i128.checked_pow(u32::from(DECIMAL_SCALE.checked_sub(scale)?))?;
    let scaled = units.checked_mul(factor)?;
    (scaled.unsigned_abs() < 10u128.pow(u32::from(DECIMAL_PRECISION))).then_some(scaled)
}

/// Why a frame's rows could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TableError {
    /// A value does not fit its column (a decimal beyond 38 digits, a
    /// value of another kind, a null in a required column).
    #[error("export: table {table}, column {column}: {reason}")]
    Value {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// An event a frame carries as the node's JSON is not in the node's
    /// form.
    #[error("export: table {table}: a node event that cannot be read: {message}")]
    Event {
        /// The table.
        table: &'static str,
        /// The parser's message.
        message: String,
    },
}

/// Where a frame's rows go: an encoder's input, which checks each row
/// against its table ([`check_row`]) and may fail in its own ways.
pub trait RowSink {
    /// What the sink fails with: its own errors and the rows' refusals.
    type Error: From<TableError>;

    /// Takes one row.
    ///
    /// # Errors
    /// What the sink refuses.
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), Self::Error>;
}

/// The frame's number, for the views whose frames are numbered per
/// subscriber.
pub const SEQUENCE: Column = Column::required(
    "sequence",
    Kind::UInt64,
    "the frame's number: 1, then +1 per frame",
);

/// Whether a frame's rows are the whole state, for the views that send one.
pub const SNAPSHOT: Column = Column::required(
    "snapshot",
    Kind::Bool,
    "true: rebuild local state from this frame's rows",
);

/// One row of a frame that carries no item of its kind: `head` (the
/// frame's own columns), then `items` empty cells.
///
/// # Errors
/// What `out` refuses.
pub fn empty_frame_row<S: RowSink>(
    out: &mut S,
    head: &[Cell<'_>],
    items: usize,
) -> Result<(), S::Error> {
    let mut cells = head.to_vec();
    cells.resize(head.len() + items, Cell::Null);
    out.row(&cells)
}

/// The block columns of a frame at `(block_number, time)`.
pub fn block_cells((block_number, time): (u64, i64)) -> [Cell<'static>; 2] {
    [Cell::U64(block_number), Cell::TimeMs(time)]
}

/// Checks a row against its table before an encoder takes it: one cell per
/// column, each of its column's kind, nulls only where allowed, decimals
/// within the column's range.
///
/// # Errors
/// [`TableError::Value`] naming the first column that does not take its
/// cell.
pub fn check_row(table: &Table, cells: &[Cell<'_>]) -> Result<(), TableError> {
    let fail = |column: &Column, reason| TableError::Value {
        table: table.name,
        column: column.name,
        reason,
    };
    if cells.len() != table.columns.len() {
        let column = table.columns.get(cells.len()).unwrap_or(&table.columns[0]);
        return Err(fail(column, "a row has a cell per column"));
    }
    for (column, cell) in table.columns.iter().zip(cells) {
        if !cell.fits(column.kind) {
            return Err(fail(column, "a value of another kind"));
        }
        if matches!(cell, Cell::Null) && !column.nullable {
            return Err(fail(column, "no value in a column every row fills"));
        }
        if let Cell::Decimal { units, scale } = *cell
            && decimal_units(units, scale).is_none()
        {
            return Err(fail(column, "a decimal beyond 38 digits or 18 decimals"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Table = Table {
        name: "t",
        row: "a test row",
        columns: &[
            Column::required("a", Kind::UInt64, ""),
            Column::optional("b", Kind::Decimal, ""),
        ],
    };

    #[test]
    fn decimals_scale_to_eighteen_places_and_refuse_what_does_not_fit() {
        assert_eq!(
            decimal_units(813_075, 1),
            Some(81_307_500_000_000_000_000_000)
        );
        assert_eq!(decimal_units(-5, 18), Some(-5));
        assert_eq!(decimal_units(1, 19), None);
        assert_eq!(
            decimal_units(i128::from(i64::MAX), 0).map(|u| u > 0),
            Some(true)
        );
        assert_eq!(decimal_units(10i128.pow(21), 0), None);
    }

    #[test]
    fn a_row_is_checked_cell_by_cell_against_its_columns() {
        assert!(check_row(&T, &[Cell::U64(1), Cell::Null]).is_ok());
        let wrong_kind = check_row(&T, &[Cell::Text("x"), Cell::Null]).unwrap_err();
        assert!(wrong_kind.to_string().contains("column a"), "{wrong_kind}");
        let null = check_row(&T, &[Cell::Null, Cell::Null]).unwrap_err();
        assert!(null.to_string().contains("column a"), "{null}");
        let short = check_row(&T, &[Cell::U64(1)]).unwrap_err();
        assert!(short.to_string().contains("column b"), "{short}");
        let huge = check_row(
            &T,
            &[
                Cell::U64(1),
                Cell::Decimal {
                    units: 10i128.pow(25),
                    scale: 0,
                },
            ],
        )
        .unwrap_err();
        assert!(huge.to_string().contains("38 digits"), "{huge}");
    }
}
