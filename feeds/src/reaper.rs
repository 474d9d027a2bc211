//! Letting go of removed files, and of pages read long ago, off the reading
//! threads.
//!
//! When the node (or its operator) prunes an hourly file, the file's pages
//! stay in the page cache until the last mapping of it and its descriptor
//! go; the kernel then frees them all at once, in the thread that let go —
//! hundreds of milliseconds for a file of a few gigabytes. A refresh that
//! finds files gone hands its last references to them here, and one
//! background thread drops them, so that the thread folding blocks never
//! waits for the kernel to free a deleted file.
//!
//! The same thread releases the resident pages that [`crate::Feed::release_read`]
//! asks to let go of: a walk of a mapping's page tables that no reader
//! should wait for either.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use crate::segment::Segment;

/// Segments of removed files, on their way to the reaper thread.
type Batch = Vec<Arc<Segment>>;

/// Work for the reaper thread.
enum Job {
    /// Drop these segments (the last references to removed files).
    Drop(Batch),
    /// Release each segment's resident pages below the offset.
    Release(Vec<(Arc<Segment>, u64)>),
}

fn sender() -> Option<&'static Mutex<Sender<Job>>> {
    static REAPER: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            std::thread::Builder::new()
                .name("feeds-reaper".into())
                .spawn(move || {
                    for job in rx {
                        match job {
                            Job::Drop(batch) => drop(batch),
                            Job::Release(jobs) => {
                                for (segment, below) in jobs {
                                    segment.release_below(below);
                                }
                            }
                        }
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Sends `job` to the reaper thread. If the thread could not start, the
/// job is dropped here unrun: segments are then let go of in the caller's
/// thread, and pages stay resident.
fn send(job: Job) {
    let Some(sender) = sender() else {
        return;
    };
    let sender = sender
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A closed channel hands the job back: it is dropped here.
    let _ = sender.send(job);
}

/// Drops `segments` on the reaper thread (here, if it could not start).
pub(crate) fn reap(segments: Batch) {
    if !segments.is_empty() {
        send(Job::Drop(segments));
    }
}

/// Releases each segment's resident pages below its offset on the reaper
/// thread (nothing happens if it could not start: the pages stay, which is
/// only memory the kernel can reclaim anyway).
pub(crate) fn release(jobs: Vec<(Arc<Segment>, u64)>) {
    if !jobs.is_empty() {
        send(Job::Release(jobs));
    }
}
