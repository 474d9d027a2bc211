//! The table model every export shares, from the engine
//! ([`engine::table`]: each view's table is in its module), and what the
//! encoders ([`crate::parquet`], [`crate::csv`]) add to it: the rows they
//! take and how writing them fails.

use thiserror::Error;

pub use engine::table::{
    BLOCK, Cell, Column, DECIMAL_PRECISION, DECIMAL_SCALE, Kind, Table, TableError, check_row,
    decimal_units, join,
};

/// Why rows could not be written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The output file or directory could not be made or written.
    #[error("export: {path}: {message}")]
    Io {
        /// The file or directory.
        path: String,
        /// What failed.
        message: String,
    },
    /// The Parquet encoder refused the data.
    #[error("export: parquet: {0}")]
    Parquet(String),
    /// The CSV encoder failed.
    #[error("export: csv: {0}")]
    Csv(String),
    /// A frame's rows do not fit its table (see [`TableError`]).
    #[error(transparent)]
    Table(#[from] TableError),
    /// A request outside what the export can do.
    #[error("export: {0}")]
    Usage(String),
}

/// Where rows go: an encoder of one output file.
pub trait Rows {
    /// Takes one row of the table the encoder was made for (checked with
    /// [`check_row`] by the caller).
    ///
    /// # Errors
    /// [`ExportError`] when it cannot be encoded or written.
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError>;
}
