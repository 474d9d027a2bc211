//! Raw feed replay throughput: what a client gets from `StreamOrderStatuses` and
//! `StreamRawBookDiffs` over real gRPC on loopback, against the layers beneath it measured in
//! the same run on the same bytes.
//!
//! `cargo run --release -p benches -- raw_feed [--blocks N | --target-mb MB] [--scale X]
//! [--seed S] [--repeat R] [--coin COIN] [--data DIR] [--keep] [--no-filters] [--no-write]`
//!
//! Generates mainnet-scale simulator output into a temporary directory (by default until the
//! node output reaches `--target-mb` = 1000 MB; `--blocks N` for a fixed, smaller run, or
//! `--data DIR` to measure an existing `hl/data` tree), starts the `l1gate` binary on
//! 127.0.0.1 in a process of its own ([`benches::server`]) and replays each feed from its first block to its last, `--repeat`
//! times (median reported), for each of these layers:
//!
//! - `fs::read`: `std::fs::read` of each file of the feed plus a newline count (the floor);
//! - `Feed::read`: `feeds::Feed::seek` + `Feed::read` in batches of 256, as the server reads,
//!   with `EventFilter::apply` on each record when filtered;
//! - `gRPC`: a tonic client streaming the feed with an `x-api-key`, counting the bytes of
//!   `Record.data` and the wall time from the request to the last record. Unfiltered, also
//!   with the client accepting zstd, and over TLS from a second server on the same files (the
//!   client's rustls reading its socket through a buffer: see `tls_client`).
//!
//! Filtered replays use `coins = [COIN]` (default `BTC`) and `users = [the most active user of
//! the first 200 blocks]`; their MB/s is of source bytes scanned, their records/s of records
//! delivered. Every gRPC pass is checked against the `Feed::read` pass (same record count and
//! bytes). Gaps between consecutive gRPC records go into an hdrhistogram (p50/p99/p99.9/max).
//!
//! Prints a table and rewrites the `raw_feed` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::server::{ServerOptions, ServerProcess, metric_sum};
use feeds::{EventFilter, Feed, Source, Start};
use fixtures::{RunOptions, SimConfig, generate};
use hdrhistogram::Histogram;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

/// Records per `Feed::read` call, as the server's replay pump reads.
const READ_BATCH: usize = 256;
/// Blocks scanned to pick the most active user for the `users` filter.
const USER_SAMPLE_BLOCKS: usize = 200;
/// Longest wait for one gRPC record before the pass is declared stuck.
const RECORD_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
#[command(
    about = "Raw feed replay throughput over gRPC, beside the layers beneath it",
    args_override_self = true
)]
pub(crate) struct Args {
    #[command(flatten)]
    server: benches::server::Binary,
    /// Generate this many blocks (instead of up to `--target-mb`).
    #[arg(long)]
    blocks: Option<u64>,
    /// Generate until the node output reaches this many MB (without `--blocks`).
    #[arg(long, default_value_t = 1_000)]
    target_mb: u64,
    /// Activity and book depth as a fraction of mainnet.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Simulator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replays of each feed and layer (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Coin of the `coins` filter.
    #[arg(long, default_value = "BTC")]
    coin: String,
    /// Measure this existing `hl/data` tree instead of generating one.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Keep the generated data.
    #[arg(long)]
    keep: bool,
    /// Print only; leave `benches/BENCHMARKS.md` as it is.
    #[arg(long)]
    no_write: bool,
    /// Replay unfiltered only (no `coins` and `users` filters).
    #[arg(long)]
    no_filters: bool,
}

/// One measured pass over a feed.
#[derive(Debug, Clone, Copy, Default)]
struct Pass {
    /// Source bytes scanned (whole lines, newlines excluded for record layers).
    scanned: u64,
    /// Records delivered.
    records: u64,
    /// Bytes delivered (`Record.data`).
    delivered: u64,
    /// Block number of the last record delivered.
    last_block: Option<u64>,
    /// Seconds from the request (or start) to the first record.
    first_s: f64,
    seconds: f64,
}

/// Which filter a pass applies.
#[derive(Debug, Clone)]
enum Which {
    None,
    Coins(String),
    Users(String),
}

impl Which {
    fn label(&self) -> String {
        match self {
            Which::None => "none".to_owned(),
            Which::Coins(c) => format!("coins=[{c}]"),
            Which::Users(u) => format!("users=[{}…]", &u[..u.len().min(10)]),
        }
    }

    fn compile(&self, source: Source) -> anyhow::Result<Option<EventFilter>> {
        Ok(match self {
            Which::None => None,
            Which::Coins(c) => Some(EventFilter::new(source, &[("coins", [c.as_str()])])?),
            Which::Users(u) => Some(EventFilter::new(source, &[("users", [u.as_str()])])?),
        })
    }

    fn proto(&self) -> Option<proto::Filter> {
        let (field, value) = match self {
            Which::None => return None,
            Which::Coins(c) => ("coins", c),
            Which::Users(u) => ("users", u),
        };
        Some(proto::Filter {
            fields: vec![proto::FieldFilter {
                field: field.to_owned(),
                op: proto::FilterOp::In as i32,
                values: vec![value.clone()],
            }],
        })
    }
}

/// `std::fs::read` of every file of the feed and a newline count.
fn fs_pass(paths: &[PathBuf]) -> anyhow::Result<Pass> {
    let t = Instant::now();
    let mut pass = Pass::default();
    for path in paths {
        let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        pass.records += memchr::memchr_iter(b'\n', &bytes).count() as u64;
        pass.scanned += bytes.len() as u64;
    }
    pass.delivered = pass.scanned;
    pass.seconds = t.elapsed().as_secs_f64();
    Ok(pass)
}

/// What the server does for a replay, without the network: seek, read batches, filter.
fn feed_pass(feed: &Feed, first: u64, filter: Option<&EventFilter>) -> anyhow::Result<Pass> {
    let t = Instant::now();
    let mut pass = Pass::default();
    let mut cursor = feed.seek(Start::BlockNumber(first))?;
    loop {
        let batch = feed.read(&mut cursor, READ_BATCH)?;
        if batch.is_empty() {
            break;
        }
        for record in batch {
            pass.scanned += record.data.len() as u64;
            let delivered = match filter {
                None => record.data.len(),
                Some(f) => {
                    let out = f.apply(&record.data)?;
                    if out.matched == 0 {
                        continue;
                    }
                    out.line.len()
                }
            };
            pass.records += 1;
            pass.delivered += delivered as u64;
            pass.last_block = record.block_number;
        }
    }
    pass.seconds = t.elapsed().as_secs_f64();
    Ok(pass)
}

/// A gRPC replay from `first` until the record of block `last` arrives.
async fn grpc_pass(
    client: &mut VenueL1GatewayClient<Channel>,
    key: &MetadataValue<tonic::metadata::Ascii>,
    source: Source,
    first: u64,
    last: u64,
    which: &Which,
    gaps: &mut Histogram<u64>,
) -> anyhow::Result<Pass> {
    let message = proto::StreamRequest {
        position: Some(proto::Position {
            kind: Some(proto::position::Kind::BlockNumber(i64::try_from(first)?)),
        }),
        filter: which.proto(),
    };
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-api-key", key.clone());
    let t = Instant::now();
    let mut stream = match source {
        Source::OrderStatuses => client.stream_order_statuses(request).await?,
        Source::RawBookDiffs => client.stream_raw_book_diffs(request).await?,
        Source::Fills => client.stream_fills(request).await?,
        other => bail!("no replay measured for {}", other.feed_id()),
    }
    .into_inner();
    let mut pass = Pass::default();
    let mut previous = t;
    loop {
        let record = tokio::time::timeout(RECORD_WAIT, stream.message())
            .await
            .with_context(|| format!("{}: nothing for {RECORD_WAIT:?}", source.feed_id()))??
            .with_context(|| format!("{}: stream ended before block {last}", source.feed_id()))?;
        let now = Instant::now();
        if pass.records == 0 {
            pass.first_s = now.duration_since(t).as_secs_f64();
        }
        gaps.saturating_record(now.duration_since(previous).as_micros() as u64);
        previous = now;
        pass.records += 1;
        pass.delivered += record.data.len() as u64;
        let block = record.block_number.and_then(|n| u64::try_from(n).ok());
        pass.last_block = block;
        if block == Some(last) {
            break;
        }
    }
    pass.seconds = t.elapsed().as_secs_f64();
    drop(stream);
    Ok(pass)
}

/// The most active user of the first records of a feed.
fn most_active_user(feed: &Feed, first: u64) -> anyhow::Result<Option<String>> {
    let mut cursor = feed.seek(Start::BlockNumber(first))?;
    let records = feed.read(&mut cursor, USER_SAMPLE_BLOCKS)?;
    Ok(benches::most_active_user(
        records.iter().map(|r| &r.data[..]),
        feed.source() == Source::Fills,
    ))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        f64::midpoint(values[n / 2 - 1], values[n / 2])
    }
}

/// The repeated passes of one (feed, layer, filter) row.
/// Bytes the server wrote for one unfiltered replay, plain and with zstd
/// (first pass of each: the bytes do not change from pass to pass).
struct Wire {
    source: Source,
    plain: u64,
    zstd: u64,
}

/// The bytes on the wire with zstd and without, and the median times of
/// the unfiltered replays plain, with zstd and over TLS (from `rows`).
fn render_wire(wire: &[Wire], rows: &[Row]) -> String {
    let seconds = |source: Source, layer: &str| {
        rows.iter()
            .find(|r| r.source == source && r.layer == layer && r.filter == Which::None.label())
            .map_or(f64::NAN, Row::seconds)
    };
    let mut s = String::new();
    let mut seen = std::collections::BTreeSet::new();
    let _ = writeln!(
        s,
        "\nBytes the server wrote to the gRPC connection for one unfiltered replay \
         (`l1gate_grpc_socket_write_bytes_total`, before TLS; first pass), plain and with zstd \
         (the client accepting zstd), and the median times of the rows above. The TLS client is \
         rustls reading its socket through a 256 KiB buffer (rustls alone reads 4 KiB per call, \
         which measured the client's read calls: 0.56–0.59× before it).\n"
    );
    let _ = writeln!(
        s,
        "| feed | plain MB | zstd MB | bytes zstd / plain | time zstd / plain | throughput TLS / plain |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for w in wire {
        if !seen.insert(w.source.feed_id()) {
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {:.3} | {:.2} | {:.2}× |",
            w.source.feed_id(),
            w.plain as f64 / 1e6,
            w.zstd as f64 / 1e6,
            w.zstd as f64 / w.plain.max(1) as f64,
            seconds(w.source, "gRPC, zstd") / seconds(w.source, "gRPC"),
            seconds(w.source, "gRPC") / seconds(w.source, "gRPC, TLS"),
        );
    }
    let worst = wire
        .iter()
        .map(|w| seconds(w.source, "gRPC") / seconds(w.source, "gRPC, TLS"))
        .fold(f64::INFINITY, f64::min);
    if worst.is_finite() {
        let _ = writeln!(
            s,
            "\nTarget: raw-feed replay over TLS at least 0.7× the plain throughput on the same files. \
             This run: {worst:.2}× at worst — {}.",
            if worst >= 0.7 { "met" } else { "not met" }
        );
    }
    s
}

#[derive(Clone)]
struct Row {
    source: Source,
    layer: &'static str,
    filter: String,
    passes: Vec<Pass>,
}

impl Row {
    fn first(&self) -> Pass {
        self.passes.first().copied().unwrap_or_default()
    }

    fn seconds(&self) -> f64 {
        median(self.passes.iter().map(|p| p.seconds).collect())
    }

    fn spread(&self) -> (f64, f64) {
        self.passes.iter().fold((f64::MAX, 0.0f64), |(lo, hi), p| {
            (lo.min(p.seconds), hi.max(p.seconds))
        })
    }

    fn source_mb_s(&self) -> f64 {
        self.first().scanned as f64 / 1e6 / self.seconds()
    }

    fn records_s(&self) -> f64 {
        self.first().records as f64 / self.seconds()
    }
}

/// The data to measure: generated into a temporary directory, or given.
struct Data {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
    note: String,
}

fn prepare_data(args: &Args) -> anyhow::Result<Data> {
    if let Some(dir) = &args.data {
        return Ok(Data {
            root: dir.clone(),
            _temp: None,
            note: format!("existing data directory `{}`", dir.display()),
        });
    }
    let temp = tempfile::Builder::new().prefix("raw_feed_").tempdir()?;
    let cfg = SimConfig {
        snapshot_every: None,
        ..SimConfig::mainnet(args.seed, args.scale)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let run = RunOptions {
        blocks: args.blocks,
        stop: Some(stop.clone()),
        progress_every: 10,
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    let target = args.target_mb * 1_000_000;
    let limit_by_size = args.blocks.is_none();
    eprintln!(
        "generating mainnet-scale data (scale {}, seed {}) into {} ...",
        args.scale,
        args.seed,
        temp.path().display()
    );
    let summary = generate(&cfg, temp.path(), &run, &mut |p| {
        if limit_by_size && p.bytes >= target {
            stop.store(true, Ordering::Relaxed);
        }
    })?;
    let note = format!(
        "simulator `SimConfig::mainnet(seed {}, scale {})`, {} blocks ({}..={}), {:.1} MB of node output \
         ({} order statuses, {} book diffs, {} fills), generated in {:.1} s",
        args.seed,
        args.scale,
        summary.blocks,
        summary.first_height.unwrap_or_default(),
        summary.last_height,
        summary.bytes as f64 / 1e6,
        summary.order_statuses,
        summary.book_diffs,
        summary.fills,
        summary.elapsed.as_secs_f64()
    );
    eprintln!("{note}");
    let root = if args.keep {
        let kept = temp.keep();
        eprintln!("keeping {}", kept.display());
        return Ok(Data {
            root: kept,
            _temp: None,
            note,
        });
    } else {
        temp.path().to_path_buf()
    };
    Ok(Data {
        root,
        _temp: Some(temp),
        note,
    })
}

/// An address with the bulk replay's receive windows (records are ~100 KB-1
/// MB; the 64 KiB defaults would cost round trips per record).
fn endpoint(url: String) -> anyhow::Result<tonic::transport::Endpoint> {
    Ok(Channel::from_shared(url)?
        .initial_stream_window_size(Some(16 << 20))
        .initial_connection_window_size(Some(32 << 20)))
}

/// A raw-feed client of `url`, in plain text.
async fn client(url: String) -> anyhow::Result<VenueL1GatewayClient<Channel>> {
    let channel = endpoint(url)?.connect().await?;
    Ok(VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20))
}

/// Bytes the TLS client reads from its socket at once.
const TLS_CLIENT_READ: usize = 256 << 10;

/// The raw-feed client over TLS to `localhost:port`, trusting `ca`, with the
/// receive windows of [`endpoint`]: rustls over the socket read through a
/// [`TLS_CLIENT_READ`] buffer. rustls asks its socket for 4 KiB at a time
/// whatever the record size, so a client on tonic's own TLS spends a read
/// call per 4 KiB (about 45,000 for 186 MB of raw book diffs) and the pass
/// would measure that client rather than the server; clients on OpenSSL or
/// BoringSSL (grpcio) read whole records.
async fn tls_client(port: u16, ca: &str) -> anyhow::Result<VenueL1GatewayClient<Channel>> {
    use tokio_rustls::rustls;
    let mut config = benches::tls::client_config(ca)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    // `http://`: the TLS is this connector's; tonic would put its own on an
    // `https://` address.
    let channel = endpoint(format!("http://localhost:{port}"))?
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
                tcp.set_nodelay(true)?;
                let name = rustls::pki_types::ServerName::try_from("localhost")
                    .map_err(std::io::Error::other)?;
                let buffered = tokio::io::BufReader::with_capacity(TLS_CLIENT_READ, tcp);
                let tls = connector.connect(name, buffered).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await?;
    Ok(VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20))
}

/// Bytes the server has written to its gRPC connections
/// (`l1gate_grpc_socket_write_bytes_total`, before TLS), read from its
/// `/metrics`.
fn grpc_bytes_written(server: &ServerProcess) -> anyhow::Result<u64> {
    let text = server.metrics()?;
    Ok(metric_sum(&text, "l1gate_grpc_socket_write_bytes_total", &[]) as u64)
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 600_000_000, 3)?)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let machine = benches::Machine::detect();
    let command = benches::cargo_command();
    let data = prepare_data(args)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let l1gate = args.server.path()?;
    let running = ServerProcess::spawn(&l1gate, &data.root, &ServerOptions::default())?;
    // The same files behind TLS: a second server, with a certificate of the harness's own.
    let tls_running = ServerProcess::spawn(
        &l1gate,
        &data.root,
        &ServerOptions {
            tls: true,
            ..ServerOptions::default()
        },
    )?;
    let ca = tls_running
        .ca()
        .context("the TLS server's authority")?
        .to_owned();
    let key = MetadataValue::try_from(running.keys.key.as_str())?;
    let tls_key = MetadataValue::try_from(tls_running.keys.key.as_str())?;
    let plain_url = format!("http://{}", running.addr);
    let mut client_plain = runtime.block_on(client(plain_url.clone()))?;
    let mut client_zstd = runtime
        .block_on(client(plain_url))?
        .accept_compressed(tonic::codec::CompressionEncoding::Zstd);
    let mut client_tls = runtime.block_on(tls_client(tls_running.addr.port(), &ca))?;
    let mut wire: Vec<Wire> = Vec::new();

    let mut rows: Vec<Row> = Vec::new();
    let mut gap_rows: Vec<(Source, String, Histogram<u64>)> = Vec::new();
    for source in [Source::OrderStatuses, Source::RawBookDiffs] {
        let feed = Feed::open(&data.root, source)?;
        let paths: Vec<PathBuf> = feed.segments().into_iter().map(|(_, p, _)| p).collect();
        if paths.is_empty() {
            eprintln!("{}: no files, skipped", source.feed_id());
            continue;
        }
        let mut head = feed.seek(Start::BlockNumber(0))?;
        let first = feed
            .read(&mut head, 1)?
            .first()
            .and_then(|r| r.block_number)
            .with_context(|| format!("{}: no first block", source.feed_id()))?;
        let user = most_active_user(&feed, first)?;
        let mut filters = vec![Which::None];
        if !args.no_filters {
            filters.push(Which::Coins(args.coin.clone()));
            filters.extend(user.map(Which::Users));
        }

        // Reference pass (also warms the page cache and the mappings): what each replay must
        // deliver.
        fs_pass(&paths)?;
        let mut expected = Vec::new();
        for which in &filters {
            let reference = feed_pass(&feed, first, which.compile(source)?.as_ref())?;
            expected.push(reference);
        }

        let mut fs_row = Row {
            source,
            layer: "fs::read",
            filter: "none".to_owned(),
            passes: Vec::new(),
        };
        let mut feed_rows: Vec<Row> = filters
            .iter()
            .map(|w| Row {
                source,
                layer: "Feed::read",
                filter: w.label(),
                passes: Vec::new(),
            })
            .collect();
        let mut grpc_rows: Vec<Row> = filters
            .iter()
            .map(|w| Row {
                source,
                layer: "gRPC",
                filter: w.label(),
                passes: Vec::new(),
            })
            .collect();
        // Unfiltered, over TLS and with zstd.
        let mut tls_row = Row {
            source,
            layer: "gRPC, TLS",
            filter: Which::None.label(),
            passes: Vec::new(),
        };
        let mut zstd_row = Row {
            source,
            layer: "gRPC, zstd",
            filter: Which::None.label(),
            passes: Vec::new(),
        };
        let mut gaps: Vec<Histogram<u64>> = filters
            .iter()
            .map(|_| histogram())
            .collect::<anyhow::Result<_>>()?;

        for rep in 0..args.repeat {
            eprintln!("{} pass {}/{}", source.feed_id(), rep + 1, args.repeat);
            fs_row.passes.push(fs_pass(&paths)?);
            for (i, which) in filters.iter().enumerate() {
                let filter = which.compile(source)?;
                feed_rows[i]
                    .passes
                    .push(feed_pass(&feed, first, filter.as_ref())?);
                let want = expected[i];
                let Some(last) = want.last_block else {
                    eprintln!(
                        "{} {}: nothing matches, gRPC pass skipped",
                        source.feed_id(),
                        which.label()
                    );
                    continue;
                };
                let mut h = histogram()?;
                let before = grpc_bytes_written(&running)?;
                let mut pass = runtime.block_on(grpc_pass(
                    &mut client_plain,
                    &key,
                    source,
                    first,
                    last,
                    which,
                    &mut h,
                ))?;
                let plain_bytes = grpc_bytes_written(&running)? - before;
                if matches!(which, Which::None) {
                    let mut unused = histogram()?;
                    let mut replay = |client: &mut VenueL1GatewayClient<Channel>, key| {
                        runtime.block_on(grpc_pass(
                            client,
                            key,
                            source,
                            first,
                            last,
                            which,
                            &mut unused,
                        ))
                    };
                    let before = grpc_bytes_written(&running)?;
                    let zstd = replay(&mut client_zstd, &key)?;
                    let zstd_bytes = grpc_bytes_written(&running)? - before;
                    let tls = replay(&mut client_tls, &tls_key)?;
                    for (layer, got) in [("gRPC, zstd", &zstd), ("gRPC, TLS", &tls)] {
                        if got.records != want.records || got.delivered != want.delivered {
                            bail!(
                                "{} {layer}: {} records / {} bytes, Feed::read {} / {}",
                                source.feed_id(),
                                got.records,
                                got.delivered,
                                want.records,
                                want.delivered
                            );
                        }
                    }
                    wire.push(Wire {
                        source,
                        plain: plain_bytes,
                        zstd: zstd_bytes,
                    });
                    zstd_row.passes.push(Pass {
                        scanned: want.scanned,
                        ..zstd
                    });
                    tls_row.passes.push(Pass {
                        scanned: want.scanned,
                        ..tls
                    });
                }
                if pass.records != want.records || pass.delivered != want.delivered {
                    bail!(
                        "{} {}: gRPC delivered {} records / {} bytes, Feed::read {} / {}",
                        source.feed_id(),
                        which.label(),
                        pass.records,
                        pass.delivered,
                        want.records,
                        want.delivered
                    );
                }
                pass.scanned = want.scanned;
                gaps[i].add(&h)?;
                grpc_rows[i].passes.push(pass);
            }
        }
        rows.push(fs_row);
        for (f, g) in feed_rows.into_iter().zip(grpc_rows) {
            let unfiltered = f.filter == Which::None.label();
            rows.push(f);
            if !g.passes.is_empty() {
                rows.push(g);
            }
            if unfiltered {
                rows.extend(
                    [zstd_row.clone(), tls_row.clone()]
                        .into_iter()
                        .filter(|r| !r.passes.is_empty()),
                );
            }
        }
        for (which, h) in filters.iter().zip(gaps) {
            if !h.is_empty() {
                gap_rows.push((source, which.label(), h));
            }
        }
    }
    drop(running);
    drop(tls_running);
    drop(runtime);

    let mut report = render(
        &machine,
        &command,
        &data.note,
        args.repeat,
        &rows,
        &gap_rows,
    );
    report.push_str(&render_wire(&wire, &rows));
    println!("{report}");
    if !args.no_write {
        let path = benches::benchmarks_md();
        benches::write_section(&path, "raw_feed", &report)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote the raw_feed section of {}", path.display());
    }
    benches::summary::emit(&summary(&rows))?;
    Ok(())
}

/// The headline figures the `report` binary reads (see `benches::summary`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Summary {
    /// One row per (feed, layer, filter) measured.
    pub(crate) rows: Vec<SummaryRow>,
}

/// One feed read through one layer with one filter, in a [`Summary`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SummaryRow {
    /// The feed id (`order_statuses`, `raw_book_diffs`, …).
    pub(crate) feed: String,
    /// How it was read (`gRPC`, `fs::read`, …).
    pub(crate) layer: String,
    /// The filter (`none` for every record).
    pub(crate) filter: String,
    /// The node's files scanned, MB.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) source_mb: f64,
    /// Those MB over the median pass's seconds.
    #[serde(deserialize_with = "benches::summary::or_nan")]
    pub(crate) source_mb_s: f64,
}

/// The headline figures for the `report` binary (see `benches::summary`).
fn summary(rows: &[Row]) -> Summary {
    Summary {
        rows: rows
            .iter()
            .map(|row| SummaryRow {
                feed: row.source.feed_id().to_owned(),
                layer: row.layer.to_owned(),
                filter: row.filter.clone(),
                source_mb: row.first().scanned as f64 / 1e6,
                source_mb_s: row.source_mb_s(),
            })
            .collect(),
    }
}

fn render(
    machine: &benches::Machine,
    command: &str,
    note: &str,
    repeat: usize,
    rows: &[Row],
    gaps: &[(Source, String, Histogram<u64>)],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## Raw feed replay throughput (`raw_feed`)\n");
    s.push_str(&machine.markdown(command));
    let _ = writeln!(s, "- Data: {note}");
    let _ = writeln!(
        s,
        "- Each row: median of {repeat} passes (range in brackets), layers interleaved per pass. \
         MB = 10^6 bytes. Source MB/s counts the feed's bytes scanned; records/s counts records \
         delivered. `× fs::read` is source MB/s over the `fs::read` row of the same feed; \
         `× Feed::read` is gRPC over the `Feed::read` row with the same filter.\n"
    );
    let _ = writeln!(
        s,
        "| feed | layer | filter | source MB | records out | MB out | time s | source MB/s | records/s | × fs::read | × Feed::read |"
    );
    let _ = writeln!(s, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let base = rows
            .iter()
            .find(|r| r.source == row.source && r.layer == "fs::read")
            .map_or(f64::NAN, Row::source_mb_s);
        let feed = if row.layer.starts_with("gRPC") {
            rows.iter()
                .find(|r| {
                    r.source == row.source && r.layer == "Feed::read" && r.filter == row.filter
                })
                .map_or_else(String::new, |r| {
                    format!("{:.2}", row.source_mb_s() / r.source_mb_s())
                })
        } else {
            String::new()
        };
        let p = row.first();
        let (lo, hi) = row.spread();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {:.1} | {:.3} [{lo:.3}–{hi:.3}] | {:.0} | {:.0} | {:.2} | {feed} |",
            row.source.feed_id(),
            row.layer,
            row.filter,
            p.scanned as f64 / 1e6,
            p.records,
            p.delivered as f64 / 1e6,
            row.seconds(),
            row.source_mb_s(),
            row.records_s(),
            row.source_mb_s() / base,
        );
    }
    let _ = writeln!(
        s,
        "\ngRPC gaps between consecutive records as the client sees them (all passes; the first \
         gap is request to first record; `first record` is its median over passes), microseconds:\n"
    );
    let _ = writeln!(
        s,
        "| feed | filter | records | first record | p50 | p99 | p99.9 | max |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for (source, filter, h) in gaps {
        let first = rows
            .iter()
            .find(|r| r.source == *source && r.layer == "gRPC" && r.filter == *filter)
            .map_or(0.0, |r| {
                median(r.passes.iter().map(|p| p.first_s).collect())
            });
        let _ = writeln!(
            s,
            "| {} | {filter} | {} | {} | {} | {} | {} | {} |",
            source.feed_id(),
            h.len(),
            (first * 1e6).round(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
    s
}
