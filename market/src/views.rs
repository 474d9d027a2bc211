//! Each view as the edges serve it, one file per view: the `MarketStreaming`
//! requests that open it (fields checked and normalised into the view's
//! key), its frame as its protobuf message (and where a subscriber's own
//! numbers go), and its messages on the exchange's WebSocket channels.
//!
//! A view is registered once, in the engine's
//! [`for_each_view!`](engine::for_each_view); the dispatch below is made
//! from that list, so a new view does not compile until its file here
//! implements [`Served`]. The gRPC service is made from the `.proto`'s list
//! of methods, so a new method does not compile until its request type
//! implements [`MarketRequest`](request::MarketRequest). The exchange's
//! WebSocket subscription types that read a view are listed in its file
//! too ([`Served::WS`]; most views have none): the WebSocket protocol finds
//! them by name.
//!
//! This folder sits below the edges: `grpc` and `ws` read it, it reads
//! neither.

pub mod channel;
pub mod protobuf;
pub mod request;

mod bbo;
mod candles;
mod fills;
mod l2book;
mod l2diff;
mod l4book;
mod l4updates;
mod mids;
mod open_orders;
mod statuses;
mod tpsl;
mod trades;

use axum::extract::ws::Utf8Bytes;
use engine::views::View;
use engine::views::registry::Frame;
use serde_json::Value;

use self::channel::{Channel, WsType};
use self::protobuf::Shared;

/// How the edges serve one view.
pub trait Served: View {
    /// The exchange's WebSocket subscription types that read this view,
    /// each sent on the channel of its name (at most
    /// [`channel::MAX_PER_VIEW`]; none for most views).
    const WS: &'static [WsType] = &[];

    /// The frame as its protobuf message, encoded once for every subscriber
    /// (see [`protobuf`]).
    fn protobuf(frame: &Self::Frame) -> Shared;

    /// The `data` of the frame's message on the WebSocket `channel`; `None`
    /// when the frame has nothing for that channel (or the view no channel
    /// at all).
    fn ws_data(frame: &Self::Frame, channel: Channel) -> Option<Value>;

    /// The frame's whole message on `channel`: [`Served::ws_data`] in the
    /// channel's envelope, unless the view writes the text itself.
    fn ws_text(frame: &Self::Frame, on: Channel) -> Option<Utf8Bytes> {
        Self::ws_data(frame, on).map(|data| channel::message(on.name(), &data))
    }
}

macro_rules! dispatch {
    ($($variant:ident => $view:ty),* $(,)?) => {
        /// `frame` as its protobuf message, with no per-subscriber numbers.
        pub fn protobuf(frame: &Frame) -> Shared {
            match frame {
                $(Frame::$variant(frame) => <$view as Served>::protobuf(frame)),*
            }
        }

        /// The `data` of `frame`'s message on `channel`, if it has one.
        pub fn ws_data(frame: &Frame, channel: Channel) -> Option<Value> {
            match frame {
                $(Frame::$variant(frame) => <$view as Served>::ws_data(frame, channel)),*
            }
        }

        /// `frame`'s whole message on `channel`, if it has one.
        pub fn ws_text(frame: &Frame, channel: Channel) -> Option<Utf8Bytes> {
            match frame {
                $(Frame::$variant(frame) => <$view as Served>::ws_text(frame, channel)),*
            }
        }

        /// The channel of the WebSocket subscription type `name`, if a view
        /// serves it.
        pub fn ws_channel(name: &str) -> Option<Channel> {
            $(
                if let Some(at) = <$view as Served>::WS.iter().position(|ty| ty.name == name) {
                    return <$view as Served>::WS.get(at).map(|ty| Channel::new(ty, at));
                }
            )*
            None
        }

        /// Every WebSocket subscription type the views serve, in the
        /// registry's order.
        pub fn ws_types() -> Vec<&'static str> {
            let mut names = Vec::new();
            $(names.extend(<$view as Served>::WS.iter().map(|ty| ty.name));)*
            names
        }
    };
}

engine::for_each_view!(dispatch);
