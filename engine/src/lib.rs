//! Pure, deterministic fold of the node's ordered block stream into market
//! state (L4/L2 books, BBO, TP/SL, trades, fills, candles, mids) and the frames
//! each view emits. No tokio, no network, no clock.

pub mod align;
pub mod block;
pub mod book;
pub mod coin;
mod digits;
pub mod error;
pub mod event;
pub mod fold;
pub mod hub;
pub mod num;
pub mod positions;
pub mod replay;
pub mod snapshot;
pub mod text;
pub mod views;

pub use error::Error;
