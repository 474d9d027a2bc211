//! The fills family on real fills: exact field mapping, user, builder and
//! liquidation filters, coin scopes with unknown coins, and gap-free
//! per-subscription sequences.

use std::collections::BTreeSet;

use engine::block::Block;
use engine::market::Market;
use engine::market::fills::{Fill, FillsView};
use engine::views::fills::{FillsFilter, FillsKey, FillsSubscription, FillsUpdate};
use engine::views::{View, ViewSettings};
use serde_json::{Map, Value, json};

use crate::common::{Sub, by_block_blocks, real};
use crate::trades::{fill_envelopes, fills_block};

/// Runs a subscription of `key`, opened before the first block, over
/// `blocks`; returns its frames.
fn run(key: FillsKey, blocks: &[Block]) -> Vec<FillsUpdate> {
    let mut market = Market::new(FillsSubscription::NEEDS);
    let (mut subscription, opening) = Sub::<FillsSubscription>::open(&mut market, key).unwrap();
    assert!(opening.is_empty(), "fills are live only");
    let mut frames = Vec::new();
    for block in blocks {
        market.apply(block);
        frames.extend(subscription.on_block(&market));
    }
    frames
}

fn key(filter: FillsFilter, coins: &[&str]) -> FillsKey {
    FillsKey {
        filter,
        coins: coins.iter().map(|&c| c.to_owned()).collect(),
    }
}

fn real_blocks() -> Vec<Block> {
    by_block_blocks(&real("fills-unfiltered"))
}

/// `(block_number, sequence, fills)` of each frame.
fn shape(frames: &[FillsUpdate]) -> Vec<(u64, u64, usize)> {
    frames
        .iter()
        .map(|f| (f.block_number, f.sequence, f.fills.len()))
        .collect()
}

/// The node's fill object renamed to snake_case, `user` first, a null
/// `twapId` dropped: what the frame must carry, built with serde_json only.
fn expected_fill(user: &str, fill: &Value) -> Value {
    let mut out = Map::new();
    out.insert("user".into(), json!(user));
    for (key, value) in fill.as_object().unwrap() {
        if value.is_null() {
            continue;
        }
        let mut snake = String::new();
        for c in key.chars() {
            if c.is_ascii_uppercase() {
                snake.push('_');
                snake.push(c.to_ascii_lowercase());
            } else {
                snake.push(c);
            }
        }
        out.insert(snake, value.clone());
    }
    Value::Object(out)
}

#[test]
fn every_real_fill_maps_field_for_field() {
    let blocks = real_blocks();
    let envelopes = fill_envelopes("fills-unfiltered");
    let mut view = FillsView::new();
    let mut checked = 0;
    for (block, envelope) in blocks.iter().zip(&envelopes) {
        view.apply(&block.decode());
        let events = envelope["events"].as_array().unwrap();
        assert_eq!(view.fills().len(), events.len());
        for (fill, event) in view.fills().iter().zip(events) {
            let want = expected_fill(event[0].as_str().unwrap(), &event[1]);
            assert_eq!(serde_json::to_value(fill).unwrap(), want);
            checked += 1;
        }
    }
    assert_eq!(checked, 1_388);
}

#[test]
fn all_fills_number_frames_without_gaps_and_skip_empty_blocks() {
    let frames = run(key(FillsFilter::All, &[]), &real_blocks());
    // Blocks 923950859, -60, -62 and -66 have no fills: no frame, no number.
    assert_eq!(
        shape(&frames),
        [
            (923_950_857, 1, 18),
            (923_950_858, 2, 1_344),
            (923_950_861, 3, 2),
            (923_950_863, 4, 10),
            (923_950_864, 5, 6),
            (923_950_865, 6, 8),
        ]
    );
    assert_eq!(frames[2].time, 1_773_532_800_678);
}

#[test]
fn user_filter_is_case_insensitive_and_sequences_its_own_frames() {
    let user = "0x31ca8395cf837de08b24da3f660e77761dfb974b";
    let shouted = format!("0x{}", user[2..].to_ascii_uppercase());
    let user_key = FillsKey::from_selectors(&[shouted], None, &[]).unwrap();
    let frames = run(user_key, &real_blocks());
    let blocks: Vec<u64> = frames.iter().map(|f| f.block_number).collect();
    let sequences: Vec<u64> = frames.iter().map(|f| f.sequence).collect();
    assert_eq!(
        blocks,
        [
            923_950_857,
            923_950_861,
            923_950_863,
            923_950_864,
            923_950_865
        ]
    );
    assert_eq!(sequences, [1, 2, 3, 4, 5]);
    let fills: Vec<&Fill> = frames.iter().flat_map(|f| &f.fills).collect();
    assert_eq!(fills.len(), 10);
    assert!(fills.iter().all(|f| f.user == user));
}

#[test]
fn builder_filter_matches_the_real_builder_fills_only() {
    let builder =
        FillsKey::from_selectors(&[], Some("0x4950994884602D1B6C6D96E4FE30F58205C39395"), &[])
            .unwrap();
    let frames = run(builder, &real_blocks());
    assert_eq!(shape(&frames), [(923_950_857, 1, 5)]);
    let coins: Vec<&str> = frames[0].fills.iter().map(|f| f.coin.as_str()).collect();
    assert_eq!(
        coins,
        [
            "cash:NVDA",
            "cash:NVDA",
            "cash:NVDA",
            "cash:NVDA",
            "cash:TSLA"
        ]
    );

    let spot_builder = FillsKey::from_selectors(
        &[],
        Some("0x1924b8561eef20e70ede628a296175d358be80e5"),
        &["@150".to_owned()],
    )
    .unwrap();
    let frames = run(spot_builder, &real_blocks());
    assert_eq!(shape(&frames), [(923_950_858, 1, 1)]);
    assert_eq!(
        frames[0].fills[0].builder.as_deref(),
        Some("0x1924b8561eef20e70ede628a296175d358be80e5")
    );
}

#[test]
fn coin_scope_accepts_unknown_coins_that_never_match() {
    let scoped = key(FillsFilter::All, &["UNI", "NOPE", "UNI"]);
    let frames = run(scoped, &real_blocks());
    assert_eq!(shape(&frames), [(923_950_857, 1, 2)]);
    assert!(frames[0].fills.iter().all(|f| f.coin == "UNI"));

    assert!(run(key(FillsFilter::All, &["NOPE"]), &real_blocks()).is_empty());
}

#[test]
fn liquidation_stream_takes_fills_with_a_liquidation_object() {
    // The real captures have no liquidation; real fills are given one.
    let envelope = &fill_envelopes("fills-unfiltered")[0];
    let events = envelope["events"].as_array().unwrap();
    let liquidated = "0x727956612A8700627451204A3AE26268BD1A1525";
    let mut with_liquidation = events[1].clone();
    with_liquidation[1]["liquidation"] =
        json!({"liquidatedUser": liquidated, "markPx": "3.9461", "method": "market"});
    let mut backstop = events[3].clone();
    backstop[1]["liquidation"] = json!({"markPx": "589.3", "method": "backstop"});
    let blocks = [
        fills_block(10, 10_000, &[events[0].clone(), with_liquidation.clone()]),
        fills_block(11, 11_000, &[events[2].clone()]),
        fills_block(12, 12_000, &[backstop, events[4].clone()]),
        fills_block(13, 13_000, &[]),
        fills_block(14, 14_000, &[with_liquidation]),
    ];

    let every = key(FillsFilter::Liquidations(BTreeSet::new()), &[]);
    let frames = run(every, &blocks);
    assert_eq!(shape(&frames), [(10, 1, 1), (12, 2, 1), (14, 3, 1)]);
    assert_eq!(
        serde_json::to_value(&frames[0].fills[0].liquidation).unwrap(),
        json!({"liquidated_user": liquidated, "mark_px": "3.9461", "method": "market"})
    );
    assert_eq!(
        serde_json::to_value(&frames[1].fills[0].liquidation).unwrap(),
        json!({"mark_px": "589.3", "method": "backstop"})
    );

    let one_user = key(
        FillsFilter::Liquidations([liquidated.to_ascii_lowercase()].into()),
        &["UNI"],
    );
    let frames = run(one_user, &blocks);
    assert_eq!(shape(&frames), [(10, 1, 1), (14, 2, 1)]);
}

#[test]
fn replay_prints_user_and_all_fills_with_sequences() {
    use engine::replay::{ReplayError, ReplayOptions, ViewKind};
    use engine::views::ViewError;

    use crate::trades::replay_lines;
    let mut opts = ReplayOptions::new(real("btc-985148182"), ViewKind::Fills);
    let all = replay_lines(&opts);
    let sequences: Vec<u64> = all
        .iter()
        .map(|l| l["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, (1..=all.len() as u64).collect::<Vec<_>>());
    let fills: usize = all
        .iter()
        .map(|l| l["fills"].as_array().unwrap().len())
        .sum();
    assert_eq!(fills, 22);

    let user = all[0]["fills"][0]["user"]
        .as_str()
        .unwrap()
        .to_ascii_uppercase();
    opts.selection.users = vec![user.replace("0X", "0x")];
    let mine = replay_lines(&opts);
    assert!(!mine.is_empty() && mine.len() <= all.len());
    assert_eq!(mine[0]["sequence"], 1);
    assert!(mine.iter().all(|l| {
        l["fills"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["user"].as_str().unwrap().eq_ignore_ascii_case(&user))
    }));

    opts.selection.users.push("0xother".into());
    assert_eq!(
        engine::replay::run(&opts, &mut Vec::new(), &mut |_| {}).unwrap_err(),
        ReplayError::Request(ViewError::UserCount { count: 2 })
    );
}

#[test]
fn a_blocks_fills_are_mapped_only_while_a_fills_subscription_is_open() {
    let blocks = real_blocks();
    let busy: Vec<&Block> = blocks
        .iter()
        .filter(|block| !block.decode().fills.is_empty())
        .collect();
    assert!(busy.len() >= 4, "the capture has blocks with fills");
    let mut market = Market::new(FillsSubscription::NEEDS);
    let mapped = |market: &Market| market.fills().fills().len();

    // Nobody reads fills: the position moves, nothing is mapped.
    market.apply(busy[0]);
    assert_eq!(mapped(&market), 0);
    assert_eq!(market.fills().position().0, busy[0].number);

    let all = key(FillsFilter::All, &[]);
    let settings = ViewSettings::default();
    let (first, _) = FillsSubscription::open(&mut market, &all, &settings).unwrap();
    let (second, _) = FillsSubscription::open(&mut market, &all, &settings).unwrap();
    market.apply(busy[1]);
    assert_eq!(mapped(&market), busy[1].decode().fills.len());

    // One of two closes: still mapped for the other.
    first.close(&mut market);
    market.apply(busy[2]);
    assert_eq!(mapped(&market), busy[2].decode().fills.len());

    second.close(&mut market);
    market.apply(busy[3]);
    assert_eq!(mapped(&market), 0);
    assert_eq!(market.fills().position().0, busy[3].number);
}
