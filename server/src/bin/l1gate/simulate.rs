//! `l1gate simulate`: the node simulator, writing node files.

use l1gate::cli::{SimMode, SimulateCommand};

pub(crate) fn run(command: &SimulateCommand) -> anyhow::Result<()> {
    use std::io::{IsTerminal as _, Write as _};

    anyhow::ensure!(
        command.scale > 0.0 && command.scale <= 100.0,
        "--scale must be in (0, 100], got {}",
        command.scale
    );
    let mut config = if command.small {
        fixtures::SimConfig::small(command.seed)
    } else {
        fixtures::SimConfig::mainnet(command.seed, command.scale)
    };
    config.scale = command.scale;
    config.mode = match command.mode {
        SimMode::ByBlock => fixtures::OutputMode::ByBlock,
        SimMode::Streaming => fixtures::OutputMode::Streaming,
        SimMode::Both => fixtures::OutputMode::Both,
    };
    config.snapshot_every = (command.snapshot_every > 0).then_some(command.snapshot_every);
    if command.live {
        config.start_time_ms = common::unix_now_ms();
    }
    let run = fixtures::RunOptions {
        blocks: command.blocks,
        duration: command.duration,
        live: command.live,
        ..fixtures::RunOptions::default()
    };
    let terminal = std::io::stderr().is_terminal();
    let total = command.blocks;
    let mut progress = |p: &fixtures::Progress| {
        if !terminal {
            return;
        }
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        let share = total.map_or_else(String::new, |t| {
            format!(" {:5.1}%", 100.0 * p.blocks as f64 / t.max(1) as f64)
        });
        let _ = write!(
            std::io::stderr(),
            "\r{share} block {} ({} blocks, {:.1} MB, {:.0} blocks/s, {:.1} MB/s)   ",
            p.height,
            p.blocks,
            p.bytes as f64 / 1e6,
            p.blocks as f64 / secs,
            p.bytes as f64 / 1e6 / secs
        );
    };
    let summary = fixtures::generate(&config, &command.out, &run, &mut progress)?;
    if terminal {
        eprintln!();
    }
    let secs = summary.elapsed.as_secs_f64().max(1e-9);
    eprintln!(
        "wrote {} blocks ({}..={}) to {}: {:.1} MB in {:.1} s ({:.0} blocks/s, {:.1} MB/s); {} statuses, {} diffs, {} fills, {} snapshots, {} resting orders",
        summary.blocks,
        summary.first_height.unwrap_or(summary.last_height),
        summary.last_height,
        command.out.display(),
        summary.bytes as f64 / 1e6,
        secs,
        summary.blocks as f64 / secs,
        summary.bytes as f64 / 1e6 / secs,
        summary.order_statuses,
        summary.book_diffs,
        summary.fills,
        summary.snapshots.len(),
        summary.resting_orders
    );
    Ok(())
}
