//! Folding real node output: the BTC snapshot plus 51 blocks, checked
//! against an independent recomputation, and a capture without a snapshot.

use std::collections::BTreeMap;

use engine::book::Level;
use engine::event::Side;
use engine::fold::Engine;
use engine::views::l4book::{L4BookRequest, L4BookSubscription};
use serde_json::Value;

use crate::common::{btc_snapshot, by_block_blocks, hourly_file, real};

/// oid → (side, px, sz) as the node printed them.
type Plain = BTreeMap<u64, (String, String, String)>;

/// The final book recomputed with nothing but serde_json: snapshot orders,
/// then every raw diff literally (`new` inserts at the diff's px and sz,
/// `update` sets `newSz`, `remove` deletes).
fn recompute() -> Plain {
    let text = std::fs::read(real("btc-985148182/l4_snapshot_985148181.json")).unwrap();
    let snapshot: Value = serde_json::from_slice(&text).unwrap();
    let mut book = Plain::new();
    for coin in snapshot[1].as_array().unwrap() {
        for side in coin[1].as_array().unwrap() {
            for entry in side.as_array().unwrap() {
                let order = &entry[1];
                book.insert(
                    order["oid"].as_u64().unwrap(),
                    (
                        order["side"].as_str().unwrap().to_owned(),
                        order["limitPx"].as_str().unwrap().to_owned(),
                        order["sz"].as_str().unwrap().to_owned(),
                    ),
                );
            }
        }
    }
    let diffs = hourly_file(&real("btc-985148182"), "node_raw_book_diffs_by_block").unwrap();
    for line in std::fs::read_to_string(diffs).unwrap().lines() {
        let envelope: Value = serde_json::from_str(line).unwrap();
        for diff in envelope["events"].as_array().unwrap() {
            let oid = diff["oid"].as_u64().unwrap();
            let change = &diff["raw_book_diff"];
            if change == "remove" {
                assert!(book.remove(&oid).is_some(), "remove of unknown {oid}");
            } else if let Some(new) = change.get("new") {
                book.insert(
                    oid,
                    (
                        diff["side"].as_str().unwrap().to_owned(),
                        diff["px"].as_str().unwrap().to_owned(),
                        new["sz"].as_str().unwrap().to_owned(),
                    ),
                );
            } else {
                let entry = book.get_mut(&oid).unwrap();
                change["update"]["newSz"]
                    .as_str()
                    .unwrap()
                    .clone_into(&mut entry.2);
            }
        }
    }
    book
}

#[test]
fn top_of_book_right_after_the_snapshot() {
    let snapshot = btc_snapshot();
    assert_eq!(snapshot.height, 985_148_181);
    let book = snapshot.books.get("BTC").unwrap();
    assert_eq!(book.len(), 51_351);
    assert_eq!(book.bids().flat_map(Level::orders).count(), 34_593);
    assert_eq!(book.best_bid().unwrap().px().to_string(), "81307.0");
    assert_eq!(book.best_ask().unwrap().px().to_string(), "81308.0");
}

#[test]
fn snapshot_and_51_blocks_fold_exactly() {
    let started = std::time::Instant::now();
    let mut engine = Engine::from_snapshot(btc_snapshot());
    let loaded = started.elapsed();
    let blocks = by_block_blocks(&real("btc-985148182"));
    assert_eq!(blocks.len(), 51);
    assert_eq!(blocks[0].number, 985_148_182);
    let folding = std::time::Instant::now();
    for block in &blocks {
        let report = engine.apply(block);
        assert!(!report.skipped);
        assert_eq!(report.gap, None);
        assert_eq!(report.issues, []);
        assert_eq!(report.decode_errors, []);
    }
    eprintln!(
        "snapshot load {loaded:?}, fold of 51 blocks {:?}",
        folding.elapsed()
    );
    assert!(engine.unknown_ids().is_empty());
    assert_eq!(engine.height(), Some(985_148_232));
    assert_eq!(engine.events_seen(), 41_592 + 1_332 + 22);

    let book = engine.books().get("BTC").unwrap();
    let folded: Plain = book
        .orders()
        .map(|o| {
            (
                o.oid,
                (
                    o.side.as_str().to_owned(),
                    o.limit_px.to_string(),
                    o.sz.to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(folded.len(), book.len(), "an oid rests twice");
    assert_eq!(folded, recompute());
    // Levels stay sorted and single-sided.
    assert!(book.bids().all(|l| l.orders().all(|o| o.side == Side::Bid)));
    let bids: Vec<_> = book.bids().map(Level::px).collect();
    assert!(bids.windows(2).all(|w| w[0] > w[1]));
    let asks: Vec<_> = book.asks().map(Level::px).collect();
    assert!(asks.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn replaying_blocks_at_or_below_the_snapshot_is_a_no_op() {
    let mut engine = Engine::from_snapshot(btc_snapshot());
    let blocks = by_block_blocks(&real("btc-985148182"));
    for block in &blocks {
        engine.apply(block);
    }
    let before = engine.books().clone();
    for block in &blocks {
        assert!(engine.apply(block).skipped);
    }
    assert_eq!(engine.books(), &before);
}

#[test]
fn capture_without_snapshot_reports_its_unknown_ids() {
    let mut engine = Engine::new();
    let blocks = by_block_blocks(&real("btc-978995377"));
    assert_eq!(blocks.len(), 40);
    let mut issues = Vec::new();
    for block in &blocks {
        let report = engine.apply(block);
        assert_eq!(report.decode_errors, []);
        issues.extend(report.issues);
    }
    let counts = engine.unknown_ids().get("BTC").copied().unwrap_or_default();
    assert!(
        counts.unknown_oid > 0,
        "diffs touch orders placed before the window"
    );
    assert_eq!(counts.total(), issues.len() as u64);
    assert!(issues.iter().all(|issue| issue.coin() == "BTC"));
    let first = issues[0].to_string();
    assert!(first.starts_with("l4: unknown oid "), "{first}");
    assert!(first.contains(" for BTC at block 9789953"), "{first}");
}

/// Statuses are folded two ways: when no view wants raw statuses, only the
/// openings are delimited and decoded (the rest are counted by their status
/// key); when one does, every status is walked and filed. Both must fold the
/// same books with the same reports, block by block.
#[test]
fn the_status_fast_path_folds_what_the_exact_walk_folds() {
    let blocks = by_block_blocks(&real("btc-985148182"));
    let mut fast = Engine::from_snapshot(btc_snapshot());
    let mut exact = Engine::from_snapshot(btc_snapshot());
    let request = L4BookRequest {
        coin: "BTC".to_owned(),
        mirror: None,
    };
    L4BookSubscription::open(&mut exact, &request).unwrap();
    assert!(!exact.views().raw_coins().is_empty());
    assert!(fast.views().raw_coins().is_empty());
    for block in &blocks {
        assert_eq!(
            fast.apply(block),
            exact.apply(block),
            "block {}",
            block.number
        );
    }
    assert_eq!(fast.events_seen(), exact.events_seen());
    let (fast_book, exact_book) = (fast.books().get("BTC"), exact.books().get("BTC"));
    assert_eq!(fast_book, exact_book);
    let every = |engine: &Engine| {
        engine
            .books()
            .get("BTC")
            .unwrap()
            .orders()
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(every(&fast), every(&exact), "order metadata differs");
}
