//! Why a checkpoint could not be written or used: every error names the
//! file, and says whether it is damaged, from another format version, or
//! simply not what this run needs.

use std::path::PathBuf;

use thiserror::Error;

/// A checkpoint that could not be written or used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file operation failed.
    #[error("checkpoint {}: cannot {op}: {message}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`open`, `map`, `write`, `rename`, …).
        op: &'static str,
        /// The I/O error's text.
        message: String,
    },
    /// The file does not start with a checkpoint header.
    #[error("checkpoint {}: not an l1gate checkpoint (no checkpoint header)", path.display())]
    NotACheckpoint {
        /// The file.
        path: PathBuf,
    },
    /// Written in another format version (by an older or newer build).
    #[error(
        "checkpoint {}: format version {found}, this build reads version {supported} only \
         (written by another l1gate build)",
        path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The file's format version.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },
    /// Shorter or longer than its header says.
    #[error(
        "checkpoint {}: truncated or extended: {found} bytes, the header announces {expected}",
        path.display()
    )]
    Length {
        /// The file.
        path: PathBuf,
        /// Bytes the header announces.
        expected: u64,
        /// Bytes the file holds.
        found: u64,
    },
    /// The body's checksum does not match the header's.
    #[error("checkpoint {}: damaged: checksum mismatch", path.display())]
    Checksum {
        /// The file.
        path: PathBuf,
    },
    /// The body fails validation (rkyv's structural checks, or the state's
    /// own rules).
    #[error("checkpoint {}: damaged: {reason}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// It holds less than this run folds.
    #[error("checkpoint {}: holds {held}, this run needs {wanted}", path.display())]
    Needs {
        /// The file.
        path: PathBuf,
        /// What the checkpoint folded.
        held: String,
        /// What this run folds.
        wanted: String,
    },
    /// The state could not be serialised.
    #[error("checkpoint: cannot serialise the state: {0}")]
    Serialize(String),
}

impl CheckpointError {
    /// An I/O failure on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, error: &std::io::Error) -> Self {
        CheckpointError::Io {
            path: path.into(),
            op,
            message: error.to_string(),
        }
    }

    /// Whether the file itself is unusable (damaged, truncated, another
    /// format) rather than unreadable or unsuitable for this run.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            CheckpointError::NotACheckpoint { .. }
                | CheckpointError::Version { .. }
                | CheckpointError::Length { .. }
                | CheckpointError::Checksum { .. }
                | CheckpointError::Damaged { .. }
        )
    }
}
