//! The node's older, non-batched fill formats, read as block envelopes.
//!
//! Before the by-block layout (`node_fills_by_block`) the node wrote, and
//! the exchange's archive keeps:
//!
//! - `node_fills/hourly/…`: one `["0xuser",{fill}]` per line, no envelope,
//!   no block number (the archive's hours from 2025-05-25 to 2025-07-27);
//! - `node_trades/hourly/…`: one trade per line, both parties in
//!   `side_info` (buyer first), its time as ISO text with nanoseconds, no
//!   fees, PnL, direction or trade id (the archive's hours from 2025-03-22
//!   to 2025-05-25).
//!
//! A reader of such a directory gets each line wrapped in a streaming-mode
//! envelope, `{"local_time":T,"block_time":T,"block_number":N,"events":[LINE]}`,
//! with the line itself, byte for byte, as the one event. The formats carry
//! no block number, so **the event's time in Unix milliseconds stands in for
//! it** (`N`), and `T` is that time as the node writes times (`node_trades`
//! keeps its nanoseconds). Every fill or trade of one block has the block's
//! time, so the lines of one block share `N` and the streaming aligner
//! joins them into one block, as it joins a streaming node's lines; two
//! blocks within one millisecond would be joined too (block times are tens
//! of milliseconds apart). The numbers are 13 digits where real block
//! numbers are 9: they cannot be mistaken for heights.

use bytes::Bytes;

use crate::index::{Header, object_value};
use crate::time::{format_node_time, parse_node_time_ms, parse_node_time_ns};

/// How the lines of a source directory are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineFormat {
    /// Block envelopes (`_by_block`, `_streaming`).
    Envelope,
    /// `replica_cmds` blocks.
    Replica,
    /// `node_fills`: one `["0xuser",{fill}]` per line.
    Fill,
    /// `node_trades`: one trade per line.
    Trade,
}

impl LineFormat {
    /// The format of a source directory by its name.
    pub fn of_dir(name: &str) -> LineFormat {
        match name {
            "replica_cmds" => LineFormat::Replica,
            "node_fills" => LineFormat::Fill,
            "node_trades" => LineFormat::Trade,
            _ => LineFormat::Envelope,
        }
    }

    /// Whether lines are wrapped in envelopes when read (the older fill
    /// formats).
    pub fn is_legacy(self) -> bool {
        matches!(self, LineFormat::Fill | LineFormat::Trade)
    }
}

/// Whether a block number is a time standing in for one (an older
/// format's line; see the module docs): 13 digits or more, where the
/// chain's heights have 9.
pub fn is_time_number(number: u64) -> bool {
    number >= 1_000_000_000_000
}

/// The position of an older-format line: its time in Unix ms, which also
/// stands in for its block number; empty when the line has no readable
/// time.
pub fn header(format: LineFormat, line: &[u8]) -> Header {
    let Some(ns) = time_ns(format, line) else {
        return Header::default();
    };
    let ms = ns.div_euclid(1_000_000);
    Header {
        block_number: u64::try_from(ms).ok(),
        timestamp_ms: Some(ms),
    }
}

/// An older-format line as a streaming-mode envelope holding it as its one
/// event (see the module docs); `None` when the line has no readable time.
pub fn envelope(format: LineFormat, line: &[u8]) -> Option<Bytes> {
    let ns = time_ns(format, line)?;
    let time = format_node_time(ns);
    let number = ns.div_euclid(1_000_000);
    let mut out = Vec::with_capacity(line.len() + 2 * time.len() + 80);
    out.extend_from_slice(b"{\"local_time\":\"");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"\",\"block_time\":\"");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"\",\"block_number\":");
    out.extend_from_slice(number.to_string().as_bytes());
    out.extend_from_slice(b",\"events\":[");
    out.extend_from_slice(line);
    out.extend_from_slice(b"]}");
    Some(Bytes::from(out))
}

/// The line's time in Unix ns: a fill's `time` (ms) inside `[user, fill]`,
/// or a trade's top-level `time` text.
fn time_ns(format: LineFormat, line: &[u8]) -> Option<i64> {
    match format {
        LineFormat::Fill => {
            let fill = fill_object(line)?;
            let span = object_value(line, fill, b"time")?;
            let text = std::str::from_utf8(line.get(span)?).ok()?;
            text.parse::<i64>().ok()?.checked_mul(1_000_000)
        }
        LineFormat::Trade => {
            let span = object_value(line, 0..line.len(), b"time")?;
            let text = line.get(span.start + 1..span.end.checked_sub(1)?)?;
            if line.get(span.start) != Some(&b'"') {
                return None;
            }
            parse_node_time_ns(text)
                .ok()
                .or_else(|| parse_node_time_ms(text).ok()?.checked_mul(1_000_000))
        }
        LineFormat::Envelope | LineFormat::Replica => None,
    }
}

/// The span of the fill object in `["0xuser",{fill}]`.
fn fill_object(line: &[u8]) -> Option<std::ops::Range<usize>> {
    let mut pos = skip_ws(line, 0);
    if line.get(pos) != Some(&b'[') {
        return None;
    }
    pos = skip_ws(line, pos + 1);
    pos = crate::envelope::skip_string(line, pos).ok()?;
    pos = skip_ws(line, pos);
    if line.get(pos) != Some(&b',') {
        return None;
    }
    pos = skip_ws(line, pos + 1);
    let end = crate::envelope::skip_value(line, pos).ok()?;
    Some(pos..end)
}

fn skip_ws(line: &[u8], mut pos: usize) -> usize {
    while line.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope;

    /// The archive's first `node_fills` line of 2025-07-27 (public).
    const FILL: &[u8] = br#"["0xdcac85ec0000000000000000000000000000abcd",{"coin":"PURR/USDC","px":"0.19247","sz":"35.0","side":"B","time":1753574400031,"startPosition":"11544577.0668599997","dir":"Buy","closedPnl":"0.0","hash":"0x0000000000000000000000000000000000000000000000000000000000000000","oid":121500417607,"crossed":false,"fee":"-0.00006736","tid":944113087409712,"feeToken":"USDC"}]"#;
    /// A `node_trades` line in the node's shape.
    const TRADE: &[u8] = br#"{"coin":"PURR","side":"B","time":"2025-03-22T23:00:00.000984711","px":"0.12928","sz":"1547.0","hash":"0x00","trade_dir_override":"Na","side_info":[{"user":"0xa68c","start_pos":"2462968.0","oid":81305166697,"twap_id":568722,"cloid":null},{"user":"0xecb6","start_pos":"-15493993.0","oid":81305141429,"twap_id":null,"cloid":"0x6640"}]}"#;

    #[test]
    fn formats_follow_the_directory_names() {
        assert_eq!(LineFormat::of_dir("node_fills"), LineFormat::Fill);
        assert_eq!(LineFormat::of_dir("node_trades"), LineFormat::Trade);
        assert_eq!(
            LineFormat::of_dir("node_fills_by_block"),
            LineFormat::Envelope
        );
        assert_eq!(LineFormat::of_dir("replica_cmds"), LineFormat::Replica);
        assert!(LineFormat::Fill.is_legacy() && !LineFormat::Envelope.is_legacy());
        assert!(is_time_number(1_753_574_400_031) && !is_time_number(985_148_182));
    }

    #[test]
    fn a_fill_line_is_its_own_envelope_at_its_time() {
        assert_eq!(
            header(LineFormat::Fill, FILL),
            Header {
                block_number: Some(1_753_574_400_031),
                timestamp_ms: Some(1_753_574_400_031),
            }
        );
        let wrapped = envelope(LineFormat::Fill, FILL).unwrap();
        let env = envelope::decode(&wrapped).unwrap();
        assert_eq!(env.block_number, 1_753_574_400_031);
        assert_eq!(env.block_time_ms, 1_753_574_400_031);
        let events: Vec<_> = env.events().map(Result::unwrap).collect();
        assert_eq!(events.len(), 1);
        assert_eq!(&wrapped[events[0].clone()], FILL, "the line, byte for byte");
    }

    #[test]
    fn a_trade_line_keeps_its_nanoseconds() {
        let ms = 1_742_684_400_000;
        assert_eq!(
            header(LineFormat::Trade, TRADE),
            Header {
                block_number: Some(ms as u64),
                timestamp_ms: Some(ms),
            }
        );
        let wrapped = envelope(LineFormat::Trade, TRADE).unwrap();
        let text = std::str::from_utf8(&wrapped).unwrap();
        assert!(
            text.starts_with(r#"{"local_time":"2025-03-22T23:00:00.000984711","#),
            "{text}"
        );
        assert!(text.ends_with(&format!("[{}]}}", std::str::from_utf8(TRADE).unwrap())));
    }

    #[test]
    fn lines_without_a_time_have_no_position() {
        for format in [LineFormat::Fill, LineFormat::Trade] {
            for line in [
                &b""[..],
                b"{}",
                b"[\"0x1\",{}]",
                b"not json",
                b"[\"0x1\",{\"time\":\"x\"}]",
            ] {
                assert_eq!(header(format, line), Header::default());
                assert_eq!(envelope(format, line), None);
            }
        }
    }
}
