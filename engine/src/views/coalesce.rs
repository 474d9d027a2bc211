//! Coalescing of the aggregated-book views: with a window `w`, an L2 book
//! subscription sends at most one frame per `w` of block time (the newest
//! state; its `block_number` may skip), and an L2 diff subscription merges
//! the changes of the blocks inside the window into one frame per window —
//! per coin, the newest state of each changed level, a snapshot entry
//! replacing what came before it. L2 diff levels carry absolute sizes, so a
//! merged frame applied after any opening snapshot of the window leaves the
//! same book.
//!
//! A window of zero (the default) passes every block's frames through.
//! Held changes leave with the first block at or after the window's end,
//! stamped with that block: nothing changed since, so it is that block's
//! state.

use crate::market::Position;

/// A frame that can stand for several blocks' frames of one window.
pub trait Coalesce {
    /// Folds `next`, a later frame of the same window, into this one.
    fn absorb(&mut self, next: Self);
    /// Stamps the frame with the block it leaves at.
    fn restamp(&mut self, at: Position);
}

/// One subscription's coalescing state.
#[derive(Debug, Clone)]
pub struct Coalescer<F> {
    window_ms: i64,
    /// Block time of the last frame sent (or of the opening).
    last_sent_ms: i64,
    pending: Option<F>,
}

impl<F: Coalesce> Coalescer<F> {
    /// A coalescer of `window_ms` whose first window starts at `opened_ms`.
    pub fn new(window_ms: i64, opened_ms: i64) -> Self {
        Self {
            window_ms,
            last_sent_ms: opened_ms,
            pending: None,
        }
    }

    /// Takes one block's frames (the block at `at`) and returns what to
    /// send now.
    pub fn push(&mut self, frames: Vec<F>, at: Position) -> Vec<F> {
        if self.window_ms <= 0 {
            return frames;
        }
        for frame in frames {
            match self.pending.as_mut() {
                Some(held) => held.absorb(frame),
                None => self.pending = Some(frame),
            }
        }
        if self.pending.is_some() && at.time.saturating_sub(self.last_sent_ms) >= self.window_ms {
            self.last_sent_ms = at.time;
            let mut frame = self.pending.take();
            if let Some(frame) = frame.as_mut() {
                frame.restamp(at);
            }
            return frame.into_iter().collect();
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame that records the blocks it stands for.
    #[derive(Debug, Clone, PartialEq)]
    struct Blocks(Vec<u64>, Option<u64>);

    impl Coalesce for Blocks {
        fn absorb(&mut self, next: Self) {
            self.0.extend(next.0);
        }
        fn restamp(&mut self, at: Position) {
            self.1 = Some(at.block_number);
        }
    }

    fn at(block_number: u64) -> Position {
        Position {
            block_number,
            time: i64::try_from(block_number).unwrap() * 100,
        }
    }

    #[test]
    fn a_zero_window_passes_every_frame() {
        let mut c = Coalescer::new(0, 0);
        assert_eq!(c.push(vec![Blocks(vec![1], None)], at(1)).len(), 1);
    }

    #[test]
    fn frames_of_a_window_leave_together_with_the_first_block_past_it() {
        let mut c = Coalescer::new(250, 0);
        assert!(c.push(vec![Blocks(vec![1], None)], at(1)).is_empty());
        assert!(c.push(vec![Blocks(vec![2], None)], at(2)).is_empty());
        assert_eq!(
            c.push(vec![], at(3)),
            [Blocks(vec![1, 2], Some(3))],
            "held frames leave stamped with the block they leave at"
        );
        // The next window starts at the frame just sent.
        assert!(c.push(vec![Blocks(vec![4], None)], at(4)).is_empty());
        assert!(c.push(vec![], at(9)).len() == 1);
        assert!(
            c.push(vec![], at(20)).is_empty(),
            "nothing held, nothing sent"
        );
    }
}
