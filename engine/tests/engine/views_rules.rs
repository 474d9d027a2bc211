//! Every view's sequence rules on small hand-built blocks: change-only BBO,
//! strict L2 suppression, full depth, `seq`/`prev_seq` chains, L4 diff bytes,
//! `sequence` numbering, mids, and the fold's normalisation and reporting.

use bytes::Bytes;
use engine::block::Block;
use engine::book::L4Error;
use engine::fold::Gap;
use engine::market::{Market, Needs};
use engine::snapshot;
use engine::views::bbo::{BboKey, BboSubscription};
use engine::views::l2book::{L2BookKey, L2BookSubscription};
use engine::views::l2diff::{L2DiffKey, L2DiffSubscription};
use engine::views::l4book::{L4BookKey, L4BookSubscription, L4BookUpdate};
use engine::views::l4updates::{L4UpdatesKey, L4UpdatesSubscription};
use engine::views::mids::{MidsKey, MidsSubscription};
use serde_json::{Value, json};

use crate::common::Sub;

const T0: i64 = 1_767_225_600_000;

fn status(user: &str, status: &str, oid: u64, side: &str, px: &str, sz: &str, tif: &str) -> String {
    format!(
        r#"{{"time":"2026-01-01T00:00:00","user":"{user}","hash":null,"builder":null,"status":"{status}","order":{{"coin":"BTC","side":"{side}","limitPx":"{px}","sz":"{sz}","oid":{oid},"timestamp":{T0},"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"{sz}","tif":"{tif}","cloid":null}}}}"#
    )
}

fn open(oid: u64, side: &str, px: &str, sz: &str) -> String {
    status("0xAbC", "open", oid, side, px, sz, "Alo")
}

fn new(oid: u64, side: &str, px: &str, sz: &str) -> String {
    format!(
        r#"{{"user":"0xAbC","oid":{oid},"coin":"BTC","side":"{side}","px":"{px}","raw_book_diff":{{"new":{{"sz":"{sz}"}}}}}}"#
    )
}

fn update(oid: u64, side: &str, px: &str, sz: &str) -> String {
    format!(
        r#"{{"user":"0xAbC","oid":{oid},"coin":"BTC","side":"{side}","px":"{px}","raw_book_diff":{{"update":{{"origSz":"9.0","newSz":"{sz}"}}}}}}"#
    )
}

fn remove(oid: u64, side: &str, px: &str) -> String {
    format!(
        r#"{{"user":"0xAbC","oid":{oid},"coin":"BTC","side":"{side}","px":"{px}","raw_book_diff":"remove"}}"#
    )
}

fn envelope(number: u64, events: &[String]) -> Bytes {
    Bytes::from(format!(
        r#"{{"local_time":"2026-01-01T00:00:01","block_time":"2026-01-01T00:00:00","block_number":{number},"events":[{}]}}"#,
        events.join(",")
    ))
}

fn block(number: u64, statuses: &[String], diffs: &[String]) -> Block {
    let mut block = Block::new(number, T0 + i64::try_from(number).unwrap());
    block.lines.order_statuses.push(envelope(number, statuses));
    block.lines.raw_book_diffs.push(envelope(number, diffs));
    block
}

/// Places an order (opening status + `new`) in one block.
fn place(number: u64, orders: &[(u64, &str, &str, &str)]) -> Block {
    let statuses: Vec<String> = orders
        .iter()
        .map(|(o, s, p, z)| open(*o, s, p, z))
        .collect();
    let diffs: Vec<String> = orders.iter().map(|(o, s, p, z)| new(*o, s, p, z)).collect();
    block(number, &statuses, &diffs)
}

fn to_json<T: serde::Serialize>(frame: &T) -> Value {
    serde_json::to_value(frame).unwrap()
}

fn coins(coins: &[&str]) -> std::collections::BTreeSet<String> {
    coins.iter().map(|&c| c.to_owned()).collect()
}

/// Market at block 1 with bids 100.0 (2 orders) / 99.5 and asks 101.0 / 102.0.
fn seeded() -> Market {
    let mut engine = Market::new(Needs::ALL);
    engine.apply(&place(
        1,
        &[
            (1, "B", "100.0", "1.0"),
            (2, "B", "100.0", "0.5"),
            (3, "B", "99.5", "2.0"),
            (4, "A", "101.0", "1.0"),
            (5, "A", "102.0", "3.0"),
        ],
    ));
    engine
}

#[test]
fn bbo_sends_a_frame_only_when_the_top_changes() {
    let mut engine = seeded();
    let (mut sub, opening) = Sub::<BboSubscription>::open(
        &mut engine,
        BboKey {
            coins: coins(&["BTC", "BTC"]),
        },
    )
    .unwrap();
    assert_eq!(
        to_json(&opening),
        json!([{"coin":"BTC","time":T0 + 1,"block_number":1,
            "bid":{"px":"100.0","sz":"1.5","n":2},"ask":{"px":"101.0","sz":"1.0","n":1}}])
    );
    engine.apply(&place(2, &[(6, "B", "90.0", "1.0")]));
    assert!(
        sub.on_block(&engine).is_empty(),
        "a deep order leaves the top alone"
    );
    engine.apply(&block(3, &[], &[update(2, "B", "100.0", "0.25")]));
    let frames = sub.on_block(&engine);
    assert_eq!(
        to_json(&frames[0])["bid"],
        json!({"px":"100.0","sz":"1.25","n":2})
    );
    engine.apply(&block(
        4,
        &[],
        &[remove(4, "A", "101.0"), remove(5, "A", "102.0")],
    ));
    let frames = sub.on_block(&engine);
    let frame = to_json(&frames[0]);
    assert_eq!(frame["block_number"], 4);
    assert!(
        frame.get("ask").is_none(),
        "an empty side is omitted: {frame}"
    );
    assert!(Sub::<BboSubscription>::open(&mut engine, BboKey { coins: coins(&[]) }).is_err());
}

#[test]
fn bbo_and_mids_follow_coins_listed_after_the_first_block() {
    let mut engine = seeded();
    let (mut bbo, opening) = Sub::<BboSubscription>::open(
        &mut engine,
        BboKey {
            coins: coins(&["AAA", "BTC", "ZZZ"]),
        },
    )
    .unwrap();
    assert_eq!(opening.len(), 3);
    let (mut mids, _) = Sub::<MidsSubscription>::open(&mut engine, MidsKey::default()).unwrap();
    // One block lists a coin sorted before BTC and one after, and moves
    // BTC's best bid: every position after the first listing shifts.
    let mut statuses = on_coin(
        "AAA",
        &[open(10, "B", "1.0", "1.0"), open(11, "A", "3.0", "1.0")],
    );
    statuses.extend(on_coin("ZZZ", &[open(12, "A", "7.5", "2.0")]));
    statuses.push(open(13, "B", "100.5", "1.0"));
    let mut diffs = on_coin(
        "AAA",
        &[new(10, "B", "1.0", "1.0"), new(11, "A", "3.0", "1.0")],
    );
    diffs.extend(on_coin("ZZZ", &[new(12, "A", "7.5", "2.0")]));
    diffs.push(new(13, "B", "100.5", "1.0"));
    engine.apply(&block(2, &statuses, &diffs));
    let frames: Vec<Value> = bbo.on_block(&engine).iter().map(to_json).collect();
    let tops: Vec<(Value, Value, Value)> = frames
        .iter()
        .map(|f| {
            (
                f["coin"].clone(),
                f["bid"]["px"].clone(),
                f["ask"]["px"].clone(),
            )
        })
        .collect();
    assert_eq!(
        tops,
        [
            (json!("AAA"), json!("1.0"), json!("3.0")),
            (json!("BTC"), json!("100.5"), json!("101.0")),
            (json!("ZZZ"), Value::Null, json!("7.5")),
        ]
    );
    let frame = to_json(&mids.on_block(&engine)[0]);
    assert_eq!(frame["mids"], json!({"AAA":"2.0","BTC":"100.75"}));
    // Next block: only ZZZ's top moves; AAA and BTC send nothing.
    engine.apply(&block(
        3,
        &on_coin("ZZZ", &[open(14, "B", "7.0", "1.0")]),
        &on_coin("ZZZ", &[new(14, "B", "7.0", "1.0")]),
    ));
    let frames: Vec<Value> = bbo.on_block(&engine).iter().map(to_json).collect();
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["coin"], "ZZZ");
    assert_eq!(frames[0]["bid"], json!({"px":"7.0","sz":"1.0","n":1}));
    let frame = to_json(&mids.on_block(&engine)[0]);
    assert_eq!(
        frame["mids"],
        json!({"AAA":"2.0","BTC":"100.75","ZZZ":"7.25"})
    );
}

#[test]
fn strict_l2_suppresses_frames_whose_levels_did_not_change() {
    let mut engine = seeded();
    let request = |strict| L2BookKey {
        coin: "BTC".into(),
        n_levels: Some(1),
        strict,
        ..L2BookKey::default()
    };
    let (mut loose, opening) =
        Sub::<L2BookSubscription>::open(&mut engine, request(false)).unwrap();
    let (mut strict, _) = Sub::<L2BookSubscription>::open(&mut engine, request(true)).unwrap();
    assert_eq!(
        to_json(&opening[0]),
        json!({"coin":"BTC","time":T0 + 1,"block_number":1,
            "bids":[{"px":"100.0","sz":"1.5","n":2}],"asks":[{"px":"101.0","sz":"1.0","n":1}]})
    );
    engine.apply(&place(2, &[(6, "B", "90.0", "1.0")]));
    assert!(!loose.on_block(&engine).is_empty(), "the book was touched");
    assert!(
        strict.on_block(&engine).is_empty(),
        "the top level did not change"
    );
    engine.apply(&place(3, &[(7, "B", "100.0", "1.0")]));
    assert_eq!(
        to_json(&strict.on_block(&engine)[0])["bids"][0]["sz"],
        "2.5"
    );
    engine.apply(&block(4, &[], &[]));
    assert!(
        loose.on_block(&engine).is_empty(),
        "an untouched book sends nothing"
    );
}

#[test]
fn n_levels_zero_is_full_depth_and_default_is_twenty() {
    let mut engine = Market::new(Needs::ALL);
    let orders: Vec<(u64, String)> = (0..25u64)
        .map(|i| (i + 1, format!("{}.0", 120 - i)))
        .collect();
    let orders: Vec<(u64, &str, &str, &str)> = orders
        .iter()
        .map(|(oid, px)| (*oid, "B", px.as_str(), "1.0"))
        .collect();
    engine.apply(&place(1, &orders));
    let full = L2BookKey {
        coin: "BTC".into(),
        n_levels: Some(0),
        ..L2BookKey::default()
    };
    let (_, frame) = Sub::<L2BookSubscription>::open(&mut engine, full).unwrap();
    assert_eq!(frame[0].bids.len(), 25);
    let default = L2BookKey {
        coin: "BTC".into(),
        ..L2BookKey::default()
    };
    let (_, frame) = Sub::<L2BookSubscription>::open(&mut engine, default).unwrap();
    assert_eq!(frame[0].bids.len(), 20);
    let coarse = L2BookKey {
        coin: "BTC".into(),
        n_levels: Some(0),
        n_sig_figs: Some(2),
        ..L2BookKey::default()
    };
    let (_, frame) = Sub::<L2BookSubscription>::open(&mut engine, coarse).unwrap();
    let levels: Vec<String> = frame[0]
        .bids
        .iter()
        .map(|l| format!("{}x{}", l.px, l.n))
        .collect();
    // 120..=96: three-digit prices bucket by 10, two-digit ones by 1.
    assert_eq!(
        levels,
        [
            "120.0x1", "110.0x10", "100.0x10", "99.0x1", "98.0x1", "97.0x1", "96.0x1"
        ]
    );
}

#[test]
fn l2_diff_chains_seq_and_sends_removed_levels_as_zero() {
    let mut engine = seeded();
    let request = L2DiffKey {
        coins: coins(&["BTC"]),
        ..L2DiffKey::default()
    };
    let (mut sub, opening) = Sub::<L2DiffSubscription>::open(&mut engine, request).unwrap();
    let first = to_json(&opening[0]);
    assert_eq!(first["diffs"][0]["seq"], 1);
    assert_eq!(first["diffs"][0]["prev_seq"], 0);
    assert_eq!(first["diffs"][0]["snapshot"], true);
    assert_eq!(first["diffs"][0]["bids"].as_array().unwrap().len(), 2);

    engine.apply(&block(
        2,
        &[],
        &[remove(3, "B", "99.5"), update(4, "A", "101.0", "0.5")],
    ));
    let frame = to_json(&sub.on_block(&engine)[0]);
    assert_eq!(
        frame["diffs"],
        json!([{"coin":"BTC","seq":2,"prev_seq":1,"snapshot":false,
            "bids":[{"px":"99.5","sz":"0.0","n":0}],
            "asks":[{"px":"101.0","sz":"0.5","n":1}]}])
    );
    engine.apply(&block(3, &[], &[]));
    assert!(sub.on_block(&engine).is_empty(), "nothing changed");
    engine.apply(&place(4, &[(8, "A", "100.5", "1.0")]));
    let frame = to_json(&sub.on_block(&engine)[0]);
    assert_eq!(
        (
            frame["diffs"][0]["seq"].clone(),
            frame["diffs"][0]["prev_seq"].clone()
        ),
        (json!(3), json!(2))
    );
    assert_eq!(
        frame["diffs"][0]["asks"],
        json!([{"px":"100.5","sz":"1.0","n":1}])
    );
}

#[test]
fn l4_diff_data_is_the_source_event_bytes() {
    let mut engine = seeded();
    let (mut sub, opening) =
        Sub::<L4BookSubscription>::open(&mut engine, L4BookKey::new("BTC".into(), None)).unwrap();
    let opening = &opening[0];
    let L4BookUpdate::Snapshot(snapshot) = opening else {
        panic!("opening is a snapshot");
    };
    assert_eq!(
        snapshot.bids.iter().map(|o| o.oid).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(to_json(opening)["snapshot"]["bids"][0]["tif"], "Alo");

    let rejected = status("0x9", "badAloPxRejected", 99, "B", "101.5", "1.0", "Alo");
    let statuses = [rejected.clone(), open(9, "A", "103.0", "1.0")];
    let diffs = [new(9, "A", "103.0", "1.0"), remove(1, "B", "100.0")];
    engine.apply(&block(2, &statuses, &diffs));
    let frame = sub.on_block(&engine).pop().unwrap();
    let L4BookUpdate::Diff(diff) = &frame else {
        panic!("a block with events sends a diff");
    };
    let expected = format!(
        r#"{{"order_statuses":[{},{}],"book_diffs":[{},{}]}}"#,
        statuses[0], statuses[1], diffs[0], diffs[1]
    );
    assert_eq!(diff.data.as_bytes(), expected.as_bytes());
    let line = serde_json::to_string(&frame).unwrap();
    assert!(line.contains(&format!(r#""data":{expected}"#)), "{line}");
    engine.apply(&block(3, &[], &[]));
    assert!(sub.on_block(&engine).is_empty());
}

#[test]
fn l4_updates_open_with_sequence_one_and_count_up() {
    let mut engine = seeded();
    engine.apply(&block(
        2,
        &[status("0xOTHER", "open", 20, "A", "105.0", "1.0", "Gtc")],
        &[
            r#"{"user":"0xOTHER","oid":20,"coin":"BTC","side":"A","px":"105.0","raw_book_diff":{"new":{"sz":"1.0"}}}"#.to_owned(),
        ],
    ));
    let request = L4UpdatesKey {
        coins: coins(&[]),
        users: coins(&["0xabc"]),
    };
    let (mut sub, opening) = Sub::<L4UpdatesSubscription>::open(&mut engine, request).unwrap();
    let opening = to_json(&opening[0]);
    assert_eq!(
        (opening["sequence"].clone(), opening["snapshot"].clone()),
        (json!(1), json!(true))
    );
    let oids: Vec<u64> = opening["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["oid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        oids,
        [1, 2, 3, 4, 5],
        "only 0xAbC's orders, matched case-insensitively"
    );
    assert_eq!(opening["diffs"][0]["diff_type"], "L4_ORDER_DIFF_TYPE_NEW");

    engine.apply(&block(
        3,
        &[],
        &[remove(20, "A", "105.0")].map(|d| d.replace("0xAbC", "0xOTHER")),
    ));
    assert!(sub.on_block(&engine).is_empty(), "another user's change");
    engine.apply(&block(
        4,
        &[],
        &[update(2, "B", "100.0", "0.1"), remove(3, "B", "99.5")],
    ));
    let frame = to_json(&sub.on_block(&engine)[0]);
    assert_eq!(
        frame,
        json!({"time":T0 + 4,"block_number":4,"snapshot":false,"sequence":2,"diffs":[
            {"diff_type":"L4_ORDER_DIFF_TYPE_UPDATE","coin":"BTC","oid":2,"user":"0xAbC","side":"B","px":"100.0","sz":"0.1"},
            {"diff_type":"L4_ORDER_DIFF_TYPE_REMOVE","coin":"BTC","oid":3,"user":"0xAbC","side":"B","px":"99.5","sz":"0.0"}]})
    );
    engine.apply(&place(5, &[(30, "B", "98.0", "1.0")]));
    assert_eq!(to_json(&sub.on_block(&engine)[0])["sequence"], 3);
}

#[test]
fn mids_are_exact_and_sent_only_on_change() {
    let mut engine = seeded();
    let (mut sub, opening) =
        Sub::<MidsSubscription>::open(&mut engine, MidsKey::default()).unwrap();
    assert_eq!(to_json(&opening[0])["mids"], json!({"BTC":"100.5"}));
    engine.apply(&place(2, &[(6, "B", "90.0", "1.0")]));
    assert!(sub.on_block(&engine).is_empty());
    engine.apply(&place(3, &[(7, "A", "100.25", "1.0")]));
    assert_eq!(
        to_json(&sub.on_block(&engine)[0])["mids"],
        json!({"BTC":"100.125"})
    );
    engine.apply(&block(
        4,
        &[],
        &[
            remove(7, "A", "100.25"),
            remove(4, "A", "101.0"),
            remove(5, "A", "102.0"),
        ],
    ));
    assert_eq!(to_json(&sub.on_block(&engine)[0])["mids"], json!({}));
}

#[test]
fn ioc_residuals_and_triggered_orders_rest_normalised() {
    let mut engine = Market::new(Needs::ALL);
    let ioc = status("0xa", "open", 1, "B", "100.0", "1.0", "Ioc");
    let triggered = status("0xa", "triggered", 2, "A", "110.0", "1.0", "Gtc")
        .replace(
            r#""triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0""#,
            r#""triggerCondition":"Price above 105","isTrigger":true,"triggerPx":"105.0""#,
        )
        .replace(r#""orderType":"Limit""#, r#""orderType":"Stop Limit""#);
    let report = engine.apply(&block(
        7,
        &[ioc, triggered],
        &[new(1, "B", "100.0", "0.4"), new(2, "A", "109.0", "1.0")],
    ));
    assert_eq!(report.issues, []);
    let book = engine.books().get("BTC").unwrap();
    let rested = book.get(1).unwrap();
    assert_eq!(
        (rested.terms.tif.as_deref(), rested.sz.to_string()),
        (Some("Gtc"), "0.4".to_owned())
    );
    let fired = book.get(2).unwrap();
    assert_eq!(
        fired.limit_px.to_string(),
        "109.0",
        "the diff's px is authoritative"
    );
    assert_eq!(&*fired.terms.trigger_condition, "Triggered");
    assert!(!fired.terms.is_trigger);
    assert_eq!(fired.terms.trigger_px.to_string(), "0.0");
    assert_eq!(fired.terms.tif.as_deref(), Some("Gtc"));
    assert_eq!(&*fired.terms.order_type, "Stop Limit");
}

#[test]
fn unknown_ids_missing_statuses_and_gaps_are_reported_not_fatal() {
    let mut engine = seeded();
    let report = engine.apply(&block(
        5,
        &[],
        &[
            remove(77, "B", "1.0"),
            update(78, "A", "2.0", "1.0"),
            new(79, "B", "99.0", "1.0"),
        ],
    ));
    assert_eq!(
        report.gap,
        Some(Gap {
            expected: 2,
            got: 5
        })
    );
    assert_eq!(
        report.issues,
        [
            L4Error::UnknownOid {
                coin: "BTC".into(),
                oid: 77,
                block: 5
            },
            L4Error::UnknownOid {
                coin: "BTC".into(),
                oid: 78,
                block: 5
            },
            L4Error::MissingOpeningStatus {
                coin: "BTC".into(),
                oid: 79,
                block: 5
            },
        ]
    );
    assert_eq!(
        report.issues[0].to_string(),
        "l4: unknown oid 77 for BTC at block 5"
    );
    let counts = engine.unknown_ids()["BTC"];
    assert_eq!((counts.unknown_oid, counts.missing_status), (2, 1));
    assert!(
        engine.books().get("BTC").unwrap().get(79).is_some(),
        "the order still rests"
    );
    let mut broken = block(6, &[], &[]);
    broken
        .lines
        .fills
        .push(Bytes::from_static(b"{not an envelope"));
    assert_eq!(engine.apply(&broken).decode_errors.len(), 1);
    assert!(engine.apply(&block(6, &[], &[])).skipped);
}

#[test]
fn a_diverged_coin_is_reset_from_a_newer_snapshot() {
    let mut engine = seeded();
    let (mut l2diff, _) = Sub::<L2DiffSubscription>::open(
        &mut engine,
        L2DiffKey {
            coins: coins(&["BTC"]),
            ..L2DiffKey::default()
        },
    )
    .unwrap();
    let (mut l4, _) =
        Sub::<L4BookSubscription>::open(&mut engine, L4BookKey::new("BTC".into(), None)).unwrap();
    // The node's view at height 1: order 3 is missing, so BTC diverged.
    let node = r#"[1,[["BTC",[[["0xAbC",{"coin":"BTC","side":"B","limitPx":"100.0","sz":"1.0","oid":1,"timestamp":0,"triggerCondition":"N/A","isTrigger":false,"triggerPx":"0.0","children":[],"isPositionTpsl":false,"reduceOnly":false,"orderType":"Limit","origSz":"1.0","tif":"Alo","cloid":null}]],[]]]]]"#;
    let node = snapshot::parse(node.as_bytes()).unwrap();
    let resets = engine.check_snapshot(&node).unwrap();
    assert_eq!(resets.len(), 1);
    assert_eq!(resets[0].coin, "BTC");
    assert_eq!(engine.books().get("BTC").unwrap().len(), 1);
    assert!(
        engine.check_snapshot(&node).unwrap().is_empty(),
        "now in line"
    );

    let report = engine.apply(&block(2, &[], &[]));
    assert_eq!(report.resets.len(), 1);
    let entry = to_json(&l2diff.on_block(&engine)[0])["diffs"][0].clone();
    assert_eq!(
        (
            entry["snapshot"].clone(),
            entry["seq"].clone(),
            entry["prev_seq"].clone()
        ),
        (json!(true), json!(2), json!(0))
    );
    assert_eq!(entry["bids"], json!([{"px":"100.0","sz":"1.0","n":1}]));
    assert!(matches!(
        l4.on_block(&engine).as_slice(),
        [L4BookUpdate::Snapshot(_)]
    ));
    assert_eq!(
        engine.check_snapshot(&node),
        Err(snapshot::SnapshotError::HeightMismatch {
            snapshot: 1,
            folded: Some(2)
        })
    );
}

/// `events` of BTC rewritten for `coin`.
fn on_coin(coin: &str, events: &[String]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.replace(r#""coin":"BTC""#, &format!(r#""coin":"{coin}""#)))
        .collect()
}

#[test]
fn an_outcome_book_mirrors_its_sibling_as_synthetic_orders() {
    let mut engine = Market::new(Needs::ALL);
    // #1890: a bid at 0.40. Its sibling #1891: an ask at 0.55 and a bid at
    // 0.30, which project onto #1890 as a bid at 0.45 and an ask at 0.7.
    let native = [(1, "B", "0.40", "10.0")];
    let sibling = [(2, "A", "0.55", "3.0"), (3, "B", "0.30", "4.0")];
    let mut statuses = on_coin("#1890", &[open(1, "B", "0.40", "10.0")]);
    let mut diffs = on_coin("#1890", &[new(1, "B", "0.40", "10.0")]);
    for (oid, side, px, sz) in sibling {
        statuses.extend(on_coin("#1891", &[open(oid, side, px, sz)]));
        diffs.extend(on_coin("#1891", &[new(oid, side, px, sz)]));
    }
    assert_eq!(native.len(), 1);
    engine.apply(&block(1, &statuses, &diffs));

    let (mut sub, opening) =
        Sub::<L4BookSubscription>::open(&mut engine, L4BookKey::new("#1890".into(), None)).unwrap();
    let snapshot = to_json(&opening[0])["snapshot"].clone();
    let book = |side: &str| {
        snapshot[side]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["oid"].as_u64().unwrap(),
                    o["side"].as_str().unwrap().to_owned(),
                    o["limit_px"].as_str().unwrap().to_owned(),
                    o["sz"].as_str().unwrap().to_owned(),
                    o["coin"].as_str().unwrap().to_owned(),
                    o["synthetic"].as_bool().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    let row = |oid: u64, side: &str, px: &str, sz: &str, synthetic: bool| {
        (
            oid,
            side.to_owned(),
            px.to_owned(),
            sz.to_owned(),
            "#1890".to_owned(),
            synthetic,
        )
    };
    // Best first: the projected 0.45 bid outranks the native 0.40.
    assert_eq!(
        book("bids"),
        [
            row(2, "B", "0.45", "3.0", true),
            row(1, "B", "0.40", "10.0", false)
        ]
    );
    // Prices print the way the node writes them.
    assert_eq!(book("asks"), [row(3, "A", "0.7", "4.0", true)]);

    // A block with only sibling events still sends a diff, carrying them
    // byte for byte under "mirror".
    let cancel = on_coin("#1891", &[remove(3, "B", "0.30")]);
    let canceled = on_coin(
        "#1891",
        &[status("0xAbC", "canceled", 3, "B", "0.30", "4.0", "Alo")],
    );
    engine.apply(&block(2, &canceled, &cancel));
    let L4BookUpdate::Diff(diff) = sub.on_block(&engine).pop().unwrap() else {
        panic!("sibling events send a diff");
    };
    let expected = format!(
        r##"{{"order_statuses":[],"book_diffs":[],"mirror":{{"coin":"#1891","order_statuses":[{}],"book_diffs":[{}]}}}}"##,
        canceled[0], cancel[0]
    );
    assert_eq!(diff.data.as_str(), expected);
    let parsed: Value = serde_json::from_slice(diff.data.as_bytes()).unwrap();
    assert_eq!(parsed["mirror"]["book_diffs"][0]["oid"], 3);

    // mirror = false: native orders only, and sibling events send nothing.
    let (mut plain, opening) =
        Sub::<L4BookSubscription>::open(&mut engine, L4BookKey::new("#1890".into(), Some(false)))
            .unwrap();
    let snapshot = to_json(&opening[0])["snapshot"].clone();
    assert_eq!(snapshot["bids"].as_array().unwrap().len(), 1);
    assert_eq!(snapshot["asks"].as_array().unwrap().len(), 0);
    let more = on_coin("#1891", &[remove(2, "A", "0.55")]);
    let gone = on_coin(
        "#1891",
        &[status("0xAbC", "canceled", 2, "A", "0.55", "3.0", "Alo")],
    );
    engine.apply(&block(3, &gone, &more));
    assert!(plain.on_block(&engine).is_empty());
    assert!(!sub.on_block(&engine).is_empty());
}

#[test]
fn only_outcome_coins_have_a_sibling() {
    use engine::coin::outcome_sibling;
    assert_eq!(outcome_sibling("#1890").as_deref(), Some("#1891"));
    assert_eq!(outcome_sibling("#1891").as_deref(), Some("#1890"));
    assert_eq!(outcome_sibling("BTC"), None);
    assert_eq!(outcome_sibling("@107"), None);
    assert_eq!(outcome_sibling("#"), None);
    assert_eq!(outcome_sibling("#1x"), None);
}
