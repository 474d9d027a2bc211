//! Encode once, stamp per subscriber.
//!
//! A view key's frame is shared by every subscriber of the key. Its
//! protobuf bytes are produced once, by the first subscriber that sends it
//! (cached in the [`Batch`]), and every stream writes the same bytes with
//! the pass-through codec of [`proto::encoded`]. What differs between
//! subscribers is their numbering, which is stamped as extra wire fields:
//!
//! - L4 order updates, TP/SL and the fills family carry `sequence` (1 on the
//!   first frame of the subscription, +1 per frame): the shared body is
//!   encoded with `sequence` unset and the subscriber's value is appended as
//!   a trailing field;
//! - L2 diffs carry `seq` / `prev_seq` per coin entry: each entry's body is
//!   encoded once with both unset, and each subscriber's copy of the entry is
//!   the entry's key and new length, its two numbers, then the shared body.
//!
//! Protobuf decoders accept fields in any order, so a client decodes exactly
//! the message of the `.proto`.

use bytes::Bytes;
use prost::Message as _;
use proto::encoded::{Encoded, put_len_prefix, put_varint_field};
use proto::v3 as pb;

use crate::engine_thread::{Batch, Frame};

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

/// A subscriber's numbering.
#[derive(Debug, Default)]
pub struct Stamp {
    /// The last `sequence` sent.
    sequence: u64,
    /// The last `seq` sent per coin (L2 diffs).
    seqs: std::collections::BTreeMap<String, u64>,
}

/// A message one RPC streams.
pub trait Message: prost::Message + Default + Send + Sync + 'static {
    /// This message, if `frame` is one.
    fn of(frame: &Frame) -> Option<&Self>;

    /// The shared encoding (computed once per frame).
    fn share(&self) -> Shared {
        Shared::Plain(Bytes::from(self.encode_to_vec()))
    }

    /// This subscriber's bytes of the frame.
    fn stamp(&self, shared: &Shared, _stamp: &mut Stamp) -> Encoded {
        match shared {
            Shared::Plain(bytes) => Encoded::new(bytes.clone()),
            // Not produced by plain messages; sent without a stamp if ever.
            Shared::Sequenced { body, .. } => Encoded::new(body.clone()),
            Shared::L2Diff { head, .. } => Encoded::new(head.clone()),
        }
    }
}

/// The encoded frames of `batch` that are `T`s, stamped for one subscriber.
pub fn stamped<T: Message>(batch: &Batch, stamp: &mut Stamp) -> Vec<Encoded> {
    let wire = batch.wire(|frames| frames.iter().filter_map(T::of).map(T::share).collect());
    batch
        .frames()
        .iter()
        .filter_map(T::of)
        .zip(wire)
        .map(|(message, shared)| message.stamp(shared, stamp))
        .collect()
}

macro_rules! plain_message {
    ($ty:ty, $variant:ident) => {
        impl Message for $ty {
            fn of(frame: &Frame) -> Option<&Self> {
                match frame {
                    Frame::$variant(message) => Some(message),
                    _ => None,
                }
            }
        }
    };
}

macro_rules! sequenced_message {
    ($ty:ty, $variant:ident, $field:expr) => {
        impl Message for $ty {
            fn of(frame: &Frame) -> Option<&Self> {
                match frame {
                    Frame::$variant(message) => Some(message),
                    _ => None,
                }
            }

            fn share(&self) -> Shared {
                let mut unstamped = self.clone();
                unstamped.sequence = 0;
                Shared::Sequenced {
                    body: Bytes::from(unstamped.encode_to_vec()),
                    field: $field,
                }
            }

            fn stamp(&self, shared: &Shared, stamp: &mut Stamp) -> Encoded {
                stamp.sequence += 1;
                sequence_tail(shared, stamp.sequence)
            }
        }
    };
}

/// `shared` with `sequence` appended.
fn sequence_tail(shared: &Shared, sequence: u64) -> Encoded {
    match shared {
        Shared::Sequenced { body, field } => {
            let mut tail = Vec::with_capacity(11);
            put_varint_field(&mut tail, *field, sequence);
            Encoded::with_tail(body.clone(), Bytes::from(tail))
        }
        Shared::Plain(bytes) => Encoded::new(bytes.clone()),
        Shared::L2Diff { head, .. } => Encoded::new(head.clone()),
    }
}

plain_message!(pb::BboUpdate, Bbo);
plain_message!(pb::L2BookUpdate, L2Book);
plain_message!(pb::L4BookUpdate, L4Book);
plain_message!(pb::TradesUpdate, Trades);
plain_message!(pb::AllMidsUpdate, Mids);
plain_message!(pb::CandleUpdate, Candle);
// Field numbers of `sequence` in market_streaming.proto.
sequenced_message!(pb::L4OrderUpdate, L4Updates, 5);
sequenced_message!(pb::TpslUpdate, Tpsl, 5);
sequenced_message!(pb::FillsUpdate, Fills, 4);

/// Field numbers in market_streaming.proto.
const L2_DIFFS: u32 = 3;
const L2_SEQ: u32 = 2;
const L2_PREV_SEQ: u32 = 3;

impl Message for pb::L2BookDiffUpdate {
    fn of(frame: &Frame) -> Option<&Self> {
        match frame {
            Frame::L2Diff(message) => Some(message),
            _ => None,
        }
    }

    fn share(&self) -> Shared {
        let head = pb::L2BookDiffUpdate {
            time: self.time,
            block_number: self.block_number,
            diffs: Vec::new(),
        };
        let entries = self
            .diffs
            .iter()
            .map(|diff| {
                let mut unstamped = diff.clone();
                unstamped.seq = 0;
                unstamped.prev_seq = 0;
                Bytes::from(unstamped.encode_to_vec())
            })
            .collect();
        Shared::L2Diff {
            head: Bytes::from(head.encode_to_vec()),
            entries,
        }
    }

    fn stamp(&self, shared: &Shared, stamp: &mut Stamp) -> Encoded {
        let Shared::L2Diff { head, entries } = shared else {
            return Encoded::of(self);
        };
        let mut parts = Vec::with_capacity(1 + 2 * entries.len());
        parts.push(head.clone());
        for (diff, body) in self.diffs.iter().zip(entries) {
            let last = stamp.seqs.entry(diff.coin.clone()).or_insert(0);
            let prev_seq = if diff.snapshot { 0 } else { *last };
            *last += 1;
            let mut numbers = Vec::with_capacity(22);
            put_varint_field(&mut numbers, L2_SEQ, *last);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(coin: &str, snapshot: bool) -> pb::L2CoinDiff {
        pb::L2CoinDiff {
            coin: coin.into(),
            snapshot,
            bids: vec![pb::L2Level {
                px: "1.0".into(),
                sz: "2.0".into(),
                n: 1,
            }],
            ..pb::L2CoinDiff::default()
        }
    }

    #[test]
    fn one_shared_encoding_gives_each_subscriber_its_own_numbers() {
        let frames = vec![
            Frame::Fills(pb::FillsUpdate {
                block_number: 5,
                ..pb::FillsUpdate::default()
            }),
            Frame::Fills(pb::FillsUpdate {
                block_number: 6,
                ..pb::FillsUpdate::default()
            }),
        ];
        let batch = Batch::new(frames);
        let (mut early, mut late) = (Stamp::default(), Stamp::default());
        late.sequence = 40;
        let a = stamped::<pb::FillsUpdate>(&batch, &mut early);
        let b = stamped::<pb::FillsUpdate>(&batch, &mut late);
        let decode = |e: &Encoded| e.decode::<pb::FillsUpdate>().unwrap();
        assert_eq!(
            a.iter()
                .map(|e| (decode(e).block_number, decode(e).sequence))
                .collect::<Vec<_>>(),
            [(5, 1), (6, 2)]
        );
        assert_eq!(
            b.iter().map(|e| decode(e).sequence).collect::<Vec<_>>(),
            [41, 42]
        );
    }

    #[test]
    fn l2_diff_entries_are_numbered_per_coin_per_subscriber() {
        let opening = Batch::new(vec![Frame::L2Diff(pb::L2BookDiffUpdate {
            time: 1,
            block_number: 10,
            diffs: vec![diff("BTC", true), diff("ETH", true)],
        })]);
        let next = Batch::new(vec![Frame::L2Diff(pb::L2BookDiffUpdate {
            time: 2,
            block_number: 11,
            diffs: vec![diff("ETH", false)],
        })]);
        let mut stamp = Stamp::default();
        let first: pb::L2BookDiffUpdate = stamped::<pb::L2BookDiffUpdate>(&opening, &mut stamp)[0]
            .decode()
            .unwrap();
        let second: pb::L2BookDiffUpdate = stamped::<pb::L2BookDiffUpdate>(&next, &mut stamp)[0]
            .decode()
            .unwrap();
        let numbers = |u: &pb::L2BookDiffUpdate| {
            u.diffs
                .iter()
                .map(|d| (d.coin.clone(), d.seq, d.prev_seq, d.snapshot, d.bids.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            numbers(&first),
            [("BTC".into(), 1, 0, true, 1), ("ETH".into(), 1, 0, true, 1)]
        );
        assert_eq!(numbers(&second), [("ETH".into(), 2, 1, false, 1)]);
        assert_eq!((second.time, second.block_number), (2, 11));
    }

    #[test]
    fn plain_frames_are_sent_as_encoded_once() {
        let batch = Batch::new(vec![Frame::Bbo(pb::BboUpdate {
            coin: "BTC".into(),
            ..pb::BboUpdate::default()
        })]);
        let a = stamped::<pb::BboUpdate>(&batch, &mut Stamp::default());
        let b = stamped::<pb::BboUpdate>(&batch, &mut Stamp::default());
        // The same buffer, shared, not two encodings.
        assert_eq!(a[0].to_bytes().as_ptr(), b[0].to_bytes().as_ptr());
        assert_eq!(a[0].decode::<pb::BboUpdate>().unwrap().coin, "BTC");
    }
}
