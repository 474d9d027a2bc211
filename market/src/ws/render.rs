//! The WebSocket edge's rendering of a batch: each frame as the exchange's
//! channel message `{"channel":…,"data":…}` (see [`crate::views`]),
//! rendered once per batch and channel and shared (the text of a message is
//! reference counted) by every connection subscribed to the same key.
//!
//! Field names and shapes follow the exchange's WebSocket API (and, for
//! `l4Book`, the node servers'); prices and sizes keep the node's exact
//! text. One key can be read through several channels (an account's fills
//! as `userFills`, `userEvents` or `userTwapSliceFills`): each channel's
//! messages are made on first use.

use std::sync::OnceLock;

use axum::extract::ws::Utf8Bytes;
use engine::views::registry::{Batch, Rendering};

use crate::views::{
    self,
    channel::{self, Channel},
};

/// A batch's messages per channel (by its place among its view's), each
/// made on first use with the channel's name beside them.
pub struct Json {
    channels: [OnceLock<(&'static str, Vec<Utf8Bytes>)>; channel::MAX_PER_VIEW],
}

impl Rendering for Json {
    const SLOT: usize = 1;

    fn render(_batch: &Batch) -> Self {
        Self {
            channels: Default::default(),
        }
    }
}

/// The messages of `batch` on `channel`, shared with every other
/// connection reading the same key through the same channel.
pub fn messages(batch: &Batch, channel: Channel) -> Vec<Utf8Bytes> {
    let make = || -> Vec<Utf8Bytes> {
        batch
            .frames()
            .iter()
            .filter_map(|frame| views::ws_text(frame, channel))
            .collect()
    };
    match batch.rendered::<Json>() {
        Some(json) => match json.channels.get(channel.index()) {
            Some(slot) => {
                let (name, messages) = slot.get_or_init(|| (channel.name(), make()));
                // Read through another view's channel (nothing the edges
                // do): made, not cached.
                if *name == channel.name() {
                    messages.clone()
                } else {
                    make()
                }
            }
            None => make(),
        },
        // Another rendering holds the slot: made for this subscriber.
        None => make(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::event::Side;
    use engine::market::Position;
    use engine::market::trades::Trade;
    use engine::market::trades::TradesUpdate;
    use engine::num::Decimal;
    use engine::views::l4book::L4BookUpdate;
    use engine::views::registry::Frame;
    use serde_json::{Value, json};

    #[test]
    fn trades_render_as_the_exchange_sends_them_once_per_batch() {
        let trade = Trade {
            coin: "BTC".into(),
            side: Side::Ask,
            px: Decimal::parse("106296.0").unwrap(),
            sz: Decimal::parse("0.00017").unwrap(),
            time: 1_751_430_933_565,
            hash: "0xde93".into(),
            tid: 293_353_986_402_527,
            users: ["0xcc0a".into(), "0xc64c".into()],
        };
        let batch = Batch::new(
            Position::default(),
            vec![Frame::Trades(TradesUpdate {
                coin: "BTC".into(),
                time: 1_751_430_933_565,
                block_number: 7,
                trades: vec![trade],
            })],
        );
        let trades = crate::views::ws_channel("trades").unwrap();
        let first = messages(&batch, trades);
        let value: Value = serde_json::from_str(first[0].as_str()).unwrap();
        assert_eq!(
            value,
            json!({"channel":"trades","data":[{"coin":"BTC","side":"A","px":"106296.0",
                "sz":"0.00017","time":1_751_430_933_565_i64,"hash":"0xde93",
                "tid":293_353_986_402_527_u64,"users":["0xcc0a","0xc64c"]}]})
        );
        let again = messages(&batch, trades);
        assert_eq!(first[0].as_str().as_ptr(), again[0].as_str().as_ptr());
        // Not a trades frame on another channel: nothing.
        let bbo = crate::views::ws_channel("bbo").unwrap();
        assert_eq!(bbo.index(), trades.index(), "each its view's first");
        assert!(messages(&batch, bbo).is_empty());
    }

    #[test]
    fn l4_updates_carry_the_node_events_byte_for_byte() {
        let events = r#"{"order_statuses":[{"time":"2026-05-05T17:39:13.1","user":"0xab","status":"open","order":{"sz":"1.50"}}],"book_diffs":[]}"#;
        let batch = Batch::new(
            Position::default(),
            vec![Frame::L4Book(L4BookUpdate::Diff(
                engine::views::l4book::L4BookDiff {
                    time: 5,
                    block_number: 9,
                    data: engine::market::raw::RawJson::new(events.to_owned()),
                },
            ))],
        );
        let text = messages(&batch, crate::views::ws_channel("l4Book").unwrap());
        let body = &events[1..events.len() - 1];
        assert!(text[0].as_str().contains(body), "{}", text[0].as_str());
        let value: Value = serde_json::from_str(text[0].as_str()).unwrap();
        assert_eq!(value["data"]["Updates"]["height"], 9);
        assert_eq!(value["data"]["Updates"]["time"], 5);
        assert_eq!(value["data"]["Updates"]["book_diffs"], json!([]));
    }
}
