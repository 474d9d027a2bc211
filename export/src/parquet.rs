//! Rows as a Parquet file: cells go into Arrow column builders, every
//! [`BATCH_ROWS`] rows become a record batch handed to the Parquet writer,
//! which closes a row group every [`ROW_GROUP_ROWS`] rows. Memory is one
//! batch of builders plus one row group's encoded pages, however long the
//! export runs. Pages are zstd-compressed; the file's key-value metadata
//! names the table and its schema version ([`SCHEMA_VERSION`]).

use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Decimal128Builder, StringBuilder, TimestampMillisecondBuilder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::table::{
    Cell, Column, DECIMAL_PRECISION, DECIMAL_SCALE, ExportError, Kind, Rows, Table, decimal_units,
};

/// Rows per record batch handed to the writer.
pub const BATCH_ROWS: usize = 16_384;
/// Rows per Parquet row group (readers such as DuckDB read row groups in
/// parallel and skip them by their statistics).
pub const ROW_GROUP_ROWS: usize = 262_144;
/// The version of the tables' schemas, written in every file's metadata
/// (`l1gate.schema_version`); it changes when a column changes meaning or
/// type.
pub const SCHEMA_VERSION: &str = "1";

/// The Arrow schema of `table`.
pub fn schema(table: &Table) -> SchemaRef {
    let fields: Vec<Field> = table
        .columns
        .iter()
        .map(|column| Field::new(column.name, data_type(column.kind), column.nullable))
        .collect();
    Arc::new(Schema::new(fields))
}

fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::UInt64 => DataType::UInt64,
        Kind::UInt32 => DataType::UInt32,
        Kind::Bool => DataType::Boolean,
        Kind::Text => DataType::Utf8,
        Kind::Decimal => DataType::Decimal128(DECIMAL_PRECISION, DECIMAL_SCALE as i8),
        Kind::TimeMs => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
    }
}

/// One column's values of the batch being built.
enum Builder {
    UInt64(UInt64Builder),
    UInt32(UInt32Builder),
    Bool(BooleanBuilder),
    Text(StringBuilder),
    Decimal(Decimal128Builder),
    TimeMs(TimestampMillisecondBuilder),
}

impl Builder {
    fn of(column: &Column) -> Self {
        match column.kind {
            Kind::UInt64 => Builder::UInt64(UInt64Builder::with_capacity(BATCH_ROWS)),
            Kind::UInt32 => Builder::UInt32(UInt32Builder::with_capacity(BATCH_ROWS)),
            Kind::Bool => Builder::Bool(BooleanBuilder::with_capacity(BATCH_ROWS)),
            Kind::Text => Builder::Text(StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 16)),
            Kind::Decimal => Builder::Decimal(
                Decimal128Builder::with_capacity(BATCH_ROWS)
                    .with_data_type(data_type(Kind::Decimal)),
            ),
            Kind::TimeMs => Builder::TimeMs(
                TimestampMillisecondBuilder::with_capacity(BATCH_ROWS).with_timezone("UTC"),
            ),
        }
    }

    /// Appends `cell`, already checked against the column.
    fn push(&mut self, cell: &Cell<'_>) {
        match (self, *cell) {
            (Builder::UInt64(b), Cell::U64(v)) => b.append_value(v),
            (Builder::UInt32(b), Cell::U32(v)) => b.append_value(v),
            (Builder::Bool(b), Cell::Bool(v)) => b.append_value(v),
            (Builder::Text(b), Cell::Text(v)) => b.append_value(v),
            (Builder::Decimal(b), Cell::Decimal { units, scale }) => {
                b.append_option(decimal_units(units, scale));
            }
            (Builder::TimeMs(b), Cell::TimeMs(v)) => b.append_value(v),
            (builder, _) => builder.push_null(),
        }
    }

    fn push_null(&mut self) {
        match self {
            Builder::UInt64(b) => b.append_null(),
            Builder::UInt32(b) => b.append_null(),
            Builder::Bool(b) => b.append_null(),
            Builder::Text(b) => b.append_null(),
            Builder::Decimal(b) => b.append_null(),
            Builder::TimeMs(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::UInt64(b) => Arc::new(b.finish()),
            Builder::UInt32(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Decimal(b) => Arc::new(b.finish()),
            Builder::TimeMs(b) => Arc::new(b.finish()),
        }
    }
}

/// A Parquet file being written.
pub struct ParquetRows<W: Write + Send> {
    schema: SchemaRef,
    builders: Vec<Builder>,
    rows: usize,
    writer: ArrowWriter<W>,
}

impl<W: Write + Send> ParquetRows<W> {
    /// Starts a file of `table` on `out`.
    ///
    /// # Errors
    /// [`ExportError::Parquet`] when the writer cannot start.
    pub fn new(table: &Table, out: W) -> Result<Self, ExportError> {
        let schema = schema(table);
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_created_by(format!("l1gate {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![
                KeyValue::new("l1gate.table".to_owned(), table.name.to_owned()),
                KeyValue::new(
                    "l1gate.schema_version".to_owned(),
                    SCHEMA_VERSION.to_owned(),
                ),
            ]))
            .build();
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties))
            .map_err(|e| ExportError::Parquet(e.to_string()))?;
        Ok(Self {
            schema,
            builders: table.columns.iter().map(Builder::of).collect(),
            rows: 0,
            writer,
        })
    }

    fn write_batch(&mut self) -> Result<(), ExportError> {
        if self.rows == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| ExportError::Parquet(e.to_string()))?;
        self.rows = 0;
        self.writer
            .write(&batch)
            .map_err(|e| ExportError::Parquet(e.to_string()))
    }

    /// Writes what is buffered and the file's footer; the output back.
    ///
    /// # Errors
    /// [`ExportError::Parquet`] when the rest cannot be written.
    pub fn finish(mut self) -> Result<W, ExportError> {
        self.write_batch()?;
        self.writer
            .into_inner()
            .map_err(|e| ExportError::Parquet(e.to_string()))
    }
}

impl<W: Write + Send> Rows for ParquetRows<W> {
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        for (builder, cell) in self.builders.iter_mut().zip(cells) {
            builder.push(cell);
        }
        self.rows += 1;
        if self.rows >= BATCH_ROWS {
            self.write_batch()?;
        }
        Ok(())
    }
}
