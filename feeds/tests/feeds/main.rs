//! Integration tests of the `feeds` crate, one binary with themed modules.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod compressed;
mod filters;
mod index;
mod real_data;
mod resident;
mod snapshots;
mod tail;
