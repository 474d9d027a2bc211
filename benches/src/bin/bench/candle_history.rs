//! The candle history: importing archive hours, the store's size, the server's memory over a
//! long history, and lookups into it.
//!
//! `cargo run --release -p benches -- candle_history [--hours H] [--days D] [--scale X]
//! [--seed S] [--connections C] [--seconds S] [--no-write]`
//!
//! 1. **Data**: `--hours` (default 24) of simulated mainnet-scale fills
//!    (`SimConfig::mainnet(seed, scale)`, only the fills rendered: `fixtures::by_block_line`), cut
//!    into hour files by block time and compressed with the `lz4` tool as the exchange's archive
//!    is (`node_fills_by_block/hourly/YYYYMMDD/H.lz4`). Made once into
//!    `target/bench-data/` and reused.
//! 2. **Import**: `l1gate candles import` of those hours into an empty store, timed (wall and the
//!    process's CPU), beside `lz4 -dc` of the same files alone (the decompression's own cost).
//! 3. **Store size**: a `--days`-day store (default 7) made from the imported day's candles,
//!    repeated a day later each time (the simulator's day, shifted: the same distribution of
//!    markets, prices and trades); bytes per candle on disk, and the extrapolation to every day
//!    since 2025-07-27 at the simulated day's candle rate.
//! 4. **Memory**: `l1gate serve` (a child process, no node files) over the 1-day store and over
//!    the `--days`-day store, the same lookups sent to each; resident memory (VmRSS, VmHWM) after.
//! 5. **Lookups**: `--seconds` of `GET /v1/candles` of uniformly random stored buckets over the
//!    whole long store, `--connections` keep-alive connections from the `candles_http` load
//!    process; and Info `candleSnapshot` of 5,000 `1m` candles, timed one after another.
//!
//! Rewrites the `candle_history` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};
use benches::server::{HarnessKey, Role, ServerProcess, harness_settings};
use engine::market::candles::{Candle, Interval};
use host::candles::store::{CandleStore, CommitInfo, INTERVALS, Span, Watermark};
use l1gate::config::ServeArgs;

/// 2025-07-27T08:00:00Z, where the candle history starts.
const HISTORY_START_MS: i64 = 1_753_603_200_000;
const DAY_MS: i64 = 86_400_000;

#[derive(Debug, clap::Args)]
#[command(
    about = "The candle history: archive import, store size, server memory and lookups",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Hours of simulated archive fills to import.
    #[arg(long, default_value_t = 24)]
    hours: u64,
    /// Days of the long store (the imported day, shifted a day at a time).
    #[arg(long, default_value_t = 7)]
    days: i64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep-alive connections of the `GET /v1/candles` lookups.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds of `GET /v1/candles` lookups.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.hours == 0 || args.days < 1 || args.connections == 0 || args.seconds <= 0.0 {
        bail!("--hours, --days and --connections must be ≥ 1, --seconds > 0");
    }
    let command = benches::cargo_command();
    let machine = benches::Machine::detect();
    let l1gate = args.server.path()?;

    // 1. Data.
    let data = benches::data::archive_hours(args.seed, args.scale, args.hours)?;
    let files = benches::data::hour_files(&data.dir)?;
    eprintln!(
        "{} hour files, {:.1} MB compressed",
        files.len(),
        data.compressed as f64 / 1e6
    );

    // 2. Import, beside `lz4 -dc`.
    let reference = lz4_reference(&files, data.decompressed)?;
    let work = tempfile::Builder::new()
        .prefix("l1gate-candle-history-")
        .tempdir()?;
    let day_store = work.path().join("day");
    let import = timed_child(
        Command::new(&l1gate)
            .args(["candles", "import"])
            .arg(&data.dir)
            .arg("--state-dir")
            .arg(&day_store)
            .args(["--candle-history-start", "2025-07-27T08:00:00Z", "--quiet"]),
    )?;
    eprintln!(
        "import: {:.2} s wall, {:.2} s CPU; lz4 -dc: {:.2} s wall, {:.2} s CPU, {:.1} MB",
        import.wall_s,
        import.cpu_s,
        reference.wall_s,
        reference.cpu_s,
        reference.bytes as f64 / 1e6
    );
    let report_text = String::from_utf8_lossy(&import.stderr).into_owned();

    // 3. The long store.
    let (day_candles, day_size) = store_figures(&day_store)?;
    let long_store = work.path().join("long");
    let (candles, lookups) = shifted_store(&day_store, &long_store, args.days)?;
    let (long_candles, long_size) = store_figures(&long_store)?;
    if long_candles != candles {
        bail!("the long store holds {long_candles} candles, {candles} written");
    }
    let bytes_per_candle = long_size as f64 / long_candles.max(1) as f64;
    let day_span_h = args.hours as f64;
    let candles_per_day = day_candles as f64 * 24.0 / day_span_h;
    let days_since = ((common::unix_now_ms() - HISTORY_START_MS) as f64 / DAY_MS as f64).ceil();
    let extrapolated_gb = candles_per_day * days_since * bytes_per_candle / 1e9;

    // 4. and 5. A server over each store, the same load.
    let keys = HarnessKey::new()?;
    let key = keys.key.clone();
    let paths: Vec<String> = lookups
        .iter()
        .map(|(coin, interval, open, _)| {
            format!(
                "/{key}/v1/candles?market={}&interval={interval}&time={}",
                benches::query_escape(coin),
                feeds::time::format_iso8601_ms(*open)
            )
        })
        .collect();
    let day_paths: Vec<String> = paths
        .iter()
        .zip(&lookups)
        .filter(|(_, (_, _, _, day))| *day == 0)
        .map(|(p, _)| p.clone())
        .collect();
    let empty = work.path().join("no-node-files");
    std::fs::create_dir_all(&empty)?;
    let day_served = serve_and_load(&l1gate, &empty, &day_store, &keys, &day_paths, args, None)?;
    let snapshot_coin = busiest_1m_coin(&lookups);
    let long_served = serve_and_load(
        &l1gate,
        &empty,
        &long_store,
        &keys,
        &paths,
        args,
        Some((&key, snapshot_coin.as_str(), long_first_ms(&long_store)?)),
    )?;

    let text = render(
        &machine,
        &command,
        args,
        &data,
        &reference,
        &import,
        &report_text,
        (day_candles, day_size),
        (long_candles, long_size),
        candles_per_day,
        days_since,
        extrapolated_gb,
        &day_served,
        &long_served,
    );
    println!("{text}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "candle_history", &text)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the candle_history section of {}", path.display());
    }
    let decompressed_mb = data.decompressed as f64 / 1e6;
    let load = |served: &Served, key: &str| served.load[key].as_f64().unwrap_or(0.0);
    let rps =
        |served: &Served| load(served, "requests") / load(served, "seconds").max(f64::MIN_POSITIVE);
    let mut snapshots = long_served.snapshots_ms.clone();
    snapshots.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        snapshots
            .get(((snapshots.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    benches::summary::emit(&Summary {
        hours: args.hours,
        days: args.days,
        decompressed_mb,
        import_mb_per_cpu_s: decompressed_mb / import.cpu_s.max(f64::MIN_POSITIVE),
        lz4_mb_per_cpu_s: reference.bytes as f64 / 1e6 / reference.cpu_s.max(f64::MIN_POSITIVE),
        candles: long_candles,
        bytes_per_candle: long_size as f64 / long_candles.max(1) as f64,
        extrapolated_gb,
        day_rss_mib: day_served.rss_kib as f64 / 1024.0,
        long_rss_mib: long_served.rss_kib as f64 / 1024.0,
        day_rps: rps(&day_served),
        long_rps: rps(&long_served),
        long_p99_ms: load(&long_served, "p99_us") / 1e3,
        snapshot_p50_ms: quantile(0.5),
        snapshot_p90_ms: quantile(0.9),
    })?;
    Ok(())
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// Archive hours imported.
    pub(crate) hours: u64,
    /// Days of the long store.
    pub(crate) days: i64,
    /// The imported hours' fills, decompressed, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) decompressed_mb: f64,
    /// Import rate, decompressed MB per CPU second.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) import_mb_per_cpu_s: f64,
    /// `lz4 -dc` alone, decompressed MB per CPU second.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) lz4_mb_per_cpu_s: f64,
    /// Candles in the long store.
    pub(crate) candles: u64,
    /// The long store's bytes per candle.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) bytes_per_candle: f64,
    /// The store since 2025-07-27 at this density, GB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) extrapolated_gb: f64,
    /// Server RSS over the 1-day store after the load, MiB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) day_rss_mib: f64,
    /// Server RSS over the long store after the load, MiB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) long_rss_mib: f64,
    /// Lookups per second over the 1-day store.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) day_rps: f64,
    /// Lookups per second over the long store.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) long_rps: f64,
    /// Lookup p99 over the long store, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) long_p99_ms: f64,
    /// Info `candleSnapshot` of 5,000 `1m` candles, p50, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) snapshot_p50_ms: f64,
    /// The same, p90, ms.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) snapshot_p90_ms: f64,
}

/// What a server over one store did under the load.
struct Served {
    /// The load child's JSON (requests, seconds, percentiles).
    load: serde_json::Value,
    /// VmRSS and VmHWM of the server after the load, KiB.
    rss_kib: u64,
    hwm_kib: u64,
    /// Lookups sent.
    lookups: usize,
    /// `candleSnapshot` latencies, ms, in order.
    snapshots_ms: Vec<f64>,
    /// Candles in each snapshot answer.
    snapshot_candles: usize,
}

/// The first bucket the long store covers.
fn long_first_ms(store: &Path) -> anyhow::Result<i64> {
    let (s, _) = CandleStore::open(store, HISTORY_START_MS)?;
    let first = s
        .reader()
        .coverage()
        .spans
        .first()
        .map_or(0, |span| span.from_ms);
    Ok(first)
}

/// The market with the most `1m` lookups in the sample (the densest `1m` series).
fn busiest_1m_coin(lookups: &[Lookup]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (coin, interval, _, _) in lookups {
        if *interval == Interval::Minute1 {
            *counts.entry(coin.as_str()).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map_or_else(|| "BTC".to_owned(), |(c, _)| c.to_owned())
}

/// Starts `l1gate serve` over `store` (no node files), sends `paths` from the `candles_http`
/// load process, then, with `snapshot`, times Info `candleSnapshot` of 5,000 `1m` candles of a
/// market; reads the server's memory and stops it (by its PID).
fn serve_and_load(
    l1gate: &Path,
    empty: &Path,
    store: &Path,
    keys: &HarnessKey,
    paths: &[String],
    args: &Args,
    snapshot: Option<(&str, &str, i64)>,
) -> anyhow::Result<Served> {
    let settings = ServeArgs {
        data: Some(empty.to_owned()),
        state_dir: Some(store.to_owned()),
        candle_history_start: Some("2025-07-27T08:00:00Z".to_owned()),
        ..harness_settings()
    };
    // No node files: the engine never catches up, the candle lookups are served once it listens.
    let server = ServerProcess::launch(l1gate, Role::Serve, settings, keys.clone(), None)?;
    let addr = server.http_addr;
    let pid = server.pid();
    let result = (|| {
        let paths_file = store.with_extension("paths.txt");
        std::fs::write(&paths_file, paths.join("\n"))?;
        let output = benches::child(crate::candles_http::LOAD_CHILD)?
            .args(["--addr", &addr.to_string()])
            .arg("--paths")
            .arg(&paths_file)
            .args(["--connections", &args.connections.to_string()])
            .args(["--seconds", &args.seconds.to_string()])
            .args(["--warmup", "2"])
            .stderr(Stdio::inherit())
            .output()?;
        if !output.status.success() {
            bail!("the load process failed: {}", output.status);
        }
        let load: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        let (mut snapshots_ms, mut snapshot_candles) = (Vec::new(), 0);
        if let Some((key, coin, first)) = snapshot {
            // 5,000 `1m` buckets from the start of the long store's second day.
            let start = first + DAY_MS;
            let body = serde_json::json!({"type": "candleSnapshot", "req": {
                "coin": coin, "interval": "1m", "startTime": start,
                "endTime": start + 5_000 * 60_000 - 1}})
            .to_string();
            for _ in 0..50 {
                let sent = Instant::now();
                let answer = post(addr, &format!("/{key}/info"), &body)?;
                snapshots_ms.push(sent.elapsed().as_secs_f64() * 1e3);
                let parsed: serde_json::Value = serde_json::from_str(&answer)?;
                snapshot_candles = parsed.as_array().map_or(0, Vec::len);
            }
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Ok(Served {
            load,
            rss_kib: benches::sys::status_field_kib(&status, "VmRSS").unwrap_or(0),
            hwm_kib: benches::sys::status_field_kib(&status, "VmHWM").unwrap_or(0),
            lookups: paths.len(),
            snapshots_ms,
            snapshot_candles,
        })
    })();
    drop(server);
    result
}

/// One HTTP/1.1 POST on a fresh connection; the answer's body.
fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> anyhow::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: l1gate.bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, rest) = answer.split_once("\r\n\r\n").context("an HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{head}: {rest}");
    }
    Ok(
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            unchunk(rest)
        } else {
            rest.to_owned()
        },
    )
}

/// The body of a chunked HTTP answer.
fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// A child process's wall and CPU time (user + system).
struct Timed {
    wall_s: f64,
    cpu_s: f64,
    bytes: u64,
    stderr: Vec<u8>,
}

fn timed_child(command: &mut Command) -> anyhow::Result<Timed> {
    let started = Instant::now();
    let before = children_cpu_s();
    let out = command.stdin(Stdio::null()).output()?;
    let wall_s = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            command,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(Timed {
        wall_s,
        cpu_s: children_cpu_s() - before,
        bytes: out.stdout.len() as u64,
        stderr: out.stderr,
    })
}

/// CPU seconds of this process's waited-for children so far (`cutime` + `cstime` of
/// `/proc/self/stat`, in clock ticks of 1/100 s).
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which is in parentheses).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `cutime` and `cstime`: the 16th and 17th fields, 13 and 14 after the name.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(13) + tick(14)) / 100.0
}

/// `lz4 -dc FILE > /dev/null` for each file: the decompression alone, its output written
/// straight to `/dev/null` (through a pipe, the copy into the pipe would be counted as
/// lz4's). `decompressed` is the files' known decoded size; `lz4 -t` of each checks the
/// files decode whole, before the timed runs.
fn lz4_reference(files: &[PathBuf], decompressed: u64) -> anyhow::Result<Timed> {
    for file in files {
        if !Command::new("lz4").arg("-tq").arg(file).status()?.success() {
            bail!("lz4 -t {}: the file does not decode", file.display());
        }
    }
    let started = Instant::now();
    let before = children_cpu_s();
    for file in files {
        let status = Command::new("lz4")
            .args(["-dcq"])
            .arg(file)
            .stdout(std::fs::File::create("/dev/null")?)
            .status()?;
        if !status.success() {
            bail!("lz4 -dc {} failed", file.display());
        }
    }
    Ok(Timed {
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: children_cpu_s() - before,
        bytes: decompressed,
        stderr: Vec::new(),
    })
}

/// Candles held and the file's size.
fn store_figures(state_dir: &Path) -> anyhow::Result<(u64, u64)> {
    let (store, _) = CandleStore::open(state_dir, HISTORY_START_MS)?;
    let candles = store.reader().candles();
    drop(store);
    let size = std::fs::metadata(state_dir.join(host::candles::store::FILE_NAME))?.len();
    Ok((candles, size))
}

/// Writes `days` copies of `day`'s candles, each a day later than the one before, into a new
/// store at `long`; returns the candles written and `(coin, interval, open)` of stored buckets
/// picked uniformly at random over the whole store.
fn shifted_store(day: &Path, long: &Path, days: i64) -> anyhow::Result<(u64, Vec<Lookup>)> {
    let coins = coins_of(day)?;
    let (store, _) = CandleStore::open(day, HISTORY_START_MS)?;
    let reader = store.reader().clone();
    let mut all: Vec<Candle> = Vec::new();
    for coin in &coins {
        for interval in INTERVALS {
            for c in reader
                .range(coin, interval, 0, i64::MAX, usize::MAX, false)
                .map_err(|e| anyhow::anyhow!("{e}"))?
            {
                all.push(c.candle(coin));
            }
        }
    }
    let coverage = reader.coverage();
    drop(reader);
    drop(store);
    let (from, to) = coverage
        .spans
        .first()
        .zip(coverage.spans.last())
        .map(|(a, b)| (a.from_ms, b.to_ms))
        .context("the imported store covers nothing")?;
    let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
    let lookups: Vec<Lookup> = (0..LOOKUPS)
        .filter_map(|_| {
            let c = all.get(rng.below(all.len()))?;
            let day = rng.below(usize::try_from(days).ok()?) as i64;
            Some((c.coin.clone(), c.interval, c.open_time + day * DAY_MS, day))
        })
        .collect();
    let (mut long_store, _) = CandleStore::open(long, HISTORY_START_MS)?;
    let mut written = 0u64;
    for day in 0..days {
        let shift = day * DAY_MS;
        let mut batch: Vec<Candle> = all
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.open_time += shift;
                c.next_open += shift;
                c
            })
            .collect();
        // One commit per hour of candles, as an import commits as it goes.
        batch.sort_by_key(|c| c.open_time);
        for part in batch.chunk_by(|a, b| a.open_time / 3_600_000 == b.open_time / 3_600_000) {
            written += long_store.commit(
                part,
                &CommitInfo {
                    watermark: Some(Watermark {
                        block_number: 0,
                        block_time_ms: part[part.len() - 1].open_time + shift,
                    }),
                    ..CommitInfo::default()
                },
            )? as u64;
        }
        long_store.commit(
            &[],
            &CommitInfo {
                covered: Some(Span {
                    from_ms: from + shift,
                    to_ms: to + shift,
                }),
                ..CommitInfo::default()
            },
        )?;
    }
    // As an import ends.
    long_store.compact()?;
    Ok((written, lookups))
}

/// A stored bucket to look up: market, interval, bucket open, and the copy of the imported
/// day it is in (0: the imported day itself).
type Lookup = (String, Interval, i64, i64);

/// Lookups sampled from the long store.
const LOOKUPS: usize = 200_000;

/// A small deterministic generator (the sample must not depend on a crate's version).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if n == 0 {
            0
        } else {
            ((self.0 >> 33) as usize) % n
        }
    }
}

/// The markets of a store (by walking its coins table).
fn coins_of(state_dir: &Path) -> anyhow::Result<Vec<String>> {
    use redb::{ReadableDatabase as _, ReadableTable as _};
    let db = redb::Database::builder()
        .open_read_only(state_dir.join(host::candles::store::FILE_NAME))?;
    let txn = db.begin_read()?;
    let table = txn.open_table(redb::TableDefinition::<&str, u32>::new("coins"))?;
    let mut out = Vec::new();
    for entry in table.iter()? {
        out.push(entry?.0.value().to_owned());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn render(
    machine: &benches::Machine,
    command: &str,
    args: &Args,
    data: &benches::data::Hours,
    reference: &Timed,
    import: &Timed,
    report: &str,
    (day_candles, day_size): (u64, u64),
    (long_candles, long_size): (u64, u64),
    candles_per_day: f64,
    days_since: f64,
    extrapolated_gb: f64,
    day: &Served,
    long: &Served,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Candle history (`candle_history`)\n");
    s.push_str(&machine.markdown(command));
    let mb = |b: u64| b as f64 / 1e6;
    let _ = writeln!(
        s,
        "- Data: {} hours of simulator `SimConfig::mainnet(seed {}, scale {})` fills ({} blocks, {} \
         fills, {:.1} MB of by-block lines), cut into hour files by block time and compressed \
         with the `lz4` tool as the exchange's archive is: {:.1} MB{}",
        args.hours,
        args.seed,
        args.scale,
        data.blocks,
        data.fills,
        mb(data.decompressed),
        mb(data.compressed),
        data.generated_s
            .map_or_else(String::new, |g| format!(" (made in {g:.0} s)"))
    );
    let rate = |bytes: u64, s: f64| mb(bytes) / s.max(f64::MIN_POSITIVE);
    let _ = writeln!(
        s,
        "\n### Import\n\n| | wall | CPU | MB/s of decompressed fills (wall) | per CPU second |\n|---|---:|---:|---:|---:|"
    );
    let _ = writeln!(
        s,
        "| `l1gate candles import` (decode, fold, store: three threads) | {:.2} s | {:.2} s | {:.0} | {:.0} |",
        import.wall_s,
        import.cpu_s,
        rate(data.decompressed, import.wall_s),
        rate(data.decompressed, import.cpu_s)
    );
    let _ = writeln!(
        s,
        "| `lz4 -dc` of the same files alone | {:.2} s | {:.2} s | {:.0} | {:.0} |",
        reference.wall_s,
        reference.cpu_s,
        rate(reference.bytes, reference.wall_s),
        rate(reference.bytes, reference.cpu_s)
    );
    let per_core = rate(data.decompressed, import.cpu_s);
    let _ = writeln!(
        s,
        "\nTarget: ≥ 1,000 MB/s of decompressed fills per core. This run: {per_core:.0} MB/s \
         ({}; {:.2}× the decompression alone).\n",
        if per_core >= 1_000.0 {
            "met"
        } else {
            "not met"
        },
        per_core / rate(reference.bytes, reference.cpu_s).max(f64::MIN_POSITIVE)
    );
    let _ = writeln!(s, "The import's report:\n\n```\n{report}```\n");
    let _ = writeln!(
        s,
        "### Store size\n\n| Store | candles | file | bytes per candle |\n|---|---:|---:|---:|"
    );
    let _ = writeln!(
        s,
        "| the imported {} h | {day_candles} | {:.1} MB | {:.2} |",
        args.hours,
        mb(day_size),
        day_size as f64 / day_candles.max(1) as f64
    );
    let long_bpc = long_size as f64 / long_candles.max(1) as f64;
    let _ = writeln!(
        s,
        "| {} days (the imported candles repeated a day later each time) | {long_candles} | {:.1} MB | {long_bpc:.2} |",
        args.days,
        mb(long_size),
    );
    let _ = writeln!(
        s,
        "\nTarget: ≤ 16 bytes per candle ({}). Extrapolated: {candles_per_day:.0} candles a day \
         (the simulated hours' rate) × {days_since:.0} days since 2025-07-27 at {long_bpc:.2} \
         bytes each = {extrapolated_gb:.1} GB on disk.\n",
        if long_bpc <= 16.0 { "met" } else { "not met" }
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    let _ = writeln!(
        s,
        "### Memory and lookups\n\n`l1gate serve` (a child process, no node files) over each \
         store; `GET /v1/candles` of stored buckets picked uniformly at random over the store \
         ({} of them for the long store, those of the first day for the short one), {} \
         keep-alive connections from the `candles_http` load process for {:.0} s after 2 s of \
         warm-up; memory read from `/proc/PID/status` after the load.\n",
        long.lookups, args.connections, args.seconds
    );
    let _ = writeln!(
        s,
        "| Store | VmRSS | VmHWM | req/s | p50 µs | p99 µs | p99.9 µs | non-200 |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, served) in [
        (format!("{} h", args.hours), day),
        (format!("{} days", args.days), long),
    ] {
        let v = &served.load;
        let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {name} | {:.1} MiB | {:.1} MiB | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            mib(served.rss_kib),
            mib(served.hwm_kib),
            n("requests") / n("seconds").max(f64::MIN_POSITIVE),
            n("p50_us"),
            n("p99_us"),
            n("p999_us"),
            n("non_200")
        );
    }
    let rss_delta = mib(long.rss_kib) - mib(day.rss_kib);
    let v = &long.load;
    let n = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let rps = n("requests") / n("seconds").max(f64::MIN_POSITIVE);
    let p99_ms = n("p99_us") / 1e3;
    let _ = writeln!(
        s,
        "\nTargets: RSS over the long store within 20 MB of the short one's: {rss_delta:+.1} MiB \
         ({}); lookups over the long store ≥ 50,000 req/s and p99 ≤ 2 ms: {rps:.0} req/s, p99 \
         {p99_ms:.2} ms ({}).",
        if rss_delta.abs() <= 20.0 {
            "met"
        } else {
            "not met"
        },
        if rps >= 50_000.0 && p99_ms <= 2.0 {
            "met"
        } else {
            "not met"
        }
    );
    let mut snap = long.snapshots_ms.clone();
    snap.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        snap.get(((snap.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let _ = writeln!(
        s,
        "\nInfo `candleSnapshot` of 5,000 `1m` buckets of the densest market ({} candles in the \
         answer), 50 requests one after another on fresh connections: p50 {:.2} ms, p90 {:.2} \
         ms, max {:.2} ms. Target ≤ 10 ms ({}).",
        long.snapshot_candles,
        pick(0.5),
        pick(0.9),
        pick(1.0),
        if pick(0.5) <= 10.0 { "met" } else { "not met" }
    );
    s
}
