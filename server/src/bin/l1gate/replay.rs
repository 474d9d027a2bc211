//! `l1gate replay`: captured node files folded offline, one view's frames as
//! JSON lines, or its table as CSV or Parquet files.

use l1gate::cli::{OutputFormat, ReplayCommand};

pub(crate) fn run(command: ReplayCommand) -> anyhow::Result<()> {
    use std::io::{IsTerminal as _, Write as _};

    let view: engine::replay::ViewKind =
        command
            .view
            .parse()
            .map_err(|unknown: engine::views::registry::UnknownView| {
                engine::replay::ReplayError::UnknownView(unknown.0)
            })?;
    let mut options = engine::replay::ReplayOptions::new(command.data, view);
    options.snapshot = command.snapshot;
    options.checkpoint = command.checkpoint;
    options.from_block = command.from_block;
    options.to_block = command.to_block;
    options.selection.coins = command.coins;
    options.selection.users = command.users;
    options.selection.builder = command.builder;
    options.selection.liquidations = command.liquidations;
    options.selection.n_levels = command.n_levels;
    options.selection.n_sig_figs = command.n_sig_figs;
    options.selection.mantissa = command.mantissa;
    options.selection.strict = command.strict;
    let fail_on_bad_data = command.fail_on_bad_data;
    options.selection.interval = command.interval;

    if command.out.is_none() && command.format != OutputFormat::Jsonl {
        anyhow::bail!(
            "--format {} needs --out PATH (standard output carries JSON lines only)",
            export::Format::from(command.format).extension()
        );
    }
    let terminal = std::io::stderr().is_terminal();
    let mut last_shown = std::time::Instant::now();
    let mut progress = |p: &engine::replay::ReplayProgress| {
        if terminal && last_shown.elapsed() >= std::time::Duration::from_millis(200) {
            last_shown = std::time::Instant::now();
            let _ = write!(
                std::io::stderr(),
                "\rblock {} ({} blocks, {:.1} MB, {} frames)   ",
                p.block,
                p.blocks,
                p.bytes as f64 / 1e6,
                p.frames
            );
        }
    };
    let (summary, written) = match &command.out {
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let summary = engine::replay::run(&options, &mut out, &mut progress)?;
            out.flush()?;
            (summary, Vec::new())
        }
        Some(path) => {
            let mut tables = export::FrameTables::new(
                view,
                command.format.into(),
                command.partition.into(),
                path,
            )?;
            match engine::replay::run(&options, &mut tables, &mut progress) {
                Ok(summary) => (summary, tables.finish()?),
                Err(damage @ engine::replay::ReplayError::Feed(_)) => {
                    // What came before the damaged file's bad line is kept,
                    // as on standard output: the files are whole up to it.
                    for file in tables.finish()? {
                        eprintln!(
                            "wrote {} (up to the damage)",
                            describe(&file, command.format)
                        );
                    }
                    return Err(damage.into());
                }
                // Anything else names no file: what was begun is dropped.
                Err(error) => return Err(error.into()),
            }
        }
    };
    if terminal {
        eprintln!();
    }
    for file in &written {
        eprintln!("wrote {}", describe(file, command.format));
    }
    let unknown: u64 = summary
        .unknown_ids
        .values()
        .map(engine::fold::UnknownIds::total)
        .sum();
    let align = &summary.align;
    let dropped = align.bad_lines + align.duplicates + align.late;
    eprintln!(
        "replayed {} blocks ({}..={}) from snapshot {}: {} events, {} frames, {:.1} MB in {:.2} s ({:.1} MB/s); {} unknown ids, {} decode errors, {} gaps, {} coin resets; {dropped} lines dropped ({} not envelopes, {} duplicates, {} of blocks already folded)",
        summary.blocks,
        summary
            .first_block
            .map_or_else(|| "-".to_owned(), |b| b.to_string()),
        summary
            .last_block
            .map_or_else(|| "-".to_owned(), |b| b.to_string()),
        summary
            .snapshot_height
            .map_or_else(|| "none".to_owned(), |h| h.to_string()),
        summary.events,
        summary.frames,
        summary.bytes as f64 / 1e6,
        summary.elapsed.as_secs_f64(),
        summary.mb_per_s(),
        unknown,
        summary.decode_errors,
        summary.gaps,
        summary.resets.len(),
        align.bad_lines,
        align.duplicates,
        align.late,
    );
    for (coin, ids) in &summary.unknown_ids {
        if ids.total() > 0 {
            eprintln!(
                "  {coin}: {} update/remove for unknown oids, {} new without an opening status",
                ids.unknown_oid, ids.missing_status
            );
        }
    }
    let bad = dropped + summary.decode_errors + summary.gaps;
    if fail_on_bad_data && bad > 0 {
        anyhow::bail!(
            "the files held data the fold could not take as written: {dropped} lines dropped, \
             {} undecodable events, {} gaps (--fail-on-bad-data)",
            summary.decode_errors,
            summary.gaps
        );
    }
    Ok(())
}

/// `PATH: N rows, X MB` (JSON lines: `N frames`).
fn describe(file: &export::writer::Written, format: OutputFormat) -> String {
    let unit = if format == OutputFormat::Jsonl {
        "frames"
    } else {
        "rows"
    };
    format!(
        "{}: {} {unit}, {:.1} MB",
        file.path.display(),
        file.rows,
        file.bytes as f64 / 1e6
    )
}
