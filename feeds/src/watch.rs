//! Filesystem change notifications as wake-up hints: [`Watcher`] calls a
//! callback whenever anything under the node root (or a snapshot location)
//! changes, saying whether a file was written to ([`Change::Written`], with
//! the line source it belongs to: a reader re-stats that source's newest
//! file, [`crate::Feed::refresh_grown`]) or files came or went
//! ([`Change::Listing`]: a reader lists the directories again,
//! [`crate::Feed::refresh`]).
//!
//! A notification carries no data and may be late, coalesced or missing
//! (notify backends drop events under load, and network filesystems send
//! none). Its only job is to make a reader call [`crate::Feed::refresh`]
//! sooner; correctness never depends on it, because refresh re-lists and
//! re-stats and cursors hold committed byte offsets. Keep a slow poll
//! running beside it.

use std::path::{Component, Path};

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use crate::error::FeedError;
use crate::layout::node_root;
use crate::source::Source;

/// What a change notification says about the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// A file was written to (appended): one of this line source's files,
    /// or `None` for any other file (a snapshot being written).
    Written(Option<Source>),
    /// A file or directory was created, removed or renamed, or the watcher
    /// lost track (an error, an overflowed event queue): list again.
    Listing,
}

/// Calls a callback on any change under a data directory's node root, in
/// the data directory itself (snapshot files) and in its `l4_snapshots/`.
///
/// Dropping the `Watcher` stops the notifications.
pub struct Watcher {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

impl Watcher {
    /// Starts watching `data_dir`: its node root recursively (see
    /// [`node_root`]), plus `data_dir` and `data_dir/l4_snapshots`
    /// non-recursively when the node root is `data_dir/hl/data`.
    ///
    /// `on_change` runs on the watcher's own thread for every event and
    /// every watcher error; keep it short (e.g. notify a condition or a
    /// channel).
    ///
    /// # Errors
    /// [`FeedError::Io`] with op `watch` when the platform watcher cannot be
    /// created or a path cannot be watched.
    pub fn new(
        data_dir: &Path,
        on_change: impl Fn(Change) + Send + 'static,
    ) -> Result<Watcher, FeedError> {
        let root = node_root(data_dir);
        let sources_root = root.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                use notify::EventKind;
                use notify::event::ModifyKind;
                let change = match &event {
                    // Opening or reading a file is not a change. Refresh
                    // itself opens directories and files, so waking on those
                    // events would make every refresh trigger the next one.
                    // Nor is a change of permissions or times.
                    Ok(event)
                        if matches!(
                            event.kind,
                            EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_))
                        ) =>
                    {
                        return;
                    }
                    Ok(event)
                        if matches!(
                            event.kind,
                            EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any)
                        ) =>
                    {
                        let source = event
                            .paths
                            .first()
                            .and_then(|path| line_source_of(&sources_root, path));
                        Change::Written(source)
                    }
                    _ => Change::Listing,
                };
                on_change(change);
            })
            .map_err(|e| watch_error(data_dir, &e))?;
        watcher
            .watch(&root, RecursiveMode::Recursive)
            .map_err(|e| watch_error(&root, &e))?;
        if root != data_dir {
            watcher
                .watch(data_dir, RecursiveMode::NonRecursive)
                .map_err(|e| watch_error(data_dir, &e))?;
            let snapshots = data_dir.join("l4_snapshots");
            if snapshots.is_dir() {
                watcher
                    .watch(&snapshots, RecursiveMode::NonRecursive)
                    .map_err(|e| watch_error(&snapshots, &e))?;
            }
        }
        Ok(Watcher { _watcher: watcher })
    }
}

/// The line source whose directory holds `path` under the node root
/// (`<root>/node_fills_by_block/hourly/…` is [`Source::Fills`]).
fn line_source_of(root: &Path, path: &Path) -> Option<Source> {
    let Some(Component::Normal(dir)) = path.strip_prefix(root).ok()?.components().next() else {
        return None;
    };
    let dir = dir.to_str()?;
    Source::ALL
        .into_iter()
        .find(|source| source.is_line_feed() && source.dir_names().contains(&dir))
}

fn watch_error(path: &Path, error: &notify::Error) -> FeedError {
    let io = match &error.kind {
        notify::ErrorKind::Io(io) => std::io::Error::new(io.kind(), error.to_string()),
        _ => std::io::Error::other(error.to_string()),
    };
    FeedError::io("watch", path, &io)
}
