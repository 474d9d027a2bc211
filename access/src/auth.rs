//! API-key authentication: presented keys (gRPC `x-api-key` metadata, HTTP
//! header or path segment) checked against the keys file's hashes, with hot
//! reload of that file. Keys are never logged; only the key id (a hash
//! prefix) and the account name ever leave this module. Allow-lists and rate
//! limits are applied on top of it by [`crate::access`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;

use crate::denial::Denial;
use crate::keys::{AccountLimits, KeyEntry, KeyStore, KeysFile};
use crate::quota::Quota;

/// gRPC metadata key carrying the API key.
pub const API_KEY_METADATA: &str = "x-api-key";

/// Shared, reloadable view of the keys file.
#[derive(Debug, Clone)]
pub struct Auth {
    store: Arc<RwLock<KeyStore>>,
    /// Bumped on every replacement: open streams are re-checked.
    generation: Arc<tokio::sync::watch::Sender<u64>>,
    /// Why the keys file's last change was not taken (the last good keys
    /// stay in force), until a good one is.
    problem: Arc<RwLock<Option<String>>>,
}

impl Auth {
    /// Wraps a key store.
    pub fn new(store: KeyStore) -> Self {
        Self {
            store: Arc::new(RwLock::new(store)),
            generation: Arc::new(tokio::sync::watch::Sender::new(0)),
            problem: Arc::new(RwLock::new(None)),
        }
    }

    /// Why the keys file's current contents are not in force, if they are
    /// not (`/healthz` reports it).
    pub fn problem(&self) -> Option<String> {
        self.problem.read().clone()
    }

    /// Number of keys in force.
    pub fn keys_in_force(&self) -> usize {
        self.store.read().len()
    }

    /// Replaces the keys in use; whoever watches [`Auth::changes`] re-checks
    /// what was admitted under the old keys.
    pub fn replace(&self, store: KeyStore) {
        *self.store.write() = store;
        self.generation.send_modify(|n| *n += 1);
    }

    /// Changes when the keys in use are replaced.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The entry of the key with id `key_id`, if it is still in force.
    pub fn entry_by_id(&self, key_id: &str) -> Option<KeyEntry> {
        self.store.read().entry_by_id(key_id).cloned()
    }

    /// The entry of a presented key (owner and allow-list).
    ///
    /// # Errors
    /// [`Denial::MissingKey`] for no or an empty key, [`Denial::RejectedKey`]
    /// for an unknown or revoked one.
    pub fn lookup(&self, key: Option<&str>) -> Result<KeyEntry, Denial> {
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Err(Denial::MissingKey);
        };
        self.store
            .read()
            .lookup(key)
            .cloned()
            .ok_or(Denial::RejectedKey)
    }

    /// The quota of the key with id `key_id`, if it is in force and has one.
    pub fn quota(&self, key_id: &str) -> Option<Quota> {
        self.store.read().quota(key_id)
    }

    /// Whether a rotated key's grace period ends in `(after_ms, upto_ms]`.
    pub fn grace_ends_within(&self, after_ms: i64, upto_ms: i64) -> bool {
        self.store.read().grace_ends_within(after_ms, upto_ms)
    }

    /// Every key in force (rotated ones included until they leave the
    /// file).
    pub fn entries(&self) -> Vec<KeyEntry> {
        self.store.read().entries().cloned().collect()
    }

    /// The limits the keys file in force sets for `account`.
    pub fn account_limits(&self, account: &str) -> AccountLimits {
        self.store.read().account_limits(account)
    }

    /// Watches the keys file and swaps in its new contents when it changes,
    /// so a revoked key stops working without a restart. A file that is
    /// missing, holds no account at all (emptied) or fails to parse keeps
    /// the last good keys in force: logged, and reported by `/healthz`
    /// until a good file is back. (Revoking every key is a change like any
    /// other: the accounts are still there.)
    pub fn spawn_reloader(&self, path: PathBuf, every: Duration) -> tokio::task::JoinHandle<()> {
        let auth = self.clone();
        tokio::spawn(async move {
            // File work runs off the runtime's workers: a slow disk must not
            // hold up the edges' tasks.
            let path = Arc::new(path);
            let stat = |path: &Arc<PathBuf>| {
                let path = Arc::clone(path);
                tokio::task::spawn_blocking(move || modified(&path))
            };
            let mut last = stat(&path).await.ok().flatten();
            let mut ticker = tokio::time::interval(every);
            loop {
                ticker.tick().await;
                let Ok(now) = stat(&path).await else {
                    continue;
                };
                if now == last {
                    continue;
                }
                last = now;
                let read = {
                    let path = Arc::clone(&path);
                    tokio::task::spawn_blocking(move || {
                        read_good(&path).map(|file| KeyStore::new(&file))
                    })
                    .await
                };
                let Ok(read) = read else {
                    continue;
                };
                match read {
                    Ok(store) => {
                        tracing::info!(keys = store.len(), path = %path.display(), "keys file reloaded");
                        auth.replace(store);
                        *auth.problem.write() = None;
                    }
                    Err(problem) => {
                        tracing::error!(
                            %problem,
                            "keys file not reloaded; the last good keys stay in force"
                        );
                        *auth.problem.write() = Some(problem);
                    }
                }
            }
        })
    }
}

/// The keys file at `path`, if it is one to take: present, parsed, valid
/// and with at least one account.
fn read_good(path: &std::path::Path) -> Result<KeysFile, String> {
    if !path.exists() {
        return Err(format!("{} is missing", path.display()));
    }
    let file = KeysFile::load(path).map_err(|e| e.to_string())?;
    if file.accounts.is_empty() {
        return Err(format!(
            "{} holds no account (emptied?); revoke keys with `l1gate keys revoke` instead",
            path.display()
        ));
    }
    Ok(file)
}

fn modified(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    std::fs::metadata(path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_unknown_and_valid_keys() {
        let mut file = KeysFile::default();
        let (key, _) = file.add_key("alice", 0).unwrap();
        let auth = Auth::new(KeyStore::new(&file));
        assert_eq!(auth.lookup(None).unwrap_err(), Denial::MissingKey);
        assert_eq!(auth.lookup(Some("")).unwrap_err(), Denial::MissingKey);
        assert_eq!(
            auth.lookup(Some("l1g_00")).unwrap_err(),
            Denial::RejectedKey
        );
        assert_eq!(auth.lookup(Some(&key)).unwrap().principal.account, "alice");
    }
}
