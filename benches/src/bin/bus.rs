//! Scale-out over NATS JetStream: how fast the node host publishes the node's records to the
//! bus, beside a plain read of the same files, and how long an appended line takes to reach a
//! raw-feed client through an edge, beside the node host's own raw-feed tail.
//!
//! `cargo run --release -p benches --bin bus -- [--blocks N] [--scale X] [--seconds S]
//! [--no-write]`
//!
//! Needs `nats-server` (Debian package `nats-server`). Starts one `nats-server -js` on a free
//! loopback port with a temporary store and `max_payload: 8MB`.
//!
//! - Publish throughput: `--blocks` mainnet-scale simulator blocks are generated, then an
//!   `l1gate` server (in this process) starts on them with `--publish`; the time from its start
//!   until JetStream acknowledged the last record of every feed, over the bytes of the six line
//!   feeds. Beside it, in the same run: `fs::read` of the same files.
//! - Append → record latency: the simulator appends blocks at mainnet pace; a node host
//!   publishing and an edge (both in this process) serve `StreamFills` live; each record's
//!   latency counts from the write of its fills line. Both streams are read in the same run, so
//!   the edge's figure stands beside the node host's own raw tail.
//!
//! Prints a table and rewrites the `bus` section of `benches/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use benches::live::{LiveNode, histogram, percentiles_ms, record};
use feeds::Source;
use l1gate::access::keys::KeysFile;
use l1gate::config::ServeArgs;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

struct Args {
    blocks: u64,
    scale: f64,
    seconds: u64,
    write: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        blocks: 1_500,
        scale: 1.0,
        seconds: 20,
        write: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--blocks" => a.blocks = value()?.parse().context("bad --blocks")?,
            "--scale" => a.scale = value()?.parse().context("bad --scale")?,
            "--seconds" => a.seconds = value()?.parse().context("bad --seconds")?,
            "--no-write" => a.write = false,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// A `nats-server -js` on loopback, killed when dropped.
struct Nats {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

impl Nats {
    fn start() -> anyhow::Result<Nats> {
        let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .context("nats-server not found: `apt-get install -y nats-server`")?;
        let store = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = store.path().join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: 127.0.0.1:{port}\nmax_payload: 8MB\njetstream {{ store_dir: \"{}\" }}\n",
                store.path().join("js").display()
            ),
        )?;
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("nats-server did not listen");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nats {
            child,
            port,
            _store: store,
        })
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /healthz` (plain HTTP/1.0) as JSON.
fn healthz(addr: SocketAddr) -> anyhow::Result<serde_json::Value> {
    let mut socket = std::net::TcpStream::connect(addr)?;
    socket.write_all(b"GET /healthz HTTP/1.0\r\nHost: bench\r\n\r\n")?;
    let mut text = String::new();
    socket.read_to_string(&mut text)?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(serde_json::from_str(body)?)
}

fn keys(dir: &Path) -> anyhow::Result<(PathBuf, String)> {
    let path = dir.join("keys.toml");
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("bench", 0)?;
    keys.save(&path)?;
    Ok((path, key))
}

fn serve_args(data: &Path, state: &Path, keys_file: &Path, nats: &str) -> ServeArgs {
    ServeArgs {
        data: Some(data.to_owned()),
        keys_file: Some(keys_file.to_owned()),
        grpc_addr: "127.0.0.1:0".parse().ok(),
        http_addr: "127.0.0.1:0".parse().ok(),
        state_dir: Some(state.to_owned()),
        market_stale_after_ms: Some(0),
        publish_url: Some(nats.to_owned()),
        publish_max_bytes: Some("1GiB".to_owned()),
        ..ServeArgs::default()
    }
}

/// Every file of the six line feeds.
fn line_files(data: &Path) -> anyhow::Result<Vec<(Source, PathBuf)>> {
    let mut out = Vec::new();
    for source in l1gate::bus::subjects::BUS_FEEDS {
        let feed = feeds::Feed::open(data, source)?;
        for (_, path, _) in feed.segments() {
            out.push((source, path));
        }
    }
    Ok(out)
}

struct Throughput {
    mb: f64,
    records: u64,
    publish_s: f64,
    read_s: f64,
    gen_s: f64,
    blocks: String,
}

async fn publish_throughput(args: &Args) -> anyhow::Result<Throughput> {
    let data = tempfile::tempdir()?;
    let mut cfg = fixtures::SimConfig::mainnet(1, args.scale);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    // Recent block times: within the streams' retention (`publish_max_age`, 24 h).
    cfg.start_time_ms = l1gate::unix_now_ms() - 3_600_000;
    let started = Instant::now();
    let summary = fixtures::generate(
        &cfg,
        data.path(),
        &fixtures::RunOptions {
            blocks: Some(args.blocks),
            ..fixtures::RunOptions::default()
        },
        &mut |_| {},
    )?;
    let gen_s = started.elapsed().as_secs_f64();
    let files = line_files(data.path())?;
    // Reference: read every file and count its lines, as the floor of any reader.
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut records = 0u64;
    for (_, path) in &files {
        let content = std::fs::read(path)?;
        bytes += content.len() as u64;
        records += memchr::memchr_iter(b'\n', &content).count() as u64;
    }
    let read_s = started.elapsed().as_secs_f64();
    let mut lasts = Vec::new();
    for source in l1gate::bus::subjects::BUS_FEEDS {
        let feed = feeds::Feed::open(data.path(), source)?;
        if let Some(block) = feed.newest().and_then(|h| h.block_number) {
            lasts.push((source, block));
        }
    }

    let nats = Nats::start()?;
    let state = tempfile::tempdir()?;
    let (keys_file, _) = keys(state.path())?;
    let settings = serve_args(
        data.path(),
        &state.path().join("s"),
        &keys_file,
        &nats.url(),
    )
    .resolve()?;
    let started = Instant::now();
    let running = l1gate::serve::start(&settings).await?;
    loop {
        let health = healthz(running.http_addr)?;
        let done = lasts.iter().all(|(source, last)| {
            health["bus"]["feeds"][source.feed_id()]["last_block"].as_u64() == Some(*last)
        });
        if done {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("the publisher did not catch up: {}", health["bus"]);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let publish_s = started.elapsed().as_secs_f64();
    drop(running);
    Ok(Throughput {
        mb: bytes as f64 / 1e6,
        records,
        publish_s,
        read_s,
        gen_s,
        blocks: format!(
            "{} blocks ({}..={})",
            summary.blocks,
            summary.first_height.unwrap_or(0),
            summary.last_height
        ),
    })
}

async fn fills_tail(
    addr: SocketAddr,
    key: &str,
) -> anyhow::Result<tonic::Streaming<proto::Record>> {
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20);
    let mut request = tonic::Request::new(proto::StreamRequest::default());
    request
        .metadata_mut()
        .insert("x-api-key", MetadataValue::try_from(key)?);
    Ok(client.stream_fills(request).await?.into_inner())
}

struct Latency {
    host: [f64; 5],
    edge: [f64; 5],
    host_n: u64,
    edge_n: u64,
    host_early: u64,
    edge_early: u64,
    blocks: u64,
}

async fn append_latency(args: &Args) -> anyhow::Result<Latency> {
    let mut cfg = fixtures::SimConfig::mainnet(2, args.scale);
    cfg.start_time_ms = l1gate::unix_now_ms();
    let max_blocks = args.seconds * 20 + 200;
    let node = LiveNode::start(&cfg, 20, 1.0, max_blocks)?;
    let nats = Nats::start()?;
    let state = tempfile::tempdir()?;
    let (keys_file, key) = keys(state.path())?;
    let settings = serve_args(
        node.path(),
        &state.path().join("host"),
        &keys_file,
        &nats.url(),
    )
    .resolve()?;
    let host = l1gate::serve::start(&settings).await?;
    let edge_settings = ServeArgs {
        keys_file: Some(keys_file.clone()),
        grpc_addr: "127.0.0.1:0".parse().ok(),
        http_addr: "127.0.0.1:0".parse().ok(),
        state_dir: Some(state.path().join("edge")),
        ..ServeArgs::default()
    }
    .resolve()?;
    let url = l1gate::bus::url::BusUrl::parse(&nats.url()).map_err(anyhow::Error::msg)?;
    let edge = l1gate::bus::edge::start(&url, &edge_settings).await?;
    // Let the edge catch up with the stream before measuring the tail.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = node.log.clone();
    let measure = |addr: SocketAddr| {
        let key = key.clone();
        let log = log.clone();
        let seconds = args.seconds;
        tokio::spawn(async move {
            let mut stream = fills_tail(addr, &key).await?;
            let mut latencies = histogram()?;
            let mut early = 0u64;
            let until = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < until {
                let Ok(Ok(Some(received))) =
                    tokio::time::timeout(Duration::from_secs(10), stream.message()).await
                else {
                    bail!("the fills tail at {addr} ended or went quiet");
                };
                let now = Instant::now();
                let block = received.block_number.unwrap_or(0) as u64;
                if let Some(latency) = log.since_fills(block, now) {
                    record(&mut latencies, latency);
                } else if log.since_first_line(block, now).is_some() {
                    // The writer began this block but had not noted the fills line's write
                    // yet (descheduled between the write and its clock): not counted.
                    early += 1;
                }
            }
            anyhow::Ok((latencies, early))
        })
    };
    let (host_latency, edge_latency) =
        tokio::join!(measure(host.grpc_addr), measure(edge.grpc_addr));
    let ((host_latency, host_early), (edge_latency, edge_early)) = (host_latency??, edge_latency??);
    drop(edge);
    drop(host);
    let blocks = node.stop()?;
    Ok(Latency {
        host: percentiles_ms(&host_latency),
        edge: percentiles_ms(&edge_latency),
        host_n: host_latency.len(),
        edge_n: edge_latency.len(),
        host_early,
        edge_early,
        blocks,
    })
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let machine = benches::Machine::detect();
    let command = benches::cargo_command("bus");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (throughput, latency) = runtime.block_on(async {
        let throughput = publish_throughput(&args).await?;
        let latency = append_latency(&args).await?;
        anyhow::Ok((throughput, latency))
    })?;
    let mut s = String::new();
    let _ = writeln!(s, "## Scale-out over NATS JetStream (`bus`)\n");
    s.push_str(&machine.markdown(&command));
    let _ = writeln!(
        s,
        "- Bus: `nats-server -js` (Debian's package, {}) on loopback, file store in a temporary directory, `max_payload: 8MB`; the node host and the edge run in this process (one runtime), the bus in its own",
        nats_version()
    );
    let _ = writeln!(
        s,
        "- Publish: simulator `SimConfig::mainnet(seed 1, scale {})`, {}, {:.1} MB of line-feed output ({} records; generated in {:.1} s); a server started with `--publish` on them, timed from its start until JetStream acknowledged the last record of every feed (the server's engine catches up on the same 2 cores meanwhile)",
        args.scale, throughput.blocks, throughput.mb, throughput.records, throughput.gen_s
    );
    let _ = writeln!(
        s,
        "- Latency: the simulator appends mainnet-scale blocks at mainnet pace ({} blocks); `StreamFills` live tails on the node host and on an edge, read in the same run for {} s; latency from the write of a block's fills line to the record's arrival at the client\n",
        latency.blocks, args.seconds
    );
    let _ = writeln!(s, "| scenario | measured | beside (same run) | ratio |");
    let _ = writeln!(s, "|---|---|---|---:|");
    let publish_mbs = throughput.mb / throughput.publish_s;
    let read_mbs = throughput.mb / throughput.read_s;
    let _ = writeln!(
        s,
        "| publish, all six feeds | {publish_mbs:.0} MB/s ({:.0} records/s, {:.2} s) | `fs::read` + line count of the same files: {read_mbs:.0} MB/s | {:.2}× |",
        throughput.records as f64 / throughput.publish_s,
        throughput.publish_s,
        publish_mbs / read_mbs
    );
    let [hp50, _, hp99, _, hmax] = latency.host;
    let [ep50, _, ep99, _, emax] = latency.edge;
    let _ = writeln!(
        s,
        "| append → record through the edge, `StreamFills` | p50 {ep50:.3} ms, p99 {ep99:.3} ms, max {emax:.3} ms ({} records; {} early) | node host's own tail: p50 {hp50:.3} ms, p99 {hp99:.3} ms, max {hmax:.3} ms ({} records; {} early) | {:.2}× p50 |",
        latency.edge_n,
        latency.edge_early,
        latency.host_n,
        latency.host_early,
        ep50 / hp50.max(0.001)
    );
    let _ = writeln!(
        s,
        "\n`early`: records that arrived before the writer thread noted the write of their fills line (it was descheduled between the write and its clock; 2 cores); they are not in the percentiles, which for the node host's tail therefore leave out its fastest records.\n\nThe edge's path adds the publisher's read of the file, the publish to JetStream (stored before it is delivered), the edge's pull consumer, its write of the line to its copy of the files and its raw-feed read of that copy."
    );
    println!("{s}");
    if args.write {
        benches::write_section(&benches::benchmarks_md(), "bus", &s)?;
    }
    Ok(())
}

fn nats_version() -> String {
    Command::new("/usr/sbin/nats-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "version unknown".to_owned(), |v| v.trim().to_owned())
}
