//! Positioning over many hourly files, streaming-mode files with many lines
//! per block, and `replica_cmds` files: every target lands on the first
//! record at or after it.

use feeds::{Feed, Source, Start};

use crate::common::{NodeDir, append, diff_event, envelope};

const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// Writes `blocks` (block, lines of that block) across hour files, `per_hour`
/// lines per file. Returns every line in order with its block and time.
fn write_blocks(
    node: &NodeDir,
    dir: &str,
    blocks: &[(u64, usize)],
    per_hour: usize,
) -> Vec<(u64, i64, String)> {
    let mut all = Vec::new();
    for &(block, lines) in blocks {
        let ms = T0 + (block as i64) * 70;
        for part in 0..lines {
            let event = diff_event("0xAbC", "BTC", block * 10 + part as u64);
            all.push((block, ms, envelope(block, ms, &event)));
        }
    }
    for (i, (_, _, line)) in all.iter().enumerate() {
        let hour = (i / per_hour) as u32;
        let (date, hour) = (20_260_101 + hour / 24, hour % 24);
        append(
            &node.hour_file(dir, date, hour),
            format!("{line}\n").as_bytes(),
        );
    }
    all
}

fn check_every_target(feed: &Feed, all: &[(u64, i64, String)]) {
    let max_block = all.last().unwrap().0;
    for target in 0..=max_block + 1 {
        let mut cursor = feed.seek(Start::BlockNumber(target)).unwrap();
        let got = feed.read(&mut cursor, 1).unwrap();
        match all.iter().position(|(b, _, _)| *b >= target) {
            Some(i) => assert_eq!(
                std::str::from_utf8(&got[0].data).unwrap(),
                all[i].2,
                "block {target} must land on line {i}"
            ),
            None => assert!(got.is_empty()),
        }
    }
    for (i, (_, ms, _)) in all.iter().enumerate().step_by(37) {
        let mut cursor = feed.seek(Start::Timestamp(*ms)).unwrap();
        let got = feed.read(&mut cursor, 1).unwrap();
        let first = all.iter().position(|(_, t, _)| t >= ms).unwrap();
        assert!(first <= i);
        assert_eq!(std::str::from_utf8(&got[0].data).unwrap(), all[first].2);
        assert_eq!(got[0].timestamp_ms, Some(*ms));
    }
}

#[test]
fn thousands_of_by_block_lines_over_many_hours() {
    let node = NodeDir::new();
    // Block numbers with gaps, one line each, 700 lines per hour file.
    let blocks: Vec<(u64, usize)> = (0..3000u64).map(|i| (1000 + i + i / 100, 1)).collect();
    let all = write_blocks(&node, "node_raw_book_diffs_by_block", &blocks, 700);
    let feed = Feed::open(node.path(), Source::RawBookDiffs).unwrap();
    assert_eq!(feed.segments().len(), 5);
    check_every_target(&feed, &all);
    // Reading everything crosses every hour boundary in order.
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let records = feed.read(&mut cursor, 10_000).unwrap();
    assert_eq!(records.len(), all.len());
    assert!(
        records
            .iter()
            .zip(&all)
            .all(|(r, (_, _, l))| &r.data[..] == l.as_bytes())
    );
}

#[test]
fn streaming_mode_lands_on_the_first_line_of_a_block() {
    let node = NodeDir::new();
    // 1 to 5 lines per block; hour files of 97 lines split blocks across files.
    let blocks: Vec<(u64, usize)> = (0..600u64)
        .map(|i| (50 + i, 1 + (i * 7 % 5) as usize))
        .collect();
    let all = write_blocks(&node, "node_fills_streaming", &blocks, 97);
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    assert_eq!(
        feed.source_dir_name().as_deref(),
        Some("node_fills_streaming")
    );
    assert!(feed.segments().len() > 10);
    check_every_target(&feed, &all);
}

#[test]
fn replica_cmds_number_blocks_by_file_name_and_line() {
    let node = NodeDir::new();
    let base = node
        .path()
        .join("hl/data/replica_cmds/2026-01-01T00:00:00Z/20260101");
    std::fs::create_dir_all(&base).unwrap();
    let mut expected = Vec::new();
    for (first, count) in [(5000u64, 40u64), (5040, 25), (5065, 30)] {
        for i in 0..count {
            let block = first + i;
            let time = feeds::time::format_node_time((T0 + block as i64 * 70) * 1_000_000);
            let line = format!(
                r#"{{"abci_block":{{"time":"{time}","round":{},"signed_action_bundles":[]}},"resps":null}}"#,
                block * 3
            );
            append(
                &base.join(first.to_string()),
                format!("{line}\n").as_bytes(),
            );
            expected.push((block, T0 + block as i64 * 70, line));
        }
    }
    let feed = Feed::open(node.path(), Source::Blocks).unwrap();
    assert_eq!(feed.source_dir_name().as_deref(), Some("replica_cmds"));
    for &(block, ms, ref line) in expected.iter().step_by(3) {
        for start in [Start::BlockNumber(block), Start::Timestamp(ms)] {
            let mut cursor = feed.seek(start).unwrap();
            let got = feed.read(&mut cursor, 1).unwrap();
            assert_eq!(std::str::from_utf8(&got[0].data).unwrap(), line);
            assert_eq!(got[0].block_number, Some(block));
            assert_eq!(got[0].timestamp_ms, Some(ms));
        }
    }
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let all = feed.read(&mut cursor, 1000).unwrap();
    let numbers: Vec<_> = all.iter().map(|r| r.block_number.unwrap()).collect();
    assert_eq!(numbers, (5000..5095).collect::<Vec<_>>());
}
