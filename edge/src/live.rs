//! The node's files as the server sees them: one [`Feed`] per source plus
//! the snapshot catalog, a change signal per source that wakes raw-feed
//! subscribers when new records become readable, and the file watcher that
//! wakes every reader at once when the node writes.
//!
//! A change notification is a wake-up hint, never the truth: readers keep
//! committed byte offsets, and a slow backup poll (`poll_interval_ms`)
//! catches what a lost notification would miss. On a notification that a
//! file was written to, readers re-stat the newest files only; on one that
//! files came or went (and on the backup poll), they list the directories
//! again.
//!
//! Two kinds of reader are woken: the async refresher task, which re-checks
//! the files and bumps the raw-feed signals, and the host threads (the
//! engine), each through its own [`Wake`] — a bell it sleeps on beside its
//! own watch of the files' writes ([`feeds::wait::FileWait`]), rung here
//! for files that came or went (and for writes too when the thread cannot
//! watch them itself).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use feeds::{Change, Feed, FeedError, Snapshots, Source, SourceSet};
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use feeds::RESIDENT_TAIL;

/// Every feed of one data directory, with change signals.
pub struct LiveFeeds {
    data_dir: PathBuf,
    feeds: HashMap<Source, Feed>,
    snapshots: Snapshots,
    changes: HashMap<Source, watch::Sender<u64>>,
    /// The refresher task's wake-up and whether it must list again.
    refresher: Arc<Waker>,
    /// Host threads woken on every change.
    wakers: Arc<Mutex<Vec<Arc<Waker>>>>,
    watcher: Mutex<Option<feeds::Watcher>>,
    /// Each feed's shrunken-file count as last logged.
    shrinks_seen: HashMap<Source, AtomicU64>,
    /// Each feed's replaced-file count as last logged.
    replacements_seen: HashMap<Source, AtomicU64>,
}

impl std::fmt::Debug for LiveFeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveFeeds")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// One reader's wake-up: a signal, the sources it reads, and what changed
/// since its last look.
#[derive(Debug)]
struct Waker {
    /// The sources this reader reads: writes to others do not wake it.
    interest: SourceSet,
    /// Sources written to since the last look ([`SourceSet::bits`]).
    written: AtomicU8,
    /// Files came or went since the last look: list again.
    relist: AtomicBool,
    signal: Signal,
}

#[derive(Debug)]
enum Signal {
    /// The async refresher task.
    Task(Notify),
    /// A host thread waiting on its bell; with `writes_seen`, the thread
    /// watches its files' writes itself ([`feeds::wait::FileWait`]) and is
    /// rung for listing changes only.
    Thread {
        bell: Arc<feeds::wait::Bell>,
        writes_seen: bool,
    },
}

impl Waker {
    fn new(interest: SourceSet, signal: Signal) -> Self {
        Self {
            interest,
            written: AtomicU8::new(0),
            // The first look lists the directories.
            relist: AtomicBool::new(true),
            signal,
        }
    }

    fn wake(&self, change: Change) {
        match change {
            Change::Listing => self.relist.store(true, Ordering::Release),
            Change::Written(Some(_))
                if matches!(
                    self.signal,
                    Signal::Thread {
                        writes_seen: true,
                        ..
                    }
                ) =>
            {
                return;
            }
            Change::Written(Some(source)) if self.interest.contains(source) => {
                let bit = SourceSet::EMPTY.with(source).bits();
                self.written.fetch_or(bit, Ordering::AcqRel);
            }
            // A file this reader does not read (another source's, a
            // snapshot being written): nothing for it to re-check.
            Change::Written(_) => return,
        }
        match &self.signal {
            Signal::Task(notify) => notify.notify_one(),
            Signal::Thread { bell, .. } => bell.ring(),
        }
    }

    /// What changed since the last look; clears it.
    fn take(&self) -> Pending {
        Pending {
            relist: self.relist.swap(false, Ordering::AcqRel),
            written: SourceSet::from_bits(self.written.swap(0, Ordering::AcqRel)),
        }
    }
}

/// What a reader has to look at after a wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Files came or went: list every directory again.
    pub relist: bool,
    /// Sources whose newest file was written to: re-stat those.
    pub written: SourceSet,
}

impl Pending {
    /// Everything: the backup poll's look.
    pub const ALL: Pending = Pending {
        relist: true,
        written: SourceSet::EMPTY,
    };

    /// Nothing to look at.
    pub const NONE: Pending = Pending {
        relist: false,
        written: SourceSet::EMPTY,
    };

    /// What a thread's own wait saw: writes to its watched files, or
    /// everything again when the kernel dropped notifications.
    pub fn of(woke: feeds::wait::Woke) -> Pending {
        Pending {
            relist: woke.overflowed,
            written: woke.written,
        }
    }

    /// What this or `other` asks to look at.
    #[must_use]
    pub fn merged(self, other: Pending) -> Pending {
        Pending {
            relist: self.relist || other.relist,
            written: SourceSet::from_bits(self.written.bits() | other.written.bits()),
        }
    }
}

/// A host thread's wake-ups from the file watcher: what changed, told
/// after the thread's bell rang.
#[derive(Debug)]
pub struct Wake {
    waker: Arc<Waker>,
}

impl Wake {
    /// What changed since the last call; clears it.
    pub fn take(&self) -> Pending {
        self.waker.take()
    }
}

impl LiveFeeds {
    /// Opens every source under `data_dir` (absent sources are empty feeds
    /// that may appear later) and starts watching it.
    ///
    /// # Errors
    /// [`FeedError`] when the directory cannot be read.
    pub fn open(data_dir: &Path) -> Result<Arc<Self>, FeedError> {
        let mut feeds = HashMap::new();
        let mut changes = HashMap::new();
        for &source in &Source::ALL {
            if source != Source::OrderbookSnapshots {
                feeds.insert(source, Feed::open(data_dir, source)?);
            }
            changes.insert(source, watch::channel(0u64).0);
        }
        // Snapshots are dated with the block time of their height, looked up
        // in the line feeds this set already has open.
        let snapshots = Snapshots::with_feeds(data_dir, feeds.values().cloned().collect())?;
        let refresher = Arc::new(Waker::new(
            SourceSet::of(&Source::ALL),
            Signal::Task(Notify::new()),
        ));
        let wakers: Arc<Mutex<Vec<Arc<Waker>>>> = Arc::new(Mutex::new(Vec::new()));
        let live = Arc::new(Self {
            data_dir: data_dir.to_owned(),
            feeds,
            snapshots,
            changes,
            refresher: refresher.clone(),
            wakers: wakers.clone(),
            watcher: Mutex::new(None),
            shrinks_seen: Source::ALL
                .iter()
                .map(|&source| (source, AtomicU64::new(0)))
                .collect(),
            replacements_seen: Source::ALL
                .iter()
                .map(|&source| (source, AtomicU64::new(0)))
                .collect(),
        });
        let on_change = move |change: Change| {
            refresher.wake(change);
            for waker in wakers.lock().iter() {
                waker.wake(change);
            }
        };
        match feeds::Watcher::new(data_dir, on_change) {
            Ok(watcher) => *live.watcher.lock() = Some(watcher),
            Err(error) => {
                tracing::warn!(%error, "file watcher unavailable; relying on polling");
            }
        }
        Ok(live)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The feed of a line source (`None` for [`Source::OrderbookSnapshots`],
    /// which is served from [`LiveFeeds::snapshots`]).
    pub fn feed(&self, source: Source) -> Option<Feed> {
        self.feeds.get(&source).cloned()
    }

    /// The L4 snapshot catalog.
    pub fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    /// A receiver that changes whenever `source` has new readable data.
    pub fn subscribe(&self, source: Source) -> watch::Receiver<u64> {
        self.changes[&source].subscribe()
    }

    /// Wake-ups for a host thread that reads `sources`, by ringing `bell`:
    /// a listing change, or a write to one of their files unless
    /// `writes_seen` (the thread's own [`feeds::wait::FileWait`] watches
    /// those).
    pub fn wake(
        &self,
        sources: &[Source],
        bell: Arc<feeds::wait::Bell>,
        writes_seen: bool,
    ) -> Wake {
        let signal = Signal::Thread { bell, writes_seen };
        let waker = Arc::new(Waker::new(SourceSet::of(sources), signal));
        self.wakers.lock().push(waker.clone());
        Wake { waker }
    }

    /// Whether the file watcher runs (else only the backup poll finds new
    /// data).
    pub fn watching(&self) -> bool {
        self.watcher.lock().is_some()
    }

    /// The node directory name served for `source` (its by-block name when
    /// the source has not appeared yet).
    pub fn source_name(&self, source: Source) -> String {
        if source == Source::OrderbookSnapshots {
            return "l4_snapshots".to_owned();
        }
        self.feeds
            .get(&source)
            .and_then(Feed::source_dir_name)
            .unwrap_or_else(|| source.dir_names()[0].to_owned())
    }

    /// Re-checks the sources `pending` names — the newest files of those
    /// written to, or every directory listed again when `relist` — and
    /// returns how many had something new.
    ///
    /// A source counts as new when its feed's readable generation moved
    /// since the last notification — also when a host thread ran the
    /// refresh that found the growth (they refresh the same shared feeds),
    /// so tail readers are never left waiting for it.
    pub fn refresh(&self, pending: Pending) -> usize {
        let mut changed = 0;
        for (source, feed) in &self.feeds {
            let refreshed = if pending.relist {
                feed.refresh()
            } else if pending.written.contains(*source) {
                feed.refresh_grown()
            } else {
                Ok(false)
            };
            if let Err(error) = refreshed
                && common::metrics::warn_allowed(source.feed_id(), Duration::from_secs(10))
            {
                tracing::warn!(feed = source.feed_id(), %error, "refresh failed");
            }
            let shrinks = feed.shrinks();
            let seen = &self.shrinks_seen[source];
            if seen.swap(shrinks, Ordering::AcqRel) < shrinks {
                tracing::error!(
                    feed = source.feed_id(),
                    files_shrunk = shrinks,
                    "a node file is shorter than what was read from it (rewritten or \
                     truncated; the node only appends): reading it anew; records sent \
                     from its old content past the new end read as zeros"
                );
            }
            let replacements = feed.replacements();
            if self.replacements_seen[source].swap(replacements, Ordering::AcqRel) < replacements {
                tracing::warn!(
                    feed = source.feed_id(),
                    files_replaced = replacements,
                    "a node file was replaced under its name (another file renamed over it, or \
                     rotated): reading the new one from its start; raw-feed streams reading it \
                     end with DATA_LOSS naming the block to resume from"
                );
            }
            changed += usize::from(self.publish(*source, feed));
        }
        if pending.relist {
            match self.snapshots.refresh() {
                Ok(true) => {
                    changed += 1;
                    self.changes[&Source::OrderbookSnapshots].send_modify(|g| *g += 1);
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "snapshot refresh failed"),
            }
        }
        changed
    }

    /// Tells the raw-feed subscribers of `source` about records another
    /// reader's refresh made readable; `true` when there were any.
    fn publish(&self, source: Source, feed: &Feed) -> bool {
        let generation = feed.readable_generation();
        self.changes[&source].send_if_modified(|seen| {
            let moved = *seen != generation;
            *seen = generation;
            moved
        })
    }

    /// Lets go of the resident pages of every feed's files but the newest
    /// file's last [`RESIDENT_TAIL`] bytes (see [`Feed::release_read`]; the
    /// work runs on the feeds' reaper thread). Without it the server's
    /// resident memory would carry every page of node output read this hour
    /// — at mainnet pace, gigabytes the kernel holds in the page cache
    /// anyway.
    pub fn release_read(&self) {
        for feed in self.feeds.values() {
            feed.release_read(RESIDENT_TAIL);
        }
    }

    /// Signals every source whose feed grew through someone else's
    /// refresh (a host thread's), without touching the files.
    pub fn publish_all(&self) {
        for (source, feed) in &self.feeds {
            self.publish(*source, feed);
        }
    }

    /// Runs the refresher until the returned task is aborted: on every
    /// watcher notification, and every `poll` as a backup (listing the
    /// directories again).
    pub fn spawn_refresher(self: &Arc<Self>, poll: Duration) -> tokio::task::JoinHandle<()> {
        let live = self.clone();
        tokio::spawn(async move {
            let Signal::Task(notify) = &live.refresher.signal else {
                return;
            };
            loop {
                let pending = tokio::select! {
                    () = tokio::time::sleep(poll) => Pending::ALL,
                    () = notify.notified() => live.refresher.take(),
                };
                live.refresh(pending);
            }
        })
    }
}
