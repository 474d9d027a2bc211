//! Memory given back after a burst. The allocator (glibc's) keeps what a
//! burst of connections and streams freed in its arenas — one per thread
//! that allocated, up to eight per core — for the next allocations, so the
//! process's resident size stays at the burst's peak long after the clients
//! left. When the clients (open connections plus open streams) have fallen
//! to half a peak at least [`BURST`] above them, the server asks the
//! allocator to return its free pages to the system (`malloc_trim(0)`, on a
//! blocking thread: it walks every arena); checked every [`EVERY`].
//!
//! A burst's memory is not all freed when its clients are counted gone: a
//! stream the server ended still has its queued frames in its connection's
//! buffers until the client reads them or closes the connection, seconds
//! or minutes later. So the trims go on at every check for [`SETTLE`] after
//! a burst ended, and a further fall of the count by [`FALL`] or more within
//! that time starts it again, at most [`RESTARTS`] times (a server whose
//! clients come and go all the time does not trim every 5 s forever). A trim
//! costs milliseconds for a heap of a gigabyte; there are none between
//! bursts. Other allocators (a musl build) return memory their
//! own way; there the watch does nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::metrics::Metrics;

/// How often the clients are counted.
pub const EVERY: Duration = Duration::from_secs(5);

/// Clients a peak must hold above the count now for its end to be a burst.
pub const BURST: u64 = 256;

/// How long the trims go on after a burst ended (or the count last fell).
pub const SETTLE: Duration = Duration::from_secs(60);

/// A fall of the count that starts [`SETTLE`] again.
pub const FALL: u64 = BURST / 8;

/// How many times a burst's [`SETTLE`] starts again.
pub const RESTARTS: u32 = 4;

/// Checks in [`SETTLE`].
const SETTLE_CHECKS: u32 = (SETTLE.as_secs() / EVERY.as_secs()) as u32;

/// Whether a count of clients `now` ends a burst that peaked at `peak`.
pub fn burst_ended(peak: u64, now: u64) -> bool {
    peak >= now.saturating_add(BURST) && now.saturating_mul(2) <= peak
}

/// Why a check trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    /// A burst ended at this check.
    BurstEnded {
        /// The burst's peak.
        peak: u64,
    },
    /// Within [`SETTLE`] of a burst's end: what its clients left since.
    Settling,
}

/// The watch's state between checks.
#[derive(Debug, Default)]
pub struct Watch {
    /// The clients' peak since the last burst ended.
    peak: u64,
    /// The count at the last check.
    last: u64,
    /// Checks left with a trim each.
    settling: u32,
    /// Times the settling may start again.
    restarts: u32,
}

impl Watch {
    /// One check: the peak seen since the last and the count now; whether
    /// to trim, and why.
    pub fn check(&mut self, seen: u64, now: u64) -> Option<Trim> {
        self.peak = self.peak.max(seen);
        let fell = now.saturating_add(FALL) <= self.last;
        self.last = now;
        if burst_ended(self.peak, now) {
            let peak = self.peak;
            self.peak = now;
            self.settling = SETTLE_CHECKS;
            self.restarts = RESTARTS;
            return Some(Trim::BurstEnded { peak });
        }
        if self.settling == 0 {
            return None;
        }
        if fell && self.restarts > 0 {
            self.restarts -= 1;
            self.settling = SETTLE_CHECKS;
        } else {
            self.settling -= 1;
        }
        Some(Trim::Settling)
    }
}

/// Starts the watch on the current runtime: the clients' peak and count
/// read from `metrics` every [`EVERY`], trims as [`Watch::check`] says,
/// counted in `trims`.
pub fn spawn(metrics: Arc<Metrics>, trims: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = Watch::default();
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The peak is kept as clients come and go: a burst shorter
            // than a tick counts too.
            let (seen, now) = metrics.take_clients_peak();
            let Some(why) = watch.check(seen, now) else {
                continue;
            };
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            trims.fetch_add(1, Ordering::Relaxed);
            match why {
                Trim::BurstEnded { peak } => tracing::info!(
                    peak,
                    now,
                    released,
                    "memory: a burst of clients ended; free pages returned"
                ),
                Trim::Settling => tracing::debug!(now, released, "memory: trimmed after a burst"),
            }
        }
    })
}

/// Returns the allocator's free pages to the system; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> bool {
    // SAFETY: `malloc_trim` takes no pointer and may be called from any
    // thread at any time; it locks each arena while it walks it.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// No trim outside glibc: the allocator returns memory its own way.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_when_the_clients_fall_to_half_a_large_peak() {
        assert!(!burst_ended(0, 0));
        assert!(!burst_ended(100, 0), "a peak under the burst size");
        assert!(!burst_ended(10_000, 9_000), "still most of the peak");
        assert!(burst_ended(10_000, 5_000));
        assert!(burst_ended(300, 0));
        assert!(!burst_ended(600, 400), "400 is over half of 600");
    }

    #[test]
    fn trims_go_on_for_a_minute_after_a_burst_and_again_when_the_count_falls() {
        let mut watch = Watch::default();
        assert_eq!(watch.check(0, 0), None, "no clients");
        assert_eq!(watch.check(1_000, 1_000), None, "a burst under way");
        assert_eq!(
            watch.check(1_000, 100),
            Some(Trim::BurstEnded { peak: 1_000 })
        );
        for k in 1..SETTLE_CHECKS {
            assert_eq!(watch.check(100, 100), Some(Trim::Settling), "check {k}");
        }
        // The burst's last clients leave late: the minute starts again.
        assert_eq!(watch.check(100, 60), Some(Trim::Settling));
        for k in 0..SETTLE_CHECKS {
            assert_eq!(watch.check(60, 60), Some(Trim::Settling), "check {k}");
        }
        assert_eq!(watch.check(60, 60), None, "a minute with nothing");
        assert_eq!(watch.check(150, 50), None, "small changes are no burst");
        assert_eq!(
            watch.check(600, 0),
            Some(Trim::BurstEnded { peak: 600 }),
            "the peak since the last burst"
        );
    }

    #[test]
    fn clients_coming_and_going_after_a_burst_do_not_trim_forever() {
        let mut watch = Watch::default();
        assert_eq!(
            watch.check(2_000, 100),
            Some(Trim::BurstEnded { peak: 2_000 })
        );
        // Clients come and go: the count falls by FALL at every other check.
        let mut trims = 0;
        for k in 0..200 {
            let now = if k % 2 == 0 { 200 } else { 200 - FALL };
            if watch.check(200, now).is_some() {
                trims += 1;
            }
        }
        let most = (RESTARTS + 1) * SETTLE_CHECKS;
        assert!(trims <= most, "{trims} trims, at most {most}");
        assert_eq!(
            watch.check(200, 200 - FALL),
            None,
            "the churn trims no more"
        );
    }
}
