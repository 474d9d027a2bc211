//! The node's older fill formats (`node_fills`, `node_trades`), written from
//! the real unfiltered fills, fold into the same trades and candles as the
//! by-block lines they came from; hours split across files (spilling over)
//! count every fill once.

use std::collections::BTreeMap;
use std::path::Path;

use engine::replay::{ReplayOptions, ViewKind};
use serde_json::Value;

use crate::common::{hourly_file, real};
use crate::trades::replay_lines;

fn by_block_lines() -> Vec<Vec<u8>> {
    let file = hourly_file(&real("fills-unfiltered"), "node_fills_by_block").unwrap();
    std::fs::read(file)
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Writes `lines` under `<dir>/<source_dir>/hourly/…`, the first `split`
/// in hour 23 of 2026-03-14 and the rest in hour 0 of 2026-03-15 (the
/// real blocks straddle midnight).
fn write_hours(dir: &Path, source_dir: &str, lines: &[Vec<u8>], split: usize) {
    let hourly = dir.join("hl/data").join(source_dir).join("hourly");
    for (rel, part) in [
        ("20260314/23", &lines[..split]),
        ("20260315/0", &lines[split..]),
    ] {
        let path = hourly.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = Vec::new();
        for line in part {
            text.extend_from_slice(line);
            text.push(b'\n');
        }
        std::fs::write(path, text).unwrap();
    }
}

fn replay(dir: &Path, view: ViewKind, coins: &[String], interval: Option<&str>) -> Vec<Value> {
    let mut opts = ReplayOptions::new(dir, view);
    opts.selection.coins = coins.to_vec();
    opts.selection.interval = interval.map(str::to_owned);
    replay_lines(&opts)
}

/// The coins that trade most (by the trades the `node_trades` writer makes
/// of the lines), at most 20 (the views' limit).
fn busiest_coins(lines: &[Vec<u8>]) -> Vec<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in lines
        .iter()
        .flat_map(|l| fixtures::legacy::node_trades_lines(l))
    {
        let trade: Value = serde_json::from_slice(&line).unwrap();
        *counts
            .entry(trade["coin"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let mut ranked: Vec<(usize, String)> = counts.into_iter().map(|(c, n)| (n, c)).collect();
    ranked.sort_by(|a, b| b.cmp(a));
    ranked.into_iter().take(20).map(|(_, c)| c).collect()
}

/// Every trade of the frames, without what the older formats cannot say:
/// the block number (a stand-in there), and with `no_tid` the trade id.
fn trades_of(frames: &[Value], no_tid: bool) -> Vec<Value> {
    let mut out: Vec<Value> = frames
        .iter()
        .flat_map(|frame| frame["trades"].as_array().unwrap().clone())
        .map(|mut trade| {
            if no_tid {
                trade["tid"] = Value::from(0);
            }
            trade
        })
        .collect();
    out.sort_by_key(|t| {
        (
            t["time"].as_i64(),
            t["coin"].to_string(),
            t["px"].to_string(),
            t["users"].to_string(),
        )
    });
    out
}

/// The closed candles of the frames by (coin, open time), without block
/// numbers.
fn closed_candles(frames: &[Value]) -> BTreeMap<(String, i64), Value> {
    frames
        .iter()
        .filter(|frame| frame["closed"] == true)
        .map(|frame| {
            let mut candle = frame.clone();
            let object = candle.as_object_mut().unwrap();
            for field in ["block_number", "time", "sequence", "seq", "prev_seq"] {
                object.remove(field);
            }
            (
                (
                    frame["coin"].as_str().unwrap().to_owned(),
                    frame["open_time"].as_i64().unwrap(),
                ),
                candle,
            )
        })
        .collect()
}

#[test]
fn older_formats_fold_into_the_same_trades_and_candles() {
    let lines = by_block_lines();
    let coins = busiest_coins(&lines);
    let by_block = tempfile::tempdir().unwrap();
    write_hours(by_block.path(), "node_fills_by_block", &lines, 1);
    let fills = tempfile::tempdir().unwrap();
    let fill_lines: Vec<Vec<u8>> = lines
        .iter()
        .flat_map(|l| fixtures::legacy::node_fills_lines(l))
        .collect();
    let trade_lines: Vec<Vec<u8>> = lines
        .iter()
        .flat_map(|l| fixtures::legacy::node_trades_lines(l))
        .collect();
    // Most of the real fills are one-sided (a spot dust sweep): 45 trades.
    assert_eq!((fill_lines.len(), trade_lines.len()), (1_388, 45));
    // The first block's fills end hour 23; the rest spill into hour 0.
    let first_block = fixtures::legacy::node_fills_lines(&lines[0]).len();
    write_hours(fills.path(), "node_fills", &fill_lines, first_block);
    let trades = tempfile::tempdir().unwrap();
    let first_trades = fixtures::legacy::node_trades_lines(&lines[0]).len();
    write_hours(trades.path(), "node_trades", &trade_lines, first_trades);

    let want = replay(by_block.path(), ViewKind::Trades, &coins, None);
    assert!(want.len() > 10, "{}", want.len());
    let from_fills = replay(fills.path(), ViewKind::Trades, &coins, None);
    assert_eq!(trades_of(&from_fills, false), trades_of(&want, false));
    let from_trades = replay(trades.path(), ViewKind::Trades, &coins, None);
    assert_eq!(trades_of(&from_trades, true), trades_of(&want, true));
    // The block number stands in for the time: the fill time in ms.
    for frame in from_fills.iter().chain(&from_trades) {
        assert_eq!(frame["block_number"].as_i64(), frame["time"].as_i64());
    }

    for interval in ["1s", "1m"] {
        let want = closed_candles(&replay(
            by_block.path(),
            ViewKind::Candles,
            &coins[..1],
            Some(interval),
        ));
        assert!(!want.is_empty(), "{interval}");
        for (format, dir) in [("node_fills", &fills), ("node_trades", &trades)] {
            let got = closed_candles(&replay(
                dir.path(),
                ViewKind::Candles,
                &coins[..1],
                Some(interval),
            ));
            assert_eq!(got, want, "{format} {interval}");
        }
    }
}

#[test]
fn an_hour_boundary_inside_a_block_counts_each_fill_once() {
    // A block's fills cut between two files (the node cut its hour there):
    // the streaming aligner joins the two parts.
    let lines = by_block_lines();
    let coins = busiest_coins(&lines);
    let fill_lines: Vec<Vec<u8>> = lines
        .iter()
        .flat_map(|l| fixtures::legacy::node_fills_lines(l))
        .collect();
    let whole = tempfile::tempdir().unwrap();
    write_hours(whole.path(), "node_fills", &fill_lines, fill_lines.len());
    let want = trades_of(&replay(whole.path(), ViewKind::Trades, &coins, None), false);
    let first_block = fixtures::legacy::node_fills_lines(&lines[0]).len();
    for split in [first_block / 2, first_block + 1, fill_lines.len() / 2] {
        let cut = tempfile::tempdir().unwrap();
        write_hours(cut.path(), "node_fills", &fill_lines, split);
        let got = trades_of(&replay(cut.path(), ViewKind::Trades, &coins, None), false);
        assert_eq!(got, want, "split at line {split}");
    }
}

#[test]
fn a_block_written_to_both_hours_counts_once() {
    // Archive hours are cut on the writing node's clock: a block at the
    // boundary may be in both files. The by-block aligner keeps the first.
    let lines = by_block_lines();
    let coins = busiest_coins(&lines);
    let whole = tempfile::tempdir().unwrap();
    write_hours(whole.path(), "node_fills_by_block", &lines, lines.len());
    let want = trades_of(&replay(whole.path(), ViewKind::Trades, &coins, None), false);
    let twice = tempfile::tempdir().unwrap();
    let mut doubled = lines[..2].to_vec();
    doubled.extend_from_slice(&lines[1..]);
    write_hours(twice.path(), "node_fills_by_block", &doubled, 2);
    let got = trades_of(&replay(twice.path(), ViewKind::Trades, &coins, None), false);
    assert_eq!(got, want);
}
