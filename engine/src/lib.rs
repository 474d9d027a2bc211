//! Pure, deterministic fold of the node's ordered block stream into market
//! state (L4/L2 books, BBO, TP/SL, trades, fills, candles, mids) and the frames
//! each view emits. No tokio, no network, no clock.
//!
//! One pipeline: [`source`] reads the node's files as aligned blocks,
//! [`market`] folds each block once, [`views`] turn the market into frames
//! per subscription (found by name in [`views::registry`]), and [`hub`] fans
//! a key's frames out to its subscribers. [`replay`] drives it over captured
//! files; the server drives it live. [`checkpoint`] archives the market
//! state so that a fold can resume from it.

pub mod align;
pub mod block;
pub mod book;
pub mod checkpoint;
pub mod coin;
mod digits;
pub mod error;
pub mod event;
pub mod fold;
pub mod hub;
pub mod market;
pub mod num;
pub mod positions;
pub mod replay;
pub mod snapshot;
pub mod source;
pub mod table;
pub mod text;
pub mod views;

pub use error::Error;
