//! The fills family: `StreamAllFills`, `StreamUserFills`,
//! `StreamBuilderFills` and `StreamLiquidationFills`, their `FillsUpdate`
//! (numbered per subscriber), and the exchange's `userFills`, `userEvents`
//! and `userTwapSliceFills` channels.

use std::collections::BTreeSet;

use engine::market::fills::Fill;
use engine::views::fills::{FillsFilter, FillsKey, FillsSubscription, FillsUpdate};
use engine::views::registry::Key;
use proto::v3 as pb;
use serde_json::{Value, json};
use tonic::Status;

use crate::views::Served;
use crate::views::channel::{self, Channel, Parsed, WsType};
use crate::views::protobuf::{self, Shared};
use crate::views::request::{MarketRequest, Opening, address, addresses, coins};

/// The field number of `sequence` in `FillsUpdate` (market_streaming.proto).
const SEQUENCE: u32 = 4;

impl Served for FillsSubscription {
    /// One account's fills, three ways. The fills channels open with an
    /// empty snapshot: l1gate keeps no fill history.
    const WS: &'static [WsType] = &[
        WsType {
            name: "userFills",
            parse: |fields| {
                // Accepted; fills are sent as the node wrote them.
                let aggregate = channel::flag(fields, "aggregateByTime")?;
                let user = channel::user(fields)?;
                Ok(Parsed {
                    variant: u8::from(aggregate),
                    ..Parsed::user(user_fills(&user), user)
                })
            },
            opening: Some(|user| json!({ "user": user, "fills": [], "isSnapshot": true })),
        },
        WsType {
            name: "userEvents",
            parse: |fields| {
                let user = channel::user(fields)?;
                Ok(Parsed::user(user_fills(&user), user))
            },
            opening: None,
        },
        WsType {
            name: "userTwapSliceFills",
            parse: |fields| {
                let user = channel::user(fields)?;
                Ok(Parsed::user(user_fills(&user), user))
            },
            opening: Some(|user| json!({ "user": user, "twapSliceFills": [], "isSnapshot": true })),
        },
    ];

    fn protobuf(frame: &FillsUpdate) -> Shared {
        Shared::sequenced(&message(frame), SEQUENCE)
    }

    /// Live messages say they are not the snapshot the channel opened with.
    fn ws_data(update: &FillsUpdate, on: Channel) -> Option<Value> {
        Some(match on.name() {
            "userFills" => json!({
                "user": update.fills.first()?.user,
                "fills": update.fills.iter().map(fill).collect::<Vec<_>>(),
                "isSnapshot": false,
            }),
            "userEvents" => json!({
                "fills": update.fills.iter().map(fill).collect::<Vec<_>>(),
            }),
            "userTwapSliceFills" => {
                let slices: Vec<Value> = update
                    .fills
                    .iter()
                    .filter_map(|f| Some(json!({ "fill": fill(f), "twapId": f.twap_id? })))
                    .collect();
                if slices.is_empty() {
                    return None;
                }
                json!({
                    "user": update.fills.first()?.user,
                    "twapSliceFills": slices,
                    "isSnapshot": false,
                })
            }
            _ => return None,
        })
    }
}

/// The key of one account's fills, every coin.
fn user_fills(user: &str) -> Key {
    Key::Fills(FillsKey {
        filter: FillsFilter::User(user.to_owned()),
        coins: BTreeSet::new(),
    })
}

/// A fills key of `filter` within the scope `coins`.
fn key(filter: FillsFilter, coins: BTreeSet<String>) -> Opening {
    Opening::View(Key::Fills(FillsKey { filter, coins }))
}

impl MarketRequest for pb::AllFillsRequest {
    fn opening(self) -> Result<Opening, Status> {
        Ok(key(FillsFilter::All, coins("coins", &self.coins)?))
    }
}

impl MarketRequest for pb::UserFillsRequest {
    fn opening(self) -> Result<Opening, Status> {
        let user = address("user", &self.user)?;
        Ok(key(FillsFilter::User(user), coins("coins", &self.coins)?))
    }
}

impl MarketRequest for pb::BuilderFillsRequest {
    fn opening(self) -> Result<Opening, Status> {
        let builder = address("builder", &self.builder)?;
        Ok(key(
            FillsFilter::Builder(builder),
            coins("coins", &self.coins)?,
        ))
    }
}

impl MarketRequest for pb::LiquidationFillsRequest {
    fn opening(self) -> Result<Opening, Status> {
        let scope = coins("coins", &self.coins)?;
        let liquidated = addresses("liquidated_users", &self.liquidated_users)?;
        Ok(key(FillsFilter::Liquidations(liquidated), scope))
    }
}

fn message(frame: &FillsUpdate) -> pb::FillsUpdate {
    pb::FillsUpdate {
        time: frame.time,
        block_number: protobuf::block(frame.block_number),
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

/// A fill as the exchange's `WsFill`: the node's fill without its user.
pub fn fill(fill: &Fill) -> Value {
    let mut out = json!({
        "coin": fill.coin,
        "px": fill.px.to_string(),
        "sz": fill.sz.to_string(),
        "side": fill.side.as_str(),
        "time": fill.time,
        "startPosition": fill.start_position.to_string(),
        "dir": fill.dir,
        "closedPnl": fill.closed_pnl.to_string(),
        "hash": fill.hash,
        "oid": fill.oid,
        "crossed": fill.crossed,
        "fee": fill.fee.to_string(),
        "tid": fill.tid,
        "feeToken": fill.fee_token,
        "twapId": fill.twap_id,
    });
    if let Some(cloid) = &fill.cloid {
        out["cloid"] = cloid.clone().into();
    }
    if let Some(fee) = &fill.builder_fee {
        out["builderFee"] = fee.to_string().into();
    }
    if let Some(liquidation) = &fill.liquidation {
        let mut object = json!({
            "markPx": liquidation.mark_px.to_string(),
            "method": liquidation.method,
        });
        if let Some(user) = &liquidation.liquidated_user {
            object["liquidatedUser"] = user.clone().into();
        }
        out["liquidation"] = object;
    }
    out
}
