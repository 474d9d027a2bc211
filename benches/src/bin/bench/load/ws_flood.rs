//! A WebSocket flood beside a neighbour: how long one client's 1,001 subscribes take with the
//! server quiet, and while other connections flood it with messages it must refuse.
//!
//! `cargo run --release -p benches -- load ws_flood [--flooders 50] [--runs 3] [--scale X]
//! [--no-write]`
//!
//! A simulator (`SimConfig::mainnet`, scale 1 by default) appends blocks to a node directory at
//! mainnet pace; the server runs in a process of its own (the `l1gate` binary) with default
//! settings.
//!
//! - **Neighbour**: one WebSocket connection sends 1,001 distinct `l2Book` subscriptions back to
//!   back (the most active coins, each with `nSigFigs` unset, 5 (also with `mantissa` 2), 4, 3
//!   and 2) and reads until each
//!   has its answer — a `subscriptionResponse`, or an `error` for the one past the
//!   1,000 subscriptions a connection may hold. Timed from its first send to its last answer.
//! - **Flood**: `--flooders` connections, each sending invalid JSON as fast as the server takes
//!   it; the server closes such a connection (close code 4004) once it has refused 50 messages
//!   in a minute, and the flooder connects again at once and goes on, as an abuser would.
//!
//! Each `--runs` times (median): the neighbour alone, then the neighbour once the flood has run
//! for a second. Target: the 1,001 subscribes answered in under 2 s during the flood.
//!
//! Rewrites the `ws_flood` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::LiveNode;
use benches::server::{ServerOptions, ServerProcess};
use fixtures::SimConfig;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

/// Subscriptions the neighbour sends: one past what a connection may hold.
const SUBSCRIBES: usize = 1_001;
/// The target: every subscribe answered within this, during the flood.
const TARGET: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
#[command(
    about = "A WebSocket flood beside a neighbour's 1,001 subscribes",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Connections flooding the server with invalid JSON.
    #[arg(long, default_value_t = 50)]
    flooders: usize,
    /// Runs of each phase (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

/// What the flooders met while they ran.
#[derive(Debug, Default)]
struct FloodTally {
    /// Messages sent.
    sent: AtomicU64,
    /// `error` frames received.
    errors: AtomicU64,
    /// Connections the server closed with 4004.
    closed_4004: AtomicU64,
    /// Connections that ended otherwise (another close code, a reset).
    ended_otherwise: AtomicU64,
}

/// One flooder: connects, sends invalid JSON until the connection ends, connects again.
async fn flood(url: String, stop: Arc<AtomicBool>, tally: Arc<FloodTally>) {
    while !stop.load(Ordering::Acquire) {
        let Ok((socket, _)) = tokio_tungstenite::connect_async(url.as_str()).await else {
            tally.ended_otherwise.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (mut sink, mut stream) = socket.split();
        let reader = {
            let tally = Arc::clone(&tally);
            tokio::spawn(async move {
                while let Some(message) = stream.next().await {
                    match message {
                        Ok(Message::Text(_)) => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Message::Close(frame)) => {
                            let code = frame.map(|f| u16::from(f.code));
                            let counter = if code == Some(4004) {
                                &tally.closed_4004
                            } else {
                                &tally.ended_otherwise
                            };
                            counter.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                tally.ended_otherwise.fetch_add(1, Ordering::Relaxed);
            })
        };
        while !stop.load(Ordering::Acquire) && !reader.is_finished() {
            if sink.send(Message::Text("{not json".into())).await.is_err() {
                break;
            }
            tally.sent.fetch_add(1, Ordering::Relaxed);
        }
        let _ = sink.close().await;
        let _ = reader.await;
    }
}

/// The neighbour's 1,001 subscribes: the time to the last answer, and how many were accepted.
async fn neighbour(url: &str, coins: &[String]) -> anyhow::Result<(Duration, usize)> {
    let (mut socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .context("neighbour: connect")?;
    let subscriptions: Vec<serde_json::Value> = coins
        .iter()
        .flat_map(|coin| {
            [
                None,
                Some((5, None)),
                Some((5, Some(2))),
                Some((4, None)),
                Some((3, None)),
                Some((2, None)),
            ]
            .map(|aggregation| {
                let mut subscription = serde_json::json!({"type": "l2Book", "coin": coin});
                if let Some((figures, mantissa)) = aggregation {
                    subscription["nSigFigs"] = figures.into();
                    if let Some(mantissa) = mantissa {
                        subscription["mantissa"] = mantissa.into();
                    }
                }
                subscription
            })
        })
        .take(SUBSCRIBES)
        .collect();
    if subscriptions.len() < SUBSCRIBES {
        bail!(
            "{} coins make {} distinct subscriptions, not {SUBSCRIBES}",
            coins.len(),
            subscriptions.len()
        );
    }
    let started = Instant::now();
    for subscription in &subscriptions {
        let message = serde_json::json!({"method": "subscribe", "subscription": subscription});
        socket
            .send(Message::Text(message.to_string().into()))
            .await
            .context("neighbour: send")?;
    }
    let (mut answered, mut accepted) = (0, 0);
    while answered < SUBSCRIBES {
        let message = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .context("neighbour: no answer within 60 s")?
            .context("neighbour: the connection ended")??;
        let Message::Text(text) = message else {
            continue;
        };
        if text.contains("\"channel\":\"subscriptionResponse\"") {
            answered += 1;
            accepted += 1;
        } else if text.contains("\"channel\":\"error\"") {
            answered += 1;
        }
    }
    let elapsed = started.elapsed();
    let _ = socket.close(None).await;
    Ok((elapsed, accepted))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let l1gate = args.server.path()?;
    if args.runs == 0 || args.flooders == 0 {
        bail!("--runs and --flooders must be positive");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!(
        "ws_flood: generating the starting state (scale {})",
        args.scale
    );
    let node = LiveNode::start(&cfg, 50, 1.0, 200_000)?;
    let coins = node.top_coins(SUBSCRIBES.div_ceil(6));
    let server = ServerProcess::spawn(
        &l1gate,
        node.path(),
        &ServerOptions {
            poll_ms: None,
            ring: None,
            ..ServerOptions::default()
        },
    )?;
    let url = format!("ws://{}/{}/ws", server.http_addr, server.keys.key);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut quiet, mut flooded) = (Vec::new(), Vec::new());
    let mut accepted = Vec::new();
    let tally = Arc::new(FloodTally::default());
    let mut flood_seconds = 0.0;
    for run in 1..=args.runs {
        let (alone, took) = runtime.block_on(neighbour(&url, &coins))?;
        eprintln!("ws_flood: run {run}: neighbour alone {alone:?} ({took} accepted)");
        quiet.push(alone);
        accepted.push(took);
        let stop = Arc::new(AtomicBool::new(false));
        let flooding = Instant::now();
        let tasks: Vec<_> = (0..args.flooders)
            .map(|_| runtime.spawn(flood(url.clone(), Arc::clone(&stop), Arc::clone(&tally))))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let measured = runtime.block_on(neighbour(&url, &coins));
        stop.store(true, Ordering::Release);
        for task in tasks {
            runtime.block_on(task)?;
        }
        flood_seconds += flooding.elapsed().as_secs_f64();
        let (beside, took) = measured?;
        eprintln!("ws_flood: run {run}: neighbour beside the flood {beside:?} ({took} accepted)");
        flooded.push(beside);
        accepted.push(took);
    }
    drop(server);
    node.stop()?;

    let (quiet, flooded) = (
        benches::median_duration(&quiet),
        benches::median_duration(&flooded),
    );
    let sent = tally.sent.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let closed = tally.closed_4004.load(Ordering::Relaxed);
    let otherwise = tally.ended_otherwise.load(Ordering::Relaxed);
    let mut body = String::new();
    let _ = writeln!(body, "## WebSocket flood beside a neighbour (`ws_flood`)\n");
    body.push_str(&machine.markdown(&command));
    let _ = writeln!(
        body,
        "- Data: simulator `SimConfig::mainnet(seed 1, scale {})` appended at mainnet pace; the server in its own process, default settings.",
        args.scale
    );
    let _ = writeln!(
        body,
        "- Neighbour: one connection sends {SUBSCRIBES} distinct `l2Book` subscriptions back to back and reads every answer (the last is refused: a connection holds at most 1,000). Flood: {} connections sending invalid JSON as fast as the server takes it, each connecting again when closed. {} runs, median.\n",
        args.flooders, args.runs
    );
    let _ = writeln!(
        body,
        "| Neighbour's {SUBSCRIBES} subscribes | answered in |"
    );
    let _ = writeln!(body, "|---|---:|");
    let _ = writeln!(body, "| alone | {:.3} s |", quiet.as_secs_f64());
    let _ = writeln!(
        body,
        "| beside the flood | {:.3} s ({:.2}× alone) |\n",
        flooded.as_secs_f64(),
        flooded.as_secs_f64() / quiet.as_secs_f64().max(f64::MIN_POSITIVE)
    );
    let _ = writeln!(
        body,
        "Flooders over {flood_seconds:.1} s of flood: {sent} messages sent, {errors} error frames received, {closed} connections closed with 4004 (too many refused messages), {otherwise} ended otherwise; accepted subscriptions per neighbour run: {accepted:?}.\n"
    );
    let verdict = if flooded < TARGET { "met" } else { "not met" };
    let _ = writeln!(
        body,
        "Target: the neighbour's {SUBSCRIBES} subscribes answered in under {} s during the flood. This run: {:.3} s — {verdict}.",
        TARGET.as_secs(),
        flooded.as_secs_f64()
    );
    print!("{body}");
    if !args.no_write {
        benches::write_section(&benches::benchmarks_md(), "ws_flood", &body)?;
        eprintln!("ws_flood: wrote the ws_flood section of benches/BENCHMARKS.md");
    }
    Ok(())
}
