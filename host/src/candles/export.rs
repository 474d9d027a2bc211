//! `l1gate candles export`: one market's candles of one interval over a
//! time range, from the candle store to a Parquet or CSV file
//! ([`export::candles::TABLE`]).
//!
//! The store keeps `1s`, `1m` and `5m` candles; any other interval is built
//! from the stored one below it as Info builds it (`3m` from `1m`, the rest
//! from `5m`): open of the first part, close of the last, high and low over
//! all, volume and trades summed. Unlike Info, the built candles carry their
//! exact VWAP (Σ px·sz / Σ sz over the parts, which the store keeps). A
//! bucket is `complete` when the store's coverage holds its whole time.
//!
//! The export reads the store under its one-writer lock, as an import
//! does: beside a running server on the same state directory it is
//! refused, naming the lock file (that server's Info `candleSnapshot`
//! answers instead). The file is named only once whole.

use std::path::{Path, PathBuf};

use engine::market::candles::{Candle, Interval};
use export::{ExportError, Format, TableFile};

use super::store::{self, CandleStore, Gap, LookupError, StoreError};

/// Candles read from the store per lookup.
const PAGE: usize = 50_000;

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// The state directory holding the store.
    pub state_dir: PathBuf,
    /// The store's history start (Unix ms), as the server is configured.
    pub history_start_ms: i64,
    /// Market (as the store names it).
    pub market: String,
    /// Interval.
    pub interval: Interval,
    /// First instant (Unix ms): buckets opening at or after the bucket
    /// holding it.
    pub from_ms: i64,
    /// End (Unix ms, exclusive): buckets opening before it.
    pub to_ms: i64,
    /// `Csv` or `Parquet`.
    pub format: Format,
    /// The file to write.
    pub out: PathBuf,
}

/// What an export wrote and what it could not.
#[derive(Debug, Clone)]
pub struct ExportReport {
    /// The file.
    pub written: export::writer::Written,
    /// Candles written that are not complete.
    pub incomplete: u64,
    /// Stretches of the range the store does not cover, `[from, to)`.
    pub uncovered: Vec<(i64, i64)>,
    /// Known gaps touching the range.
    pub gaps: Vec<Gap>,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CandleExportError {
    /// No store in the state directory.
    #[error(
        "candles export: no candle store in {0} (a server or `l1gate candles import` makes one)"
    )]
    NoStore(PathBuf),
    /// The store cannot be opened (held by a server, unreadable, …).
    #[error("candles export: {0}")]
    Store(#[from] StoreError),
    /// A lookup failed (a damaged chunk, an unreadable file).
    #[error("candles export: {0}")]
    Lookup(#[from] LookupError),
    /// The market is not in the store.
    #[error("candles export: no candles of {0:?} in the store")]
    UnknownMarket(String),
    /// The request is not one the export can answer.
    #[error("candles export: {0}")]
    Usage(String),
    /// The file could not be written.
    #[error("candles export: {0}")]
    Export(#[from] ExportError),
}

/// Exports `options`' candles.
///
/// # Errors
/// [`CandleExportError`]: no store, the store held by a server, an unknown
/// market, an empty range, a damaged chunk, a file that cannot be written.
pub fn run(options: &ExportOptions) -> Result<ExportReport, CandleExportError> {
    if options.format == Format::Jsonl {
        return Err(CandleExportError::Usage(
            "--format: csv or parquet".to_owned(),
        ));
    }
    if options.to_ms <= options.from_ms {
        return Err(CandleExportError::Usage("--to: after --from".to_owned()));
    }
    if !options.state_dir.join(store::FILE_NAME).exists() {
        return Err(CandleExportError::NoStore(options.state_dir.clone()));
    }
    let (store, _recovery) = CandleStore::open(&options.state_dir, options.history_start_ms)?;
    let reader = store.reader();
    if !reader.knows(&options.market) {
        return Err(CandleExportError::UnknownMarket(options.market.clone()));
    }
    let interval = options.interval;
    let part = super::stored_under(interval);
    let from = interval.bucket_open(options.from_ms);
    let to = options.to_ms;
    let coverage = reader.coverage();
    let mut file = TableFile::create(&options.out, &export::candles::TABLE, options.format)?;
    let mut built: Option<Candle> = None;
    let mut incomplete = 0;
    let mut write = |candle: &Candle| -> Result<(), ExportError> {
        let complete = coverage
            .holding(candle.open_time, candle.next_open)
            .is_some()
            && coverage
                .gap_touching(candle.open_time, candle.next_open)
                .is_none();
        incomplete += u64::from(!complete);
        let mut update = candle.to_update(true);
        update.close_time = candle.next_open - 1;
        file.row(&export::candles::cells(&update, complete))
    };
    let mut at = from;
    while at < to {
        let page = reader.range(&options.market, part, at, to, PAGE, false)?;
        let Some(last) = page.last() else { break };
        at = last.open_time + 1;
        let full = page.len() == PAGE;
        for stored in &page {
            let candle = stored.candle(&options.market);
            if part == interval {
                write(&candle)?;
                continue;
            }
            let open = interval.bucket_open(candle.open_time);
            match &mut built {
                Some(sum) if sum.open_time == open => add(sum, &candle).ok_or_else(|| {
                    ExportError::Usage(format!(
                        "the {} candle opening at {} sums beyond 38 digits",
                        interval.as_str(),
                        feeds::time::format_iso8601_ms(open)
                    ))
                })?,
                _ => {
                    if let Some(done) = built.take() {
                        write(&done)?;
                    }
                    built = Some(Candle {
                        interval,
                        open_time: open,
                        next_open: interval.next_open(open),
                        ..candle
                    });
                }
            }
        }
        if !full {
            break;
        }
    }
    if let Some(done) = built.take() {
        write(&done)?;
    }
    let written = file.finish()?;
    Ok(ExportReport {
        written,
        incomplete,
        uncovered: coverage.uncovered(from, to),
        gaps: coverage
            .gaps
            .iter()
            .filter(|gap| gap.touches(from, to))
            .cloned()
            .collect(),
    })
}

/// Folds the later part `next` into the built candle `sum`; `None` when
/// its sums overflow (`sum` is then unchanged).
fn add(sum: &mut Candle, next: &Candle) -> Option<()> {
    let volume = sum.volume.checked_add(next.volume)?;
    let notional = sum.notional.checked_add(next.notional)?;
    sum.volume = volume;
    sum.notional = notional;
    sum.high = sum.high.max(next.high);
    sum.low = sum.low.min(next.low);
    sum.close = next.close;
    sum.trades_count += next.trades_count;
    sum.price_scale = sum.price_scale.max(next.price_scale);
    Some(())
}

/// The report's lines for the terminal.
pub fn render(report: &ExportReport, path: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "wrote {}: {} candles ({} incomplete), {:.1} MB\n",
        path.display(),
        report.written.rows,
        report.incomplete,
        report.written.bytes as f64 / 1e6
    );
    for (from, to) in &report.uncovered {
        let _ = writeln!(
            out,
            "  not in the store: {} to {}",
            feeds::time::format_iso8601_ms(*from),
            feeds::time::format_iso8601_ms(*to)
        );
    }
    for gap in &report.gaps {
        let _ = writeln!(
            out,
            "  known gap: {} to {}: {}",
            feeds::time::format_iso8601_ms(gap.from_ms),
            feeds::time::format_iso8601_ms(gap.to_ms),
            gap.reason
        );
    }
    out
}
