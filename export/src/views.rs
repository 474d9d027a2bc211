//! Every view's table, as the engine's views describe them
//! ([`engine::views::Tabular`], each in its view's module): the dispatch
//! from a frame to its view's rows is made from the engine's list of views
//! ([`engine::for_each_view!`]), so a view added there is a compile error
//! here until it has a table.

use engine::views::Tabular;
use engine::views::registry::{Frame, ViewKind};

use crate::table::{Cell, ExportError, Rows, Table, check_row};

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

    /// Rows taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl engine::table::RowSink for RowSink<'_> {
    type Error = ExportError;

    /// Takes one row.
    ///
    /// # Errors
    /// [`ExportError::Table`] for a row that does not fit the table, and
    /// what the encoder refuses.
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        check_row(self.table, cells)?;
        self.rows.row(cells)?;
        self.written += 1;
        Ok(())
    }
}

macro_rules! tables {
    ($($variant:ident => $view:ty),* $(,)?) => {
        /// The table of `view`.
        pub fn table(view: ViewKind) -> &'static Table {
            match view {
                $(ViewKind::$variant => &<$view as Tabular>::TABLE),*
            }
        }

        /// The block of `frame`: number and time (Unix ms).
        pub fn block(frame: &Frame) -> (u64, i64) {
            match frame {
                $(Frame::$variant(frame) => <$view as Tabular>::block(frame)),*
            }
        }

        /// `frame` as rows of its view's table.
        ///
        /// # Errors
        /// What `out` refuses.
        pub fn rows(frame: &Frame, out: &mut RowSink<'_>) -> Result<(), ExportError> {
            match frame {
                $(Frame::$variant(frame) => <$view as Tabular>::rows(frame, out)),*
            }
        }
    };
}

engine::for_each_view!(tables);

/// Every view's table, in the registry's order.
pub fn all() -> Vec<&'static Table> {
    ViewKind::ALL.iter().map(|view| table(*view)).collect()
}
