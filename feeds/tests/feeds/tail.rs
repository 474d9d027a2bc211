//! Live tailing in a temporary node directory: a writer appends lines
//! (split writes, a new hour, a source created after the readers started)
//! while readers follow; every line must arrive exactly once, in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use feeds::{Change, Cursor, Feed, Source, Start, Watcher};

use std::path::Path;

use crate::common::{NodeDir, append, diff_event, envelope, hour_file};

const T0: i64 = 1_767_225_600_000;
const DATE: u32 = 20_260_101;
/// The last block the live writer appends.
const LAST: u64 = 60;

fn fill_line(block: u64) -> String {
    let event = format!(r#"["0xabc",{{"coin":"BTC","px":"1.0","sz":"{block}.0","tid":{block}}}]"#);
    envelope(block, T0 + block as i64 * 70, &event)
}

fn diff_line(block: u64) -> String {
    envelope(
        block,
        T0 + block as i64 * 70,
        &diff_event("0xdef", "ETH", block),
    )
}

/// A reader of one feed and everything it has read.
struct Follower {
    feed: Feed,
    cursor: Cursor,
    got: Vec<String>,
}

impl Follower {
    fn new(feed: &Feed, start: Start) -> Follower {
        Follower {
            feed: feed.clone(),
            cursor: feed.seek(start).unwrap(),
            got: Vec::new(),
        }
    }

    fn poll(&mut self) {
        self.feed.refresh().unwrap();
        loop {
            // Small batches so reads interleave with the writer.
            let batch = self.feed.read(&mut self.cursor, 3).unwrap();
            if batch.is_empty() {
                break;
            }
            for record in batch {
                self.got
                    .push(String::from_utf8(record.data.to_vec()).unwrap());
            }
        }
    }
}

/// Writes fills blocks `first..=last`: block 20 in two halves with a pause,
/// blocks from 30 on in the next hour's file, and the raw-book-diffs source
/// (absent before) from block 25 on.
fn write(data_dir: &Path, first: u64, last: u64) {
    let hour0 = hour_file(data_dir, "node_fills_by_block", DATE, 9);
    let hour1 = hour_file(data_dir, "node_fills_by_block", DATE, 10);
    for block in first..=last {
        let file = if block >= 30 { &hour1 } else { &hour0 };
        let line = format!("{}\n", fill_line(block));
        if block == 20 {
            let (a, b) = line.split_at(line.len() / 2);
            append(file, a.as_bytes());
            thread::sleep(Duration::from_millis(60));
            append(file, b.as_bytes());
        } else {
            append(file, line.as_bytes());
        }
        if block >= 25 {
            let diffs = hour_file(data_dir, "node_raw_book_diffs_by_block", DATE, 9);
            append(&diffs, format!("{}\n", diff_line(block)).as_bytes());
        }
        thread::sleep(Duration::from_millis(3));
    }
}

fn live_tail(with_watcher: bool) {
    let node = NodeDir::new();
    let hour0 = node.hour_file("node_fills_by_block", DATE, 9);
    for block in 1..=5 {
        append(&hour0, format!("{}\n", fill_line(block)).as_bytes());
    }
    let fills = Feed::open(node.path(), Source::Fills).unwrap();
    let diffs = Feed::open(node.path(), Source::RawBookDiffs).unwrap();
    assert_eq!(diffs.source_dir_name(), None);

    let wakeups = Arc::new(AtomicUsize::new(0));
    let (wake_tx, wake_rx) = mpsc::channel::<()>();
    let _watcher = with_watcher.then(|| {
        let counter = wakeups.clone();
        Watcher::new(node.path(), move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            let _ = wake_tx.send(());
        })
        .unwrap()
    });

    let mut tail = Follower::new(&fills, Start::Tail);
    let mut from_three = Follower::new(&fills, Start::BlockNumber(3));
    let mut new_source = Follower::new(&diffs, Start::Tail);

    let writer = {
        let path = node.path().to_path_buf();
        thread::spawn(move || write(&path, 6, LAST))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if with_watcher {
            // The watcher is a hint; a slow poll backs it up.
            let _ = wake_rx.recv_timeout(Duration::from_millis(200));
        } else {
            thread::sleep(Duration::from_millis(2));
        }
        tail.poll();
        from_three.poll();
        new_source.poll();
        if writer.is_finished()
            && from_three.got.len() == (LAST - 2) as usize
            && new_source.got.len() == (LAST - 24) as usize
        {
            break;
        }
    }
    writer.join().unwrap();
    tail.poll();
    from_three.poll();
    new_source.poll();

    let expect = |from: u64, line: fn(u64) -> String| (from..=LAST).map(line).collect::<Vec<_>>();
    assert_eq!(tail.got, expect(6, fill_line));
    assert_eq!(from_three.got, expect(3, fill_line));
    assert_eq!(new_source.got, expect(25, diff_line));
    assert_eq!(
        diffs.source_dir_name().as_deref(),
        Some("node_raw_book_diffs_by_block")
    );
    assert_eq!(fills.lag(&tail.cursor), 0);
    if with_watcher {
        assert!(
            wakeups.load(Ordering::Relaxed) > 0,
            "the watcher never fired"
        );
    }
}

#[test]
fn live_tail_with_polling_only() {
    live_tail(false);
}

#[test]
fn live_tail_with_a_watcher() {
    live_tail(true);
}

/// A node directory whose fills file for `hour` holds block 1's line, that
/// file's path, and a fills feed opened over it.
fn fills_with_block_one(hour: u32) -> (NodeDir, std::path::PathBuf, Feed) {
    let node = NodeDir::new();
    let file = node.hour_file("node_fills_by_block", DATE, hour);
    append(&file, format!("{}\n", fill_line(1)).as_bytes());
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    (node, file, feed)
}

#[test]
fn a_half_written_line_waits_for_its_newline() {
    let (_node, file, feed) = fills_with_block_one(0);
    let mut cursor = feed.seek(Start::Tail).unwrap();
    let line = fill_line(2);
    append(&file, &line.as_bytes()[..40]);
    assert!(!feed.refresh().unwrap());
    assert!(feed.read(&mut cursor, 10).unwrap().is_empty());
    assert_eq!(feed.lag(&cursor), 0);
    append(&file, &line.as_bytes()[40..]);
    assert!(!feed.refresh().unwrap());
    append(&file, b"\n");
    assert!(feed.refresh().unwrap());
    let got = feed.read(&mut cursor, 10).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].data[..], line.as_bytes());
    assert_eq!(got[0].block_number, Some(2));
}

/// Two handles on one feed (the engine thread and the live refresher share
/// feeds): whichever refresh finds the growth, the readable generation both
/// see moves exactly once, and a partial line moves nothing.
#[test]
fn the_readable_generation_moves_for_every_refresher() {
    let (_node, file, feed) = fills_with_block_one(0);
    let other = feed.clone();
    let start = feed.readable_generation();
    let line = fill_line(2);
    append(&file, &line.as_bytes()[..40]);
    assert!(!other.refresh().unwrap());
    assert_eq!(
        feed.readable_generation(),
        start,
        "half a line is not readable"
    );
    append(&file, format!("{}\n", &line[40..]).as_bytes());
    assert!(other.refresh().unwrap(), "the other handle finds the line");
    assert!(!feed.refresh().unwrap(), "and this one no longer does");
    assert_eq!(feed.readable_generation(), start + 1);
    assert_eq!(other.readable_generation(), start + 1);
}

#[test]
fn an_hour_is_finished_before_the_next_is_read() {
    let (node, hour0, feed) = fills_with_block_one(23);
    let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 1);
    // The node flushes the rest of the old hour, then opens the next day's
    // first hour; one refresh sees both.
    append(
        &hour0,
        format!("{}\n{}\n", fill_line(2), fill_line(3)).as_bytes(),
    );
    let next = node.hour_file("node_fills_by_block", DATE + 1, 0);
    append(&next, format!("{}\n", fill_line(4)).as_bytes());
    assert!(feed.refresh().unwrap());
    let blocks: Vec<_> = feed
        .read(&mut cursor, 10)
        .unwrap()
        .iter()
        .map(|r| r.block_number.unwrap())
        .collect();
    assert_eq!(blocks, [2, 3, 4]);
    assert_eq!(cursor, feed.head());
}

#[test]
fn a_future_block_is_served_once_written() {
    let (_node, file, feed) = fills_with_block_one(0);
    let mut cursor = feed.seek(Start::BlockNumber(4)).unwrap();
    assert!(feed.read(&mut cursor, 10).unwrap().is_empty());
    append(
        &file,
        format!("{}\n{}\n{}\n", fill_line(2), fill_line(3), fill_line(4)).as_bytes(),
    );
    feed.refresh().unwrap();
    let got = feed.read(&mut cursor, 10).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].block_number, Some(4));
}

#[test]
fn a_pruned_file_under_a_cursor_is_reported() {
    let node = NodeDir::new();
    let old = node.hour_file("node_fills_by_block", DATE, 0);
    append(
        &old,
        format!("{}\n{}\n", fill_line(1), fill_line(2)).as_bytes(),
    );
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
    assert_eq!(feed.read(&mut cursor, 1).unwrap().len(), 1);
    append(
        &node.hour_file("node_fills_by_block", DATE, 1),
        format!("{}\n", fill_line(3)).as_bytes(),
    );
    std::fs::remove_file(&old).unwrap();
    thread::sleep(Duration::from_millis(1100)); // past the full re-list interval
    feed.refresh().unwrap();
    assert_eq!(
        feed.read(&mut cursor, 10).unwrap_err(),
        feeds::FeedError::SegmentGone {
            feed: "fills",
            segment: format!("hourly/{DATE}/0")
        }
    );
}

/// Lines of this process's memory map that name `path`.
fn mapped(path: &std::path::Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.to_string_lossy();
    maps.lines()
        .filter(|line| line.contains(name.as_ref()))
        .count()
}

#[test]
fn a_pruned_file_is_unmapped_once_a_refresh_sees_it_gone() {
    let node = NodeDir::new();
    let old = node.hour_file("node_fills_by_block", DATE, 0);
    append(
        &old,
        format!("{}\n{}\n", fill_line(1), fill_line(2)).as_bytes(),
    );
    append(
        &node.hour_file("node_fills_by_block", DATE, 1),
        format!("{}\n", fill_line(3)).as_bytes(),
    );
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 3);
    assert!(mapped(&old) > 0, "the old file is mapped while listed");
    std::fs::remove_file(&old).unwrap();
    thread::sleep(Duration::from_millis(1100)); // past the full re-list interval
    feed.refresh().unwrap();
    // The mapping is let go on the reaper thread, soon after.
    let started = std::time::Instant::now();
    while mapped(&old) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the removed file stayed mapped"
        );
        thread::sleep(Duration::from_millis(10));
    }
    // The rest reads on.
    let mut cursor = feed.seek(Start::BlockNumber(3)).unwrap();
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 1);
}

#[test]
fn reading_the_files_wakes_nobody_and_writing_does() {
    let node = NodeDir::new();
    let hour = node.hour_file("node_fills_by_block", DATE, 9);
    append(&hour, format!("{}\n", fill_line(1)).as_bytes());
    let wakeups = Arc::new(AtomicUsize::new(0));
    let changes = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let counter = wakeups.clone();
    let seen = changes.clone();
    let _watcher = Watcher::new(node.path(), move |change| {
        counter.fetch_add(1, Ordering::Relaxed);
        seen.lock().push(change);
    })
    .unwrap();
    thread::sleep(Duration::from_millis(100));
    wakeups.store(0, Ordering::Relaxed);
    // What a refresh does: list directories, open, stat and map files.
    for _ in 0..20 {
        let feed = Feed::open(node.path(), Source::Fills).unwrap();
        let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
        assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 1);
        feed.refresh().unwrap();
    }
    thread::sleep(Duration::from_millis(300));
    assert_eq!(wakeups.load(Ordering::Relaxed), 0, "reads woke the watcher");
    changes.lock().clear();
    append(&hour, format!("{}\n", fill_line(2)).as_bytes());
    let deadline = Instant::now() + Duration::from_secs(5);
    while wakeups.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "a write woke nobody");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(100));
    assert!(
        changes
            .lock()
            .iter()
            .all(|&c| c == Change::Written(Some(Source::Fills))),
        "an append is a write to the fills: {:?}",
        changes.lock()
    );
    changes.lock().clear();
    let next = node.hour_file("node_fills_by_block", DATE, 10);
    append(&next, format!("{}\n", fill_line(3)).as_bytes());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !changes.lock().contains(&Change::Listing) {
        assert!(Instant::now() < deadline, "a new file is a listing change");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_grown_refresh_sees_appends_and_a_full_refresh_sees_new_files() {
    let node = NodeDir::new();
    let hour = node.hour_file("node_fills_by_block", DATE, 9);
    append(&hour, format!("{}\n", fill_line(1)).as_bytes());
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 1);
    // Half a line is not readable; the rest of it is.
    let line = format!("{}\n", fill_line(2));
    let (head, tail) = line.split_at(20);
    append(&hour, head.as_bytes());
    assert!(!feed.refresh_grown().unwrap());
    append(&hour, tail.as_bytes());
    assert!(feed.refresh_grown().unwrap());
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 1);
    // A new hour is found by listing, not by re-stating the newest file.
    let next = node.hour_file("node_fills_by_block", DATE, 10);
    append(&next, format!("{}\n", fill_line(3)).as_bytes());
    assert!(!feed.refresh_grown().unwrap());
    assert!(feed.refresh().unwrap());
    let records = feed.read(&mut cursor, 10).unwrap();
    assert_eq!(
        records.iter().map(|r| r.block_number).collect::<Vec<_>>(),
        [Some(3)]
    );
}

/// Descriptors this process holds open on files under `dir`.
fn open_files_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

/// A feed tails its newest file through one open descriptor; the files
/// before it are read from their mappings alone, so a server running for
/// months does not hold one descriptor per hour it ever read.
#[test]
fn only_the_newest_file_stays_open() {
    let node = NodeDir::new();
    for hour in 0..12 {
        let file = node.hour_file("node_fills_by_block", DATE, hour);
        let block = u64::from(hour) + 1;
        append(&file, format!("{}\n", fill_line(block)).as_bytes());
    }
    let feed = Feed::open(node.path(), Source::Fills).unwrap();
    feed.refresh().unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(1)).unwrap();
    assert_eq!(feed.read(&mut cursor, 100).unwrap().len(), 12);
    let dir = node.path().canonicalize().unwrap();
    assert_eq!(open_files_under(&dir), 1);
    let next = node.hour_file("node_fills_by_block", DATE, 12);
    append(&next, format!("{}\n", fill_line(13)).as_bytes());
    assert!(feed.refresh().unwrap());
    assert_eq!(feed.read(&mut cursor, 100).unwrap().len(), 1);
    assert_eq!(open_files_under(&dir), 1, "the old newest file was let go");
}

/// A line that is not a whole envelope — here one cut to its header, without
/// `local_time` — is handed out without a block number, so no reader takes
/// it for its block; the file is noted once with the line's offset and why,
/// however many readers meet it.
#[test]
fn a_line_that_is_not_a_whole_envelope_is_refused_and_noted_once_per_file() {
    let dir = NodeDir::new();
    let path = dir.hour_file("node_fills_by_block", DATE, 0);
    let (one, two) = (fill_line(1), fill_line(2));
    let cut = two.replacen(r#""local_time":"#, r#""local_tim":"#, 1);
    let text = format!("{one}\n{cut}\n{two}\n{cut}\n");
    append(&path, text.as_bytes());
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    for _ in 0..2 {
        let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
        let records = feed.read(&mut cursor, 10).unwrap();
        let blocks: Vec<Option<u64>> = records.iter().map(|r| r.block_number).collect();
        assert_eq!(blocks, [Some(1), None, Some(2), None]);
        assert_eq!(records[2].data, two.as_bytes());
        let whole: Vec<bool> = records.iter().map(|r| r.whole_envelope).collect();
        assert_eq!(
            whole,
            [true, false, true, false],
            "readers rely on this mark"
        );
    }
    let refused = feed.take_refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].path, path);
    assert_eq!(refused[0].offset, one.len() as u64 + 1);
    assert!(refused[0].reason.contains("local_time"), "{refused:?}");
    assert!(feed.take_refused().is_empty(), "noted once");
}

/// A file replaced under its name (written elsewhere and renamed over it,
/// as copy tools and log shippers do; or rotated to new content) is a new
/// inode: the open old file would never grow again. The refresh sees it,
/// counts it, and reads the new file from its start.
#[test]
fn a_file_replaced_under_its_name_is_followed_from_its_start() {
    let dir = NodeDir::new();
    let path = dir.hour_file("node_fills_by_block", DATE, 0);
    let lines = |blocks: std::ops::RangeInclusive<u64>| -> String {
        blocks.map(|b| fill_line(b) + "\n").collect()
    };
    append(&path, lines(1..=3).as_bytes());
    let feed = Feed::open(dir.path(), Source::Fills).unwrap();
    let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
    assert_eq!(feed.read(&mut cursor, 10).unwrap().len(), 3);
    for (round, content) in [(1, lines(1..=6)), (2, lines(7..=8))] {
        let staged = path.with_extension("staged");
        std::fs::write(&staged, content).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert!(feed.refresh().unwrap(), "the new file's lines are readable");
        assert_eq!(feed.replacements(), round);
        let want = if round == 1 { 4..=6 } else { 7..=8 };
        let mut fresh = feed.seek(Start::BlockNumber(*want.start())).unwrap();
        let blocks: Vec<Option<u64>> = feed
            .read(&mut fresh, 10)
            .unwrap()
            .iter()
            .map(|r| r.block_number)
            .collect();
        assert_eq!(blocks, want.map(Some).collect::<Vec<_>>(), "round {round}");
    }
    assert!(
        !feed.refresh().unwrap(),
        "nothing new: no replacement counted"
    );
    assert_eq!(feed.replacements(), 2);
}
