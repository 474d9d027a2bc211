//! Shared helpers: real data paths and blocks read through the aligner.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use engine::align::{AlignMode, Aligner};
use engine::block::Block;
use engine::market::Market;
use engine::snapshot::{self, L4Snapshot};
use engine::views::{Numbering, View, ViewError, ViewSettings};
use feeds::Source;

/// `shared/data/real/<name>`.
pub fn real(name: &str) -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/real"
    ))
    .join(name)
}

/// The single hourly file of `source_dir` (e.g. `node_fills_by_block`).
pub fn hourly_file(data: &Path, source_dir: &str) -> Option<PathBuf> {
    let hourly = data.join("hl/data").join(source_dir).join("hourly");
    let day = std::fs::read_dir(hourly).ok()?.next()?.ok()?.path();
    let hour = std::fs::read_dir(day).ok()?.next()?.ok()?.path();
    Some(hour)
}

/// Every block of a by-block capture, statuses + diffs + fills, aligned.
pub fn by_block_blocks(data: &Path) -> Vec<Block> {
    let sources = [
        (Source::OrderStatuses, "node_order_statuses_by_block"),
        (Source::RawBookDiffs, "node_raw_book_diffs_by_block"),
        (Source::Fills, "node_fills_by_block"),
    ];
    let present: Vec<Source> = sources
        .iter()
        .filter(|(_, dir)| hourly_file(data, dir).is_some())
        .map(|(source, _)| *source)
        .collect();
    let mut aligner = Aligner::new(AlignMode::ByBlock, &present, i64::MAX);
    let mut blocks = Vec::new();
    for (source, dir) in sources {
        let Some(file) = hourly_file(data, dir) else {
            continue;
        };
        let bytes = Bytes::from(std::fs::read(file).unwrap());
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            aligner.push_line(source, bytes.slice_ref(line), 0);
        }
    }
    while let Some(block) = aligner.finish() {
        blocks.push(block);
    }
    assert_eq!(aligner.report().issues, []);
    blocks
}

/// The BTC snapshot at 985148181.
pub fn btc_snapshot() -> L4Snapshot {
    let bytes = std::fs::read(real("btc-985148182/l4_snapshot_985148181.json")).unwrap();
    snapshot::parse(&bytes).unwrap()
}

/// A subscription of view `V` as one subscriber sees it: its frames
/// numbered (`sequence`, `seq`/`prev_seq`) as an edge or a replay would.
pub struct Sub<V: View> {
    view: V,
    numbering: Numbering,
}

impl<V: View> Sub<V> {
    /// Opens `key` on the market with default settings (the key by value:
    /// tests build it inline).
    #[allow(clippy::needless_pass_by_value)]
    pub fn open(market: &mut Market, key: V::Key) -> Result<(Self, Vec<V::Frame>), ViewError> {
        let (view, frames) = V::open(market, &key, &ViewSettings::default())?;
        let mut sub = Self {
            view,
            numbering: Numbering::default(),
        };
        let frames = sub.number(frames);
        Ok((sub, frames))
    }

    /// The frames of the block the market just folded.
    pub fn on_block(&mut self, market: &Market) -> Vec<V::Frame> {
        let frames = self.view.on_block(market);
        self.number(frames)
    }

    fn number(&mut self, mut frames: Vec<V::Frame>) -> Vec<V::Frame> {
        for frame in &mut frames {
            let numbers = V::numbers(frame, &mut self.numbering);
            V::stamp(frame, &numbers);
        }
        frames
    }
}
