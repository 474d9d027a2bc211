//! Tables to files: [`TableFile`] is one output file of one table in one
//! [`Format`]; [`FrameTables`] takes a replay's frames and writes them to
//! one file, or to one file per UTC day of their blocks
//! ([`Partition::Day`]), each file named only once it is whole
//! ([`crate::file`]).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use engine::replay::{FrameWriter, ReplayError};
use engine::table::RowSink as _;
use engine::views::registry::{Frame, ViewKind};

use crate::csv::CsvRows;
use crate::file::OutputFile;
use crate::parquet::ParquetRows;
use crate::table::{Cell, ExportError, Rows, Table};
use crate::views::{self, RowSink};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per frame and line: the frames as a server streams
    /// them (replay only).
    Jsonl,
    /// CSV with a header, one record per row.
    Csv,
    /// Parquet, zstd pages.
    Parquet,
}

impl Format {
    /// The file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }
}

/// How a replay's output is split into files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    /// One file.
    None,
    /// One file per UTC day of the frames' block times, named
    /// `VIEW-YYYY-MM-DD.EXT` in the output directory.
    Day,
}

/// A file written: where, how many rows (frames, for JSON lines) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The file.
    pub path: PathBuf,
    /// Rows (JSON lines: frames).
    pub rows: u64,
    /// Size in bytes.
    pub bytes: u64,
}

enum Encoder {
    Jsonl(OutputFile),
    Csv(Box<CsvRows<OutputFile>>),
    Parquet(Box<ParquetRows<OutputFile>>),
}

impl Rows for Encoder {
    fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        match self {
            Encoder::Csv(rows) => rows.row(cells),
            Encoder::Parquet(rows) => rows.row(cells),
            Encoder::Jsonl(_) => Err(ExportError::Usage(
                "JSON lines carry frames, not table rows".to_owned(),
            )),
        }
    }
}

/// One output file of one table.
pub struct TableFile {
    table: &'static Table,
    encoder: Encoder,
    rows: u64,
}

impl TableFile {
    /// Starts `path` as a file of `table` in `format`.
    ///
    /// # Errors
    /// [`ExportError`] when the file cannot be made or its header written.
    pub fn create(path: &Path, table: &'static Table, format: Format) -> Result<Self, ExportError> {
        let file = OutputFile::create(path)?;
        let encoder = match format {
            Format::Jsonl => Encoder::Jsonl(file),
            Format::Csv => Encoder::Csv(Box::new(CsvRows::new(table, file)?)),
            Format::Parquet => Encoder::Parquet(Box::new(ParquetRows::new(table, file)?)),
        };
        Ok(Self {
            table,
            encoder,
            rows: 0,
        })
    }

    /// Takes one row, checked against the table.
    ///
    /// # Errors
    /// [`ExportError`] for a row that does not fit, or a write that fails.
    pub fn row(&mut self, cells: &[Cell<'_>]) -> Result<(), ExportError> {
        let mut sink = RowSink::new(self.table, &mut self.encoder);
        sink.row(cells)?;
        self.rows += 1;
        Ok(())
    }

    /// Takes one frame of the table's view: its rows, or its JSON line.
    ///
    /// # Errors
    /// [`ExportError`] for a frame that does not fit, or a write that fails.
    pub fn frame(&mut self, frame: &Frame) -> Result<(), ExportError> {
        if let Encoder::Jsonl(file) = &mut self.encoder {
            let io = |path: &Path, message: String| ExportError::Io {
                path: file_name(path),
                message,
            };
            let mut line = serde_json::to_vec(frame).map_err(|e| io(file.path(), e.to_string()))?;
            line.push(b'\n');
            if let Err(e) = file.write_all(&line) {
                return Err(io(file.path(), e.to_string()));
            }
            self.rows += 1;
            return Ok(());
        }
        let mut sink = RowSink::new(self.table, &mut self.encoder);
        views::rows(frame, &mut sink)?;
        self.rows += sink.written();
        Ok(())
    }

    /// Rows taken so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Finishes the file (the Parquet footer), syncs it and names it.
    ///
    /// # Errors
    /// [`ExportError`] when the rest cannot be written.
    pub fn finish(self) -> Result<Written, ExportError> {
        let file = match self.encoder {
            Encoder::Jsonl(file) => file,
            Encoder::Csv(rows) => rows.finish()?,
            Encoder::Parquet(rows) => rows.finish()?,
        };
        let path = file.path().to_path_buf();
        let bytes = file.persist()?;
        Ok(Written {
            path,
            rows: self.rows,
            bytes,
        })
    }
}

fn file_name(path: &Path) -> String {
    path.display().to_string()
}

/// A replay's frames as files of their view's table.
pub struct FrameTables {
    view: ViewKind,
    format: Format,
    partition: Partition,
    out: PathBuf,
    /// The file being written, with its UTC day (days since the epoch) when
    /// partitioned.
    current: Option<(i64, TableFile)>,
    written: Vec<Written>,
}

const DAY_MS: i64 = 86_400_000;

impl FrameTables {
    /// Frames of `view` to `out`: a file, or with [`Partition::Day`] a
    /// directory (made if missing).
    ///
    /// # Errors
    /// [`ExportError::Usage`] when `out` is a directory without a partition
    /// or not one with it; [`ExportError::Io`] when the directory cannot be
    /// made.
    pub fn new(
        view: ViewKind,
        format: Format,
        partition: Partition,
        out: &Path,
    ) -> Result<Self, ExportError> {
        match partition {
            Partition::None if out.is_dir() => {
                return Err(ExportError::Usage(format!(
                    "--out {} is a directory: name a file, or split by day with --partition day",
                    out.display()
                )));
            }
            Partition::Day if out.exists() && !out.is_dir() => {
                return Err(ExportError::Usage(format!(
                    "--out {} is a file: --partition day writes one file per day into a directory",
                    out.display()
                )));
            }
            Partition::Day => {
                std::fs::create_dir_all(out).map_err(|e| ExportError::Io {
                    path: file_name(out),
                    message: e.to_string(),
                })?;
            }
            Partition::None => {}
        }
        Ok(Self {
            view,
            format,
            partition,
            out: out.to_path_buf(),
            current: None,
            written: Vec::new(),
        })
    }

    /// The file of `day` (days since the epoch) in the output directory.
    pub fn day_path(&self, day: i64) -> PathBuf {
        let (year, month, day) = feeds::time::civil_from_days(day);
        let date = format!("{year:04}-{month:02}-{day:02}");
        self.out.join(format!(
            "{}-{date}.{}",
            self.view.name(),
            self.format.extension()
        ))
    }

    fn take(&mut self, frame: &Frame) -> Result<(), ExportError> {
        let (_, time) = views::block(frame);
        let day = match self.partition {
            Partition::None => 0,
            Partition::Day => time.div_euclid(DAY_MS),
        };
        // Block times do not go back: a frame dated before the open file's
        // day (a clock step in the node's data) stays in that file.
        let next_day = self.current.as_ref().is_none_or(|(open, _)| day > *open);
        if next_day {
            if let Some((_, file)) = self.current.take() {
                self.written.push(file.finish()?);
            }
            let path = match self.partition {
                Partition::None => self.out.clone(),
                Partition::Day => self.day_path(day),
            };
            let table = views::table(self.view);
            self.current = Some((day, TableFile::create(&path, table, self.format)?));
        }
        if let Some((_, file)) = &mut self.current {
            file.frame(frame)?;
        }
        Ok(())
    }

    /// Rows written so far (the open file's included).
    pub fn rows(&self) -> u64 {
        self.written.iter().map(|w| w.rows).sum::<u64>()
            + self.current.as_ref().map_or(0, |(_, file)| file.rows())
    }

    /// Finishes and names the open file; every file written. A replay
    /// that printed no frame writes an empty table (no file per day).
    ///
    /// # Errors
    /// [`ExportError`] when the last file cannot be finished.
    pub fn finish(mut self) -> Result<Vec<Written>, ExportError> {
        match self.current.take() {
            Some((_, file)) => self.written.push(file.finish()?),
            None if self.partition == Partition::None => {
                let table = views::table(self.view);
                self.written
                    .push(TableFile::create(&self.out, table, self.format)?.finish()?);
            }
            None => {}
        }
        Ok(self.written)
    }
}

impl FrameWriter for FrameTables {
    fn frame(&mut self, frame: &Frame) -> Result<(), ReplayError> {
        self.take(frame)
            .map_err(|e| ReplayError::Output(e.to_string()))
    }

    /// Files are named whole by [`FrameTables::finish`]; nothing to do
    /// before.
    fn flush(&mut self) -> Result<(), ReplayError> {
        Ok(())
    }
}
