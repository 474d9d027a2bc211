//! The engine's integration tests, one binary with themed modules.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "engine/common.rs"]
mod common;
#[path = "engine/fold_real.rs"]
mod fold_real;
