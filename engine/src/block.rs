//! One block's worth of node output, joined across sources. The aligner
//! builds [`Block`]s and the market folds them (decoding each line once).
//! [`Block::decode`] decodes every status, diff and fill of a block at once
//! into a [`DecodedBlock`], for tools and tests that fold one part of the
//! market by hand.

use bytes::Bytes;
use feeds::envelope;

use crate::event::{
    BookDiffEvent, EventError, FillEvent, OrderStatusEvent, TradeLine, decode_book_diff,
    decode_fill, decode_fill_at, decode_order_status, decode_trade_line,
};

/// The raw lines of one block, per source, in file order. In by-block mode a
/// source has one line per block; in streaming mode it may have many (or none
/// for an empty block).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockLines {
    /// `node_order_statuses` lines.
    pub order_statuses: Vec<Bytes>,
    /// `node_raw_book_diffs` lines.
    pub raw_book_diffs: Vec<Bytes>,
    /// `node_fills` lines.
    pub fills: Vec<Bytes>,
    /// `misc_events` lines.
    pub misc_events: Vec<Bytes>,
    /// `node_twap_statuses` lines.
    pub twap_statuses: Vec<Bytes>,
}

/// One block: its number, its block time and its lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Sequential block height.
    pub number: u64,
    /// Block time, Unix ms.
    pub time_ms: i64,
    /// The lines of every source for this block.
    pub lines: BlockLines,
}

/// A decoded event together with its exact bytes in the source line.
#[derive(Debug, Clone)]
pub struct Spanned<'a, T> {
    /// The event's bytes, exactly as the node wrote them.
    pub raw: &'a [u8],
    /// The decoded event.
    pub event: T,
}

/// A block's events, decoded once and shared by every view.
#[derive(Debug, Clone, Default)]
pub struct DecodedBlock<'a> {
    /// Sequential block height.
    pub number: u64,
    /// Block time, Unix ms.
    pub time_ms: i64,
    /// Order statuses in file order.
    pub order_statuses: Vec<Spanned<'a, OrderStatusEvent<'a>>>,
    /// Raw book diffs in file order.
    pub book_diffs: Vec<Spanned<'a, BookDiffEvent<'a>>>,
    /// Fills in file order.
    pub fills: Vec<Spanned<'a, FillEvent<'a>>>,
    /// Lines or events that did not decode; counted and reported, never fatal.
    pub errors: Vec<BlockDecodeError>,
}

/// A line or event of a block that did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockDecodeError {
    /// The envelope itself is broken.
    #[error("block {block}: {error}")]
    Envelope {
        /// Block number the line was filed under.
        block: u64,
        /// The envelope error.
        error: envelope::EnvelopeError,
    },
    /// One event is broken.
    #[error("block {block}: {error}")]
    Event {
        /// Block number.
        block: u64,
        /// The event error.
        error: EventError,
    },
}

impl Block {
    /// An empty block.
    pub fn new(number: u64, time_ms: i64) -> Self {
        Self {
            number,
            time_ms,
            lines: BlockLines::default(),
        }
    }

    /// Decodes every status, diff and fill of this block. Broken lines and
    /// events are collected in [`DecodedBlock::errors`] and skipped.
    pub fn decode(&self) -> DecodedBlock<'_> {
        let mut out = DecodedBlock {
            number: self.number,
            time_ms: self.time_ms,
            ..DecodedBlock::default()
        };
        let number = self.number;
        for_each_event(
            number,
            &self.lines.order_statuses,
            (&mut out.order_statuses, &mut out.errors),
            |_, _| None,
            |list, raw, errors| match decode_order_status(raw) {
                Ok(event) => list.push(Spanned { raw, event }),
                Err(error) => errors.push(BlockDecodeError::Event {
                    block: number,
                    error,
                }),
            },
        );
        for_each_event(
            number,
            &self.lines.raw_book_diffs,
            (&mut out.book_diffs, &mut out.errors),
            |_, _| None,
            |list, raw, errors| match decode_book_diff(raw) {
                Ok(event) => list.push(Spanned { raw, event }),
                Err(error) => errors.push(BlockDecodeError::Event {
                    block: number,
                    error,
                }),
            },
        );
        for_each_event(
            number,
            &self.lines.fills,
            (&mut out.fills, &mut out.errors),
            |_, _| None,
            |list, raw, errors| match decode_fill(raw) {
                Ok(event) => list.push(Spanned { raw, event }),
                Err(error) => errors.push(BlockDecodeError::Event {
                    block: number,
                    error,
                }),
            },
        );
        out
    }
}

/// A block's fill events, and the whole trades of the older `node_trades`
/// format (an object per trade where fills are `[user, fill]` pairs; see
/// `feeds::legacy`).
#[derive(Debug, Default)]
pub(crate) struct BlockFills<'a> {
    /// `[user, fill]` events in file order.
    pub fills: Vec<FillEvent<'a>>,
    /// Whole trades in file order.
    pub trades: Vec<TradeLine<'a>>,
}

/// The most fill events [`decode_fills`] reserves room for before it has
/// decoded any (a mainnet block carries from none to a few hundred; a
/// larger one grows the list past this as it decodes).
const RESERVE_FILLS: usize = 4_096;

/// The room of a block's fill list, kept from one block to the next: a
/// busy block's fills take hundreds of kilobytes, and allocating and
/// freeing that for every block cost a fold of fills alone a tenth of its
/// time. Holds no fill between blocks (they borrow their block's lines),
/// only the allocation.
#[derive(Debug, Clone, Default)]
pub(crate) struct FillRoom {
    /// Always empty.
    spare: Vec<FillEvent<'static>>,
}

impl FillRoom {
    /// The kept room, empty, for a block's fills.
    pub(crate) fn take<'a>(&mut self) -> Vec<FillEvent<'a>> {
        relabel(std::mem::take(&mut self.spare))
    }

    /// Keeps `fills`' room for the next block; the fills are dropped.
    pub(crate) fn put_back(&mut self, fills: Vec<FillEvent<'_>>) {
        self.spare = relabel(fills);
    }
}

/// `list` emptied, as a list of fills of another lifetime in the same
/// allocation (an empty list's collect into a type of the same layout
/// reuses its buffer).
fn relabel<'b>(mut list: Vec<FillEvent<'_>>) -> Vec<FillEvent<'b>> {
    list.clear();
    list.into_iter().map_while(|_| None).collect()
}

/// Decodes every fill (or whole trade) of `block`, in file order; broken
/// lines and events are added to `errors` and skipped. The fills are
/// decoded into `fills` (emptied first: see [`FillRoom`]).
pub(crate) fn decode_fills<'a>(
    block: &'a Block,
    fills: Vec<FillEvent<'a>>,
    errors: &mut Vec<BlockDecodeError>,
) -> BlockFills<'a> {
    let mut out = BlockFills {
        fills,
        trades: Vec::new(),
    };
    out.fills.clear();
    // A fill takes some 400 bytes of its line: reserving by the lines'
    // size spares the growth copies of a large block's events (at most
    // `RESERVE_FILLS` at once: a line of garbage reserves no more).
    let bytes: usize = block.lines.fills.iter().map(Bytes::len).sum();
    out.fills.reserve((bytes / 256).min(RESERVE_FILLS));
    let number = block.number;
    for_each_event(
        number,
        &block.lines.fills,
        (&mut out, errors),
        // A fill in the node's layout is delimited by its own decode (one
        // pass over its bytes), decoded straight into the list (a fill is a
        // few hundred bytes: each move of one is a copy of them).
        |out, rest| {
            let (event, len) = decode_fill_at(rest)?;
            out.fills.push(event);
            Some(len)
        },
        // Anything else: a whole trade, or a fill through serde.
        |out, raw, errors| {
            let decoded = if raw.first() == Some(&b'{') {
                decode_trade_line(raw).map(|line| out.trades.push(line))
            } else {
                decode_fill(raw).map(|event| out.fills.push(event))
            };
            if let Err(error) = decoded {
                errors.push(BlockDecodeError::Event {
                    block: number,
                    error,
                });
            }
        },
    );
    out
}

/// Visits each event of `lines` with its exact bytes, keeping what it
/// decodes in `out` and the errors in `errors` (envelope errors end their
/// line). `take` is asked first at each event's start: a decoder of the
/// node's compact layout that keeps the event in `out` and says how many
/// bytes it read, so that the event is delimited by its decode rather than
/// walked twice; an event it does not take (`None`) is delimited by the
/// bracket walk and handed to `visit`.
fn for_each_event<'a, O>(
    block: u64,
    lines: &'a [Bytes],
    (out, errors): (&mut O, &mut Vec<BlockDecodeError>),
    mut take: impl FnMut(&mut O, &'a [u8]) -> Option<usize>,
    mut visit: impl FnMut(&mut O, &'a [u8], &mut Vec<BlockDecodeError>),
) {
    for line in lines {
        let line: &'a [u8] = line;
        let env = match envelope::decode(line) {
            Ok(env) => env,
            Err(error) => {
                errors.push(BlockDecodeError::Envelope { block, error });
                continue;
            }
        };
        let mut spans = env.events();
        loop {
            let mut taken = false;
            let next = spans.next_measured(|rest| {
                let len = take(out, rest)?;
                taken = true;
                Some(len)
            });
            match next {
                None => break,
                Some(Ok(_)) if taken => {}
                Some(Ok(span)) => visit(out, &line[span], errors),
                Some(Err(error)) => {
                    errors.push(BlockDecodeError::Envelope { block, error });
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_rooms_list_comes_back_empty_with_its_allocation() {
        let mut block = Block::new(7, 1_000);
        block.lines.fills.push(Bytes::from_static(
            br#"{"local_time":"2026-01-01T00:00:00.1","block_time":"2026-01-01T00:00:00","block_number":7,"events":[["0xa",{"coin":"BTC","px":"1.0","sz":"2.0","side":"B","time":1000,"startPosition":"0.0","dir":"Open Long","closedPnl":"0.0","hash":"0x01","oid":1,"crossed":true,"fee":"0.1","tid":9,"feeToken":"USDC","twapId":null}]]}"#,
        ));
        let mut room = FillRoom::default();
        let mut errors = Vec::new();
        let decoded = decode_fills(&block, room.take(), &mut errors);
        assert_eq!(decoded.fills.len(), 1, "{errors:?}");
        let (capacity, at) = (decoded.fills.capacity(), decoded.fills.as_ptr() as usize);
        room.put_back(decoded.fills);
        let again = room.take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), capacity);
        assert_eq!(again.as_ptr() as usize, at, "the same allocation");
        // Decoding into it again gives the same fills.
        let decoded = decode_fills(&block, again, &mut errors);
        assert_eq!(decoded.fills.len(), 1);
        assert_eq!(decoded.fills[0].fill().tid, 9);
        assert!(errors.is_empty());
    }

    #[test]
    fn decodes_events_and_collects_broken_ones() {
        let mut block = Block::new(7, 1_000);
        block.lines.raw_book_diffs.push(Bytes::from_static(
            br#"{"local_time":"2026-01-01T00:00:00.1","block_time":"2026-01-01T00:00:00","block_number":7,"events":[{"user":"0xa","oid":1,"coin":"BTC","side":"B","px":"1.0","raw_book_diff":"remove"},{"user":"0xa","oid":2}]}"#,
        ));
        block.lines.fills.push(Bytes::from_static(b"not json"));
        let decoded = block.decode();
        assert_eq!(decoded.book_diffs.len(), 1);
        assert_eq!(decoded.book_diffs[0].event.oid, 1);
        assert_eq!(decoded.errors.len(), 2);
    }
}
