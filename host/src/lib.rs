//! The node host's threads and the state they keep: the engine thread that
//! folds the node's files into market state and publishes view frames
//! ([`engine`]), the dispatcher that wakes the streams reading them
//! ([`wakeups`]), the candle store thread that persists the market's
//! candles ([`candle_thread`]) and the store itself with its lookups and
//! its import ([`candles`]), and memory given back after bursts
//! ([`memory`]). The edges read what these threads publish; nothing here
//! serves a client.

pub mod candle_thread;
pub mod candles;
pub mod engine;
pub mod memory;
pub mod wakeups;
