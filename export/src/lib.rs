//! Research export: what `l1gate replay` folds and what the candle store
//! holds, as typed tables that DuckDB, polars, pandas or a backtester read
//! without parsing text.
//!
//! - [`table`]: the model — typed columns, rows of cells, checked;
//! - [`views`]: every view's table (one file per view) and the candle
//!   columns;
//! - [`parquet`] and [`csv`]: the two encoders of rows;
//! - [`candles`]: the candle store's table;
//! - [`file`]: output files that appear whole or not at all;
//! - [`writer`]: frames of a replay to files ([`writer::FrameTables`], an
//!   [`engine::replay::FrameWriter`]), one file or one per UTC day, and
//!   candles to a file ([`writer::TableFile`]).

pub mod candles;
pub mod csv;
pub mod file;
pub mod parquet;
pub mod table;
pub mod views;
pub mod writer;

pub use table::{Cell, Column, ExportError, Kind, Table};
pub use writer::{Format, FrameTables, Partition, TableFile};
