//! The edge's copy of the bus in the node's own layout: each record
//! consumed is appended, as one line, to a file under
//! `<mirror>/hl/data/<node directory>/…`, so the edge serves it through the
//! very reader the node host uses (`feeds::Feed` and the raw feed service)
//! and its records are the node's bytes by construction.
//!
//! Files: event feeds go to `hourly/YYYYMMDD/H` by the record's block time
//! (UTC; never back to an earlier file, so file order is record order);
//! `replica_cmds` goes to `replica_cmds/l1gate-mirror/YYYYMMDD/<height>`,
//! a new file whenever the block numbers jump and every
//! [`REPLICA_BLOCKS_PER_FILE`] blocks, since a block's number there is the
//! file's first height plus its line index. Each append is buffered; the
//! consumer flushes once per batch before telling readers.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use feeds::Source;

use crate::subjects::Placement;

/// Blocks per mirrored `replica_cmds` file (as the node writes them).
pub const REPLICA_BLOCKS_PER_FILE: u64 = 10_000;

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Appended to the current file.
    Appended,
    /// Appended to a file it created: readers must list the directory.
    NewFile,
    /// Not a line of this feed (a newline inside, or a block before the
    /// current `replica_cmds` file's): not written.
    Refused,
}

/// One feed's mirrored files.
#[derive(Debug)]
pub struct Mirror {
    root: PathBuf,
    source: Source,
    dir_name: Option<&'static str>,
    open: Option<OpenFile>,
}

#[derive(Debug)]
struct OpenFile {
    key: Key,
    path: PathBuf,
    writer: BufWriter<File>,
    /// `replica_cmds`: the block the next line must hold.
    next_block: u64,
    lines: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Hourly { date: u32, hour: u32 },
    Replica { height: u64, date: u32 },
}

impl Mirror {
    /// The mirror of `source` under the data directory `data_dir` (files go
    /// to `data_dir/hl/data`).
    pub fn new(data_dir: &Path, source: Source) -> Mirror {
        Mirror {
            root: data_dir.join("hl").join("data"),
            source,
            dir_name: None,
            open: None,
        }
    }

    /// Appends one record's line (without its newline).
    ///
    /// # Errors
    /// The file could not be created or written.
    pub fn append(&mut self, placement: &Placement, line: &[u8]) -> io::Result<Written> {
        if line.contains(&b'\n') || line.is_empty() {
            return Ok(Written::Refused);
        }
        let dir_name = *self.dir_name.get_or_insert_with(|| {
            let names = self.source.dir_names();
            placement
                .source_dir
                .as_deref()
                .and_then(|given| names.iter().find(|name| **name == given).copied())
                .or_else(|| names.first().copied())
                .unwrap_or("unknown")
        });
        let (date, hour) = date_hour(placement.time_ms);
        let key = if self.source == Source::Blocks {
            match &self.open {
                Some(open)
                    if open.next_block == placement.block
                        && open.lines < REPLICA_BLOCKS_PER_FILE =>
                {
                    open.key
                }
                Some(open) if placement.block < open.next_block => return Ok(Written::Refused),
                _ => Key::Replica {
                    height: placement.block,
                    date,
                },
            }
        } else {
            let key = Key::Hourly { date, hour };
            // Never back to an earlier hour: file order is record order.
            match &self.open {
                Some(open) if open.key >= key => open.key,
                _ => key,
            }
        };
        let mut written = Written::Appended;
        if self.open.as_ref().is_none_or(|open| open.key != key) {
            if let Some(mut previous) = self.open.take() {
                previous.writer.flush()?;
            }
            let path = self.path_of(dir_name, key);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            let file = OpenOptions::new().create(true).append(true).open(&path)?;
            self.open = Some(OpenFile {
                key,
                path,
                writer: BufWriter::with_capacity(1 << 20, file),
                next_block: placement.block,
                lines: 0,
            });
            written = Written::NewFile;
        }
        let Some(open) = self.open.as_mut() else {
            return Ok(Written::Refused);
        };
        open.writer.write_all(line)?;
        open.writer.write_all(b"\n")?;
        open.next_block = placement.block + 1;
        open.lines += 1;
        Ok(written)
    }

    /// Writes what is buffered to the file.
    ///
    /// # Errors
    /// The write failed.
    pub fn flush(&mut self) -> io::Result<()> {
        match self.open.as_mut() {
            Some(open) => open.writer.flush(),
            None => Ok(()),
        }
    }

    /// Removes mirrored files last written before `cutoff` (the stream's
    /// retention has dropped their records too), never the current file;
    /// returns how many went.
    pub fn prune(&self, cutoff: SystemTime) -> usize {
        let Some(dir_name) = self.dir_name else {
            return 0;
        };
        let current = self.open.as_ref().map(|open| open.path.clone());
        let mut removed = 0;
        let mut stack = vec![self.root.join(dir_name)];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(path);
                } else if Some(&path) != current.as_ref()
                    && meta.modified().is_ok_and(|time| time < cutoff)
                    && fs::remove_file(&path).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    fn path_of(&self, dir_name: &str, key: Key) -> PathBuf {
        let dir = self.root.join(dir_name);
        match key {
            Key::Hourly { date, hour } => dir
                .join("hourly")
                .join(date.to_string())
                .join(hour.to_string()),
            Key::Replica { height, date } => dir
                .join("l1gate-mirror")
                .join(date.to_string())
                .join(height.to_string()),
        }
    }
}

/// `(YYYYMMDD, hour)` of a block time in UTC (the epoch for none).
fn date_hour(time_ms: Option<i64>) -> (u32, u32) {
    let text = feeds::time::format_iso8601_ms(time_ms.unwrap_or(0).max(0));
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`
    let digits = |range: std::ops::Range<usize>| -> u32 {
        text.get(range)
            .and_then(|part| part.parse().ok())
            .unwrap_or(0)
    };
    let date = digits(0..4) * 10_000 + digits(5..7) * 100 + digits(8..10);
    (date, digits(11..13))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(block: u64, time_ms: i64) -> Placement {
        Placement {
            block,
            time_ms: Some(time_ms),
            index: 0,
            source_dir: Some("node_fills_by_block".into()),
        }
    }

    #[test]
    fn records_land_in_hourly_files_in_order_and_read_back_as_the_node_wrote_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut mirror = Mirror::new(dir.path(), Source::Fills);
        let hour_20 = 1_777_582_003_304; // 2026-04-30T20:46:43.304Z
        let hour_21 = hour_20 + 3_600_000;
        assert_eq!(
            mirror.append(&at(1, hour_20), b"{\"a\":1}").unwrap(),
            Written::NewFile
        );
        assert_eq!(
            mirror.append(&at(2, hour_20), b"{\"a\":2}").unwrap(),
            Written::Appended
        );
        assert_eq!(
            mirror.append(&at(3, hour_21), b"{\"a\":3}").unwrap(),
            Written::NewFile
        );
        // A time going back stays in the newer file.
        assert_eq!(
            mirror.append(&at(4, hour_20), b"{\"a\":4}").unwrap(),
            Written::Appended
        );
        assert_eq!(
            mirror.append(&at(5, hour_21), b"x\ny").unwrap(),
            Written::Refused
        );
        mirror.flush().unwrap();
        let base = dir
            .path()
            .join("hl/data/node_fills_by_block/hourly/20260430");
        assert_eq!(
            fs::read(base.join("20")).unwrap(),
            b"{\"a\":1}\n{\"a\":2}\n"
        );
        assert_eq!(
            fs::read(base.join("21")).unwrap(),
            b"{\"a\":3}\n{\"a\":4}\n"
        );
    }

    #[test]
    fn replica_files_start_where_block_numbers_jump() {
        let dir = tempfile::tempdir().unwrap();
        let mut mirror = Mirror::new(dir.path(), Source::Blocks);
        let time = 1_777_582_003_304;
        for block in [100, 101, 105] {
            let mut placement = at(block, time);
            placement.source_dir = Some("replica_cmds".into());
            mirror.append(&placement, b"{}").unwrap();
        }
        assert_eq!(
            mirror.append(&at(104, time), b"{}").unwrap(),
            Written::Refused
        );
        mirror.flush().unwrap();
        let base = dir
            .path()
            .join("hl/data/replica_cmds/l1gate-mirror/20260430");
        assert_eq!(fs::read(base.join("100")).unwrap(), b"{}\n{}\n");
        assert_eq!(fs::read(base.join("105")).unwrap(), b"{}\n");
    }
}
