//! `l1gate replay --format parquet|csv` and `l1gate candles export`, read by
//! the tools research users read them with: DuckDB and polars (PyPI, pinned,
//! in a venv under `target/`). Every view over the real captures and over a
//! simulator run; a replay killed mid-way; one file per UTC day; the candle
//! store's export against candles worked out from the trades.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::python;

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");
/// The readers, pinned.
pub const READERS: [&str; 2] = ["duckdb==2.0.1", "polars==2.1.0"];
/// Their environment (polars' and DuckDB's wheels are large: kept apart
/// from the SDK clients').
pub const VENV: &str = "python-research";
const CHECK: &str = include_str!("research_export.py");

fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/real")
        .join(name)
}

/// `l1gate replay ARGS`, which must succeed; its standard output.
fn replay(args: &[&str]) -> Vec<u8> {
    let out = Command::new(L1GATE)
        .arg("replay")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "l1gate replay {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// One view's replay in the three formats, as a case of the checker.
fn case(name: &str, data: &Path, view: &str, selection: &[&str], dir: &Path) -> serde_json::Value {
    let stem = dir.join(format!("{name}-{view}"));
    let path = |ext: &str| format!("{}.{ext}", stem.display());
    let mut args = vec!["--data", data.to_str().unwrap(), "--view", view];
    args.extend_from_slice(selection);
    std::fs::write(path("jsonl"), replay(&args)).unwrap();
    for format in ["parquet", "csv"] {
        let out = path(format);
        let mut with = args.clone();
        with.extend(["--format", format, "--out", &out]);
        replay(&with);
    }
    serde_json::json!({
        "name": name,
        "view": view,
        "jsonl": path("jsonl"),
        "parquet": path("parquet"),
        "csv": path("csv"),
    })
}

/// The first account with an order status in `data`'s status files.
fn a_user_with_statuses(data: &Path) -> String {
    let dir = data.join("hl/data/node_order_statuses_by_block/hourly");
    let day = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let hour = std::fs::read_dir(day)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(hour).unwrap();
    let at = text.find("\"user\":\"").unwrap() + 8;
    text[at..at + 42].to_owned()
}

fn check(cases: &[serde_json::Value]) -> String {
    let python = python::venv_named(VENV, &READERS);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("cases.json");
    std::fs::write(&manifest, serde_json::to_vec(cases).unwrap()).unwrap();
    let script = dir.path().join("check.py");
    std::fs::write(&script, CHECK).unwrap();
    let out = Command::new(python)
        .arg(&script)
        .arg(&manifest)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the readers disagree with the JSON-lines replay:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{stdout}");
    stdout
}

/// Every view's selection over a data set with BTC books.
fn views(user: &str) -> Vec<(&'static str, Vec<String>)> {
    let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        ("l2book", owned(&["--coins", "BTC"])),
        ("bbo", owned(&["--coins", "BTC"])),
        ("l2diff", owned(&["--coins", "BTC", "--n-levels", "5"])),
        ("l4book", owned(&["--coins", "BTC"])),
        ("l4updates", Vec::new()),
        ("tpsl", Vec::new()),
        ("trades", owned(&["--coins", "BTC"])),
        ("fills", Vec::new()),
        ("candles", owned(&["--coins", "BTC", "--interval", "1m"])),
        ("mids", Vec::new()),
        ("statuses", vec!["--users".to_owned(), user.to_owned()]),
    ]
}

fn all_views(name: &str, data: &Path, dir: &Path) -> Vec<serde_json::Value> {
    let user = a_user_with_statuses(data);
    views(&user)
        .iter()
        .map(|(view, selection)| {
            let selection: Vec<&str> = selection.iter().map(String::as_str).collect();
            case(name, data, view, &selection, dir)
        })
        .collect()
}

#[test]
fn every_views_tables_over_the_real_captures_read_in_duckdb_and_polars_as_the_json_lines_say() {
    let dir = tempfile::tempdir().unwrap();
    // The capture with a snapshot: every book view whole; the other: trigger
    // orders (TP/SL) and order statuses; the unfiltered fills: many coins.
    let mut cases = all_views("real-snapshot", &real("btc-985148182"), dir.path());
    cases.extend(all_views(
        "real-triggers",
        &real("btc-978995377"),
        dir.path(),
    ));
    let unfiltered = real("fills-unfiltered");
    cases.push(case(
        "real-unfiltered",
        &unfiltered,
        "fills",
        &[],
        dir.path(),
    ));
    cases.push(case(
        "real-unfiltered",
        &unfiltered,
        "trades",
        &["--coins", "@230,@142,@166"],
        dir.path(),
    ));
    let said = check(&cases);
    assert_eq!(said.lines().count(), cases.len(), "{said}");
}

/// A small simulator run: `blocks` blocks from the simulator's start.
fn simulate(dir: &Path, blocks: u64, start_time_ms: Option<i64>) {
    let mut cfg = fixtures::SimConfig::small(5);
    cfg.mode = fixtures::OutputMode::ByBlock;
    if let Some(start) = start_time_ms {
        cfg.start_time_ms = start;
    }
    let run = fixtures::RunOptions {
        blocks: Some(blocks),
        no_replica_cmds: true,
        ..fixtures::RunOptions::default()
    };
    fixtures::generate(&cfg, dir, &run, &mut |_| {}).unwrap();
}

#[test]
fn every_views_tables_over_a_simulator_run_read_in_duckdb_and_polars_as_the_json_lines_say() {
    let data = tempfile::tempdir().unwrap();
    simulate(data.path(), 600, None);
    let dir = tempfile::tempdir().unwrap();
    let cases = all_views("simulator", data.path(), dir.path());
    let said = check(&cases);
    assert_eq!(said.lines().count(), cases.len(), "{said}");
}

/// The open file descriptors of `pid` whose target names an unnamed file.
fn unnamed_files(pid: u32) -> Vec<PathBuf> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(Result::ok)
        .map(|fd| fd.path())
        .filter(|fd| {
            std::fs::read_link(fd)
                .is_ok_and(|target| target.to_string_lossy().ends_with("(deleted)"))
        })
        .collect()
}

/// Starts `l1gate replay ARGS`, waits until it writes its output (an
/// unnamed file of at least `min_bytes`) and kills it (SIGKILL, by the PID
/// this test started).
fn kill_mid_way(args: &[&str], min_bytes: u64) {
    let mut child = Command::new(L1GATE)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sizes: Vec<u64> = unnamed_files(child.id())
            .iter()
            .filter_map(|fd| std::fs::metadata(fd).ok())
            .map(|m| m.len())
            .collect();
        if sizes.iter().any(|size| *size >= min_bytes) {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the replay ended before it could be killed mid-way"
        );
        assert!(Instant::now() < deadline, "no output file under way");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_replay_killed_mid_way_leaves_no_file_and_a_whole_one_reads_back() {
    let data = tempfile::tempdir().unwrap();
    simulate(data.path(), 3_000, None);
    let out = tempfile::tempdir().unwrap();
    for format in ["csv", "parquet"] {
        let target = out.path().join(format!("l4book.{format}"));
        let args = [
            "replay",
            "--data",
            data.path().to_str().unwrap(),
            "--view",
            "l4book",
            "--coins",
            "BTC",
            "--format",
            format,
            "--out",
            target.to_str().unwrap(),
        ];
        // CSV reaches the disk as it goes: killed with a megabyte written.
        // Parquet keeps a row group in memory until it is whole: killed
        // while its file is open.
        kill_mid_way(&args, if format == "csv" { 1 << 20 } else { 0 });
        let left: Vec<_> = std::fs::read_dir(out.path()).unwrap().collect();
        assert!(left.is_empty(), "a killed replay left {left:?}");

        // The same replay to its end: a file DuckDB reads whole.
        let done = Command::new(L1GATE).args(args).output().unwrap();
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        let python = python::venv_named(VENV, &READERS);
        let count = Command::new(python)
            .args([
                "-c",
                "import duckdb, sys; print(duckdb.sql(f\"select count(*) from '{sys.argv[1]}'\").fetchall()[0][0])",
            ])
            .arg(&target)
            .output()
            .unwrap();
        assert!(
            count.status.success(),
            "{}",
            String::from_utf8_lossy(&count.stderr)
        );
        let rows: u64 = String::from_utf8_lossy(&count.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(rows > 50_000, "{rows} rows");
        std::fs::remove_file(&target).unwrap();
    }
}

#[test]
fn partitioned_by_day_each_utc_day_is_a_file_holding_its_blocks() {
    // Started a minute before a UTC midnight, run past it.
    let midnight: i64 = 1_778_025_600_000; // 2026-05-06T00:00:00Z
    let data = tempfile::tempdir().unwrap();
    simulate(data.path(), 2_000, Some(midnight - 60_000));
    let out = tempfile::tempdir().unwrap();
    let days = out.path().join("trades");
    replay(&[
        "--data",
        data.path().to_str().unwrap(),
        "--view",
        "trades",
        "--coins",
        "BTC,ETH",
        "--format",
        "csv",
        "--out",
        days.to_str().unwrap(),
        "--partition",
        "day",
    ]);
    let mut names: Vec<String> = std::fs::read_dir(&days)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["trades-2026-05-05.csv", "trades-2026-05-06.csv"]);
    let jsonl = replay(&[
        "--data",
        data.path().to_str().unwrap(),
        "--view",
        "trades",
        "--coins",
        "BTC,ETH",
    ]);
    let mut want = [0usize; 2];
    for line in String::from_utf8(jsonl).unwrap().lines() {
        let frame: serde_json::Value = serde_json::from_str(line).unwrap();
        let day = usize::from(frame["time"].as_i64().unwrap() >= midnight);
        want[day] += frame["trades"].as_array().unwrap().len();
    }
    for (name, want) in names.iter().zip(want) {
        let text = std::fs::read_to_string(days.join(name)).unwrap();
        let mut lines = text.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with(r#""block_number","block_time","coin","#)
        );
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), want, "{name}");
        let day = &name["trades-".len().."trades-".len() + 10];
        assert!(
            rows.iter()
                .all(|row| row.split(',').nth(1).unwrap().starts_with(day)),
            "{name} holds a row of another day"
        );
    }
    assert!(
        want.iter().all(|rows| *rows > 0),
        "trades on both days: {want:?}"
    );
}

#[test]
fn the_candle_stores_export_is_the_candles_the_trades_make_and_is_refused_beside_its_holder() {
    // Ten simulated minutes, imported into a store.
    let data = tempfile::tempdir().unwrap();
    simulate(data.path(), 9_000, None);
    let state = tempfile::tempdir().unwrap();
    let start = "2026-05-05T00:00:00Z";
    let import = Command::new(L1GATE)
        .args(["candles", "import"])
        .arg(data.path().join("hl/data"))
        .arg("--state-dir")
        .arg(state.path())
        .args(["--candle-history-start", start, "--quiet"])
        .output()
        .unwrap();
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    let trades = tempfile::tempdir().unwrap();
    let trades_path = trades.path().join("btc.jsonl");
    std::fs::write(
        &trades_path,
        replay(&[
            "--data",
            data.path().to_str().unwrap(),
            "--view",
            "trades",
            "--coins",
            "BTC",
        ]),
    )
    .unwrap();
    let export = |interval: &str, format: &str| {
        let out = trades.path().join(format!("btc-{interval}.{format}"));
        let run = Command::new(L1GATE)
            .args([
                "candles",
                "export",
                "--market",
                "BTC",
                "--interval",
                interval,
            ])
            .args([
                "--from",
                "2026-05-05T17:00:00Z",
                "--to",
                "2026-05-05T18:00:00Z",
            ])
            .args(["--format", format, "--out"])
            .arg(&out)
            .arg("--state-dir")
            .arg(state.path())
            .args(["--candle-history-start", start])
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let said = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(said.contains("not in the store"), "{said}");
        out.to_str().unwrap().to_owned()
    };
    // Stored intervals (1s, 1m, 5m) and built ones (3m from 1m, 15m from 5m).
    let cases: Vec<serde_json::Value> = [
        ("1s", 1_000, 100),
        ("1m", 60_000, 5),
        ("3m", 180_000, 2),
        ("5m", 300_000, 1),
        ("15m", 900_000, 0),
    ]
    .iter()
    .map(|(interval, ms, min_complete)| {
        serde_json::json!({
            "name": format!("candles {interval}"),
            "trades": trades_path.to_str().unwrap(),
            "interval_ms": ms,
            "min_complete": min_complete,
            "parquet": export(interval, "parquet"),
            "csv": export(interval, "csv"),
        })
    })
    .collect();
    let said = check(&cases);
    assert_eq!(said.lines().count(), cases.len(), "{said}");

    // Beside the store's holder (a server, here the store opened by this
    // test): refused, naming the lock.
    let (_held, _) = host::candles::store::CandleStore::open(
        state.path(),
        feeds::time::parse_iso8601_ms(start).unwrap(),
    )
    .unwrap();
    let refused = Command::new(L1GATE)
        .args(["candles", "export", "--market", "BTC", "--interval", "1m"])
        .args(["--from", "2026-05-05T17:00:00Z", "--out"])
        .arg(trades.path().join("refused.csv"))
        .args(["--format", "csv", "--state-dir"])
        .arg(state.path())
        .args(["--candle-history-start", start])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("in use by another l1gate process"), "{said}");
    assert!(!trades.path().join("refused.csv").exists());
}

#[test]
fn requests_outside_the_export_are_refused_naming_the_flag() {
    let data = real("btc-985148182");
    let run = |args: &[&str]| {
        let out = Command::new(L1GATE)
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let data = data.to_str().unwrap();
    let said = run(&[
        "replay", "--data", data, "--view", "trades", "--coins", "BTC", "--format", "parquet",
    ]);
    assert!(said.contains("--format parquet needs --out"), "{said}");
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_str().unwrap();
    let said = run(&[
        "replay", "--data", data, "--view", "trades", "--coins", "BTC", "--format", "csv", "--out",
        dir_path,
    ]);
    assert!(said.contains("is a directory"), "{said}");
    let said = run(&[
        "replay",
        "--data",
        data,
        "--view",
        "trades",
        "--partition",
        "day",
    ]);
    assert!(said.contains("--out"), "{said}");
    // `candles export` with an interval and a start.
    let export = |interval: &str, from: &str| {
        run(&[
            "candles",
            "export",
            "--state-dir",
            dir_path,
            "--market",
            "BTC",
            "--interval",
            interval,
            "--from",
            from,
            "--out",
            "x.parquet",
        ])
    };
    let said = export("1m", "2026-05-05T00:00:00Z");
    assert!(said.contains("no candle store"), "{said}");
    let said = export("7m", "2026-05-05T00:00:00Z");
    assert!(said.contains("--interval: unknown interval"), "{said}");
    let said = export("1m", "yesterday");
    assert!(said.contains("--from"), "{said}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}
