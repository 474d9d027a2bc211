//! MarketStreaming end to end over loopback gRPC, against a node directory a
//! test writer fills block by block while the server runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proto::market_streaming_client::MarketStreamingClient;
use proto::v3 as pb;
use tonic::Code;
use tonic::transport::Channel;

use super::harness::{TestServer, next};

const WAIT: Duration = Duration::from_secs(30);

/// A node directory grown by a background writer: the simulator's files are
/// generated up front, then appended one block at a time.
pub struct LiveNode {
    /// First, so that it stops before the directory goes (fields drop in
    /// order).
    writer: PacedWriter,
    pub dir: tempfile::TempDir,
}

impl LiveNode {
    /// Whether the writer appended every block.
    pub fn finished(&self) -> bool {
        self.writer.finished()
    }
}

/// One line of a node file: its block, the file it goes to, the line.
pub type NodeLine = (u64, PathBuf, Vec<u8>);

/// Appends node lines block by block in the background; stopped (and
/// joined) when dropped.
pub struct PacedWriter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PacedWriter {
    /// Sorts `lines` by block, writes those of the first `initial` blocks
    /// at once, then appends the rest one block every `every` on a thread
    /// of its own, leaving out the lines whose file `skip` names.
    pub fn start(
        mut lines: Vec<NodeLine>,
        initial: u64,
        every: Duration,
        skip: impl Fn(&Path) -> bool,
    ) -> PacedWriter {
        lines.sort_by_key(|(block, ..)| *block);
        let first = lines.first().map_or(0, |line| line.0);
        let split = lines.partition_point(|(block, ..)| *block < first + initial);
        for line in &lines[..split] {
            append(line);
        }
        let rest: Vec<NodeLine> = lines
            .split_off(split)
            .into_iter()
            .filter(|(_, path, _)| !skip(path))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut current = None;
                for line in &rest {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if current != Some(line.0) {
                        current = Some(line.0);
                        std::thread::sleep(every);
                    }
                    append(line);
                }
            })
        };
        PacedWriter {
            stop,
            thread: Some(thread),
        }
    }

    /// Whether every line was appended.
    pub fn finished(&self) -> bool {
        self.thread
            .as_ref()
            .is_none_or(std::thread::JoinHandle::is_finished)
    }
}

impl Drop for PacedWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
            && !std::thread::panicking()
        {
            panic!("the node writer failed");
        }
    }
}

fn append((_, path, line): &NodeLine) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    let mut bytes = line.clone();
    bytes.push(b'\n');
    file.write_all(&bytes).unwrap();
}

/// Every file under `root`.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Generates `blocks` blocks, writes the first `initial` at once and the rest
/// every `every`.
pub fn live_node(blocks: u64, initial: u64, every: Duration) -> LiveNode {
    live_node_holding_back(blocks, initial, every, &[])
}

/// [`live_node`], but after the first `initial` blocks the lines of the
/// node directories named in `held_back` are never written.
pub fn live_node_holding_back(
    blocks: u64,
    initial: u64,
    every: Duration,
    held_back: &[&str],
) -> LiveNode {
    let source = tempfile::tempdir().unwrap();
    let mut cfg = fixtures::SimConfig::small(11);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = Some(1_000_000);
    let run = fixtures::RunOptions {
        blocks: Some(blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, source.path(), &run, &mut |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // (block, target file, line) of every line file; other files whole.
    let mut lines: Vec<NodeLine> = Vec::new();
    for path in files(source.path()) {
        let target = dir.path().join(path.strip_prefix(source.path()).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
        if feeds::envelope::decode(first).is_err() {
            std::fs::write(&target, &bytes).unwrap();
            continue;
        }
        std::fs::write(&target, b"").unwrap();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let number = feeds::envelope::decode(line).unwrap().block_number;
            lines.push((number, target.clone(), line.to_vec()));
        }
    }
    let root = dir.path().to_owned();
    let held = move |path: &Path| {
        path.strip_prefix(&root).unwrap().components().any(|c| {
            held_back
                .iter()
                .any(|name| c.as_os_str() == std::ffi::OsStr::new(name))
        })
    };
    let writer = PacedWriter::start(lines, initial, every, held);
    LiveNode { writer, dir }
}

pub async fn client(server: &TestServer) -> MarketStreamingClient<Channel> {
    let channel = server.channel().await;
    MarketStreamingClient::new(channel).max_decoding_message_size(256 << 20)
}

/// Waits until the engine caught up with the files.
pub async fn ready(server: &TestServer) {
    for _ in 0..600 {
        if server.running.engine.status().ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the engine never caught up");
}

async fn l4_updates(
    server: &TestServer,
    client: &mut MarketStreamingClient<Channel>,
) -> tonic::Streaming<pb::L4OrderUpdate> {
    client
        .stream_l4_order_updates(server.req(pb::L4OrderUpdatesRequest::default()))
        .await
        .unwrap()
        .into_inner()
}

/// Applies L4 diffs to a local book, failing on a duplicate NEW or a change
/// to an order the subscriber never saw (a gap).
fn apply(book: &mut BTreeMap<u64, String>, update: &pb::L4OrderUpdate) {
    for diff in &update.diffs {
        let kind = pb::L4OrderDiffType::try_from(diff.diff_type).unwrap();
        match kind {
            pb::L4OrderDiffType::New => {
                assert!(
                    book.insert(diff.oid, diff.sz.clone()).is_none(),
                    "duplicate NEW for {} at block {}",
                    diff.oid,
                    update.block_number
                );
            }
            pb::L4OrderDiffType::Update => {
                assert!(
                    book.insert(diff.oid, diff.sz.clone()).is_some(),
                    "UPDATE of unseen {} at block {}",
                    diff.oid,
                    update.block_number
                );
            }
            pb::L4OrderDiffType::Remove => {
                assert!(
                    book.remove(&diff.oid).is_some(),
                    "REMOVE of unseen {} at block {}",
                    diff.oid,
                    update.block_number
                );
            }
            pb::L4OrderDiffType::Unspecified => panic!("unspecified diff type"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_updates_open_with_a_snapshot_then_number_every_frame_and_never_gap() {
    let node = live_node(400, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut client = client(&server).await;
    // Subscribing again and again during the flow: every opening snapshot
    // must chain onto the diffs after it.
    for _ in 0..5 {
        let mut stream = l4_updates(&server, &mut client).await;
        let opening = next(&mut stream, WAIT).await.unwrap();
        assert!(opening.snapshot);
        assert_eq!(opening.sequence, 1);
        assert!(!opening.diffs.is_empty());
        let mut book = BTreeMap::new();
        apply(&mut book, &opening);
        let mut last_block = opening.block_number;
        for expected in 2..=20 {
            let update = next(&mut stream, WAIT).await.unwrap();
            assert_eq!(update.sequence, expected);
            assert!(!update.snapshot);
            assert!(update.block_number > last_block);
            last_block = update.block_number;
            apply(&mut book, &update);
        }
    }
}

/// The engine thread sleeps on the kernel's notifications of writes to the
/// newest files itself: with the backup poll an hour away, every appended
/// block still reaches a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_blocks_wake_the_engine_without_any_poll() {
    let node = live_node(300, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |a| {
        a.poll_interval_ms = Some(3_600_000);
    })
    .await;
    ready(&server).await;
    let mut client = client(&server).await;
    let mut stream = l4_updates(&server, &mut client).await;
    let opening = next(&mut stream, WAIT).await.unwrap();
    let mut last_block = opening.block_number;
    for _ in 0..100 {
        let update = next(&mut stream, WAIT).await.unwrap();
        assert!(update.block_number > last_block);
        last_block = update.block_number;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bbo_opens_with_every_coin_then_sends_changes_only() {
    let node = live_node(300, 50, Duration::from_millis(10));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut client = client(&server).await;
    let mut l4 = l4_updates(&server, &mut client).await;
    let snapshot = next(&mut l4, WAIT).await.unwrap();
    let mut coins: Vec<String> = snapshot.diffs.iter().map(|d| d.coin.clone()).collect();
    coins.sort();
    coins.dedup();
    coins.truncate(2);
    assert_eq!(coins.len(), 2);
    let mut stream = client
        .stream_bbo(server.req(pb::BboRequest {
            coins: vec![coins[1].clone(), coins[0].clone(), coins[0].clone()],
        }))
        .await
        .unwrap()
        .into_inner();
    let first = next(&mut stream, WAIT).await.unwrap();
    let second = next(&mut stream, WAIT).await.unwrap();
    assert_eq!(
        [first.coin.clone(), second.coin.clone()],
        [coins[0].clone(), coins[1].clone()]
    );
    assert_eq!(first.block_number, second.block_number);
    let mut last: BTreeMap<String, (Option<pb::L2Level>, Option<pb::L2Level>)> = BTreeMap::new();
    last.insert(first.coin.clone(), (first.bid, first.ask));
    last.insert(second.coin.clone(), (second.bid, second.ask));
    for _ in 0..5 {
        let update = next(&mut stream, WAIT).await.unwrap();
        assert!(update.block_number > first.block_number);
        let previous = last.insert(
            update.coin.clone(),
            (update.bid.clone(), update.ask.clone()),
        );
        assert_ne!(
            previous,
            Some((update.bid, update.ask)),
            "a frame without a change"
        );
    }
}

/// Misc events and TWAP statuses feed no market view, so the engine does not
/// wait for them: with their lines held back and a block grace far longer
/// than the test, new blocks still fold and stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_fold_without_the_streams_no_view_reads() {
    let node = live_node_holding_back(
        200,
        50,
        Duration::from_millis(10),
        &["misc_events_by_block", "node_twap_statuses_by_block"],
    );
    assert!(
        node.dir
            .path()
            .join("hl/data/misc_events_by_block")
            .is_dir()
            && node
                .dir
                .path()
                .join("hl/data/node_twap_statuses_by_block")
                .is_dir(),
        "the held-back streams have files, so an engine reading them would wait"
    );
    let server = TestServer::start(node.dir.path(), |args| {
        args.align_grace_ms = Some(3_600_000);
    })
    .await;
    ready(&server).await;
    let mut client = client(&server).await;
    let mut l4 = l4_updates(&server, &mut client).await;
    let opening = next(&mut l4, WAIT).await.unwrap();
    let mut last = opening.block_number;
    for _ in 0..20 {
        let update = next(&mut l4, WAIT).await.unwrap();
        assert!(update.block_number > last);
        last = update.block_number;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_outside_the_contract_fail_naming_their_cause() {
    let node = live_node(120, 100, Duration::from_millis(20));
    let server = TestServer::start(node.dir.path(), |_| {}).await;
    ready(&server).await;
    let mut client = client(&server).await;
    let bbo = |coins: Vec<&str>| pb::BboRequest {
        coins: coins.into_iter().map(str::to_owned).collect(),
    };
    let many: Vec<String> = (0..21).map(|i| format!("C{i}")).collect();
    let cases: Vec<(pb::BboRequest, &str)> = vec![
        (
            bbo(vec![]),
            "coins: 1 to 20 distinct coins are required, got 0",
        ),
        (
            pb::BboRequest { coins: many },
            "coins: 1 to 20 distinct coins are required, got 21",
        ),
        (bbo(vec!["*"]), "coins: \"*\""),
        (bbo(vec![" "]), "coins: blank entry"),
        (bbo(vec!["NOPE"]), "coins: unknown coin \"NOPE\""),
    ];
    for (request, message) in cases {
        let status = client.stream_bbo(server.req(request)).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(message),
            "{status:?} vs {message}"
        );
    }
    let status = client
        .stream_l2_book(server.req(pb::L2BookRequest {
            coin: "NOPE".into(),
            n_sig_figs: Some(7),
            ..pb::L2BookRequest::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("n_sig_figs must be 2 to 5, got 7"),
        "{status:?}"
    );
    let status = client
        .stream_user_fills(server.req(pb::UserFillsRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), "user: required");
    let status = client
        .stream_trades(server.req(pb::TradesRequest {
            coins: vec!["NOPE".into()],
        }))
        .await
        .unwrap_err();
    assert_eq!(status.message(), "coins: unknown coin \"NOPE\"");
    // Fills accept unknown coins.
    client
        .stream_all_fills(server.req(pb::AllFillsRequest {
            coins: vec!["NOPE".into()],
        }))
        .await
        .unwrap();
    // No key: UNAUTHENTICATED.
    let status = client
        .stream_bbo(tonic::Request::new(bbo(vec!["BTC"])))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
}
