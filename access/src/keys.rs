//! API keys: accounts own keys; the keys file stores only each key's SHA-256,
//! never the key itself. One key model for every interface.
//!
//! File format (TOML), written atomically with owner-only permissions:
//!
//! ```toml
//! [[accounts]]
//! name = "alice"
//! requests_per_second = 50        # optional; default: the `requests_per_second` setting
//! request_burst = 100             # optional; default: the `request_burst` setting
//! max_streams = 16                # optional; default: the `max_streams` setting
//!
//! [[accounts.keys]]
//! id = "k_3f9a1c2b7d4e"          # public handle: prefix of the hash
//! sha256 = "3f9a1c2b7d4e…"       # hex SHA-256 of the key
//! created_ms = 1779000000000
//! revoked = false
//! allow_list = []                 # CIDRs; empty = any source address
//! rotated_from = "k_0d1e2f3a4b5c" # optional: the key this one replaced
//!
//! [accounts.keys.quota]           # optional: usage quota of this key
//! period = "day"                  # "day" or "month" (UTC calendar)
//! requests = 100000               # optional: admitted requests per period
//! bytes = 10000000000             # optional: bytes sent per period
//!
//! [accounts.keys.rotated]         # optional: set by `l1gate keys rotate`
//! at_ms = 1779000000000           # when it was rotated
//! replaced_by = "k_9a8b7c6d5e4f"  # the new key's id
//! grace_until_ms = 1779086400000  # refused from then on
//! ```
//!
//! Every field after `allow_list` is optional, so files written before
//! rotation and quotas existed load unchanged.
//!
//! Rate limits belong to the account and are pooled across all its keys;
//! allow-lists and quotas belong to each key. [`KeysFile::load`] rejects a file whose
//! account names, limits or allow-list entries are invalid, naming the field.
//!
//! A key is `l1g_` followed by 64 hex digits (256 random bits). It is printed
//! once when created and never logged.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand::RngCore as _;

use crate::allow_list::{AllowList, parse_network};
use crate::quota::Quota;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

/// Prefix of every key this service issues.
pub const KEY_PREFIX: &str = "l1g_";

/// Errors reading, writing or changing the keys file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeysError {
    /// The file could not be read or written.
    #[error("keys file {path}: {source}")]
    Io {
        /// The keys file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("keys file {path}: {message}")]
    Parse {
        /// The keys file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An account name is empty or has characters other than
    /// `[A-Za-z0-9_.-]`.
    #[error("account name {0:?} must be 1-64 characters of A-Z a-z 0-9 _ . -")]
    BadAccountName(String),
    /// No key has that id.
    #[error("no key with id {0:?}")]
    UnknownKeyId(String),
    /// A field of the file has an invalid value.
    #[error("keys file {path}: {field}: {message}")]
    Invalid {
        /// The keys file.
        path: PathBuf,
        /// Which field, e.g. `accounts[alice].keys[k_…].allow_list[0]`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An allow-list entry given on the command line is not a network.
    #[error("--cidr: {0}")]
    BadCidr(String),
    /// No account has that name.
    #[error("no account named {0:?}")]
    UnknownAccount(String),
    /// A limit was set to zero.
    #[error("{0} must be at least 1 (use --default to return to the server default)")]
    ZeroLimit(&'static str),
    /// The key was rotated already: rotate its replacement instead.
    #[error("key {id} was already rotated (replaced by {by}); rotate {by} instead")]
    AlreadyRotated {
        /// The key.
        id: String,
        /// Its replacement.
        by: String,
    },
    /// A revoked key cannot be rotated.
    #[error("key {0} is revoked: add a new key with `l1gate keys add` instead")]
    Revoked(String),
    /// A quota given on the command line caps nothing or caps at zero.
    #[error("quota: {0}")]
    BadQuota(&'static str),
}

/// That a key was rotated: by which key, and until when it keeps working.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotation {
    /// When it was rotated, Unix ms.
    pub at_ms: i64,
    /// The id of the key that replaced it.
    pub replaced_by: String,
    /// The end of its grace period, Unix ms: from then on it is refused.
    pub grace_until_ms: i64,
}

/// One stored key (its hash, never the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredKey {
    /// Public handle, `k_` + the first 12 hex digits of the hash.
    pub id: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
    /// Creation time, Unix ms.
    #[serde(default)]
    pub created_ms: i64,
    /// A revoked key is rejected like an unknown one.
    #[serde(default)]
    pub revoked: bool,
    /// Source networks allowed to use the key (CIDR); empty = any.
    #[serde(default)]
    pub allow_list: Vec<String>,
    /// The key this one replaced (`l1gate keys rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_from: Option<String>,
    /// Its usage quota; `None` = no quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// Set when the key was rotated: it works until the grace period ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated: Option<Rotation>,
}

/// An account and its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Account name.
    pub name: String,
    /// Request rate limit (HTTP requests and unary gRPC calls per second),
    /// pooled across the account's keys; `None` = the server default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u32>,
    /// Burst allowance of the request rate limit; `None` = the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_burst: Option<u32>,
    /// Concurrent gRPC streams, pooled across the account's keys; `None` =
    /// the server default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// What the account may do beyond the data APIs.
    #[serde(default, skip_serializing_if = "Role::is_user")]
    pub role: Role,
    /// Its keys.
    #[serde(default)]
    pub keys: Vec<StoredKey>,
}

/// An account's role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The data APIs.
    #[default]
    User,
    /// Also the operator status page (`/{key}/status`).
    Admin,
}

impl Role {
    /// Whether this is the default role.
    pub fn is_user(&self) -> bool {
        *self == Role::User
    }
}

/// The whole keys file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysFile {
    /// Every account.
    #[serde(default)]
    pub accounts: Vec<Account>,
}

/// Who a presented key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Account name.
    pub account: String,
    /// Key id (safe to log).
    pub key_id: String,
    /// Whether the account has the admin role.
    pub admin: bool,
}

/// `path` with `.suffix` appended to its file name (`keys.toml.lock`).
fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

/// A name for a temporary file no other writer uses: process id and a
/// counter.
fn temporary_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{n}.tmp", std::process::id())
}

/// Hex SHA-256 of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A fresh random key.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{KEY_PREFIX}{}", hex::encode(bytes))
}

fn key_id(hash: &str) -> String {
    format!("k_{}", &hash[..12])
}

fn valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl KeysFile {
    /// Reads a keys file; a missing file is an empty one.
    ///
    /// # Errors
    /// [`KeysError`] when the file exists but cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Self, KeysError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(KeysError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let file: Self = toml::from_str(&text).map_err(|e| KeysError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        file.validate()
            .map_err(|(field, message)| KeysError::Invalid {
                path: path.to_owned(),
                field,
                message,
            })?;
        Ok(file)
    }

    /// Checks account names, limits and allow-list entries.
    ///
    /// # Errors
    /// The first invalid field's path (`accounts[NAME].max_streams`) and
    /// what is wrong with it.
    pub fn validate(&self) -> Result<(), (String, String)> {
        for (index, account) in self.accounts.iter().enumerate() {
            if !valid_account_name(&account.name) {
                return Err((
                    format!("accounts[{index}].name"),
                    format!(
                        "{:?} must be 1-64 characters of A-Z a-z 0-9 _ . -",
                        account.name
                    ),
                ));
            }
            for (field, value) in [
                ("requests_per_second", account.requests_per_second),
                ("request_burst", account.request_burst),
                ("max_streams", account.max_streams),
            ] {
                if value == Some(0) {
                    return Err((
                        format!("accounts[{}].{field}", account.name),
                        "must be at least 1 (omit it for the server default)".to_owned(),
                    ));
                }
            }
            for key in &account.keys {
                if let Some(problem) = key.quota.as_ref().and_then(Quota::problem) {
                    return Err((
                        format!("accounts[{}].keys[{}].quota", account.name, key.id),
                        problem.to_owned(),
                    ));
                }
                for (position, entry) in key.allow_list.iter().enumerate() {
                    parse_network(entry).map_err(|message| {
                        (
                            format!(
                                "accounts[{}].keys[{}].allow_list[{position}]",
                                account.name, key.id
                            ),
                            message,
                        )
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Writes the file atomically (temp file + rename), readable by the
    /// owner only.
    ///
    /// # Errors
    /// [`KeysError::Io`] when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), KeysError> {
        let io = |source| KeysError::Io {
            path: path.to_owned(),
            source,
        };
        let text = toml::to_string_pretty(self).map_err(|e| KeysError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io)?;
        }
        // A name of its own: another writer's temporary file is never
        // renamed from under it.
        let tmp = sibling(path, &temporary_name());
        {
            let mut options = fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt as _;
                options.mode(0o600);
            }
            let mut file = options.open(&tmp).map_err(io)?;
            file.write_all(b"# l1gate keys: SHA-256 hashes only, never keys.\n")
                .map_err(io)?;
            file.write_all(text.as_bytes()).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        fs::rename(&tmp, path).map_err(io)
    }

    /// Reads, changes and writes the file under an exclusive lock (a
    /// `.lock` file beside it), so that concurrent `l1gate keys` commands
    /// never lose each other's changes. Nothing is written when `change`
    /// fails.
    ///
    /// # Errors
    /// [`KeysError`] from reading, `change` or writing; [`KeysError::Io`]
    /// when the lock cannot be taken.
    pub fn edit<T>(
        path: &Path,
        change: impl FnOnce(&mut KeysFile) -> Result<T, KeysError>,
    ) -> Result<T, KeysError> {
        let io = |source| KeysError::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let lock_path = sibling(path, "lock");
        let mut options = fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let lock = options.open(&lock_path).map_err(|source| KeysError::Io {
            path: lock_path.clone(),
            source,
        })?;
        lock.lock().map_err(|source| KeysError::Io {
            path: lock_path,
            source,
        })?;
        let mut file = Self::load(path)?;
        let out = change(&mut file)?;
        file.save(path)?;
        // Closing the lock file releases the lock.
        drop(lock);
        Ok(out)
    }

    /// Creates a key for `account` (creating the account if needed) and
    /// returns the key itself — the only time it exists outside the caller.
    ///
    /// # Errors
    /// [`KeysError::BadAccountName`] for an invalid name.
    pub fn add_key(
        &mut self,
        account: &str,
        now_ms: i64,
    ) -> Result<(String, StoredKey), KeysError> {
        if !valid_account_name(account) {
            return Err(KeysError::BadAccountName(account.to_owned()));
        }
        let key = generate_key();
        let sha256 = hash_key(&key);
        let stored = StoredKey {
            id: key_id(&sha256),
            sha256,
            created_ms: now_ms,
            revoked: false,
            allow_list: Vec::new(),
            rotated_from: None,
            quota: None,
            rotated: None,
        };
        let index = if let Some(index) = self.accounts.iter().position(|a| a.name == account) {
            index
        } else {
            self.accounts.push(Account {
                name: account.to_owned(),
                requests_per_second: None,
                request_burst: None,
                max_streams: None,
                role: Role::User,
                keys: Vec::new(),
            });
            self.accounts.len() - 1
        };
        self.accounts[index].keys.push(stored.clone());
        Ok((key, stored))
    }

    /// Marks the key with `id` revoked.
    ///
    /// # Errors
    /// [`KeysError::UnknownKeyId`] when no key has that id.
    pub fn revoke(&mut self, id: &str) -> Result<(), KeysError> {
        let key = self
            .accounts
            .iter_mut()
            .flat_map(|a| a.keys.iter_mut())
            .find(|k| k.id == id)
            .ok_or_else(|| KeysError::UnknownKeyId(id.to_owned()))?;
        key.revoked = true;
        Ok(())
    }

    /// Rotates the key with `id`: creates a new key for the same account
    /// with the same allow-list and quota, and records on the old one when
    /// it was rotated, by which key, and that it keeps working until
    /// `now_ms + grace_ms`. Returns the new key — the only time it exists
    /// outside the caller — and its stored form.
    ///
    /// # Errors
    /// [`KeysError::UnknownKeyId`] when no key has that id,
    /// [`KeysError::Revoked`] for a revoked key,
    /// [`KeysError::AlreadyRotated`] for a key rotated before.
    pub fn rotate(
        &mut self,
        id: &str,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<(String, StoredKey), KeysError> {
        let (account, old) = self
            .accounts
            .iter()
            .find_map(|a| Some((a.name.clone(), a.keys.iter().find(|k| k.id == id)?.clone())))
            .ok_or_else(|| KeysError::UnknownKeyId(id.to_owned()))?;
        if old.revoked {
            return Err(KeysError::Revoked(id.to_owned()));
        }
        if let Some(rotation) = &old.rotated {
            return Err(KeysError::AlreadyRotated {
                id: id.to_owned(),
                by: rotation.replaced_by.clone(),
            });
        }
        let (key, mut stored) = self.add_key(&account, now_ms)?;
        stored.allow_list = old.allow_list;
        stored.quota = old.quota;
        stored.rotated_from = Some(id.to_owned());
        *self.key_mut(&stored.id)? = stored.clone();
        self.key_mut(id)?.rotated = Some(Rotation {
            at_ms: now_ms,
            replaced_by: stored.id.clone(),
            grace_until_ms: now_ms.saturating_add(grace_ms.max(0)),
        });
        Ok((key, stored))
    }

    /// Sets the quota of the key with `id` (replacing any it had), or
    /// removes it with `None`.
    ///
    /// # Errors
    /// [`KeysError::BadQuota`] for a quota capping nothing or capping at
    /// zero, [`KeysError::UnknownKeyId`] when no key has that id.
    pub fn set_quota(&mut self, id: &str, quota: Option<Quota>) -> Result<(), KeysError> {
        if let Some(problem) = quota.as_ref().and_then(Quota::problem) {
            return Err(KeysError::BadQuota(problem));
        }
        self.key_mut(id)?.quota = quota;
        Ok(())
    }

    fn key_mut(&mut self, id: &str) -> Result<&mut StoredKey, KeysError> {
        self.accounts
            .iter_mut()
            .flat_map(|a| a.keys.iter_mut())
            .find(|k| k.id == id)
            .ok_or_else(|| KeysError::UnknownKeyId(id.to_owned()))
    }

    /// Adds a network to a key's allow-list (normalised: `10.1.2.3/8` is
    /// stored as `10.0.0.0/8`) and returns it; already listed is not an
    /// error.
    ///
    /// # Errors
    /// [`KeysError::BadCidr`] for an entry that is not a network,
    /// [`KeysError::UnknownKeyId`] when no key has that id.
    pub fn allow(&mut self, id: &str, cidr: &str) -> Result<String, KeysError> {
        let network = parse_network(cidr).map_err(KeysError::BadCidr)?.to_string();
        let key = self.key_mut(id)?;
        if !key.allow_list.contains(&network) {
            key.allow_list.push(network.clone());
        }
        Ok(network)
    }

    /// Changes an account's limits: with `reset`, every limit first returns
    /// to the server default; then each `Some` field of `limits` is set.
    ///
    /// # Errors
    /// [`KeysError::ZeroLimit`] for a zero value (naming its flag),
    /// [`KeysError::UnknownAccount`] when no account has that name.
    pub fn set_limits(
        &mut self,
        account: &str,
        limits: AccountLimits,
        reset: bool,
    ) -> Result<(), KeysError> {
        for (flag, value) in [
            ("--requests-per-second", limits.requests_per_second),
            ("--request-burst", limits.request_burst),
            ("--max-streams", limits.max_streams),
        ] {
            if value == Some(0) {
                return Err(KeysError::ZeroLimit(flag));
            }
        }
        let entry = self
            .accounts
            .iter_mut()
            .find(|a| a.name == account)
            .ok_or_else(|| KeysError::UnknownAccount(account.to_owned()))?;
        if reset {
            entry.requests_per_second = None;
            entry.request_burst = None;
            entry.max_streams = None;
        }
        entry.requests_per_second = limits.requests_per_second.or(entry.requests_per_second);
        entry.request_burst = limits.request_burst.or(entry.request_burst);
        entry.max_streams = limits.max_streams.or(entry.max_streams);
        Ok(())
    }

    /// Sets an account's role.
    ///
    /// # Errors
    /// [`KeysError::UnknownAccount`] when no account has that name.
    pub fn set_role(&mut self, account: &str, role: Role) -> Result<(), KeysError> {
        let entry = self
            .accounts
            .iter_mut()
            .find(|a| a.name == account)
            .ok_or_else(|| KeysError::UnknownAccount(account.to_owned()))?;
        entry.role = role;
        Ok(())
    }

    /// Removes a network from a key's allow-list; returns whether it was
    /// listed. Removing the last one leaves the key unrestricted.
    ///
    /// # Errors
    /// [`KeysError::BadCidr`] for an entry that is not a network,
    /// [`KeysError::UnknownKeyId`] when no key has that id.
    pub fn disallow(&mut self, id: &str, cidr: &str) -> Result<bool, KeysError> {
        let network = parse_network(cidr).map_err(KeysError::BadCidr)?;
        let key = self.key_mut(id)?;
        let before = key.allow_list.len();
        key.allow_list
            .retain(|entry| parse_network(entry).ok() != Some(network));
        Ok(key.allow_list.len() != before)
    }
}

/// A usable key: who owns it, where it may be used from, its quota, and
/// whether it was rotated (then it works until its grace period ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    /// Owner.
    pub principal: Principal,
    /// Source networks allowed to use it.
    pub allow_list: AllowList,
    /// Its usage quota, if it has one.
    pub quota: Option<Quota>,
    /// Its rotation, if it was rotated.
    pub rotation: Option<Rotation>,
}

/// Per-account limits from the keys file; `None` = the server default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountLimits {
    /// Requests per second.
    pub requests_per_second: Option<u32>,
    /// Burst.
    pub request_burst: Option<u32>,
    /// Concurrent streams.
    pub max_streams: Option<u32>,
}

/// Lookup table from key hash to principal, built from a [`KeysFile`].
#[derive(Debug, Clone, Default)]
pub struct KeyStore {
    by_hash: HashMap<String, KeyEntry>,
    /// Key id → hash, for re-checking open streams after a reload.
    by_id: HashMap<String, String>,
    limits: HashMap<String, AccountLimits>,
    /// Grace ends of the rotated keys in force, sorted.
    grace_ends: Vec<i64>,
}

impl KeyStore {
    /// Indexes the non-revoked keys of a file.
    pub fn new(file: &KeysFile) -> Self {
        let mut by_hash = HashMap::new();
        let mut by_id = HashMap::new();
        let mut limits = HashMap::new();
        let mut grace_ends = Vec::new();
        for account in &file.accounts {
            limits.insert(
                account.name.clone(),
                AccountLimits {
                    requests_per_second: account.requests_per_second,
                    request_burst: account.request_burst,
                    max_streams: account.max_streams,
                },
            );
            for key in account.keys.iter().filter(|k| !k.revoked) {
                by_id.insert(key.id.clone(), key.sha256.to_ascii_lowercase());
                by_hash.insert(
                    key.sha256.to_ascii_lowercase(),
                    KeyEntry {
                        principal: Principal {
                            account: account.name.clone(),
                            key_id: key.id.clone(),
                            admin: account.role == Role::Admin,
                        },
                        allow_list: AllowList::from_entries(&key.allow_list),
                        quota: key.quota,
                        rotation: key.rotated.clone(),
                    },
                );
                grace_ends.extend(key.rotated.as_ref().map(|r| r.grace_until_ms));
            }
        }
        grace_ends.sort_unstable();
        Self {
            by_hash,
            by_id,
            limits,
            grace_ends,
        }
    }

    /// The quota of the key with id `key_id`, if it is in force and has one.
    pub fn quota(&self, key_id: &str) -> Option<Quota> {
        self.entry_by_id(key_id)?.quota
    }

    /// Whether a rotated key's grace period ends in `(after_ms, upto_ms]`.
    pub fn grace_ends_within(&self, after_ms: i64, upto_ms: i64) -> bool {
        let first_after = self.grace_ends.partition_point(|&end| end <= after_ms);
        self.grace_ends
            .get(first_after)
            .is_some_and(|&end| end <= upto_ms)
    }

    /// Every key in force: its entry.
    pub fn entries(&self) -> impl Iterator<Item = &KeyEntry> {
        self.by_hash.values()
    }

    /// The entry of the key with id `key_id`, if it is in force.
    pub fn entry_by_id(&self, key_id: &str) -> Option<&KeyEntry> {
        self.by_hash.get(self.by_id.get(key_id)?)
    }

    /// The principal owning `key`, if it is known and not revoked.
    pub fn authenticate(&self, key: &str) -> Option<&Principal> {
        self.lookup(key).map(|entry| &entry.principal)
    }

    /// The entry of `key` (owner and allow-list), if known and not revoked.
    pub fn lookup(&self, key: &str) -> Option<&KeyEntry> {
        self.by_hash.get(&hash_key(key))
    }

    /// The limits the keys file sets for `account` (all `None` when unknown).
    pub fn account_limits(&self, account: &str) -> AccountLimits {
        self.limits.get(account).copied().unwrap_or_default()
    }

    /// Number of usable keys.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether no key is usable.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_authenticates_and_only_its_hash_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let mut file = KeysFile::load(&path).unwrap();
        let (key, stored) = file.add_key("alice", 1).unwrap();
        file.save(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&key), "the key itself must never be stored");
        assert!(text.contains(&stored.sha256));
        let store = KeyStore::new(&KeysFile::load(&path).unwrap());
        assert_eq!(
            store.authenticate(&key),
            Some(&Principal {
                account: "alice".into(),
                key_id: stored.id.clone(),
                admin: false,
            })
        );
        assert_eq!(store.authenticate("l1g_wrong"), None);
    }

    #[test]
    fn revoked_keys_are_rejected() {
        let mut file = KeysFile::default();
        let (key, stored) = file.add_key("bob", 1).unwrap();
        file.revoke(&stored.id).unwrap();
        assert!(KeyStore::new(&file).authenticate(&key).is_none());
        assert!(matches!(
            file.revoke("k_nope"),
            Err(KeysError::UnknownKeyId(_))
        ));
    }

    #[test]
    fn allow_lists_are_normalised_edited_and_reach_the_store() {
        let mut file = KeysFile::default();
        let (key, stored) = file.add_key("carol", 1).unwrap();
        assert_eq!(file.allow(&stored.id, "10.9.8.7/8").unwrap(), "10.0.0.0/8");
        assert_eq!(file.allow(&stored.id, "10.0.0.0/8").unwrap(), "10.0.0.0/8");
        file.allow(&stored.id, "2001:db8::/32").unwrap();
        assert_eq!(
            file.accounts[0].keys[0].allow_list,
            vec!["10.0.0.0/8".to_owned(), "2001:db8::/32".to_owned()]
        );
        let store = KeyStore::new(&file);
        let entry = store.lookup(&key).unwrap();
        assert!(entry.allow_list.permits(Some("10.1.1.1".parse().unwrap())));
        assert!(!entry.allow_list.permits(Some("127.0.0.1".parse().unwrap())));
        assert!(file.disallow(&stored.id, "10.0.0.0/8").unwrap());
        assert!(!file.disallow(&stored.id, "10.0.0.0/8").unwrap());
        assert!(matches!(
            file.allow(&stored.id, "10.0.0/8"),
            Err(KeysError::BadCidr(m)) if m.contains("10.0.0/8")
        ));
        assert!(matches!(
            file.allow("k_nope", "10.0.0.0/8"),
            Err(KeysError::UnknownKeyId(_))
        ));
    }

    #[test]
    fn account_limits_are_set_reset_and_validated() {
        let mut file = KeysFile::default();
        file.add_key("dave", 0).unwrap();
        let some = AccountLimits {
            requests_per_second: Some(5),
            request_burst: None,
            max_streams: Some(2),
        };
        file.set_limits("dave", some, false).unwrap();
        let burst_only = AccountLimits {
            request_burst: Some(9),
            ..AccountLimits::default()
        };
        file.set_limits("dave", burst_only, false).unwrap();
        let dave = &file.accounts[0];
        assert_eq!(
            (
                dave.requests_per_second,
                dave.request_burst,
                dave.max_streams
            ),
            (Some(5), Some(9), Some(2))
        );
        file.set_limits("dave", AccountLimits::default(), true)
            .unwrap();
        let dave = &file.accounts[0];
        assert_eq!(
            (
                dave.requests_per_second,
                dave.request_burst,
                dave.max_streams
            ),
            (None, None, None)
        );
        let zero = AccountLimits {
            max_streams: Some(0),
            ..AccountLimits::default()
        };
        assert!(matches!(
            file.set_limits("dave", zero, false),
            Err(KeysError::ZeroLimit("--max-streams"))
        ));
        assert!(matches!(
            file.set_limits("erin", some, false),
            Err(KeysError::UnknownAccount(_))
        ));
    }

    #[test]
    fn invalid_fields_in_the_file_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let cases = [
            (
                "[[accounts]]\nname = \"a\"\nmax_streams = 0\n",
                "accounts[a].max_streams",
            ),
            ("[[accounts]]\nname = \"a b\"\n", "accounts[0].name"),
            (
                "[[accounts]]\nname = \"a\"\n[[accounts.keys]]\nid = \"k_1\"\nsha256 = \"00\"\nallow_list = [\"10.0.0.0/8\", \"nope\"]\n",
                "accounts[a].keys[k_1].allow_list[1]",
            ),
        ];
        for (text, field) in cases {
            fs::write(&path, text).unwrap();
            let err = KeysFile::load(&path).unwrap_err().to_string();
            assert!(err.contains(field), "{err} should name {field}");
        }
        fs::write(
            &path,
            "[[accounts]]\nname = \"a\"\nrequests_per_second = 5\nrequest_burst = 7\n",
        )
        .unwrap();
        let store = KeyStore::new(&KeysFile::load(&path).unwrap());
        assert_eq!(
            store.account_limits("a"),
            AccountLimits {
                requests_per_second: Some(5),
                request_burst: Some(7),
                max_streams: None
            }
        );
    }

    #[test]
    fn rotation_creates_a_replacement_and_records_it_on_the_old_key() {
        let mut file = KeysFile::default();
        let (old_key, old) = file.add_key("alice", 1).unwrap();
        file.allow(&old.id, "10.0.0.0/8").unwrap();
        let quota = Quota {
            period: crate::quota::Period::Day,
            requests: Some(10),
            bytes: None,
        };
        file.set_quota(&old.id, Some(quota)).unwrap();
        let (new_key, new) = file.rotate(&old.id, 1_000, 60_000).unwrap();
        assert_ne!(new_key, old_key);
        assert_eq!(new.allow_list, vec!["10.0.0.0/8".to_owned()]);
        assert_eq!(new.quota, Some(quota));
        assert_eq!(new.rotated_from.as_deref(), Some(old.id.as_str()));
        let stored_old = &file.accounts[0].keys[0];
        assert_eq!(
            stored_old.rotated,
            Some(Rotation {
                at_ms: 1_000,
                replaced_by: new.id.clone(),
                grace_until_ms: 61_000,
            })
        );
        assert_eq!(file.accounts[0].keys.len(), 2, "same account");
        // Both work in the store; the old one carries its rotation.
        let store = KeyStore::new(&file);
        assert_eq!(store.lookup(&new_key).unwrap().rotation, None);
        assert!(store.lookup(&old_key).unwrap().rotation.is_some());
        assert!(store.grace_ends_within(60_999, 61_000));
        assert!(!store.grace_ends_within(61_000, 70_000));
        assert!(!store.grace_ends_within(0, 60_999));
        assert_eq!(store.quota(&new.id), Some(quota));
        // Once only; revoked keys are not rotated.
        assert!(matches!(
            file.rotate(&old.id, 2_000, 0),
            Err(KeysError::AlreadyRotated { by, .. }) if by == new.id
        ));
        file.revoke(&new.id).unwrap();
        assert!(matches!(
            file.rotate(&new.id, 2_000, 0),
            Err(KeysError::Revoked(_))
        ));
        assert!(matches!(
            file.rotate("k_nope", 2_000, 0),
            Err(KeysError::UnknownKeyId(_))
        ));
    }

    #[test]
    fn quotas_are_set_cleared_validated_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let mut file = KeysFile::default();
        let (_, key) = file.add_key("alice", 1).unwrap();
        let quota = Quota {
            period: crate::quota::Period::Month,
            requests: None,
            bytes: Some(10_000_000_000),
        };
        file.set_quota(&key.id, Some(quota)).unwrap();
        file.rotate(&key.id, 5, 10).unwrap();
        file.save(&path).unwrap();
        assert_eq!(KeysFile::load(&path).unwrap(), file);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("period = \"month\""), "{text}");
        assert!(matches!(
            file.set_quota(
                &key.id,
                Some(Quota {
                    bytes: None,
                    ..quota
                })
            ),
            Err(KeysError::BadQuota(_))
        ));
        file.set_quota(&key.id, None).unwrap();
        assert_eq!(file.accounts[0].keys[0].quota, None);
        // A quota capping nothing in the file is named.
        fs::write(
            &path,
            "[[accounts]]\nname = \"a\"\n[[accounts.keys]]\nid = \"k_1\"\nsha256 = \"00\"\n[accounts.keys.quota]\nperiod = \"day\"\n",
        )
        .unwrap();
        let err = KeysFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("accounts[a].keys[k_1].quota"), "{err}");
    }

    #[test]
    fn a_keys_file_from_before_rotation_and_quotas_loads_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        fs::write(
            &path,
            "[[accounts]]\nname = \"a\"\nmax_streams = 2\n\n[[accounts.keys]]\nid = \"k_3f9a1c2b7d4e\"\nsha256 = \"3f9a1c2b7d4e00\"\ncreated_ms = 1779000000000\nrevoked = false\nallow_list = []\n",
        )
        .unwrap();
        let file = KeysFile::load(&path).unwrap();
        let key = &file.accounts[0].keys[0];
        assert_eq!(
            (&key.rotated, &key.quota, &key.rotated_from),
            (&None, &None, &None)
        );
        file.save(&path).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("quota") && !text.contains("rotated"),
            "no new fields are written for keys without them:\n{text}"
        );
    }

    #[test]
    fn account_names_are_validated() {
        let mut file = KeysFile::default();
        assert!(matches!(
            file.add_key("bad name", 1),
            Err(KeysError::BadAccountName(_))
        ));
        assert!(matches!(
            file.add_key("", 1),
            Err(KeysError::BadAccountName(_))
        ));
    }
}
