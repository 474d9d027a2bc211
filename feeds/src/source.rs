//! The node's output streams this crate serves: ids, directories, filter
//! fields and position kinds of each [`Source`].

use std::fmt;

/// One stream of files the node writes, served as one raw feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `replica_cmds`: one line per block, the block's signed actions.
    Blocks,
    /// `node_fills_*`: fills as `[user, fill]` events.
    Fills,
    /// `node_raw_book_diffs_*`: resting-order changes.
    RawBookDiffs,
    /// `node_order_statuses_*`: order status transitions.
    OrderStatuses,
    /// `misc_events_*`: funding, ledger updates, staking and the like.
    MiscEvents,
    /// `node_twap_statuses_*`: TWAP order state changes.
    TwapStatuses,
    /// L4 order-book snapshot files (one whole JSON file per record).
    OrderbookSnapshots,
}

/// How a client may position a read in a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PositionKind {
    /// Unix milliseconds of the block time.
    Timestamp,
    /// Sequential block height.
    BlockNumber,
}

/// How the node batched a stream's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `--batch-by-block`: one line per block (empty blocks included).
    ByBlock,
    /// `--stream-with-block-info`: many lines per block, same envelope.
    Streaming,
}

const BOTH: &[PositionKind] = &[PositionKind::BlockNumber, PositionKind::Timestamp];
const TIME_ONLY: &[PositionKind] = &[PositionKind::Timestamp];
const USERS_COINS: &[&str] = &["users", "coins"];

impl Source {
    /// Every source, in the order feeds are listed.
    pub const ALL: [Source; 7] = [
        Source::Blocks,
        Source::Fills,
        Source::RawBookDiffs,
        Source::OrderStatuses,
        Source::MiscEvents,
        Source::TwapStatuses,
        Source::OrderbookSnapshots,
    ];

    /// Every line feed ([`Source::is_line_feed`]): all but snapshots, in
    /// the order of [`Source::ALL`].
    pub const LINE_FEEDS: [Source; 6] = [
        Source::Blocks,
        Source::Fills,
        Source::RawBookDiffs,
        Source::OrderStatuses,
        Source::MiscEvents,
        Source::TwapStatuses,
    ];

    /// The sources whose lines are block envelopes of events, in the order
    /// the engine assembles a block from them.
    pub const EVENT_STREAMS: [Source; 5] = [
        Source::OrderStatuses,
        Source::RawBookDiffs,
        Source::Fills,
        Source::MiscEvents,
        Source::TwapStatuses,
    ];

    /// The stable feed id (`fills`, `raw_book_diffs`, …).
    pub fn feed_id(self) -> &'static str {
        match self {
            Source::Blocks => "blocks",
            Source::Fills => "fills",
            Source::RawBookDiffs => "raw_book_diffs",
            Source::OrderStatuses => "order_statuses",
            Source::MiscEvents => "misc_events",
            Source::TwapStatuses => "twap_statuses",
            Source::OrderbookSnapshots => "orderbook_snapshots",
        }
    }

    /// The source whose [`Source::feed_id`] is `id`.
    pub fn from_feed_id(id: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.feed_id() == id)
    }

    /// Candidate directory names under the node root, most preferred first
    /// (by-block before streaming). Empty for snapshots, which are files
    /// beside the node root rather than a directory of it.
    pub fn dir_names(self) -> &'static [&'static str] {
        match self {
            Source::Blocks => &["replica_cmds"],
            // The older non-batched formats last (see crate::legacy).
            Source::Fills => &[
                "node_fills_by_block",
                "node_fills_streaming",
                "node_fills",
                "node_trades",
            ],
            Source::RawBookDiffs => &[
                "node_raw_book_diffs_by_block",
                "node_raw_book_diffs_streaming",
            ],
            Source::OrderStatuses => &[
                "node_order_statuses_by_block",
                "node_order_statuses_streaming",
            ],
            Source::MiscEvents => &["misc_events_by_block", "misc_events_streaming"],
            Source::TwapStatuses => &[
                "node_twap_statuses_by_block",
                "node_twap_statuses_streaming",
            ],
            Source::OrderbookSnapshots => &[],
        }
    }

    /// The hourly directory of this source in `mode` (`node_fills_by_block`,
    /// `node_fills_streaming`); `None` for replica blocks and snapshots,
    /// which have no batching mode.
    pub fn dir_name(self, mode: Mode) -> Option<&'static str> {
        if !self.is_envelope() {
            return None;
        }
        let names = self.dir_names();
        match mode {
            Mode::ByBlock => names.first().copied(),
            Mode::Streaming => names.get(1).copied(),
        }
    }

    /// The batching mode a directory name implies, if it is one of this
    /// source's hourly directories.
    pub fn mode_of_dir(self, dir_name: &str) -> Option<Mode> {
        if !self.dir_names().contains(&dir_name) || self == Source::Blocks {
            return None;
        }
        if dir_name.ends_with("_by_block") {
            Some(Mode::ByBlock)
        } else {
            Some(Mode::Streaming)
        }
    }

    /// Filter field names this feed accepts (empty: not filterable).
    pub fn filter_fields(self) -> &'static [&'static str] {
        match self {
            Source::Fills | Source::RawBookDiffs | Source::OrderStatuses | Source::TwapStatuses => {
                USERS_COINS
            }
            Source::Blocks | Source::MiscEvents | Source::OrderbookSnapshots => &[],
        }
    }

    /// How reads of this feed can be positioned.
    pub fn position_kinds(self) -> &'static [PositionKind] {
        match self {
            Source::OrderbookSnapshots => TIME_ONLY,
            _ => BOTH,
        }
    }

    /// Whether records are block-envelope lines
    /// (`{local_time, block_time, block_number, events}`).
    pub fn is_envelope(self) -> bool {
        !matches!(self, Source::Blocks | Source::OrderbookSnapshots)
    }

    /// Whether records are lines of hourly or height-named files (every
    /// source but snapshots).
    pub fn is_line_feed(self) -> bool {
        self != Source::OrderbookSnapshots
    }
}

/// A set of sources (a bit per source), cheap to copy and to share through
/// an atomic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SourceSet(u8);

impl SourceSet {
    /// No source.
    pub const EMPTY: SourceSet = SourceSet(0);

    /// The set of `sources`.
    pub fn of(sources: &[Source]) -> SourceSet {
        sources
            .iter()
            .fold(SourceSet::EMPTY, |set, &source| set.with(source))
    }

    /// This set and `source`.
    #[must_use]
    pub fn with(self, source: Source) -> SourceSet {
        SourceSet(self.0 | Self::bit(source))
    }

    /// Whether `source` is in the set.
    pub fn contains(self, source: Source) -> bool {
        self.0 & Self::bit(source) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set as bits (for an atomic); [`SourceSet::from_bits`] inverts it.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The set of `bits` from [`SourceSet::bits`] (unknown bits ignored).
    pub fn from_bits(bits: u8) -> SourceSet {
        SourceSet(bits & ((1 << Source::ALL.len()) - 1))
    }

    fn bit(source: Source) -> u8 {
        1 << (source as u8)
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.feed_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_have_a_directory_per_mode() {
        for source in Source::EVENT_STREAMS {
            for mode in [Mode::ByBlock, Mode::Streaming] {
                let dir = source.dir_name(mode).unwrap();
                assert_eq!(source.mode_of_dir(dir), Some(mode));
            }
        }
        assert_eq!(Source::Blocks.dir_name(Mode::ByBlock), None);
        assert_eq!(Source::OrderbookSnapshots.dir_name(Mode::Streaming), None);
    }

    #[test]
    fn a_source_set_holds_exactly_its_sources() {
        let set = SourceSet::of(&[Source::Fills, Source::OrderbookSnapshots]);
        for source in Source::ALL {
            let member = matches!(source, Source::Fills | Source::OrderbookSnapshots);
            assert_eq!(set.contains(source), member, "{source:?}");
        }
        assert_eq!(SourceSet::from_bits(set.bits()), set);
        assert_eq!(SourceSet::from_bits(0xff), SourceSet::of(&Source::ALL));
        assert!(SourceSet::EMPTY.is_empty() && !set.is_empty());
    }

    #[test]
    fn feed_ids_round_trip_and_are_unique() {
        for source in Source::ALL {
            assert_eq!(Source::from_feed_id(source.feed_id()), Some(source));
        }
        assert_eq!(Source::from_feed_id("trades"), None);
    }

    #[test]
    fn by_block_is_preferred_over_streaming() {
        assert_eq!(Source::Fills.dir_names()[0], "node_fills_by_block");
        assert_eq!(
            Source::Fills.mode_of_dir("node_fills_streaming"),
            Some(Mode::Streaming)
        );
        assert_eq!(
            Source::MiscEvents.mode_of_dir("misc_events_by_block"),
            Some(Mode::ByBlock)
        );
        // The older formats, one event per line, align as streaming lines.
        assert_eq!(
            Source::Fills.mode_of_dir("node_fills"),
            Some(Mode::Streaming)
        );
        assert_eq!(
            Source::Fills.mode_of_dir("node_trades"),
            Some(Mode::Streaming)
        );
        assert_eq!(Source::OrderStatuses.mode_of_dir("node_fills"), None);
    }

    #[test]
    fn only_event_feeds_with_users_and_coins_are_filterable() {
        assert_eq!(Source::Fills.filter_fields(), ["users", "coins"]);
        assert_eq!(Source::TwapStatuses.filter_fields(), ["users", "coins"]);
        assert!(Source::MiscEvents.filter_fields().is_empty());
        assert!(Source::Blocks.filter_fields().is_empty());
        assert_eq!(
            Source::OrderbookSnapshots.position_kinds(),
            [PositionKind::Timestamp]
        );
    }

    #[test]
    fn line_feeds_are_every_source_but_snapshots() {
        let filtered: Vec<Source> = Source::ALL
            .into_iter()
            .filter(|s| s.is_line_feed())
            .collect();
        assert_eq!(filtered, Source::LINE_FEEDS);
    }
}
