//! Mids: `StreamAllMids` and its `AllMidsUpdate` (from the Info source when
//! the server has one, else the books' mids of the default exchange's
//! perps), and the exchange's `allMids` channel.

use std::collections::BTreeSet;

use engine::views::mids::{AllMidsUpdate, MidsKey, MidsSubscription};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::Shared;
use crate::views::request::{MarketRequest, Opening};

impl Served for MidsSubscription {
    /// `dex` absent, `null` or empty: the default exchange.
    const WS: &'static [WsType] = &[WsType {
        name: "allMids",
        parse: |fields| {
            Ok(Parsed::of(Key::Mids(MidsKey {
                coins: BTreeSet::new(),
                perps_only: false,
                dex: Some(channel::optional_string(fields, "dex")?),
            })))
        },
        opening: None,
    }];

    /// The block time is when the mids became available.
    fn protobuf(frame: &AllMidsUpdate) -> Shared {
        Shared::plain(&pb::AllMidsUpdate {
            time: frame.time,
            mids: frame
                .mids
                .iter()
                .map(|(coin, px)| (coin.clone(), px.to_string()))
                .collect(),
        })
    }

    fn ws_data(frame: &AllMidsUpdate, on: Channel) -> Option<Value> {
        (on.name() == "allMids").then(|| {
            let mids: serde_json::Map<String, Value> = frame
                .mids
                .iter()
                .map(|(coin, px)| (coin.clone(), Value::String(px.to_string())))
                .collect();
            json!({ "mids": mids })
        })
    }
}

impl MarketRequest for pb::AllMidsRequest {
    fn opening(self) -> Result<Opening, Status> {
        // Without an Info source: book mids of the default exchange's perps.
        Ok(Opening::Mids(Key::Mids(MidsKey {
            coins: BTreeSet::new(),
            perps_only: true,
            dex: None,
        })))
    }
}
