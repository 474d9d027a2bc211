//! The engine's integration tests, one binary with themed modules.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "engine/align_real.rs"]
mod align_real;
#[path = "engine/book_props.rs"]
mod book_props;
#[path = "engine/candles.rs"]
mod candles;
#[path = "engine/checkpoint.rs"]
mod checkpoint;
#[path = "engine/common.rs"]
mod common;
#[path = "engine/fills.rs"]
mod fills;
#[path = "engine/fold_real.rs"]
mod fold_real;
#[path = "engine/golden.rs"]
mod golden;
#[path = "engine/hub.rs"]
mod hub;
#[path = "engine/legacy_formats.rs"]
mod legacy_formats;
#[path = "engine/open_orders.rs"]
mod open_orders;
#[path = "engine/replay.rs"]
mod replay;
#[path = "engine/simulator_truth.rs"]
mod simulator_truth;
#[path = "engine/source.rs"]
mod source;
#[path = "engine/steps.rs"]
mod steps;
#[path = "engine/tpsl.rs"]
mod tpsl;
#[path = "engine/trades.rs"]
mod trades;
#[path = "engine/untrusted_input.rs"]
mod untrusted_input;
#[path = "engine/views_rules.rs"]
mod views_rules;
