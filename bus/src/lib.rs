//! Scale-out over a message bus (NATS JetStream): the node host appends
//! every record it reads from the node's files to one stream per feed
//! ([`publisher`], `l1gate serve --publish`), and edge servers with no node
//! files fold and serve those streams (`l1gate edge`, the server's `bus`
//! module: its own server over the [`mirror`]), starting from the engine
//! checkpoints the node host puts on the bus too ([`checkpoints`]).
//!
//! - [`url`]: the bus address with its credential kept apart and hidden;
//! - [`settings`]: `publish_url` and the streams' retention;
//! - [`subjects`]: stream and subject names, headers, message ids;
//! - [`status`]: connection and per-feed progress for `/healthz` and
//!   `/metrics`;
//! - [`mirror`]: the edge's copy of the records in the node's layout.
//!
//! `docs/scale-out.md` is the operator's page. This crate knows no server:
//! it moves records and checkpoints between the node host and the bus.

pub mod checkpoints;
pub mod mirror;
pub mod publisher;
pub mod settings;
pub mod status;
pub mod subjects;
pub mod url;
