//! A block folded in steps (`Market::apply_in_steps`), as the server's
//! engine thread folds it to publish each view as soon as it is final: the
//! steps come in order, once each, with the block's position; the books move
//! at the book step and not before; and every view's frames, taken at the
//! end of the step it is ready after, equal its frames taken once the whole
//! block is folded in one pass (no coin's book first).

use std::collections::BTreeMap;

use engine::market::{Market, Needs, Step};
use engine::views::registry::{Frame, Key, Producer, ViewKind};
use engine::views::{Selection, ViewSettings};
use serde_json::Value;

use crate::simulator_truth::{blocks, generate, snapshots};

/// The accounts with the most fills in `blocks`, most active first.
pub(crate) fn busiest_users(blocks: &BTreeMap<u64, engine::block::Block>, n: usize) -> Vec<String> {
    let mut fills: BTreeMap<String, usize> = BTreeMap::new();
    for line in blocks.values().flat_map(|block| &block.lines.fills) {
        let envelope: Value = serde_json::from_slice(line).unwrap();
        for event in envelope["events"].as_array().unwrap() {
            *fills
                .entry(event[0].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    let mut users: Vec<(usize, String)> = fills.into_iter().map(|(u, n)| (n, u)).collect();
    users.sort_by(|a, b| b.cmp(a));
    users.into_iter().take(n).map(|(_, user)| user).collect()
}

/// One selection per view, each of which the small simulator profile
/// gives frames to.
fn selection(kind: ViewKind, users: &[String]) -> Selection {
    let coins = |coins: &[&str]| coins.iter().map(|&c| c.to_owned()).collect();
    let mut selection = Selection::default();
    match kind {
        ViewKind::L2Book | ViewKind::Bbo | ViewKind::L2Diff | ViewKind::Trades => {
            selection.coins = coins(&["BTC", "ETH"]);
        }
        ViewKind::L4Book => selection.coins = coins(&["ETH"]),
        ViewKind::Candles => {
            selection.coins = coins(&["BTC", "ETH"]);
            selection.interval = Some("1m".to_owned());
        }
        ViewKind::Statuses | ViewKind::OpenOrders => selection.users = users.to_vec(),
        ViewKind::L4Updates | ViewKind::Tpsl | ViewKind::Fills | ViewKind::Mids => {}
    }
    selection
}

fn json(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|frame| serde_json::to_string(frame).unwrap())
        .collect()
}

/// A market and one producer per key.
struct Subscribed {
    market: Market,
    producers: Vec<Producer>,
}

impl Subscribed {
    fn open(start: &engine::snapshot::L4Snapshot, keys: &[Key]) -> (Self, Vec<Vec<String>>) {
        let mut market = Market::from_snapshot(start.clone(), Needs::ALL);
        let mut producers = Vec::new();
        let mut openings = Vec::new();
        for key in keys {
            let (producer, frames) = key.open(&mut market, &ViewSettings::default()).unwrap();
            producers.push(producer);
            openings.push(json(&frames));
        }
        (Self { market, producers }, openings)
    }
}

/// A small simulator run: its starting snapshot and its blocks.
pub(crate) fn simulated() -> (
    engine::snapshot::L4Snapshot,
    BTreeMap<u64, engine::block::Block>,
) {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), true);
    (snapshots(dir.path()).swap_remove(0), blocks(dir.path()))
}

#[test]
fn every_view_is_final_at_the_end_of_its_step() {
    let (start, blocks) = simulated();
    let users = busiest_users(&blocks, 3);
    let keys: Vec<Key> = ViewKind::ALL
        .iter()
        .flat_map(|&kind| kind.keys(&selection(kind, &users)).unwrap())
        .collect();
    let steps: Vec<Step> = keys.iter().map(|key| key.kind().ready_after()).collect();
    let (mut stepped, stepped_openings) = Subscribed::open(&start, &keys);
    let (mut whole, whole_openings) = Subscribed::open(&start, &keys);
    assert_eq!(stepped_openings, whole_openings);
    // The whole-block market folds every book in one pass, after the
    // statuses: what the views read first is compared with that.
    for key in &keys {
        if key.kind().ready_after() == Step::FirstBooks {
            whole.market.unfold_first(key.book_coins().unwrap());
        }
    }

    let mut frames: BTreeMap<&str, usize> = BTreeMap::new();
    for block in blocks.values() {
        let books_before = stepped.market.fold().height();
        let mut seen = Vec::new();
        let mut got: Vec<Vec<String>> = vec![Vec::new(); keys.len()];
        let producers = &mut stepped.producers;
        let report = stepped.market.apply_in_steps(block, |step, market| {
            seen.push(step);
            assert_eq!(market.position().block_number, block.number);
            assert_eq!(market.position().time, block.time_ms);
            let books = market.fold().height();
            if step <= Step::Fills {
                // The first coins' books are folded at `FirstBooks`, but the
                // fold's position moves when the whole block is.
                assert_eq!(books, books_before, "the books wait for their step");
            } else {
                assert_eq!(books, Some(block.number));
            }
            for ((producer, &at), got) in producers.iter_mut().zip(&steps).zip(&mut got) {
                if at == step {
                    *got = json(&producer.on_block(market));
                }
            }
        });
        assert!(!report.skipped);
        assert_eq!(seen, Step::ALL, "block {}", block.number);
        whole.market.apply(block);
        assert!(
            whole.market.books() == stepped.market.books(),
            "books at block {}",
            block.number
        );
        for ((producer, key), got) in whole.producers.iter_mut().zip(&keys).zip(&got) {
            let want = json(&producer.on_block(&whole.market));
            assert_eq!(
                got,
                &want,
                "{} at block {}",
                key.kind().name(),
                block.number
            );
            *frames.entry(key.kind().name()).or_default() += want.len();
        }
    }
    // Every view had frames to compare: none passed by saying nothing.
    for kind in ViewKind::ALL {
        assert!(
            frames.get(kind.name()).is_some_and(|&n| n > 0),
            "{}: no frame in {} blocks ({frames:?})",
            kind.name(),
            blocks.len()
        );
    }
    // And the steps are where the views' needs say.
    assert_eq!(ViewKind::Trades.needs().ready_after(), Step::Fills);
    assert_eq!(ViewKind::Bbo.needs().ready_after(), Step::Books);
    for first in [ViewKind::Bbo, ViewKind::L2Book, ViewKind::L2Diff] {
        assert_eq!(first.ready_after(), Step::FirstBooks, "{first}");
    }
    assert_eq!(ViewKind::Mids.ready_after(), Step::Books);
    assert_eq!(ViewKind::L4Book.ready_after(), Step::Books);
    assert_eq!(ViewKind::Tpsl.needs().ready_after(), Step::Done);
}

#[test]
fn a_block_at_or_below_the_height_calls_no_step() {
    let (start, blocks) = simulated();
    let first = blocks.values().next().unwrap();
    let mut market = Market::from_snapshot(start, Needs::ALL);
    market.apply(first);
    let mut called = false;
    let report = market.apply_in_steps(first, |_, _| called = true);
    assert!(report.skipped);
    assert!(!called);
}
