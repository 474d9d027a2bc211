//! `l1gate candles import` end to end, with the real binary: the real
//! unfiltered fills (crossing an hour boundary) compressed as the archive
//! is, imported and looked up over HTTP against the independent calculation
//! of `candles.rs`; the same hours as zstd, gzip or plain files giving the
//! same store; an hour failing its checksum counting for nothing; the two
//! older formats giving the same store; the hand-over between formats a gap
//! that lookups name; a damaged hour file
//! leaving one gap from its last sound block while the next hours are
//! imported; a missing older hour being one gap; a second import adding
//! nothing; an import killed mid-way and resumed giving the same store as
//! one run; and the refusal beside a running server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::candles::{
    Expected, Http, Key, assert_candle, candle_path, expected_candles, header, unlimited,
};
use super::compressed_files::Tool;
use super::harness::{TestServer, real_lines};

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");
/// Before every block of the real fills (2026-03-14T23:59:59.991).
const HISTORY_START: &str = "2026-03-14T00:00:00Z";

/// A quiet `l1gate candles import` of `paths` into `state_dir`, with the
/// candle history starting at `start`.
fn import_command(state_dir: &Path, paths: &[&Path], start: &str) -> Command {
    let mut command = Command::new(L1GATE);
    command
        .args(["candles", "import"])
        .args(paths)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["--candle-history-start", start, "--quiet"]);
    command
}

fn import(state_dir: &Path, paths: &[&Path], extra: &[&str]) -> Output {
    import_command(state_dir, paths, HISTORY_START)
        .args(extra)
        .output()
        .unwrap()
}

fn import_ok(state_dir: &Path, paths: &[&Path]) -> String {
    let out = import(state_dir, paths, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "import failed: {stderr}");
    stderr
}

/// An import of `dir` that meets a damaged file: it goes on, and fails the
/// run; its report.
fn import_damaged(state_dir: &Path, dir: &Path) -> String {
    let out = import(state_dir, &[dir], &[]);
    let report = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "a damaged file fails the run: {report}"
    );
    report
}

/// `lines` written as `<dir>/<dataset>/hourly/…` hour files by block time
/// (the real blocks straddle midnight: hours 23 and 0), each compressed
/// with the `lz4` tool as the archive's are.
fn archive(dir: &Path, dataset: &str, lines: &[(i64, Vec<u8>)]) {
    archive_as(Some(Tool::Lz4), dir, dataset, lines);
}

/// [`archive`] compressed with `tool`, or plain (`None`).
fn archive_as(tool: Option<Tool>, dir: &Path, dataset: &str, lines: &[(i64, Vec<u8>)]) {
    let mut hours: BTreeMap<(String, u32), Vec<&[u8]>> = BTreeMap::new();
    for (time_ms, line) in lines {
        hours.entry(hour_of(*time_ms)).or_default().push(line);
    }
    for ((date, hour), lines) in hours {
        hour_file_as(tool, dir, dataset, &date, hour, &lines);
    }
}

/// The archive's `(YYYYMMDD, H)` of a block time.
fn hour_of(time_ms: i64) -> (String, u32) {
    let iso = feeds::time::format_iso8601_ms(time_ms);
    let date: String = iso[..10].chars().filter(char::is_ascii_digit).collect();
    (date, iso[11..13].parse().unwrap())
}

/// One hour file of `lines`, compressed with the `lz4` tool; returns its
/// path.
/// A server over the store an import wrote in `state_dir` and no node
/// files (kept alive beside it), from [`HISTORY_START`].
async fn serve_store(state_dir: &Path) -> (TestServer, tempfile::TempDir) {
    let node = tempfile::tempdir().unwrap();
    let state_dir = state_dir.to_owned();
    let server = TestServer::start(node.path(), |args| {
        unlimited(args);
        args.state_dir = Some(state_dir);
        args.candle_history_start = Some(HISTORY_START.to_owned());
    })
    .await;
    (server, node)
}

fn hour_file(dir: &Path, dataset: &str, date: &str, hour: u32, lines: &[&[u8]]) -> PathBuf {
    hour_file_as(Some(Tool::Lz4), dir, dataset, date, hour, lines)
}

/// [`hour_file`] compressed with `tool`, or plain (`None`).
fn hour_file_as(
    tool: Option<Tool>,
    dir: &Path,
    dataset: &str,
    date: &str,
    hour: u32,
    lines: &[&[u8]],
) -> PathBuf {
    let plain = dir
        .join(dataset)
        .join("hourly")
        .join(date)
        .join(hour.to_string());
    std::fs::create_dir_all(plain.parent().unwrap()).unwrap();
    let mut text = Vec::new();
    for line in lines {
        text.extend_from_slice(line);
        text.push(b'\n');
    }
    std::fs::write(&plain, text).unwrap();
    let Some(tool) = tool else {
        return plain;
    };
    let compressed = plain.with_file_name(format!("{hour}.{}", tool.extension()));
    tool.compress(&plain, &compressed);
    std::fs::remove_file(&plain).unwrap();
    compressed
}

/// A by-block line as the node would have written it `ms` later and
/// `blocks` block numbers on (its times and its fills' times moved).
fn shifted(line: &[u8], ms: i64, blocks: i64) -> Vec<u8> {
    let mut text = String::from_utf8(line.to_vec()).unwrap();
    for key in ["\"local_time\":\"", "\"block_time\":\""] {
        let at = text.find(key).unwrap() + key.len();
        let end = at + text[at..].find('"').unwrap();
        let ns = feeds::time::parse_node_time_ns(&text.as_bytes()[at..end]).unwrap();
        text.replace_range(at..end, &feeds::time::format_node_time(ns + ms * 1_000_000));
    }
    let text = add_to(&text, "\"block_number\":", blocks);
    add_to(&text, "\"time\":", ms).into_bytes()
}

/// `text` with `add` added to the number after every `key`.
fn add_to(text: &str, key: &str, add: i64) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(key) {
        let (head, tail) = rest.split_at(at + key.len());
        out.push_str(head);
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        let n: i64 = tail[..digits].parse().unwrap();
        out.push_str(&(n + add).to_string());
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

fn by_block() -> Vec<(i64, Vec<u8>)> {
    real_lines("fills-unfiltered", "node_fills_by_block")
        .into_iter()
        .map(|line| (header(&line).1, line))
        .collect()
}

/// The stored candles of `coins`, by (coin, interval, open time), as the
/// store gives them back.
fn stored(state_dir: &Path, coins: &[String]) -> BTreeMap<(String, String, i64), String> {
    let (store, _) = host::candles::store::CandleStore::open(state_dir, 0).unwrap();
    let reader = store.reader();
    let mut out = BTreeMap::new();
    for coin in coins {
        for interval in host::candles::store::INTERVALS {
            for c in reader
                .range(coin, interval, 0, i64::MAX, usize::MAX, false)
                .unwrap()
            {
                out.insert(
                    (coin.clone(), interval.to_string(), c.open_time),
                    format!("{c:?}"),
                );
            }
        }
    }
    out
}

fn coins_of(lines: &[(i64, Vec<u8>)]) -> Vec<String> {
    let mut coins: Vec<String> = lines
        .iter()
        .flat_map(|(_, line)| {
            let env: serde_json::Value = serde_json::from_slice(line).unwrap();
            env["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e[1]["coin"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    coins.sort();
    coins.dedup();
    coins
}

/// The expected candles of buckets lying inside the data (from the first
/// block on, ended by the last).
fn expected_inside(lines: &[(i64, Vec<u8>)]) -> BTreeMap<Key, Expected> {
    let raw: Vec<Vec<u8>> = lines.iter().map(|(_, l)| l.clone()).collect();
    let (first, last) = (lines[0].0, lines.last().unwrap().0);
    expected_candles(&raw)
        .into_iter()
        .filter(|((_, interval, open), _)| {
            let length = match *interval {
                "1s" => 1_000,
                "1m" => 60_000,
                _ => 300_000,
            };
            *open >= first && open + length <= last
        })
        .collect()
}

#[tokio::test]
async fn imported_archive_hours_answer_lookups_as_the_independent_calculation() {
    let lines = by_block();
    let dir = tempfile::tempdir().unwrap();
    archive(dir.path(), "node_fills_by_block", &lines);
    let state = tempfile::tempdir().unwrap();
    let report = import_ok(state.path(), &[dir.path()]);
    assert!(
        report.contains("hours read: 2 node_fills_by_block"),
        "{report}"
    );
    assert!(report.contains("blocks folded: 10"), "{report}");
    assert!(report.contains("fills: 1388"), "{report}");
    assert!(report.contains("gaps: none"), "{report}");

    let expected = expected_inside(&lines);
    assert!(expected.len() > 20, "{}", expected.len());
    let (server, _node) = serve_store(state.path()).await;
    let mut http = Http::connect(server.running.http_addr).await;
    for ((market, interval, open), want) in &expected {
        let reply = http
            .get(&candle_path(&server.key, market, interval, *open), None)
            .await;
        assert_candle(&reply, market, interval, *open, want);
    }
    drop(server);

    // A second import of the same hours adds nothing.
    let again = import_ok(state.path(), &[dir.path()]);
    assert!(again.contains("candles written: 0"), "{again}");
}

#[test]
fn the_older_formats_import_into_the_same_store() {
    let lines = by_block();
    let coins = coins_of(&lines);
    let one = |dataset: &str, convert: fn(&[u8]) -> Vec<Vec<u8>>| {
        let dir = tempfile::tempdir().unwrap();
        let converted: Vec<(i64, Vec<u8>)> = lines
            .iter()
            .flat_map(|(time, line)| convert(line).into_iter().map(|l| (*time, l)))
            .collect();
        archive(dir.path(), dataset, &converted);
        let state = tempfile::tempdir().unwrap();
        import_ok(state.path(), &[dir.path()]);
        stored(state.path(), &coins)
    };
    let by_block_store = {
        let dir = tempfile::tempdir().unwrap();
        archive(dir.path(), "node_fills_by_block", &lines);
        let state = tempfile::tempdir().unwrap();
        import_ok(state.path(), &[dir.path()]);
        stored(state.path(), &coins)
    };
    assert!(!by_block_store.is_empty());
    // The older formats have no empty blocks: their data ends with the last
    // fill, so the by-block store may hold buckets a little later.
    let fills = one("node_fills", fixtures::legacy::node_fills_lines);
    let trades = one("node_trades", fixtures::legacy::node_trades_lines);
    for (format, store) in [("node_fills", &fills), ("node_trades", &trades)] {
        assert!(!store.is_empty(), "{format}");
        for (key, candle) in store {
            assert_eq!(by_block_store.get(key), Some(candle), "{format} {key:?}");
        }
        assert!(
            store.len() * 10 >= by_block_store.len() * 9,
            "{format}: {} of {}",
            store.len(),
            by_block_store.len()
        );
    }
}

#[tokio::test]
async fn the_hand_over_between_formats_is_a_gap_lookups_name() {
    // node_fills up to the sixth block, by-block from the ninth: the two
    // blocks between are in neither.
    let lines = by_block();
    let dir = tempfile::tempdir().unwrap();
    let older: Vec<(i64, Vec<u8>)> = lines[..6]
        .iter()
        .flat_map(|(time, line)| {
            fixtures::legacy::node_fills_lines(line)
                .into_iter()
                .map(|l| (*time, l))
        })
        .collect();
    archive(dir.path(), "node_fills", &older);
    archive(dir.path(), "node_fills_by_block", &lines[8..]);
    let state = tempfile::tempdir().unwrap();
    let report = import_ok(state.path(), &[dir.path()]);
    assert!(report.contains("gaps (1;"), "{report}");
    assert!(report.contains("node_fills"), "{report}");
    let (store, _) = host::candles::store::CandleStore::open(state.path(), 0).unwrap();
    let coverage = store.reader().coverage();
    assert_eq!(coverage.gaps.len(), 1, "{coverage:?}");
    let gap = coverage.gaps[0].clone();
    // The gap runs from the last fill of node_fills to the first by-block
    // block.
    assert!(gap.to_ms == lines[8].0, "{gap:?}");
    drop(store);

    let (server, _node) = serve_store(state.path()).await;
    let mut http = Http::connect(server.running.http_addr).await;
    let inside = (gap.to_ms - 1) - (gap.to_ms - 1).rem_euclid(1_000);
    let reply = http
        .get(&candle_path(&server.key, "BTC", "1s", inside), None)
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "gap", "{}", reply.body);
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .contains("node_fills"),
        "{}",
        reply.body
    );
}

#[test]
fn an_import_killed_mid_way_resumes_to_the_same_store() {
    // A few thousand simulated blocks, so the import takes long enough to
    // be killed between commits.
    let source = tempfile::tempdir().unwrap();
    let mut cfg = fixtures::SimConfig::small(9);
    cfg.mode = fixtures::OutputMode::ByBlock;
    cfg.snapshot_every = None;
    let run = fixtures::RunOptions {
        blocks: Some(40_000),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, source.path(), &run, &mut |_| {}).unwrap();
    let root = source.path().join("hl/data");
    let start = "2026-05-05T00:00:00Z";
    let whole = tempfile::tempdir().unwrap();
    let once = import_command(whole.path(), &[&root], start)
        .output()
        .unwrap();
    assert!(
        once.status.success(),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );

    let killed = tempfile::tempdir().unwrap();
    for wait_ms in [300, 700, 1_200] {
        let mut child = import_command(killed.path(), &[&root], start)
            .args(["--commit-every-ms", "50"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        // SIGKILL, by the PID this test started.
        let _ = child.kill();
        child.wait().unwrap();
    }
    let last = import_command(killed.path(), &[&root], start)
        .output()
        .unwrap();
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );

    let coins = ["BTC", "ETH", "SOL", "HYPE", "PURR/USDC", "@107"].map(String::from);
    let dump = |dir: &Path| {
        // One open store at a time: `stored` opens it again.
        let (count, coverage) = {
            let (store, _) = host::candles::store::CandleStore::open(dir, 0).unwrap();
            (store.reader().candles(), store.reader().coverage())
        };
        (stored(dir, &coins), count, coverage)
    };
    let (want, want_count, want_coverage) = dump(whole.path());
    let (got, got_count, got_coverage) = dump(killed.path());
    assert!(want.len() > 100, "{}", want.len());
    assert_eq!(got_count, want_count);
    assert_eq!(got, want);
    assert_eq!(got_coverage, want_coverage);
}

#[tokio::test]
async fn an_import_beside_a_running_server_is_refused() {
    let node = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_owned();
    let server = TestServer::start(node.path(), |args| {
        args.state_dir = Some(state_dir.clone());
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    archive(dir.path(), "node_fills_by_block", &by_block());
    let out = import(state.path(), &[dir.path()], &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("in use by another l1gate process") && stderr.contains("candles.lock"),
        "{stderr}"
    );
    drop(server);
    import_ok(state.path(), &[dir.path()]);
}

#[tokio::test]
async fn a_damaged_hour_leaves_a_gap_and_the_import_goes_on_with_the_next() {
    // Hour 23: the first real block. Hour 0: eight small blocks, then the
    // large one moved after them; its file is cut in the large block, so
    // the small ones are sound. Hour 1: all ten blocks again, an hour
    // later. Block numbers run on without a hole.
    let lines = by_block();
    let (first_time, first) = (lines[0].0, lines[0].1.clone());
    let small: Vec<(i64, Vec<u8>)> = lines[2..]
        .iter()
        .map(|(time, line)| (*time, shifted(line, 0, -1)))
        .collect();
    let large = shifted(&lines[1].1, 2_000, 8);
    let later: Vec<(i64, Vec<u8>)> = lines
        .iter()
        .map(|(time, line)| (time + 3_600_000, shifted(line, 3_600_000, 10)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (date, hour) = hour_of(first_time);
    hour_file(dir.path(), "node_fills_by_block", &date, hour, &[&first]);
    let mut zero: Vec<&[u8]> = small.iter().map(|(_, l)| l.as_slice()).collect();
    zero.push(&large);
    let (date, hour) = hour_of(small[0].0);
    let damaged = hour_file(dir.path(), "node_fills_by_block", &date, hour, &zero);
    // Again in 64 KiB blocks (the tool's default is one 4 MiB block), so
    // that the cut leaves whole blocks before it.
    let plain = damaged.with_extension("");
    let mut text = zero.join(&b'\n');
    text.push(b'\n');
    std::fs::write(&plain, text).unwrap();
    let status = Command::new("lz4")
        .args(["-q", "-f", "-B4"])
        .arg(&plain)
        .arg(&damaged)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_file(&plain).unwrap();
    let bytes = std::fs::read(&damaged).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() * 3 / 5]).unwrap();
    // All in hour 1's file, the first block spilled from hour 0.
    let (date, hour) = hour_of(later[1].0);
    let one: Vec<&[u8]> = later.iter().map(|(_, l)| l.as_slice()).collect();
    hour_file(dir.path(), "node_fills_by_block", &date, hour, &one);

    let state = tempfile::tempdir().unwrap();
    let report = import_damaged(state.path(), dir.path());
    assert!(report.contains("0.lz4"), "{report}");
    let (store, _) = host::candles::store::CandleStore::open(state.path(), 0).unwrap();
    let coverage = store.reader().coverage();
    drop(store);
    // One gap, from the last sound block to the next file's first.
    let (last_sound, next) = (small.last().unwrap().0, later[0].0);
    assert_eq!(coverage.gaps.len(), 1, "{coverage:?}");
    let gap = &coverage.gaps[0];
    assert_eq!((gap.from_ms, gap.to_ms), (last_sound, next), "{gap:?}");
    assert!(gap.reason.contains("truncated"), "{gap:?}");

    let (server, _node) = serve_store(state.path()).await;
    let mut http = Http::connect(server.running.http_addr).await;
    // The buckets before the damage and those of the next hour are served
    // as the independent calculation gives them.
    let mut before = vec![(first_time, first.clone())];
    before.extend(small.iter().cloned());
    let mut expected = expected_inside(&before);
    let before_count = expected.len();
    expected.extend(expected_inside(&later));
    assert!(before_count > 0 && expected.len() > before_count);
    for ((market, interval, open), want) in &expected {
        let reply = http
            .get(&candle_path(&server.key, market, interval, *open), None)
            .await;
        assert_candle(&reply, market, interval, *open, want);
    }
    // Inside the gap: said so, naming the damaged file.
    let inside = last_sound + 60_000 - (last_sound + 60_000).rem_euclid(60_000);
    let reply = http
        .get(&candle_path(&server.key, "BTC", "1m", inside), None)
        .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.body["error"], "gap", "{}", reply.body);
    assert!(
        reply.body["message"].as_str().unwrap().contains("0.lz4"),
        "{}",
        reply.body
    );
}

#[test]
fn a_missing_older_hour_is_one_gap_however_many_blocks_spill_into_it() {
    // node_fills: hour 23, no hour 0, and an hour 1 file that begins with
    // blocks of hour 0's last second.
    let lines = by_block();
    let to_fills = |line: &[u8]| fixtures::legacy::node_fills_lines(line);
    let dir = tempfile::tempdir().unwrap();
    let (date, hour) = hour_of(lines[0].0);
    let first = to_fills(&lines[0].1);
    let first: Vec<&[u8]> = first.iter().map(Vec::as_slice).collect();
    hour_file(dir.path(), "node_fills", &date, hour, &first);
    let spilled: Vec<Vec<u8>> = lines[2..]
        .iter()
        .flat_map(|(_, line)| to_fills(&shifted(line, 3_599_000, 0)))
        .collect();
    let spilled: Vec<&[u8]> = spilled.iter().map(Vec::as_slice).collect();
    let hour_one = lines[2].0 - lines[2].0.rem_euclid(3_600_000) + 3_600_000;
    let (date, hour) = hour_of(hour_one);
    hour_file(dir.path(), "node_fills", &date, hour, &spilled);

    let state = tempfile::tempdir().unwrap();
    let report = import_ok(state.path(), &[dir.path()]);
    assert!(report.contains("missing"), "{report}");
    let (store, _) = host::candles::store::CandleStore::open(state.path(), 0).unwrap();
    let coverage = store.reader().coverage();
    assert_eq!(coverage.gaps.len(), 1, "{coverage:?}");
    let gap = &coverage.gaps[0];
    assert_eq!((gap.from_ms, gap.to_ms), (lines[0].0, hour_one), "{gap:?}");
    assert!(gap.reason.contains("missing"), "{gap:?}");
}

#[test]
fn an_hour_failing_its_checksum_counts_for_nothing_though_it_was_read() {
    // Hour 23: the first real block. Hour 0: the other nine, read and
    // folded before the frame's checksum at the file's end is reached —
    // where a bit is flipped. Hour 1: all ten again, an hour later.
    let lines = by_block();
    let coins = coins_of(&lines);
    let later: Vec<(i64, Vec<u8>)> = lines
        .iter()
        .map(|(time, line)| (time + 3_600_000, shifted(line, 3_600_000, 10)))
        .collect();
    let write = |dir: &Path, with_zero: bool| {
        let first = &lines[..1];
        let (date, hour) = hour_of(first[0].0);
        hour_file(dir, "node_fills_by_block", &date, hour, &[&first[0].1]);
        let zero: Vec<&[u8]> = lines[1..].iter().map(|(_, l)| l.as_slice()).collect();
        let (date, hour) = hour_of(lines[1].0);
        let path = hour_file(dir, "node_fills_by_block", &date, hour, &zero);
        if with_zero {
            let mut bytes = std::fs::read(&path).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x10;
            std::fs::write(&path, bytes).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        let (date, hour) = hour_of(later[1].0);
        let one: Vec<&[u8]> = later.iter().map(|(_, l)| l.as_slice()).collect();
        hour_file(dir, "node_fills_by_block", &date, hour, &one);
    };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), true);
    let state = tempfile::tempdir().unwrap();
    let report = import_damaged(state.path(), dir.path());
    assert!(
        report.contains("0.lz4") && report.contains("checksum"),
        "{report}"
    );
    let (store, _) = host::candles::store::CandleStore::open(state.path(), 0).unwrap();
    let coverage = store.reader().coverage();
    drop(store);
    // One gap, from the block before the file to the next file's first.
    assert_eq!(coverage.gaps.len(), 1, "{coverage:?}");
    let gap = &coverage.gaps[0];
    assert_eq!(
        (gap.from_ms, gap.to_ms),
        (lines[0].0, later[0].0),
        "{gap:?}"
    );
    assert!(gap.reason.contains("checksum"), "{gap:?}");

    // The candles are those of the same hours without the file: nothing
    // of what was folded from it before its checksum failed is left.
    let without = tempfile::tempdir().unwrap();
    write(without.path(), false);
    let state_without = tempfile::tempdir().unwrap();
    import(state_without.path(), &[without.path()], &[]);
    let stored_with = stored(state.path(), &coins);
    assert!(!stored_with.is_empty());
    assert_eq!(stored_with, stored(state_without.path(), &coins));
    let inside = |(_, _, open): &(String, String, i64)| *open >= lines[1].0 && *open < later[0].0;
    assert!(
        !stored_with.keys().any(inside),
        "a candle of the discarded hour"
    );
}

#[test]
fn hours_compressed_with_zstd_or_gzip_or_plain_import_as_the_lz4_ones() {
    let lines = by_block();
    let coins = coins_of(&lines);
    let store_of = |tool: Option<Tool>| {
        let dir = tempfile::tempdir().unwrap();
        archive_as(tool, dir.path(), "node_fills_by_block", &lines);
        let state = tempfile::tempdir().unwrap();
        let report = import_ok(state.path(), &[dir.path()]);
        assert!(report.contains("gaps: none"), "{report}");
        stored(state.path(), &coins)
    };
    let lz4 = store_of(Some(Tool::Lz4));
    assert!(!lz4.is_empty());
    for tool in [Some(Tool::Zstd), Some(Tool::Gzip), None] {
        assert_eq!(store_of(tool), lz4, "{tool:?}");
    }
}
