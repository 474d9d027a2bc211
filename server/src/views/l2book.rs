//! The aggregated book: `StreamL2Book`, its `L2BookUpdate`, and the
//! `l2Book` channel.

use engine::views::l2book::{L2BookKey, L2BookSubscription, L2BookUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening};

impl Served for L2BookSubscription {
    fn protobuf(frame: &L2BookUpdate) -> Shared {
        Shared::plain(&pb::L2BookUpdate {
            coin: frame.coin.clone(),
            time: frame.time,
            block_number: protobuf::block(frame.block_number),
            bids: protobuf::levels(&frame.bids),
            asks: protobuf::levels(&frame.asks),
        })
    }

    fn ws_data(frame: &L2BookUpdate, on: Channel) -> Option<Value> {
        (on == Channel::L2Book).then(|| {
            json!({
                "coin": frame.coin,
                "time": frame.time,
                "levels": [channel::levels(&frame.bids), channel::levels(&frame.asks)],
            })
        })
    }
}

impl MarketRequest for pb::L2BookRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(Opening::View(Key::L2Book(L2BookKey {
            coin: crate::views::request::one_coin(&self.coin)?,
            n_levels: self.n_levels,
            n_sig_figs: self.n_sig_figs,
            mantissa: self.mantissa,
            strict: self.strict.unwrap_or(false),
        })))
    }
}
