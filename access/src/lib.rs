//! Access control shared by the HTTP and gRPC edges: which key is calling,
//! whether its source address is allowed, whether the key is within its
//! usage quota, and whether its account is within its rate limits. One key
//! model, one set of limits and one usage account for every interface.
//!
//! Order of checks, each stopping the request before any work:
//! 1. the key: missing, unknown or revoked → HTTP 401 / gRPC UNAUTHENTICATED;
//!    a rotated key whose grace period has ended likewise, with a message
//!    saying it was rotated, when, by which key, and when its grace ended;
//! 2. the key's IP allow-list against the TCP peer address → HTTP 403 /
//!    gRPC PERMISSION_DENIED, both carrying the `allow_list_url` link. Such
//!    requests are not counted against rate limits or usage;
//! 3. the key's usage quota for the period ([`usage`]): its request cap
//!    (one unit per HTTP request, unary gRPC call, gRPC stream opened and
//!    WebSocket subscribe or post) or byte cap used up → HTTP 429 with
//!    `Retry-After` / gRPC RESOURCE_EXHAUSTED, whose message says which
//!    quota and when it resets;
//! 4. the account's limits, pooled across all of its keys: a GCRA request
//!    rate (with burst) for HTTP requests and unary gRPC calls, and a cap of
//!    concurrent gRPC streams, held by a [`StreamGuard`] until the stream is
//!    dropped → HTTP 429 with `Retry-After` / gRPC RESOURCE_EXHAUSTED, whose
//!    message says it is a rate limit and not a bad key. A request refused
//!    here gives back the quota unit step 3 took: refusals are not counted.
//!
//! Streams already open are checked again ([`Access::recheck`]) when the
//! keys file changes, when a rotated key's grace period ends and when a
//! key's byte cap is reached ([`Access::recheck_due`]); the stream
//! supervisor (the server's `grpc::flow`) ends the ones no longer admitted.
//!
//! Keys never leave [`crate::auth`]: rejections, logs and metrics name the
//! key id (`k_` + a prefix of its SHA-256) and the account at most.
//!
//! Nothing here knows an edge's protocol: a check answers a [`Denial`], and
//! each edge adapts it — the gRPC interceptor and admissions with their
//! statuses in the server's `grpc::admission`, the HTTP key check in its
//! `http`, the WebSocket's in its `ws`. This crate depends on no edge: the
//! edges depend on it.

pub mod allow_list;
pub mod auth;
pub mod clock;
pub mod connections;
pub mod denial;
pub mod gcra;
pub mod keys;
pub mod quota;
pub mod report;
pub mod usage;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use auth::Auth;
use clock::Clock;
use common::metrics::{FeedTraffic, KeyUsage, Metrics};
pub use denial::Denial;
use gcra::Gcra;
use keys::{KeyEntry, Principal};
use quota::QuotaKind;
pub use report::{KeyUsageReport, PendingRotation, UsageReport};
pub use usage::ResponseBytes;
use usage::{KeyMeter, Meters};

/// How often the usage keeper looks at every key's period and quota.
const USAGE_TICK: Duration = Duration::from_secs(1);
/// How often (in ticks) the usage file is written when usage changed.
const USAGE_SAVE_TICKS: u32 = 5;

/// Server-wide access settings: the per-account limit defaults (a keys file
/// entry overrides them per account) and the allow-list update link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessSettings {
    /// Default request rate per account (HTTP requests and unary gRPC
    /// calls per second).
    pub requests_per_second: u32,
    /// Default burst of that rate.
    pub request_burst: u32,
    /// Default cap of concurrent gRPC streams per account.
    pub max_streams: u32,
    /// Where a key's owner updates its IP allow-list; sent with every 403 /
    /// PERMISSION_DENIED.
    pub allow_list_url: Option<String>,
    /// The wall clock rotation grace periods and quota periods are judged
    /// by (the system's; tests set a manual one).
    #[serde(skip)]
    pub clock: Clock,
}

impl Default for AccessSettings {
    fn default() -> Self {
        Self {
            requests_per_second: 50,
            request_burst: 100,
            max_streams: 16,
            allow_list_url: None,
            clock: Clock::System,
        }
    }
}

#[derive(Debug, Default)]
struct AccountState {
    /// GCRA theoretical arrival time, since [`Inner::epoch`].
    tat: Duration,
    open_streams: u32,
}

#[derive(Debug)]
struct Inner {
    auth: Auth,
    settings: AccessSettings,
    accounts: Mutex<HashMap<String, AccountState>>,
    metrics: Arc<Metrics>,
    epoch: Instant,
    /// Every key's usage of its quota period.
    meters: Arc<Meters>,
    /// When [`Access::recheck_due`] last looked (clock ms).
    last_recheck_ms: AtomicI64,
}

/// The access gate; cheap to clone.
#[derive(Debug, Clone)]
pub struct Access {
    inner: Arc<Inner>,
}

/// Effective limits of one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limits {
    rate: u32,
    burst: u32,
    max_streams: u32,
}

impl Access {
    /// A gate over the keys of `auth`.
    pub fn new(auth: Auth, settings: AccessSettings, metrics: Arc<Metrics>) -> Self {
        let meters = Arc::new(Meters::new(settings.clock.clone()));
        let now = settings.clock.now_ms();
        Self {
            inner: Arc::new(Inner {
                auth,
                settings,
                accounts: Mutex::new(HashMap::new()),
                metrics,
                epoch: Instant::now(),
                meters,
                last_recheck_ms: AtomicI64::new(now),
            }),
        }
    }

    /// The access clock's time, Unix ms.
    pub fn now_ms(&self) -> i64 {
        self.inner.settings.clock.now_ms()
    }

    /// The keys in force.
    pub fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    /// The server's counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    fn limits(&self, account: &str) -> Limits {
        let file = self.inner.auth.account_limits(account);
        let defaults = &self.inner.settings;
        Limits {
            rate: file
                .requests_per_second
                .unwrap_or(defaults.requests_per_second),
            burst: file.request_burst.unwrap_or(defaults.request_burst),
            max_streams: file.max_streams.unwrap_or(defaults.max_streams),
        }
    }

    /// Steps 1 and 2: the key and its allow-list. Counts nothing against the
    /// account.
    ///
    /// # Errors
    /// [`Denial::MissingKey`], [`Denial::RejectedKey`] or
    /// [`Denial::Forbidden`].
    pub fn identify(&self, key: Option<&str>, peer: Option<IpAddr>) -> Result<Principal, Denial> {
        let entry = self.inner.auth.lookup(key)?;
        Self::check_rotation(&entry, self.now_ms())?;
        if !entry.allow_list.permits(peer) {
            return Err(Denial::Forbidden {
                key_id: entry.principal.key_id,
                peer,
                url: self.inner.settings.allow_list_url.clone(),
            });
        }
        Ok(entry.principal)
    }

    /// A rotated key whose grace period has ended at `now_ms` is refused.
    fn check_rotation(entry: &KeyEntry, now_ms: i64) -> Result<(), Denial> {
        match &entry.rotation {
            Some(rotation) if now_ms >= rotation.grace_until_ms => Err(Denial::RotatedKey {
                key_id: entry.principal.key_id.clone(),
                rotation: rotation.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The usage meter of the caller's key, with its quota as in force.
    fn meter(&self, principal: &Principal, now_ms: i64) -> Arc<KeyMeter> {
        let quota = self.inner.auth.quota(&principal.key_id);
        self.inner.meters.meter(&principal.key_id, quota, now_ms)
    }

    /// Step 3 alone: takes one request of the key's quota (WebSocket
    /// messages, which have their own per-connection rate).
    ///
    /// # Errors
    /// [`Denial::QuotaExhausted`] naming the cap used up.
    pub fn charge_quota(&self, principal: &Principal) -> Result<(), Denial> {
        let now = self.now_ms();
        let meter = self.meter(principal, now);
        meter
            .take_request()
            .map_err(|kind| meter.exhausted(kind, now))
    }

    /// Gives back the quota request of an admitted request that a later
    /// check refused after all (a WebSocket upgrade over the stream cap):
    /// refusals are not counted.
    pub fn refund_quota(&self, principal: &Principal) {
        if let Some(meter) = self.inner.meters.existing(&principal.key_id) {
            meter.give_back_request();
        }
    }

    /// Steps 3 and 4 for one HTTP request or unary gRPC call: takes one
    /// request of the key's quota and one unit of the account's request
    /// rate, and counts the request for the key.
    ///
    /// # Errors
    /// [`Denial::QuotaExhausted`] naming the cap used up;
    /// [`Denial::RateLimited`] with the wait until a request conforms.
    pub fn charge_request(&self, principal: &Principal) -> Result<(), Denial> {
        self.charge(principal).map(drop)
    }

    /// [`Access::charge_request`] for an HTTP request whose response body
    /// is counted toward the key's byte quota through the returned handle.
    ///
    /// # Errors
    /// As [`Access::charge_request`].
    pub fn charge_http_request(&self, principal: &Principal) -> Result<ResponseBytes, Denial> {
        self.charge(principal).map(ResponseBytes)
    }

    fn charge(&self, principal: &Principal) -> Result<Arc<KeyMeter>, Denial> {
        let now = self.now_ms();
        let meter = self.meter(principal, now);
        meter
            .take_request()
            .map_err(|kind| meter.exhausted(kind, now))?;
        let limits = self.limits(&principal.account);
        let verdict = {
            let mut accounts = self.inner.accounts.lock();
            // Read under the lock: a time read before it could be older than
            // the arrival time another request just set, and be refused.
            let now = self.inner.epoch.elapsed();
            let state = accounts.entry(principal.account.clone()).or_default();
            Gcra::new(limits.rate, limits.burst).check(&mut state.tat, now)
        };
        verdict.map_err(|retry_after| {
            meter.give_back_request();
            Denial::RateLimited {
                account: principal.account.clone(),
                rate: limits.rate,
                burst: limits.burst,
                retry_after,
            }
        })?;
        self.usage(principal)
            .requests
            .fetch_add(1, Ordering::Relaxed);
        Ok(meter)
    }

    /// Steps 3 and 4 for a stream whose opening request was counted
    /// already (a WebSocket upgrade passed [`Access::charge_request`]):
    /// refused when the key's byte quota is used up; takes one of the
    /// account's stream slots until the returned guard is dropped, and
    /// counts the stream for the key.
    ///
    /// # Errors
    /// [`Denial::QuotaExhausted`] when the key's byte quota is used up,
    /// [`Denial::TooManyStreams`] when the account's streams are all open.
    pub fn open_stream(
        &self,
        principal: &Principal,
        peer: Option<IpAddr>,
    ) -> Result<StreamGuard, Denial> {
        let now = self.now_ms();
        let meter = self.meter(principal, now);
        if meter.bytes_reached() {
            return Err(meter.exhausted(QuotaKind::Bytes, now));
        }
        let limits = self.limits(&principal.account);
        let open = {
            let mut accounts = self.inner.accounts.lock();
            let state = accounts.entry(principal.account.clone()).or_default();
            if state.open_streams >= limits.max_streams {
                return Err(Denial::TooManyStreams {
                    account: principal.account.clone(),
                    max: limits.max_streams,
                });
            }
            state.open_streams += 1;
            state.open_streams
        };
        self.inner
            .metrics
            .set_open_streams(&principal.account, u64::from(open));
        let usage = self.usage(principal);
        usage.streams_opened.fetch_add(1, Ordering::Relaxed);
        Ok(StreamGuard {
            access: self.clone(),
            account: principal.account.clone(),
            key_id: principal.key_id.clone(),
            admin: principal.admin,
            peer,
            usage,
            meter,
            feed: None,
        })
    }

    /// Steps 1 to 3 again for a stream already open: whether its key is
    /// still in force (not revoked, removed, or rotated past its grace
    /// period), its source still on the key's allow-list, and its byte
    /// quota not used up — after the keys file changed (see
    /// [`Auth::changes`]) or when [`Access::recheck_due`] says so.
    ///
    /// # Errors
    /// [`Denial::RejectedKey`] when the key was revoked or removed,
    /// [`Denial::RotatedKey`] when its grace period ended,
    /// [`Denial::Forbidden`] when the allow-list no longer admits `peer`,
    /// [`Denial::QuotaExhausted`] when its byte quota is used up.
    pub fn recheck(&self, guard: &StreamGuard) -> Result<(), Denial> {
        let entry = self
            .inner
            .auth
            .entry_by_id(&guard.key_id)
            .ok_or(Denial::RejectedKey)?;
        let now = self.now_ms();
        Self::check_rotation(&entry, now)?;
        if !entry.allow_list.permits(guard.peer) {
            return Err(Denial::Forbidden {
                key_id: guard.key_id.clone(),
                peer: guard.peer,
                url: self.inner.settings.allow_list_url.clone(),
            });
        }
        guard.meter.configure(entry.quota, now);
        if guard.meter.bytes_reached() {
            return Err(guard.meter.exhausted(QuotaKind::Bytes, now));
        }
        Ok(())
    }

    /// Whether open streams should be checked again though the keys file
    /// did not change: a rotated key's grace period ended, or a key reached
    /// its byte quota, since the last call. The stream supervisor asks a
    /// few times a second.
    pub fn recheck_due(&self) -> bool {
        let now = self.now_ms();
        let last = self.inner.last_recheck_ms.swap(now, Ordering::AcqRel);
        let reached = self.inner.meters.take_reached();
        reached || self.inner.auth.grace_ends_within(last, now)
    }

    /// Every key in force: its usage this period, its quota and period
    /// end, and its rotation; and the rotations still in their grace
    /// period (for a status page).
    pub fn usage_report(&self) -> UsageReport {
        let now = self.now_ms();
        let mut keys: Vec<KeyUsageReport> = self
            .inner
            .auth
            .entries()
            .into_iter()
            .map(|entry| {
                let meter = self.inner.meters.existing(&entry.principal.key_id);
                if let Some(meter) = &meter {
                    meter.configure(entry.quota, now);
                }
                let period = entry.quota.map_or(usage::DEFAULT_PERIOD, |q| q.period);
                let (start, end) = period.bounds(now);
                let reading = meter.map(|m| m.reading());
                KeyUsageReport {
                    key_id: entry.principal.key_id,
                    account: entry.principal.account,
                    requests: reading.map_or(0, |r| r.requests),
                    bytes: reading.map_or(0, |r| r.bytes),
                    period,
                    period_start_ms: reading.map_or(start, |r| r.period_start_ms),
                    period_end_ms: reading.map_or(end, |r| r.period_end_ms),
                    quota: entry.quota,
                    rotation: entry.rotation,
                }
            })
            .collect();
        keys.sort_by(|a, b| (&a.account, &a.key_id).cmp(&(&b.account, &b.key_id)));
        let pending_rotations = keys
            .iter()
            .filter_map(|key| {
                let rotation = key.rotation.as_ref()?;
                (now < rotation.grace_until_ms).then(|| PendingRotation {
                    key_id: key.key_id.clone(),
                    account: key.account.clone(),
                    rotation: rotation.clone(),
                })
            })
            .collect();
        UsageReport {
            now_ms: now,
            keys,
            pending_rotations,
        }
    }

    /// Looks at every key's period and quota (a reloaded keys file, a
    /// period that ended).
    fn refresh_usage(&self) {
        let now = self.now_ms();
        for meter in self.inner.meters.all() {
            meter.configure(self.inner.auth.quota(meter.key_id()), now);
        }
    }

    /// Restores key usage from `state_dir/usage.json` (a damaged file is
    /// logged and ignored) and keeps it: every second each key's period
    /// and quota are looked at, every few seconds the file is rewritten if
    /// usage changed, and once more when the returned keeper is dropped.
    /// Call it on the server's runtime before serving.
    pub fn keep_usage(&self, state_dir: &Path) -> UsageKeeper {
        let path = state_dir.join(usage::USAGE_FILE);
        self.inner.meters.restore_from(&path);
        let access = self.clone();
        let file = path.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(USAGE_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticks = 0u32;
            loop {
                tick.tick().await;
                access.refresh_usage();
                ticks += 1;
                if !ticks.is_multiple_of(USAGE_SAVE_TICKS) {
                    continue;
                }
                let meters = Arc::clone(&access.inner.meters);
                let file = file.clone();
                match tokio::task::spawn_blocking(move || meters.save(&file)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => tracing::error!(%error, "key usage not saved"),
                    Err(error) => tracing::error!(%error, "key usage save failed"),
                }
            }
        });
        UsageKeeper {
            access: self.clone(),
            path,
            task,
        }
    }

    fn usage(&self, principal: &Principal) -> Arc<KeyUsage> {
        self.inner
            .metrics
            .key(&principal.account, &principal.key_id)
    }

    /// Counts a refusal and logs it at debug level by key id only.
    pub fn record_denial(&self, edge: &'static str, denial: &Denial) {
        self.inner.metrics.rejection(edge, denial.reason());
        if edge == "grpc" {
            self.inner.metrics.grpc_admission(denial.grpc_code());
        }
        tracing::debug!(edge, reason = denial.reason(), "request refused");
    }

    /// Steps 3 and 4 for a stream of an identified caller: one request of
    /// the key's quota, then one of the account's stream slots; the guard
    /// must live as long as the stream.
    ///
    /// # Errors
    /// The [`Denial`] over the quota or at the stream cap (the request
    /// taken is given back then).
    pub fn admit_stream(
        &self,
        principal: &Principal,
        peer: Option<IpAddr>,
    ) -> Result<StreamGuard, Denial> {
        let now = self.now_ms();
        let meter = self.meter(principal, now);
        meter
            .take_request()
            .map_err(|kind| meter.exhausted(kind, now))
            .and_then(|()| {
                self.open_stream(principal, peer).inspect_err(|_| {
                    meter.give_back_request();
                })
            })
    }

    fn close_stream(&self, account: &str) {
        let open = {
            let mut accounts = self.inner.accounts.lock();
            let Some(state) = accounts.get_mut(account) else {
                return;
            };
            state.open_streams = state.open_streams.saturating_sub(1);
            state.open_streams
        };
        self.inner
            .metrics
            .set_open_streams(account, u64::from(open));
    }
}

/// One open stream of an account: dropping it frees the account's slot.
#[derive(Debug)]
pub struct StreamGuard {
    access: Access,
    account: String,
    key_id: String,
    admin: bool,
    /// The TCP peer the stream was admitted from.
    peer: Option<IpAddr>,
    usage: Arc<KeyUsage>,
    /// The key's usage of its quota period.
    meter: Arc<KeyMeter>,
    feed: Option<Arc<FeedTraffic>>,
}

impl StreamGuard {
    /// Also counts what is sent under a raw feed's traffic counters.
    #[must_use]
    pub fn for_feed(mut self, feed_id: &'static str) -> Self {
        self.feed = Some(self.access.metrics().feed(feed_id));
        self
    }

    /// The id of the key the stream was opened with (logged, never the
    /// key).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Who opened the stream.
    pub fn principal(&self) -> Principal {
        Principal {
            account: self.account.clone(),
            key_id: self.key_id.clone(),
            admin: self.admin,
        }
    }

    /// Counts one item of `bytes` payload bytes sent on the stream, with the
    /// block time (Unix ms) of the data it carries when known. Lock-free.
    /// A stream that must end when the key's byte quota is used up calls
    /// [`StreamGuard::sent_within_quota`] instead.
    pub fn sent(&self, bytes: usize, block_time_ms: Option<i64>) {
        let _ = self.sent_within_quota(bytes, block_time_ms);
    }

    /// [`StreamGuard::sent`], and whether the key is still within its byte
    /// quota.
    ///
    /// # Errors
    /// The refusal to end the stream with once the key's byte quota is
    /// used up (the item counted is still delivered).
    pub fn sent_within_quota(
        &self,
        bytes: usize,
        block_time_ms: Option<i64>,
    ) -> Result<(), Denial> {
        let bytes = bytes as u64;
        self.usage.stream_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(feed) = &self.feed {
            feed.records.fetch_add(1, Ordering::Relaxed);
            feed.bytes.fetch_add(bytes, Ordering::Relaxed);
            if let Some(ms) = block_time_ms {
                feed.newest_block_time_ms.fetch_max(ms, Ordering::Relaxed);
            }
        }
        if self.meter.add_bytes(bytes) {
            Err(self.meter.exhausted(QuotaKind::Bytes, self.access.now_ms()))
        } else {
            Ok(())
        }
    }
}

/// Keeps key usage for a running server (see [`Access::keep_usage`]): its
/// background task stops, and the usage is written a last time, when it
/// is dropped.
#[derive(Debug)]
pub struct UsageKeeper {
    access: Access,
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl UsageKeeper {
    /// The gate whose usage it keeps.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Every key's usage and the pending rotations.
    pub fn report(&self) -> UsageReport {
        self.access.usage_report()
    }

    /// Writes the usage file now if usage changed since it was last
    /// written.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn save(&self) -> std::io::Result<bool> {
        self.access.inner.meters.save(&self.path)
    }
}

impl Drop for UsageKeeper {
    fn drop(&mut self) {
        self.task.abort();
        if let Err(error) = self.save() {
            tracing::error!(%error, path = %self.path.display(), "key usage not saved at shutdown");
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.access.close_stream(&self.account);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyStore, KeysFile};
    use crate::quota::{Period, Quota};

    fn gate(file: &KeysFile, settings: AccessSettings) -> Access {
        Access::new(
            Auth::new(KeyStore::new(file)),
            settings,
            Arc::new(Metrics::default()),
        )
    }

    #[test]
    fn checks_run_in_order_key_then_allow_list() {
        let mut file = KeysFile::default();
        let (key, stored) = file.add_key("alice", 0).unwrap();
        file.allow(&stored.id, "10.0.0.0/8").unwrap();
        let access = gate(
            &file,
            AccessSettings {
                allow_list_url: Some("https://keys.example/allow".into()),
                ..AccessSettings::default()
            },
        );
        let outside = Some("192.0.2.1".parse().unwrap());
        assert_eq!(access.identify(None, outside), Err(Denial::MissingKey));
        assert_eq!(
            access.identify(Some("l1g_bad"), outside),
            Err(Denial::RejectedKey)
        );
        let forbidden = access.identify(Some(&key), outside).unwrap_err();
        assert_eq!(forbidden.http_status(), 403);
        assert!(forbidden.message().contains("https://keys.example/allow"));
        assert!(forbidden.message().contains(&stored.id));
        assert!(!forbidden.message().contains(&key));
        let inside = Some("10.2.3.4".parse().unwrap());
        assert_eq!(
            access.identify(Some(&key), inside).unwrap().account,
            "alice"
        );
    }

    #[test]
    fn the_request_rate_is_pooled_across_an_accounts_keys() {
        let mut file = KeysFile::default();
        let (first, _) = file.add_key("alice", 0).unwrap();
        let (second, _) = file.add_key("alice", 0).unwrap();
        let (other, _) = file.add_key("bob", 0).unwrap();
        file.accounts[0].requests_per_second = Some(1);
        file.accounts[0].request_burst = Some(2);
        let access = gate(&file, AccessSettings::default());
        let a1 = access.identify(Some(&first), None).unwrap();
        let a2 = access.identify(Some(&second), None).unwrap();
        let b = access.identify(Some(&other), None).unwrap();
        assert_eq!(access.charge_request(&a1), Ok(()));
        assert_eq!(access.charge_request(&a2), Ok(()));
        let limited = access.charge_request(&a1).unwrap_err();
        assert_eq!(limited.http_status(), 429);
        assert!(limited.retry_after().unwrap() > Duration::from_millis(900));
        assert_eq!(limited.http_status(), 429);
        assert!(limited.message().contains("rate limit"));
        assert!(access.charge_request(&a2).is_err());
        // Another account has its own allowance (the default here).
        assert_eq!(access.charge_request(&b), Ok(()));
    }

    fn at(text: &str) -> i64 {
        feeds::time::parse_iso8601_ms(text).unwrap()
    }

    #[test]
    fn a_rotated_key_works_until_its_grace_ends_then_says_it_was_rotated() {
        let clock = Clock::manual(at("2026-05-05T12:00:00Z"));
        let mut file = KeysFile::default();
        let (old_key, old) = file.add_key("alice", 0).unwrap();
        let (new_key, new) = file.rotate(&old.id, clock.now_ms(), 3_600_000).unwrap();
        let access = gate(
            &file,
            AccessSettings {
                clock: clock.clone(),
                ..AccessSettings::default()
            },
        );
        let alice = access.identify(Some(&old_key), None).unwrap();
        let guard = access.open_stream(&alice, None).unwrap();
        assert_eq!(access.recheck(&guard), Ok(()));
        assert!(!access.recheck_due());
        let report = access.usage_report();
        assert_eq!(report.pending_rotations.len(), 1);
        assert_eq!(report.pending_rotations[0].key_id, old.id);

        clock.advance(Duration::from_secs(3_600));
        assert!(access.recheck_due(), "the grace end is noticed once");
        assert!(!access.recheck_due());
        let refused = access.identify(Some(&old_key), None).unwrap_err();
        assert_eq!(refused.http_status(), 401);
        assert_eq!(refused.reason(), "rotated_key");
        assert_eq!(refused.http_status(), 401);
        assert_eq!(
            refused.message(),
            format!(
                "API key {} was rotated at 2026-05-05T12:00:00Z (replaced by {}); its grace \
                 period ended at 2026-05-05T13:00:00Z: use the new key",
                old.id, new.id
            )
        );
        assert!(!refused.message().contains("unknown"));
        assert_eq!(access.recheck(&guard), Err(refused));
        assert!(access.identify(Some(&new_key), None).is_ok());
        assert!(access.usage_report().pending_rotations.is_empty());
    }

    #[test]
    fn the_quota_is_checked_before_the_rate_and_refusals_are_not_counted() {
        let clock = Clock::manual(at("2026-05-05T23:00:00Z"));
        let mut file = KeysFile::default();
        let (key, stored) = file.add_key("alice", 0).unwrap();
        file.set_quota(
            &stored.id,
            Some(Quota {
                period: Period::Day,
                requests: Some(2),
                bytes: None,
            }),
        )
        .unwrap();
        file.accounts[0].requests_per_second = Some(1);
        file.accounts[0].request_burst = Some(1);
        let access = gate(
            &file,
            AccessSettings {
                clock: clock.clone(),
                ..AccessSettings::default()
            },
        );
        let alice = access.identify(Some(&key), None).unwrap();
        // A WebSocket upgrade refused at the stream cap gives its unit back.
        assert_eq!(access.charge_quota(&alice), Ok(()));
        access.refund_quota(&alice);
        assert_eq!(access.usage_report().keys[0].requests, 0);
        assert_eq!(access.charge_request(&alice), Ok(()));
        // Over the rate: refused, and the quota unit given back.
        let limited = access.charge_request(&alice).unwrap_err();
        assert_eq!(limited.reason(), "rate_limited");
        assert_eq!(access.usage_report().keys[0].requests, 1);
        // A message over nothing but the quota (WebSocket) takes the last.
        assert_eq!(access.charge_quota(&alice), Ok(()));
        let exhausted = access.charge_request(&alice).unwrap_err();
        assert_eq!(exhausted.reason(), "quota_exceeded");
        assert_eq!(exhausted.http_status(), 429);
        assert_eq!(exhausted.retry_after(), Some(Duration::from_secs(3_600)));
        assert_eq!(
            exhausted.message(),
            format!(
                "usage quota exhausted (not a key problem): key {} has used its daily request \
                 quota of 2 requests; usage resets at 2026-05-06T00:00:00Z",
                stored.id
            )
        );
        assert!(!exhausted.message().contains("rate limit"));
        // A new day: usage starts from zero.
        clock.advance(Duration::from_secs(3_600));
        std::thread::sleep(Duration::from_millis(1_100));
        assert_eq!(access.charge_request(&alice), Ok(()));
        let report = access.usage_report();
        assert_eq!(report.keys[0].requests, 1);
        assert_eq!(report.keys[0].period_end_ms, at("2026-05-07T00:00:00Z"));
    }

    #[test]
    fn a_used_up_byte_quota_ends_streams_and_refuses_new_ones() {
        let clock = Clock::manual(at("2026-05-05T12:00:00Z"));
        let mut file = KeysFile::default();
        let (key, stored) = file.add_key("alice", 0).unwrap();
        file.set_quota(
            &stored.id,
            Some(Quota {
                period: Period::Month,
                requests: None,
                bytes: Some(1_000),
            }),
        )
        .unwrap();
        let access = gate(
            &file,
            AccessSettings {
                clock,
                ..AccessSettings::default()
            },
        );
        let alice = access.identify(Some(&key), None).unwrap();
        let sender = access.open_stream(&alice, None).unwrap();
        let quiet = access.open_stream(&alice, None).unwrap();
        assert_eq!(sender.sent_within_quota(600, None), Ok(()));
        assert!(!access.recheck_due());
        let ended = sender.sent_within_quota(600, None).unwrap_err();
        assert_eq!(ended.quota().map(|q| q.0), Some(QuotaKind::Bytes));
        assert!(
            ended.message().contains("monthly byte quota of 1KB sent"),
            "{}",
            ended.message()
        );
        assert!(
            ended.message().contains("2026-06-01T00:00:00Z"),
            "{}",
            ended.message()
        );
        // The other streams of the key are looked at, and end too.
        assert!(access.recheck_due());
        assert_eq!(access.recheck(&quiet), Err(ended.clone()));
        assert_eq!(access.open_stream(&alice, None).unwrap_err(), ended);
        assert_eq!(
            access
                .charge_request(&alice)
                .unwrap_err()
                .quota()
                .map(|q| q.0),
            Some(QuotaKind::Bytes)
        );
    }

    #[test]
    fn a_stream_slot_is_held_until_its_guard_drops() {
        let mut file = KeysFile::default();
        let (key, _) = file.add_key("alice", 0).unwrap();
        let access = gate(
            &file,
            AccessSettings {
                max_streams: 2,
                ..AccessSettings::default()
            },
        );
        let alice = access.identify(Some(&key), None).unwrap();
        let first = access.open_stream(&alice, None).unwrap();
        let _second = access.open_stream(&alice, None).unwrap();
        assert_eq!(
            access.open_stream(&alice, None).unwrap_err(),
            Denial::TooManyStreams {
                account: "alice".into(),
                max: 2
            }
        );
        drop(first);
        assert!(access.open_stream(&alice, None).is_ok());
        let usage = access.usage(&alice);
        assert_eq!(usage.streams_opened.load(Ordering::Relaxed), 3);
    }
}
