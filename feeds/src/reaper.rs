//! Letting go of removed files off the reading threads.
//!
//! When the node (or its operator) prunes an hourly file, the file's pages
//! stay in the page cache until the last mapping of it and its descriptor
//! go; the kernel then frees them all at once, in the thread that let go —
//! hundreds of milliseconds for a file of a few gigabytes. A refresh that
//! finds files gone hands its last references to them here, and one
//! background thread drops them, so that the thread folding blocks never
//! waits for the kernel to free a deleted file.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

use crate::segment::Segment;

/// Segments of removed files, on their way to the reaper thread.
type Batch = Vec<Arc<Segment>>;

fn sender() -> Option<&'static Mutex<Sender<Batch>>> {
    static REAPER: OnceLock<Option<Mutex<Sender<Batch>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = channel::<Batch>();
            std::thread::Builder::new()
                .name("feeds-reaper".into())
                .spawn(move || {
                    for batch in rx {
                        drop(batch);
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Drops `segments` on the reaper thread (here, if it could not start).
pub(crate) fn reap(segments: Batch) {
    if segments.is_empty() {
        return;
    }
    let Some(sender) = sender() else {
        return;
    };
    let sender = sender
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A closed channel hands the batch back: it is dropped here.
    let _ = sender.send(segments);
}
