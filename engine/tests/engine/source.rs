//! The block source over files on disk: streams without files hold no
//! block up.

use std::path::Path;

use engine::source::{BlockSource, SourceOptions};
use feeds::{Feed, Source};

fn line(block: u64) -> String {
    format!(
        r#"{{"local_time":"2026-01-01T00:00:01","block_time":"2026-01-01T00:00:0{}","block_number":{block},"events":[]}}"#,
        block % 10
    ) + "\n"
}

fn write_fills(dir: &Path, blocks: std::ops::RangeInclusive<u64>) {
    let hour = dir.join("hl/data/node_fills_by_block/hourly/20260101/0");
    std::fs::create_dir_all(hour.parent().unwrap()).unwrap();
    let text: String = blocks.map(line).collect();
    std::fs::write(hour, text).unwrap();
}

/// A block source over every event stream of `dir`, from the start, with a
/// long grace; and the fills feed it reads.
fn source_over(dir: &Path) -> (BlockSource, Feed) {
    let feeds: Vec<Feed> = Source::EVENT_STREAMS
        .iter()
        .map(|&source| Feed::open(dir, source).unwrap())
        .collect();
    let fills = feeds
        .iter()
        .find(|feed| feed.source() == Source::Fills)
        .unwrap()
        .clone();
    let source = BlockSource::new(
        feeds,
        SourceOptions {
            grace_ms: 60_000,
            ..SourceOptions::from_block(0)
        },
    )
    .unwrap();
    (source, fills)
}

#[test]
fn a_capture_of_fills_alone_completes_blocks_without_waiting_for_other_streams() {
    let dir = tempfile::tempdir().unwrap();
    write_fills(dir.path(), 1..=3);
    let (mut source, _) = source_over(dir.path());
    assert!(source.reads(Source::Fills));
    assert!(!source.reads(Source::OrderStatuses));
    assert_eq!(source.read(0).unwrap(), 3);
    // By-block: a block is complete once every stream with files delivered
    // it; the statuses, diffs, misc events and TWAP statuses have none.
    let popped: Vec<u64> = std::iter::from_fn(|| source.pop(0))
        .map(|b| b.number)
        .collect();
    assert_eq!(popped, [1, 2, 3]);
    assert_eq!(
        source.deadline_ms(),
        None,
        "nothing waits for a grace timeout"
    );
}

/// A node file replaced under its name (renamed over, or rotated to new
/// content) is read again from the block after the last one emitted: no
/// block is lost to the old file's offsets, none is emitted twice.
#[test]
fn a_replaced_file_is_read_again_after_the_last_block_emitted() {
    let dir = tempfile::tempdir().unwrap();
    write_fills(dir.path(), 1..=3);
    let (mut source, fills) = source_over(dir.path());
    source.read(0).unwrap();
    let mut popped: Vec<u64> = std::iter::from_fn(|| source.pop(0))
        .map(|b| b.number)
        .collect();
    // Rewritten whole with more blocks, then rotated to blocks after them:
    // both times a new file under the same name.
    for blocks in [1..=6, 7..=9] {
        let staged = dir.path().join("staged");
        std::fs::write(&staged, blocks.map(line).collect::<String>()).unwrap();
        std::fs::rename(
            &staged,
            dir.path()
                .join("hl/data/node_fills_by_block/hourly/20260101/0"),
        )
        .unwrap();
        fills.refresh().unwrap();
        source.read(0).unwrap();
        popped.extend(std::iter::from_fn(|| source.pop(0)).map(|b| b.number));
    }
    assert_eq!(popped, (1..=9).collect::<Vec<_>>());
    assert_eq!(fills.replacements(), 2);
}

/// Fills for blocks 1 to `last` and order statuses from `snapshot` to
/// `last`, read as a server does with an empty candle store: the fills
/// from the first block, the rest from the snapshot's height.
fn fills_before_a_snapshot(dir: &Path, snapshot: u64, last: u64, grace_ms: i64) -> BlockSource {
    write_fills(dir, 1..=last);
    let statuses = dir.join("hl/data/node_order_statuses_by_block/hourly/20260101/0");
    std::fs::create_dir_all(statuses.parent().unwrap()).unwrap();
    std::fs::write(&statuses, (snapshot..=last).map(line).collect::<String>()).unwrap();
    let feeds: Vec<Feed> = Source::EVENT_STREAMS
        .iter()
        .map(|&source| Feed::open(dir, source).unwrap())
        .collect();
    BlockSource::new(
        feeds,
        SourceOptions {
            fills_from: Some(feeds::Start::BlockNumber(1)),
            grace_ms,
            ..SourceOptions::from_block(snapshot)
        },
    )
    .unwrap()
}

/// Every block `source` gives, reading until the files run out and asking
/// at `now_ms`; and the most blocks that waited in it at once.
fn every_block(source: &mut BlockSource, now_ms: i64) -> (Vec<engine::block::Block>, usize) {
    let mut popped = Vec::new();
    let mut most_pending = 0;
    loop {
        let read = source.read(0).unwrap();
        most_pending = most_pending.max(source.pending());
        let before = popped.len();
        popped.extend(std::iter::from_fn(|| source.pop(now_ms)));
        if read == 0 && popped.len() == before {
            popped.extend(std::iter::from_fn(|| source.finish()));
            return (popped, most_pending);
        }
    }
}

/// A feed that starts far ahead of another (the order statuses at a
/// snapshot's height while the fills start earlier, for the candles) is not
/// read to its end while the other catches up: the aligner holds a bounded
/// window of it, and every block still comes once, in order.
#[test]
fn a_feed_far_ahead_waits_for_the_others_within_a_bounded_window() {
    use engine::source::{READ_AHEAD, READ_BATCH};
    let dir = tempfile::tempdir().unwrap();
    let mut source = fills_before_a_snapshot(dir.path(), 2_000, 4_000, i64::MAX);
    let (popped, most_pending) = every_block(&mut source, 0);
    let numbers: Vec<u64> = popped.iter().map(|block| block.number).collect();
    assert_eq!(numbers, (1..=4_000).collect::<Vec<u64>>());
    let bound = READ_AHEAD as usize + 2 * READ_BATCH;
    assert!(
        most_pending <= bound,
        "{most_pending} blocks waited at once (bound {bound})"
    );
}

/// The grace completes a block a stream has not written yet, never one a
/// stream has written but this source has not read yet: the fills read
/// from long before the snapshot (for the candles) reach the snapshot's
/// blocks however long that takes, and none is dropped as late.
#[test]
fn a_feed_with_lines_left_to_read_is_waited_for_whatever_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut source = fills_before_a_snapshot(dir.path(), 1_500, 2_000, 0);
    // Every block's grace has long passed whenever it is asked for.
    let (popped, _) = every_block(&mut source, i64::MAX / 2);
    let numbers: Vec<u64> = popped.iter().map(|block| block.number).collect();
    assert_eq!(numbers, (1..=2_000).collect::<Vec<u64>>());
    assert!(
        popped.iter().all(|block| block.lines.fills.len() == 1),
        "every block with its fills line"
    );
    assert!(
        popped
            .iter()
            .filter(|block| block.number >= 1_500)
            .all(|block| block.lines.order_statuses.len() == 1),
        "and the statuses from the snapshot on"
    );
}
