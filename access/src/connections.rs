//! Connection limits shared by both edges: at most `max_connections` open
//! at once (by default what the process's descriptor limit leaves after a
//! reserve for the node's files, the engine and accepting), and at most
//! `max_connections_per_ip` from one source address. A connection over
//! either limit is closed as soon as it is accepted, before any byte is
//! read: a flood from one address cannot take the descriptors every other
//! client and the engine need.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use common::metrics::Metrics;

/// Descriptors kept back from connections: the node's files and their
/// directories, the candle store, the watcher, listeners, logs.
pub const DESCRIPTOR_RESERVE: usize = 256;

/// Connection caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConnectionLimits {
    /// Connections open at once over both edges.
    pub max_total: usize,
    /// Connections open at once from one source address.
    pub max_per_ip: usize,
}

impl ConnectionLimits {
    /// The default total: the soft descriptor limit minus
    /// [`DESCRIPTOR_RESERVE`], at least 16.
    pub fn default_total() -> usize {
        open_files_limit()
            .unwrap_or(1024)
            .saturating_sub(DESCRIPTOR_RESERVE)
            .max(16)
    }

    /// The default per-address cap for a total of `max_total`: a quarter
    /// of it (so one address never takes every place), at most 1000.
    pub fn default_per_ip(max_total: usize) -> usize {
        (max_total / 4).clamp(1, 1_000)
    }
}

impl ConnectionLimits {
    /// These limits with the total brought under the descriptor limit less
    /// [`DESCRIPTOR_RESERVE`] (and the per-address cap under the total),
    /// and the total asked for when it was over: connections must never
    /// take the descriptors the engine needs to list and open node files.
    #[must_use]
    pub fn within_descriptors(self) -> (Self, Option<usize>) {
        let most = Self::default_total();
        let max_total = self.max_total.min(most);
        let limits = Self {
            max_total,
            max_per_ip: self.max_per_ip.min(max_total),
        };
        (
            limits,
            (max_total < self.max_total).then_some(self.max_total),
        )
    }
}

/// Raises this process's soft descriptor limit to its hard one (a server
/// holds a descriptor per connection; the usual soft default of 1024 is
/// meant for interactive programs). The soft limit before and after; `None`
/// when the limits cannot be read or the raise is refused.
pub fn raise_open_files_limit() -> Option<(u64, u64)> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let before = limit.current.unwrap_or(u64::MAX);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        setrlimit(Resource::Nofile, limit).ok()?;
    }
    Some((before, limit.current.unwrap_or(u64::MAX)))
}

/// The soft `RLIMIT_NOFILE` of this process, from `/proc/self/limits`.
pub fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .strip_prefix("Max open files")?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        Some(usize::MAX)
    } else {
        soft.parse().ok()
    }
}

/// The open connections of both edges.
#[derive(Debug, Clone)]
pub struct Connections {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    limits: ConnectionLimits,
    open: Mutex<Open>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_connections` are open.
    Total,
    /// `max_connections_per_ip` are open from this address.
    PerIp,
}

impl Refused {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Total => "max_connections",
            Refused::PerIp => "max_connections_per_ip",
        }
    }
}

impl Connections {
    /// Connections under `limits`, counted in `metrics`.
    pub fn new(limits: ConnectionLimits, metrics: Arc<Metrics>) -> Self {
        Self {
            inner: Arc::new(Inner {
                limits,
                open: Mutex::new(Open::default()),
                metrics,
            }),
        }
    }

    /// Admits a connection of `edge` (`grpc`, `http`) from `peer`; it counts
    /// until the guard drops.
    ///
    /// # Errors
    /// [`Refused`] over either limit (counted, and logged at most every
    /// 10 s per edge).
    pub fn admit(&self, edge: &'static str, peer: IpAddr) -> Result<ConnectionGuard, Refused> {
        let peer = peer.to_canonical();
        let limits = self.inner.limits;
        let verdict = {
            let mut open = self.inner.open.lock();
            let from_peer = open.by_ip.get(&peer).copied().unwrap_or(0);
            if open.total >= limits.max_total {
                Err(Refused::Total)
            } else if from_peer >= limits.max_per_ip {
                Err(Refused::PerIp)
            } else {
                open.total += 1;
                *open.by_ip.entry(peer).or_default() += 1;
                Ok(open.total)
            }
        };
        match verdict {
            Ok(total) => {
                self.inner.metrics.set_open_connections(total as u64);
                Ok(ConnectionGuard {
                    connections: self.clone(),
                    peer,
                })
            }
            Err(refused) => {
                self.inner.metrics.connection_refused(edge, refused.label());
                if common::metrics::warn_allowed(edge, Duration::from_secs(10)) {
                    tracing::warn!(
                        edge,
                        %peer,
                        limit = refused.label(),
                        max_connections = limits.max_total,
                        max_connections_per_ip = limits.max_per_ip,
                        "connection closed at once: over a connection limit \
                         (further ones are counted in l1gate_connections_refused_total)"
                    );
                }
                Err(refused)
            }
        }
    }

    fn release(&self, peer: IpAddr) {
        let total = {
            let mut open = self.inner.open.lock();
            open.total = open.total.saturating_sub(1);
            if let Some(n) = open.by_ip.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    open.by_ip.remove(&peer);
                }
            }
            open.total
        };
        self.inner.metrics.set_open_connections(total as u64);
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnectionGuard {
    connections: Connections,
    peer: IpAddr,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.connections.release(self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn caps_apply_per_address_and_in_total_and_free_on_drop() {
        let connections = Connections::new(
            ConnectionLimits {
                max_total: 3,
                max_per_ip: 2,
            },
            Arc::default(),
        );
        let a1 = connections.admit("http", ip("10.0.0.1")).unwrap();
        let _a2 = connections.admit("grpc", ip("::ffff:10.0.0.1")).unwrap();
        assert_eq!(
            connections.admit("http", ip("10.0.0.1")).unwrap_err(),
            Refused::PerIp
        );
        let _b1 = connections.admit("http", ip("10.0.0.2")).unwrap();
        assert_eq!(
            connections.admit("http", ip("10.0.0.3")).unwrap_err(),
            Refused::Total
        );
        drop(a1);
        let _a3 = connections.admit("http", ip("10.0.0.1")).unwrap();
    }

    #[test]
    fn the_default_total_leaves_the_reserve() {
        let total = ConnectionLimits::default_total();
        assert!(total >= 16);
        if let Some(limit) = open_files_limit().filter(|&l| l < usize::MAX) {
            assert!(total + DESCRIPTOR_RESERVE <= limit.max(16 + DESCRIPTOR_RESERVE));
        }
    }
}
