//! The server's resident memory does not carry the node output it has read:
//! once the engine has caught up, the pages of the node's files are let go
//! but for each source's newest file's last bytes (they stay in the page
//! cache, where a reader that comes back maps them again).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use feeds::RESIDENT_TAIL;

use super::harness::TestServer;
use super::market_live::ready;

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
        let mut resident = feeds::resident::by_file().unwrap();
        resident.retain(|path, _| path.starts_with(node.path()));
        let large: Vec<&PathBuf> = resident
            .keys()
            .filter(|path| std::fs::metadata(path).map_or(0, |m| m.len()) > 2 * RESIDENT_TAIL)
            .collect();
        assert!(
            !large.is_empty(),
            "the test needs a node file of more than {} bytes mapped: {resident:?}",
            2 * RESIDENT_TAIL
        );
        let over: Vec<(&PathBuf, &u64)> = resident
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
