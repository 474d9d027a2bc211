//! `l1gate candles import`: the candle store from archive hour files.

use l1gate::config;

use crate::init_logging;

pub(crate) fn run(command: l1gate::cli::CandlesCommand) -> anyhow::Result<()> {
    let l1gate::cli::CandlesAction::Import(args) = command.action;
    let file = config::load_optional(args.config.as_deref())?;
    let given = config::ServeArgs {
        state_dir: args.state_dir.clone(),
        candle_history_start: args.candle_history_start.clone(),
        ..config::ServeArgs::default()
    };
    let settings = given.or(file).resolve()?;
    init_logging();
    let options = l1gate::candles::import::ImportOptions {
        paths: args.paths.clone(),
        state_dir: settings.state_dir.clone(),
        history_start_ms: settings.candle_history_start_ms,
        commit_every: std::time::Duration::from_millis(args.commit_every_ms),
    };
    let mut bar = l1gate::candles::import::ProgressBar::new(!args.quiet);
    let report = l1gate::candles::import::run(&options, &mut |p| bar.show(p))?;
    bar.finish();
    eprint!("{}", l1gate::candles::import::render_report(&report));
    if report.damaged.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} damaged file(s): their lines before the damage were imported; fetch them again and rerun",
            report.damaged.len()
        )
    }
}
