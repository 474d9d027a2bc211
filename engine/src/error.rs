//! The crate's error: every state machine's own error under one
//! non-exhaustive enum, for callers that handle them together.

use thiserror::Error;

use crate::align::AlignIssue;
use crate::block::BlockDecodeError;
use crate::book::l2::L2Error;
use crate::book::l4::L4Error;
use crate::checkpoint::CheckpointError;
use crate::replay::ReplayError;
use crate::snapshot::SnapshotError;
use crate::views::ViewError;

/// Any engine error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// An L4 book diff that could not be applied.
    #[error(transparent)]
    L4(#[from] L4Error),
    /// L2 parameters or aggregation.
    #[error(transparent)]
    L2(#[from] L2Error),
    /// A node snapshot.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Input the aligner worked around.
    #[error(transparent)]
    Align(#[from] AlignIssue),
    /// A line or event that did not decode.
    #[error(transparent)]
    Decode(#[from] BlockDecodeError),
    /// A subscription request.
    #[error(transparent)]
    View(#[from] ViewError),
    /// A replay.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// An engine checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_inner_message() {
        let inner = L4Error::UnknownOid {
            coin: "BTC".into(),
            oid: 7,
            block: 9,
        };
        let error = Error::from(inner.clone());
        assert_eq!(error.to_string(), "l4: unknown oid 7 for BTC at block 9");
        assert_eq!(error, Error::L4(inner));
    }
}
