//! TP/SL on the real BTC capture (trigger placements, a position TP/SL, a
//! trigger that fires), checked against an independent scan of the status
//! file; position TP/SL sizes resolved from fills; subscription snapshots
//! and sequences; and a proptest tying the resolved size to the sum of
//! signed fills.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use engine::block::Block;
use engine::market::Market;
use engine::market::tpsl::{TpslDiffType, TpslView};
use engine::views::View;
use engine::views::tpsl::{TpslKey, TpslSubscription, TpslUpdate};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::common::{Sub, by_block_blocks, hourly_file, real};

const CAPTURE: &str = "btc-978995377";
const POSITION_TPSL_USER: &str = "0x23e528addf22cfd340b9b7aafb3bf90dc11981d3";
const POSITION_TPSL_OID: u64 = 405_401_004_883;

/// Every status event of the capture with its block, parsed with serde_json.
fn status_events() -> Vec<(u64, Value)> {
    let file = hourly_file(&real(CAPTURE), "node_order_statuses_by_block").unwrap();
    let mut out = Vec::new();
    for line in std::fs::read_to_string(file).unwrap().lines() {
        let envelope: Value = serde_json::from_str(line).unwrap();
        let block = envelope["block_number"].as_u64().unwrap();
        for event in envelope["events"].as_array().unwrap() {
            out.push((block, event.clone()));
        }
    }
    out
}

/// `(block, diff_type, oid, reason)` expected from the statuses alone: an
/// open trigger is added; the first other status of a tracked oid removes it.
fn reference_diffs() -> Vec<(u64, &'static str, u64, Option<String>)> {
    let mut tracked = BTreeSet::new();
    let mut out = Vec::new();
    for (block, event) in status_events() {
        let order = &event["order"];
        let oid = order["oid"].as_u64().unwrap();
        if event["status"] == "open" && order["isTrigger"] == true {
            if tracked.insert(oid) {
                out.push((block, "TPSL_DIFF_TYPE_ADD", oid, None));
            }
        } else if tracked.remove(&oid) {
            let reason = event["status"].as_str().unwrap().to_owned();
            out.push((block, "TPSL_DIFF_TYPE_REMOVE", oid, Some(reason)));
        }
    }
    out
}

fn diff_rows(frames: &[TpslUpdate]) -> Vec<(u64, &'static str, u64, Option<String>)> {
    frames
        .iter()
        .flat_map(|frame| {
            frame.diffs.iter().map(move |diff| {
                let value = serde_json::to_value(diff).unwrap();
                let kind = match diff.diff_type {
                    TpslDiffType::Add => "TPSL_DIFF_TYPE_ADD",
                    TpslDiffType::Remove => "TPSL_DIFF_TYPE_REMOVE",
                    TpslDiffType::Update => "TPSL_DIFF_TYPE_UPDATE",
                };
                assert_eq!(value["diff_type"], kind);
                (frame.block_number, kind, diff.oid, diff.reason.clone())
            })
        })
        .collect()
}

/// Folds the capture with one subscription opened before the first block.
fn fold_capture(key: &TpslKey) -> (Market, Vec<TpslUpdate>) {
    let mut market = Market::new(TpslSubscription::NEEDS);
    let (mut subscription, snapshot) =
        Sub::<TpslSubscription>::open(&mut market, key.clone()).unwrap();
    let mut frames = snapshot;
    for block in by_block_blocks(&real(CAPTURE)) {
        let report = market.apply(&block);
        assert!(report.decode_errors.is_empty());
        frames.extend(subscription.on_block(&market));
    }
    (market, frames)
}

/// A TP/SL key of `coins` and `users` (users lowercased, as the views
/// match them).
fn key(coins: &[&str], users: &[&str]) -> TpslKey {
    TpslKey {
        coins: coins.iter().map(|&c| c.to_owned()).collect(),
        users: users.iter().map(|u| u.to_ascii_lowercase()).collect(),
    }
}

#[test]
fn real_trigger_orders_are_added_and_removed_with_the_status_as_reason() {
    let (view, frames) = fold_capture(&TpslKey::default());
    let expected = reference_diffs();
    assert_eq!(
        expected,
        [
            (978_995_382, "TPSL_DIFF_TYPE_ADD", POSITION_TPSL_OID, None),
            (978_995_385, "TPSL_DIFF_TYPE_ADD", 405_401_006_238, None),
            (
                978_995_387,
                "TPSL_DIFF_TYPE_REMOVE",
                405_401_006_238,
                Some("triggered".to_owned())
            ),
            (978_995_390, "TPSL_DIFF_TYPE_ADD", 405_401_008_974, None),
        ]
    );
    assert_eq!(diff_rows(&frames[1..]), expected);
    let sequences: Vec<u64> = frames.iter().map(|f| f.sequence).collect();
    assert_eq!(sequences, [1, 2, 3, 4, 5]);
    assert!(frames[0].snapshot && frames[0].diffs.is_empty());
    assert!(frames[1..].iter().all(|f| !f.snapshot));
    let left: Vec<u64> = view.tpsl().orders().map(|o| o.oid()).collect();
    assert_eq!(left, [POSITION_TPSL_OID, 405_401_008_974]);
}

#[test]
fn a_real_trigger_diff_serialises_as_the_proto_shape() {
    let (_, frames) = fold_capture(&TpslKey::default());
    let stop = serde_json::to_value(&frames[2]).unwrap();
    assert_eq!(
        stop,
        json!({
            "time": 1_777_582_003_843_i64,
            "block_number": 978_995_385,
            "diffs": [{
                "diff_type": "TPSL_DIFF_TYPE_ADD",
                "oid": 405_401_006_238_u64,
                "coin": "BTC",
                "user": "0x44315d658eca41c0bdac80054bc164123934fc3a",
                "side": "A",
                "trigger_px": "77409.0",
                "limit_px": "76635.0",
                "sz": "0.00012",
                "trigger_condition": "Price below 77409",
                "order_type": "Stop Market",
                "is_position_tpsl": false,
                "reduce_only": true,
                "timestamp": 1_777_582_003_843_i64,
                "orig_sz": "0.00012",
                "cloid": "0xc30fa7404e6b3fb4f9aca728f8899f6b",
            }],
            "snapshot": false,
            "sequence": 3,
        })
    );
    let removal = serde_json::to_value(&frames[3].diffs[0]).unwrap();
    assert_eq!(removal["reason"], "triggered");
    assert_eq!(removal["diff_type"], "TPSL_DIFF_TYPE_REMOVE");
}

#[test]
fn a_late_subscriber_gets_a_snapshot_and_filters_users_case_insensitively() {
    let (mut market, _) = fold_capture(&TpslKey::default());
    let (_, mut snapshot) = Sub::<TpslSubscription>::open(&mut market, TpslKey::default()).unwrap();
    let snapshot = snapshot.pop().unwrap();
    assert_eq!((snapshot.sequence, snapshot.snapshot), (1, true));
    assert_eq!(snapshot.block_number, 978_995_416);
    assert!(
        snapshot
            .diffs
            .iter()
            .all(|d| d.diff_type == TpslDiffType::Add)
    );
    assert_eq!(snapshot.diffs.len(), 2);

    let shouted = POSITION_TPSL_USER.to_ascii_uppercase().replace("0X", "0x");
    let one_user = TpslKey {
        coins: ["BTC".to_owned()].into(),
        users: [shouted].into(),
    };
    let (_, frames) = fold_capture(&one_user);
    assert_eq!(
        diff_rows(&frames),
        [(978_995_382, "TPSL_DIFF_TYPE_ADD", POSITION_TPSL_OID, None)]
    );
    assert_eq!(frames[1].sequence, 2);

    let other_coin = key(&["xyz:NVDA"], &[]);
    let (_, frames) = fold_capture(&other_coin);
    assert_eq!(frames.len(), 1, "only the empty snapshot");
}

#[test]
fn real_fills_move_positions_by_start_position_and_signed_size() {
    let (market, _) = fold_capture(&TpslKey::default());
    let positions = market.tpsl().positions();
    // TWAP buyer: 0.03395 + 0.00153 + 0.00153; maker seller: 0.10933 − 2 × 0.00153.
    assert_eq!(
        positions
            .position("0xfca397d8b8de71639d9e4573d7ecc8199cbff42f", "BTC")
            .to_string(),
        "0.03701"
    );
    assert_eq!(
        positions
            .position("0xC8264EBC379E26946E7D31AE4746C27182849755", "BTC")
            .to_string(),
        "0.10627"
    );
    // The first fill of each account starts from an unseen position.
    assert_eq!(positions.mismatches(), 2);
}

/// A block of constructed lines (`fills` events are `[user, fill]`).
fn constructed_block(number: u64, statuses: &[Value], fills: &[Value]) -> Block {
    let envelope = |events: &[Value]| {
        Bytes::from(
            serde_json::to_vec(&json!({
                "local_time": "2026-04-30T20:46:47.5",
                "block_time": "2026-04-30T20:46:47",
                "block_number": number,
                "events": events,
            }))
            .unwrap(),
        )
    };
    let mut block = Block::new(
        number,
        1_777_582_007_000 + i64::try_from(number % 1_000).unwrap(),
    );
    block.lines.order_statuses.push(envelope(statuses));
    block.lines.fills.push(envelope(fills));
    block
}

fn btc_fill(user: &str, side: &str, sz: &str, start: &str, tid: u64) -> Value {
    json!([user, {
        "coin": "BTC", "px": "76500.0", "sz": sz, "side": side, "time": 1_777_582_007_000_i64,
        "startPosition": start, "dir": "Open Long", "closedPnl": "0.0",
        "hash": "0x01", "oid": 1, "crossed": true, "fee": "0.0", "tid": tid,
        "feeToken": "USDC", "twapId": null
    }])
}

#[test]
fn position_tpsl_size_follows_the_position_from_fills() {
    let mut market = Market::new(TpslSubscription::NEEDS);
    for block in by_block_blocks(&real(CAPTURE)) {
        market.apply(&block);
    }
    let (mut subscription, _) =
        Sub::<TpslSubscription>::open(&mut market, key(&[], &[POSITION_TPSL_USER])).unwrap();
    let order = market
        .tpsl()
        .order("BTC", POSITION_TPSL_USER, POSITION_TPSL_OID)
        .unwrap();
    assert!(order.is_position_tpsl);
    assert_eq!(order.sz.to_string(), "0.0", "no fill of this user seen yet");

    let user = POSITION_TPSL_USER;
    let canceled = status_events()
        .into_iter()
        .find(|(_, e)| e["order"]["oid"] == POSITION_TPSL_OID)
        .map(|(_, mut event)| {
            event["status"] = json!("canceled");
            event
        })
        .unwrap();
    let blocks = [
        constructed_block(978_995_417, &[], &[btc_fill(user, "B", "0.01", "0.0", 1)]),
        constructed_block(978_995_418, &[], &[btc_fill(user, "A", "0.004", "0.01", 2)]),
        // Another user's fill: the order's size does not move.
        constructed_block(978_995_419, &[], &[btc_fill("0xabc", "B", "1.0", "0.0", 3)]),
        constructed_block(
            978_995_420,
            &[canceled],
            &[btc_fill(user, "A", "0.001", "0.006", 4)],
        ),
    ];
    let mut frames = Vec::new();
    for block in &blocks {
        market.apply(block);
        frames.extend(subscription.on_block(&market));
    }
    let rows: Vec<(u64, u64, TpslDiffType, String, Option<String>)> = frames
        .iter()
        .flat_map(|f| {
            f.diffs.iter().map(|d| {
                (
                    f.block_number,
                    f.sequence,
                    d.diff_type,
                    d.sz.to_string(),
                    d.reason.clone(),
                )
            })
        })
        .collect();
    assert_eq!(
        rows,
        [
            (978_995_417, 2, TpslDiffType::Update, "0.01".into(), None),
            (978_995_418, 3, TpslDiffType::Update, "0.006".into(), None),
            // A removal echoes the order as last published.
            (
                978_995_420,
                4,
                TpslDiffType::Remove,
                "0.006".into(),
                Some("canceled".into())
            ),
        ]
    );
    assert!(
        frames
            .iter()
            .all(|f| f.diffs.iter().all(|d| d.orig_sz.to_string() == "0.0"))
    );
    assert!(
        market
            .tpsl()
            .order("BTC", user, POSITION_TPSL_OID)
            .is_none()
    );
}

#[test]
fn spot_and_outcome_trigger_orders_are_not_tracked() {
    let (_, event) = status_events()
        .into_iter()
        .find(|(_, e)| e["order"]["oid"] == 405_401_008_974_u64)
        .unwrap();
    let mut statuses = Vec::new();
    for coin in ["@107", "PURR/USDC", "#1890", "xyz:NVDA"] {
        let mut copy = event.clone();
        copy["order"]["coin"] = json!(coin);
        statuses.push(copy);
    }
    let mut view = TpslView::new();
    view.apply(&constructed_block(1, &statuses, &[]).decode());
    let coins: Vec<&str> = view.orders().map(|o| o.coin()).collect();
    assert_eq!(coins, ["xyz:NVDA"]);
}

proptest! {
    /// Random fills of one account: after every block the position TP/SL's
    /// published size is |Σ signed fills|, and an UPDATE is emitted exactly
    /// when that size moved.
    #[test]
    fn resolved_size_is_the_absolute_sum_of_signed_fills(
        steps in prop::collection::vec((any::<bool>(), 1u32..50_000), 1..60)
    ) {
        let mut view = TpslView::new();
        view.apply(&constructed_block(1_000, &[placed_position_tpsl().clone()], &[]).decode());
        let mut sum: i64 = 0; // units of 1e-5 BTC
        let mut published: BTreeMap<u64, i64> = BTreeMap::new();
        published.insert(POSITION_TPSL_OID, 0);
        for (index, (buy, units)) in steps.into_iter().enumerate() {
            let start = format_units(sum);
            let units = i64::from(units);
            sum += if buy { units } else { -units };
            let fill = btc_fill(
                POSITION_TPSL_USER,
                if buy { "B" } else { "A" },
                &format_units(units),
                &start,
                index as u64 + 10,
            );
            view.apply(&constructed_block(1_001 + index as u64, &[], &[fill]).decode());
            let order = view.order("BTC", POSITION_TPSL_USER, POSITION_TPSL_OID).unwrap();
            prop_assert_eq!(order.sz.to_string(), format_units(sum.abs()));
            let moved = published[&POSITION_TPSL_OID] != sum.abs();
            prop_assert_eq!(view.diffs().len(), usize::from(moved));
            published.insert(POSITION_TPSL_OID, sum.abs());
            prop_assert_eq!(view.positions().mismatches(), 0);
        }
    }
}

/// The real `open` status of the position TP/SL, read once.
fn placed_position_tpsl() -> &'static Value {
    static PLACED: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    PLACED.get_or_init(|| {
        status_events()
            .into_iter()
            .find(|(_, e)| e["order"]["oid"] == POSITION_TPSL_OID)
            .map(|(_, event)| event)
            .unwrap()
    })
}

/// Units of 1e-5 printed canonically (`150` → `"0.0015"`, `0` → `"0.0"`).
fn format_units(units: i64) -> String {
    let sign = if units < 0 { "-" } else { "" };
    let magnitude = units.unsigned_abs();
    let text = format!("{}.{:05}", magnitude / 100_000, magnitude % 100_000);
    let trimmed = text.trim_end_matches('0');
    let trimmed = if trimmed.ends_with('.') {
        format!("{trimmed}0")
    } else {
        trimmed.to_owned()
    };
    format!("{sign}{trimmed}")
}

#[test]
fn replay_prints_the_snapshot_then_numbered_frames() {
    use engine::replay::{ReplayError, ReplayOptions, ViewKind};
    use engine::views::ViewError;

    use crate::trades::replay_lines;
    let opts = ReplayOptions::new(real(CAPTURE), ViewKind::Tpsl);
    let lines = replay_lines(&opts);
    // Opens after block 978995377 (no trigger there), then four frames.
    let shape: Vec<(u64, bool, u64, usize)> = lines
        .iter()
        .map(|l| {
            (
                l["block_number"].as_u64().unwrap(),
                l["snapshot"].as_bool().unwrap(),
                l["sequence"].as_u64().unwrap(),
                l["diffs"].as_array().unwrap().len(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (978_995_377, true, 1, 0),
            (978_995_382, false, 2, 1),
            (978_995_385, false, 3, 1),
            (978_995_387, false, 4, 1),
            (978_995_390, false, 5, 1),
        ]
    );
    assert_eq!(lines[3]["diffs"][0]["reason"], "triggered");

    let mut spot = ReplayOptions::new(real(CAPTURE), ViewKind::Tpsl);
    spot.selection.coins = vec!["@107".into()];
    assert_eq!(
        engine::replay::run(&spot, &mut Vec::new(), &mut |_| {}).unwrap_err(),
        ReplayError::Request(ViewError::NotPerp {
            coin: "@107".into()
        })
    );
}
