//! A frame's protobuf, encoded once and shared by every subscriber of its
//! key, and each subscriber's copy of it with its own numbers stamped as
//! extra wire fields:
//!
//! - L4 order updates, TP/SL and the fills family carry `sequence`: the
//!   shared body is encoded with `sequence` unset and the subscriber's value
//!   is appended as a trailing field;
//! - L2 diffs carry `seq` / `prev_seq` per coin entry: each entry's body is
//!   encoded once with both unset, and each subscriber's copy of the entry is
//!   the entry's key and new length, its two numbers, then the shared body.
//!
//! Protobuf decoders accept fields in any order, so a client decodes exactly
//! the message of the `.proto`.

use bytes::Bytes;
use engine::book::l2::L2Level;
use engine::views::Numbers;
use prost::Message as _;
use proto::encoded::{Encoded, put_len_prefix, put_varint_field};
use proto::v3 as pb;

/// One frame's shared encoding.
#[derive(Debug, Clone)]
pub enum Shared {
    /// The whole message; sent as it is.
    Plain(Bytes),
    /// The message without its `sequence`; the subscriber's value is appended.
    Sequenced {
        /// Encoded with `sequence` = 0 (absent).
        body: Bytes,
        /// The field number of `sequence`.
        field: u32,
    },
    /// An L2 diff: its top-level fields and each coin entry without
    /// `seq`/`prev_seq`.
    L2Diff {
        /// `time` and `block_number`.
        head: Bytes,
        /// Each `L2CoinDiff`'s body, in order.
        entries: Vec<Bytes>,
    },
}

impl Shared {
    /// A message sent to every subscriber as it is.
    pub fn plain(message: &impl prost::Message) -> Shared {
        Shared::Plain(Bytes::from(message.encode_to_vec()))
    }

    /// A message whose field number `field` is the subscriber's `sequence`:
    /// `message` has it unset.
    pub fn sequenced(message: &impl prost::Message, field: u32) -> Shared {
        Shared::Sequenced {
            body: Bytes::from(message.encode_to_vec()),
            field,
        }
    }

    /// An `L2BookDiffUpdate` whose coin entries carry each subscriber's
    /// `seq` / `prev_seq`: `message` has them unset.
    pub fn l2_diff(message: &pb::L2BookDiffUpdate) -> Shared {
        let head = pb::L2BookDiffUpdate {
            time: message.time,
            block_number: message.block_number,
            diffs: Vec::new(),
        };
        Shared::L2Diff {
            head: Bytes::from(head.encode_to_vec()),
            entries: message
                .diffs
                .iter()
                .map(|diff| Bytes::from(diff.encode_to_vec()))
                .collect(),
        }
    }
}

/// Field numbers of the L2 diff in market_streaming.proto: the update's
/// `diffs`, and an entry's `seq` and `prev_seq`.
const L2_DIFFS: u32 = 3;
const L2_SEQ: u32 = 2;
const L2_PREV_SEQ: u32 = 3;

/// One subscriber's bytes of a shared frame.
pub fn stamp(shared: &Shared, numbers: &Numbers) -> Encoded {
    match (shared, numbers) {
        (Shared::Plain(bytes), _) => Encoded::new(bytes.clone()),
        (Shared::Sequenced { body, field }, Numbers::Sequence(sequence)) => {
            let mut tail = Vec::with_capacity(11);
            put_varint_field(&mut tail, *field, *sequence);
            Encoded::with_tail(body.clone(), Bytes::from(tail))
        }
        (Shared::Sequenced { body, .. }, _) => Encoded::new(body.clone()),
        (Shared::L2Diff { head, entries }, numbers) => {
            let seqs: &[(u64, u64)] = match numbers {
                Numbers::PerCoin(seqs) => seqs,
                _ => &[],
            };
            let mut parts = Vec::with_capacity(1 + 2 * entries.len());
            parts.push(head.clone());
            for (at, body) in entries.iter().enumerate() {
                let (seq, prev_seq) = seqs.get(at).copied().unwrap_or_default();
                let mut numbers = Vec::with_capacity(22);
                if seq != 0 {
                    put_varint_field(&mut numbers, L2_SEQ, seq);
                }
                if prev_seq != 0 {
                    put_varint_field(&mut numbers, L2_PREV_SEQ, prev_seq);
                }
                let mut prefix = Vec::with_capacity(numbers.len() + 8);
                put_len_prefix(&mut prefix, L2_DIFFS, body.len() + numbers.len());
                prefix.extend_from_slice(&numbers);
                parts.push(Bytes::from(prefix));
                parts.push(body.clone());
            }
            Encoded::from_parts(parts)
        }
    }
}

/// A block number as the protobuf's `int64`.
pub fn block(number: u64) -> i64 {
    i64::try_from(number).unwrap_or(i64::MAX)
}

/// An aggregated level.
pub fn level(level: &L2Level) -> pb::L2Level {
    pb::L2Level {
        px: level.px.to_string(),
        sz: level.sz.to_string(),
        n: level.n,
    }
}

/// Aggregated levels, in order.
pub fn levels(levels: &[L2Level]) -> Vec<pb::L2Level> {
    levels.iter().map(level).collect()
}
