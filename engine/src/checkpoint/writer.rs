//! Taking checkpoints while the market folds: [`Checkpointer`] decides when
//! one is due ([`CheckpointPolicy`]: every so many blocks, or so much wall
//! time), copies and serialises the state book by book on the caller's
//! thread ([`stream`]: what the market's writer pays), and hands the bytes
//! to a thread of its own that writes, syncs, renames and prunes, one
//! checkpoint at a time. Memory held for it: the levels of the book being
//! archived, 4,096 of its orders and [`PIECES_IN_FLIGHT`] pieces of 256 KiB,
//! not a copy of the whole state.
//!
//! The engine holds no clock: callers pass "now" (Unix ms) for the time
//! bound. `Instant` is read only to report how long each step took.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::error::CheckpointError;
use super::file::{self, Piece, Written};
use super::stream;
use crate::market::Market;

/// When checkpoints are taken and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CheckpointPolicy {
    /// A checkpoint is due once this many blocks were folded since the last
    /// one (0: never by count).
    pub every_blocks: u64,
    /// … or once this much wall time passed since the last one, if a block
    /// was folded since (0: never by time).
    pub every_ms: u64,
    /// How many of the newest checkpoints are kept (at least 1).
    pub keep: usize,
}

impl CheckpointPolicy {
    /// Default [`CheckpointPolicy::every_blocks`]: about 11 minutes of
    /// mainnet blocks.
    pub const DEFAULT_EVERY_BLOCKS: u64 = 10_000;
    /// Default [`CheckpointPolicy::every_ms`]: 10 minutes.
    pub const DEFAULT_EVERY_MS: u64 = 600_000;
    /// Default [`CheckpointPolicy::keep`].
    pub const DEFAULT_KEEP: usize = 3;

    /// Whether checkpoints are taken at all.
    pub fn enabled(&self) -> bool {
        self.every_blocks > 0 || self.every_ms > 0
    }
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        Self {
            every_blocks: Self::DEFAULT_EVERY_BLOCKS,
            every_ms: Self::DEFAULT_EVERY_MS,
            keep: Self::DEFAULT_KEEP,
        }
    }
}

/// A checkpoint just captured; its writing runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Its block.
    pub block_number: u64,
    /// Resting orders captured.
    pub orders: usize,
    /// What the caller's thread paid: copying and serialising the state
    /// (and waiting when the writer thread was behind by more than
    /// [`PIECES_IN_FLIGHT`] pieces).
    pub cost: Duration,
}

/// A checkpoint written, and the old ones removed after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The checkpoint.
    pub written: Written,
    /// Older checkpoints (and stale temporary files) removed.
    pub pruned: Vec<PathBuf>,
}

/// What [`Checkpointer::after_block`] did.
#[derive(Debug, Default)]
pub struct Progress {
    /// The previous checkpoint's writing ended (written, or why not).
    pub finished: Option<Result<Finished, CheckpointError>>,
    /// A checkpoint was captured (its writing started).
    pub taken: Option<Taken>,
}

/// Takes checkpoints of a market as it folds. See the module docs.
#[derive(Debug)]
pub struct Checkpointer {
    dir: PathBuf,
    policy: CheckpointPolicy,
    /// The block of the last checkpoint taken (or where the market started).
    last_block: Option<u64>,
    /// When it was taken (or the checkpointer made), Unix ms.
    last_at_ms: i64,
    running: Option<JoinHandle<Result<Finished, CheckpointError>>>,
    /// Why the last checkpoint's writer thread could not start.
    unstarted: Option<CheckpointError>,
    /// Called on the writer thread once a checkpoint's state is dropped.
    after_write: Option<fn()>,
}

impl Checkpointer {
    /// Checkpoints into `dir` as `policy` says, counting from a market at
    /// `start_block` now.
    pub fn new(
        dir: impl Into<PathBuf>,
        policy: CheckpointPolicy,
        start_block: Option<u64>,
        now_ms: i64,
    ) -> Self {
        Self {
            dir: dir.into(),
            policy,
            last_block: start_block,
            last_at_ms: now_ms,
            running: None,
            unstarted: None,
            after_write: None,
        }
    }

    /// Calls `after` on the writer thread each time a checkpoint was
    /// written (or failed): the pieces it was handed are freed then, which
    /// a caller may want its allocator to give back.
    #[must_use]
    pub fn after_write(mut self, after: fn()) -> Self {
        self.after_write = Some(after);
        self
    }

    /// The directory checkpoints go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The policy.
    pub fn policy(&self) -> CheckpointPolicy {
        self.policy
    }

    /// Whether a checkpoint of `market` is due at `now_ms`. A market that
    /// started from empty books counts from the first block it folded
    /// ([`Checkpointer::after_block`] notes it), not from block 0.
    pub fn due(&self, market: &Market, now_ms: i64) -> bool {
        let (Some(height), Some(last)) = (market.height(), self.last_block) else {
            return false;
        };
        let since = height.saturating_sub(last);
        let by_count = self.policy.every_blocks > 0 && since >= self.policy.every_blocks;
        let by_time = self.policy.every_ms > 0
            && since > 0
            && u64::try_from(now_ms.saturating_sub(self.last_at_ms))
                .is_ok_and(|elapsed| elapsed >= self.policy.every_ms);
        by_count || by_time
    }

    /// The block of the last checkpoint taken (or where the market
    /// started).
    pub fn last_block(&self) -> Option<u64> {
        self.last_block
    }

    /// Whether a checkpoint is being written.
    pub fn writing(&self) -> bool {
        self.running.is_some()
    }

    /// Called after each folded block: collects the previous checkpoint's
    /// outcome once it is written, and takes a checkpoint when one is due
    /// and none is being written (a due checkpoint waits for the block
    /// after the write ends).
    pub fn after_block(&mut self, market: &Market, now_ms: i64) -> Progress {
        if self.last_block.is_none() {
            self.last_block = market.height();
        }
        let mut progress = Progress {
            finished: self.collect(false),
            taken: None,
        };
        if self.running.is_none() && self.due(market, now_ms) {
            progress.taken = Some(self.take(market, now_ms));
        }
        progress
    }

    /// Takes a checkpoint of `market` now, after waiting for the one being
    /// written (whose outcome is returned).
    pub fn take_now(&mut self, market: &Market, now_ms: i64) -> Progress {
        Progress {
            finished: self.collect(true),
            taken: Some(self.take(market, now_ms)),
        }
    }

    /// Waits for the checkpoint being written, if any; its outcome.
    pub fn finish(&mut self) -> Option<Result<Finished, CheckpointError>> {
        self.collect(true)
    }

    /// Streams `market`'s archive to a new writer thread ([`stream`]): the
    /// caller's thread copies and serialises one book at a time, the
    /// writer thread writes what it is handed (at most
    /// [`PIECES_IN_FLIGHT`] pieces wait), then syncs, renames and prunes.
    fn take(&mut self, market: &Market, now_ms: i64) -> Taken {
        let started = Instant::now();
        let block_number = market.height().unwrap_or(0);
        self.last_block = market.height();
        self.last_at_ms = now_ms;
        let dir = self.dir.clone();
        let keep = self.policy.keep;
        let after = self.after_write;
        let (to_writer, pieces) = std::sync::mpsc::sync_channel(PIECES_IN_FLIGHT);
        let spawned = std::thread::Builder::new()
            .name("l1gate-checkpoint".into())
            .spawn(move || {
                let outcome = file::write_pieces(&dir, block_number, &pieces).and_then(|written| {
                    Ok(Finished {
                        written,
                        pruned: file::prune(&dir, keep)?,
                    })
                });
                drop(pieces);
                if let Some(after) = after {
                    after();
                }
                outcome
            });
        let mut orders = 0;
        match spawned {
            Ok(handle) => {
                self.running = Some(handle);
                orders = stream_to(market, to_writer);
            }
            Err(error) => {
                self.unstarted = Some(CheckpointError::io(
                    &self.dir,
                    "start a writer thread for",
                    &error,
                ));
            }
        }
        Taken {
            block_number,
            orders,
            cost: started.elapsed(),
        }
    }

    fn collect(&mut self, wait: bool) -> Option<Result<Finished, CheckpointError>> {
        if let Some(error) = self.unstarted.take() {
            return Some(Err(error));
        }
        if !wait && !self.running.as_ref().is_some_and(JoinHandle::is_finished) {
            return None;
        }
        let handle = self.running.take()?;
        Some(handle.join().unwrap_or_else(|_| {
            Err(CheckpointError::Serialize(
                "the checkpoint writer thread panicked".to_owned(),
            ))
        }))
    }
}

impl Drop for Checkpointer {
    /// A checkpoint being written is finished first.
    fn drop(&mut self) {
        let _ = self.collect(true);
    }
}

/// Bytes handed to the writer thread at a time.
const PIECE: usize = 256 << 10;
/// Pieces that may wait for the writer thread: what a checkpoint holds in
/// memory beyond the book being copied.
pub const PIECES_IN_FLIGHT: usize = 4;

/// Serialises `market`'s archive into pieces for the writer thread, then
/// its header (or why it stopped); the orders archived.
fn stream_to(market: &Market, to_writer: SyncSender<Piece>) -> usize {
    let report = to_writer.clone();
    let sink = file::Summed::new(Pieces {
        buffer: Vec::with_capacity(PIECE),
        to: to_writer,
    });
    match stream::archive_into(market, sink, file::HEADER_LEN) {
        Ok((mut sink, streamed)) => {
            // A failed write stopped the writer thread, which reports its
            // own error.
            if sink.flush().is_ok() && sink.failed.is_none() {
                let header = file::header_of_streamed(&streamed, sink.len, sink.crc());
                let _ = sink.inner.to.send(Piece::End(header));
            }
            streamed.orders
        }
        Err(error) => {
            // A writer thread still reading removes its file and reports
            // why (one that stopped on a write reports its own error).
            let _ = report.send(Piece::Failed(error.to_string()));
            0
        }
    }
}

/// The archive's bytes, gathered into pieces sent to the writer thread.
struct Pieces {
    buffer: Vec<u8>,
    to: SyncSender<Piece>,
}

impl Pieces {
    fn send(&mut self) -> std::io::Result<()> {
        let full = std::mem::replace(&mut self.buffer, Vec::with_capacity(PIECE));
        self.to.send(Piece::Bytes(full)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the checkpoint writer thread stopped",
            )
        })
    }
}

impl Write for Pieces {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let taken = (PIECE - self.buffer.len()).min(bytes.len());
        self.buffer.extend_from_slice(&bytes[..taken]);
        if self.buffer.len() == PIECE {
            self.send()?;
        }
        Ok(taken)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            Ok(())
        } else {
            self.send()
        }
    }
}
