//! `l1gate`: market-data engine and access layer beside an exchange-chain
//! node. See `l1gate --help`.

use access::keys::{KeysError, KeysFile};
use anyhow::Context as _;
use clap::Parser as _;
use l1gate::cli::{
    Cli, Command, KeysArgs, KeysCommand, ReplayCommand, ServeCommand, SimMode, SimulateCommand,
};
use l1gate::config;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(serve) => run_serve(*serve),
        Command::Keys(keys) => run_keys(keys),
        Command::Simulate(simulate) => run_simulate(&simulate),
        Command::Replay(replay) => run_replay(replay),
        Command::Endpoints(endpoints) => run_endpoints(*endpoints),
        Command::Routes(routes) => run_routes(*routes),
        Command::Edge(edge) => run_edge(*edge),
        Command::Archive(archive) => Ok(l1gate::archive::run(archive)?),
        Command::Candles(candles) => run_candles(candles),
    }
}

fn run_candles(command: l1gate::cli::CandlesCommand) -> anyhow::Result<()> {
    let l1gate::cli::CandlesAction::Import(args) = command.action;
    let file = match &args.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
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

fn run_edge(command: l1gate::cli::EdgeCommand) -> anyhow::Result<()> {
    let file = match &command.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
    let merged = command.settings.or(file);
    anyhow::ensure!(
        merged.data.is_none() && merged.publish_url.is_none(),
        "edge: `data` and `publish_url` are settings of `l1gate serve`; an edge reads only the bus"
    );
    let url = l1gate::bus::url::BusUrl::parse(&command.nats)
        .map_err(|message| anyhow::anyhow!("--nats: {message}"))?;
    let settings = merged.resolve()?;
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let running = l1gate::bus::edge::start(&url, &settings).await?;
        println!(
            "l1gate edge serving from {url} (market from the checkpoint of block {}): gRPC on {} \
             and HTTP on {}",
            running.started_from, running.server.grpc_addr, running.server.http_addr
        );
        shutdown_signal().await?;
        tracing::info!("shutting down: telling clients, then a last checkpoint and commit");
        let mut running = running;
        running.server.drain().await;
        tokio::task::spawn_blocking(move || drop(running))
            .await
            .context("shutting down")?;
        tracing::info!("stopped");
        Ok(())
    })
}

/// Logs to stderr: the filter from `L1GATE_LOG`, else `RUST_LOG`, else
/// `info`; colours only when stderr is a terminal (files and journals get
/// plain text).
fn init_logging() {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = ["L1GATE_LOG", "RUST_LOG"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .find_map(|name| tracing_subscriber::EnvFilter::try_from_env(name).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let output = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // The status page's recent warnings see what the log shows.
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .with(l1gate::status::warnings::WarningLayer)
        .init();
}

fn run_endpoints(command: l1gate::cli::EndpointsCommand) -> anyhow::Result<()> {
    use l1gate::cli::EndpointsAction;
    use l1gate::registry::{self, Ecosystem, Filter, NodeType, Protocol};
    let file = match &command.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
    let settings = command.settings.or(file).resolve()?;
    let filter = Filter {
        ecosystem: command
            .ecosystem
            .as_deref()
            .and_then(|e| Ecosystem::ALL.into_iter().find(|x| x.as_str() == e)),
        network: command.network.clone(),
        node_type: command.node_type.as_deref().map(|t| {
            if t.eq_ignore_ascii_case("archive") {
                NodeType::Archive
            } else {
                NodeType::Full
            }
        }),
        protocol: command.protocol.as_deref().map(|p| {
            if p == "wss" {
                Protocol::Wss
            } else {
                Protocol::Https
            }
        }),
    };
    let all = registry::chains(
        &settings.chains,
        &settings.public_http_url,
        &settings.public_grpc_url,
        &settings.chain_network,
    );
    let (name, found) = match &command.action {
        EndpointsAction::List => ("list", all),
        EndpointsAction::Search { keyword } => ("search", registry::search(all, keyword)),
        EndpointsAction::Get { chain } => ("get", registry::get(all, chain)),
    };
    let found = registry::filtered(found, &filter);
    if found.is_empty() {
        let what = match &command.action {
            EndpointsAction::List => "no chain".to_owned(),
            EndpointsAction::Search { keyword } => {
                format!("no chain or network matches {}", common::quoted(keyword))
            }
            EndpointsAction::Get { chain } => format!("no chain {}", common::quoted(chain)),
        };
        let message = format!("{what} with the filters given");
        let help = "`l1gate endpoints list` shows every chain; drop a filter to widen the search";
        if command.json {
            println!(
                "{}",
                serde_json::json!({
                    "ok": false,
                    "error": {"code": "not_found", "message": message, "help": help},
                })
            );
        } else {
            eprintln!("not found: {message}\n{help}");
        }
        std::process::exit(1);
    }
    let env_file = match &command.env_file {
        None => None,
        Some(path) => {
            let key = endpoint_key(command.key_env.as_deref(), command.key_stdin)?;
            let lines = registry::env_lines(&found, &key);
            registry::write_env_file(path, &lines)
                .with_context(|| format!("writing the environment file {}", path.display()))?;
            eprintln!(
                "wrote the API key and {} URLs to {} (mode 0600)",
                lines.len() - 1,
                path.display()
            );
            Some(path.display().to_string())
        }
    };
    if command.json {
        let mut body = serde_json::json!({
            "ok": true,
            "data": found,
            "meta": {
                "command": name,
                "timestamp": feeds::time::format_iso8601_ms(common::unix_now_ms()),
            },
        });
        if let Some(path) = env_file {
            body["meta"]["env_file"] = path.into();
        }
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        print!("{}", registry::to_text(&found));
    }
    Ok(())
}

/// The API key for `--env-file`, from `--key-env VAR` or `--key-stdin`.
fn endpoint_key(key_env: Option<&str>, key_stdin: bool) -> anyhow::Result<String> {
    let key = if let Some(var) = key_env {
        std::env::var(var)
            .with_context(|| format!("--key-env: the environment variable {var} is not set"))?
    } else if key_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("--key-stdin: reading standard input")?;
        line
    } else {
        anyhow::bail!(
            "--env-file needs the API key: --key-env VAR (a variable holding it) or --key-stdin \
             (the keys file holds only hashes of keys, and a key on the command line would show \
             in process lists)"
        );
    };
    let key = key.trim().to_owned();
    if key.is_empty() || key.contains(['\n', '\r', '=']) || key.contains(char::is_whitespace) {
        anyhow::bail!("the API key given is empty or not one line without spaces");
    }
    Ok(key)
}

fn run_routes(command: l1gate::cli::RoutesCommand) -> anyhow::Result<()> {
    let file = match &command.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
    let settings = command.settings.or(file).resolve()?;
    let endpoints = l1gate::endpoints::Endpoints::of(&settings)?;
    if command.json {
        println!("{}", serde_json::to_string_pretty(&endpoints)?);
    } else {
        print!("{}", endpoints.to_text());
    }
    Ok(())
}

fn run_serve(command: ServeCommand) -> anyhow::Result<()> {
    let file = match &command.config {
        Some(path) => config::load_file(path)?,
        None => config::ServeArgs::default(),
    };
    let merged = command.settings.or(file);
    let keys_file_given = merged.keys_file.is_some();
    let state_dir_given = merged.state_dir.is_some();
    // Before the settings: the default connection cap follows the limit.
    let raised = access::connections::raise_open_files_limit();
    let mut settings = merged.resolve()?;
    if command.print_config {
        println!("{}", toml::to_string_pretty(&settings)?);
        return Ok(());
    }
    init_logging();
    if let Some((before, after)) = raised.filter(|(before, after)| before != after) {
        tracing::info!(
            before,
            after,
            "raised the open-files limit to its hard limit (a descriptor per connection)"
        );
    }
    // No data directory: demo mode, serving the simulator's live output.
    let demo = if settings.data.is_none() {
        let demo = l1gate::demo::Demo::start(settings.demo_seed, settings.demo_scale)?;
        settings.data = Some(demo.data_dir().to_owned());
        if !keys_file_given {
            demo.keys_file().clone_into(&mut settings.keys_file);
        }
        if !state_dir_given {
            settings.state_dir = demo.data_dir().join("l1gate-state");
        }
        Some(demo)
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let running = l1gate::serve::start(&settings).await?;
        println!(
            "l1gate serving gRPC on {} and HTTP on {}",
            running.grpc_addr, running.http_addr
        );
        if let Some(demo) = &demo {
            if keys_file_given {
                println!(
                    "demo mode: using the keys in {}",
                    settings.keys_file.display()
                );
            } else {
                println!(
                    "{}",
                    l1gate::demo::banner(
                        demo.key(),
                        running.grpc_addr,
                        running.http_addr,
                        demo.data_dir(),
                    )
                );
            }
        }
        shutdown_signal().await?;
        tracing::info!("shutting down: telling clients, then a last checkpoint and commit");
        running.stop().await;
        drop(demo);
        tracing::info!("stopped");
        Ok(())
    })
}

fn run_simulate(command: &SimulateCommand) -> anyhow::Result<()> {
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

/// Resolves on Ctrl-C or SIGTERM, so demo data is cleaned up either way.
async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    Ok(())
}

fn run_keys(args: KeysArgs) -> anyhow::Result<()> {
    let keys_file = args.keys_file;
    // Every change is a read-modify-write under the file's lock: parallel
    // commands never lose each other's changes.
    let edit = |change: &mut dyn FnMut(&mut KeysFile) -> Result<(), KeysError>| {
        KeysFile::edit(&keys_file, |file| change(file))
    };
    match args.command {
        KeysCommand::Add { account } => {
            let mut created = None;
            edit(&mut |file| {
                created = Some(file.add_key(&account, common::unix_now_ms())?);
                Ok(())
            })?;
            let (key, stored) = created.context("no key was created")?;
            println!(
                "created key {} for account {account} in {} (only its SHA-256 is stored; this is the only time it is shown)",
                stored.id,
                keys_file.display()
            );
            println!("{key}");
        }
        KeysCommand::List => list_keys(&KeysFile::load(&keys_file)?),
        KeysCommand::Revoke { key_id } => {
            edit(&mut |file| file.revoke(&key_id))?;
            println!("revoked {key_id}");
        }
        KeysCommand::Allow { key_id, cidr } => {
            let mut added = Vec::with_capacity(cidr.len());
            edit(&mut |file| {
                added.clear();
                for entry in &cidr {
                    added.push(file.allow(&key_id, entry)?);
                }
                Ok(())
            })?;
            println!("{key_id} allows {}", added.join(", "));
        }
        KeysCommand::Limits {
            account,
            requests_per_second,
            request_burst,
            max_streams,
            reset,
        } => {
            let limits = access::keys::AccountLimits {
                requests_per_second,
                request_burst,
                max_streams,
            };
            edit(&mut |file| file.set_limits(&account, limits, reset))?;
            println!("limits of account {account} updated");
        }
        KeysCommand::Role { account, role } => {
            edit(&mut |file| file.set_role(&account, role))?;
            let role = match role {
                access::keys::Role::Admin => "admin",
                access::keys::Role::User => "user",
            };
            println!("account {account} is now {role}");
        }
        KeysCommand::Rotate { key_id, grace } => {
            let now = common::unix_now_ms();
            let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
            let mut created = None;
            edit(&mut |file| {
                created = Some(file.rotate(&key_id, now, grace_ms)?);
                Ok(())
            })?;
            let (key, stored) = created.context("no key was created")?;
            println!(
                "rotated {key_id}: new key {} in {} (same account, allow-list and quota; only its SHA-256 is stored; this is the only time it is shown)",
                stored.id,
                keys_file.display()
            );
            println!(
                "{key_id} keeps working until {} (grace {}), then is refused and its open streams end",
                feeds::time::format_iso8601_ms(now.saturating_add(grace_ms)),
                humantime_short(grace)
            );
            println!("{key}");
        }
        KeysCommand::Quota {
            key_id,
            requests,
            bytes,
            period,
            clear,
        } => {
            let quota = if clear {
                None
            } else {
                let period = period.context("--period is required with --requests or --bytes")?;
                Some(access::quota::Quota {
                    period,
                    requests,
                    bytes,
                })
            };
            edit(&mut |file| file.set_quota(&key_id, quota))?;
            match quota {
                Some(quota) => println!("quota of {key_id}: {}", quota.describe()),
                None => println!("{key_id} has no quota"),
            }
        }
        KeysCommand::Disallow { key_id, cidr } => {
            let mut absent = Vec::new();
            let mut left = Vec::new();
            edit(&mut |file| {
                absent.clear();
                for entry in &cidr {
                    if !file.disallow(&key_id, entry)? {
                        absent.push(entry.clone());
                    }
                }
                left = file
                    .accounts
                    .iter()
                    .flat_map(|a| &a.keys)
                    .find(|k| k.id == key_id)
                    .map_or_else(Vec::new, |k| k.allow_list.clone());
                Ok(())
            })?;
            for entry in absent {
                println!("{key_id} did not list {entry}");
            }
            if left.is_empty() {
                println!("{key_id} has no IP allow-list: usable from any address");
            } else {
                println!("{key_id} allows {}", left.join(", "));
            }
        }
    }
    Ok(())
}

/// A grace period as `keys rotate` takes it (`24h`, `7d`, `90m`, `0s`):
/// days from two days on.
fn humantime_short(duration: std::time::Duration) -> String {
    let secs = duration.as_secs();
    for (unit, size, from) in [("d", 86_400, 172_800), ("h", 3_600, 3_600), ("m", 60, 60)] {
        if secs >= from && secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    if duration.subsec_millis() == 0 {
        format!("{secs}s")
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// `keys list`: accounts with limits, then one line per key: account, id,
/// state (`active`, `revoked`, or `rotated → NEW, grace until TIME` /
/// `grace ended TIME`), creation, allow-list, then `quota=…` and
/// `replaces=OLD` when set.
fn list_keys(file: &KeysFile) {
    let now = common::unix_now_ms();
    for account in &file.accounts {
        let limits = [
            ("requests_per_second", account.requests_per_second),
            ("request_burst", account.request_burst),
            ("max_streams", account.max_streams),
        ];
        if limits.iter().any(|(_, v)| v.is_some()) {
            let shown: Vec<String> = limits
                .iter()
                .map(|(name, value)| {
                    format!(
                        "{name}={}",
                        value.map_or_else(|| "default".to_owned(), |v| v.to_string())
                    )
                })
                .collect();
            println!("{}\tlimits\t{}", account.name, shown.join("\t"));
        }
        if account.role == access::keys::Role::Admin {
            println!("{}\trole\tadmin", account.name);
        }
        for key in &account.keys {
            let state = match &key.rotated {
                _ if key.revoked => "revoked".to_owned(),
                None => "active".to_owned(),
                Some(rotation) => format!(
                    "rotated → {}, grace {} {}",
                    rotation.replaced_by,
                    if now < rotation.grace_until_ms {
                        "until"
                    } else {
                        "ended"
                    },
                    feeds::time::format_iso8601_ms(rotation.grace_until_ms)
                ),
            };
            let allow = if key.allow_list.is_empty() {
                "any".to_owned()
            } else {
                key.allow_list.join(",")
            };
            let quota = key
                .quota
                .map(|quota| format!("\tquota={}", quota.describe()))
                .unwrap_or_default();
            let replaces = key
                .rotated_from
                .as_ref()
                .map(|old| format!("\treplaces={old}"))
                .unwrap_or_default();
            println!(
                "{}\t{}\t{state}\tcreated_ms={}\tallow_list={allow}{quota}{replaces}",
                account.name, key.id, key.created_ms
            );
        }
    }
}

fn run_replay(command: ReplayCommand) -> anyhow::Result<()> {
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

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
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
    let summary = engine::replay::run(&options, &mut out, &mut progress)?;
    out.flush()?;
    if terminal {
        eprintln!();
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
