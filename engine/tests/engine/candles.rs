//! Candles: bucket boundaries of every interval (including the Thursday
//! week and calendar months), OHLCV and VWAP of the real trades against an
//! independent exact calculation, close-before-open frame order, sparseness
//! and the block-time throttle.

use std::collections::BTreeMap;

use engine::event::Side;
use engine::market::candles::{Candle, CandleError, CandleUpdate, CandlesView, Interval};
use engine::market::trades::{Trade, TradesView};
use engine::num::Decimal;
use engine::views::candles::{CandleKey, CandleSubscription};
use rstest::rstest;

use crate::common::{by_block_blocks, real};
use crate::trades::fill_envelopes;

// 2026-03-15T13:47:31.250Z, a Sunday.
const SUNDAY_AFTERNOON: i64 = 1_773_582_451_250;

#[rstest]
#[case::second_1s("1s", SUNDAY_AFTERNOON, 1_773_582_451_000, 1_773_582_452_000)]
#[case::minute_1m("1m", SUNDAY_AFTERNOON, 1_773_582_420_000, 1_773_582_480_000)]
#[case::three_minutes_3m("3m", SUNDAY_AFTERNOON, 1_773_582_300_000, 1_773_582_480_000)]
#[case::five_minutes_5m("5m", SUNDAY_AFTERNOON, 1_773_582_300_000, 1_773_582_600_000)]
#[case::quarter_15m("15m", SUNDAY_AFTERNOON, 1_773_582_300_000, 1_773_583_200_000)]
#[case::half_hour_30m("30m", SUNDAY_AFTERNOON, 1_773_581_400_000, 1_773_583_200_000)]
#[case::hour_1h("1h", SUNDAY_AFTERNOON, 1_773_579_600_000, 1_773_583_200_000)]
#[case::two_hours_2h("2h", SUNDAY_AFTERNOON, 1_773_576_000_000, 1_773_583_200_000)]
#[case::four_hours_4h("4h", SUNDAY_AFTERNOON, 1_773_576_000_000, 1_773_590_400_000)]
#[case::eight_hours_8h("8h", SUNDAY_AFTERNOON, 1_773_561_600_000, 1_773_590_400_000)]
#[case::half_day_12h("12h", SUNDAY_AFTERNOON, 1_773_576_000_000, 1_773_619_200_000)]
#[case::day_1d("1d", SUNDAY_AFTERNOON, 1_773_532_800_000, 1_773_619_200_000)]
// Epoch-aligned: 2026-03-14 (Saturday) to 2026-03-17.
#[case::three_days_3d("3d", SUNDAY_AFTERNOON, 1_773_446_400_000, 1_773_705_600_000)]
// Thursday 2026-03-12 00:00 to Thursday 2026-03-19 00:00.
#[case::week_opens_thursday("1w", SUNDAY_AFTERNOON, 1_773_273_600_000, 1_773_878_400_000)]
#[case::week_last_ms_wednesday("1w", 1_773_878_399_999, 1_773_273_600_000, 1_773_878_400_000)]
#[case::week_first_ms_thursday("1w", 1_773_878_400_000, 1_773_878_400_000, 1_774_483_200_000)]
// 2026-03-01 to 2026-04-01.
#[case::month_march("1M", SUNDAY_AFTERNOON, 1_772_323_200_000, 1_775_001_600_000)]
// Leap February 2024: 2024-02-29T23:59:59.999 is still February.
#[case::month_leap_february_last_ms("1M", 1_709_251_199_999, 1_706_745_600_000, 1_709_251_200_000)]
#[case::month_first_ms("1M", 1_709_251_200_000, 1_709_251_200_000, 1_711_929_600_000)]
// 2025-12-31T12:00 rolls into January 2026.
#[case::month_december_rolls_year("1M", 1_767_182_400_000, 1_764_547_200_000, 1_767_225_600_000)]
#[case::before_epoch_floors_down("1m", -1, -60_000, 0)]
fn bucket_boundaries(
    #[case] name: &str,
    #[case] time: i64,
    #[case] open: i64,
    #[case] next_open: i64,
) {
    let interval = Interval::parse(name).unwrap();
    assert_eq!(interval.bucket_open(time), open);
    assert_eq!(interval.next_open(open), next_open);
    assert_eq!(interval.close_time(open), next_open - 1);
    assert_eq!(interval.bucket_open(next_open - 1), open);
    assert_eq!(interval.bucket_open(next_open), next_open);
}

#[test]
fn names_are_case_sensitive() {
    assert_eq!(Interval::parse("1M"), Ok(Interval::Month1));
    assert_eq!(Interval::parse("1m"), Ok(Interval::Minute1));
    assert_eq!(
        Interval::parse("1W"),
        Err(CandleError::UnknownInterval("1W".into()))
    );
}

/// `"3.9457"` → (39457, 4), exactly.
fn parse(text: &str) -> (i128, u32) {
    match text.split_once('.') {
        Some((int, frac)) => (
            format!("{int}{frac}").parse().unwrap(),
            u32::try_from(frac.len()).unwrap(),
        ),
        None => (text.parse().unwrap(), 0),
    }
}

/// The value at scale 16 (every price and size here has fewer decimals).
fn at16(text: &str) -> i128 {
    let (units, scale) = parse(text);
    units * 10_i128.pow(16 - scale)
}

/// `(coin, px, sz, time)` of a trade, as the node printed them.
type PlainTrade = (String, String, String, i64);

/// Every real trade, from the bid fill of every non-dust pair (the trades
/// test shows each trade has exactly one).
fn reference_trades() -> Vec<PlainTrade> {
    let mut out = Vec::new();
    for envelope in fill_envelopes("fills-unfiltered") {
        for event in envelope["events"].as_array().unwrap() {
            let fill = &event[1];
            if fill["dir"] != "Spot Dust Conversion" && fill["side"] == "B" {
                out.push((
                    fill["coin"].as_str().unwrap().to_owned(),
                    fill["px"].as_str().unwrap().to_owned(),
                    fill["sz"].as_str().unwrap().to_owned(),
                    fill["time"].as_i64().unwrap(),
                ));
            }
        }
    }
    out
}

/// Bucket open computed without the engine; every real trade is in March
/// 2026.
fn reference_open(interval: Interval, time: i64) -> i64 {
    match interval.fixed_ms() {
        Some(length) => time - time % length,
        None => 1_772_323_200_000,
    }
}

/// Folds the real capture; returns every bucket's final state (closed ones
/// in close order, then the live ones) and the view.
fn fold_real(view: &mut CandlesView) -> Vec<Candle> {
    let mut trades = TradesView::new();
    let mut finals = Vec::new();
    for block in by_block_blocks(&real("fills-unfiltered")) {
        trades.apply(&block.decode());
        view.apply_trades_view(&trades);
        finals.extend(view.closed().iter().cloned());
    }
    finals.extend(view.live_candles().cloned());
    finals
}

#[test]
fn real_candles_match_an_independent_exact_calculation() {
    let mut view = CandlesView::new();
    let finals = fold_real(&mut view);
    let mut by_key: BTreeMap<(String, Interval, i64), &Candle> = BTreeMap::new();
    for candle in &finals {
        let key = (candle.coin.clone(), candle.interval, candle.open_time);
        assert!(
            by_key.insert(key, candle).is_none(),
            "bucket finalised twice"
        );
    }

    let trades = reference_trades();
    assert_eq!(trades.len(), 45);
    let mut expected = 0;
    for interval in Interval::ALL {
        let mut buckets: BTreeMap<(String, i64), Vec<&PlainTrade>> = BTreeMap::new();
        for trade in &trades {
            let key = (trade.0.clone(), reference_open(interval, trade.3));
            buckets.entry(key).or_default().push(trade);
        }
        for ((coin, open), members) in buckets {
            expected += 1;
            let candle = by_key[&(coin.clone(), interval, open)];
            let label = format!("{coin} {interval} {open}");
            assert_eq!(candle.trades_count, members.len() as u64, "{label}");
            assert_eq!(candle.open.to_string(), members[0].1, "{label}");
            assert_eq!(
                candle.close.to_string(),
                members[members.len() - 1].1,
                "{label}"
            );
            let high = members.iter().map(|t| at16(&t.1)).max().unwrap();
            let low = members.iter().map(|t| at16(&t.1)).min().unwrap();
            assert_eq!(at16(&candle.high.to_string()), high, "{label}");
            assert_eq!(at16(&candle.low.to_string()), low, "{label}");
            let volume: i128 = members.iter().map(|t| at16(&t.2)).sum();
            assert_eq!(at16(&candle.volume.to_string()), volume, "{label}");
            // VWAP: Σ px·sz / Σ sz rounded half up to (finest px scale + 4).
            let notional: i128 = members
                .iter()
                .map(|t| at16(&t.1) * at16(&t.2) / 10_i128.pow(16))
                .sum();
            let scale = members.iter().map(|t| parse(&t.1).1).max().unwrap() + 4;
            let numerator = notional * 10_i128.pow(scale);
            let mut units = numerator / volume;
            if 2 * (numerator % volume) >= volume {
                units += 1;
            }
            let (got, got_scale) = parse(&candle.to_update(false).vwap.to_string());
            assert!(got_scale <= scale, "{label}");
            assert_eq!(got * 10_i128.pow(scale - got_scale), units, "{label}");
            assert_eq!(candle.close_time(), interval.next_open(open) - 1, "{label}");
        }
    }
    assert_eq!(finals.len(), expected);
    assert_eq!(view.late_trades(), 0);
}

#[test]
fn the_two_fills_of_a_trade_count_once() {
    // cash:NVDA: 8 fills, 4 trades, all in block 923950857.
    let closed_day = 1_773_446_400_000;
    let mut trades = TradesView::new();
    let mut store = Vec::new();
    let mut replay = CandlesView::with_intervals(&[Interval::Day1]);
    for block in by_block_blocks(&real("fills-unfiltered")) {
        trades.apply(&block.decode());
        replay.apply_trades_view(&trades);
        store.extend(
            replay
                .closed()
                .iter()
                .filter(|c| c.coin == "cash:NVDA")
                .cloned(),
        );
    }
    assert_eq!(store.len(), 1);
    assert_eq!(store[0].open_time, closed_day);
    assert_eq!(store[0].trades_count, 4);
    assert_eq!(store[0].volume.to_string(), "1.064");
}

fn trade(coin: &str, px: &str, sz: &str, time: i64) -> Trade {
    Trade {
        coin: coin.to_owned(),
        side: Side::Bid,
        px: Decimal::parse(px).unwrap(),
        sz: Decimal::parse(sz).unwrap(),
        time,
        hash: "0x0".into(),
        tid: 1,
        users: ["0xb".into(), "0xs".into()],
    }
}

fn subscribe(coin: &str, interval: &str, throttle_ms: i64) -> CandleSubscription {
    CandleSubscription::new(
        &CandleKey {
            coin: coin.into(),
            interval: Interval::parse(interval).unwrap(),
        },
        throttle_ms,
    )
    .unwrap()
}

/// `(open_time, closed, trades_count)` of each frame.
fn shape(frames: &[CandleUpdate]) -> Vec<(i64, bool, u64)> {
    frames
        .iter()
        .map(|f| (f.open_time, f.closed, f.trades_count))
        .collect()
}

#[test]
fn a_closed_bucket_is_sent_before_the_next_bucket_opens() {
    let mut view = CandlesView::new();
    let mut subscription = subscribe("BTC", "1m", 0);
    view.apply(1, 10_000, &[trade("BTC", "100.0", "1.0", 10_000)]);
    let first = subscription.frames(&view);
    assert_eq!(shape(&first), [(0, false, 1)]);
    // One block holds a trade of the old minute and one of the next.
    view.apply(
        2,
        60_000,
        &[
            trade("BTC", "101.0", "1.0", 59_999),
            trade("BTC", "99.0", "2.0", 60_000),
        ],
    );
    let frames = subscription.frames(&view);
    assert_eq!(shape(&frames), [(0, true, 2), (60_000, false, 1)]);
    assert_eq!(frames[0].close_time, 59_999);
    assert_eq!(frames[0].close.to_string(), "101.0");
    assert_eq!(frames[1].open.to_string(), "99.0");
    assert_eq!(
        view.closed()
            .iter()
            .filter(|c| c.interval == Interval::Minute1)
            .count(),
        1
    );
}

#[test]
fn block_time_closes_a_bucket_without_a_new_trade() {
    let mut view = CandlesView::new();
    let mut subscription = subscribe("BTC", "1s", 0);
    view.apply(1, 500, &[trade("BTC", "100.0", "1.0", 500)]);
    assert_eq!(shape(&subscription.frames(&view)), [(0, false, 1)]);
    view.apply(2, 999, &[]);
    assert!(subscription.frames(&view).is_empty());
    view.apply(3, 1_000, &[]);
    assert_eq!(shape(&subscription.frames(&view)), [(0, true, 1)]);
    assert!(view.live("BTC", Interval::Second1).is_none());
    // The 1m candle of the same trade is still live.
    assert!(view.live("BTC", Interval::Minute1).is_some());
}

#[test]
fn candles_are_sparse() {
    let mut view = CandlesView::with_intervals(&[Interval::Second1]);
    let mut stored = Vec::new();
    view.apply(1, 0, &[trade("ETH", "10.0", "1.0", 0)]);
    stored.extend(view.closed().iter().map(|c| c.open_time));
    for (number, time) in (2..8).zip((1_000..).step_by(1_000)) {
        view.apply(number, time, &[]);
        stored.extend(view.closed().iter().map(|c| c.open_time));
    }
    view.apply(9, 5_000, &[trade("ETH", "11.0", "1.0", 5_000)]);
    view.apply(10, 6_000, &[]);
    stored.extend(view.closed().iter().map(|c| c.open_time));
    // Seconds 1..=4 had no trade: no candle, stored or live.
    assert_eq!(stored, [0, 5_000]);
    assert_eq!(view.live_candles().count(), 0);
}

#[test]
fn re_emits_are_throttled_in_block_time() {
    let mut view = CandlesView::new();
    let mut subscription = subscribe("SOL", "1m", 250);
    let mut frames = Vec::new();
    for (number, time, traded) in [
        (1, 0, true),
        (2, 100, true),
        (3, 200, true),
        (4, 300, false),
        (5, 400, true),
        (6, 500, false),
        (7, 600, false),
        (8, 700, false),
    ] {
        let trades: Vec<Trade> = if traded {
            vec![trade("SOL", "20.0", "1.0", time)]
        } else {
            vec![]
        };
        view.apply(number, time, &trades);
        frames.extend(
            subscription
                .frames(&view)
                .into_iter()
                .map(|f| (number, f.trades_count, f.block_number)),
        );
    }
    // Sent at once (new bucket), held at 100 and 200, flushed at 300 with
    // the state of block 3; held at 400, flushed at 600 (600 − 300 ≥ 250).
    assert_eq!(frames, [(1, 1, 1), (4, 3, 3), (7, 4, 5)]);
}

#[test]
fn subscribing_sends_the_current_bucket_if_tracked() {
    let mut view = CandlesView::new();
    view.apply(1, 1_000, &[trade("BTC", "100.0", "0.5", 1_000)]);
    let mut tracked = subscribe("BTC", "5m", 0);
    let opening = tracked.opening(&view).unwrap();
    assert_eq!((opening.open_time, opening.closed), (0, false));
    assert!(
        tracked.frames(&view).is_empty(),
        "no duplicate of the opening"
    );
    let mut untracked = subscribe("ETH", "5m", 0);
    assert!(untracked.opening(&view).is_none());
}

#[test]
fn a_frame_has_the_proto_shape() {
    let mut view = CandlesView::with_intervals(&[Interval::Minute1]);
    view.apply(
        7,
        1_773_532_800_099,
        &[
            trade("UNI", "3.9457", "3.9", 1_773_532_800_099),
            trade("UNI", "3.95", "1.1", 1_773_532_800_099),
        ],
    );
    let update = view
        .live("UNI", Interval::Minute1)
        .unwrap()
        .to_update(false);
    assert_eq!(
        serde_json::to_string(&update).unwrap(),
        r#"{"coin":"UNI","interval":"1m","open_time":1773532800000,"close_time":1773532859999,"open":"3.9457","high":"3.95","low":"3.9457","close":"3.95","volume":"5.0","trades_count":2,"vwap":"3.946646","block_number":7,"time":1773532800099,"closed":false}"#
    );
}

#[test]
fn bad_requests_are_refused() {
    assert_eq!(
        Interval::parse("2w").unwrap_err(),
        CandleError::UnknownInterval("2w".into())
    );
    let nameless = CandleKey {
        coin: String::new(),
        interval: Interval::Minute1,
    };
    assert_eq!(
        CandleSubscription::new(&nameless, 0).unwrap_err(),
        CandleError::MissingCoin
    );
}

#[test]
fn on_real_trades_every_bucket_closes_before_its_successor_opens() {
    let coins: std::collections::BTreeSet<String> =
        reference_trades().into_iter().map(|t| t.0).collect();
    let mut subscriptions: Vec<CandleSubscription> = coins
        .iter()
        .flat_map(|coin| ["1s", "1m"].map(|interval| subscribe(coin, interval, 0)))
        .collect();
    let mut frames: Vec<Vec<CandleUpdate>> = vec![Vec::new(); subscriptions.len()];
    let mut trades = TradesView::new();
    let mut view = CandlesView::new();
    for block in by_block_blocks(&real("fills-unfiltered")) {
        trades.apply(&block.decode());
        view.apply_trades_view(&trades);
        for (subscription, out) in subscriptions.iter_mut().zip(frames.iter_mut()) {
            out.extend(subscription.frames(&view));
        }
    }
    let mut closed = 0;
    for out in &frames {
        assert!(!out.is_empty());
        let mut live: Option<i64> = None;
        for frame in out {
            if frame.closed {
                assert_eq!(live.take(), Some(frame.open_time), "closes what was live");
                closed += 1;
            } else {
                assert!(
                    live.is_none_or(|open| open == frame.open_time),
                    "open before close"
                );
                live = Some(frame.open_time);
            }
        }
    }
    // The first block (23:59:59.991) closes in the next one (00:00:00.099)
    // for both 1s and 1m; later 1s buckets close as block time passes.
    assert!(closed >= 2 * 9, "{closed}");
}

#[test]
fn replay_prints_candle_frames_for_each_coin() {
    use engine::replay::{ReplayError, ReplayOptions, ViewKind};
    use engine::views::ViewError;

    use crate::trades::replay_lines;
    let mut opts = ReplayOptions::new(real("btc-985148182"), ViewKind::Candles);
    opts.selection.coins = vec!["BTC".into()];
    opts.selection.interval = Some("1s".into());
    let lines = replay_lines(&opts);
    assert!(!lines.is_empty());
    let mut live: Option<i64> = None;
    let mut last_count = 0;
    for line in &lines {
        assert_eq!(line["interval"], "1s");
        let open = line["open_time"].as_i64().unwrap();
        assert_eq!(line["close_time"].as_i64().unwrap(), open + 999);
        if line["closed"] == true {
            assert_eq!(live.take(), Some(open));
        } else {
            assert!(live.is_none_or(|o| o == open));
            live = Some(open);
        }
        last_count = line["trades_count"].as_u64().unwrap();
    }
    assert!(last_count >= 1);

    opts.selection.interval = Some("7m".into());
    assert_eq!(
        engine::replay::run(&opts, &mut Vec::new(), &mut |_| {}).unwrap_err(),
        ReplayError::Request(ViewError::Candle(CandleError::UnknownInterval("7m".into())))
    );
}

/// The candle fold of a backfill (`CandleFold`) closes, block by block,
/// the candles a market folding candles alone closes, and holds the same
/// open ones: over the simulator's blocks, with a block repeated (skipped
/// by both) and one from before the last (skipped too).
#[test]
fn the_candle_fold_closes_what_a_market_closes() {
    use bytes::Bytes;
    use engine::block::Block;
    use engine::market::candle_fold::CandleFold;
    use engine::market::{Market, Needs};
    use feeds::Source;

    let intervals = [Interval::Second1, Interval::Minute1, Interval::Minute5];
    let mut market = Market::new(Needs {
        candles: true,
        ..Needs::NONE
    })
    .with_candle_intervals(&intervals);
    let mut fold = CandleFold::new(&intervals);
    let mut sim = fixtures::Simulator::new(&fixtures::SimConfig::small(5));
    let mut blocks = Vec::new();
    for _ in 0..4_000 {
        let simulated = sim.next_block();
        let mut line = Vec::new();
        fixtures::by_block_line(&simulated, Source::Fills, &mut line);
        let mut block = Block::new(simulated.number, simulated.time_ms());
        block.lines.fills.push(Bytes::from(line));
        blocks.push(block);
    }
    let (mut closed, mut trades) = (0, 0);
    let replayed = [blocks[10].clone(), blocks[11].clone()];
    for (k, block) in blocks.iter().chain(&replayed).enumerate() {
        let by_market = market.apply(block);
        let by_fold = fold.apply(block);
        assert_eq!(by_fold.skipped, by_market.skipped, "block {k}");
        assert_eq!(by_fold.events, by_market.events, "block {k}");
        assert_eq!(
            fold.candles().closed(),
            market.candles().closed(),
            "block {k}"
        );
        closed += fold.candles().closed().len();
        trades += market
            .trades()
            .frames()
            .iter()
            .map(|f| f.trades.len())
            .sum::<usize>();
    }
    assert!(
        closed > 1_000 && trades > 1_000,
        "{closed} closed, {trades} trades"
    );
    let open = |view: &CandlesView| view.live_candles().cloned().collect::<Vec<_>>();
    assert_eq!(open(fold.candles()), open(market.candles()));
    assert_eq!(fold.height(), Some(blocks[blocks.len() - 1].number));
}
