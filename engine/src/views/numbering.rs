//! Per-subscriber numbering, in one place for every consumer of frames
//! (`l1gate replay` and each edge): a key's frames are shared by all its
//! subscribers, who joined at different blocks, so their numbers are given
//! as each subscriber takes the frames.
//!
//! - L4 order updates, TP/SL and the fills family carry `sequence`: 1 on the
//!   subscription's first frame, +1 per frame. A gap means loss.
//! - L2 diffs carry, per coin entry, `seq` (1 on the coin's first entry,
//!   +1 per entry of that coin) and `prev_seq` (the coin's previous `seq`;
//!   0 on a `snapshot` entry, which restarts the chain).

use std::collections::BTreeMap;

/// One subscriber's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Numbering {
    sequence: u64,
    seqs: BTreeMap<String, u64>,
}

/// The numbers one frame carries for one subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Numbers {
    /// The frame has no numbering.
    None,
    /// `sequence`.
    Sequence(u64),
    /// `(seq, prev_seq)` of each coin entry, in order.
    PerCoin(Vec<(u64, u64)>),
}

impl Numbering {
    /// The next `sequence`.
    pub fn next_sequence(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// The next `(seq, prev_seq)` of `coin`; a snapshot entry has
    /// `prev_seq` 0.
    pub fn next_seq(&mut self, coin: &str, snapshot: bool) -> (u64, u64) {
        let last = if let Some(last) = self.seqs.get_mut(coin) {
            last
        } else {
            self.seqs.entry(coin.to_owned()).or_insert(0)
        };
        let prev_seq = if snapshot { 0 } else { *last };
        *last += 1;
        (*last, prev_seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_starts_at_one_and_counts_up() {
        let mut numbering = Numbering::default();
        assert_eq!(numbering.next_sequence(), 1);
        assert_eq!(numbering.next_sequence(), 2);
    }

    #[test]
    fn seqs_chain_per_coin_and_snapshots_restart_the_chain() {
        let mut numbering = Numbering::default();
        assert_eq!(numbering.next_seq("BTC", true), (1, 0));
        assert_eq!(numbering.next_seq("ETH", true), (1, 0));
        assert_eq!(numbering.next_seq("BTC", false), (2, 1));
        assert_eq!(numbering.next_seq("BTC", true), (3, 0));
        assert_eq!(numbering.next_seq("BTC", false), (4, 3));
    }
}
