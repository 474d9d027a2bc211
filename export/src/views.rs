//! Every view's table: one file per view says what one of its rows is and
//! how a frame becomes rows. The list of views is the engine's
//! ([`engine::for_each_view!`]), so a view added there is a compile error
//! here until it has a table.
//!
//! Rules every table follows:
//! - it starts with the frame's block: `block_number`, `block_time`;
//! - views whose frames are numbered per subscriber carry `sequence`;
//! - one row per level, order, diff, trade, fill, candle or mid, as suits
//!   the view; a frame with nothing of that kind (an empty book, a diff of
//!   an untouched coin) is one row whose per-item columns are empty, so
//!   every frame is in the table;
//! - prices, sizes and amounts are exact decimals, ids and counts integers,
//!   times instants, sides `B`/`A`, and enumerations lower-case words.

mod bbo;
pub(crate) mod candles;
mod fills;
mod l2book;
mod l2diff;
mod l4book;
mod l4updates;
mod mids;
mod open_orders;
mod order;
mod statuses;
mod tpsl;
mod trades;

use engine::views::View;
use engine::views::registry::{Frame, ViewKind};

use crate::table::{Cell, Column, ExportError, Kind, Rows, Table, check_row};

/// A view's table.
pub trait Exported: View {
    /// Its columns and what a row is.
    const TABLE: Table;

    /// The frame's block: number and time (Unix ms).
    fn block(frame: &Self::Frame) -> (u64, i64);

    /// The frame's rows, in order.
    ///
    /// # Errors
    /// What `out` refuses.
    fn rows(frame: &Self::Frame, out: &mut RowSink<'_>) -> Result<(), ExportError>;
}

/// Rows of one table on their way to an encoder, each checked against the
/// table first.
pub struct RowSink<'a> {
    table: &'static Table,
    rows: &'a mut dyn Rows,
    written: u64,
}

impl<'a> RowSink<'a> {
    /// Rows of `table` for `rows`.
    pub fn new(table: &'static Table, rows: &'a mut dyn Rows) -> Self {
        Self {
            table,
            rows,
            written: 0,
        }
    }

    /// Takes one row.
    ///
    /// # Errors
    /// [`ExportError::Value`] for a row that does not fit the table, and
    /// what the encoder refuses.
    pub fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        check_row(self.table, cells)?;
        self.rows.row(cells)?;
        self.written += 1;
        Ok(())
    }

    /// Rows taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// The frame's number, for the views whose frames are numbered per
/// subscriber.
const SEQUENCE: Column = Column::required(
    "sequence",
    Kind::UInt64,
    "the frame's number: 1, then +1 per frame",
);

/// Whether a frame's rows are the whole state, for the views that send one.
const SNAPSHOT: Column = Column::required(
    "snapshot",
    Kind::Bool,
    "true: rebuild local state from this frame's rows",
);

/// One row of a frame that carries no item of its kind: `head` (the
/// frame's own columns), then `items` empty cells.
fn empty_frame_row(
    out: &mut RowSink<'_>,
    head: &[Cell<'_>],
    items: usize,
) -> Result<(), ExportError> {
    let mut cells = head.to_vec();
    cells.resize(head.len() + items, Cell::Null);
    out.row(&cells)
}

/// The block columns of a frame at `(block_number, time)`.
fn block_cells((block_number, time): (u64, i64)) -> [Cell<'static>; 2] {
    [Cell::U64(block_number), Cell::TimeMs(time)]
}

macro_rules! tables {
    ($($variant:ident => $view:ty),* $(,)?) => {
        /// The table of `view`.
        pub fn table(view: ViewKind) -> &'static Table {
            match view {
                $(ViewKind::$variant => &<$view as Exported>::TABLE),*
            }
        }

        /// The block of `frame`: number and time (Unix ms).
        pub fn block(frame: &Frame) -> (u64, i64) {
            match frame {
                $(Frame::$variant(frame) => <$view as Exported>::block(frame)),*
            }
        }

        /// `frame` as rows of its view's table.
        ///
        /// # Errors
        /// What `out` refuses.
        pub fn rows(frame: &Frame, out: &mut RowSink<'_>) -> Result<(), ExportError> {
            match frame {
                $(Frame::$variant(frame) => <$view as Exported>::rows(frame, out)),*
            }
        }
    };
}

engine::for_each_view!(tables);

/// Every view's table, in the registry's order.
pub fn all() -> Vec<&'static Table> {
    ViewKind::ALL.iter().map(|view| table(*view)).collect()
}
