//! Rows as CSV (RFC 4180): a header of the column names, then one record
//! per row, `\n` after each. Text is always quoted (inner quotes doubled),
//! so readers that guess the dialect from the first rows (DuckDB) see the
//! quote character even when the first field that needs it (the node's
//! JSON) comes a million rows later; numbers, flags and instants are not.
//! No value is an empty, unquoted field — distinct from empty text (`""`).
//! Decimals are written as the node wrote them (their own decimals),
//! instants as ISO 8601 UTC (milliseconds unless whole), flags as
//! `true`/`false`.
//!
//! Written here rather than with the `csv` crate: it quotes by one rule for
//! every field, and this format needs text quoted and no-value unquoted in
//! the same record.

use std::io::Write;

use crate::table::{Cell, ExportError, Rows, Table};

/// A CSV file being written.
pub struct CsvRows<W: Write> {
    out: W,
    /// One record's bytes, reused.
    record: String,
}

impl<W: Write> CsvRows<W> {
    /// Starts a file of `table` on `out` with its header.
    ///
    /// # Errors
    /// [`ExportError::Csv`] when the header cannot be written.
    pub fn new(table: &Table, out: W) -> Result<Self, ExportError> {
        let mut rows = Self {
            out,
            record: String::with_capacity(1024),
        };
        for (i, column) in table.columns.iter().enumerate() {
            if i > 0 {
                rows.record.push(',');
            }
            quote(&mut rows.record, column.name);
        }
        rows.end_record()?;
        Ok(rows)
    }

    fn end_record(&mut self) -> Result<(), ExportError> {
        self.record.push('\n');
        let written = self.out.write_all(self.record.as_bytes());
        self.record.clear();
        written.map_err(|e| ExportError::Csv(e.to_string()))
    }

    /// Writes what is buffered; the output back.
    ///
    /// # Errors
    /// [`ExportError::Csv`] when the rest cannot be written.
    pub fn finish(mut self) -> Result<W, ExportError> {
        self.out
            .flush()
            .map_err(|e| ExportError::Csv(e.to_string()))?;
        Ok(self.out)
    }
}

impl<W: Write> Rows for CsvRows<W> {
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                self.record.push(',');
            }
            write_cell(&mut self.record, *cell);
        }
        self.end_record()
    }
}

/// `text` quoted, its quotes doubled.
fn quote(out: &mut String, text: &str) {
    out.push('"');
    for (i, part) in text.split('"').enumerate() {
        if i > 0 {
            out.push_str("\"\"");
        }
        out.push_str(part);
    }
    out.push('"');
}

/// One field of a record.
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
        Cell::Text(text) => quote(out, text),
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

/// Unix milliseconds as ISO 8601 UTC (`2026-05-05T17:39:00.123Z`, the
/// milliseconds left out on a whole second).
pub fn write_time(out: &mut String, ms: i64) {
    feeds::time::write_iso8601_ms(out, ms);
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
        out.clear();
        write_time(&mut out, 1_777_916_340_000);
        assert_eq!(out, "2026-05-04T17:39:00Z");
    }

    #[test]
    fn text_is_quoted_numbers_are_not_and_no_value_is_an_empty_field() {
        const T: Table = Table {
            name: "t",
            row: "",
            columns: &[
                Column::required("n", Kind::UInt64, ""),
                Column::optional("raw", Kind::Text, ""),
                Column::optional("px", Kind::Decimal, ""),
                Column::optional("at", Kind::TimeMs, ""),
            ],
        };
        let mut rows = CsvRows::new(&T, Vec::new()).unwrap();
        rows.row(&[
            Cell::U64(7),
            Cell::Text(r#"{"a":1,"b":"x"}"#),
            Cell::Null,
            Cell::TimeMs(0),
        ])
        .unwrap();
        rows.row(&[
            Cell::U64(8),
            Cell::Text(""),
            Cell::Decimal {
                units: 15,
                scale: 1,
            },
            Cell::Null,
        ])
        .unwrap();
        let text = String::from_utf8(rows.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "\"n\",\"raw\",\"px\",\"at\"\n\
             7,\"{\"\"a\"\":1,\"\"b\"\":\"\"x\"\"}\",,1970-01-01T00:00:00Z\n\
             8,\"\",1.5,\n"
        );
    }
}
