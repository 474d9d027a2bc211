//! The server's host threads and the files they read: the node's feeds
//! with their change notifications ([`feeds`]), the engine thread that folds
//! them into market state and publishes view frames ([`engine`]), the
//! dispatcher that wakes the streams reading them ([`wakeups`]), and the
//! candle store thread that persists the market's candles ([`candles`]).

pub mod candles;
pub mod engine;
pub mod memory;
pub mod wakeups;
