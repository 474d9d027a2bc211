//! The exchange's WebSocket channels that views are sent on, and the message
//! every one of them is: `{"channel":…,"data":…}`.

use axum::extract::ws::Utf8Bytes;
use engine::book::l2::L2Level;
use serde_json::{Value, json};

/// The exchange's WebSocket channels that frames of views are rendered
/// for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `l2Book`.
    L2Book,
    /// `bbo`.
    Bbo,
    /// `trades`.
    Trades,
    /// `candle`.
    Candle,
    /// `allMids`.
    AllMids,
    /// `userFills`.
    UserFills,
    /// `userEvents` (fills).
    UserEvents,
    /// `userTwapSliceFills`.
    UserTwapSliceFills,
    /// `orderUpdates`.
    OrderUpdates,
    /// `l4Book`.
    L4Book,
    /// `openOrders`.
    OpenOrders,
}

/// How many channels there are.
pub const CHANNELS: usize = 11;

impl Channel {
    /// The channel's place among [`CHANNELS`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The channel name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Channel::L2Book => "l2Book",
            Channel::Bbo => "bbo",
            Channel::Trades => "trades",
            Channel::Candle => "candle",
            Channel::AllMids => "allMids",
            Channel::UserFills => "userFills",
            Channel::UserEvents => "userEvents",
            Channel::UserTwapSliceFills => "userTwapSliceFills",
            Channel::OrderUpdates => "orderUpdates",
            Channel::L4Book => "l4Book",
            Channel::OpenOrders => "openOrders",
        }
    }
}

/// `{"channel":…,"data":…}` as text.
pub fn message(channel: &str, data: &Value) -> Utf8Bytes {
    Utf8Bytes::from(json!({ "channel": channel, "data": data }).to_string())
}

/// An aggregated level as the exchange's `WsLevel`.
pub fn level(level: &L2Level) -> Value {
    json!({ "px": level.px.to_string(), "sz": level.sz.to_string(), "n": level.n })
}

/// Aggregated levels, in order.
pub fn levels(levels: &[L2Level]) -> Vec<Value> {
    levels.iter().map(level).collect()
}
