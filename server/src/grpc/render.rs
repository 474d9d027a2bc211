//! The gRPC edge's rendering of frames: engine frames to their protobuf
//! messages, field for field (prices and sizes keep the node's exact text,
//! block numbers become `int64`), encoded once per frame and shared by every
//! subscriber, each subscriber's numbering stamped as extra wire fields:
//!
//! - L4 order updates, TP/SL and the fills family carry `sequence`: the
//!   shared body is encoded with `sequence` unset and the subscriber's value
//!   is appended as a trailing field;
//! - L2 diffs carry `seq` / `prev_seq` per coin entry: each entry's body is
//!   encoded once with both unset, and each subscriber's copy of the entry is
//!   the entry's key and new length, its two numbers, then the shared body.
//!
//! Protobuf decoders accept fields in any order, so a client decodes exactly
//! the message of the `.proto`. The numbers come from the engine's
//! [`Numbering`], as for every other consumer of frames.

use bytes::Bytes;
use engine::book::l2::L2Level;
use engine::market::tpsl::TpslDiffType;
use engine::market::{candles, trades};
use engine::views::registry::{Batch, Frame, Rendering};
use engine::views::{Numbering, Numbers};
use engine::views::{bbo, fills, l2book, l2diff, l4book, l4updates, mids, statuses, tpsl};
use prost::Message as _;
use proto::encoded::{Encoded, put_len_prefix, put_varint_field};
use proto::v3 as pb;

fn block(number: u64) -> i64 {
    i64::try_from(number).unwrap_or(i64::MAX)
}

fn level(level: &L2Level) -> pb::L2Level {
    pb::L2Level {
        px: level.px.to_string(),
        sz: level.sz.to_string(),
        n: level.n,
    }
}

fn levels(levels: &[L2Level]) -> Vec<pb::L2Level> {
    levels.iter().map(level).collect()
}

/// `OrderStatusesUpdate`.
fn statuses(frame: &statuses::OrderStatusesUpdate) -> pb::OrderStatusesUpdate {
    pb::OrderStatusesUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        statuses: frame
            .statuses
            .iter()
            .map(|status| status.as_bytes().to_vec())
            .collect(),
        sequence: 0,
    }
}

/// `BboUpdate`.
fn bbo(frame: &bbo::BboUpdate) -> pb::BboUpdate {
    pb::BboUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: block(frame.block_number),
        bid: frame.bid.as_ref().map(level),
        ask: frame.ask.as_ref().map(level),
    }
}

/// `L2BookUpdate`.
fn l2book(frame: &l2book::L2BookUpdate) -> pb::L2BookUpdate {
    pb::L2BookUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: block(frame.block_number),
        bids: levels(&frame.bids),
        asks: levels(&frame.asks),
    }
}

/// `L2BookDiffUpdate`.
fn l2diff(frame: &l2diff::L2BookDiffUpdate) -> pb::L2BookDiffUpdate {
    pb::L2BookDiffUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::L2CoinDiff {
                coin: diff.coin.clone(),
                seq: diff.seq,
                prev_seq: diff.prev_seq,
                bids: levels(&diff.bids),
                asks: levels(&diff.asks),
                snapshot: diff.snapshot,
            })
            .collect(),
    }
}

fn l4order(order: &l4book::L4Order) -> pb::L4Order {
    pb::L4Order {
        user: order.user.clone(),
        coin: order.coin.clone(),
        side: order.side.as_str().to_owned(),
        limit_px: order.limit_px.to_string(),
        sz: order.sz.to_string(),
        oid: order.oid,
        timestamp: order.timestamp,
        trigger_condition: order.trigger_condition.clone(),
        is_trigger: order.is_trigger,
        trigger_px: order.trigger_px.to_string(),
        is_position_tpsl: order.is_position_tpsl,
        reduce_only: order.reduce_only,
        order_type: order.order_type.clone(),
        tif: order.tif.clone(),
        cloid: order.cloid.clone(),
        synthetic: order.synthetic,
    }
}

/// `L4BookUpdate`.
fn l4book(frame: &l4book::L4BookUpdate) -> pb::L4BookUpdate {
    let update = match frame {
        l4book::L4BookUpdate::Snapshot(snapshot) => {
            pb::l4_book_update::Update::Snapshot(pb::L4BookSnapshot {
                coin: snapshot.coin.clone(),
                time: snapshot.time,
                block_number: block(snapshot.block_number),
                bids: snapshot.bids.iter().map(l4order).collect(),
                asks: snapshot.asks.iter().map(l4order).collect(),
            })
        }
        l4book::L4BookUpdate::Diff(diff) => pb::l4_book_update::Update::Diff(pb::L4BookDiff {
            time: diff.time,
            block_number: block(diff.block_number),
            data: diff.data.as_bytes().to_vec().into(),
        }),
    };
    pb::L4BookUpdate {
        update: Some(update),
    }
}

/// `L4OrderUpdate`.
fn l4updates(frame: &l4updates::L4OrderUpdate) -> pb::L4OrderUpdate {
    pb::L4OrderUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::L4OrderDiff {
                diff_type: match diff.diff_type {
                    l4updates::L4OrderDiffType::New => pb::L4OrderDiffType::New,
                    l4updates::L4OrderDiffType::Update => pb::L4OrderDiffType::Update,
                    l4updates::L4OrderDiffType::Remove => pb::L4OrderDiffType::Remove,
                } as i32,
                coin: diff.coin.clone(),
                oid: diff.oid,
                user: diff.user.clone(),
                side: diff.side.as_str().to_owned(),
                px: diff.px.to_string(),
                sz: diff.sz.to_string(),
            })
            .collect(),
        snapshot: frame.snapshot,
        sequence: frame.sequence,
    }
}

/// `TpslUpdate`.
fn tpsl(frame: &tpsl::TpslUpdate) -> pb::TpslUpdate {
    pb::TpslUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::TpslOrderDiff {
                diff_type: match diff.diff_type {
                    TpslDiffType::Add => pb::TpslDiffType::Add,
                    TpslDiffType::Remove => pb::TpslDiffType::Remove,
                    TpslDiffType::Update => pb::TpslDiffType::Update,
                } as i32,
                oid: diff.oid,
                coin: diff.coin.clone(),
                user: diff.user.clone(),
                side: diff.side.as_str().to_owned(),
                trigger_px: diff.trigger_px.to_string(),
                limit_px: diff.limit_px.to_string(),
                sz: diff.sz.to_string(),
                trigger_condition: diff.trigger_condition.clone(),
                order_type: diff.order_type.clone(),
                is_position_tpsl: diff.is_position_tpsl,
                reduce_only: diff.reduce_only,
                timestamp: diff.timestamp,
                reason: diff.reason.clone(),
                orig_sz: diff.orig_sz.to_string(),
                cloid: diff.cloid.clone(),
            })
            .collect(),
        snapshot: frame.snapshot,
        sequence: frame.sequence,
    }
}

/// `TradesUpdate`.
fn trades(frame: &trades::TradesUpdate) -> pb::TradesUpdate {
    pb::TradesUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: block(frame.block_number),
        trades: frame
            .trades
            .iter()
            .map(|trade| pb::Trade {
                coin: trade.coin.clone(),
                side: trade.side.as_str().to_owned(),
                px: trade.px.to_string(),
                sz: trade.sz.to_string(),
                time: trade.time,
                hash: trade.hash.clone(),
                tid: trade.tid,
                users: trade.users.to_vec(),
            })
            .collect(),
    }
}

/// `FillsUpdate`.
fn fills(frame: &fills::FillsUpdate) -> pb::FillsUpdate {
    pb::FillsUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        fills: frame
            .fills
            .iter()
            .map(|fill| pb::Fill {
                user: fill.user.clone(),
                coin: fill.coin.clone(),
                px: fill.px.to_string(),
                sz: fill.sz.to_string(),
                side: fill.side.as_str().to_owned(),
                time: fill.time,
                start_position: fill.start_position.to_string(),
                dir: fill.dir.clone(),
                closed_pnl: fill.closed_pnl.to_string(),
                hash: fill.hash.clone(),
                oid: fill.oid,
                crossed: fill.crossed,
                fee: fill.fee.to_string(),
                tid: fill.tid,
                fee_token: fill.fee_token.clone(),
                cloid: fill.cloid.clone(),
                twap_id: fill.twap_id,
                builder: fill.builder.clone(),
                builder_fee: fill.builder_fee.map(|x| x.to_string()),
                deployer_fee: fill.deployer_fee.map(|x| x.to_string()),
                priority_gas: fill.priority_gas.map(|x| x.to_string()),
                liquidation: fill.liquidation.as_ref().map(|l| pb::Liquidation {
                    liquidated_user: l.liquidated_user.clone(),
                    mark_px: l.mark_px.to_string(),
                    method: l.method.clone(),
                }),
            })
            .collect(),
        sequence: frame.sequence,
    }
}

/// `AllMidsUpdate` (the block time is when the mids became available).
fn mids(frame: &mids::AllMidsUpdate) -> pb::AllMidsUpdate {
    pb::AllMidsUpdate {
        time: frame.time,
        mids: frame
            .mids
            .iter()
            .map(|(coin, px)| (coin.clone(), px.to_string()))
            .collect(),
    }
}

/// `CandleUpdate`.
fn candle(frame: &candles::CandleUpdate) -> pb::CandleUpdate {
    pb::CandleUpdate {
        coin: frame.coin.clone(),
        interval: frame.interval.as_str().to_owned(),
        open_time: frame.open_time,
        close_time: frame.close_time,
        open: frame.open.to_string(),
        high: frame.high.to_string(),
        low: frame.low.to_string(),
        close: frame.close.to_string(),
        volume: frame.volume.to_string(),
        trades_count: frame.trades_count,
        vwap: frame.vwap.to_string(),
        block_number: block(frame.block_number),
        time: frame.time,
        closed: frame.closed,
    }
}

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

/// Field numbers of `sequence` in market_streaming.proto.
const L4_UPDATES_SEQUENCE: u32 = 5;
const TPSL_SEQUENCE: u32 = 5;
const FILLS_SEQUENCE: u32 = 4;
const STATUSES_SEQUENCE: u32 = 4;
/// Field numbers of the L2 diff in market_streaming.proto.
const L2_DIFFS: u32 = 3;
const L2_SEQ: u32 = 2;
const L2_PREV_SEQ: u32 = 3;

fn plain(message: &impl prost::Message) -> Shared {
    Shared::Plain(Bytes::from(message.encode_to_vec()))
}

fn sequenced(message: &impl prost::Message, field: u32) -> Shared {
    Shared::Sequenced {
        body: Bytes::from(message.encode_to_vec()),
        field,
    }
}

/// `frame` as protobuf, with no per-subscriber numbers.
pub fn share(frame: &Frame) -> Shared {
    match frame {
        Frame::Bbo(frame) => plain(&bbo(frame)),
        Frame::L2Book(frame) => plain(&l2book(frame)),
        Frame::L4Book(frame) => plain(&l4book(frame)),
        Frame::Trades(frame) => plain(&trades(frame)),
        Frame::Mids(frame) => plain(&mids(frame)),
        Frame::Candles(frame) => plain(&candle(frame)),
        Frame::L4Updates(frame) => sequenced(&l4updates(frame), L4_UPDATES_SEQUENCE),
        Frame::Tpsl(frame) => sequenced(&tpsl(frame), TPSL_SEQUENCE),
        Frame::Fills(frame) => sequenced(&fills(frame), FILLS_SEQUENCE),
        Frame::Statuses(frame) => sequenced(&statuses(frame), STATUSES_SEQUENCE),
        Frame::L2Diff(frame) => {
            let message = l2diff(frame);
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
}

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

/// A batch's frames as protobuf, made once per batch (by its first
/// subscriber) and shared.
#[derive(Debug)]
pub struct Protobuf(Vec<Shared>);

impl Rendering for Protobuf {
    const SLOT: usize = 0;

    fn render(batch: &Batch) -> Self {
        Protobuf(batch.frames().iter().map(share).collect())
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
            .map(|frame| stamp(&share(frame), &frame.numbers(numbering)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::market::Position;
    use engine::num::{Px, Sz};

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
