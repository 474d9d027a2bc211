//! The node's files on disk as ordered records: discover the layout, map and
//! index segments, tail them live, decode envelopes and filter events.

pub mod envelope;
pub mod error;
pub mod feed;
pub mod filter;
pub mod index;
pub mod layout;
pub mod segment;
pub mod snapshot;
pub mod source;
pub mod time;
pub mod watch;

pub use error::FeedError;
pub use feed::{Cursor, Feed, Record, Start};
pub use filter::{EventFilter, FilterError, Filtered};
pub use index::Target;
pub use layout::SegmentKey;
pub use snapshot::{SnapshotFile, SnapshotTime, Snapshots};
pub use source::{Mode, PositionKind, Source};
pub use watch::Watcher;
