//! The node's feeds as seen by the edges: one [`Feed`] per source plus the
//! snapshot catalog, and a change signal per source that wakes subscribers
//! when new records become readable.
//!
//! One refresher task re-checks the files on every change notification from
//! the file watcher (a wake-up hint) and on a short poll interval (the
//! truth, since notifications can be missed), and bumps the source's signal
//! when anything new became readable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use feeds::{Feed, FeedError, Snapshots, Source};
use tokio::sync::{Notify, watch};

/// Every feed of one data directory, with change signals.
pub struct LiveFeeds {
    data_dir: PathBuf,
    feeds: HashMap<Source, Feed>,
    snapshots: Snapshots,
    changes: HashMap<Source, watch::Sender<u64>>,
    wake: Arc<Notify>,
    watcher: parking_lot::Mutex<Option<feeds::Watcher>>,
}

impl std::fmt::Debug for LiveFeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveFeeds")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl LiveFeeds {
    /// Opens every source under `data_dir` (absent sources are empty feeds
    /// that may appear later).
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
        let wake = Arc::new(Notify::new());
        let live = Arc::new(Self {
            data_dir: data_dir.to_owned(),
            feeds,
            snapshots,
            changes,
            wake: wake.clone(),
            watcher: parking_lot::Mutex::new(None),
        });
        match feeds::Watcher::new(data_dir, move || wake.notify_one()) {
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

    /// Re-checks every source once; returns how many had something new.
    ///
    /// A source counts as new when its feed's readable generation moved
    /// since the last notification — also when the engine thread or the
    /// candle writer ran the refresh that found the growth (they refresh the
    /// same shared feeds), so tail readers are never left waiting for it.
    pub fn refresh_all(&self) -> usize {
        let mut changed = 0;
        for (source, feed) in &self.feeds {
            if let Err(error) = feed.refresh() {
                tracing::warn!(feed = source.feed_id(), %error, "refresh failed");
            }
            let generation = feed.readable_generation();
            let moved = self.changes[source].send_if_modified(|seen| {
                let moved = *seen != generation;
                *seen = generation;
                moved
            });
            if moved {
                changed += 1;
            }
        }
        match self.snapshots.refresh() {
            Ok(true) => {
                changed += 1;
                self.changes[&Source::OrderbookSnapshots].send_modify(|g| *g += 1);
            }
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, "snapshot refresh failed"),
        }
        changed
    }

    /// Runs the refresher until the returned task is aborted.
    pub fn spawn_refresher(self: &Arc<Self>, poll: Duration) -> tokio::task::JoinHandle<()> {
        let live = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(poll) => {}
                    () = live.wake.notified() => {}
                }
                live.refresh_all();
            }
        })
    }
}
