//! The server's resident memory does not carry the node output it has read:
//! once the engine has caught up, the pages of the node's files are let go
//! but for each source's newest file's last bytes (they stay in the page
//! cache, where a reader that comes back maps them again).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use feeds::RESIDENT_TAIL;

use super::harness::TestServer;
use super::market_live::ready;

/// This process's resident bytes of each mapped file under `root` (`Rss`
/// of its entries in `/proc/self/smaps`, summed per file).
fn resident_under(root: &Path) -> BTreeMap<String, u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let root = root.to_str().unwrap();
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_header = fields
            .first()
            .is_some_and(|head| head.contains('-') && !head.ends_with(':'));
        if is_header {
            current = fields
                .get(5)
                .filter(|path| path.starts_with(root))
                .map(|path| (*path).to_owned());
        } else if let (Some(path), Some(kib)) = (&current, line.strip_prefix("Rss:")) {
            let kib: u64 = kib.trim().trim_end_matches("kB").trim().parse().unwrap();
            *out.entry(path.clone()).or_default() += kib * 1024;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_node_output_leaves_the_resident_set_once_folded() {
    let node = tempfile::tempdir().unwrap();
    let cfg = fixtures::SimConfig::mainnet(5, 0.1);
    let run = fixtures::RunOptions {
        blocks: Some(400),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, node.path(), &run, &mut |_| {}).unwrap();

    let server = TestServer::start(node.path(), |_| {}).await;
    ready(&server).await;
    let page = 4096;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resident = resident_under(node.path());
        let large: Vec<&String> = resident
            .keys()
            .filter(|path| std::fs::metadata(path).map_or(0, |m| m.len()) > 2 * RESIDENT_TAIL)
            .collect();
        assert!(
            !large.is_empty(),
            "the test needs a node file of more than {} bytes mapped: {resident:?}",
            2 * RESIDENT_TAIL
        );
        let over: Vec<(&String, &u64)> = resident
            .iter()
            .filter(|(_, bytes)| **bytes > RESIDENT_TAIL + page)
            .collect();
        if over.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node files still resident past {RESIDENT_TAIL} bytes: {over:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
