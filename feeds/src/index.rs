//! Sans-I/O positioning inside a run of newline-terminated lines: where a
//! line starts and ends, record headers, and the binary search for the first
//! line at or after a block number or timestamp.
//!
//! The search probes O(log bytes) lines and decodes only each probe's header
//! ([`crate::envelope::decode`] is O(header) on node lines), so positioning a
//! reader never scans a file.

use std::ops::Range;

use crate::envelope::{self, skip_string, skip_value};
use crate::time::parse_node_time_ms;

/// Where a read should start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The first record with `block_number >= n`.
    BlockNumber(u64),
    /// The first record with `timestamp_ms >= t`.
    TimestampMs(i64),
}

/// The position fields of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Header {
    /// Sequential block height, when known.
    pub block_number: Option<u64>,
    /// Block time in Unix ms, when known.
    pub timestamp_ms: Option<i64>,
}

impl Target {
    /// Whether a record with this header is at or after the target. A header
    /// lacking the field is treated as before it.
    pub fn reached(self, header: &Header) -> bool {
        match self {
            Target::BlockNumber(n) => header.block_number.is_some_and(|b| b >= n),
            Target::TimestampMs(t) => header.timestamp_ms.is_some_and(|ms| ms >= t),
        }
    }
}

/// The header of a block-envelope line; empty when the line is not a whole
/// envelope ([`envelope::decode_whole`]).
pub fn envelope_header(line: &[u8]) -> Header {
    envelope::decode_whole(line).map_or(Header::default(), |env| Header {
        block_number: Some(env.block_number),
        timestamp_ms: Some(env.block_time_ms),
    })
}

/// `abci_block.time` of a `replica_cmds` line in Unix ms, without parsing
/// the (large) rest of the line.
pub fn replica_time_ms(line: &[u8]) -> Option<i64> {
    let block = object_value(line, 0..line.len(), b"abci_block")?;
    let time = object_value(line, block, b"time")?;
    let text = line.get(time.start + 1..time.end.checked_sub(1)?)?;
    if line.get(time.start) != Some(&b'"') {
        return None;
    }
    parse_node_time_ms(text).ok()
}

/// Span of the value of `key` in the JSON object spanning `object` in
/// `line` (top-level keys only; nothing is allocated).
pub fn object_value(line: &[u8], object: Range<usize>, key: &[u8]) -> Option<Range<usize>> {
    let body = line.get(..object.end)?;
    let mut pos = skip_ws(body, object.start);
    if body.get(pos) != Some(&b'{') {
        return None;
    }
    pos += 1;
    loop {
        pos = skip_ws(body, pos);
        match body.get(pos) {
            Some(b'"') => {}
            _ => return None,
        }
        let key_end = skip_string(body, pos).ok()?;
        let name = &body[pos + 1..key_end - 1];
        pos = skip_ws(body, key_end);
        if body.get(pos) != Some(&b':') {
            return None;
        }
        pos = skip_ws(body, pos + 1);
        let value_end = skip_value(body, pos).ok()?;
        if name == key {
            return Some(pos..value_end);
        }
        pos = skip_ws(body, value_end);
        match body.get(pos) {
            Some(b',') => pos += 1,
            _ => return None,
        }
    }
}

fn skip_ws(line: &[u8], mut pos: usize) -> usize {
    while pos < line.len() && line[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

/// The complete line starting at `start` (without its `\n`) and the offset
/// of the next line, or `None` at the end of `data` or when no `\n` follows.
pub fn line_at(data: &[u8], start: usize) -> Option<(Range<usize>, usize)> {
    let rest = data.get(start..)?;
    let nl = memchr::memchr(b'\n', rest)?;
    Some((start..start + nl, start + nl + 1))
}

/// Start of the line containing byte `pos`.
pub fn line_start_containing(data: &[u8], pos: usize) -> usize {
    let pos = pos.min(data.len());
    memchr::memrchr(b'\n', &data[..pos]).map_or(0, |at| at + 1)
}

/// Offset of the first complete line in `data` for which `reached` holds,
/// assuming it holds for a suffix of the lines; `data.len()` when no line
/// does. Each probe snaps to the start of the line holding the midpoint and
/// calls `reached` on that line only.
pub fn first_line_where(data: &[u8], mut reached: impl FnMut(&[u8]) -> bool) -> usize {
    let mut lo = 0usize;
    let mut hi = data.len();
    // Invariant: lo and hi are line starts (or data.len()); every line
    // before lo fails; the answer is at or before hi.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let start = line_start_containing(data, mid).max(lo);
        let Some((line, next)) = line_at(data, start) else {
            // A tail without a newline is not a complete line.
            hi = start;
            continue;
        };
        if reached(&data[line]) {
            hi = start;
        } else {
            lo = next;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(block: u64, ms: u32) -> String {
        format!(
            r#"{{"local_time":"2026-01-01T00:00:00.5","block_time":"2026-01-01T00:00:{:02}.{:03}","block_number":{block},"events":[]}}"#,
            ms / 1000,
            ms % 1000
        )
    }

    fn file(blocks: &[u64]) -> Vec<u8> {
        let mut out = String::new();
        for (i, b) in blocks.iter().enumerate() {
            out.push_str(&line(*b, i as u32 * 100));
            out.push('\n');
        }
        out.into_bytes()
    }

    fn block_at(data: &[u8], offset: usize) -> Option<u64> {
        line_at(data, offset).and_then(|(l, _)| envelope_header(&data[l]).block_number)
    }

    #[test]
    fn finds_every_block_and_the_first_line_of_repeated_blocks() {
        let blocks = [5, 5, 5, 6, 8, 8, 9, 9, 9, 9, 12];
        let data = file(&blocks);
        for target in 0..14u64 {
            let at = first_line_where(&data, |l| {
                Target::BlockNumber(target).reached(&envelope_header(l))
            });
            let expected = blocks.iter().position(|b| *b >= target);
            match expected {
                Some(index) => {
                    assert_eq!(block_at(&data, at), Some(blocks[index]), "target {target}");
                    assert_eq!(
                        memchr::memchr_iter(b'\n', &data[..at]).count(),
                        index,
                        "target {target} must land on the first line of its block"
                    );
                }
                None => assert_eq!(at, data.len()),
            }
        }
    }

    #[test]
    fn searches_by_time() {
        let data = file(&[1, 2, 3, 4]);
        let t0 = envelope_header(line(1, 0).as_bytes()).timestamp_ms.unwrap();
        let at = first_line_where(&data, |l| {
            Target::TimestampMs(t0 + 150).reached(&envelope_header(l))
        });
        assert_eq!(block_at(&data, at), Some(3));
    }

    #[test]
    fn ignores_an_unterminated_tail() {
        let mut data = file(&[1, 2]);
        data.extend_from_slice(line(3, 0).as_bytes());
        let at = first_line_where(&data, |l| {
            Target::BlockNumber(3).reached(&envelope_header(l))
        });
        assert_eq!(block_at(&data, at), None);
        assert!(at <= data.len());
    }

    #[test]
    fn reads_the_replica_block_time() {
        let line = br#"{"abci_block":{"time":"2026-01-01T00:00:01.250","round":9,"signed_action_bundles":[["0x1",{"a":"]}"}]]},"resps":null}"#;
        assert_eq!(replica_time_ms(line), Some(1_767_225_601_250));
        assert_eq!(replica_time_ms(b"{\"resps\":null}"), None);
        assert_eq!(replica_time_ms(b"not json"), None);
    }
}
