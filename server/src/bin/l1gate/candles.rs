//! `l1gate candles import`: the candle store from archive hour files;
//! `l1gate candles export`: its candles to a Parquet or CSV file.

use l1gate::cli::{CandlesAction, CandlesExportArgs, CandlesImportArgs};

use crate::init_logging;

pub(crate) fn run(command: l1gate::cli::CandlesCommand) -> anyhow::Result<()> {
    match command.action {
        CandlesAction::Import(args) => import(&args),
        CandlesAction::Export(args) => export(&args),
    }
}

fn export(args: &CandlesExportArgs) -> anyhow::Result<()> {
    let settings = args.store.settings()?;
    let interval = engine::market::candles::Interval::parse(&args.interval).map_err(|_| {
        anyhow::anyhow!(
            "--interval: unknown interval {:?}; one of {}",
            args.interval,
            engine::market::candles::Interval::ALL
                .map(engine::market::candles::Interval::as_str)
                .join(" ")
        )
    })?;
    let from_ms = CandlesExportArgs::time("--from", &args.from).map_err(anyhow::Error::msg)?;
    let to_ms = match &args.to {
        Some(text) => CandlesExportArgs::time("--to", text).map_err(anyhow::Error::msg)?,
        None => common::unix_now_ms(),
    };
    let options = host::candles::export::ExportOptions {
        state_dir: settings.state_dir.clone(),
        history_start_ms: settings.candle_history_start_ms,
        market: args.market.clone(),
        interval,
        from_ms,
        to_ms,
        format: args.format.into(),
        out: args.out.clone(),
    };
    let report = host::candles::export::run(&options)?;
    eprint!("{}", host::candles::export::render(&report, &args.out));
    Ok(())
}

fn import(args: &CandlesImportArgs) -> anyhow::Result<()> {
    let settings = args.store.settings()?;
    init_logging();
    let options = host::candles::import::ImportOptions {
        paths: args.paths.clone(),
        state_dir: settings.state_dir.clone(),
        history_start_ms: settings.candle_history_start_ms,
        commit_every: std::time::Duration::from_millis(args.commit_every_ms),
    };
    let mut bar = host::candles::import::ProgressBar::new(!args.quiet);
    let report = host::candles::import::run(&options, &mut |p| bar.show(p))?;
    bar.finish();
    eprint!("{}", host::candles::import::render_report(&report));
    if report.damaged.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} damaged file(s): their lines before the damage were imported; fetch them again and rerun",
            report.damaged.len()
        )
    }
}
