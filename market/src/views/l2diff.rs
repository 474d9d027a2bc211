//! The aggregated book's diffs: `StreamL2BookDiff` and its
//! `L2BookDiffUpdate`, whose coin entries carry each subscriber's `seq` /
//! `prev_seq`. No WebSocket channel sends them.

use engine::views::l2diff::{L2BookDiffUpdate, L2DiffKey, L2DiffSubscription};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::Value;
use tonic::Status;

use crate::views::Served;
use crate::views::channel::Channel;
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, coins};

impl Served for L2DiffSubscription {
    fn protobuf(frame: &L2BookDiffUpdate) -> Shared {
        Shared::l2_diff(&message(frame))
    }

    fn ws_data(_: &L2BookDiffUpdate, _: Channel) -> Option<Value> {
        None
    }
}

fn message(frame: &L2BookDiffUpdate) -> pb::L2BookDiffUpdate {
    pb::L2BookDiffUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
        diffs: frame
            .diffs
            .iter()
            .map(|diff| pb::L2CoinDiff {
                coin: diff.coin.clone(),
                seq: diff.seq,
                prev_seq: diff.prev_seq,
                bids: protobuf::levels(&diff.bids),
                asks: protobuf::levels(&diff.asks),
                snapshot: diff.snapshot,
            })
            .collect(),
    }
}

impl MarketRequest for pb::L2BookDiffRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::L2Diff(L2DiffKey {
            coins: coins("coins", &self.coins)?,
            n_levels: self.n_levels,
            n_sig_figs: self.n_sig_figs,
            mantissa: self.mantissa,
        })))
    }
}
