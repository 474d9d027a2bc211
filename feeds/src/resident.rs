//! This process's resident memory of its file mappings, as the kernel
//! counts it (`Rss` in `/proc/self/smaps`, Linux): what the releases of
//! [`MappedFile`](crate::MappedFile) and of the node files' mappings are
//! for. For tests, benchmarks and diagnostics; nothing on the data path
//! reads it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Resident bytes of every mapped file, summed over its mappings.
///
/// # Errors
/// When `/proc/self/smaps` cannot be read (not Linux, no `/proc`).
pub fn by_file() -> io::Result<BTreeMap<PathBuf, u64>> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut out = BTreeMap::new();
    let mut current: Option<PathBuf> = None;
    for line in smaps.lines() {
        if let Some(kib) = line.strip_prefix("Rss:") {
            let kib: u64 = kib
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if let Some(path) = &current {
                *out.entry(path.clone()).or_default() += kib * 1024;
            }
            continue;
        }
        // A mapping's header: `start-end perms offset dev inode [path]`;
        // the other lines are `Name: value`.
        let is_header = line
            .split_whitespace()
            .next()
            .is_some_and(|range| range.contains('-') && !range.ends_with(':'));
        if is_header {
            current = line
                .splitn(6, char::is_whitespace)
                .nth(5)
                .map(str::trim)
                .filter(|path| path.starts_with('/'))
                .map(PathBuf::from);
        }
    }
    Ok(out)
}

/// Resident bytes of this process's mappings of `path`.
///
/// # Errors
/// As [`by_file`].
pub fn of(path: &Path) -> io::Result<u64> {
    Ok(by_file()?.get(path).copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MappedFile;

    #[test]
    fn a_mapping_read_is_counted_under_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("four pages");
        std::fs::write(&path, vec![7u8; 4 * 4096]).unwrap();
        assert_eq!(of(&path).unwrap(), 0);
        let mapped = MappedFile::open(&path).unwrap();
        let sum: u64 = mapped.bytes().iter().map(|&b| u64::from(b)).sum();
        assert_eq!(sum, 7 * 4 * 4096);
        assert_eq!(of(&path).unwrap(), 4 * 4096);
        assert!(by_file().unwrap().contains_key(&path));
    }
}
