//! Order changes: `StreamL4OrderUpdates` and its `L4OrderUpdate`, numbered
//! per subscriber. No WebSocket channel sends them.

use engine::views::l4updates::{
    L4OrderDiffType, L4OrderUpdate, L4UpdatesKey, L4UpdatesSubscription,
};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::Value;
use tonic::Status;

use crate::views::Served;
use crate::views::channel::Channel;
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, addresses, coins};

/// The field number of `sequence` in `L4OrderUpdate` (market_streaming.proto).
const SEQUENCE: u32 = 5;

impl Served for L4UpdatesSubscription {
    fn protobuf(frame: &L4OrderUpdate) -> Shared {
        Shared::sequenced(&message(frame), SEQUENCE)
    }

    fn ws_data(_: &L4OrderUpdate, _: Channel) -> Option<Value> {
        None
    }
}

impl MarketRequest for pb::L4OrderUpdatesRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::L4Updates(L4UpdatesKey {
            coins: coins("coins", &self.coins)?,
            users: addresses("users", &self.users)?,
        })))
    }
}

fn message(frame: &L4OrderUpdate) -> pb::L4OrderUpdate {
    pb::L4OrderUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::L4OrderDiff {
                diff_type: match diff.diff_type {
                    L4OrderDiffType::New => pb::L4OrderDiffType::New,
                    L4OrderDiffType::Update => pb::L4OrderDiffType::Update,
                    L4OrderDiffType::Remove => pb::L4OrderDiffType::Remove,
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
