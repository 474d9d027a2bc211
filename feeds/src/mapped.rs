//! A file written whole (an L4 snapshot, an engine checkpoint), mapped
//! read-only for a reader that goes through it once and lets go of what it
//! has passed, so that the file and what is built from it are not both
//! resident. The mapping is the node files' own ([`crate::segment`]): it is
//! registered with the SIGBUS guard, and released pages are read again from
//! the file if touched.

use std::fs::File;
use std::path::Path;

use bytes::Bytes;

use crate::error::FeedError;
use crate::segment::{map_prefix, release_mapped};

/// A whole file's bytes, mapped.
#[derive(Debug)]
pub struct MappedFile {
    bytes: Bytes,
}

impl MappedFile {
    /// Maps the first `len` bytes of `file` (at `path`, for errors).
    ///
    /// # Errors
    /// [`FeedError::Io`] when the mapping fails.
    pub fn of(file: &File, len: u64, path: &Path) -> Result<Self, FeedError> {
        Ok(Self {
            bytes: map_prefix(file, len, path)?,
        })
    }

    /// Opens `path` and maps all it holds now.
    ///
    /// # Errors
    /// [`FeedError::Io`] when it cannot be opened, read or mapped.
    pub fn open(path: &Path) -> Result<Self, FeedError> {
        let file = File::open(path).map_err(|e| FeedError::io("open", path, &e))?;
        let len = file
            .metadata()
            .map_err(|e| FeedError::io("stat", path, &e))?
            .len();
        Self::of(&file, len, path)
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, owning the mapping.
    pub(crate) fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Lets go of this process's resident pages holding the first `below`
    /// bytes (whole pages): a reader past them keeps only a window of the
    /// file resident, not all of it. Reading them again maps them again from
    /// the file (the page cache keeps them).
    pub fn release_below(&self, below: usize) {
        release_mapped(&self.bytes, below);
    }
}
