//! `l1gate replay` as a library: determinism, a golden BBO run on real data,
//! view validation, and views that are not wired yet failing cleanly.
//!
//! Regenerate the golden file after an intended output change with:
//! `L1GATE_REGEN_GOLDEN=1 cargo test -p engine --test engine replay::bbo_matches_the_golden_file`

use std::path::Path;

use engine::replay::{ReplayError, ReplayOptions, ReplaySummary, ViewKind, run};
use engine::views::ViewError;

use crate::common::real;

const GOLDEN_BBO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/bbo_btc_985148182.jsonl"
);

fn replay(opts: &ReplayOptions) -> Result<(Vec<u8>, ReplaySummary), ReplayError> {
    let mut out = Vec::new();
    let mut last_block = 0;
    let summary = run(opts, &mut out, &mut |p| {
        assert!(p.block > last_block, "blocks fold in order");
        last_block = p.block;
    })?;
    Ok((out, summary))
}

fn btc(view: ViewKind) -> ReplayOptions {
    let mut opts = ReplayOptions::new(real("btc-985148182"), view);
    opts.selection.coins = vec!["BTC".into()];
    opts
}

#[test]
fn bbo_matches_the_golden_file() {
    let (out, summary) = replay(&btc(ViewKind::Bbo)).unwrap();
    assert_eq!(summary.snapshot_height, Some(985_148_181));
    assert_eq!(summary.blocks, 51);
    assert!(summary.unknown_ids.is_empty());
    if std::env::var_os("L1GATE_REGEN_GOLDEN").is_some() {
        std::fs::write(GOLDEN_BBO, &out).unwrap();
    }
    let golden = std::fs::read(GOLDEN_BBO).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        String::from_utf8(golden).unwrap()
    );
}

#[test]
fn replay_is_byte_identical_across_runs() {
    for view in [ViewKind::L2Diff, ViewKind::L4Updates, ViewKind::L2Book] {
        let mut opts = btc(view);
        opts.selection.n_levels = Some(0);
        opts.selection.n_sig_figs = Some(5);
        opts.selection.mantissa = Some(2);
        let (first, summary) = replay(&opts).unwrap();
        let (second, _) = replay(&opts).unwrap();
        assert!(summary.frames > 1, "{view}: {summary}");
        assert_eq!(first, second, "{view}");
        let lines = first
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        assert_eq!(lines as u64, summary.frames);
    }
}

#[test]
fn mids_stay_put_when_the_top_prices_do() {
    // Sizes at the top change in this capture but its prices never do, so
    // the mid is sent once, on subscribe.
    let (out, summary) = replay(&btc(ViewKind::Mids)).unwrap();
    assert_eq!(summary.frames, 1);
    let frame: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(frame["mids"], serde_json::json!({"BTC": "81307.5"}));
}

#[test]
fn block_range_limits_the_fold() {
    let mut opts = btc(ViewKind::L2Book);
    opts.from_block = Some(985_148_200);
    opts.to_block = Some(985_148_209);
    opts.selection.strict = true;
    let (out, summary) = replay(&opts).unwrap();
    assert_eq!(summary.snapshot_height, Some(985_148_181));
    assert_eq!(summary.first_block, Some(985_148_200));
    assert_eq!(summary.last_block, Some(985_148_209));
    assert_eq!(summary.blocks, 10);
    let first: serde_json::Value =
        serde_json::from_slice(out.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["block_number"], 985_148_200);
    assert_eq!(first["bids"].as_array().unwrap().len(), 20);
}

/// Regression: `--from-block` used to start the fold there, skipping the
/// blocks between the starting snapshot and it (books then lacked their
/// orders and diffs referenced unknown ids).
#[test]
fn from_block_folds_from_the_snapshot_so_the_books_are_whole() {
    let full_depth = |opts: &mut ReplayOptions| {
        opts.selection.n_levels = Some(0);
        opts.to_block = Some(985_148_200);
    };
    let mut whole = btc(ViewKind::L2Book);
    full_depth(&mut whole);
    let (whole_out, _) = replay(&whole).unwrap();
    let mut late = btc(ViewKind::L2Book);
    full_depth(&mut late);
    late.from_block = Some(985_148_200);
    let (late_out, summary) = replay(&late).unwrap();
    assert!(summary.unknown_ids.is_empty(), "{summary}");
    assert_eq!(summary.warmup_blocks, 18);
    assert_eq!(summary.first_block, Some(985_148_200));
    // The state after block 985148200, whether printed all along or only
    // from it.
    let last = |out: &[u8]| -> serde_json::Value {
        let line = out.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap();
        serde_json::from_slice(line).unwrap()
    };
    let (a, b) = (last(&whole_out), last(&late_out));
    assert_eq!(a["block_number"], 985_148_200);
    assert_eq!(a["bids"], b["bids"]);
    assert_eq!(a["asks"], b["asks"]);
}

#[test]
fn l4book_diff_frames_carry_the_node_bytes() {
    let (out, summary) = replay(&btc(ViewKind::L4Book)).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    let opening: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(opening["snapshot"]["block_number"], 985_148_182);
    let statuses = std::fs::read_to_string(
        crate::common::hourly_file(&real("btc-985148182"), "node_order_statuses_by_block").unwrap(),
    )
    .unwrap();
    // The second block's first status event, byte for byte, inside the diff.
    let line = statuses.lines().nth(1).unwrap();
    let events = &line[line.find("\"events\":[").unwrap() + 10..];
    let first_event = &events[..events.find("}},").unwrap() + 2];
    let diff = lines.next().unwrap();
    assert!(diff.starts_with(r#"{"diff":{"time":"#), "{diff:.80}");
    assert!(diff.contains(first_event));
    // One diff frame per later block with BTC events.
    let diffs = std::fs::read_to_string(
        crate::common::hourly_file(&real("btc-985148182"), "node_raw_book_diffs_by_block").unwrap(),
    )
    .unwrap();
    let busy = statuses
        .lines()
        .zip(diffs.lines())
        .skip(1)
        .filter(|(s, d)| !s.ends_with(r#""events":[]}"#) || !d.ends_with(r#""events":[]}"#))
        .count();
    assert_eq!(summary.frames, 1 + busy as u64);
}

#[test]
fn bad_requests_fail_before_writing_anything() {
    let mut cases = Vec::new();
    let mut candles = btc(ViewKind::Candles);
    candles.selection.interval = Some("7m".to_owned());
    cases.push(candles);
    let mut fills = btc(ViewKind::Fills);
    fills.selection.users = vec!["0xa".to_owned(), "0xb".to_owned()];
    cases.push(fills);
    let mut tpsl = btc(ViewKind::Tpsl);
    tpsl.selection.coins = vec!["@1".to_owned()];
    cases.push(tpsl);
    for opts in cases {
        let mut out = Vec::new();
        let result = run(&opts, &mut out, &mut |_| {});
        assert!(result.is_err(), "{}: bad request accepted", opts.view);
        assert!(out.is_empty(), "{} wrote output before failing", opts.view);
    }
}

#[test]
fn invalid_requests_and_missing_data_are_errors() {
    let mut opts = btc(ViewKind::L2Book);
    opts.selection.n_sig_figs = Some(7);
    assert!(matches!(
        replay(&opts),
        Err(ReplayError::Request(ViewError::L2(_)))
    ));
    let mut opts = btc(ViewKind::Bbo);
    opts.selection.coins.clear();
    assert!(matches!(
        replay(&opts),
        Err(ReplayError::Request(ViewError::CoinCount { .. }))
    ));
    let empty = tempfile::tempdir().unwrap();
    let opts = ReplayOptions::new(empty.path(), ViewKind::Bbo);
    assert_eq!(
        replay(&opts).unwrap_err(),
        ReplayError::NoData(empty.path().to_path_buf())
    );
    assert!(!Path::new(GOLDEN_BBO).is_dir());
}

#[test]
fn capture_without_snapshot_replays_and_reports_unknown_ids() {
    let mut opts = ReplayOptions::new(real("btc-978995377"), ViewKind::Bbo);
    opts.selection.coins = vec!["BTC".into()];
    let (_, summary) = replay(&opts).unwrap();
    assert_eq!(summary.snapshot_height, None);
    assert_eq!(summary.blocks, 40);
    assert!(summary.unknown_ids["BTC"].unknown_oid > 0);
    let printed = summary.to_string();
    assert!(printed.contains("BTC: "), "{printed}");
}

/// Bytes of the records under `dir` (recursively) for blocks after
/// `after`, newlines included: what a fold from that snapshot reads.
fn bytes_after(dir: &Path, after: u64) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            total += bytes_after(&path, after);
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            if record["block_number"].as_u64().unwrap() > after {
                total += line.len() as u64 + 1;
            }
        }
    }
    total
}

#[test]
fn views_read_only_the_streams_they_fold() {
    let data = real("btc-985148182").join("hl/data");
    let after = 985_148_181;
    let fills = bytes_after(&data.join("node_fills_by_block"), after);
    let (_, trades) = replay(&btc(ViewKind::Trades)).unwrap();
    assert_eq!(trades.bytes, fills, "trades reads the fills alone");
    let books = bytes_after(&data.join("node_order_statuses_by_block"), after)
        + bytes_after(&data.join("node_raw_book_diffs_by_block"), after);
    let (_, bbo) = replay(&btc(ViewKind::Bbo)).unwrap();
    assert_eq!(bbo.bytes, books, "bbo reads the statuses and book diffs");
}
