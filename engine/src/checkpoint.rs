//! Engine checkpoints: the market state archived with rkyv, so that a
//! restarting server (or any fold) resumes from its newest checkpoint and
//! folds only the node files after it, instead of parsing the node's JSON
//! L4 snapshot and folding every file written since.
//!
//! - [`state`]: what is archived ([`CheckpointState`]), copied out of a
//!   [`crate::market::Market`] between two blocks ([`capture`]) and rebuilt
//!   from the validated archive.
//! - [`file`]: the file format (a versioned header with a checksum, then
//!   the archive), atomic writes, loading through a memory map with every
//!   check before use, the directory that keeps the newest few, and
//!   [`newest_usable`], which picks the checkpoint a fold starts from.
//! - [`stream`]: the archive serialised straight from the market, one book
//!   at a time, so that taking a checkpoint holds no copy of the state.
//! - [`writer`]: [`Checkpointer`], which takes one every so many blocks (or
//!   so much time), streaming it to a thread of its own that writes it.
//! - [`error`]: [`CheckpointError`], naming the file and what is wrong.
//!
//! # Why rkyv, and not JSON
//!
//! Loading a checkpoint validates the archive in place (rkyv's `bytecheck`:
//! every offset, length, string and enum of the mapped bytes is checked
//! before anything reads it, so damaged bytes are an error, not undefined
//! behaviour) and then reads the books straight out of the mapping: no
//! parser, no intermediate tree, no copy of the file. A node snapshot is
//! text that must be parsed number by number; a mainnet-size book loads
//! several times faster from a checkpoint (see `benches/BENCHMARKS.md`,
//! section `checkpoint`), and a checkpoint also carries what a snapshot
//! cannot: TP/SL's tracked orders and positions, candles, trade counts.
//!
//! # Versions
//!
//! The header carries [`FORMAT_VERSION`]; a checkpoint of another version
//! is refused as such ([`CheckpointError::Version`]) and the fold starts
//! from the node snapshot instead. The archived types are pinned by a
//! golden test, so changing them without bumping the version fails the
//! tests.

pub mod error;
pub mod file;
pub mod state;
pub mod stream;
pub mod writer;

pub use self::error::CheckpointError;
pub use self::file::{Bounds, CheckpointFile, Choice, Loaded, PassedOver, load, newest_usable};
pub use self::state::{CheckpointState, FORMAT_VERSION, capture};
pub use self::writer::{CheckpointPolicy, Checkpointer, Finished, Progress, Taken};

/// The directory checkpoints go to under a server's state directory.
pub const DIR_NAME: &str = "checkpoints";
