//! The node's files on disk as ordered records: discover the layout, map and
//! index segments, tail them live, decode envelopes and filter events.

pub mod envelope;
pub mod time;
