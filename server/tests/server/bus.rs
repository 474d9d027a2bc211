//! Scale-out over a real NATS JetStream server: a node host publishes
//! (`serve --publish`), edges serve the raw feed from the bus (`l1gate
//! edge`), and what an edge sends is what the node host sends — live while
//! the node directory grows, after a late start, across a publisher restart
//! and a bus restart — and bad or unreachable buses are named without
//! their password.
//!
//! Each test starts its own `nats-server -js` on a free loopback port with a
//! temporary store. The server comes from Debian's `nats-server` package,
//! installed here when missing (as root); without it the tests fail, saying
//! so.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bus::url::BusUrl;
use feeds::Source;
use l1gate::bus_edge::RunningEdge;
use l1gate::config::ServeArgs;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use proto::{Record, StreamRequest};
use serde_json::Value;
use tonic::transport::Channel;

use super::access_support::{eventually, http_get, sample};
use super::harness::{TestServer, free_port, from_block, install_debian_packages, with_key};
use super::market_live::{NodeLine, PacedWriter, files};
use super::standin::post_json;

const WAIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- nats-server

/// `nats-server`, installed from Debian's package when missing.
fn nats_server_binary() -> PathBuf {
    let find = || {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .iter()
            .map(PathBuf::from)
            .find(|path| path.exists())
    };
    if let Some(path) = find() {
        return path;
    }
    install_debian_packages(&["nats-server"], "the bus tests");
    find().expect("nats-server installed but not found in /usr/sbin or /usr/bin")
}

/// A `nats-server -js` on loopback with its own store.
pub struct Nats {
    child: Option<Child>,
    pub port: u16,
    store: tempfile::TempDir,
    user: Option<(String, String)>,
    /// Certificate and key files when it speaks TLS, and the CA that
    /// signed them.
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Its `max_payload` when not the default (1 MB).
    max_payload: Option<usize>,
}

impl Nats {
    pub fn start() -> Nats {
        Self::start_as(None)
    }

    /// A server that admits only `user` with `password`.
    pub fn with_user(user: &str, password: &str) -> Nats {
        Self::start_as(Some((user.to_owned(), password.to_owned())))
    }

    /// A server that requires TLS with `cert` and `key` (signed by `ca`).
    pub fn with_tls(cert: PathBuf, key: PathBuf, ca: PathBuf) -> Nats {
        let mut nats = Nats {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            user: None,
            tls: Some((cert, key, ca)),
            max_payload: None,
        };
        nats.run();
        nats
    }

    /// A server whose `max_payload` is `bytes`.
    pub fn with_max_payload(bytes: usize) -> Nats {
        let mut nats = Nats {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            user: None,
            tls: None,
            max_payload: Some(bytes),
        };
        nats.run();
        nats
    }

    fn start_as(user: Option<(String, String)>) -> Nats {
        let mut nats = Nats {
            child: None,
            port: free_port(),
            store: tempfile::tempdir().unwrap(),
            user,
            tls: None,
            max_payload: None,
        };
        nats.run();
        nats
    }

    /// Starts the server (again) on the same port and store.
    pub fn run(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut command = Command::new(nats_server_binary());
        command
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((user, password)) = &self.user {
            command.args(["--user", user, "--pass", password]);
        }
        if let Some(bytes) = self.max_payload {
            // Only a configuration file sets it.
            let conf = self.store.path().join("nats.conf");
            std::fs::write(&conf, format!("max_payload: {bytes}\n")).unwrap();
            command.arg("-c").arg(conf);
        }
        if let Some((cert, key, _)) = &self.tls {
            command
                .arg("--tls")
                .arg("--tlscert")
                .arg(cert)
                .arg("--tlskey")
                .arg(key);
        }
        self.child = Some(command.spawn().unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nats-server did not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server as an operator would (SIGTERM), and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while child.try_wait().unwrap().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The server's URL, with its credentials when it has some
    /// (`tls://localhost:PORT` when it speaks TLS).
    pub fn url(&self) -> String {
        match (&self.user, &self.tls) {
            (_, Some(_)) => format!("tls://localhost:{}", self.port),
            (Some((user, password)), None) => {
                format!("nats://{user}:{password}@127.0.0.1:{}", self.port)
            }
            (None, None) => format!("nats://127.0.0.1:{}", self.port),
        }
    }

    /// A JetStream context of the test's own.
    async fn jetstream(&self) -> async_nats::jetstream::Context {
        let ca = self.tls.as_ref().map(|(_, _, ca)| ca.as_path());
        let tls = edge::upstream::UpstreamTls::new(ca).unwrap();
        let client = BusUrl::parse(&self.url())
            .unwrap()
            .connect("l1gate test", &tls)
            .await
            .unwrap();
        async_nats::jetstream::new(client)
    }

    /// Messages and last sequence of a feed's stream.
    async fn stream_state(&self, source: Source) -> (u64, u64) {
        let js = self.jetstream().await;
        let stream = js
            .get_stream(bus::subjects::stream_name(source))
            .await
            .unwrap();
        let info = stream.get_info().await.unwrap();
        (info.state.messages, info.state.last_sequence)
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------- node files

/// A node directory grown by a background writer from the simulator's
/// output (all six line feeds, by-block layout, `replica_cmds` included).
pub struct GrowingNode {
    /// First, so that it stops before the directory goes (fields drop in
    /// order).
    writer: PacedWriter,
    dir: tempfile::TempDir,
    /// The first block written.
    first: u64,
    /// Last block written per node directory.
    last: BTreeMap<String, u64>,
}

impl GrowingNode {
    /// `blocks` blocks; the first `initial` at once, then one every `every`.
    pub fn start(blocks: u64, initial: u64, every: Duration) -> GrowingNode {
        Self::start_with(fixtures::SimConfig::small(21), blocks, initial, every)
    }

    /// [`GrowingNode::start`] with the simulator configured as `cfg`.
    pub fn start_with(
        mut cfg: fixtures::SimConfig,
        blocks: u64,
        initial: u64,
        every: Duration,
    ) -> GrowingNode {
        let source = tempfile::tempdir().unwrap();
        cfg.mode = fixtures::OutputMode::ByBlock;
        cfg.snapshot_every = None;
        // Recent block times: within the streams' retention, and fresh.
        cfg.start_time_ms = common::unix_now_ms() - 2_000;
        let run = fixtures::RunOptions {
            blocks: Some(blocks),
            ..fixtures::RunOptions::default()
        };
        fixtures::generate(&cfg, source.path(), &run, &mut |_| {}).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut lines: Vec<NodeLine> = Vec::new();
        let mut last = BTreeMap::new();
        for path in files(source.path()) {
            let relative = path.strip_prefix(source.path()).unwrap().to_owned();
            let target = dir.path().join(&relative);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(&target, b"").unwrap();
            let node_dir = relative
                .components()
                .nth(2)
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .into_owned();
            let replica = node_dir == "replica_cmds";
            let height: u64 = if replica {
                path.file_name().unwrap().to_str().unwrap().parse().unwrap()
            } else {
                0
            };
            let bytes = std::fs::read(&path).unwrap();
            for (index, line) in bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .enumerate()
            {
                let block = if replica {
                    height + index as u64
                } else {
                    feeds::envelope::decode(line).unwrap().block_number
                };
                let entry = last.entry(node_dir.clone()).or_insert(0);
                *entry = (*entry).max(block);
                lines.push((block, target.clone(), line.to_vec()));
            }
        }
        let first = lines.iter().map(|line| line.0).min().unwrap();
        let writer = PacedWriter::start(lines, initial, every, |_| false);
        GrowingNode {
            writer,
            dir,
            first,
            last,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn finished(&self) -> bool {
        self.writer.finished()
    }

    /// The first block written.
    pub fn first_block(&self) -> u64 {
        self.first
    }

    /// The last block of a feed (`None` when the simulator wrote none).
    fn last_block(&self, source: Source) -> Option<u64> {
        self.last.get(source.dir_names()[0]).copied()
    }
}

// ---------------------------------------------------------------- servers

/// A node host publishing `node` to `nats`.
pub async fn publisher(node: &Path, nats: &str) -> TestServer {
    let url = nats.to_owned();
    TestServer::start(node, move |args| {
        args.publish_url = Some(url);
        // JetStream reserves this for each stream.
        args.publish_max_bytes = Some("64MiB".into());
        args.poll_interval_ms = Some(50);
    })
    .await
}

/// An edge on `nats` with the node host's keys.
pub struct Edge {
    pub running: RunningEdge,
    pub state: tempfile::TempDir,
}

impl Edge {
    pub async fn start(nats: &str, keys_file: &Path) -> anyhow::Result<Edge> {
        let state = tempfile::tempdir().unwrap();
        let settings = ServeArgs {
            keys_file: Some(keys_file.to_owned()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            state_dir: Some(state.path().to_owned()),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap();
        let url = BusUrl::parse(nats).map_err(anyhow::Error::msg)?;
        let running = l1gate::bus_edge::start(&url, &settings).await?;
        Ok(Edge { running, state })
    }
}

async fn client(addr: SocketAddr) -> VenueL1GatewayClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    VenueL1GatewayClient::new(channel).max_decoding_message_size(256 << 20)
}

/// Opens the stream of `source` with `request`.
async fn open(
    client: &mut VenueL1GatewayClient<Channel>,
    source: Source,
    request: tonic::Request<StreamRequest>,
) -> tonic::Streaming<Record> {
    let response = match source {
        Source::Blocks => client.stream_blocks(request).await,
        Source::Fills => client.stream_fills(request).await,
        Source::RawBookDiffs => client.stream_raw_book_diffs(request).await,
        Source::OrderStatuses => client.stream_order_statuses(request).await,
        Source::MiscEvents => client.stream_misc_events(request).await,
        Source::TwapStatuses => client.stream_twap_statuses(request).await,
        Source::OrderbookSnapshots => client.stream_orderbook_snapshots(request).await,
    };
    response.unwrap().into_inner()
}

/// Every record of `source` from block 1 through `last`, as `addr` sends
/// them.
async fn records_through(addr: SocketAddr, key: &str, source: Source, last: u64) -> Vec<Record> {
    let mut client = client(addr).await;
    let mut stream = open(&mut client, source, with_key(from_block(1), key)).await;
    let mut records = Vec::new();
    loop {
        let record = match tokio::time::timeout(WAIT, stream.message()).await {
            Ok(Ok(Some(record))) => record,
            other => panic!(
                "{}: {addr} stopped after {} records (last block {:?}): {other:?}",
                source.feed_id(),
                records.len(),
                records.last().and_then(|r: &Record| r.block_number)
            ),
        };
        let block = record.block_number.unwrap() as u64;
        records.push(record);
        if block >= last {
            return records;
        }
    }
}

/// The bus entry of `/healthz` at `addr`.
async fn bus_health(addr: SocketAddr) -> Value {
    let reply = http_get(addr, "/healthz", None).await;
    let body: Value = serde_json::from_str(&reply.text).unwrap();
    body["bus"].clone()
}

/// Waits until the publisher at `addr` acknowledged block `last` of every
/// feed in `lasts`.
async fn published(addr: SocketAddr, lasts: &[(Source, u64)]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let bus = bus_health(addr).await;
        if lasts.iter().all(|(source, last)| {
            bus["feeds"][source.feed_id()]["last_block"].as_u64() == Some(*last)
        }) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the publisher did not catch up with the files {lasts:?}: {bus:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn feeds_of(node: &GrowingNode) -> Vec<(Source, u64)> {
    bus::subjects::BUS_FEEDS
        .iter()
        .filter_map(|&source| Some((source, node.last_block(source)?)))
        .collect()
}

/// Asserts the edge sends, for every feed, exactly the host's records.
async fn assert_same_records(host: &TestServer, edge: SocketAddr, feeds: &[(Source, u64)]) {
    let mut checks = Vec::new();
    for &(source, last) in feeds {
        let key = host.key.clone();
        let host_addr = host.running.grpc_addr;
        checks.push(tokio::spawn(async move {
            let (want, got) = tokio::join!(
                records_through(host_addr, &key, source, last),
                records_through(edge, &key, source, last)
            );
            assert_eq!(
                got.len(),
                want.len(),
                "{}: record count from the edge",
                source.feed_id()
            );
            for (got, want) in got.iter().zip(&want) {
                assert_eq!(got, want, "{}: a record differs", source.feed_id());
            }
            want.len()
        }));
    }
    for check in checks {
        assert!(check.await.unwrap() > 0);
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_serves_every_feed_byte_identical_to_the_node_host_while_the_node_writes() {
    let nats = Nats::start();
    let node = GrowingNode::start(60, 10, Duration::from_millis(40));
    let feeds = feeds_of(&node);
    assert_eq!(
        feeds.len(),
        6,
        "the simulator writes every line feed: {feeds:?}"
    );
    let host = publisher(node.path(), &nats.url()).await;
    let edge = Edge::start(&nats.url(), &host.keys_file).await.unwrap();
    let edge_addr = edge.running.server.grpc_addr;
    // Streams from block 1 on both, opened while the node still writes.
    assert_same_records(&host, edge_addr, &feeds).await;

    // The feed list names the node's directories on both.
    let list = |addr| {
        let key = host.key.clone();
        async move {
            client(addr)
                .await
                .list_feeds(with_key(proto::ListFeedsRequest {}, &key))
                .await
                .unwrap()
                .into_inner()
        }
    };
    assert_eq!(list(edge_addr).await, list(host.running.grpc_addr).await);
    // A filtered unary lookup answers alike.
    let get = |addr| {
        let key = host.key.clone();
        async move {
            client(addr)
                .await
                .get_order_statuses(with_key(
                    proto::GetRequest {
                        position: Some(proto::Position {
                            kind: Some(proto::position::Kind::BlockNumber(20)),
                        }),
                        filter: Some(proto::Filter {
                            fields: vec![proto::FieldFilter {
                                field: "coins".into(),
                                op: 0,
                                values: vec!["BTC".into()],
                            }],
                        }),
                    },
                    &key,
                ))
                .await
                .unwrap()
                .into_inner()
        }
    };
    assert_eq!(get(edge_addr).await, get(host.running.grpc_addr).await);

    // Both sides report the bus.
    published(host.running.http_addr, &feeds).await;
    let bus = bus_health(host.running.http_addr).await;
    assert_eq!(bus["role"], "publisher");
    assert_eq!(bus["connected"], true);
    assert_eq!(bus["url"], nats.url());
    let edge_bus = bus_health(edge.running.server.http_addr).await;
    assert_eq!(edge_bus["role"], "edge");
    assert_eq!(edge_bus["connected"], true);
    let metrics = http_get(host.running.http_addr, "/metrics", None)
        .await
        .text;
    let (messages, _) = nats.stream_state(Source::Fills).await;
    assert_eq!(
        sample(&metrics, "l1gate_bus_records_total{feed=\"fills\"}"),
        messages
    );
    assert_eq!(sample(&metrics, "l1gate_bus_connected"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_started_late_catches_up_from_the_start_of_the_stream() {
    let nats = Nats::start();
    let node = GrowingNode::start(40, 40, Duration::ZERO);
    let feeds = feeds_of(&node);
    let host = publisher(node.path(), &nats.url()).await;
    published(host.running.http_addr, &feeds).await;
    let edge = Edge::start(&nats.url(), &host.keys_file).await.unwrap();
    assert_same_records(&host, edge.running.server.grpc_addr, &feeds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_restarted_mid_run_leaves_no_duplicate_and_no_gap() {
    let nats = Nats::start();
    let node = GrowingNode::start(90, 5, Duration::from_millis(30));
    let feeds = feeds_of(&node);
    let first = publisher(node.path(), &nats.url()).await;
    eventually(WAIT, "the first publisher published", || async {
        bus_health(first.running.http_addr).await["feeds"]["fills"]["last_block"]
            .as_u64()
            .is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = publisher(node.path(), &nats.url()).await;
    eventually(WAIT, "the node wrote every block", || async {
        node.finished()
    })
    .await;
    published(second.running.http_addr, &feeds).await;
    // Every record once, in order: as many messages as records in the
    // files, with consecutive sequences.
    for &(source, last) in &feeds {
        let records = records_through(second.running.grpc_addr, &second.key, source, last).await;
        let (messages, last_sequence) = nats.stream_state(source).await;
        assert_eq!(
            (messages, last_sequence),
            (records.len() as u64, records.len() as u64),
            "{}: stream messages and last sequence against the records in the files",
            source.feed_id()
        );
    }
    // The second publisher resumed where the stream ended: it did not
    // publish everything again.
    let metrics = http_get(second.running.http_addr, "/metrics", None)
        .await
        .text;
    let (messages, _) = nats.stream_state(Source::Fills).await;
    let resumed = sample(&metrics, "l1gate_bus_records_total{feed=\"fills\"}");
    assert!(resumed > 0 && resumed < messages, "{resumed} of {messages}");
    let edge = Edge::start(&nats.url(), &second.keys_file).await.unwrap();
    assert_same_records(&second, edge.running.server.grpc_addr, &feeds).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_resumes_after_a_bus_restart_without_gap_or_duplicate() {
    let mut nats = Nats::start();
    let node = GrowingNode::start(120, 10, Duration::from_millis(40));
    let feeds = feeds_of(&node);
    let host = publisher(node.path(), &nats.url()).await;
    let edge = Edge::start(&nats.url(), &host.keys_file).await.unwrap();
    let edge_addr = edge.running.server.grpc_addr;
    // Live streams from block 1 on the edge, across the outage.
    let mut readers = Vec::new();
    for &(source, last) in &feeds {
        let key = host.key.clone();
        readers.push((
            source,
            last,
            tokio::spawn(async move { records_through(edge_addr, &key, source, last).await }),
        ));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!node.finished(), "the outage falls while the node writes");
    nats.stop();
    eventually(WAIT, "the edge reported the bus down", || async {
        bus_health(edge.running.server.http_addr).await["connected"] == false
    })
    .await;
    // The node keeps writing while the bus is down.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    nats.run();
    for (source, last, reader) in readers {
        let got = reader.await.unwrap();
        let want = records_through(host.running.grpc_addr, &host.key, source, last).await;
        let blocks = |records: &[Record]| -> Vec<i64> {
            records.iter().map(|r| r.block_number.unwrap()).collect()
        };
        assert_eq!(blocks(&got), blocks(&want), "{}: blocks", source.feed_id());
        assert_eq!(got, want, "{}: records", source.feed_id());
    }
    let metrics = http_get(edge.running.server.http_addr, "/metrics", None)
        .await
        .text;
    assert_eq!(sample(&metrics, "l1gate_bus_gaps_total{feed=\"fills\"}"), 0);
    // The edge's market folded the outage's blocks too: it ends where the
    // node host's does, with the same books.
    let (host_engine, edge_engine) = (
        host.running.engine.status().clone(),
        edge.running.server.engine.status().clone(),
    );
    eventually(WAIT, "the edge's engine ends where the host's does", || {
        let (host_engine, edge_engine) = (host_engine.clone(), edge_engine.clone());
        let finished = node.finished();
        async move { finished && edge_engine.height() == host_engine.height() }
    })
    .await;
    let book = r#"{"type":"l2Book","coin":"ETH"}"#;
    let on_host = post_json(host.running.http_addr, "/info", Some(&host.key), book).await;
    let on_edge = post_json(
        edge.running.server.http_addr,
        "/info",
        Some(&host.key),
        book,
    )
    .await;
    assert_eq!(on_edge.status, 200, "{}", on_edge.text);
    assert_eq!(on_edge.text, on_host.text, "the books after the outage");
    // No record twice in the stream either (the publisher's queued
    // publishes went out after the reconnect, or it resumed from the end).
    for &(source, _) in &feeds {
        let (messages, last_sequence) = nats.stream_state(source).await;
        let records = records_through(
            host.running.grpc_addr,
            &host.key,
            source,
            node.last_block(source).unwrap_or(0),
        )
        .await;
        assert_eq!(
            (messages, last_sequence),
            (records.len() as u64, records.len() as u64),
            "{}",
            source.feed_id()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_unreachable_buses_are_named_without_the_password() {
    let nats = Nats::with_user("l1gate", "right-horse-battery");
    let keys = tempfile::tempdir().unwrap();
    let keys_file = keys.path().join("keys.toml");
    access::keys::KeysFile::default().save(&keys_file).unwrap();
    let wrong = format!("nats://l1gate:wrong-staple@127.0.0.1:{}", nats.port);
    let error = Edge::start(&wrong, &keys_file)
        .await
        .err()
        .expect("an edge with a wrong password does not start")
        .to_string();
    assert!(
        error.contains(&format!("nats://l1gate:***@127.0.0.1:{}", nats.port)),
        "{error}"
    );
    assert!(error.contains("credentials"), "{error}");
    assert!(!error.contains("wrong-staple"), "{error}");

    let nobody = free_port();
    let error = Edge::start(&format!("nats://127.0.0.1:{nobody}"), &keys_file)
        .await
        .err()
        .expect("an edge on an unreachable bus does not start")
        .to_string();
    assert!(
        error.contains(&format!("nats://127.0.0.1:{nobody}")) && error.contains("unreachable"),
        "{error}"
    );

    // The right password connects; with no publisher yet, the edge waits
    // for an engine checkpoint on the bus and starts once one is there.
    let waiting = {
        let (url, keys_file) = (nats.url(), keys_file.clone());
        tokio::spawn(async move { Edge::start(&url, &keys_file).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "the edge started with nothing to start from"
    );
    let node = GrowingNode::start(5, 5, Duration::ZERO);
    let _right = publisher(node.path(), &nats.url()).await;
    let edge = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the edge starts once a checkpoint is on the bus")
        .unwrap()
        .unwrap();
    assert_eq!(
        bus_health(edge.running.server.http_addr).await["connected"],
        true
    );
    // A second edge on the same state directory would empty the first
    // one's copy: refused, naming the directory.
    let settings = ServeArgs {
        keys_file: Some(keys_file.clone()),
        grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
        http_addr: Some("127.0.0.1:0".parse().unwrap()),
        state_dir: Some(edge.state.path().to_owned()),
        ..ServeArgs::default()
    }
    .resolve()
    .unwrap();
    let url = BusUrl::parse(&nats.url()).unwrap();
    let error = l1gate::bus_edge::start(&url, &settings)
        .await
        .expect_err("a second edge on the same state_dir does not start")
        .to_string();
    assert!(
        error.contains("in use by another edge")
            && error.contains(&edge.state.path().display().to_string()),
        "{error}"
    );
    assert!(
        !files(&edge.state.path().join("bus-mirror")).is_empty(),
        "the first edge's copy is left alone"
    );
    assert_eq!(
        Some(edge.running.started_from),
        node.last_block(Source::Fills),
        "the edge starts from the publisher's checkpoint at its catch-up"
    );

    // A node host with a wrong password serves anyway and says why it
    // does not publish.
    let host = publisher(node.path(), &wrong).await;
    let mut client = host.client().await;
    let mut fills = open(&mut client, Source::Fills, host.req(from_block(1))).await;
    assert!(
        fills.message().await.unwrap().is_some(),
        "the node is served"
    );
    eventually(WAIT, "the publisher reports the refusal", || async {
        !bus_health(host.running.http_addr).await["error"].is_null()
    })
    .await;
    let bus = bus_health(host.running.http_addr).await;
    let text = bus.to_string();
    assert_eq!(bus["connected"], false);
    assert!(text.contains("credentials"), "{text}");
    assert!(
        text.contains(&format!("nats://l1gate:***@127.0.0.1:{}", nats.port)),
        "{text}"
    );
    assert!(!text.contains("wrong-staple"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_over_tls_is_verified_against_the_ca_bundle() {
    let pki = super::tls::Pki::new("bus CA");
    let ca_file = pki.ca_file.clone();
    let nats = Nats::with_tls(
        pki.files.cert.clone(),
        pki.files.key.clone(),
        ca_file.clone(),
    );
    let keys = tempfile::tempdir().unwrap();
    let keys_file = keys.path().join("keys.toml");
    access::keys::KeysFile::default().save(&keys_file).unwrap();
    let edge_settings = |ca: Option<&Path>, state: &Path| {
        ServeArgs {
            keys_file: Some(keys_file.clone()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            state_dir: Some(state.to_owned()),
            upstream_ca_file: ca.map(Path::to_owned),
            ..ServeArgs::default()
        }
        .resolve()
        .unwrap()
    };
    let url = BusUrl::parse(&nats.url()).unwrap();

    // Without the bundle the bus's certificate does not verify: the edge
    // does not start, saying so.
    let state = tempfile::tempdir().unwrap();
    let error = l1gate::bus_edge::start(&url, &edge_settings(None, state.path()))
        .await
        .expect_err("an edge that cannot verify the bus does not start")
        .to_string();
    assert!(
        error.contains("TLS") && error.contains("certificate"),
        "{error}"
    );

    // With it: the node host publishes over TLS and an edge serves what it
    // published.
    let node = GrowingNode::start(5, 5, Duration::ZERO);
    let host = {
        let (url, ca) = (nats.url(), ca_file.clone());
        TestServer::start(node.path(), move |args| {
            args.publish_url = Some(url);
            args.publish_max_bytes = Some("64MiB".into());
            args.poll_interval_ms = Some(50);
            args.upstream_ca_file = Some(ca);
        })
        .await
    };
    published(host.running.http_addr, &feeds_of(&node)).await;
    let (_, last) = nats.stream_state(Source::Fills).await;
    assert!(last > 0, "records on the bus");
    let state = tempfile::tempdir().unwrap();
    let edge = tokio::time::timeout(
        WAIT,
        l1gate::bus_edge::start(&url, &edge_settings(Some(&ca_file), state.path())),
    )
    .await
    .expect("the edge starts in time")
    .unwrap();
    assert_eq!(bus_health(edge.server.http_addr).await["connected"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_longer_than_max_payload_travel_compressed_and_arrive_whole() {
    // Mainnet-scale order statuses: a block's line is 200–250 KB, over a
    // 160 KiB max_payload (which still takes the checkpoints' 128 KiB
    // chunks); compressed it is about an eighth of that.
    let nats = Nats::with_max_payload(160 << 10);
    let mut cfg = fixtures::SimConfig::mainnet(21, 1.0);
    cfg.start_time_ms = common::unix_now_ms() - 2_000;
    let node = GrowingNode::start_with(cfg, 5, 5, Duration::ZERO);
    let longest = files(node.path())
        .iter()
        .flat_map(|path| {
            std::fs::read(path)
                .unwrap()
                .split(|&b| b == b'\n')
                .map(<[u8]>::len)
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap();
    assert!(longest > 160 << 10, "the longest line is {longest} bytes");
    let host = publisher(node.path(), &nats.url()).await;
    let feeds = feeds_of(&node);
    published(host.running.http_addr, &feeds).await;
    let keys = host.keys_file.clone();
    let edge = Edge::start(&nats.url(), &keys).await.unwrap();
    assert_same_records(&host, edge.running.server.grpc_addr, &feeds).await;
}
