//! The generic cell rate algorithm: a request rate with a burst allowance,
//! kept as one "theoretical arrival time" per account. Pure: the caller
//! passes the time (as a duration since any fixed instant).
//!
//! With emission interval `T = 1 s / rate` and tolerance `τ = T·(burst−1)`,
//! a request at `now` conforms when `max(tat, now) − now ≤ τ`; it then moves
//! `tat` to `max(tat, now) + T`. A burst of `burst` requests at one instant
//! conforms, the next must wait `T`; a non-conforming request changes
//! nothing and learns how long to wait.

use std::time::Duration;

/// A rate limit: `rate` requests per second with bursts of up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    interval: Duration,
    tolerance: Duration,
}

impl Gcra {
    /// `rate` requests per second, bursts of `burst`; both are at least 1
    /// (zeros are raised to 1). Rates above 10^9/s are measured as 10^9/s
    /// (a one-nanosecond interval).
    pub fn new(rate: u32, burst: u32) -> Self {
        let interval = (Duration::from_secs(1) / rate.max(1)).max(Duration::from_nanos(1));
        Self {
            interval,
            tolerance: interval * (burst.max(1) - 1),
        }
    }

    /// `count` requests per `period`, all of them at once at most (the
    /// exchange's "2,000 messages a minute").
    pub fn per(count: u32, period: Duration) -> Self {
        let interval = (period / count.max(1)).max(Duration::from_nanos(1));
        Self {
            interval,
            tolerance: interval * (count.max(1) - 1),
        }
    }

    /// Admits one request at `now` against the account's arrival time `tat`.
    ///
    /// # Errors
    /// How long until a request would conform, leaving `tat` unchanged.
    pub fn check(&self, tat: &mut Duration, now: Duration) -> Result<(), Duration> {
        let start = (*tat).max(now);
        let ahead = start.saturating_sub(now);
        if ahead > self.tolerance {
            return Err(ahead.saturating_sub(self.tolerance));
        }
        *tat = start + self.interval;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_full_burst_conforms_and_the_next_request_waits_one_interval() {
        let limit = Gcra::new(10, 3);
        let mut tat = Duration::ZERO;
        let now = Duration::from_secs(5);
        for _ in 0..3 {
            assert_eq!(limit.check(&mut tat, now), Ok(()));
        }
        assert_eq!(limit.check(&mut tat, now), Err(100 * MS));
        // A rejected request does not push the arrival time further.
        assert_eq!(limit.check(&mut tat, now + 40 * MS), Err(60 * MS));
        assert_eq!(limit.check(&mut tat, now + 100 * MS), Ok(()));
        assert_eq!(limit.check(&mut tat, now + 100 * MS), Err(100 * MS));
    }

    #[test]
    fn a_count_per_period_allows_the_count_then_one_per_share_of_it() {
        let limit = Gcra::per(2_000, Duration::from_secs(60));
        let mut tat = Duration::ZERO;
        let now = Duration::from_secs(1);
        for _ in 0..2_000 {
            assert_eq!(limit.check(&mut tat, now), Ok(()));
        }
        assert_eq!(limit.check(&mut tat, now), Err(30 * MS));
        assert_eq!(limit.check(&mut tat, now + 30 * MS), Ok(()));
    }

    #[test]
    fn a_steady_rate_at_the_limit_always_conforms() {
        let limit = Gcra::new(4, 1);
        let mut tat = Duration::ZERO;
        for i in 0..20u32 {
            assert_eq!(limit.check(&mut tat, 250 * MS * i), Ok(()), "request {i}");
        }
        assert_eq!(limit.check(&mut tat, 250 * MS * 19 + MS), Err(249 * MS));
    }

    #[test]
    fn the_highest_rates_keep_a_nonzero_interval() {
        let limit = Gcra::new(u32::MAX, 1);
        let mut tat = Duration::ZERO;
        let now = Duration::from_secs(1);
        assert_eq!(limit.check(&mut tat, now), Ok(()));
        assert_eq!(tat, now + Duration::from_nanos(1));
    }

    #[test]
    fn idle_time_refills_the_burst_but_never_beyond_it() {
        let limit = Gcra::new(1, 2);
        let mut tat = Duration::ZERO;
        let later = Duration::from_secs(3600);
        assert!(limit.check(&mut tat, later).is_ok());
        assert!(limit.check(&mut tat, later).is_ok());
        assert!(limit.check(&mut tat, later).is_err());
    }
}
