//! The `l1gate` binary as a user runs it: demo mode with no node, the
//! simulator command, key management, connection floods, and the memory a
//! burst of clients leaves.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use proto::StreamRequest;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;

use super::harness::{block_number, free_port, next, with_key};

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        // SIGTERM, so the demo cleans up its directory.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let _ = self.0.wait();
    }
}

/// `l1gate serve` in a child process over `data`, with one key (of an
/// admin account: the status page says the engine's height), loopback
/// addresses of its own, `extra` arguments and, with `nofile`, that
/// open-file limit; up once it logged `serving`.
struct Served {
    guard: Killed,
    /// Its log lines, read on a thread of their own.
    log: std::sync::mpsc::Receiver<String>,
    /// What it logged up to `serving`.
    start_log: Vec<String>,
    http: String,
    grpc: String,
    key: String,
    /// Holds the keys file and the state directory.
    _dir: tempfile::TempDir,
}

impl Served {
    fn start(data: &std::path::Path, nofile: Option<u32>, extra: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys.toml");
        // A keys file with one key: a missing one is a start-up error.
        let mut file = access::keys::KeysFile::default();
        let (key, _) = file.add_key("tests", 0).unwrap();
        file.set_role("tests", access::keys::Role::Admin).unwrap();
        file.save(&keys).unwrap();
        let http = format!("127.0.0.1:{}", free_port());
        let grpc = format!("127.0.0.1:{}", free_port());
        let limit = nofile.map_or_else(String::new, |n| format!("ulimit -n {n} && "));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{limit}exec \"$0\" \"$@\""))
            .arg(L1GATE)
            .arg("serve")
            .arg("--data")
            .arg(data)
            .arg("--keys-file")
            .arg(&keys)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--grpc-addr", &grpc, "--http-addr", &http])
            .args(extra)
            .env_remove("L1GATE_LOG")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let guard = Killed(child);
        let log = lines_of(stderr);
        let mut start_log: Vec<String> = Vec::new();
        let started = std::time::Instant::now();
        while !start_log.last().is_some_and(|l| l.contains("serving")) {
            start_log.push(
                log.recv_timeout(Duration::from_secs(30))
                    .expect("server start"),
            );
            assert!(started.elapsed() < Duration::from_secs(30));
        }
        Served {
            guard,
            log,
            start_log,
            http,
            grpc,
            key,
            _dir: dir,
        }
    }

    /// `GET path` from the loopback address `from`, with the key: the
    /// whole answer.
    fn get(&self, from: &str, path: &str) -> String {
        use std::io::{Read as _, Write as _};
        let mut stream = connect_from_blocking(from, &self.http);
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: l1gate.test\r\nX-Api-Key: {}\r\nConnection: close\r\n\r\n",
            self.key
        )
        .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }
}

/// The lines `from` yields, read on a thread of their own.
fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Read to the end whatever comes (a line that is not UTF-8 too): a
        // pipe nobody drains would block the child's next write.
        let mut from = BufReader::new(from);
        let mut line = Vec::new();
        while from.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line).trim_end().to_owned();
            line.clear();
            if tx.send(text).is_err() {
                break;
            }
        }
    });
    rx
}

#[tokio::test]
async fn serve_without_data_runs_the_simulator_and_prints_a_working_key() {
    let grpc = format!("127.0.0.1:{}", free_port());
    let http = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(L1GATE)
        .args(["serve", "--grpc-addr", &grpc, "--http-addr", &http])
        .env("L1GATE_DEMO_SCALE", "0.01")
        .env_remove("L1GATE_DATA")
        .env_remove("L1GATE_KEYS_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _guard = Killed(child);
    let rx = lines_of(stdout);
    let mut key = None;
    let mut data_dir = None;
    while key.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("demo banner");
        if let Some(k) = line.strip_prefix("demo API key: ") {
            key = Some(k.trim().to_owned());
        }
        if let Some(rest) = line.strip_prefix(
            "l1gate demo: the built-in simulator is writing mainnet-like node output to ",
        ) {
            data_dir = Some(std::path::PathBuf::from(rest.trim()));
        }
    }
    let key = key.unwrap();
    assert!(key.starts_with("l1g_"));
    let data_dir = data_dir.expect("banner names the data directory");
    assert!(data_dir.join("hl/data/node_fills_by_block").is_dir());

    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = VenueL1GatewayClient::new(channel);
    let mut stream = client
        .stream_raw_book_diffs(with_key(StreamRequest::default(), &key))
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut stream, Duration::from_secs(30)).await.unwrap();
    let second = next(&mut stream, Duration::from_secs(30)).await.unwrap();
    assert_eq!(
        block_number(&second.data),
        block_number(&first.data) + 1,
        "live blocks, in order"
    );
    let status = client
        .stream_fills(with_key(StreamRequest::default(), "l1g_not_the_key"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    drop(_guard);
    for _ in 0..50 {
        if !data_dir.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!data_dir.exists(), "demo data removed on SIGTERM");
}

#[test]
fn simulate_writes_node_files_that_the_feeds_read() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(L1GATE)
        .args(["simulate", "--out"])
        .arg(dir.path())
        .args([
            "--small",
            "--blocks",
            "30",
            "--mode",
            "both",
            "--seed",
            "7",
            "--snapshot-every",
            "10",
        ])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(String::from_utf8_lossy(&status.stderr).contains("wrote 30 blocks"));
    let feed = feeds::Feed::open(dir.path(), feeds::Source::RawBookDiffs).unwrap();
    let mut cursor = feed.seek(feeds::Start::BlockNumber(0)).unwrap();
    let records = feed.read(&mut cursor, 1_000).unwrap();
    assert_eq!(records.len(), 30, "one by-block line per block");
    let snapshots = feeds::Snapshots::open(dir.path()).unwrap();
    // Fresh files are listed once their length is seen stable across a refresh.
    snapshots.refresh().unwrap();
    assert_eq!(
        snapshots.list().len(),
        4,
        "the starting state and one every 10 blocks"
    );
    // Neither a length nor a duration: a usage error naming them.
    let out = Command::new(L1GATE)
        .args(["simulate", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--blocks"));
}

#[test]
fn keys_add_prints_the_key_alone_on_the_last_line_and_stores_only_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    let out = Command::new(L1GATE)
        .args(["keys", "add", "--account", "ops", "--keys-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let key = stdout.lines().last().unwrap();
    assert!(key.starts_with("l1g_") && key.len() == 68, "{key}");
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(!stored.contains(key));
    assert!(stored.contains(&access::keys::hash_key(key)));
    let list = Command::new(L1GATE)
        .args(["keys", "list", "--keys-file"])
        .arg(&file)
        .output()
        .unwrap();
    let listed = String::from_utf8(list.stdout).unwrap();
    assert!(listed.contains("ops") && listed.contains("active") && !listed.contains(key));
    let bad = Command::new(L1GATE)
        .args(["keys", "add", "--account", "no spaces", "--keys-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("account name"));
}

#[test]
fn replay_prints_frames_deterministically_with_a_summary() {
    let data = super::harness::real("btc-985148182");
    let run = || {
        Command::new(L1GATE)
            .args(["replay", "--data"])
            .arg(&data)
            .args(["--view", "bbo", "--coins", "BTC"])
            .output()
            .unwrap()
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let stdout = String::from_utf8(first.stdout.clone()).unwrap();
    let opening: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(opening["block_number"], 985_148_182);
    assert_eq!(opening["bid"]["px"], "81307.0");
    assert_eq!(opening["ask"]["px"], "81308.0");
    let summary = String::from_utf8_lossy(&first.stderr);
    assert!(summary.contains("replayed 51 blocks"), "{summary}");
    assert!(summary.contains("0 unknown ids"), "{summary}");
    assert_eq!(
        run().stdout,
        first.stdout,
        "same input, byte-identical output"
    );
    let bad = Command::new(L1GATE)
        .args(["replay", "--data"])
        .arg(&data)
        .args(["--view", "nope"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("l2book"),
        "lists the views"
    );
}

/// Starts `l1gate serve --data DATA` with stderr piped; the first stderr
/// line containing `wanted` (within 30 s), and every line before it.
fn serve_until_logged(data: &std::path::Path, wanted: &str) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    // A keys file with one key: a missing one is a start-up error.
    let mut file = access::keys::KeysFile::default();
    file.add_key("tests", 0).unwrap();
    file.save(&keys).unwrap();
    let mut child = Command::new(L1GATE)
        .arg("serve")
        .arg("--data")
        .arg(data)
        .arg("--keys-file")
        .arg(&keys)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .env_remove("L1GATE_LOG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _guard = Killed(child);
    let rx = lines_of(stderr);
    let mut before = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no {wanted:?} in the log; got {before:#?}"));
        if line.contains(wanted) {
            return (line, before);
        }
        before.push(line);
    }
}

#[test]
fn serve_warns_about_a_data_directory_without_node_output_in_plain_text() {
    let empty = tempfile::tempdir().unwrap();
    let (line, before) = serve_until_logged(empty.path(), "no node output in the data directory");
    assert!(line.contains("node_fills_by_block"), "{line}");
    for line in before.iter().chain([&line]) {
        assert!(
            !line.contains('\u{1b}'),
            "colour codes in a log written to a pipe: {line:?}"
        );
    }
    let missing = empty.path().join("not-there");
    let (line, _) = serve_until_logged(&missing, "the data directory does not exist");
    assert!(line.contains("not-there"), "{line}");
}

/// Under a 300-descriptor limit, an idle-connection flood from one address
/// neither takes the server down nor floods the log, and another address
/// is still served.
#[test]
fn an_idle_connection_flood_under_a_low_descriptor_limit_leaves_the_server_up() {
    let served = Served::start(&super::harness::real("btc-985148182"), Some(300), &[]);
    // The flood: 400 idle connections to both edges, far past the limit.
    let mut flood = Vec::new();
    for i in 0..400 {
        let addr = if i % 2 == 0 {
            &served.http
        } else {
            &served.grpc
        };
        if let Ok(stream) = std::net::TcpStream::connect(addr) {
            flood.push(stream);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    // Another address is served while the flood holds its places.
    let answer = served.get("127.0.0.2", "/healthz");
    assert!(answer.starts_with("HTTP/1.1 "), "{answer:?}");
    drop(flood);
    std::thread::sleep(Duration::from_millis(300));
    assert!(served.get("127.0.0.1", "/healthz").starts_with("HTTP/1.1 "));
    let Served { guard, log, .. } = served;
    drop(guard);
    // The log: a few lines, not one per refused connection.
    let lines: Vec<String> = log.try_iter().collect();
    let refusals = lines
        .iter()
        .filter(|l| l.contains("over a connection limit"))
        .count();
    assert!(
        (1..=4).contains(&refusals),
        "{refusals} refusal lines: {lines:#?}"
    );
}

/// The connections among `flood` the server has not closed.
fn still_open(flood: &mut Vec<std::net::TcpStream>) {
    use std::io::Read as _;
    std::thread::sleep(Duration::from_millis(500));
    flood.retain(|stream| {
        stream.set_nonblocking(true).unwrap();
        let open = matches!(
            (&*stream).read(&mut [0; 1]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        );
        stream.set_nonblocking(false).unwrap();
        open
    });
}

/// Under a 300-descriptor limit the connection cap is what the limit leaves
/// beside the engine's reserve, and the start-up log says so; a flood from
/// many addresses holds every place and more are refused, while the engine
/// goes on listing, opening and folding the node's files: its height moves
/// on under the flood, and no read fails for want of a descriptor.
#[test]
fn the_fold_keeps_up_while_a_connection_flood_holds_every_place() {
    let node = super::market_live::live_node(600, 20, Duration::from_millis(40));
    let served = Served::start(node.dir.path(), Some(300), &[]);
    let cap = served
        .start_log
        .iter()
        .find(|l| l.contains("connections: over the caps"))
        .unwrap_or_else(|| panic!("the cap is said at start: {:#?}", served.start_log));
    assert!(cap.contains("max_connections=44"), "{cap}");
    // The engine's height, over a place the flood gives back.
    let height = |flood: &mut Vec<std::net::TcpStream>, from: &str| -> u64 {
        flood.pop();
        std::thread::sleep(Duration::from_millis(100));
        let answer = served.get(from, "/status.json");
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let status: serde_json::Value =
            serde_json::from_str(body).unwrap_or_else(|e| panic!("status.json: {e}: {answer:?}"));
        status["engine"]["block_number"]
            .as_u64()
            .unwrap_or_else(|| panic!("no engine height: {status}"))
    };
    // The flood: 20 idle connections from each of 20 addresses, to both
    // edges: far past the 44 places. Those over a cap are closed as
    // accepted; fresh addresses top it up until it holds every place.
    let mut flood = Vec::new();
    for n in 0..400 {
        let addr = if n % 2 == 0 {
            &served.http
        } else {
            &served.grpc
        };
        flood.push(connect_from_blocking(
            &format!("127.0.0.{}", 10 + n / 20),
            addr,
        ));
    }
    still_open(&mut flood);
    for n in 0..88 {
        flood.push(connect_from_blocking(
            &format!("127.0.0.{}", 40 + n / 11),
            &served.http,
        ));
    }
    still_open(&mut flood);
    assert_eq!(flood.len(), 44, "the flood holds every place");
    let mut over = vec![connect_from_blocking("127.0.0.99", &served.http)];
    still_open(&mut over);
    assert!(over.is_empty(), "one more is refused");
    let first = height(&mut flood, "127.0.0.100");
    std::thread::sleep(Duration::from_secs(2));
    let second = height(&mut flood, "127.0.0.101");
    assert!(
        first > 0 && second > first,
        "the engine folds under the flood: {first} then {second}"
    );
    drop(flood);
    let Served {
        guard,
        log,
        start_log,
        ..
    } = served;
    drop(guard);
    let lines: Vec<String> = start_log.into_iter().chain(log.try_iter()).collect();
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("Too many open files") || l.contains("os error 24")),
        "a read failed for want of a descriptor: {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("over a connection limit")),
        "refusals were logged: {lines:#?}"
    );
}

/// A blocking TCP connection to `addr` from the loopback address `from`.
fn connect_from_blocking(from: &str, addr: &str) -> std::net::TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::new(from.parse().unwrap(), 0))
            .unwrap();
        socket.connect(addr.parse().unwrap()).await.unwrap()
    });
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_keys_file_is_a_start_up_error_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-keys.toml");
    let args = |allow: Option<bool>| l1gate::config::ServeArgs {
        data: Some(dir.path().join("node")),
        keys_file: Some(missing.clone()),
        allow_no_keys: allow,
        grpc_addr: "127.0.0.1:0".parse().ok(),
        http_addr: "127.0.0.1:0".parse().ok(),
        state_dir: Some(dir.path().join("state")),
        ..l1gate::config::ServeArgs::default()
    };
    let settings = args(None).resolve().unwrap();
    let error = l1gate::serve::start(&settings)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("does not exist"), "{error}");
    assert!(error.contains("--allow-no-keys"), "{error}");
    assert!(error.contains(&missing.display().to_string()), "{error}");
    // Allowed: it serves, refusing every key until one is added.
    let settings = args(Some(true)).resolve().unwrap();
    let running = l1gate::serve::start(&settings).await.unwrap();
    running.stop().await;
}

/// The resident set of process `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// Streams of the memory burst, and the connections they share.
const BURST_STREAMS: usize = 1_500;
const BURST_CONNECTIONS: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_a_burst_took_is_given_back_once_its_connections_go() {
    use super::access_support::{http_get, sample};
    use proto::market_streaming_client::MarketStreamingClient;
    use proto::v3 as pb;

    // Blocks keep coming, so that frames wait for the burst's streams.
    let node = super::market_live::live_node(3_000, 400, Duration::from_millis(40));
    let served = Served::start(
        node.dir.path(),
        None,
        &[
            "--max-streams",
            "100000",
            "--send-timeout-ms",
            "2000",
            // The simulated blocks are from the past.
            "--market-stale-after-ms",
            "0",
        ],
    );
    let http: std::net::SocketAddr = served.http.parse().unwrap();
    let trims = || async move {
        let reply = http_get(http, "/metrics", None).await;
        sample(&reply.text, "l1gate_memory_trims_total")
    };
    let pid = served.guard.0.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid);
    // The burst: L4 book streams over connections whose 1 KiB windows take
    // almost nothing, so the server keeps each stream's opening queued in
    // its connection.
    let mut channels = Vec::new();
    for _ in 0..BURST_CONNECTIONS {
        channels.push(
            tonic::transport::Channel::from_shared(format!("http://{}", served.grpc))
                .unwrap()
                .initial_stream_window_size(Some(1024))
                .initial_connection_window_size(Some(1024))
                .connect()
                .await
                .unwrap(),
        );
    }
    let mut streams = Vec::new();
    for n in 0..BURST_STREAMS {
        let mut client = MarketStreamingClient::new(channels[n % BURST_CONNECTIONS].clone());
        let request = pb::L4BookRequest {
            coin: "BTC".into(),
            ..pb::L4BookRequest::default()
        };
        let opened = client
            .stream_l4_book(with_key(request, &served.key))
            .await
            .unwrap_or_else(|status| panic!("stream {n}: {status:?}"));
        streams.push(opened.into_inner());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let peak = rss_kib(pid);
    assert!(
        peak >= before + 40_000,
        "the burst must take memory for its return to be measured: {before} → {peak} KiB"
    );
    // The server ends the streams that take nothing while frames wait (2
    // s): the clients are counted gone, a burst ended. What they were sent
    // stays queued in their connections until those close.
    let started = std::time::Instant::now();
    while trims().await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no trim after the burst's streams ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let at_end = trims().await;
    drop(streams);
    drop(channels);
    let started = std::time::Instant::now();
    while trims().await < at_end + 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no trim after the burst's connections closed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = rss_kib(pid);
    assert!(
        after <= before + (peak - before) / 4,
        "memory of the burst kept: {before} KiB before, {peak} at its peak, {after} after"
    );
}
