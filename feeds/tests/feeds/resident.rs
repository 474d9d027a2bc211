//! Letting go of pages read long ago: after a release, the mappings hold no
//! resident pages below the cut, and every byte reads back the same.

use std::path::Path;
use std::time::{Duration, Instant};

use feeds::segment::Segment;
use feeds::{Feed, Record, SegmentKey, Source, Start};

use crate::common::{NodeDir, resident_bytes};

/// `lines` numbered lines of 64 bytes each, as written to `path`.
fn numbered_lines(path: &Path, lines: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(lines * 64);
    for n in 0..lines {
        bytes.extend_from_slice(format!("{n:063}\n").as_bytes());
    }
    std::fs::write(path, &bytes).unwrap();
    bytes
}

#[test]
fn released_pages_leave_the_resident_set_and_read_back_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("0");
    let written = numbered_lines(&path, 64 * 1024); // 4 MiB
    let key = SegmentKey::Hourly {
        date: 20_260_101,
        hour: 0,
    };
    let seg = Segment::new(key.clone(), path, false);
    let view = seg.grow(seg.current_len().unwrap()).unwrap().unwrap();
    assert_eq!(&view.data()[..], &written[..]);
    let at = view.data().as_ptr();
    let before = resident_bytes(at);
    assert!(before >= 4 << 20, "every page was read: {before}");

    let page = rustix::param::page_size();
    let below: usize = (3 << 20) + 100;
    assert_eq!(
        view.release_below(below as u64),
        below.div_ceil(page) * page
    );
    let after = resident_bytes(at);
    assert!(
        after <= before - (3 << 20),
        "{before} bytes resident before, {after} after"
    );
    // Read again through the same view: the same bytes, from the file.
    assert_eq!(&view.data()[..], &written[..]);
    assert!(resident_bytes(at) >= 4 << 20);
    // Never past the complete prefix; whole pages; nothing below 0.
    assert_eq!(view.release_below(u64::MAX), 4 << 20);
    assert_eq!(view.release_below(10), page);
    assert_eq!(view.release_below(0), 0);
    let unmapped = Segment::new(key, tmp.path().join("absent"), false);
    assert_eq!(unmapped.release_below(1 << 20), 0);
}

/// Polls `resident` until it is at most `limit` bytes (the release runs on
/// the reaper thread).
fn settles_at_most(what: &str, limit: u64, resident: impl Fn() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = resident();
        if now <= limit {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} bytes resident, expected at most {limit}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every record of `feed`, from its first.
fn read_all(feed: &Feed) -> Vec<Record> {
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let mut records = Vec::new();
    loop {
        let batch = feed.read(&mut cursor, 1000).unwrap();
        if batch.is_empty() {
            return records;
        }
        records.extend(batch);
    }
}

/// Fills envelopes of blocks `block_from..` (`count` of them), about 1 KB
/// each (padded with `pad`), as lines.
fn fill_lines(block_from: u64, count: u64, pad: char) -> String {
    let mut out = String::new();
    for b in block_from..block_from + count {
        let event = format!(
            r#"["0xabc",{{"coin":"BTC","px":"1.0","sz":"1.0","tid":{b},"pad":"{}"}}]"#,
            pad.to_string().repeat(900)
        );
        let ms = 1_767_225_600_000 + i64::try_from(b).unwrap();
        out.push_str(&crate::common::envelope(b, ms, &event));
        out.push('\n');
    }
    out
}

#[test]
fn a_feed_releases_all_but_the_newest_files_tail() {
    let node = NodeDir::new();
    let old = node.hour_file("node_fills_by_block", 20_260_101, 9);
    let new = node.hour_file("node_fills_by_block", 20_260_101, 10);
    std::fs::write(&old, fill_lines(1, 3000, 'x')).unwrap();
    std::fs::write(&new, fill_lines(3001, 3000, 'x')).unwrap();
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    let first_pass = read_all(&feed);
    assert_eq!(first_pass.len(), 6000);
    let old_at = first_pass[0].data.as_ptr();
    let new_at = first_pass[3000].data.as_ptr();
    let new_len = std::fs::metadata(&new).unwrap().len();
    assert!(resident_bytes(old_at) >= std::fs::metadata(&old).unwrap().len() / 4096 * 4096);
    assert!(resident_bytes(new_at) >= new_len / 4096 * 4096);

    let keep = 256 * 1024;
    feed.release_read(keep);
    // The older file: nothing left; the newest: at most its last `keep`
    // bytes.
    settles_at_most("older file", 0, || resident_bytes(old_at));
    settles_at_most("newest file", keep, || resident_bytes(new_at));

    // Every record reads back the same.
    let second_pass = read_all(&feed);
    assert_eq!(second_pass.len(), first_pass.len());
    for (a, b) in first_pass.iter().zip(&second_pass) {
        assert_eq!(a.data, b.data);
        assert_eq!(a.block_number, b.block_number);
    }
}

#[test]
fn a_feed_releases_the_pages_of_a_compressed_hour_its_reader_is_in() {
    let node = NodeDir::new();
    let old = node.hour_file("node_fills_by_block", 20_260_101, 9);
    let new = node.hour_file("node_fills_by_block", 20_260_101, 10);
    // The older hour as the archive keeps it: compressed only.
    let packed = zstd::encode_all(fill_lines(1, 3000, 'y').as_bytes(), 1).unwrap();
    std::fs::write(old.with_extension("zst"), packed).unwrap();
    std::fs::write(&new, fill_lines(3001, 3000, 'y')).unwrap();
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    // A reader catching up, two thirds into the older hour: its records
    // are slices of the hour's decoding, less than the cursor's own
    // release step (64 MiB) into it.
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let read = feed.read(&mut cursor, 2000).unwrap();
    assert_eq!(read.len(), 2000);
    let decoded_at = read[0].data.as_ptr();
    assert!(resident_bytes(decoded_at) >= 1 << 20);

    // What the engine does every few MiB it reads: the decoding's pages go.
    feed.release_read(256 * 1024);
    settles_at_most("decoded older hour", 0, || resident_bytes(decoded_at));
    // The reader goes on where it was, and what it read reads the same.
    let next = feed.read(&mut cursor, 2000).unwrap();
    assert_eq!(next[0].block_number, Some(2001));
    assert_eq!(next.len(), 2000);
    for (record, n) in read.iter().zip(1u64..) {
        assert_eq!(record.block_number, Some(n));
        assert!(record.data.windows(3).any(|w| w == b"yyy"));
    }
}
