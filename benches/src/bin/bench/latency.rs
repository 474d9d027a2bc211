//! End-to-end market-streaming latency: from the instant a block's lines are appended to the
//! node files to the instant a gRPC client has decoded the frame carrying that block.
//!
//! `cargo run --release -p benches -- latency [--seconds S] [--rates 1,10]
//! [--polls default,5] [--loads quiet,open-orders,l4-subscribes] [--load-rates 1] [--scale X]
//! [--no-write]`
//!
//! A simulator (`SimConfig::mainnet`, scale 1 by default) appends blocks to a node directory
//! (by-block layout, every line flushed) at each `--rates` multiple of mainnet pace (≈ 14.8
//! blocks/s), recording per block number the instant its last line was written. The server
//! runs in a process of its own (the `l1gate` binary, `benches::server`) with default settings: its engine thread
//! is woken by the file watcher as the node writes (`poll_interval_ms` is only the backup poll,
//! 1000 ms by default). `--polls` adds runs with `poll_interval_ms` set (`default` = unset, the
//! headline; numbers in ms), each on a fresh server.
//!
//! On one client connection, one stream each of `StreamBbo` (the 20 most active coins),
//! `StreamL2Book` (the most active coin, 20 levels), `StreamTrades` (the 20 most active coins)
//! and `StreamL4OrderUpdates` (every coin), and beside them, as the same-run reference, the raw
//! feed's `VenueL1Gateway/StreamFills` live tail, unfiltered: the same appends read back with no
//! fold (notification + read + gRPC, the floor of the market streams). Each reads for S seconds
//! per (server, rate); every frame after the opening one is matched by `block_number` to its
//! append instant (same process, same monotonic clock: the end of the block's append for market
//! frames; its start for fills records, since the writer appends the fills line first) and its
//! latency goes into an hdrhistogram per stream.
//!
//! After the server runs, with the writer stopped, the machine's own floor ([`benches::floor`]):
//! the same number of appends as one window at the 1× interval, each timed from its write to
//! its receipt through two thread wake-ups and a loopback TCP hop with no l1gate code — what
//! any live path on this machine costs before it does anything; then the gRPC floor
//! ([`benches::floor::measure_grpc`]): the same appends carried by a tonic server-streaming call
//! between two tokio runtimes, still with no l1gate code — what any gRPC stream costs here.
//!
//! `--loads` repeats each (server, rate) window beside other clients' load ([`Load`]), started
//! once every stream has its opening frame and run through the window: three accounts each
//! asking Info `openOrders` for the user with the most resting orders at their whole default
//! rate, or WebSocket `l4Book` subscribers of a small book arriving and leaving at 1,000 a
//! second (see [`LoadTargets::of`]); `--load-rates` limits those windows to some rates (the
//! report runs them at 1×, where their targets are). Each window also reads the engine
//! thread's CPU time (`/proc/PID/task/TID/schedstat`), per block folded.
//!
//! Prints the table and rewrites the `latency` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::floor::Floor;
use benches::live::{self, AppendLog, LiveNode, Numbered};
use benches::load::{LoadRun, LoadTally};
use benches::server::{ServerOptions, ServerProcess};
use benches::sys::CpuTime;
use fixtures::SimConfig;
use hdrhistogram::Histogram;
use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::Streaming;

/// Targets of the brief, in ms: at mainnet pace (1×) p50 and p99, at 10× p99, for every
/// market view.
pub(crate) const TARGET_P50_1X_MS: f64 = 0.5;
pub(crate) const TARGET_P99_1X_MS: f64 = 2.0;
const TARGET_P99_10X_MS: f64 = 10.0;
/// Beside other clients' load, the BBO and L2 book streams' p50 and p99 at most this many
/// times the quiet window's.
pub(crate) const TARGET_BESIDE_RATIO: f64 = 1.2;
/// Mainnet blocks per second of the simulator's profile.
const MAINNET_BLOCKS_PER_S: f64 = 14.8;
/// Pause between the last opening frame and the measured window.
const SETTLE: Duration = Duration::from_secs(2);
/// Longest wait for a stream's opening frame.
const OPEN_WAIT: Duration = Duration::from_secs(60);
/// The reference stream's name.
const RAW_STREAM: &str = "StreamFills (raw feed, live tail, unfiltered)";

/// Info requests a second an account may make by default (`requests_per_second`).
const DEFAULT_REQUESTS_PER_S: f64 = 50.0;
/// Accounts of the `openOrders` load.
const OPEN_ORDERS_ACCOUNTS: usize = 3;
/// `l4Book` subscribes a second of the subscribe load, and the connections sharing them (each
/// within the per-connection message budget of 2,000 a minute: a subscribe and an unsubscribe
/// per turn).
const L4_SUBSCRIBES_PER_S: f64 = 1000.0;
const L4_CONNECTIONS: usize = 100;
/// Fewest resting orders of the book the subscribe load asks for.
const L4_MIN_ORDERS: usize = 50;
/// The engine thread's name.
const ENGINE_THREAD: &str = "l1gate-engine";
/// The child process that runs a load's clients (`bench child latency-load …`).
pub(crate) const LOAD_CHILD: &str = "latency-load";

/// Other clients' load beside a window, named on the command line in kebab case (`quiet`,
/// `open-orders`, `l4-subscribes`) by `--loads` and the load's child (`--kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Load {
    /// None: the headline.
    Quiet,
    /// [`OPEN_ORDERS_ACCOUNTS`] accounts each asking Info `openOrders` at the default rate.
    OpenOrders,
    /// WebSocket `l4Book` subscribers arriving and leaving.
    L4Subscribes,
}

impl Load {
    fn label(self) -> &'static str {
        match self {
            Load::Quiet => "quiet",
            Load::OpenOrders => "openOrders ×3 accounts",
            Load::L4Subscribes => "l4Book subscribes",
        }
    }
}

/// What a load needs to know of the market: the user whose `openOrders` it asks, the coin
/// whose `l4Book` it subscribes to.
struct LoadTargets {
    user: String,
    user_orders: usize,
    l4_coin: String,
    l4_orders: usize,
}

impl LoadTargets {
    /// The user with the most resting orders in the starting snapshot, and the perp (`l4Book`
    /// serves perps) with the smallest book of at least [`L4_MIN_ORDERS`] orders: 1,000 snapshots a second of a deep
    /// book are more bytes than two cores carry over loopback beside everything else (the raw
    /// feed, which the engine never touches, slows as much as the market views then), so the
    /// load would measure the machine's bandwidth, not what subscribes cost the engine thread.
    fn of(snapshot: &std::path::Path, coins: &[String]) -> anyhow::Result<Self> {
        let parsed = engine::snapshot::parse(&std::fs::read(snapshot)?)?;
        let mut per_user: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (_, book) in parsed.books.iter() {
            for order in book.orders() {
                *per_user.entry(order.user.as_str()).or_default() += 1;
            }
        }
        let (user, user_orders) = per_user
            .into_iter()
            .max_by_key(|&(user, n)| (n, std::cmp::Reverse(user)))
            .context("the starting snapshot has no order")?;
        let (l4_coin, l4_orders) = parsed
            .books
            .iter()
            .map(|(coin, book)| (coin, book.len()))
            .filter(|&(coin, n)| n >= L4_MIN_ORDERS && engine::coin::is_perp(coin))
            .min_by_key(|&(coin, n)| (n, coin))
            .map(|(coin, n)| (coin.to_owned(), n))
            .or_else(|| coins.first().map(|coin| (coin.clone(), 0)))
            .context("no coin")?;
        Ok(Self {
            user: user.to_owned(),
            user_orders,
            l4_coin,
            l4_orders,
        })
    }

    /// Starts `load`'s clients in a process of their own ([`LOAD_CHILD`]): other clients are
    /// other processes, and on this process's runtime their tasks would queue beside the
    /// measured streams' readers.
    fn start(&self, load: Load, server: &ServerProcess) -> anyhow::Result<LoadRun> {
        let Some(args) = self.child_args(load, server.http_addr, &server.keys.load_keys)? else {
            return Ok(LoadRun::none());
        };
        let child = benches::child(LOAD_CHILD)
            .context("own executable")?
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .context("the load's process")?;
        Ok(LoadRun::in_child(child))
    }

    /// The arguments of `load`'s child ([`LoadChildArgs`]) against the server at `addr`, its
    /// accounts taken from `keys`; none for the quiet window.
    fn child_args(
        &self,
        load: Load,
        addr: std::net::SocketAddr,
        keys: &[String],
    ) -> anyhow::Result<Option<Vec<String>>> {
        let too_few = || anyhow::anyhow!("too few load accounts");
        let what = match load {
            Load::Quiet => return Ok(None),
            Load::OpenOrders => {
                let keys = keys.get(..OPEN_ORDERS_ACCOUNTS).ok_or_else(too_few)?;
                [
                    ("--keys", keys.join(",")),
                    ("--user", self.user.clone()),
                    ("--per-s", DEFAULT_REQUESTS_PER_S.to_string()),
                ]
                .to_vec()
            }
            Load::L4Subscribes => {
                let key = keys.get(OPEN_ORDERS_ACCOUNTS).ok_or_else(too_few)?;
                [
                    ("--keys", key.clone()),
                    ("--coin", self.l4_coin.clone()),
                    ("--per-s", L4_SUBSCRIBES_PER_S.to_string()),
                    ("--connections", L4_CONNECTIONS.to_string()),
                ]
                .to_vec()
            }
        };
        let all = [
            (
                "--kind",
                clap::ValueEnum::to_possible_value(&load)
                    .context("--kind")?
                    .get_name()
                    .to_owned(),
            ),
            ("--addr", addr.to_string()),
        ]
        .into_iter()
        .chain(what);
        Ok(Some(
            all.flat_map(|(flag, value)| [flag.to_owned(), value])
                .collect(),
        ))
    }
}

/// CPU time over one window, seconds.
#[derive(Debug, Clone, Copy)]
struct WindowCpu {
    /// The server's engine thread (`schedstat`).
    engine: f64,
    /// The whole server process (`utime + stime`, every thread).
    server: f64,
    /// The load's clients, in their own process (`utime + stime`).
    load: f64,
    /// This process: the node's writer and the measured streams' readers (`utime + stime`).
    harness: f64,
    /// The whole machine, busy (every CPU, all but idle and iowait, `/proc/stat`), of it
    /// stolen by the hypervisor, and the CPU time there was (window × CPUs).
    machine_busy: f64,
    machine_steal: f64,
    machine_all: f64,
    /// The window's length.
    window: f64,
}

impl WindowCpu {
    /// `server / load / this process / machine busy`, in cores, the machine's cores, and the
    /// cores' worth stolen.
    fn cores(&self) -> String {
        let cores = |s: f64| s / self.window.max(f64::EPSILON);
        format!(
            "{:.2} / {:.2} / {:.2} / {:.2} of {:.0} ({:.2} stolen)",
            cores(self.server),
            cores(self.load),
            cores(self.harness),
            cores(self.machine_busy),
            cores(self.machine_all),
            cores(self.machine_steal)
        )
    }
}

/// What one window's load and engine thread did.
struct Beside {
    load: Load,
    poll: Poll,
    rate: f64,
    tally: LoadTally,
    seconds: f64,
    /// CPU time in the window: the engine thread's, the server's, this process's, the machine's.
    cpu: WindowCpu,
    /// Blocks folded in the window (the all-coins L4 stream's frames: one per block).
    blocks: u64,
}

/// `poll_interval_ms` of one server: `None` = the server's default (the headline).
type Poll = Option<u64>;

fn poll_label(poll: Poll) -> String {
    poll.map_or_else(|| "default".to_owned(), |ms| ms.to_string())
}

/// The server configuration in prose.
fn config_text(poll: Poll) -> String {
    poll.map_or_else(
        || "default settings".to_owned(),
        |ms| format!("`poll_interval_ms` = {ms}"),
    )
}

#[derive(Debug, clap::Args)]
#[command(
    about = "End-to-end market-streaming latency: node file append to decoded gRPC frame",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Seconds each stream reads per (server, rate, load).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Multiples of mainnet pace the simulator appends at, comma-separated.
    // `std::vec::Vec`: the whole list is one value, parsed by the `value_parser`.
    #[arg(long, value_parser = rates, default_value = "1,10")]
    rates: std::vec::Vec<f64>,
    /// `poll_interval_ms` of each server, comma-separated (`default`: unset; numbers in ms).
    #[arg(long, value_parser = polls, default_value = "default")]
    polls: std::vec::Vec<Poll>,
    /// Loads beside each window, comma-separated: quiet, open-orders, l4-subscribes.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "quiet")]
    loads: Vec<Load>,
    /// The rates at which the loads other than `quiet` run, comma-separated (default: every
    /// rate of `--rates`).
    #[arg(long, value_parser = rates)]
    load_rates: Option<std::vec::Vec<f64>>,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
    /// Skip the default server over TLS (measured at the first rate, quiet, beside the
    /// plain one).
    #[arg(long)]
    no_tls: bool,
}

fn list<T: std::str::FromStr>(flag: &str, value: &str) -> anyhow::Result<Vec<T>> {
    value
        .split(',')
        .map(|v| v.trim().parse::<T>())
        .collect::<Result<Vec<T>, _>>()
        .map_err(|_| anyhow::anyhow!("{flag}: a comma-separated list of numbers, got {value:?}"))
}

fn polls(value: &str) -> anyhow::Result<Vec<Poll>> {
    value
        .split(',')
        .map(|v| match v.trim() {
            "default" => Ok(None),
            ms => match ms.parse::<u64>() {
                Ok(0) | Err(_) => bail!(
                    "--polls: `default` or a poll_interval_ms of at least 1, comma-separated; got {v:?}"
                ),
                Ok(ms) => Ok(Some(ms)),
            },
        })
        .collect()
}

/// `--rates` as [`list`] reads it.
fn rates(value: &str) -> anyhow::Result<Vec<f64>> {
    list("--rates", value)
}

/// From which append instant of a block a frame's latency counts: the write of the last line
/// it derives from — for market frames the last of the block's order statuses, raw book diffs
/// and fills ([`AppendLog::since_folded`]: the engine folds a block once those are written),
/// for the raw fills records the fills line ([`AppendLog::since_fills`]).
type Since = fn(&AppendLog, u64, Instant) -> Option<Duration>;

/// Counts its opening frame in `opened`, then reads `stream` while `measuring` is set,
/// recording the latency (from the append instant `since` picks) of every frame after the
/// opening one.
async fn measure<T: Numbered>(
    stream: Result<tonic::Response<Streaming<T>>, tonic::Status>,
    since: Since,
    log: Arc<AppendLog>,
    measuring: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> anyhow::Result<Measured> {
    let mut stream = stream
        .map_err(|s| anyhow::anyhow!("open: {s}"))?
        .into_inner();
    let opening = tokio::time::timeout(OPEN_WAIT, stream.message())
        .await
        .context("no opening frame")??
        .context("ended before its opening frame")?
        .block();
    opened.fetch_add(1, Ordering::AcqRel);
    let mut out = Measured {
        frames: 0,
        early: 0,
        histogram: live::histogram()?,
    };
    let started = Instant::now();
    while !measuring.load(Ordering::Acquire) {
        // The window has not opened yet; frames before it are not counted.
        if started.elapsed() > OPEN_WAIT {
            bail!("the measuring window never opened");
        }
        tokio::select! {
            message = stream.message() => { message?.context("ended")?; }
            () = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    loop {
        tokio::select! {
            message = stream.message() => {
                let frame = message?.context("ended")?;
                let now = Instant::now();
                if !measuring.load(Ordering::Acquire) {
                    return Ok(out);
                }
                if frame.block() <= opening {
                    continue;
                }
                if let Some(latency) = since(&log, frame.block(), now) {
                    out.frames += 1;
                    live::record(&mut out.histogram, latency);
                } else if log.since_first_line(frame.block(), now).is_some() {
                    // The writer began this block but had not yet noted the write this frame
                    // derives from: its thread was descheduled between the write and the clock.
                    out.early += 1;
                }
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                if !measuring.load(Ordering::Acquire) {
                    return Ok(out);
                }
            }
        }
    }
}

/// What one stream read in the window.
struct Measured {
    /// Frames timed (in the histogram).
    frames: u64,
    /// Frames that arrived before the writer noted the end of their block's append (not timed).
    early: u64,
    /// Latency, µs.
    histogram: Histogram<u64>,
}

struct Row {
    poll: Poll,
    rate: f64,
    load: Load,
    stream: &'static str,
    /// The raw feed reference (no fold), not a market view.
    reference: bool,
    frames: u64,
    early: u64,
    seconds: f64,
    histogram: Histogram<u64>,
}

impl Row {
    /// The row of `stream`'s measurement on the server of `poll`, at `rate`, beside `load`.
    fn of(
        poll: Poll,
        rate: f64,
        load: Load,
        stream: &'static str,
        measured: Measured,
        seconds: f64,
    ) -> Self {
        Self {
            poll,
            rate,
            load,
            stream,
            reference: stream == RAW_STREAM,
            frames: measured.frames,
            early: measured.early,
            seconds,
            histogram: measured.histogram,
        }
    }

    fn percentiles(&self) -> [f64; 5] {
        live::percentiles_ms(&self.histogram)
    }
}

/// One stream's reader task: its name and what it returns.
type Task = (
    &'static str,
    tokio::task::JoinHandle<anyhow::Result<Measured>>,
);

/// One window: what each stream measured (with the window's seconds), and what the load and
/// the engine thread did in it.
type Window = (
    Vec<(&'static str, Measured, f64)>,
    LoadTally,
    f64,
    WindowCpu,
);

async fn window(
    server: &ServerProcess,
    log: &Arc<AppendLog>,
    coins: &[String],
    seconds: f64,
    load: (Load, &LoadTargets),
) -> anyhow::Result<Window> {
    let channel = server.channel(4 << 20).await?;
    let client = MarketStreamingClient::new(channel.clone()).max_decoding_message_size(256 << 20);
    let raw = VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20);
    let measuring = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let top20: Vec<String> = coins.iter().take(20).cloned().collect();
    let mut tasks: Vec<Task> = Vec::new();
    let shared = || (Arc::clone(log), Arc::clone(&measuring), Arc::clone(&opened));
    {
        let (mut c, (log, m, o)) = (client.clone(), shared());
        let request = server.request(pb::BboRequest {
            coins: top20.clone(),
        })?;
        tasks.push((
            "StreamBbo (20 coins)",
            tokio::spawn(async move {
                measure(
                    c.stream_bbo(request).await,
                    AppendLog::since_folded,
                    log,
                    m,
                    o,
                )
                .await
            }),
        ));
    }
    {
        let (mut c, (log, m, o)) = (client.clone(), shared());
        let request = server.request(pb::L2BookRequest {
            coin: coins[0].clone(),
            ..pb::L2BookRequest::default()
        })?;
        tasks.push((
            "StreamL2Book (1 coin, 20 levels)",
            tokio::spawn(async move {
                measure(
                    c.stream_l2_book(request).await,
                    AppendLog::since_folded,
                    log,
                    m,
                    o,
                )
                .await
            }),
        ));
    }
    {
        let (mut c, (log, m, o)) = (client.clone(), shared());
        let request = server.request(pb::TradesRequest { coins: top20 })?;
        tasks.push((
            "StreamTrades (20 coins)",
            tokio::spawn(async move {
                measure(
                    c.stream_trades(request).await,
                    AppendLog::since_folded,
                    log,
                    m,
                    o,
                )
                .await
            }),
        ));
    }
    {
        let (mut c, (log, m, o)) = (client.clone(), shared());
        let request = server.request(pb::L4OrderUpdatesRequest::default())?;
        tasks.push((
            "StreamL4OrderUpdates (all coins)",
            tokio::spawn(async move {
                measure(
                    c.stream_l4_order_updates(request).await,
                    AppendLog::since_folded,
                    log,
                    m,
                    o,
                )
                .await
            }),
        ));
    }
    {
        // The reference: no position = the live tail; no filter. Its "opening" is simply the
        // first record after the call, which is not counted either. A fills record's latency
        // counts from the write of its block's fills line.
        let (mut c, (log, m, o)) = (raw, shared());
        let request = server.request(pb::StreamRequest::default())?;
        tasks.push((
            RAW_STREAM,
            tokio::spawn(async move {
                measure(
                    c.stream_fills(request).await,
                    AppendLog::since_fills,
                    log,
                    m,
                    o,
                )
                .await
            }),
        ));
    }
    // Every stream opens (the all-coins L4 opening is a snapshot of every resting order, which
    // holds the engine thread while it is built), then the backlog drains before the window.
    let started = Instant::now();
    while opened.load(Ordering::Acquire) < tasks.len() {
        if let Some(i) = tasks.iter().position(|(_, t)| t.is_finished()) {
            let (name, task) = tasks.swap_remove(i);
            let why = match task.await {
                Ok(Ok(_)) => "it ended".to_owned(),
                Ok(Err(error)) => format!("{error:#}"),
                Err(error) => error.to_string(),
            };
            bail!("{name} did not open: {why}");
        }
        if started.elapsed() > OPEN_WAIT {
            bail!("a stream did not open within {} s", OPEN_WAIT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The load starts once every stream is open and runs through the settling and the window.
    let running = load.1.start(load.0, server)?;
    let engine = benches::sys::thread_named(server.pid(), ENGINE_THREAD)?
        .with_context(|| format!("no thread named {ENGINE_THREAD} in the server"))?;
    tokio::time::sleep(SETTLE).await;
    let cpu_before = CpuTime::of_thread(server.pid(), engine)?;
    let server_before = CpuTime::of_process(server.pid())?;
    let harness_before = CpuTime::of_process(std::process::id())?;
    let load_cpu = || running.process_id().map(CpuTime::of_process).transpose();
    let load_before = load_cpu()?;
    let machine_before = benches::sys::MachineTicks::now()?;
    measuring.store(true, Ordering::Release);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    measuring.store(false, Ordering::Release);
    let engine_s = CpuTime::of_thread(server.pid(), engine)?
        .since(&cpu_before)
        .best_s();
    let server_s = CpuTime::of_process(server.pid())?
        .since(&server_before)
        .ticks_s;
    let harness_s = CpuTime::of_process(std::process::id())?
        .since(&harness_before)
        .ticks_s;
    let load_s = load_cpu()?
        .zip(load_before)
        .map_or(0.0, |(after, before)| after.since(&before).ticks_s);
    let machine_after = benches::sys::MachineTicks::now()?;
    let seconds = window.elapsed().as_secs_f64();
    let machine_s = |pick: fn(benches::sys::MachineTicks) -> u64| {
        pick(machine_after).saturating_sub(pick(machine_before)) as f64
            / benches::sys::USER_HZ as f64
    };
    let cpu = WindowCpu {
        engine: engine_s,
        server: server_s,
        load: load_s,
        harness: harness_s,
        machine_busy: machine_s(|ticks| ticks.busy),
        machine_steal: machine_s(|ticks| ticks.steal),
        machine_all: machine_s(|ticks| ticks.all),
        window: seconds,
    };
    let (tally, load_seconds) = running.finish().await?;
    let mut out = Vec::new();
    for (name, task) in tasks {
        let measured = task.await?.with_context(|| name.to_owned())?;
        out.push((name, measured, seconds));
    }
    Ok((out, tally, load_seconds, cpu))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let l1gate = args.server.path()?;
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(args.seconds) || !args.rates.iter().all(|&r| positive(r)) {
        bail!("--seconds and --rates must be positive");
    }
    if args.rates.is_empty() || args.polls.is_empty() || args.loads.is_empty() {
        bail!("--rates, --polls and --loads need at least one value");
    }
    if fixtures::WRITE_ORDER.first() != Some(&feeds::Source::Fills) {
        bail!(
            "the simulator's writer no longer appends fills first ({:?}): the raw feed reference would be timed from the wrong line",
            fixtures::WRITE_ORDER
        );
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let load_before = live::load_average();
    let cfg = SimConfig::mainnet(1, args.scale);
    eprintln!(
        "latency: generating the starting state (scale {})",
        args.scale
    );
    let node = LiveNode::start(&cfg, 50, args.rates[0], 200_000)?;
    let coins = node.top_coins(20);
    let targets = LoadTargets::of(&node.snapshot, &coins)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    let mut besides = Vec::new();
    for &poll in &args.polls {
        eprintln!(
            "latency: server with poll_interval_ms = {}",
            poll_label(poll)
        );
        // Catch up at the slowest pace: a server that cannot follow the fastest one would
        // never report ready.
        node.set_speedup(args.rates.iter().copied().fold(f64::INFINITY, f64::min));
        let server = ServerProcess::spawn(
            &l1gate,
            node.path(),
            &ServerOptions {
                poll_ms: poll,
                ring: None,
                ..ServerOptions::default()
            },
        )?;
        let loaded_at = |rate: f64| {
            args.load_rates
                .as_ref()
                .is_none_or(|rates| rates.iter().any(|&r| same(r, rate)))
        };
        for (&rate, &load) in args
            .rates
            .iter()
            .flat_map(|rate| args.loads.iter().map(move |load| (rate, load)))
            .filter(|&(&rate, &load)| load == Load::Quiet || loaded_at(rate))
        {
            node.set_speedup(rate);
            let (measured, tally, load_seconds, cpu) = runtime.block_on(window(
                &server,
                &node.log,
                &coins,
                args.seconds,
                (load, &targets),
            ))?;
            let mut blocks = 0;
            for (stream, m, seconds) in measured {
                let [p50, _, p99, _, _] = live::percentiles_ms(&m.histogram);
                eprintln!(
                    "latency: poll {}, {rate}×, {}, {stream}: {} frames ({} early), p50 {p50:.3} ms, p99 {p99:.3} ms",
                    poll_label(poll),
                    load.label(),
                    m.frames,
                    m.early
                );
                if stream.starts_with("StreamL4OrderUpdates") {
                    blocks = m.frames + m.early;
                }
                rows.push(Row::of(poll, rate, load, stream, m, seconds));
            }
            eprintln!(
                "latency: {}: {} sent, {} answered, {} refused, {} failed{}; engine thread {:.1} ms CPU for {blocks} blocks; CPU cores, server / load / harness / machine: {}",
                load.label(),
                tally.sent,
                tally.answered,
                tally.refused,
                tally.failed,
                tally
                    .failure
                    .as_deref()
                    .map(|f| format!(" (first: {f})"))
                    .unwrap_or_default(),
                cpu.engine * 1000.0,
                cpu.cores(),
            );
            besides.push(Beside {
                load,
                poll,
                rate,
                tally,
                seconds: load_seconds,
                cpu,
                blocks,
            });
        }
        drop(server);
    }
    let mut tls_rows = Vec::new();
    if !args.no_tls {
        let rate = args.rates[0];
        eprintln!("latency: the default server over TLS, {rate}×, quiet");
        node.set_speedup(rate);
        let server = ServerProcess::spawn(
            &l1gate,
            node.path(),
            &ServerOptions {
                tls: true,
                ..ServerOptions::default()
            },
        )?;
        let (measured, ..) = runtime.block_on(window(
            &server,
            &node.log,
            &coins,
            args.seconds,
            (Load::Quiet, &targets),
        ))?;
        tls_rows.extend(
            measured
                .into_iter()
                .map(|(stream, m, seconds)| Row::of(None, rate, Load::Quiet, stream, m, seconds)),
        );
        drop(server);
    }
    drop(runtime);
    let written = node.stop()?;
    // The machine's own floor, with the writer and the server gone: as many appends as one
    // server run's window holds at 1×, at the 1× interval.
    let appends = (args.seconds * MAINNET_BLOCKS_PER_S).ceil().max(20.0) as u32;
    eprintln!("latency: machine floor, {appends} appends");
    let scratch = tempfile::tempdir()?;
    let interval = Duration::from_secs_f64(1.0 / MAINNET_BLOCKS_PER_S);
    let floor = benches::floor::measure(scratch.path(), appends, interval)?;
    eprintln!("latency: gRPC floor, {appends} appends");
    let grpc_floor = benches::floor::measure_grpc(scratch.path(), appends, interval)?;

    let mut s = render(
        args,
        &machine,
        &command,
        &load_before,
        written,
        (&rows, &besides, &targets),
        [&floor, &grpc_floor],
    );
    s.push_str(&render_tls(&rows, &tls_rows));
    println!("{s}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "latency", &s)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the latency section of {}", path.display());
    }
    // The headline rows are the quiet windows'; the loads' ratios are in the section.
    benches::summary::emit(&Summary {
        rows: rows
            .iter()
            .filter(|r| r.load == Load::Quiet)
            .map(|r| {
                let [p50, _, p99, _, _] = r.percentiles();
                SummaryRow {
                    poll_ms: r.poll,
                    rate: r.rate,
                    stream: r.stream.to_owned(),
                    reference: r.reference,
                    frames: r.frames,
                    p50_ms: p50,
                    p99_ms: p99,
                    curve: benches::summary::curve(&r.histogram, 0.001),
                }
            })
            .collect(),
        machine_floor: floor_summary(&floor),
        grpc_floor: floor_summary(&grpc_floor),
        beside: beside_ratios(&rows)
            .into_iter()
            .filter(|v| v.poll.is_none())
            .map(|v| SummaryBeside {
                rate: v.rate,
                load: v.load.label().to_owned(),
                stream: v.stream.to_owned(),
                p50_ratio: v.p50,
                p99_ratio: v.p99,
            })
            .collect(),
    })?;
    Ok(())
}

/// A floor's appends and percentiles, as the text shows them.
fn floor_figures(floor: &Floor) -> String {
    let [p50, p90, p99, _, max] = live::percentiles_ms(&floor.histogram);
    let early = if floor.early > 0 {
        format!(" ({} early, not timed)", floor.early)
    } else {
        String::new()
    };
    format!(
        "{} appends at the 1× interval: p50 {p50:.3} ms, p90 {p90:.3} ms, p99 {p99:.3} ms, max {max:.3} ms{early}",
        floor.appends()
    )
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// One row per (server configuration, rate, stream) measured in a quiet window.
    pub(crate) rows: Vec<SummaryRow>,
    /// The machine's floor: append → inotify → read → loopback TCP, no l1gate code.
    pub(crate) machine_floor: SummaryFloor,
    /// The same through a tonic stream between two tokio runtimes, no l1gate code.
    pub(crate) grpc_floor: SummaryFloor,
    /// The BBO, L2 book and raw feed streams beside each load, against the quiet window
    /// (none when the run had no load; absent from the summaries of older runs).
    #[serde(default)]
    pub(crate) beside: Vec<SummaryBeside>,
}

/// One stream beside one load, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryBeside {
    /// Append rate, × mainnet.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) rate: f64,
    /// The load, as the section names it.
    pub(crate) load: String,
    /// `StreamBbo`, `StreamL2Book`, or the raw feed's `StreamFills`.
    pub(crate) stream: String,
    /// p50 beside the load ÷ p50 in the quiet window.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p50_ratio: f64,
    /// The same at p99.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p99_ratio: f64,
}

/// One stream of one server at one rate, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryRow {
    /// The server's `poll_interval_ms`; `None` for default settings.
    pub(crate) poll_ms: Option<u64>,
    /// Append rate, × mainnet.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) rate: f64,
    /// The stream (market view, or the raw feed's).
    pub(crate) stream: String,
    /// Whether this is the raw feed reference (no fold) rather than a market view.
    pub(crate) reference: bool,
    /// Frames timed.
    pub(crate) frames: u64,
    /// Append → frame p50, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p50_ms: f64,
    /// Append → frame p99, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p99_ms: f64,
    /// The distribution, `(quantile, ms)` (see `benches::summary::curve`).
    pub(crate) curve: Vec<(f64, f64)>,
}

/// A floor's percentiles, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryFloor {
    /// Append → received p50, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p50_ms: f64,
    /// Append → received p99, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) p99_ms: f64,
}

/// A floor's percentiles for the summary.
fn floor_summary(floor: &Floor) -> SummaryFloor {
    let [p50, _, p99, _, _] = live::percentiles_ms(&floor.histogram);
    SummaryFloor {
        p50_ms: p50,
        p99_ms: p99,
    }
}

/// The worst (p50, p99) over the market views of `poll` at `rate` with frames, and the view
/// with the worst p99.
fn worst_view(rows: &[Row], poll: Poll, rate: f64) -> Option<(f64, f64, &'static str)> {
    rows.iter()
        .filter(|r| r.poll == poll && r.load == Load::Quiet && same(r.rate, rate))
        .filter(|r| !r.reference && r.frames > 0)
        .fold(None, |worst, r| {
            let [p50, _, p99, _, _] = r.percentiles();
            Some(match worst {
                None => (p50, p99, r.stream),
                Some((a, b, name)) => (
                    a.max(p50),
                    b.max(p99),
                    if p99 > b { r.stream } else { name },
                ),
            })
        })
}

/// The reference row of `poll` at `rate`, if it has frames.
fn reference(rows: &[Row], poll: Poll, rate: f64) -> Option<&Row> {
    rows.iter()
        .filter(|r| r.poll == poll && r.load == Load::Quiet && same(r.rate, rate))
        .find(|r| r.reference && r.frames > 0)
}

/// Whether two rates are the same multiple of mainnet pace.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Each stream of the default server over TLS beside the same stream of the plain default
/// server at the same rate, quiet.
fn render_tls(rows: &[Row], tls_rows: &[Row]) -> String {
    let mut s = String::new();
    if tls_rows.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### Over TLS\n\nThe default server again, with TLS on both addresses (a certificate of the \
         harness's own authority, the client trusting it), at {}×, quiet, beside the plain default \
         server's rows of this run. Append → decoded frame, ms.\n",
        tls_rows[0].rate
    );
    let _ = writeln!(
        s,
        "| stream | frames | plain p50 | TLS p50 | plain p99 | TLS p99 | TLS / plain p50 |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    for tls in tls_rows {
        let Some(plain) = rows.iter().find(|r| {
            r.poll.is_none()
                && same(r.rate, tls.rate)
                && r.load == Load::Quiet
                && r.stream == tls.stream
        }) else {
            continue;
        };
        let ([p50, _, p99, _, _], [t50, _, t99, _, _]) = (plain.percentiles(), tls.percentiles());
        let _ = writeln!(
            s,
            "| {} | {} | {p50:.3} | {t50:.3} | {p99:.3} | {t99:.3} | {:.2}× |",
            tls.stream,
            tls.frames,
            t50 / p50
        );
    }
    s
}

fn render(
    args: &Args,
    machine: &benches::Machine,
    command: &str,
    load_before: &str,
    written: u64,
    (rows, besides, targets): (&[Row], &[Beside], &LoadTargets),
    [floor, grpc_floor]: [&Floor; 2],
) -> String {
    let mut s = String::from("## End-to-end latency, append → client (`latency`)\n\n");
    s.push_str(&machine.markdown(command));
    s.push_str(&live::load_line(load_before, machine.cores));
    let _ = writeln!(
        s,
        "- Data: simulator `SimConfig::mainnet(seed 1, scale {})`, by-block layout, every line flushed; {written} live blocks appended at {} × mainnet pace ({MAINNET_BLOCKS_PER_S} blocks/s); {}",
        args.scale,
        args.rates
            .iter()
            .map(|r| format!("{r}"))
            .collect::<Vec<_>>()
            .join(" and "),
        live::WRITER_PACING
    );
    let extra = args.polls.iter().any(Option::is_some);
    let _ = writeln!(
        s,
        "- Server: the `l1gate` binary in a process of its own with default settings{}: the engine thread is woken by the file watcher when the node writes (`poll_interval_ms` is only its backup poll, 1000 ms by default). One client connection in the harness process carries every stream of a run.",
        if extra {
            " (and, as an extra, a fresh server per `poll_interval_ms` set in the table)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "- Reference, same run, same appends: the raw feed's `VenueL1Gateway/StreamFills` live tail, unfiltered (no position, no filter) — file notification + read + gRPC with no fold, the floor under the market streams. The writer appends a block's lines in the order fills, raw book diffs, order statuses, misc events, TWAP statuses (then `replica_cmds`); a fills record's latency counts from the write of its fills line, a market frame's from the write of the block's order statuses (the last line the engine folds)."
    );
    let _ = writeln!(
        s,
        "- Latency: the writer finishing the last line a frame derives from — for the market views the last of the block's order statuses, raw book diffs and fills lines (the engine folds a block once those are written; misc events, TWAP statuses and `replica_cmds` feed no market view and are written after them), for the reference the block's fills line — → the client decoding a frame (record) with that `block_number` (same process, monotonic clock); opening frames are not counted; the window opens 2 s after every stream has its opening frame; {} s per (server, rate). `early`: frames decoded before the writer thread had read the clock after that write (it was descheduled in between), so they cannot be timed and are left out of the percentiles; frames/s counts them\n",
        args.seconds
    );
    let _ = writeln!(
        s,
        "| poll_interval_ms | rate | load | stream | frames | early | frames/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let [p50, p90, p99, p999, max] = r.percentiles();
        let _ = writeln!(
            s,
            "| {} | {}× | {} | {}{} | {} | {} | {:.1} | {p50:.3} | {p90:.3} | {p99:.3} | {p999:.3} | {max:.3} |",
            poll_label(r.poll),
            r.rate,
            r.load.label(),
            r.stream,
            if r.reference { " — reference" } else { "" },
            r.frames,
            r.early,
            (r.frames + r.early) as f64 / r.seconds,
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "- The machine's floor, same run, after the server runs (no l1gate code: an append wakes a reader thread blocked on inotify, which reads the line and sends it over loopback TCP to a receiver thread; `benches/src/floor.rs`), {}.",
        floor_figures(floor)
    );
    let _ = writeln!(
        s,
        "- The gRPC floor, same run, after it (still no l1gate code: a tonic server-streaming call whose response stream waits on the inotify descriptor in the server's tokio runtime, read by a tonic client on a runtime of its own, both with `TCP_NODELAY`; `benches/src/floor.rs`), {}. No gRPC frame can arrive sooner than this; a market frame also waits for its block's fold.",
        floor_figures(grpc_floor)
    );
    let verdict = |value: f64, target: f64| if value <= target { "met" } else { "not met" };
    let ratio = |value: f64, reference: Option<&Row>, q: usize| {
        reference.map_or_else(String::new, |r| {
            let rv = r.percentiles()[q];
            format!(" (raw feed {rv:.3} ms: {:.2}×)", value / rv)
        })
    };
    for &poll in &args.polls {
        let config = config_text(poll);
        if let Some((p50, p99, worst)) = worst_view(rows, poll, 1.0) {
            let raw = reference(rows, poll, 1.0);
            let _ = writeln!(
                s,
                "- Targets at 1× with {config}, worst market view: p50 ≤ {:.0} µs — {:.0} µs{}, {}; p99 ≤ {TARGET_P99_1X_MS} ms — {p99:.3} ms{} ({worst}), {}.",
                TARGET_P50_1X_MS * 1000.0,
                p50 * 1000.0,
                ratio(p50, raw, 0),
                verdict(p50, TARGET_P50_1X_MS),
                ratio(p99, raw, 2),
                verdict(p99, TARGET_P99_1X_MS),
            );
        }
        // The one-coin price views, which are folded and published before the rest of the
        // block.
        let book_views: Vec<&Row> = rows
            .iter()
            .filter(|r| r.poll == poll && r.load == Load::Quiet && same(r.rate, 1.0))
            .filter(|r| r.frames > 0 && PRICE_VIEWS.iter().any(|n| r.stream.starts_with(n)))
            .collect();
        if !book_views.is_empty() {
            let figures = |q: usize| {
                book_views
                    .iter()
                    .map(|r| format!("{} {:.3} ms", r.stream, r.percentiles()[q]))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let worst = |q: usize| {
                book_views
                    .iter()
                    .map(|r| r.percentiles()[q])
                    .fold(0.0, f64::max)
            };
            let _ = writeln!(
                s,
                "- Targets at 1× with {config}, BBO and L2 book: p50 ≤ {:.0} µs — {}, {}; p99 ≤ {TARGET_P99_1X_MS} ms — {}, {}.",
                TARGET_P50_1X_MS * 1000.0,
                figures(0),
                verdict(worst(0), TARGET_P50_1X_MS),
                figures(2),
                verdict(worst(2), TARGET_P99_1X_MS),
            );
        }
        if let Some((_, p99, worst)) = worst_view(rows, poll, 10.0) {
            let raw = reference(rows, poll, 10.0);
            let _ = writeln!(
                s,
                "- Target at 10× with {config}, worst market view: p99 ≤ {TARGET_P99_10X_MS} ms — {p99:.3} ms{} ({worst}), {}.",
                ratio(p99, raw, 2),
                verdict(p99, TARGET_P99_10X_MS),
            );
        }
    }
    // What the fold, the views and the fan-out add over the raw feed's path.
    for &rate in &args.rates {
        let poll = args.polls[0];
        let Some(raw) = reference(rows, poll, rate) else {
            continue;
        };
        let mut p50s: Vec<f64> = rows
            .iter()
            .filter(|r| r.poll == poll && r.load == Load::Quiet && same(r.rate, rate))
            .filter(|r| !r.reference && r.frames > 0)
            .map(|r| r.percentiles()[0])
            .collect();
        p50s.sort_by(f64::total_cmp);
        let Some(&median) = p50s.get(p50s.len() / 2) else {
            continue;
        };
        let machine = live::percentiles_ms(&floor.histogram)[0];
        let grpc = live::percentiles_ms(&grpc_floor.histogram)[0];
        let raw_p50 = raw.percentiles()[0];
        let added = median - raw_p50;
        let _ = writeln!(
            s,
            "- Where the time goes at {rate}× ({}): the machine's floor p50 is {machine:.3} ms, the gRPC floor's {grpc:.3} ms; the raw feed's p50 is {raw_p50:.3} ms (its fills line appended → record decoded: notification, read, gRPC); the median market view's p50 is {median:.3} ms (the block's order statuses, raw book diffs and fills appended → frame decoded). {}",
            config_text(poll),
            if added > 0.0 {
                format!(
                    "The engine thread's fold, the views and their fan-out add about {added:.3} ms over the raw path at the median."
                )
            } else {
                "The market path is no slower than the raw path at the median: notification, read and gRPC dominate.".to_owned()
            }
        );
    }
    for r in rows
        .iter()
        .filter(|r| r.stream.starts_with("StreamL4OrderUpdates"))
    {
        // Every block carries order updates, so this stream gets one frame per block folded.
        let offered = r.rate * MAINNET_BLOCKS_PER_S;
        let delivered = (r.frames + r.early) as f64 / r.seconds;
        if delivered < 0.9 * offered {
            let _ = writeln!(
                s,
                "- At {}× with {}, {}: {delivered:.1} of {offered:.1} blocks/s folded and delivered — the server fell behind the writer, so those latencies are mostly queueing.",
                r.rate,
                config_text(r.poll),
                r.load.label()
            );
        }
    }
    if besides.iter().any(|b| b.load != Load::Quiet) {
        render_loads(&mut s, rows, besides, targets);
    }
    s
}

/// The one-coin price views (their streams' names begin so), whose latency has targets of its
/// own, quiet and beside a load.
pub(crate) const PRICE_VIEWS: [&str; 2] = ["StreamBbo", "StreamL2Book"];

/// The raw feed reference's name, as [`BesideRatio`] and the summary give it.
pub(crate) const RAW_VIEW: &str = "StreamFills";

/// One of [`PRICE_VIEWS`] or the raw feed ([`RAW_VIEW`], which no engine work delays) beside a
/// load, over the same stream in the quiet window of the
/// same server and rate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BesideRatio {
    load: Load,
    poll: Poll,
    rate: f64,
    /// The stream's name, as in [`PRICE_VIEWS`] or [`RAW_VIEW`].
    stream: &'static str,
    /// p50 beside the load ÷ p50 quiet.
    p50: f64,
    /// p99 beside the load ÷ p99 quiet.
    p99: f64,
}

/// Every [`BesideRatio`] the rows give, in the rows' order.
fn beside_ratios(rows: &[Row]) -> Vec<BesideRatio> {
    let name = |r: &Row| {
        PRICE_VIEWS
            .into_iter()
            .chain([RAW_VIEW])
            .find(|name| r.stream.starts_with(name))
    };
    rows.iter()
        .filter(|r| r.load != Load::Quiet && r.frames > 0)
        .filter_map(|r| {
            let stream = name(r)?;
            let q = rows.iter().find(|q| {
                q.load == Load::Quiet
                    && q.poll == r.poll
                    && same(q.rate, r.rate)
                    && q.frames > 0
                    && name(q) == Some(stream)
            })?;
            let ([p50, _, p99, _, _], [q50, _, q99, _, _]) = (r.percentiles(), q.percentiles());
            Some(BesideRatio {
                load: r.load,
                poll: r.poll,
                rate: r.rate,
                stream,
                p50: p50 / q50,
                p99: p99 / q99,
            })
        })
        .collect()
}

/// The windows beside other clients' load: what the load did, the engine thread's CPU per
/// block, and the BBO and L2 book streams against the quiet window of the same server and rate.
fn render_loads(s: &mut String, rows: &[Row], besides: &[Beside], targets: &LoadTargets) {
    let _ = writeln!(
        s,
        "\n### Beside other clients' load\n\n- Loads, started once every stream has its opening frame and run through the settling and the window: `openOrders ×3 accounts` = {OPEN_ORDERS_ACCOUNTS} accounts (a key each, default limits) each asking Info `openOrders` for `{}` (the user with the most resting orders at the start, {}) at {DEFAULT_REQUESTS_PER_S} requests/s, their whole default rate, on a keep-alive HTTP/1.1 connection each, accepting gzip and deflate as the exchange's Python SDK does; `l4Book subscribes` = {L4_CONNECTIONS} WebSocket connections sharing {L4_SUBSCRIBES_PER_S} subscribes/s to `l4Book` of {} ({} resting orders at the start), each subscribing, reading the snapshot, unsubscribing and reading the answer per turn, the connections' turns spread evenly over each second (in phase, the subscribes would arrive as {} bursts of {L4_CONNECTIONS} a second: a different load).\n- Engine thread CPU: `/proc/PID/task/TID/schedstat` of `{ENGINE_THREAD}` over the window ÷ the blocks folded in it (the all-coins L4 stream's frames, one per block). The load's clients run in a process of their own (this binary re-run as its child `latency-load`), as other clients are other processes. CPU in cores over the window: the server process and the load's (`utime + stime` of every thread), the harness (this process: the node's writer and the measured streams' readers) and the whole machine (`/proc/stat`, all but idle and iowait) of the cores it has; in brackets, how much of that the hypervisor took for other machines (`steal`): a window with much of it ran on a slower machine than the others, and other processes than these three may have run too.\n",
        targets.user,
        targets.user_orders,
        targets.l4_coin,
        targets.l4_orders,
        L4_SUBSCRIBES_PER_S / L4_CONNECTIONS as f64
    );
    let _ = writeln!(
        s,
        "| rate | load | requests/s | answered | refused | failed | answer p50 ms | answer p99 ms | engine µs per block | CPU, cores: server / load / harness / machine (stolen) | BBO p50 / p99 ms (× quiet) | L2 p50 / p99 ms (× quiet) | raw feed p50 / p99 ms (× quiet) |"
    );
    let _ = writeln!(
        s,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"
    );
    let verdicts = beside_ratios(rows);
    let stream = |b: &Beside, name: &str| {
        rows.iter().find(|r| {
            r.load == b.load
                && r.poll == b.poll
                && same(r.rate, b.rate)
                && r.stream.starts_with(name)
        })
    };
    let quiet = |b: &Beside| {
        besides
            .iter()
            .find(|q| q.load == Load::Quiet && q.poll == b.poll && same(q.rate, b.rate))
    };
    for b in besides {
        let per_block = |b: &Beside| b.cpu.engine * 1e6 / b.blocks.max(1) as f64;
        let cell = |name: &str| {
            let Some(r) = stream(b, name) else {
                return "–".to_owned();
            };
            let [p50, _, p99, _, _] = r.percentiles();
            let ratio = verdicts.iter().find(|v| {
                v.load == b.load && v.poll == b.poll && same(v.rate, b.rate) && v.stream == name
            });
            match ratio {
                Some(v) => format!("{p50:.3} / {p99:.3} ({:.2}× / {:.2}×)", v.p50, v.p99),
                None => format!("{p50:.3} / {p99:.3}"),
            }
        };
        let [a50, _, a99, _, _] = live::percentiles_ms(&b.tally.answer);
        let (bbo, l2, raw) = (cell(PRICE_VIEWS[0]), cell(PRICE_VIEWS[1]), cell(RAW_VIEW));
        let _ = writeln!(
            s,
            "| {}× | {} | {:.1} | {} | {} | {}{} | {} | {} | {:.1}{} | {} | {bbo} | {l2} | {raw} |",
            b.rate,
            b.load.label(),
            b.tally.sent as f64 / b.seconds,
            b.tally.answered,
            b.tally.refused,
            b.tally.failed,
            b.tally
                .failure
                .as_deref()
                .map(|f| format!(" (first: {})", f.replace('|', "/")))
                .unwrap_or_default(),
            if b.load == Load::Quiet {
                "–".to_owned()
            } else {
                format!("{a50:.3}")
            },
            if b.load == Load::Quiet {
                "–".to_owned()
            } else {
                format!("{a99:.3}")
            },
            per_block(b),
            quiet(b)
                .filter(|_| b.load != Load::Quiet)
                .map(|q| format!(" ({:.2}× quiet)", per_block(b) / per_block(q)))
                .unwrap_or_default(),
            b.cpu.cores(),
        );
    }
    let _ = writeln!(s);
    let reference = |of: &BesideRatio| {
        verdicts
            .iter()
            .find(|v| {
                v.load == of.load
                    && v.poll == of.poll
                    && same(v.rate, of.rate)
                    && v.stream == RAW_VIEW
            })
            .map(|v| (v.p50, v.p99))
    };
    for view in verdicts.iter().filter(|v| v.stream != RAW_VIEW) {
        let BesideRatio {
            load,
            rate,
            stream: name,
            p50,
            p99,
            ..
        } = view;
        let raw = reference(view).map_or_else(String::new, |(r50, r99)| {
            format!(
                "; the raw feed, which no engine work delays, {r50:.2}× / {r99:.2}× in the same window{}",
                if *p99 > TARGET_BESIDE_RATIO && r99 >= 0.8 * p99 {
                    ": the frames are held up where the raw feed's are too, which no engine work touches (the table's CPU column gives how busy the server, the load and the machine were)"
                } else {
                    ""
                }
            )
        });
        let _ = writeln!(
            s,
            "- Target: {name} at {rate}× beside `{}` within {TARGET_BESIDE_RATIO}× of the quiet window at p50 and p99 — {p50:.2}× / {p99:.2}×, {}{raw}.",
            load.label(),
            if *p50 <= TARGET_BESIDE_RATIO && *p99 <= TARGET_BESIDE_RATIO {
                "met"
            } else {
                "not met"
            }
        );
    }
}

/// The load's clients ([`LOAD_CHILD`]): runs until its standard input closes, then prints
/// its tally ([`LoadTally::to_json`]).
#[derive(Debug, clap::Args)]
struct LoadChildArgs {
    /// The load: open-orders or l4-subscribes.
    #[arg(long, value_enum)]
    kind: Load,
    /// The server's HTTP address.
    #[arg(long)]
    addr: std::net::SocketAddr,
    /// The load accounts' keys, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    keys: Vec<String>,
    /// The account whose open orders are asked (open-orders).
    #[arg(long)]
    user: Option<String>,
    /// The coin whose `l4Book` is subscribed (l4-subscribes).
    #[arg(long)]
    coin: Option<String>,
    /// Requests (or subscribes) a second.
    #[arg(long)]
    per_s: f64,
    /// WebSocket connections sharing the subscribes (l4-subscribes).
    #[arg(long, default_value_t = L4_CONNECTIONS)]
    connections: usize,
}

pub(crate) fn load_child(args: &[String]) -> anyhow::Result<()> {
    let args: LoadChildArgs = crate::parse(LOAD_CHILD, args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (tally, seconds) = runtime.block_on(async {
        let running = match args.kind {
            Load::OpenOrders => benches::load::open_orders(
                args.addr,
                &args.keys,
                &args.user.context("--user")?,
                args.per_s,
            ),
            Load::L4Subscribes => benches::load::l4_subscribes(
                args.addr,
                args.keys.first().context("--keys")?,
                &args.coin.context("--coin")?,
                args.per_s,
                args.connections,
            ),
            Load::Quiet => bail!("--kind: open-orders or l4-subscribes, got quiet"),
        };
        running.until_input_closes().await
    })?;
    println!("{}", tally.to_json(seconds)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loads_child_reads_the_arguments_its_harness_gives() {
        let targets = LoadTargets {
            user: "0xcc0a".into(),
            user_orders: 28_177,
            l4_coin: "cash:USTECH".into(),
            l4_orders: 1_088,
        };
        let addr: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let keys: Vec<String> = (0..4).map(|k| format!("key{k}")).collect();
        let child = |load| -> LoadChildArgs {
            let args = targets.child_args(load, addr, &keys).unwrap().unwrap();
            crate::parse(LOAD_CHILD, &args).unwrap()
        };
        let orders = child(Load::OpenOrders);
        assert_eq!(orders.kind, Load::OpenOrders);
        assert_eq!(
            (orders.addr, orders.keys.len()),
            (addr, OPEN_ORDERS_ACCOUNTS)
        );
        assert_eq!(orders.user.as_deref(), Some("0xcc0a"));
        assert!((orders.per_s - DEFAULT_REQUESTS_PER_S).abs() < 1e-9);
        let storm = child(Load::L4Subscribes);
        assert_eq!(storm.kind, Load::L4Subscribes);
        assert_eq!(storm.keys, vec!["key3".to_owned()]);
        assert_eq!(storm.coin.as_deref(), Some("cash:USTECH"));
        assert_eq!(storm.connections, L4_CONNECTIONS);
        assert!(
            targets
                .child_args(Load::Quiet, addr, &keys)
                .unwrap()
                .is_none()
        );
        assert!(
            targets
                .child_args(Load::OpenOrders, addr, &keys[..1])
                .is_err()
        );
    }

    #[test]
    fn loads_are_named_in_kebab_case_comma_separated() {
        let loads =
            |value: &str| crate::parse::<Args>("latency", &["--loads", value]).map(|a| a.loads);
        assert_eq!(
            loads("quiet,open-orders,l4-subscribes").unwrap(),
            vec![Load::Quiet, Load::OpenOrders, Load::L4Subscribes]
        );
        assert!(
            loads("quiet,openOrders").is_err(),
            "an unknown load is refused"
        );
    }

    fn row(poll: Poll, rate: f64, stream: &'static str, us: u64) -> Row {
        let mut histogram = live::histogram().unwrap();
        for _ in 0..10 {
            live::record(&mut histogram, Duration::from_micros(us));
        }
        Row {
            poll,
            rate,
            load: Load::Quiet,
            stream,
            reference: stream == RAW_STREAM,
            frames: 10,
            early: 0,
            seconds: 1.0,
            histogram,
        }
    }

    #[test]
    fn polls_take_default_or_milliseconds() {
        assert_eq!(polls("default,5").unwrap(), vec![None, Some(5)]);
        assert!(polls("0").is_err());
        assert!(polls("fast").is_err());
    }

    #[test]
    fn the_worst_view_leaves_the_reference_out() {
        let rows = vec![
            row(None, 1.0, "a", 300),
            row(None, 1.0, "b", 400),
            row(None, 1.0, RAW_STREAM, 900),
            row(Some(5), 1.0, "c", 5000),
        ];
        let (p50, p99, worst) = worst_view(&rows, None, 1.0).unwrap();
        assert!(
            (p50 - 0.4).abs() < 0.01 && (p99 - 0.4).abs() < 0.01,
            "{p50} {p99}"
        );
        assert_eq!(worst, "b");
        assert_eq!(reference(&rows, None, 1.0).unwrap().stream, RAW_STREAM);
        assert!(reference(&rows, Some(5), 1.0).is_none());
        assert!(worst_view(&rows, None, 10.0).is_none());
    }

    #[test]
    fn beside_a_load_each_price_view_is_held_to_its_own_quiet_window() {
        let beside = |load: Load, poll: Poll, stream: &'static str, us: u64| Row {
            load,
            ..row(poll, 1.0, stream, us)
        };
        let rows = vec![
            row(None, 1.0, "StreamBbo (20 coins)", 400),
            row(None, 1.0, "StreamL2Book (1 coin, 20 levels)", 500),
            row(None, 1.0, "StreamTrades (20 coins)", 600),
            row(None, 1.0, RAW_STREAM, 300),
            row(Some(5), 1.0, "StreamBbo (20 coins)", 2000),
            beside(Load::OpenOrders, None, "StreamBbo (20 coins)", 800),
            beside(
                Load::OpenOrders,
                None,
                "StreamL2Book (1 coin, 20 levels)",
                500,
            ),
            beside(Load::OpenOrders, None, "StreamTrades (20 coins)", 900),
            beside(Load::OpenOrders, None, RAW_STREAM, 600),
            beside(Load::OpenOrders, Some(5), "StreamBbo (20 coins)", 2000),
        ];
        let ratios = beside_ratios(&rows);
        let of = |stream: &str, poll: Poll| {
            ratios
                .iter()
                .find(|v| v.stream == stream && v.poll == poll)
                .map(|v| (v.p50, v.p99))
        };
        let near = |(p50, p99): (f64, f64), want: f64| {
            (p50 - want).abs() < 0.02 && (p99 - want).abs() < 0.02
        };
        // The trades stream is not one of these views.
        assert_eq!(ratios.len(), 4, "{ratios:?}");
        assert!(near(of("StreamBbo", None).unwrap(), 2.0));
        assert!(near(of("StreamL2Book", None).unwrap(), 1.0));
        assert!(near(of("StreamFills", None).unwrap(), 2.0));
        // Against the quiet window of its own server, not the default one's.
        assert!(near(of("StreamBbo", Some(5)).unwrap(), 1.0));
        assert!(ratios.iter().all(|v| v.load == Load::OpenOrders));
    }
}
