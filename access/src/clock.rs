//! The access layer's wall clock (Unix ms, UTC): what rotation grace
//! periods and usage-quota periods are judged by. The system clock in a
//! server; a manual one, moved by hand, in tests that cross a grace end or
//! a period boundary without waiting for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Wall time in Unix ms. Cheap to clone; clones of a manual clock share its
/// time.
#[derive(Clone, Default)]
pub enum Clock {
    /// The system's clock.
    #[default]
    System,
    /// A clock that stands still until [`Clock::set_ms`] or
    /// [`Clock::advance`] moves it.
    Manual(Arc<AtomicI64>),
}

impl Clock {
    /// A manual clock reading `start_ms`.
    pub fn manual(start_ms: i64) -> Self {
        Self::Manual(Arc::new(AtomicI64::new(start_ms)))
    }

    /// The time now, Unix ms.
    pub fn now_ms(&self) -> i64 {
        match self {
            Self::System => common::unix_now_ms(),
            Self::Manual(ms) => ms.load(Ordering::Acquire),
        }
    }

    /// Sets a manual clock to `ms`; the system clock is left alone.
    pub fn set_ms(&self, ms: i64) {
        if let Self::Manual(now) = self {
            now.store(ms, Ordering::Release);
        }
    }

    /// Moves a manual clock forward by `by`; the system clock is left alone.
    pub fn advance(&self, by: Duration) {
        if let Self::Manual(now) = self {
            let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
            now.fetch_add(by, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::System => f.write_str("Clock::System"),
            Self::Manual(ms) => write!(f, "Clock::Manual({})", ms.load(Ordering::Relaxed)),
        }
    }
}

/// Two system clocks are the same clock; manual clocks are the same when
/// they share their time.
impl PartialEq for Clock {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::System, Self::System) => true,
            (Self::Manual(a), Self::Manual(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Clock {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_by_hand_and_its_clones_follow() {
        let clock = Clock::manual(1_000);
        let clone = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clone.now_ms(), 3_000);
        clone.set_ms(10);
        assert_eq!(clock.now_ms(), 10);
        assert_eq!(clock, clone);
        assert_ne!(clock, Clock::manual(10));
        assert_eq!(Clock::System, Clock::default());
        assert!(Clock::System.now_ms() > 1_700_000_000_000);
    }
}
