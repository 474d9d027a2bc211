//! Rows as CSV (RFC 4180): a header of the column names, then one record
//! per row. Decimals are written as the node wrote them (their own
//! decimals), instants as ISO 8601 UTC with milliseconds, flags as
//! `true`/`false`, and an empty field for no value. Fields holding a comma,
//! a quote or a line break (the node's JSON) are quoted.

use std::io::Write;

use crate::table::{Cell, ExportError, Rows, Table};

/// A CSV file being written.
pub struct CsvRows<W: Write> {
    writer: ::csv::Writer<W>,
    /// One field's text, reused.
    field: String,
}

impl<W: Write> CsvRows<W> {
    /// Starts a file of `table` on `out` with its header.
    ///
    /// # Errors
    /// [`ExportError::Csv`] when the header cannot be written.
    pub fn new(table: &Table, out: W) -> Result<Self, ExportError> {
        let mut writer = ::csv::WriterBuilder::new()
            .has_headers(false)
            .buffer_capacity(1 << 16)
            .from_writer(out);
        writer
            .write_record(table.columns.iter().map(|column| column.name))
            .map_err(|e| ExportError::Csv(e.to_string()))?;
        Ok(Self {
            writer,
            field: String::new(),
        })
    }

    /// Writes what is buffered; the output back.
    ///
    /// # Errors
    /// [`ExportError::Csv`] when the rest cannot be written.
    pub fn finish(self) -> Result<W, ExportError> {
        self.writer
            .into_inner()
            .map_err(|e| ExportError::Csv(e.error().to_string()))
    }
}

impl<W: Write> Rows for CsvRows<W> {
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        for cell in cells {
            self.field.clear();
            let text: &str = match *cell {
                Cell::Text(text) => text,
                Cell::Null => "",
                other => {
                    write_cell(&mut self.field, other);
                    &self.field
                }
            };
            self.writer
                .write_field(text)
                .map_err(|e| ExportError::Csv(e.to_string()))?;
        }
        self.writer
            .write_record(None::<&[u8]>)
            .map_err(|e| ExportError::Csv(e.to_string()))
    }
}

/// The text of a cell that is not text itself.
fn write_cell(out: &mut String, cell: Cell<'_>) {
    use std::fmt::Write as _;
    match cell {
        Cell::U64(v) => {
            let _ = write!(out, "{v}");
        }
        Cell::U32(v) => {
            let _ = write!(out, "{v}");
        }
        Cell::Bool(v) => out.push_str(if v { "true" } else { "false" }),
        Cell::Decimal { units, scale } => write_decimal(out, units, scale),
        Cell::TimeMs(ms) => write_time(out, ms),
        Cell::Text(text) => out.push_str(text),
        Cell::Null => {}
    }
}

/// `units / 10^scale` with exactly `scale` decimals.
pub fn write_decimal(out: &mut String, units: i128, scale: u8) {
    use std::fmt::Write as _;
    if units < 0 {
        out.push('-');
    }
    let digits = units.unsigned_abs().to_string();
    let scale = usize::from(scale);
    if scale == 0 {
        out.push_str(&digits);
        return;
    }
    if digits.len() <= scale {
        out.push_str("0.");
        let _ = write!(out, "{digits:0>scale$}");
    } else {
        let (whole, fraction) = digits.split_at(digits.len() - scale);
        out.push_str(whole);
        out.push('.');
        out.push_str(fraction);
    }
}

/// Unix milliseconds as ISO 8601 UTC (`2026-05-05T17:39:00.123Z`).
pub fn write_time(out: &mut String, ms: i64) {
    use std::fmt::Write as _;
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(at) => {
            let _ = write!(out, "{}", at.format("%Y-%m-%dT%H:%M:%S%.3fZ"));
        }
        None => {
            let _ = write!(out, "{ms}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Column, Kind};

    #[test]
    fn decimals_keep_their_own_decimals_and_sign() {
        let text = |units, scale| {
            let mut out = String::new();
            write_decimal(&mut out, units, scale);
            out
        };
        assert_eq!(text(813_070, 1), "81307.0");
        assert_eq!(text(-5, 3), "-0.005");
        assert_eq!(text(12, 0), "12");
        assert_eq!(text(0, 1), "0.0");
        assert_eq!(text(-120, 2), "-1.20");
    }

    #[test]
    fn times_are_iso_utc_with_milliseconds() {
        let mut out = String::new();
        write_time(&mut out, 1_777_916_340_123);
        assert_eq!(out, "2026-05-04T17:39:00.123Z");
    }

    #[test]
    fn a_field_with_json_is_quoted_and_an_empty_one_stays_empty() {
        const T: Table = Table {
            name: "t",
            row: "",
            columns: &[
                Column::required("n", Kind::UInt64, ""),
                Column::optional("raw", Kind::Text, ""),
                Column::optional("px", Kind::Decimal, ""),
            ],
        };
        let mut rows = CsvRows::new(&T, Vec::new()).unwrap();
        rows.row(&[Cell::U64(7), Cell::Text(r#"{"a":1,"b":"x"}"#), Cell::Null])
            .unwrap();
        let text = String::from_utf8(rows.finish().unwrap()).unwrap();
        assert_eq!(text, "n,raw,px\n7,\"{\"\"a\"\":1,\"\"b\"\":\"\"x\"\"}\",\n");
    }
}
