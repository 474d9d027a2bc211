//! Pure, deterministic fold of the node's ordered block stream into market
//! state (L4/L2 books, BBO, TP/SL, trades, fills, candles, mids) and the frames
//! each view emits. No tokio, no network, no clock.

pub mod block;
pub mod event;
pub mod num;
