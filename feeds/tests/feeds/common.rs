//! Helpers shared by the themed test modules: paths of the real captures and
//! a temporary node directory that tests write like the node does.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use feeds::time::format_node_time;

/// A folder of `shared/data/real/`.
pub fn real(name: &str) -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/real/"
    ))
    .join(name)
}

/// The lines of a file, without their `\n`.
pub fn lines_of(path: &Path) -> Vec<Vec<u8>> {
    let bytes = fs::read(path).unwrap();
    let mut lines: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    assert_eq!(
        lines.pop(),
        Some(Vec::new()),
        "{} must end with a newline",
        path.display()
    );
    lines
}

/// A temporary data directory with an `hl/data` node root.
pub struct NodeDir {
    pub tmp: tempfile::TempDir,
}

impl NodeDir {
    pub fn new() -> NodeDir {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("hl/data")).unwrap();
        NodeDir { tmp }
    }

    /// The data directory (parent of `hl/data`).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// `hl/data/<dir>/hourly/<date>/<hour>`, parents created.
    pub fn hour_file(&self, dir: &str, date: u32, hour: u32) -> PathBuf {
        hour_file(self.path(), dir, date, hour)
    }
}

/// `<data_dir>/hl/data/<dir>/hourly/<date>/<hour>`, parents created.
pub fn hour_file(data_dir: &Path, dir: &str, date: u32, hour: u32) -> PathBuf {
    let path = data_dir.join(format!("hl/data/{dir}/hourly/{date}/{hour}"));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    path
}

/// Appends bytes to a file, creating it.
pub fn append(path: &Path, bytes: &[u8]) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(bytes).unwrap();
    file.flush().unwrap();
}

/// One by-block envelope line (no newline) at `ms` Unix milliseconds.
pub fn envelope(block: u64, ms: i64, events: &str) -> String {
    let time = format_node_time(ms * 1_000_000);
    format!(
        r#"{{"local_time":"{time}","block_time":"{time}","block_number":{block},"events":[{events}]}}"#
    )
}

/// A raw-book-diff event for `user` and `coin`.
pub fn diff_event(user: &str, coin: &str, oid: u64) -> String {
    format!(
        r#"{{"user":"{user}","oid":{oid},"coin":"{coin}","side":"B","px":"1.0","raw_book_diff":"remove"}}"#
    )
}

/// This process's resident bytes of the mapping that holds `at` (`Rss` of
/// its entry in `/proc/self/smaps`).
pub fn resident_bytes(at: *const u8) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let at = at as u64;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|head| head.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            });
        if let Some((start, end)) = range {
            inside = (start..end).contains(&at);
        } else if inside && let Some(kib) = line.strip_prefix("Rss:") {
            let kib: u64 = kib.trim().trim_end_matches("kB").trim().parse().unwrap();
            return kib * 1024;
        }
    }
    panic!("no mapping holds {at:#x}");
}
