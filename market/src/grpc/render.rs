//! The gRPC edge's rendering of a batch: each frame's protobuf (see
//! [`crate::views`]), encoded once per batch by its first subscriber and
//! shared by every other, with each subscriber's numbering stamped as extra
//! wire fields ([`crate::views::protobuf`]). The numbers come from the
//! engine's [`Numbering`], as for every other consumer of frames.

use engine::views::Numbering;
use engine::views::registry::{Batch, Rendering};
use proto::encoded::Encoded;

use crate::views::{
    self,
    protobuf::{Shared, stamp},
};

/// A batch's frames as protobuf, made once per batch (by its first
/// subscriber) and shared.
#[derive(Debug)]
pub struct Protobuf(Vec<Shared>);

impl Rendering for Protobuf {
    const SLOT: usize = 0;

    fn render(batch: &Batch) -> Self {
        Protobuf(batch.frames().iter().map(views::protobuf).collect())
    }
}

/// The frames of `batch` as one subscriber receives them.
pub fn encoded(batch: &Batch, numbering: &mut Numbering) -> Vec<Encoded> {
    let frames = batch.frames();
    match batch.rendered::<Protobuf>() {
        Some(Protobuf(shared)) => frames
            .iter()
            .zip(shared)
            .map(|(frame, shared)| stamp(shared, &frame.numbers(numbering)))
            .collect(),
        // Another rendering holds the slot: encode for this subscriber.
        None => frames
            .iter()
            .map(|frame| stamp(&views::protobuf(frame), &frame.numbers(numbering)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::book::l2::L2Level;
    use engine::market::Position;
    use engine::num::{Px, Sz};
    use engine::views::registry::Frame;
    use engine::views::{bbo, fills, l2diff};
    use proto::v3 as pb;

    fn level(px: &str, sz: &str) -> L2Level {
        L2Level {
            px: Px::parse(px).unwrap(),
            sz: Sz::parse(sz).unwrap(),
            n: 1,
        }
    }

    fn coin_diff(coin: &str, snapshot: bool) -> l2diff::L2CoinDiff {
        l2diff::L2CoinDiff {
            coin: coin.into(),
            seq: 0,
            prev_seq: 0,
            bids: vec![level("1.0", "2.0")],
            asks: Vec::new(),
            snapshot,
        }
    }

    fn fills_frame(block_number: u64) -> Frame {
        Frame::Fills(fills::FillsUpdate {
            time: 0,
            block_number,
            fills: Vec::new(),
            sequence: 0,
        })
    }

    #[test]
    fn one_shared_encoding_gives_each_subscriber_its_own_numbers() {
        let batch = Batch::new(Position::default(), vec![fills_frame(5), fills_frame(6)]);
        let (mut early, mut late) = (Numbering::default(), Numbering::default());
        for _ in 0..40 {
            late.next_sequence();
        }
        let decode = |e: &Encoded| e.decode::<pb::FillsUpdate>().unwrap();
        let a: Vec<(i64, u64)> = encoded(&batch, &mut early)
            .iter()
            .map(|e| (decode(e).block_number, decode(e).sequence))
            .collect();
        assert_eq!(a, [(5, 1), (6, 2)]);
        let b: Vec<u64> = encoded(&batch, &mut late)
            .iter()
            .map(|e| decode(e).sequence)
            .collect();
        assert_eq!(b, [41, 42]);
    }

    #[test]
    fn l2_diff_entries_are_numbered_per_coin_per_subscriber() {
        let diff = |block: u64, diffs| {
            Frame::L2Diff(l2diff::L2BookDiffUpdate {
                time: i64::try_from(block).unwrap(),
                block_number: block,
                diffs,
            })
        };
        let opening = Batch::new(
            Position::default(),
            vec![diff(
                10,
                vec![coin_diff("BTC", true), coin_diff("ETH", true)],
            )],
        );
        let next = Batch::new(
            Position::default(),
            vec![diff(11, vec![coin_diff("ETH", false)])],
        );
        let mut numbering = Numbering::default();
        let first: pb::L2BookDiffUpdate = encoded(&opening, &mut numbering)[0].decode().unwrap();
        let second: pb::L2BookDiffUpdate = encoded(&next, &mut numbering)[0].decode().unwrap();
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
        assert_eq!((second.time, second.block_number), (11, 11));
    }

    #[test]
    fn plain_frames_are_sent_as_encoded_once() {
        let batch = Batch::new(
            Position::default(),
            vec![Frame::Bbo(bbo::BboUpdate {
                coin: "BTC".into(),
                time: 0,
                block_number: 0,
                bid: None,
                ask: None,
            })],
        );
        let a = encoded(&batch, &mut Numbering::default());
        let b = encoded(&batch, &mut Numbering::default());
        // The same buffer, shared, not two encodings.
        assert_eq!(a[0].to_bytes().as_ptr(), b[0].to_bytes().as_ptr());
        assert_eq!(a[0].decode::<pb::BboUpdate>().unwrap().coin, "BTC");
    }
}
