//! Folding real node output: the BTC snapshot plus 51 blocks, checked
//! against an independent recomputation, and a capture without a snapshot.

use std::collections::{BTreeMap, BTreeSet};

use engine::book::Level;
use engine::event::{OrderStatusEvent, Side};
use engine::fold::{Engine, FoldWants};
use engine::market::tpsl::TpslView;
use engine::market::{Market, Needs};
use engine::num::{Px, Sz};
use rstest::rstest;
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
    let mut engine = Market::from_snapshot(btc_snapshot(), Needs::ALL);
    let loaded = started.elapsed();
    let blocks = by_block_blocks(&real("btc-985148182"));
    assert_eq!(blocks.len(), 51);
    assert_eq!(blocks[0].number, 985_148_182);
    let folding = std::time::Instant::now();
    let mut events = 0;
    for block in &blocks {
        let report = engine.apply(block);
        events += report.events;
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
    assert_eq!(events, 41_592 + 1_332 + 22);
    assert_eq!(
        engine.fold().events_seen(),
        41_592 + 1_332,
        "statuses and diffs"
    );

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
/// openings (and the statuses the trigger watch wants) are delimited and
/// decoded, the rest counted by their status key; when one does, every
/// status is walked and filed. Both must fold the same books with the same
/// reports, and hand the TP/SL tracker the same statuses, block by block;
/// and the tracker fed that way must see exactly what it sees when it is
/// given every status of the block.
#[rstest]
#[case::with_snapshot("btc-985148182")]
#[case::with_trigger_orders("btc-978995377")]
fn the_status_fast_path_folds_what_the_exact_walk_folds(#[case] capture: &str) {
    let blocks = by_block_blocks(&real(capture));
    let start = || starting_engine(capture);
    let (mut fast, mut exact) = (start(), start());
    let (mut fast_tpsl, mut exact_tpsl, mut full_tpsl) =
        (TpslView::new(), TpslView::new(), TpslView::new());
    let none = BTreeSet::new();
    let btc: BTreeSet<String> = ["BTC".to_owned()].into();
    let mut tapped = 0;
    for block in &blocks {
        let fast_tracks = |oid: u64| fast_tpsl.tracks(oid);
        let (fast_report, fast_folded) = fast.apply_with(
            block,
            FoldWants {
                books: true,
                raw_coins: &none,
                raw_users: &none,
                triggers: Some(&fast_tracks),
                order_changes: Vec::new(),
            },
        );
        let exact_tracks = |oid: u64| exact_tpsl.tracks(oid);
        let (exact_report, exact_folded) = exact.apply_with(
            block,
            FoldWants {
                books: true,
                raw_coins: &btc,
                raw_users: &none,
                triggers: Some(&exact_tracks),
                order_changes: Vec::new(),
            },
        );
        assert_eq!(fast_report, exact_report, "block {}", block.number);
        let oids = |statuses: &[OrderStatusEvent<'_>]| {
            statuses
                .iter()
                .map(|s| (s.order.oid, s.status.to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            oids(&fast_folded.trigger_statuses),
            oids(&exact_folded.trigger_statuses),
            "block {}",
            block.number
        );
        tapped += fast_folded.trigger_statuses.len();
        let decoded = block.decode();
        let fills: Vec<_> = decoded.fills.iter().map(|s| &s.event).collect();
        fast_tpsl.apply_events(
            block.number,
            block.time_ms,
            fills.clone(),
            &fast_folded.trigger_statuses,
        );
        exact_tpsl.apply_events(
            block.number,
            block.time_ms,
            fills,
            &exact_folded.trigger_statuses,
        );
        full_tpsl.apply(&decoded);
        assert_eq!(
            fast_tpsl.diffs(),
            full_tpsl.diffs(),
            "block {}",
            block.number
        );
        assert_eq!(
            exact_tpsl.diffs(),
            full_tpsl.diffs(),
            "block {}",
            block.number
        );
    }
    if capture == "btc-978995377" {
        assert!(tapped > 0, "the capture has trigger orders");
        assert!(full_tpsl.orders().count() > 0);
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

/// The tops of book and mids are kept only while a BBO or mids subscription
/// reads them. A subscription opened late sees exactly what one kept open
/// from the snapshot on sees: the same opening and the same later frames.
#[test]
fn tops_rebuilt_for_a_late_subscriber_match_tops_kept_all_along() {
    use engine::views::bbo::{BboKey, BboSubscription};
    use engine::views::mids::{MidsKey, MidsSubscription};

    use crate::common::Sub;

    let bbo_key = || BboKey {
        coins: ["BTC".to_owned()].into(),
    };
    let mids_key = || MidsKey {
        coins: std::collections::BTreeSet::default(),
        perps_only: false,
        dex: None,
    };
    let blocks = by_block_blocks(&real("btc-985148182"));
    let mut early = Market::from_snapshot(btc_snapshot(), Needs::BOOKS);
    let mut late = Market::from_snapshot(btc_snapshot(), Needs::BOOKS);
    let (mut early_bbo, _) = Sub::<BboSubscription>::open(&mut early, bbo_key()).unwrap();
    let (mut early_mids, _) = Sub::<MidsSubscription>::open(&mut early, mids_key()).unwrap();
    let (split, rest) = blocks.split_at(25);
    let mut moved = 0;
    for block in split {
        early.apply(block);
        moved += early_bbo.on_block(&early).len();
        early_mids.on_block(&early);
        late.apply(block);
    }
    assert!(moved > 0, "the top moved before the late subscription");
    let (mut late_bbo, late_opening) = Sub::<BboSubscription>::open(&mut late, bbo_key()).unwrap();
    let (mut late_mids, late_mids_opening) =
        Sub::<MidsSubscription>::open(&mut late, mids_key()).unwrap();
    let (_, early_opening) = Sub::<BboSubscription>::open(&mut early, bbo_key()).unwrap();
    let (_, early_mids_opening) = Sub::<MidsSubscription>::open(&mut early, mids_key()).unwrap();
    assert_eq!(late_opening, early_opening);
    assert_eq!(late_mids_opening[0].mids, early_mids_opening[0].mids);
    let mut frames = 0;
    for block in rest {
        early.apply(block);
        late.apply(block);
        let want = early_bbo.on_block(&early);
        frames += want.len();
        assert_eq!(late_bbo.on_block(&late), want, "block {}", block.number);
        let want: Vec<_> = early_mids
            .on_block(&early)
            .into_iter()
            .map(|f| f.mids)
            .collect();
        let got: Vec<_> = late_mids
            .on_block(&late)
            .into_iter()
            .map(|f| f.mids)
            .collect();
        assert_eq!(got, want, "block {}", block.number);
    }
    assert!(frames > 0, "the top moved after it");
}

/// The books of the coins a subscription reads first are folded before the
/// block's statuses: their `new` diffs rest with what the diff says and get
/// their opening status's details after the scan. Whichever coins come
/// first, the fold must end each block with the same books (every order's
/// every detail), the same changes in file order and the same report.
#[rstest]
#[case::with_snapshot("btc-985148182")]
#[case::with_trigger_orders("btc-978995377")]
fn folding_some_coins_first_folds_what_one_pass_folds(#[case] capture: &str) {
    let blocks = by_block_blocks(&real(capture));
    let start = || starting_engine(capture);
    let (mut one_pass, mut btc_first, mut all_first) = (start(), start(), start());
    let btc: BTreeSet<String> = ["BTC".to_owned()].into();
    let none = BTreeSet::new();
    let wants = || FoldWants {
        books: true,
        raw_coins: &btc,
        raw_users: &none,
        triggers: None,
        order_changes: Vec::new(),
    };
    let mut first_touched = 0;
    for block in &blocks {
        let (want_report, want) = one_pass.apply_with(block, wants());
        for (engine, first) in [
            (
                &mut btc_first,
                &(|coin: &str| coin == "BTC") as &dyn Fn(&str) -> bool,
            ),
            (&mut all_first, &|_: &str| true),
        ] {
            let begun = engine.begin(block, wants(), first);
            first_touched += begun.first.touched.len();
            // What the first step lists is already final for the block.
            for coin in &begun.first.touched {
                assert_eq!(
                    levels(engine, coin),
                    levels(&one_pass, coin),
                    "{coin}'s levels at block {}",
                    block.number
                );
            }
            let (report, got) = engine.finish(begun);
            assert_eq!(report, want_report, "block {}", block.number);
            assert_eq!(got.changes.order_changes, want.changes.order_changes);
            assert_eq!(got.changes.touched, want.changes.touched);
            assert_eq!(got.changes.raw, want.changes.raw);
            assert!(
                engine.books() == one_pass.books(),
                "books differ after block {}",
                block.number
            );
        }
    }
    assert!(first_touched > 0, "some block touched BTC");
    assert_eq!(btc_first.unknown_ids(), one_pass.unknown_ids());
}

/// The engine a capture's fold starts from: its snapshot when it has one.
fn starting_engine(capture: &str) -> Engine {
    match capture {
        "btc-985148182" => Engine::from_snapshot(btc_snapshot()),
        _ => Engine::new(),
    }
}

/// Each side's price levels of `coin`'s book: price and total size.
type Levels = (Vec<(Px, Option<Sz>)>, Vec<(Px, Option<Sz>)>);

fn levels(engine: &Engine, coin: &str) -> Option<Levels> {
    let book = engine.books().get(coin)?;
    let side = |levels: &mut dyn Iterator<Item = Level<'_>>| {
        levels.map(|l| (l.px(), l.total_sz())).collect::<Vec<_>>()
    };
    Some((side(&mut book.bids()), side(&mut book.asks())))
}
