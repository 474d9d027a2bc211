//! Coalescing of the aggregated-book views: with a window `w`, an L2 book
//! key sends at most one frame per `w` of block time (the newest state; its
//! `block_number` may skip), and an L2 diff key merges the changes of the
//! blocks inside the window into one frame per window — per coin, the
//! newest state of each changed level, a snapshot entry replacing what came
//! before it. L2 diff levels carry absolute sizes, so a merged frame applied
//! after any opening snapshot of the window leaves the same book.
//!
//! A window of zero (the default) passes every block's frames through.
//! Held changes leave with the first block at or after the window's end.

use proto::v3 as pb;

use crate::engine_thread::Frame;

/// One key's coalescing state.
#[derive(Debug)]
pub struct Coalescer {
    window_ms: i64,
    /// Block time of the last frame sent (or of the key's opening).
    last_sent_ms: i64,
    pending: Option<Frame>,
}

impl Coalescer {
    /// A coalescer of `window_ms` whose first window starts at `opened_ms`.
    pub fn new(window_ms: i64, opened_ms: i64) -> Self {
        Self {
            window_ms,
            last_sent_ms: opened_ms,
            pending: None,
        }
    }

    /// Takes one block's frames (block `block_number` at `time_ms`) and
    /// returns what to publish now. A held frame leaves stamped with this
    /// block: nothing changed since, so it is this block's state.
    pub fn push(&mut self, frames: Vec<Frame>, block_number: i64, time_ms: i64) -> Vec<Frame> {
        if self.window_ms <= 0 {
            return frames;
        }
        for frame in frames {
            self.pending = Some(match (self.pending.take(), frame) {
                (Some(Frame::L2Diff(mut held)), Frame::L2Diff(next)) => {
                    merge(&mut held, next);
                    Frame::L2Diff(held)
                }
                // Snapshot views: the newest state supersedes.
                (_, frame) => frame,
            });
        }
        if self.pending.is_some() && time_ms.saturating_sub(self.last_sent_ms) >= self.window_ms {
            self.last_sent_ms = time_ms;
            let mut frame = self.pending.take();
            match frame.as_mut() {
                Some(Frame::L2Book(book)) => {
                    book.block_number = block_number;
                    book.time = time_ms;
                }
                Some(Frame::L2Diff(diff)) => {
                    diff.block_number = block_number;
                    diff.time = time_ms;
                }
                _ => {}
            }
            return frame.into_iter().collect();
        }
        Vec::new()
    }
}

/// Folds `next` into `held`: per coin, later level states win.
fn merge(held: &mut pb::L2BookDiffUpdate, next: pb::L2BookDiffUpdate) {
    held.time = next.time;
    held.block_number = next.block_number;
    for diff in next.diffs {
        match held.diffs.iter_mut().find(|d| d.coin == diff.coin) {
            Some(entry) if !diff.snapshot => {
                upsert(&mut entry.bids, diff.bids);
                upsert(&mut entry.asks, diff.asks);
            }
            Some(entry) => *entry = diff,
            None => held.diffs.push(diff),
        }
    }
}

fn upsert(levels: &mut Vec<pb::L2Level>, changes: Vec<pb::L2Level>) {
    for change in changes {
        match levels.iter_mut().find(|l| l.px == change.px) {
            Some(level) => *level = change,
            None => levels.push(change),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(px: &str, sz: &str) -> pb::L2Level {
        pb::L2Level {
            px: px.into(),
            sz: sz.into(),
            n: 1,
        }
    }

    fn diff(block: i64, coin: &str, bids: Vec<pb::L2Level>, snapshot: bool) -> Frame {
        Frame::L2Diff(pb::L2BookDiffUpdate {
            time: block * 100,
            block_number: block,
            diffs: vec![pb::L2CoinDiff {
                coin: coin.into(),
                bids,
                snapshot,
                ..pb::L2CoinDiff::default()
            }],
        })
    }

    #[test]
    fn a_zero_window_passes_every_frame() {
        let mut c = Coalescer::new(0, 0);
        let out = c.push(vec![diff(1, "BTC", vec![], false)], 1, 100);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn diffs_inside_a_window_merge_into_the_newest_level_states() {
        let mut c = Coalescer::new(250, 0);
        assert!(
            c.push(vec![diff(1, "BTC", vec![level("10", "1")], false)], 1, 100)
                .is_empty()
        );
        assert!(
            c.push(
                vec![diff(
                    2,
                    "BTC",
                    vec![level("10", "2"), level("9", "1")],
                    false
                )],
                2,
                200
            )
            .is_empty()
        );
        let out = c.push(vec![diff(3, "ETH", vec![level("5", "1")], false)], 3, 300);
        let [Frame::L2Diff(merged)] = out.as_slice() else {
            panic!("one merged frame: {out:?}");
        };
        assert_eq!(merged.block_number, 3);
        assert_eq!(merged.diffs.len(), 2);
        assert_eq!(merged.diffs[0].bids, [level("10", "2"), level("9", "1")]);
        assert_eq!(merged.diffs[1].coin, "ETH");
        // The next window starts at the frame just sent.
        assert!(
            c.push(
                vec![diff(4, "BTC", vec![level("10", "0.0")], false)],
                4,
                400
            )
            .is_empty()
        );
    }

    #[test]
    fn books_send_only_the_newest_state_per_window() {
        let book = |block: i64| {
            Frame::L2Book(pb::L2BookUpdate {
                block_number: block,
                ..pb::L2BookUpdate::default()
            })
        };
        let mut c = Coalescer::new(1000, 0);
        assert!(c.push(vec![book(1)], 1, 400).is_empty());
        assert!(c.push(vec![book(2)], 2, 800).is_empty());
        // Block 3 changed nothing: block 2's state goes out as block 3's.
        let out = c.push(vec![], 3, 1000);
        assert!(
            matches!(out.as_slice(), [Frame::L2Book(b)] if b.block_number == 3 && b.time == 1000)
        );
        assert!(
            c.push(vec![], 4, 5000).is_empty(),
            "nothing held, nothing sent"
        );
    }
}
