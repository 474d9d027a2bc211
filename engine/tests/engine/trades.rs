//! Trades from real fills: pairing by `(coin, tid)` checked against an
//! independent pairing with serde_json, one-sided fills, malformed groups
//! and the coin filter.

use std::collections::BTreeMap;

use bytes::Bytes;
use engine::block::Block;
use engine::market::trades::TradesView;
use engine::market::{Market, Needs};
use engine::views::trades::{TradesKey, TradesSubscription};
use engine::views::{Selection, View, ViewError};
use serde_json::{Value, json};

use crate::common::{Sub, by_block_blocks, hourly_file, real};

/// The envelopes of a capture's fills file, parsed with serde_json only.
pub fn fill_envelopes(capture: &str) -> Vec<Value> {
    let file = hourly_file(&real(capture), "node_fills_by_block").unwrap();
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A by-block fills block built from `[user, fill]` events.
pub fn fills_block(number: u64, time_ms: i64, events: &[Value]) -> Block {
    let line = json!({
        "local_time": "2026-03-15T00:00:00.5",
        "block_time": "2026-03-15T00:00:00",
        "block_number": number,
        "events": events,
    });
    let mut block = Block::new(number, time_ms);
    block
        .lines
        .fills
        .push(Bytes::from(serde_json::to_vec(&line).unwrap()));
    block
}

/// Every trade the view emits over a capture, as JSON, with the view.
fn engine_trades(capture: &str) -> (Vec<Value>, TradesView) {
    let mut view = TradesView::new();
    let mut trades = Vec::new();
    for block in by_block_blocks(&real(capture)) {
        let decoded = block.decode();
        assert!(decoded.errors.is_empty());
        view.apply(&decoded);
        for frame in view.frames() {
            assert_eq!(frame.block_number, block.number);
            assert_eq!(frame.time, block.time_ms);
            for trade in &frame.trades {
                assert_eq!(trade.coin, frame.coin);
                trades.push(serde_json::to_value(trade).unwrap());
            }
        }
    }
    (trades, view)
}

/// Independent pairing: group non-dust fills by (block, coin, tid); each
/// group must be one bid and one ask with equal px and sz.
fn reference_trades(capture: &str) -> Vec<Value> {
    let mut trades = Vec::new();
    for envelope in fill_envelopes(capture) {
        let mut groups: BTreeMap<(String, u64), Vec<(String, Value)>> = BTreeMap::new();
        let mut order = Vec::new();
        for event in envelope["events"].as_array().unwrap() {
            let user = event[0].as_str().unwrap().to_owned();
            let fill = event[1].clone();
            if fill["dir"] == "Spot Dust Conversion" {
                continue;
            }
            let key = (
                fill["coin"].as_str().unwrap().to_owned(),
                fill["tid"].as_u64().unwrap(),
            );
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push((user, fill));
        }
        for key in order {
            let group = &groups[&key];
            assert_eq!(group.len(), 2, "{key:?}");
            let bid = group.iter().find(|(_, f)| f["side"] == "B").unwrap();
            let ask = group.iter().find(|(_, f)| f["side"] == "A").unwrap();
            assert_eq!(bid.1["px"], ask.1["px"]);
            assert_eq!(bid.1["sz"], ask.1["sz"]);
            let taker = if bid.1["crossed"] == true { bid } else { ask };
            assert_ne!(bid.1["crossed"], ask.1["crossed"], "one taker per trade");
            trades.push(json!({
                "coin": key.0,
                "side": taker.1["side"],
                "px": taker.1["px"],
                "sz": taker.1["sz"],
                "time": taker.1["time"],
                "hash": taker.1["hash"],
                "tid": key.1,
                "users": [bid.0, ask.0],
            }));
        }
    }
    trades
}

fn sorted(mut trades: Vec<Value>) -> Vec<Value> {
    trades.sort_by_key(|t| (t["coin"].as_str().unwrap().to_owned(), t["tid"].as_u64()));
    trades
}

#[test]
fn every_real_fill_pairs_into_a_trade_across_39_coins() {
    let (trades, view) = engine_trades("fills-unfiltered");
    let reference = reference_trades("fills-unfiltered");
    // 1,388 fills: 1,298 spot dust conversions (one-sided, tid 0) and 90
    // fills forming 45 trades.
    assert_eq!(trades.len(), 45);
    assert_eq!(sorted(trades.clone()), sorted(reference));
    let totals = view.totals();
    assert_eq!(totals.trades, 45);
    assert_eq!(totals.spot_dust_conversion, 1_298);
    assert_eq!(totals.trades * 2 + totals.one_sided(), 1_388);
    assert_eq!(totals.malformed(), 0);
    assert_eq!(totals.ambiguous_taker, 0);
    let coins: std::collections::BTreeSet<&str> =
        trades.iter().map(|t| t["coin"].as_str().unwrap()).collect();
    assert_eq!(coins.len(), 39);
    for family in [
        "@107",
        "PURR/USDC",
        "cash:NVDA",
        "km:USTECH",
        "xyz:GOLD",
        "UNI",
    ] {
        assert!(coins.contains(family), "{family}");
    }
    let asks = trades.iter().filter(|t| t["side"] == "A").count();
    assert_eq!((asks, trades.len() - asks), (38, 7));
}

#[test]
fn twap_trades_in_the_btc_capture_keep_the_all_zero_hash() {
    let (trades, view) = engine_trades("btc-978995377");
    assert_eq!(
        sorted(trades.clone()),
        sorted(reference_trades("btc-978995377"))
    );
    assert_eq!(trades.len(), 2);
    for trade in &trades {
        assert_eq!(trade["hash"], format!("0x{}", "0".repeat(64)));
        assert_eq!(trade["side"], "B");
    }
    assert_eq!(view.totals().malformed(), 0);
}

#[test]
fn the_first_real_trade_serialises_as_the_proto_shape() {
    let blocks = by_block_blocks(&real("fills-unfiltered"));
    let mut view = TradesView::new();
    view.apply(&blocks[0].decode());
    let frame = view.frame("UNI").unwrap();
    assert_eq!(
        serde_json::to_string(frame).unwrap(),
        r#"{"coin":"UNI","time":1773532799991,"block_number":923950857,"trades":[{"coin":"UNI","side":"B","px":"3.9457","sz":"3.9","time":1773532799991,"hash":"0xe9ceeec0f592c513eb480437125f090202ac00a69095e3e58d979a13b4969efe","tid":868180814349127,"users":["0x010461c14e146ac35fe42271bdc1134ee31c703a","0x727956612a8700627451204a3ae26268bd1a1525"]}]}"#
    );
}

#[test]
fn malformed_pairs_are_counted_per_coin_and_folding_goes_on() {
    // Real pairs from the first block, broken in three ways.
    let envelope = &fill_envelopes("fills-unfiltered")[0];
    let events = envelope["events"].as_array().unwrap();
    let pairs: Vec<(Value, Value)> = events
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    let (uni_bid, uni_ask) = pairs[0].clone();
    let (ustech_bid, mut ustech_ask) = pairs[1].clone();
    ustech_ask[1]["side"] = json!("B");
    let (third_bid, mut third_ask) = pairs[2].clone();
    third_ask[1]["px"] = json!("999999.0");
    let third_coin = third_bid[1]["coin"].as_str().unwrap().to_owned();
    let broken = fills_block(
        1,
        1_000,
        &[
            uni_bid.clone(),
            ustech_bid,
            ustech_ask,
            third_bid,
            third_ask,
        ],
    );
    let healthy = fills_block(2, 2_000, &[uni_ask, uni_bid]);

    let mut view = TradesView::new();
    view.apply(&broken.decode());
    assert!(view.frames().is_empty());
    assert_eq!(view.last().issues.len(), 3);
    assert_eq!(
        view.last().issues[1].to_string(),
        "trades: tid 1069495770515718 for km:USTECH at block 1 has two B fills"
    );
    view.apply(&healthy.decode());
    assert_eq!(view.frames().len(), 1);
    let counts = view.counts();
    assert_eq!(counts["UNI"].unmatched, 1);
    assert_eq!(counts["UNI"].trades, 1);
    assert_eq!(counts["km:USTECH"].same_side, 1);
    assert_eq!(counts[third_coin.as_str()].mismatch, 1);
    assert_eq!(view.totals().malformed(), 3);
}

#[test]
fn a_subscription_sees_only_its_coins() {
    let blocks = by_block_blocks(&real("fills-unfiltered"));
    let mut market = Market::new(Needs::ALL);
    let key = TradesKey {
        coins: ["cash:NVDA".to_owned(), "BTC".to_owned()].into(),
    };
    let (mut subscription, opening) = Sub::<TradesSubscription>::open(&mut market, key).unwrap();
    assert!(opening.is_empty(), "trades are live only");
    let mut seen = Vec::new();
    for block in &blocks {
        market.apply(block);
        for frame in subscription.on_block(&market) {
            seen.push((frame.block_number, frame.coin.clone(), frame.trades.len()));
        }
    }
    assert_eq!(seen, [(923_950_857, "cash:NVDA".to_owned(), 4)]);
}

#[test]
fn the_coin_list_is_required_and_capped() {
    let keys = |coins: Vec<String>| {
        TradesSubscription::keys(&Selection {
            coins,
            ..Selection::default()
        })
    };
    assert_eq!(
        keys(vec![]),
        Err(ViewError::CoinCount {
            view: "trades",
            count: 0
        })
    );
    let many: Vec<String> = (0..21).map(|i| format!("@{i}")).collect();
    assert!(keys(many).is_err());
    let mut market = Market::new(Needs::ALL);
    let empty = TradesKey {
        coins: std::collections::BTreeSet::default(),
    };
    assert!(Sub::<TradesSubscription>::open(&mut market, empty).is_err());
}

/// `l1gate replay` of one view: its JSON lines.
pub fn replay_lines(opts: &engine::replay::ReplayOptions) -> Vec<Value> {
    let mut out = Vec::new();
    engine::replay::run(opts, &mut out, &mut |_| {}).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn replay_prints_one_trades_frame_per_line() {
    use engine::replay::{ReplayOptions, ViewKind};
    let mut opts = ReplayOptions::new(real("btc-985148182"), ViewKind::Trades);
    opts.selection.coins = vec!["BTC".into()];
    let lines = replay_lines(&opts);
    let mut expected = Vec::new();
    let mut view = TradesView::new();
    for block in by_block_blocks(&real("btc-985148182")) {
        view.apply(&block.decode());
        expected.extend(
            view.frames()
                .iter()
                .map(|f| serde_json::to_value(f).unwrap()),
        );
    }
    assert_eq!(lines, expected);
    let trades: usize = lines
        .iter()
        .map(|l| l["trades"].as_array().unwrap().len())
        .sum();
    assert_eq!(trades, 11);
    opts.selection.coins.clear();
    assert!(matches!(
        engine::replay::run(&opts, &mut Vec::new(), &mut |_| {}),
        Err(engine::replay::ReplayError::Request(
            ViewError::CoinCount { .. }
        ))
    ));
}
