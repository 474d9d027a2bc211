//! Engine frames to their protobuf messages, field for field: prices and
//! sizes keep the node's exact text, block numbers become `int64`.

use engine::book::l2::L2Level;
use engine::views::{bbo, candles, fills, l2book, l2diff, l4book, l4updates, mids, tpsl, trades};
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

/// `BboUpdate`.
pub fn bbo(frame: &bbo::BboUpdate) -> pb::BboUpdate {
    pb::BboUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: block(frame.block_number),
        bid: frame.bid.as_ref().map(level),
        ask: frame.ask.as_ref().map(level),
    }
}

/// `L2BookUpdate`.
pub fn l2book(frame: &l2book::L2BookUpdate) -> pb::L2BookUpdate {
    pb::L2BookUpdate {
        coin: frame.coin.clone(),
        time: frame.time,
        block_number: block(frame.block_number),
        bids: levels(&frame.bids),
        asks: levels(&frame.asks),
    }
}

/// `L2BookDiffUpdate`.
pub fn l2diff(frame: &l2diff::L2BookDiffUpdate) -> pb::L2BookDiffUpdate {
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
pub fn l4book(frame: &l4book::L4BookUpdate) -> pb::L4BookUpdate {
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
pub fn l4updates(frame: &l4updates::L4OrderUpdate) -> pb::L4OrderUpdate {
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
pub fn tpsl(frame: &tpsl::TpslUpdate) -> pb::TpslUpdate {
    pb::TpslUpdate {
        time: frame.time,
        block_number: block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::TpslOrderDiff {
                diff_type: match diff.diff_type {
                    tpsl::TpslDiffType::Add => pb::TpslDiffType::Add,
                    tpsl::TpslDiffType::Remove => pb::TpslDiffType::Remove,
                    tpsl::TpslDiffType::Update => pb::TpslDiffType::Update,
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
pub fn trades(frame: &trades::TradesUpdate) -> pb::TradesUpdate {
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
pub fn fills(frame: &fills::FillsUpdate) -> pb::FillsUpdate {
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
pub fn mids(frame: &mids::AllMidsUpdate) -> pb::AllMidsUpdate {
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
pub fn candle(frame: &candles::CandleUpdate) -> pb::CandleUpdate {
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
