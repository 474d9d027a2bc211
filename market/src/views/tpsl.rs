//! TP/SL trigger orders: `StreamTpslUpdates` and its `TpslUpdate`, numbered
//! per subscriber. No WebSocket channel sends them.

use engine::market::tpsl::TpslDiffType;
use engine::views::registry::Key;
use engine::views::tpsl::{TpslKey, TpslSubscription, TpslUpdate};
use proto::v3 as pb;
use serde_json::Value;
use tonic::Status;

use crate::views::Served;
use crate::views::channel::Channel;
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, addresses, coins};

/// The field number of `sequence` in `TpslUpdate` (market_streaming.proto).
const SEQUENCE: u32 = 5;

impl Served for TpslSubscription {
    fn protobuf(frame: &TpslUpdate) -> Shared {
        Shared::sequenced(&message(frame), SEQUENCE)
    }

    fn ws_data(_: &TpslUpdate, _: Channel) -> Option<Value> {
        None
    }
}

impl MarketRequest for pb::TpslUpdatesRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::Tpsl(TpslKey {
            coins: coins("coins", &self.coins)?,
            users: addresses("users", &self.users)?,
        })))
    }
}

fn message(frame: &TpslUpdate) -> pb::TpslUpdate {
    pb::TpslUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
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
