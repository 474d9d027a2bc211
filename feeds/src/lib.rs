//! The node's files on disk as ordered records: discover the layout, map and
//! index segments, tail them live, decode envelopes and filter events.
//!
//! - [`Feed`] serves one line source ([`Source`]) as records: seek by block
//!   number, timestamp or tail, read in order across hourly files, refresh
//!   to pick up growth and new files, measure lag.
//! - [`Snapshots`] serves L4 snapshot files.
//! - [`EventFilter`] removes non-matching events from an envelope line,
//!   keeping the others byte-identical.
//! - [`Watcher`] turns filesystem notifications into wake-up calls; polling
//!   [`Feed::refresh`] alone is also correct.
//!
//! No async runtime and no network: callers drive refresh and read from
//! whatever thread or task they like. The `unsafe` is the audited mapping
//! code in [`segment`] (mapping, and page advice on a mapping) and the SIGBUS
//! handler in [`fault`].

pub mod codec;
pub mod envelope;
pub mod error;
pub mod fault;
pub mod feed;
pub mod filter;
pub mod index;
pub mod layout;
pub mod legacy;
pub mod mapped;
mod reaper;
pub mod resident;
pub mod segment;
pub mod snapshot;
pub mod source;
mod spool;
mod structural;
pub mod time;
pub mod wait;
pub mod watch;

pub use error::FeedError;
pub use feed::{Cursor, Feed, RELEASE_EVERY_READ, RESIDENT_TAIL, Record, RefusedLine, Start};
pub use filter::{EventFilter, FilterError, Filtered};
pub use index::Target;
pub use layout::SegmentKey;
pub use legacy::LineFormat;
pub use mapped::MappedFile;
pub use snapshot::{SnapshotFile, SnapshotTime, Snapshots};
pub use source::{Mode, PositionKind, Source, SourceSet};
pub use watch::{Change, Watcher};
