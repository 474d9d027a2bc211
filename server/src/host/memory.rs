//! Memory given back after a burst. The allocator (glibc's) keeps what a
//! burst of connections and streams freed in its arenas — one per thread
//! that allocated, up to eight per core — for the next allocations, so the
//! process's resident size stays at the burst's peak long after the clients
//! left. When the clients (open connections plus open streams) have fallen
//! to half a peak at least [`BURST`] above them, the server asks the
//! allocator to return its free pages to the system (`malloc_trim(0)`, on a
//! blocking thread: it walks every arena); checked every [`EVERY`]. A trim
//! costs milliseconds for a heap of a gigabyte and is done once per burst,
//! not on a timer. Other allocators (a musl build) return memory their own
//! way; there the watch does nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::metrics::Metrics;

/// How often the clients are counted.
pub const EVERY: Duration = Duration::from_secs(5);

/// Clients a peak must hold above the count now for its end to be a burst.
pub const BURST: u64 = 256;

/// Whether a count of clients `now` ends a burst that peaked at `peak`.
pub fn burst_ended(peak: u64, now: u64) -> bool {
    peak >= now.saturating_add(BURST) && now.saturating_mul(2) <= peak
}

/// Starts the watch on the current runtime: the clients' peak and count
/// read from `metrics` every [`EVERY`], a trim when a burst ended, counted
/// in `trims`.
pub fn spawn(metrics: Arc<Metrics>, trims: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut peak = 0u64;
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The peak is kept as clients come and go: a burst shorter
            // than a tick counts too.
            let (seen, now) = metrics.take_clients_peak();
            peak = peak.max(seen);
            if burst_ended(peak, now) {
                let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
                trims.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    peak,
                    now,
                    released,
                    "memory: a burst of clients ended; free pages returned"
                );
                peak = now;
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
}
