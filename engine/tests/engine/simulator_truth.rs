//! The simulator knows the true book after every block. Folding its written
//! node files from its starting snapshot must land exactly on the snapshot it
//! wrote at the end — the expectation is the simulator's truth, not the
//! engine's own output.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use engine::block::Block;
use engine::market::bbo::top_of;
use engine::market::mids::mid;
use engine::market::{Market, Needs};
use engine::snapshot;
use feeds::{Feed, Source, Start};
use fixtures::{OutputMode, RunOptions, SimConfig};

const BLOCKS: u64 = 300;

pub(crate) fn generate(dir: &Path, profile_small: bool) {
    let mut config = if profile_small {
        SimConfig::small(11)
    } else {
        SimConfig::mainnet(11, 0.02)
    };
    config.mode = OutputMode::ByBlock;
    config.snapshot_every = Some(BLOCKS);
    let run = RunOptions {
        blocks: Some(BLOCKS),
        no_replica_cmds: true,
        ..RunOptions::default()
    };
    fixtures::generate(&config, dir, &run, &mut |_| {}).unwrap();
}

/// Every block of the by-block files, joined across sources.
pub(crate) fn blocks(dir: &Path) -> BTreeMap<u64, Block> {
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    for source in [Source::OrderStatuses, Source::RawBookDiffs, Source::Fills] {
        let feed = Feed::open(dir, source).unwrap();
        let mut cursor = feed.seek(Start::BlockNumber(0)).unwrap();
        loop {
            let records = feed.read(&mut cursor, 1_000).unwrap();
            if records.is_empty() {
                break;
            }
            for record in records {
                let number = record.block_number.unwrap();
                let block = blocks
                    .entry(number)
                    .or_insert_with(|| Block::new(number, record.timestamp_ms.unwrap()));
                let lines = match source {
                    Source::OrderStatuses => &mut block.lines.order_statuses,
                    Source::RawBookDiffs => &mut block.lines.raw_book_diffs,
                    _ => &mut block.lines.fills,
                };
                lines.push(Bytes::clone(&record.data));
            }
        }
    }
    blocks
}

pub(crate) fn snapshots(dir: &Path) -> Vec<snapshot::L4Snapshot> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("l4_snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| snapshot::parse(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}

fn fold_to_truth(profile_small: bool) {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), profile_small);
    let snapshots = snapshots(dir.path());
    assert_eq!(snapshots.len(), 2, "a starting snapshot and one at the end");
    let (start, end) = (&snapshots[0], &snapshots[1]);
    assert_eq!(end.height, start.height + BLOCKS);

    let mut engine = Market::from_snapshot(start.clone(), Needs::BOOKS);
    // As a BBO or mids subscription would: the tops are kept from here on.
    engine.watch_tops();
    let blocks = blocks(dir.path());
    assert_eq!(blocks.len() as u64, BLOCKS);
    let mut diffs = 0;
    for block in blocks.values() {
        let report = engine.apply(block);
        assert!(
            report.issues.is_empty(),
            "block {}: {:?}",
            block.number,
            report.issues
        );
        assert!(
            report.decode_errors.is_empty(),
            "{:?}",
            report.decode_errors
        );
        diffs += block.lines.raw_book_diffs.len();
        top_and_mids_match_the_books(&engine);
    }
    assert!(diffs > 0);
    let unknown: u64 = engine
        .unknown_ids()
        .values()
        .map(engine::fold::UnknownIds::total)
        .sum();
    assert_eq!(unknown, 0, "zero unknown order ids");
    assert_eq!(engine.height(), Some(end.height));
    let diverged = snapshot::compare(engine.books(), &end.books);
    assert!(
        diverged.is_empty(),
        "folded book differs from the simulator's truth: {diverged:?}"
    );
    // And the check a running engine makes resets nothing.
    assert!(engine.check_snapshot(end).unwrap().is_empty());
}

/// The BBO and mids views, folded block by block (mids only for coins whose
/// top moved), equal a fresh computation from every book.
fn top_and_mids_match_the_books(engine: &Market) {
    let mut mids = BTreeMap::new();
    for (coin, book) in engine.books().iter() {
        assert_eq!(engine.bbo().top(coin), top_of(coin, book), "top of {coin}");
        if let (Some(bid), Some(ask)) = (book.best_bid(), book.best_ask()) {
            mids.insert(coin.to_owned(), mid(bid.px(), ask.px()).unwrap());
        }
    }
    let printed = |m: &BTreeMap<String, engine::num::Px>| -> Vec<(String, String)> {
        m.iter()
            .map(|(c, px)| (c.clone(), px.to_string()))
            .collect()
    };
    assert_eq!(printed(engine.mids().mids()), printed(&mids));
}

#[test]
fn small_profile_folds_to_the_simulators_own_snapshot() {
    fold_to_truth(true);
}

#[test]
fn mainnet_profile_folds_to_the_simulators_own_snapshot() {
    fold_to_truth(false);
}
