//! Reading and positioning on real node captures, checked line by line
//! against the files themselves and an independent serde_json decode.

use feeds::time::parse_node_time_ms;
use feeds::{Feed, Source, Start};

use crate::common::{lines_of, real};

const FIRST: u64 = 985_148_182;
const LAST: u64 = 985_148_232;

fn btc_file(dir: &str) -> std::path::PathBuf {
    real("btc-985148182").join(format!("hl/data/{dir}/hourly/20260505/17"))
}

fn sources() -> [(Source, &'static str); 3] {
    [
        (Source::Fills, "node_fills_by_block"),
        (Source::RawBookDiffs, "node_raw_book_diffs_by_block"),
        (Source::OrderStatuses, "node_order_statuses_by_block"),
    ]
}

/// (block_number, block time ms) of each line, decoded by serde_json.
fn headers(lines: &[Vec<u8>]) -> Vec<(u64, i64)> {
    lines
        .iter()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_slice(line).unwrap();
            let block = value["block_number"].as_u64().unwrap();
            let time = value["block_time"].as_str().unwrap();
            (block, parse_node_time_ms(time.as_bytes()).unwrap())
        })
        .collect()
}

#[test]
fn reading_from_the_first_block_yields_every_line_byte_exact() {
    for (source, dir) in sources() {
        let feed = Feed::open(&real("btc-985148182"), source).unwrap();
        assert_eq!(feed.source_dir_name().as_deref(), Some(dir));
        let expected = lines_of(&btc_file(dir));
        assert_eq!(expected.len(), 51);
        let want = headers(&expected);
        let mut cursor = feed.seek(Start::BlockNumber(FIRST)).unwrap();
        let mut got = Vec::new();
        loop {
            let batch = feed.read(&mut cursor, 7).unwrap();
            if batch.is_empty() {
                break;
            }
            got.extend(batch);
        }
        assert_eq!(got.len(), 51, "{dir}");
        for (i, record) in got.iter().enumerate() {
            assert_eq!(&record.data[..], &expected[i][..], "{dir} line {i}");
            assert_eq!(record.block_number, Some(want[i].0));
            assert_eq!(record.timestamp_ms, Some(want[i].1));
        }
        assert_eq!(want.first().unwrap().0, FIRST);
        assert_eq!(want.last().unwrap().0, LAST);
        assert_eq!(feed.lag(&cursor), 0);
        assert_eq!(cursor, feed.head());
    }
}

fn first_read(feed: &Feed, start: Start) -> Option<feeds::Record> {
    let mut cursor = feed.seek(start).unwrap();
    feed.read(&mut cursor, 1).unwrap().pop()
}

#[test]
fn block_positions_land_on_the_right_line() {
    for (source, dir) in sources() {
        let feed = Feed::open(&real("btc-985148182"), source).unwrap();
        let expected = lines_of(&btc_file(dir));
        for (block, line) in [
            (FIRST, 0),
            (FIRST + 18, 18),
            (LAST, 50),
            (1, 0),
            (FIRST - 1, 0),
        ] {
            let record = first_read(&feed, Start::BlockNumber(block)).unwrap();
            assert_eq!(&record.data[..], &expected[line][..], "{dir} block {block}");
        }
        // Past the newest block: nothing yet, and the cursor waits at the tail.
        let mut cursor = feed.seek(Start::BlockNumber(LAST + 1)).unwrap();
        assert!(feed.read(&mut cursor, 10).unwrap().is_empty());
        assert_eq!(feed.lag(&cursor), 0);
        assert_eq!(
            cursor.pending_target(),
            Some(feeds::Target::BlockNumber(LAST + 1))
        );
    }
}

#[test]
fn time_positions_land_on_the_right_line() {
    for (source, dir) in sources() {
        let feed = Feed::open(&real("btc-985148182"), source).unwrap();
        let expected = lines_of(&btc_file(dir));
        let want = headers(&expected);
        for (i, (block, ms)) in want.iter().enumerate() {
            // Exactly at a block's time: that block (the first with that ms).
            let first_with_ms = want.iter().position(|(_, t)| t == ms).unwrap();
            let record = first_read(&feed, Start::Timestamp(*ms)).unwrap();
            assert_eq!(
                &record.data[..],
                &expected[first_with_ms][..],
                "{dir} line {i}"
            );
            // One ms later: the next block with a later time.
            match want.iter().position(|(_, t)| *t > *ms) {
                Some(next) => {
                    let record = first_read(&feed, Start::Timestamp(ms + 1)).unwrap();
                    assert_eq!(
                        record.block_number,
                        Some(want[next].0),
                        "after block {block}"
                    );
                }
                None => assert!(first_read(&feed, Start::Timestamp(ms + 1)).is_none()),
            }
        }
        let record = first_read(&feed, Start::Timestamp(0)).unwrap();
        assert_eq!(record.block_number, Some(FIRST));
    }
}

#[test]
fn tail_starts_after_the_newest_record() {
    let feed = Feed::open(&real("btc-985148182"), Source::Fills).unwrap();
    let mut tail = feed.seek(Start::Tail).unwrap();
    assert!(feed.read(&mut tail, 10).unwrap().is_empty());
    assert_eq!(tail, feed.head());
    let start = feed.seek(Start::BlockNumber(FIRST)).unwrap();
    let size = std::fs::metadata(btc_file("node_fills_by_block"))
        .unwrap()
        .len();
    assert_eq!(feed.lag(&start), size);
    assert!(!feed.refresh().unwrap(), "nothing changed on disk");
}

#[test]
fn absent_sources_are_empty_feeds() {
    let feed = Feed::open(&real("btc-985148182"), Source::MiscEvents).unwrap();
    assert_eq!(feed.source_dir_name(), None);
    let mut cursor = feed.seek(Start::BlockNumber(FIRST)).unwrap();
    assert!(feed.read(&mut cursor, 10).unwrap().is_empty());
    assert_eq!(feed.lag(&cursor), 0);
    assert_eq!(
        Feed::open(&real("btc-985148182"), Source::OrderbookSnapshots).unwrap_err(),
        feeds::FeedError::NotALineFeed {
            feed: "orderbook_snapshots"
        }
    );
}

#[test]
fn other_captures_read_completely() {
    let feed = Feed::open(&real("btc-978995377"), Source::OrderStatuses).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(978_995_377)).unwrap();
    let records = feed.read(&mut cursor, 1000).unwrap();
    assert_eq!(records.len(), 40);
    assert_eq!(records[39].block_number, Some(978_995_416));

    let feed = Feed::open(&real("fills-unfiltered"), Source::Fills).unwrap();
    let record = first_read(&feed, Start::BlockNumber(923_950_860)).unwrap();
    assert_eq!(record.block_number, Some(923_950_860));
}

#[test]
fn newest_is_the_last_line_of_the_newest_file() {
    for (source, dir) in sources() {
        let feed = Feed::open(&real("btc-985148182"), source).unwrap();
        let want = headers(&lines_of(&btc_file(dir)));
        let (block, time) = *want.last().unwrap();
        let newest = feed.newest().unwrap();
        assert_eq!(newest.block_number, Some(block), "{dir}");
        assert_eq!(newest.timestamp_ms, Some(time), "{dir}");
    }
    let empty = tempfile::tempdir().unwrap();
    let feed = Feed::open(empty.path(), Source::Fills).unwrap();
    assert_eq!(feed.newest(), None);
}
