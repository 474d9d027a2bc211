//! What a record looks like on the bus: one JetStream stream per feed
//! (`L1GATE_FILLS`, subject `l1gate.fills`), one message per record whose
//! payload is the node's line byte for byte — or, for a line of
//! [`COMPRESS_FROM`] bytes or more, that line zstd-compressed and marked
//! with [`HEADER_ENCODING`] — and the headers that position it (block
//! number, block time, line index within the block, the node directory it
//! was read from) and de-duplicate it (`Nats-Msg-Id`
//! `fills:<block>:<index>`).
//!
//! Order-book snapshots are whole files (tens of MB) and are not carried.

use async_nats::HeaderMap;
use feeds::Source;

/// The feeds carried by the bus: every line feed.
pub const BUS_FEEDS: [Source; 6] = Source::LINE_FEEDS;

/// Header: the record's block number (decimal).
pub const HEADER_BLOCK: &str = "L1gate-Block";
/// Header: the record's block time, Unix ms (absent when the line has none).
pub const HEADER_TIME: &str = "L1gate-Time";
/// Header: the record's line index within its block (0 unless the node
/// writes one line per event, the streaming layout).
pub const HEADER_INDEX: &str = "L1gate-Index";
/// Header: the node directory the record was read from, e.g.
/// `node_fills_by_block` (the edge serves its feeds under the same name).
pub const HEADER_SOURCE: &str = "L1gate-Source";

/// Header: how the payload is encoded, when it is not the line itself:
/// `zstd` (a zstd frame of the line).
pub const HEADER_ENCODING: &str = "L1gate-Encoding";
/// Lines this long or longer travel zstd-compressed (a busy block's order
/// statuses are megabytes of JSON and compress about eightfold, so they fit
/// a server's default 1 MB `max_payload`); shorter ones as they are.
pub const COMPRESS_FROM: usize = 16 << 10;
/// The zstd level: the fastest of the standard ones, which already takes
/// node JSON to an eighth at several hundred MB/s.
const ZSTD_LEVEL: i32 = 1;
/// The longest line a compressed payload may expand to (a bound on what a
/// corrupt or hostile message can make an edge allocate).
pub const MAX_LINE_BYTES: usize = 256 << 20;

/// A record's payload on the bus and whether it is compressed: the line
/// zstd-compressed when it is [`COMPRESS_FROM`] bytes or longer and that
/// makes it shorter, else the line itself.
pub fn encode_payload(line: bytes::Bytes) -> (bytes::Bytes, bool) {
    if line.len() < COMPRESS_FROM {
        return (line, false);
    }
    match zstd::bulk::compress(&line, ZSTD_LEVEL) {
        Ok(packed) if packed.len() < line.len() => (packed.into(), true),
        _ => (line, false),
    }
}

/// The line a message carries, as its [`HEADER_ENCODING`] says.
///
/// # Errors
/// An unknown encoding, or a payload that is not a zstd frame of at most
/// [`MAX_LINE_BYTES`].
pub fn decode_payload(
    headers: Option<&HeaderMap>,
    payload: &bytes::Bytes,
) -> Result<bytes::Bytes, String> {
    match headers
        .and_then(|h| h.get(HEADER_ENCODING))
        .map(async_nats::HeaderValue::as_str)
    {
        None => Ok(payload.clone()),
        Some("zstd") => zstd::bulk::decompress(payload, MAX_LINE_BYTES)
            .map(bytes::Bytes::from)
            .map_err(|error| format!("a zstd payload that does not decode: {error}")),
        Some(other) => Err(format!(
            "header {HEADER_ENCODING}: unknown encoding {other:?}"
        )),
    }
}

/// The JetStream stream of a feed: `L1GATE_` and the feed id in capitals.
pub fn stream_name(source: Source) -> String {
    format!("L1GATE_{}", source.feed_id().to_ascii_uppercase())
}

/// The subject a feed's records are published on: `l1gate.` and the feed id.
pub fn subject(source: Source) -> String {
    format!("l1gate.{}", source.feed_id())
}

/// The `Nats-Msg-Id` of a record: `<feed>:<block>:<index>`, the same for
/// the same record whichever publisher sends it.
pub fn message_id(source: Source, block: u64, index: u32) -> String {
    format!("{}:{block}:{index}", source.feed_id())
}

/// Where a record sits in its feed, as its headers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Block number.
    pub block: u64,
    /// Block time, Unix ms.
    pub time_ms: Option<i64>,
    /// Line index within the block.
    pub index: u32,
    /// The node directory it was read from.
    pub source_dir: Option<String>,
}

impl Placement {
    /// The headers of a record at this placement.
    pub fn headers(&self, source: Source) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            message_id(source, self.block, self.index).as_str(),
        );
        headers.insert(HEADER_BLOCK, self.block.to_string().as_str());
        if let Some(time) = self.time_ms {
            headers.insert(HEADER_TIME, time.to_string().as_str());
        }
        headers.insert(HEADER_INDEX, self.index.to_string().as_str());
        if let Some(dir) = &self.source_dir {
            headers.insert(HEADER_SOURCE, dir.as_str());
        }
        headers
    }

    /// Reads a record's placement from its headers.
    ///
    /// # Errors
    /// A message naming the missing or malformed header.
    pub fn from_headers(headers: Option<&HeaderMap>) -> Result<Placement, String> {
        let headers = headers.ok_or("no headers")?;
        let text = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
        let number = |name: &str| -> Result<Option<u64>, String> {
            text(name)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("header {name} is not a number"))
                })
                .transpose()
        };
        let block = number(HEADER_BLOCK)?.ok_or(format!("no {HEADER_BLOCK} header"))?;
        let time_ms = text(HEADER_TIME)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| format!("header {HEADER_TIME} is not a number"))
            })
            .transpose()?;
        let index = number(HEADER_INDEX)?.unwrap_or(0);
        Ok(Placement {
            block,
            time_ms,
            index: u32::try_from(index).map_err(|_| format!("header {HEADER_INDEX} too large"))?,
            source_dir: text(HEADER_SOURCE),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_travel_compressed_and_come_back_byte_for_byte() {
        let short = bytes::Bytes::from_static(b"{\"block_number\":1}");
        assert_eq!(encode_payload(short.clone()), (short.clone(), false));
        assert_eq!(decode_payload(None, &short).unwrap(), short);

        let long: bytes::Bytes = "{\"status\":\"open\",\"coin\":\"BTC\"},"
            .repeat(4096)
            .into_bytes()
            .into();
        let (packed, compressed) = encode_payload(long.clone());
        assert!(
            compressed && packed.len() * 8 < long.len(),
            "{}",
            packed.len()
        );
        let mut headers = HeaderMap::new();
        headers.insert(HEADER_ENCODING, "zstd");
        assert_eq!(decode_payload(Some(&headers), &packed).unwrap(), long);

        // Not a zstd frame, or an encoding this build does not know: named.
        let broken = decode_payload(Some(&headers), &long).unwrap_err();
        assert!(broken.contains("zstd"), "{broken}");
        headers.insert(HEADER_ENCODING, "br");
        let unknown = decode_payload(Some(&headers), &packed).unwrap_err();
        assert!(unknown.contains("unknown encoding"), "{unknown}");
    }

    #[test]
    fn names_follow_the_feed_id() {
        assert_eq!(stream_name(Source::RawBookDiffs), "L1GATE_RAW_BOOK_DIFFS");
        assert_eq!(subject(Source::Fills), "l1gate.fills");
        assert_eq!(
            message_id(Source::Blocks, 985_148_182, 0),
            "blocks:985148182:0"
        );
    }

    #[test]
    fn a_placement_round_trips_through_its_headers() {
        let placement = Placement {
            block: 42,
            time_ms: Some(1_778_002_753_024),
            index: 3,
            source_dir: Some("node_fills_streaming".into()),
        };
        let headers = placement.headers(Source::Fills);
        assert_eq!(
            headers.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()),
            Some("fills:42:3".to_owned())
        );
        assert_eq!(Placement::from_headers(Some(&headers)), Ok(placement));
        assert!(Placement::from_headers(None).is_err());
        assert!(Placement::from_headers(Some(&HeaderMap::new())).is_err());
    }
}
