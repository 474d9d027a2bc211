//! The aggregated book: `StreamL2Book`, its `L2BookUpdate`, and the
//! `l2Book` channel.

use engine::book::l2::{L2Error, L2Params};
use engine::views::l2book::{L2BookKey, L2BookSubscription, L2BookUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType, uint};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening};

impl Served for L2BookSubscription {
    const WS: &'static [WsType] = &[WsType {
        name: "l2Book",
        parse: subscription,
        opening: None,
    }];

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
        (on.name() == "l2Book").then(|| {
            json!({
                "coin": frame.coin,
                "time": frame.time,
                "levels": [channel::levels(&frame.bids), channel::levels(&frame.asks)],
            })
        })
    }
}

/// `{"type":"l2Book","coin","nSigFigs"?,"mantissa"?,"nLevels"?}`: the view's
/// own rules, in the exchange's field names; `nLevels` (the node servers'
/// extension) 1 to 100, 20 when absent.
fn subscription(fields: &serde_json::Map<String, Value>) -> Result<Parsed, String> {
    let n_sig_figs = uint(fields, "nSigFigs")?;
    let mantissa = uint(fields, "mantissa")?;
    let n_levels = uint(fields, "nLevels")?;
    let figs = n_sig_figs.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    L2Params::new(None, figs, mantissa).map_err(|error| match error {
        L2Error::SigFigs(figs) => format!("nSigFigs: must be 2, 3, 4, 5 or null, got {figs}"),
        L2Error::Mantissa { mantissa } => {
            format!("mantissa: must be 1, 2 or 5 and needs nSigFigs 5, got {mantissa}")
        }
        other @ L2Error::SizeOverflow { .. } => other.to_string(),
    })?;
    let n_levels = match n_levels {
        Some(levels @ 1..=100) => Some(levels as u32),
        Some(levels) => return Err(format!("nLevels: must be 1 to 100, got {levels}")),
        None => None,
    };
    Ok(Parsed::of(Key::L2Book(L2BookKey {
        coin: channel::string(fields, "coin")?,
        n_levels,
        n_sig_figs: figs,
        mantissa,
        strict: false,
    })))
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
