//! Engine checkpoints on the bus: the starting state of an edge's market.
//!
//! The node host's engine writes its checkpoints into
//! `state_dir/checkpoints/` ([`engine::checkpoint`]); when it publishes, it
//! also takes one as soon as its fold catches up with the node's files, so
//! edges need not wait for the first periodic one. [`upload`] puts every
//! checkpoint file found there into the JetStream object store bucket
//! [`BUCKET`] under its file name (`checkpoint-<block>.ckpt`, the block
//! padded to 20 digits), and deletes from the bucket the ones the
//! engine pruned, so the bucket holds the same newest few.
//!
//! An edge ((the server's `bus` module)) takes the newest object ([`newest`]),
//! copies it into a directory of its own ([`download`]) and starts its
//! engine from it exactly as the node host resumes from one of its own: the
//! archive is validated (header, CRC-32, `bytecheck`, the state's own
//! rules) before the market is rebuilt, and an archive that fails is
//! refused with the reason.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use engine::checkpoint::file;
use futures_util::StreamExt as _;
use tokio::io::AsyncReadExt as _;

use crate::settings::PublishSettings;
use crate::status::BusStatus;
use edge::backoff::Backoff;

/// The object store bucket holding the publisher's newest checkpoints.
pub const BUCKET: &str = "L1GATE_CHECKPOINTS";
/// How often the publisher looks for new checkpoint files.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// First wait after a failure; doubled (with jitter) up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A checkpoint in the bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnBus {
    /// The object's (and the file's) name.
    pub name: String,
    /// The block it was taken at.
    pub block: u64,
    /// Its size in bytes.
    pub bytes: usize,
}

/// The bucket, created when missing (bounded by `publish_max_bytes`).
async fn bucket(
    context: &jetstream::Context,
    settings: &PublishSettings,
) -> Result<object_store::ObjectStore, String> {
    if let Ok(store) = context.get_object_store(BUCKET).await {
        return Ok(store);
    }
    context
        .create_object_store(object_store::Config {
            bucket: BUCKET.to_owned(),
            description: Some("l1gate engine checkpoints: where edges start".to_owned()),
            // No age bound: the publisher deletes what the engine pruned,
            // and a quiet spell must not empty the bucket edges start from.
            max_bytes: i64::try_from(settings.max_bytes).unwrap_or(i64::MAX),
            ..object_store::Config::default()
        })
        .await
        .map_err(|error| format!("object store {BUCKET}: {error}"))
}

/// The checkpoints in `store`, oldest first.
async fn listed(store: &object_store::ObjectStore) -> Result<Vec<OnBus>, String> {
    let mut list = store
        .list()
        .await
        .map_err(|error| format!("listing {BUCKET}: {error}"))?;
    let mut found = Vec::new();
    while let Some(info) = list.next().await {
        let info = info.map_err(|error| format!("listing {BUCKET}: {error}"))?;
        if info.deleted {
            continue;
        }
        if let Some(block) = file::block_of_name(&info.name) {
            found.push(OnBus {
                name: info.name,
                block,
                bytes: info.size,
            });
        }
    }
    found.sort_by_key(|on_bus| on_bus.block);
    Ok(found)
}

/// The publisher's side: keeps the bucket in step with the checkpoint files
/// in `dir` for as long as it runs (abort the task to stop). Failures are
/// retried with backoff and shown in `status`; serving never waits on them.
pub async fn upload(
    context: jetstream::Context,
    settings: PublishSettings,
    dir: PathBuf,
    status: Arc<BusStatus>,
) {
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    loop {
        let failure = match bucket(&context, &settings).await {
            Ok(store) => keep_in_step(&store, &dir, &status, &mut backoff).await,
            Err(error) => error,
        };
        if common::metrics::warn_allowed("bus checkpoints", Duration::from_secs(30)) {
            tracing::warn!(error = %failure, "bus: putting engine checkpoints on the bus failed; retrying");
        }
        status.set_checkpoint_error(Some(failure));
        tokio::time::sleep(backoff.next_wait()).await;
    }
}

/// Uploads new files and deletes pruned objects until something fails;
/// returns what.
async fn keep_in_step(
    store: &object_store::ObjectStore,
    dir: &Path,
    status: &BusStatus,
    backoff: &mut Backoff,
) -> String {
    let mut on_bus: BTreeSet<String> = match listed(store).await {
        Ok(found) => {
            if let Some(newest) = found.last() {
                status
                    .checkpoint_block
                    .store(newest.block, Ordering::Release);
            }
            found.into_iter().map(|on_bus| on_bus.name).collect()
        }
        Err(error) => return error,
    };
    loop {
        let files = match file::list(dir) {
            Ok(files) => files,
            // No checkpoint written yet.
            Err(_) if !dir.exists() => Vec::new(),
            Err(error) => return format!("listing {}: {error}", dir.display()),
        };
        for checkpoint in &files {
            let Some(name) = checkpoint.path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if on_bus.contains(name) {
                continue;
            }
            let mut opened = match tokio::fs::File::open(&checkpoint.path).await {
                Ok(opened) => opened,
                // Pruned meanwhile.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return format!("reading {}: {error}", checkpoint.path.display()),
            };
            if let Err(error) = store.put(name, &mut opened).await {
                return format!("putting {name} into {BUCKET}: {error}");
            }
            tracing::info!(
                name,
                block = checkpoint.block_number,
                "bus: engine checkpoint published"
            );
            status
                .checkpoint_block
                .fetch_max(checkpoint.block_number, Ordering::AcqRel);
            on_bus.insert(name.to_owned());
        }
        // The engine keeps the newest few files; the bucket follows once
        // there is a file at all (an emptied directory deletes nothing).
        if let Some(oldest) = files.first() {
            let pruned: Vec<String> = on_bus
                .iter()
                .filter(|name| file::block_of_name(name).is_some_and(|b| b < oldest.block_number))
                .cloned()
                .collect();
            for name in pruned {
                if let Err(error) = store.delete(&name).await {
                    return format!("deleting {name} from {BUCKET}: {error}");
                }
                on_bus.remove(&name);
            }
        }
        status.set_checkpoint_error(None);
        backoff.reset();
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Why a checkpoint could not be listed or copied from the bus.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The bus did not answer as asked (the bucket may not exist yet).
    #[error("{0}")]
    Bus(String),
    /// The object's size is not what the bucket listed.
    #[error("{name} from {BUCKET}: {read} bytes read, {listed} listed")]
    Size {
        /// The object.
        name: String,
        /// Bytes read.
        read: usize,
        /// Bytes listed.
        listed: usize,
    },
    /// The local disk failed.
    #[error("{what} {}", path.display())]
    Disk {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The newest checkpoint on the bus (`None`: the bucket is empty).
///
/// # Errors
/// The bus failed to answer, or the bucket does not exist (no publisher
/// has created it yet).
pub async fn newest(context: &jetstream::Context) -> Result<Option<OnBus>, TransferError> {
    let store = context
        .get_object_store(BUCKET)
        .await
        .map_err(|error| TransferError::Bus(format!("object store {BUCKET}: {error}")))?;
    Ok(listed(&store).await.map_err(TransferError::Bus)?.pop())
}

/// Copies `checkpoint` from the bus into `dir` (under its own name, written
/// whole before it appears there); its path.
///
/// # Errors
/// The bus or the disk failed, or the object's size is not what the bucket
/// listed.
pub async fn download(
    context: &jetstream::Context,
    checkpoint: &OnBus,
    dir: &Path,
) -> Result<PathBuf, TransferError> {
    let store = context
        .get_object_store(BUCKET)
        .await
        .map_err(|error| TransferError::Bus(format!("object store {BUCKET}: {error}")))?;
    let mut object = store.get(&checkpoint.name).await.map_err(|error| {
        TransferError::Bus(format!(
            "getting {} from {BUCKET}: {error}",
            checkpoint.name
        ))
    })?;
    let mut bytes = Vec::with_capacity(checkpoint.bytes);
    object.read_to_end(&mut bytes).await.map_err(|error| {
        TransferError::Bus(format!(
            "reading {} from {BUCKET}: {error}",
            checkpoint.name
        ))
    })?;
    if bytes.len() != checkpoint.bytes {
        return Err(TransferError::Size {
            name: checkpoint.name.clone(),
            read: bytes.len(),
            listed: checkpoint.bytes,
        });
    }
    let disk = |what, path: &Path| {
        let path = path.to_owned();
        move |source| TransferError::Disk { what, path, source }
    };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(disk("creating", dir))?;
    let path = dir.join(&checkpoint.name);
    let partial = dir.join(format!("{}.partial", checkpoint.name));
    tokio::fs::write(&partial, &bytes)
        .await
        .map_err(disk("writing", &partial))?;
    tokio::fs::rename(&partial, &path)
        .await
        .map_err(disk("renaming", &partial))?;
    Ok(path)
}
