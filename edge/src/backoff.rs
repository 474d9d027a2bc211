//! Waits between attempts at something that keeps failing (a message bus
//! that is down, say): doubling from a first wait up to a longest, each
//! wait drawn at random between half and all of the current step, so that
//! edges restarted together do not retry in lockstep.
//!
//! Our own few lines rather than a retry crate: the loops that use it reset
//! it from deep inside a long session (once something worked), which the
//! crates' retry-a-closure combinators do not model.

use std::time::Duration;

/// A doubling wait with jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    longest: Duration,
    step: Duration,
}

impl Backoff {
    /// Starts at `first`, doubling up to `longest`.
    pub const fn new(first: Duration, longest: Duration) -> Self {
        Self {
            first,
            longest,
            step: first,
        }
    }

    /// The wait before the next attempt (between half and all of the
    /// current step); the step then doubles, up to the longest.
    pub fn next_wait(&mut self) -> Duration {
        let step = self.step;
        self.step = step.saturating_mul(2).min(self.longest);
        let half = u64::try_from(step.as_millis() / 2).unwrap_or(u64::MAX / 2);
        Duration::from_millis(half + rand::random_range(0..=half))
    }

    /// Something worked: the next failure waits the first step again.
    pub fn reset(&mut self) {
        self.step = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_with_jitter_up_to_the_longest_and_reset() {
        let second = Duration::from_secs(1);
        let mut backoff = Backoff::new(second, 8 * second);
        for step in [1, 2, 4, 8, 8, 8] {
            let wait = backoff.next_wait();
            assert!(
                wait >= second * step / 2 && wait <= second * step,
                "{wait:?} for a step of {step} s"
            );
        }
        backoff.reset();
        assert!(backoff.next_wait() <= second);
        // Not every wait the same: edges restarted together spread out.
        let mut waits: Vec<Duration> = (0..20)
            .map(|_| Backoff::new(8 * second, 8 * second).next_wait())
            .collect();
        waits.dedup();
        assert!(waits.len() > 1, "{waits:?}");
    }
}
