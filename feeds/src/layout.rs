//! Where the node's files are: the node root, each source's directory and
//! its files in order (hourly `YYYYMMDD/H`, `replica_cmds` by height), and
//! the L4 snapshot files beside the node root.
//!
//! Everything here only lists directories; nothing is opened or mapped.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::codec::Codec;
use crate::error::FeedError;
use crate::source::Source;

/// The node root for a data directory: `DIR/hl/data` when it exists, else
/// `DIR` itself.
pub fn node_root(data_dir: &Path) -> PathBuf {
    let nested = data_dir.join("hl").join("data");
    if nested.is_dir() {
        nested
    } else {
        data_dir.to_path_buf()
    }
}

/// Identity and order of one file of a source.
///
/// Hourly files order by (date, hour) numerically; `replica_cmds` files by
/// first height, then by session directory name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SegmentKey {
    /// `hourly/YYYYMMDD/H`.
    Hourly {
        /// `YYYYMMDD` as a number.
        date: u32,
        /// Hour of the node's local clock, 0–23.
        hour: u32,
    },
    /// `replica_cmds/<session>/<YYYYMMDD>/<height>`.
    Replica {
        /// Height of the file's first line.
        height: u64,
        /// The session (node start time) directory.
        session: String,
    },
}

impl fmt::Display for SegmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentKey::Hourly { date, hour } => write!(f, "hourly/{date}/{hour}"),
            SegmentKey::Replica { height, session } => write!(f, "{session}/{height}"),
        }
    }
}

/// One file of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// Its identity and order.
    pub key: SegmentKey,
    /// Its full path.
    pub path: PathBuf,
    /// The codec its name announces (`H.lz4`, `H.zst`, `H.gz`; `None` for
    /// the node's plain `H`).
    pub codec: Option<Codec>,
}

/// The chosen directory of a source under the node root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDir {
    /// Directory name, e.g. `node_fills_by_block`.
    pub name: &'static str,
    /// Full path of the directory.
    pub path: PathBuf,
}

/// The directory of `source` under `root`: the first of
/// [`Source::dir_names`] that exists (by-block preferred over streaming).
pub fn find_source_dir(root: &Path, source: Source) -> Option<SourceDir> {
    source.dir_names().iter().find_map(|name| {
        let path = root.join(name);
        path.is_dir().then_some(SourceDir { name, path })
    })
}

/// Lists the files of a source directory in order.
///
/// For hourly sources, `min_date` limits the listing to date directories at
/// or after it (used for cheap incremental refreshes).
///
/// # Errors
/// [`FeedError::Io`] when a directory exists but cannot be read. A directory
/// that vanished meanwhile lists as empty.
pub fn list_segments(
    dir: &Path,
    source: Source,
    min_date: Option<u32>,
) -> Result<Vec<SegmentFile>, FeedError> {
    let mut files = if source == Source::Blocks {
        list_replica(dir)?
    } else {
        list_hourly(dir, min_date)?
    };
    // One file per key: the plain file (the one the node may still write)
    // before a compressed copy of the same hour.
    files.sort_by(|a, b| (&a.key, a.codec.is_some()).cmp(&(&b.key, b.codec.is_some())));
    files.dedup_by(|later, first| later.key == first.key);
    Ok(files)
}

/// Hourly files `<dir>/hourly/YYYYMMDD/H` (or `<dir>/YYYYMMDD/H` when the
/// `hourly` level is absent, as the node's README shows for TWAP statuses),
/// plain or compressed (`H.lz4`, `H.zst`, `H.gz`).
fn list_hourly(dir: &Path, min_date: Option<u32>) -> Result<Vec<SegmentFile>, FeedError> {
    let hourly = dir.join("hourly");
    let base = if hourly.is_dir() {
        hourly
    } else {
        dir.to_path_buf()
    };
    let mut files = Vec::new();
    for (date_name, date_path) in list_dir(&base, true)? {
        let Some(date) = parse_date(&date_name) else {
            continue;
        };
        if min_date.is_some_and(|min| date < min) {
            continue;
        }
        for (hour_name, path) in list_dir(&date_path, false)? {
            let (stem, codec) = Codec::split_name(&hour_name);
            if let Some(hour) = parse_hour(stem) {
                files.push(SegmentFile {
                    key: SegmentKey::Hourly { date, hour },
                    path,
                    codec,
                });
            }
        }
    }
    Ok(files)
}

/// `replica_cmds/<session>/<YYYYMMDD>/<height>`.
fn list_replica(dir: &Path) -> Result<Vec<SegmentFile>, FeedError> {
    let mut files = Vec::new();
    for (session, session_path) in list_dir(dir, true)? {
        for (date_name, date_path) in list_dir(&session_path, true)? {
            if parse_date(&date_name).is_none() {
                continue;
            }
            for (name, path) in list_dir(&date_path, false)? {
                if let Some(height) = parse_digits(&name, 20) {
                    files.push(SegmentFile {
                        key: SegmentKey::Replica {
                            height,
                            session: session.clone(),
                        },
                        path,
                        codec: None,
                    });
                }
            }
        }
    }
    Ok(files)
}

/// An L4 snapshot file found by name (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotPath {
    /// Height from the file name.
    pub height: u64,
    /// Full path.
    pub path: PathBuf,
}

/// L4 snapshot files: `l4_snapshot_<height>.json` in `data_dir` and in
/// `data_dir/l4_snapshots/`, plus `<height>.json` in `data_dir/l4_snapshots/`.
/// Ordered by height; when two files claim one height the one directly in
/// `data_dir` wins.
///
/// # Errors
/// [`FeedError::Io`] when a directory exists but cannot be read.
pub fn list_snapshot_files(data_dir: &Path) -> Result<Vec<SnapshotPath>, FeedError> {
    let mut found = Vec::new();
    for (name, path) in list_dir(data_dir, false)? {
        if let Some(height) = snapshot_height(&name, false) {
            found.push(SnapshotPath { height, path });
        }
    }
    for (name, path) in list_dir(&data_dir.join("l4_snapshots"), false)? {
        if let Some(height) = snapshot_height(&name, true) {
            found.push(SnapshotPath { height, path });
        }
    }
    // Stable sort keeps the top-level file first among equal heights.
    found.sort_by_key(|s| s.height);
    found.dedup_by_key(|s| s.height);
    Ok(found)
}

fn snapshot_height(name: &str, bare_allowed: bool) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    match stem.strip_prefix("l4_snapshot_") {
        Some(digits) => parse_digits(digits, 20),
        None if bare_allowed => parse_digits(stem, 20),
        None => None,
    }
}

/// Entries of `dir` as (name, path), only directories when `dirs` and only
/// files otherwise; symlinks are followed. A missing `dir` is empty.
fn list_dir(dir: &Path, dirs: bool) -> Result<Vec<(String, PathBuf)>, FeedError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FeedError::io("list", dir, &e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FeedError::io("list", dir, &e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let path = entry.path();
        let Ok(mut file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_symlink() {
            match fs::metadata(&path) {
                Ok(meta) => file_type = meta.file_type(),
                Err(_) => continue,
            }
        }
        if (dirs && file_type.is_dir()) || (!dirs && file_type.is_file()) {
            out.push((name, path));
        }
    }
    Ok(out)
}

fn parse_digits(text: &str, max_len: usize) -> Option<u64> {
    if text.is_empty() || text.len() > max_len || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `YYYYMMDD`, exactly eight digits.
fn parse_date(text: &str) -> Option<u32> {
    if text.len() != 8 {
        return None;
    }
    parse_digits(text, 8).and_then(|d| u32::try_from(d).ok())
}

/// An hour 0–23, written without zero padding by the node (a padded `09` is
/// accepted too).
fn parse_hour(text: &str) -> Option<u32> {
    parse_digits(text, 2)
        .and_then(|h| u32::try_from(h).ok())
        .filter(|h| *h < 24)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, b"").unwrap();
    }

    #[test]
    fn hours_order_numerically_across_dates() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node_fills_by_block");
        for rel in [
            "20260101/9",
            "20260101/10",
            "20260101/2",
            "20251231/23",
            "20260101/x",
            "2026010/1",
        ] {
            touch(&dir.join("hourly").join(rel));
        }
        let files = list_segments(&dir, Source::Fills, None).unwrap();
        let keys: Vec<_> = files.iter().map(|f| f.key.to_string()).collect();
        assert_eq!(
            keys,
            [
                "hourly/20251231/23",
                "hourly/20260101/2",
                "hourly/20260101/9",
                "hourly/20260101/10"
            ]
        );
        let later = list_segments(&dir, Source::Fills, Some(20_260_101)).unwrap();
        assert_eq!(later.len(), 3);
    }

    #[test]
    fn compressed_hours_list_in_order_and_a_plain_file_wins_its_hour() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node_fills_by_block");
        for rel in [
            "20250727/8.lz4",
            "20250727/9.zst",
            "20250727/10.gz",
            "20250727/10",
            "20250727/11.lz4.part",
            "20250727/12.bz2",
        ] {
            touch(&dir.join("hourly").join(rel));
        }
        let files = list_segments(&dir, Source::Fills, None).unwrap();
        let listed: Vec<_> = files.iter().map(|f| (f.key.to_string(), f.codec)).collect();
        assert_eq!(
            listed,
            [
                ("hourly/20250727/8".to_owned(), Some(Codec::Lz4)),
                ("hourly/20250727/9".to_owned(), Some(Codec::Zstd)),
                ("hourly/20250727/10".to_owned(), None),
            ]
        );
    }

    #[test]
    fn node_root_prefers_hl_data() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(node_root(tmp.path()), tmp.path());
        fs::create_dir_all(tmp.path().join("hl/data")).unwrap();
        assert_eq!(node_root(tmp.path()), tmp.path().join("hl/data"));
    }

    #[test]
    fn by_block_wins_over_streaming_and_absent_is_none() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(find_source_dir(tmp.path(), Source::Fills), None);
        fs::create_dir_all(tmp.path().join("node_fills_streaming")).unwrap();
        assert_eq!(
            find_source_dir(tmp.path(), Source::Fills).unwrap().name,
            "node_fills_streaming"
        );
        fs::create_dir_all(tmp.path().join("node_fills_by_block")).unwrap();
        assert_eq!(
            find_source_dir(tmp.path(), Source::Fills).unwrap().name,
            "node_fills_by_block"
        );
    }

    #[test]
    fn replica_files_order_by_height() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("replica_cmds");
        touch(&dir.join("2026-01-02T00:00:00Z/20260102/900"));
        touch(&dir.join("2026-01-01T00:00:00Z/20260101/100"));
        touch(&dir.join("2026-01-01T00:00:00Z/20260101/50"));
        let files = list_segments(&dir, Source::Blocks, None).unwrap();
        let heights: Vec<_> = files
            .iter()
            .map(|f| match &f.key {
                SegmentKey::Replica { height, .. } => *height,
                SegmentKey::Hourly { .. } => 0,
            })
            .collect();
        assert_eq!(heights, [50, 100, 900]);
    }

    #[test]
    fn snapshot_names_in_both_places() {
        let tmp = tempfile::tempdir().unwrap();
        touch(&tmp.path().join("l4_snapshot_20.json"));
        touch(&tmp.path().join("l4_snapshots/l4_snapshot_10.json"));
        touch(&tmp.path().join("l4_snapshots/30.json"));
        touch(&tmp.path().join("l4_snapshots/20.json"));
        touch(&tmp.path().join("40.json"));
        touch(&tmp.path().join("l4_snapshot_x.json"));
        let found = list_snapshot_files(tmp.path()).unwrap();
        let heights: Vec<_> = found.iter().map(|s| s.height).collect();
        assert_eq!(heights, [10, 20, 30]);
        assert_eq!(found[1].path, tmp.path().join("l4_snapshot_20.json"));
    }
}
