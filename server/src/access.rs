//! Access control shared by the HTTP and gRPC edges: which key is calling,
//! whether its source address is allowed, and whether its account is within
//! its rate limits. One key model, one set of limits and one usage account
//! for every interface.
//!
//! Order of checks, each stopping the request before any work:
//! 1. the key: missing, unknown or revoked → HTTP 401 / gRPC UNAUTHENTICATED;
//! 2. the key's IP allow-list against the TCP peer address → HTTP 403 /
//!    gRPC PERMISSION_DENIED, both carrying the `allow_list_url` link. Such
//!    requests are not counted against rate limits or usage;
//! 3. the account's limits, pooled across all of its keys: a GCRA request
//!    rate (with burst) for HTTP requests and unary gRPC calls, and a cap of
//!    concurrent gRPC streams, held by a [`StreamGuard`] until the stream is
//!    dropped → HTTP 429 with `Retry-After` / gRPC RESOURCE_EXHAUSTED, whose
//!    message says it is a rate limit and not a bad key.
//!
//! Keys never leave [`crate::access::auth`]: rejections, logs and metrics name the
//! key id (`k_` + a prefix of its SHA-256) and the account at most.

pub mod allow_list;
pub mod auth;
pub mod connections;
pub mod denial;
pub mod gcra;
pub mod keys;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt as _};
use parking_lot::Mutex;
use serde::Serialize;
use tonic::{Request, Status};

use crate::metrics::{FeedTraffic, KeyUsage, Metrics};
use auth::{API_KEY_METADATA, Auth};
pub use denial::Denial;
use gcra::Gcra;
use keys::Principal;

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
}

impl Default for AccessSettings {
    fn default() -> Self {
        Self {
            requests_per_second: 50,
            request_burst: 100,
            max_streams: 16,
            allow_list_url: None,
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
        Self {
            inner: Arc::new(Inner {
                auth,
                settings,
                accounts: Mutex::new(HashMap::new()),
                metrics,
                epoch: Instant::now(),
            }),
        }
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
        if !entry.allow_list.permits(peer) {
            return Err(Denial::Forbidden {
                key_id: entry.principal.key_id,
                peer,
                url: self.inner.settings.allow_list_url.clone(),
            });
        }
        Ok(entry.principal)
    }

    /// Step 3 for one HTTP request or unary gRPC call: takes one unit of the
    /// account's request rate and counts the request for the key.
    ///
    /// # Errors
    /// [`Denial::RateLimited`] with the wait until a request conforms.
    pub fn charge_request(&self, principal: &Principal) -> Result<(), Denial> {
        let limits = self.limits(&principal.account);
        let verdict = {
            let mut accounts = self.inner.accounts.lock();
            // Read under the lock: a time read before it could be older than
            // the arrival time another request just set, and be refused.
            let now = self.inner.epoch.elapsed();
            let state = accounts.entry(principal.account.clone()).or_default();
            Gcra::new(limits.rate, limits.burst).check(&mut state.tat, now)
        };
        verdict.map_err(|retry_after| Denial::RateLimited {
            account: principal.account.clone(),
            rate: limits.rate,
            burst: limits.burst,
            retry_after,
        })?;
        self.usage(principal)
            .requests
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Step 3 for a stream: takes one of the account's stream slots until
    /// the returned guard is dropped, and counts the stream for the key.
    ///
    /// # Errors
    /// [`Denial::TooManyStreams`] when the account's streams are all open.
    pub fn open_stream(
        &self,
        principal: &Principal,
        peer: Option<IpAddr>,
    ) -> Result<StreamGuard, Denial> {
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
            peer,
            usage,
            feed: None,
        })
    }

    /// Steps 1 and 2 again for a stream already open: whether its key is
    /// still in force and its source still on the key's allow-list, after
    /// the keys file changed (see [`Auth::changes`]).
    ///
    /// # Errors
    /// [`Denial::RejectedKey`] when the key was revoked or removed,
    /// [`Denial::Forbidden`] when the allow-list no longer admits `peer`.
    pub fn recheck(&self, guard: &StreamGuard) -> Result<(), Denial> {
        let entry = self
            .inner
            .auth
            .entry_by_id(&guard.key_id)
            .ok_or(Denial::RejectedKey)?;
        if entry.allow_list.permits(guard.peer) {
            Ok(())
        } else {
            Err(Denial::Forbidden {
                key_id: guard.key_id.clone(),
                peer: guard.peer,
                url: self.inner.settings.allow_list_url.clone(),
            })
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

    /// The gRPC interceptor: steps 1 and 2 on the lowercase `x-api-key`
    /// metadata and the TCP peer; records the [`Principal`] in the request's
    /// extensions for the service's step 3 ([`Access::grpc_unary`],
    /// [`Access::grpc_stream`]).
    ///
    /// # Errors
    /// UNAUTHENTICATED or PERMISSION_DENIED.
    pub fn intercept(&self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let key = request
            .metadata()
            .get(API_KEY_METADATA)
            .and_then(|v| v.to_str().ok());
        let peer = request.remote_addr().map(|a| a.ip());
        match self.identify(key, peer) {
            Ok(principal) => {
                request.extensions_mut().insert(principal);
                Ok(request)
            }
            Err(denial) => {
                self.record_denial("grpc", &denial);
                Err(denial.to_status())
            }
        }
    }

    fn caller<T>(request: &Request<T>) -> Result<Principal, Status> {
        request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| {
                Status::unauthenticated(
                    "no authenticated caller: the access interceptor did not run",
                )
            })
    }

    /// Step 3 for a unary gRPC call admitted by [`Access::intercept`].
    ///
    /// # Errors
    /// RESOURCE_EXHAUSTED over the rate; UNAUTHENTICATED when the request
    /// did not pass the interceptor.
    pub fn grpc_unary<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let principal = Self::caller(request)?;
        self.charge_request(&principal)
            .inspect(|()| self.inner.metrics.grpc_admission("ok"))
            .map_err(|denial| {
                self.record_denial("grpc", &denial);
                denial.to_status()
            })
    }

    /// Step 3 for a gRPC stream admitted by [`Access::intercept`]: the guard
    /// must live as long as the response stream (see [`guard_stream`]).
    ///
    /// # Errors
    /// RESOURCE_EXHAUSTED at the stream cap; UNAUTHENTICATED when the
    /// request did not pass the interceptor.
    pub fn grpc_stream<T>(&self, request: &Request<T>) -> Result<StreamGuard, Status> {
        let principal = Self::caller(request)?;
        let peer = request.remote_addr().map(|a| a.ip());
        self.open_stream(&principal, peer)
            .inspect(|_| self.inner.metrics.grpc_admission("ok"))
            .map_err(|denial| {
                self.record_denial("grpc", &denial);
                denial.to_status()
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
    /// The TCP peer the stream was admitted from.
    peer: Option<IpAddr>,
    usage: Arc<KeyUsage>,
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

    /// Counts one item of `bytes` payload bytes sent on the stream, with the
    /// block time (Unix ms) of the data it carries when known.
    pub fn sent(&self, bytes: usize, block_time_ms: Option<i64>) {
        let bytes = bytes as u64;
        self.usage.stream_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Some(feed) = &self.feed {
            feed.records.fetch_add(1, Ordering::Relaxed);
            feed.bytes.fetch_add(bytes, Ordering::Relaxed);
            if let Some(ms) = block_time_ms {
                feed.newest_block_time_ms.fetch_max(ms, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.access.close_stream(&self.account);
    }
}

/// Ties `guard` to a response stream: every item passing through is counted
/// with `measure` (payload bytes, block time in Unix ms), and the guard (and the account's stream slot) is released
/// when the stream is dropped — at its end or when the client goes away.
pub fn guard_stream<S, T>(
    stream: S,
    guard: StreamGuard,
    measure: fn(&T) -> (usize, Option<i64>),
) -> impl Stream<Item = Result<T, Status>> + Send + 'static
where
    S: Stream<Item = Result<T, Status>> + Send + 'static,
    T: Send + 'static,
{
    stream.map(move |item| {
        if let Ok(message) = &item {
            let (bytes, block_time_ms) = measure(message);
            guard.sent(bytes, block_time_ms);
        }
        item
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::keys::{KeyStore, KeysFile};

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
        assert_eq!(forbidden.to_status().code(), tonic::Code::PermissionDenied);
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
        assert_eq!(limited.to_status().code(), tonic::Code::ResourceExhausted);
        assert!(limited.message().contains("rate limit"));
        assert!(access.charge_request(&a2).is_err());
        // Another account has its own allowance (the default here).
        assert_eq!(access.charge_request(&b), Ok(()));
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
