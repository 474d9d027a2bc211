//! Snapshot discovery, verification, dating and reads, on the real capture
//! and in a temporary directory.

use std::time::{Duration, UNIX_EPOCH};

use feeds::{FeedError, SnapshotTime, Snapshots};

use crate::common::{NodeDir, append, envelope, real};

const T0: i64 = 1_767_225_600_000;

#[test]
fn finds_the_real_snapshot_beside_the_node_root() {
    let dir = real("btc-985148182");
    let snapshots = Snapshots::open(&dir).unwrap();
    let list = snapshots.list();
    assert_eq!(list.len(), 1);
    let file = &list[0];
    let path = dir.join("l4_snapshot_985148181.json");
    assert_eq!(file.height, 985_148_181);
    assert_eq!(file.path, path);
    // No feed holds block 985148181 (the capture starts one block later),
    // so the file's modification time dates it.
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mtime_ms = mtime.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(file.timestamp_source, SnapshotTime::FileModified);
    assert_eq!(file.timestamp_ms, mtime_ms);
    assert_eq!(snapshots.latest().as_ref(), Some(file));
    assert_eq!(snapshots.first_at_or_after(0).as_ref(), Some(file));
    assert_eq!(snapshots.first_at_or_after(mtime_ms + 1), None);

    let data = snapshots.read(file).unwrap();
    assert_eq!(data.len() as u64, std::fs::metadata(&path).unwrap().len());
    assert!(data.starts_with(b"[985148181,[[\"BTC\","));
    let parsed: serde_json::Value = serde_json::from_slice(&data).unwrap();
    let books = parsed[1][0][1].as_array().unwrap();
    assert_eq!(
        books[0].as_array().unwrap().len() + books[1].as_array().unwrap().len(),
        51_351
    );
    assert!(!snapshots.refresh().unwrap());
}

#[test]
fn dates_by_block_time_verifies_heights_and_waits_for_complete_files() {
    let node = NodeDir::new();
    let fills = node.hour_file("node_fills_by_block", 20_260_101, 0);
    for block in 100..=110u64 {
        append(
            &fills,
            format!("{}\n", envelope(block, T0 + block as i64 * 70, "")).as_bytes(),
        );
    }
    let snaps = node.path().join("l4_snapshots");
    std::fs::create_dir_all(&snaps).unwrap();
    std::fs::write(snaps.join("105.json"), b"[105,[[\"BTC\",[[],[]]]]]\n").unwrap();
    std::fs::write(node.path().join("l4_snapshot_7.json"), b"[8,[]]").unwrap();
    // Being written: no closing bracket yet.
    let partial = snaps.join("l4_snapshot_108.json");
    std::fs::write(&partial, b"[108,[[\"BTC\",[[").unwrap();

    let snapshots = Snapshots::open(node.path()).unwrap();
    // Written just now: listed once its length has held still for one
    // refresh (or once it is a second old).
    assert!(snapshots.list().is_empty());
    assert!(snapshots.refresh().unwrap());
    let list = snapshots.list();
    assert_eq!(list.iter().map(|s| s.height).collect::<Vec<_>>(), [105]);
    assert_eq!(list[0].timestamp_source, SnapshotTime::Block);
    assert_eq!(list[0].timestamp_ms, T0 + 105 * 70);
    let skipped = snapshots.skipped();
    assert_eq!(skipped.len(), 1);
    assert!(
        matches!(&skipped[0], FeedError::Snapshot { path, .. } if path.ends_with("l4_snapshot_7.json"))
    );
    assert!(
        skipped[0].to_string().contains("height 7"),
        "{}",
        skipped[0]
    );

    append(&partial, b"],[]]]]]");
    // Fresh and just grown: not trusted until its length holds still.
    assert!(!snapshots.refresh().unwrap());
    std::thread::sleep(Duration::from_millis(20));
    assert!(snapshots.refresh().unwrap());
    let latest = snapshots.latest().unwrap();
    assert_eq!(latest.height, 108);
    assert_eq!(latest.timestamp_ms, T0 + 108 * 70);
    assert_eq!(
        &snapshots.read(&latest).unwrap()[..],
        b"[108,[[\"BTC\",[[],[]]]]]"
    );
    assert_eq!(
        snapshots.first_at_or_after(T0 + 106 * 70).unwrap().height,
        108
    );
    assert_eq!(
        snapshots.first_at_or_after(T0 + 105 * 70).unwrap().height,
        105
    );

    std::fs::remove_file(snaps.join("105.json")).unwrap();
    snapshots.refresh().unwrap();
    assert_eq!(snapshots.list().len(), 1);
}

#[test]
fn files_at_rest_are_listed_at_once_whatever_their_age() {
    let node = NodeDir::new();
    let snaps = node.path().join("l4_snapshots");
    std::fs::create_dir_all(&snaps).unwrap();
    std::fs::write(snaps.join("l4_snapshot_5.json"), b"[5,[[\"BTC\",[[],[]]]]]").unwrap();
    std::fs::write(snaps.join("l4_snapshot_9.json"), b"[9,[[\"BTC\",[[").unwrap();
    // Live: written just now, so not trusted at first sight.
    assert!(Snapshots::open(node.path()).unwrap().list().is_empty());
    // At rest: the whole file is listed, the cut-off one never is.
    let at_rest = Snapshots::open_at_rest(node.path()).unwrap();
    assert_eq!(
        at_rest.list().iter().map(|s| s.height).collect::<Vec<_>>(),
        [5]
    );
}
