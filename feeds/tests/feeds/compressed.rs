//! Compressed hour files (`H.lz4`, `H.zst`, `H.gz`) read as the plain files
//! they hold: the same records, positions and newest record, whatever mix
//! of codecs a directory holds; a damaged file read up to its damage,
//! reported once, then skipped.

use std::io::Write;
use std::path::Path;

use feeds::codec::{Codec, DamageKind};
use feeds::{Feed, FeedError, Source, Start};

use crate::common::{NodeDir, envelope, hour_file, resident_bytes};

/// Blocks `first..first + n`, 70 ms apart from `start_ms`, one line each.
fn hour_lines(first: u64, n: u64, start_ms: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        let block = first + i;
        let events = format!(r#"["0xabc",{{"coin":"BTC","px":"{block}.5","tid":{block}}}]"#);
        out.extend_from_slice(envelope(block, start_ms + 70 * i as i64, &events).as_bytes());
        out.push(b'\n');
    }
    out
}

fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
    match codec {
        Codec::Lz4 => {
            // A content checksum, as the `lz4` tool writes by default, and
            // blocks small enough for these files to have several.
            let mut info = lz4_flex::frame::FrameInfo::new();
            info.content_checksum = true;
            info.block_size = lz4_flex::frame::BlockSize::Max64KB;
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(data).unwrap();
            enc.finish().unwrap()
        }
        Codec::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            enc.include_checksum(true).unwrap();
            enc.write_all(data).unwrap();
            enc.finish().unwrap()
        }
        Codec::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(data).unwrap();
            enc.finish().unwrap()
        }
    }
}

const HOUR_MS: i64 = 3_600_000;
/// 2025-07-27T08:00:00Z.
const START_MS: i64 = 1_753_603_200_000;

/// Four hours of fills, plain in `plain` and compressed in `packed` (a
/// different codec per hour, the last one plain in both: the hour the node
/// is still writing).
fn two_directories() -> (NodeDir, NodeDir, Vec<Vec<u8>>) {
    let plain = NodeDir::new();
    let packed = NodeDir::new();
    let mut hours = Vec::new();
    let codecs = [Some(Codec::Lz4), Some(Codec::Zstd), Some(Codec::Gzip), None];
    for (h, codec) in codecs.into_iter().enumerate() {
        let lines = hour_lines(1_000 + 600 * h as u64, 600, START_MS + HOUR_MS * h as i64);
        let hour = 8 + h as u32;
        std::fs::write(
            hour_file(plain.path(), "node_fills_by_block", 20_250_727, hour),
            &lines,
        )
        .unwrap();
        let path = hour_file(packed.path(), "node_fills_by_block", 20_250_727, hour);
        match codec {
            Some(codec) => {
                let named = path.with_file_name(format!("{hour}.{}", codec.extension()));
                std::fs::write(named, compress(codec, &lines)).unwrap();
            }
            None => std::fs::write(path, &lines).unwrap(),
        }
        hours.push(lines);
    }
    (plain, packed, hours)
}

fn read_all(feed: &Feed, start: Start) -> Vec<feeds::Record> {
    let mut cursor = feed.seek(start).unwrap();
    let mut out = Vec::new();
    loop {
        let records = feed.read(&mut cursor, 97).unwrap();
        if records.is_empty() {
            return out;
        }
        out.extend(records);
    }
}

#[test]
fn a_compressed_directory_reads_exactly_as_the_plain_one() {
    let (plain, packed, hours) = two_directories();
    let plain = Feed::open(plain.path(), Source::Fills).unwrap();
    let packed = Feed::open(packed.path(), Source::Fills).unwrap();
    let every = read_all(&plain, Start::BlockNumber(0));
    assert_eq!(every.len(), 2_400);
    assert_eq!(read_all(&packed, Start::BlockNumber(0)), every);
    let joined: Vec<u8> = hours.concat();
    let from_records: Vec<u8> = every
        .iter()
        .flat_map(|r| r.data.iter().copied().chain([b'\n']))
        .collect();
    assert_eq!(from_records, joined, "byte-exact lines");

    for start in [
        Start::BlockNumber(1_000),
        Start::BlockNumber(1_599),
        Start::BlockNumber(1_600),
        Start::BlockNumber(2_345),
        Start::BlockNumber(3_399),
        Start::BlockNumber(9_999),
        Start::Timestamp(START_MS + HOUR_MS + 5_000),
        Start::Timestamp(START_MS + 2 * HOUR_MS - 1),
        Start::Timestamp(START_MS - 1),
    ] {
        assert_eq!(
            read_all(&packed, start),
            read_all(&plain, start),
            "{start:?}"
        );
    }
    assert_eq!(packed.newest(), plain.newest());
    // The tail of a finished archive has nothing after it.
    let mut tail = packed.seek(Start::Tail).unwrap();
    assert!(packed.read(&mut tail, 10).unwrap().is_empty());
}

#[test]
fn an_archive_of_compressed_hours_alone_has_a_newest_record_and_a_tail() {
    let dir = NodeDir::new();
    let lines = hour_lines(50, 100, START_MS);
    let path = hour_file(dir.path(), "node_fills_by_block", 20_250_727, 8);
    std::fs::write(path.with_file_name("8.lz4"), compress(Codec::Lz4, &lines)).unwrap();
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    assert_eq!(feed.newest().unwrap().block_number, Some(149));
    let mut tail = feed.seek(Start::Tail).unwrap();
    assert!(feed.read(&mut tail, 10).unwrap().is_empty());
    assert_eq!(feed.lag(&tail), 0);
    let mut from_start = feed.seek(Start::BlockNumber(0)).unwrap();
    assert!(feed.lag(&from_start) > 0);
    assert_eq!(feed.read(&mut from_start, 1_000).unwrap().len(), 100);
}

fn write_damaged(dir: &Path, damage: impl Fn(&mut Vec<u8>)) -> Vec<Vec<u8>> {
    let mut hours = Vec::new();
    for h in 0..3u32 {
        let lines = hour_lines(
            1_000 + 2_000 * u64::from(h),
            2_000,
            START_MS + HOUR_MS * i64::from(h),
        );
        let mut bytes = compress(Codec::Lz4, &lines);
        if h == 1 {
            damage(&mut bytes);
        }
        let path = hour_file(dir, "node_fills_by_block", 20_250_727, 8 + h);
        std::fs::write(path.with_file_name(format!("{}.lz4", 8 + h)), bytes).unwrap();
        hours.push(lines);
    }
    hours
}

/// Reads everything, collecting the damage errors on the way.
fn read_through(feed: &Feed) -> (Vec<feeds::Record>, Vec<FeedError>) {
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    loop {
        match feed.read(&mut cursor, 300) {
            Ok(batch) if batch.is_empty() => return (records, errors),
            Ok(batch) => records.extend(batch),
            Err(error) => errors.push(error),
        }
        assert!(errors.len() < 5, "{errors:?}");
    }
}

#[test]
fn a_truncated_hour_is_read_to_its_cut_reported_once_then_skipped() {
    let dir = NodeDir::new();
    let hours = write_damaged(dir.path(), |bytes| bytes.truncate(bytes.len() / 2));
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    let (records, errors) = read_through(&feed);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let FeedError::Damaged { path, damage } = &errors[0] else {
        panic!("{:?}", errors[0]);
    };
    assert!(
        path.ends_with("hourly/20250727/9.lz4"),
        "{}",
        path.display()
    );
    assert_eq!(damage.kind, DamageKind::Truncated);
    assert!(damage.compressed_offset > 0);
    let message = errors[0].to_string();
    assert!(
        message.contains("9.lz4") && message.contains("truncated"),
        "{message}"
    );
    // Hour 8 whole, hour 9 up to the cut (a sound prefix), hour 10 whole.
    let numbers: Vec<u64> = records.iter().filter_map(|r| r.block_number).collect();
    assert!(numbers[..2_000].iter().copied().eq(1_000..3_000));
    let kept = numbers
        .iter()
        .filter(|n| (3_000..5_000).contains(*n))
        .count();
    assert!(kept > 100 && kept < 2_000, "{kept}");
    assert!(
        numbers[2_000..2_000 + kept]
            .iter()
            .copied()
            .eq(3_000..3_000 + kept as u64)
    );
    assert!(numbers[2_000 + kept..].iter().copied().eq(5_000..7_000));
    let hour9 = &hours[1];
    for record in &records[2_000..2_000 + kept] {
        assert!(
            hour9
                .windows(record.data.len())
                .any(|w| w == &record.data[..])
        );
    }
    // Positions still land: inside the sound prefix, in the lost part (the
    // next block there is), after it.
    let first_at = |block| {
        let mut cursor = feed.seek(Start::BlockNumber(block)).unwrap();
        loop {
            match feed.read(&mut cursor, 1) {
                Ok(records) => return records.first().and_then(|r| r.block_number),
                Err(FeedError::Damaged { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
    };
    assert_eq!(first_at(1_500), Some(1_500));
    assert_eq!(
        first_at(3_000 + kept as u64 / 2),
        Some(3_000 + kept as u64 / 2)
    );
    assert_eq!(first_at(4_999), Some(5_000));
    assert_eq!(first_at(5_500), Some(5_500));
}

#[test]
fn an_hour_cut_inside_its_first_block_does_not_mislead_a_seek() {
    let dir = NodeDir::new();
    write_damaged(dir.path(), |bytes| bytes.truncate(20));
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    let (records, errors) = read_through(&feed);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let numbers: Vec<u64> = records.iter().filter_map(|r| r.block_number).collect();
    assert!(
        numbers
            .iter()
            .copied()
            .eq((1_000..3_000).chain(5_000..7_000))
    );
    for (block, first) in [(0, 1_000), (2_999, 2_999), (3_000, 5_000), (6_000, 6_000)] {
        let mut cursor = feed.seek(Start::BlockNumber(block)).unwrap();
        let mut got = None;
        for _ in 0..3 {
            if let Ok(records) = feed.read(&mut cursor, 1) {
                got = records.first().and_then(|r| r.block_number);
                break;
            }
        }
        assert_eq!(got, Some(first), "seek to {block}");
    }
}

#[test]
fn a_flipped_checksum_keeps_nothing_of_its_hour() {
    let dir = NodeDir::new();
    write_damaged(dir.path(), |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
    });
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    let (records, errors) = read_through(&feed);
    assert_eq!(errors.len(), 1);
    assert!(
        matches!(&errors[0], FeedError::Damaged { damage, .. } if damage.kind == DamageKind::ChecksumMismatch),
        "{errors:?}"
    );
    let numbers: Vec<u64> = records.iter().filter_map(|r| r.block_number).collect();
    assert!(
        numbers
            .iter()
            .copied()
            .eq((1_000..3_000).chain(5_000..7_000))
    );
}

#[test]
fn reading_a_large_compressed_hour_keeps_little_of_it_resident() {
    // 256 MiB of decoded lines: a reader going through them holds at most
    // the stretch since its last release (64 MiB) resident, not the hour.
    let dir = NodeDir::new();
    let mut text = Vec::with_capacity(256 << 20);
    let mut block = 0u64;
    while text.len() < 256 << 20 {
        text.extend_from_slice(
            envelope(
                block,
                START_MS + block as i64,
                r#"["0xabc",{"coin":"BTC"}]"#,
            )
            .as_bytes(),
        );
        text.push(b'\n');
        block += 1;
    }
    let path = hour_file(dir.path(), "node_fills_by_block", 20_250_727, 8);
    std::fs::write(path.with_file_name("8.lz4"), compress(Codec::Lz4, &text)).unwrap();
    drop(text);
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    let (mut read, mut peak) = (0u64, 0u64);
    loop {
        let records = feed.read(&mut cursor, 50_000).unwrap();
        let Some(last) = records.last() else { break };
        read += records.len() as u64;
        peak = peak.max(resident_bytes(last.data.as_ptr()));
    }
    assert_eq!(read, block);
    assert!(
        peak < 128 << 20,
        "{peak} bytes of the decoded hour resident at once"
    );
}
