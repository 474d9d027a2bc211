//! The report's verdicts: each target read from its harness's summary,
//! measured against its goal, with the summaries' accessors and the
//! numbers' formatting the other parts share.

use benches::summary::FANOUT_BBO;
use serde_json::Value;
use std::fmt::Write as _;

use super::{REPLAY_SCALES, Run};

pub(crate) fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64()
}

pub(crate) fn rows<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

pub(crate) fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn curve(v: &Value) -> Vec<(f64, f64)> {
    v.get("curve")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
        .collect()
}

/// The replay row `name` of a replay summary.
pub(crate) fn replay_row<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    rows(v, "rows").find(|r| text(r, "name") == name)
}

/// A ratio as `1.23×`, with two significant digits below 0.1.
pub(crate) fn times(x: f64) -> String {
    if x.is_finite() && x > 0.0 && x < 0.1 {
        let digits = (-x.log10()).ceil() as usize + 1;
        format!("{x:.digits$}×")
    } else {
        format!("{x:.2}×")
    }
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

pub(crate) fn secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{} min {:02.0} s", (s / 60.0).floor(), s % 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// One line of the summary table.
pub(crate) struct Target {
    pub(crate) what: String,
    pub(crate) goal: String,
    pub(crate) measured: String,
    pub(crate) reference: String,
    pub(crate) ratio: String,
    pub(crate) verdict: String,
}

impl Target {
    fn missing(what: &str, goal: &str, why: String) -> Self {
        Self {
            what: what.to_owned(),
            goal: goal.to_owned(),
            measured: why,
            reference: "–".to_owned(),
            ratio: "–".to_owned(),
            verdict: "not measured".to_owned(),
        }
    }
}

pub(crate) fn ingest_target(run: &Run) -> Target {
    let (what, goal) = ("Ingest + fold, per core", "≥ 1,000 MB/s");
    let key = format!("replay@{}", REPLAY_SCALES[REPLAY_SCALES.len() - 1]);
    let Some(v) = run.summary(&key) else {
        return Target::missing(what, goal, run.missing(&key));
    };
    let (Some(fold), Some(scan), Some(value)) = (
        replay_row(v, "fold"),
        replay_row(v, "memchr scan"),
        replay_row(v, "serde_json::Value"),
    ) else {
        return Target::missing(what, goal, "not measured: replay rows missing".to_owned());
    };
    let rate = |r: &Value| num(r, "mb_s").unwrap_or(f64::NAN);
    let blocks = num(v, "blocks").unwrap_or(0.0);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{:.0} MB/s, {:.2} M events/s (fold of {:.0} MB: {blocks:.0} blocks at scale {})",
            rate(fold),
            num(fold, "events_s").unwrap_or(0.0) / 1e6,
            num(fold, "mb").unwrap_or(0.0),
            num(v, "scale").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "memchr scan {:.0} MB/s; `serde_json::Value` parse {:.0} MB/s",
            rate(scan),
            rate(value)
        ),
        ratio: format!(
            "{} `Value`; {:.1}% of scan",
            times(rate(fold) / rate(value)),
            100.0 * rate(fold) / rate(scan)
        ),
        verdict: verdict(rate(fold) >= 1_000.0).to_owned(),
    }
}

/// Whether a latency row is of the server with default settings (no `poll_interval_ms`).
pub(crate) fn default_config(r: &Value) -> bool {
    r.get("poll_ms").is_none_or(Value::is_null)
}

/// The worst `key` (`p50_ms`, `p99_ms`) over the market views of the default server at `rate`,
/// with the view it belongs to.
pub(crate) fn latency_worst(v: &Value, rate: f64, key: &str) -> Option<(f64, String)> {
    rows(v, "rows")
        .filter(|r| {
            default_config(r)
                && !r.get("reference").and_then(Value::as_bool).unwrap_or(false)
                && num(r, "frames").unwrap_or(0.0) > 0.0
                && num(r, "rate").is_some_and(|x| (x - rate).abs() < 1e-9)
        })
        .filter_map(|r| Some((num(r, key)?, text(r, "stream").to_owned())))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// `key` of the raw feed reference of the default server at `rate`.
pub(crate) fn latency_reference(v: &Value, rate: f64, key: &str) -> Option<f64> {
    rows(v, "rows")
        .find(|r| {
            default_config(r)
                && r.get("reference").and_then(Value::as_bool).unwrap_or(false)
                && num(r, "frames").unwrap_or(0.0) > 0.0
                && num(r, "rate").is_some_and(|x| (x - rate).abs() < 1e-9)
        })
        .and_then(|r| num(r, key))
}

/// The latency targets: (label, goal, rate, summary key, target in ms).
pub(crate) const LATENCY_GOALS: [(&str, &str, f64, &str, f64); 3] = [
    (
        "Append → frame p50 at 1× (worst market view)",
        "≤ 500 µs",
        1.0,
        "p50_ms",
        0.5,
    ),
    (
        "Append → frame p99 at 1× (worst market view)",
        "≤ 2 ms",
        1.0,
        "p99_ms",
        2.0,
    ),
    (
        "Append → frame p99 at 10× (worst market view)",
        "≤ 10 ms",
        10.0,
        "p99_ms",
        10.0,
    ),
];

pub(crate) fn latency_targets(run: &Run) -> Vec<Target> {
    LATENCY_GOALS
        .iter()
        .map(|&(what, goal, rate, key, target_ms)| {
            let Some(v) = run.summary("latency") else {
                return Target::missing(what, goal, run.missing("latency"));
            };
            let Some((value, stream)) = latency_worst(v, rate, key) else {
                return Target::missing(
                    what,
                    goal,
                    format!("not measured: no frames at {rate}× with default settings"),
                );
            };
            let quantile = key.trim_end_matches("_ms");
            let (mut reference, ratio) = latency_reference(v, rate, key).map_or_else(
                || ("–".to_owned(), "–".to_owned()),
                |r| {
                    (
                        format!(
                            "{r:.3} ms: raw feed `StreamFills` live tail, unfiltered ({quantile}, no fold)"
                        ),
                        times(value / r),
                    )
                },
            );
            for (field, name, what) in [
                (
                    "machine_floor",
                    "machine floor",
                    "append → inotify → read → loopback TCP, no l1gate code, at the 1× interval",
                ),
                (
                    "grpc_floor",
                    "gRPC floor",
                    "the same through a tonic stream between two tokio runtimes, no l1gate code",
                ),
            ] {
                if let Some(floor) = v.get(field).and_then(|f| num(f, key)) {
                    let _ = write!(reference, "; {name} {floor:.3} ms ({what})");
                }
            }
            Target {
                what: what.to_owned(),
                goal: goal.to_owned(),
                measured: format!(
                    "{value:.3} ms, server with default settings (worst: {stream})"
                ),
                reference,
                ratio,
                verdict: verdict(value <= target_ms).to_owned(),
            }
        })
        .collect()
}

pub(crate) fn replay_cli_targets(run: &Run) -> Vec<Target> {
    ["bbo", "trades"]
        .iter()
        .map(|view| {
            let what = format!("`l1gate replay --view {view} --coins BTC`, end to end");
            let goal = "≥ 1,000 MB/s";
            let Some(v) = run.summary("replay_cli") else {
                return Target::missing(&what, goal, run.missing("replay_cli"));
            };
            let Some(row) = rows(v, "rows").find(|r| text(r, "view") == *view) else {
                return Target::missing(&what, goal, format!("not measured: no `{view}` row"));
            };
            let rate = num(row, "mb_s").unwrap_or(f64::NAN);
            let reference = v
                .get("reference")
                .and_then(|r| num(r, "mb_s"))
                .unwrap_or(f64::NAN);
            Target {
                what,
                goal: goal.to_owned(),
                measured: format!(
                    "{rate:.0} MB/s of node output ({:.0} MB, {:.0} blocks, {:.2} s from spawn to exit; it read {})",
                    num(v, "mb").unwrap_or(0.0),
                    num(v, "blocks").unwrap_or(0.0),
                    num(row, "wall_s").unwrap_or(f64::NAN),
                    num(row, "read_mb").map_or_else(|| "? MB".to_owned(), |m| format!("{m:.0} MB")),
                ),
                reference: format!("`cat FILES \\| wc -l` of the same files: {reference:.0} MB/s"),
                ratio: times(rate / reference),
                verdict: verdict(rate >= 1_000.0).to_owned(),
            }
        })
        .collect()
}

pub(crate) fn engine_cpu_targets(run: &Run) -> [Target; 2] {
    let (what_live, goal_live) = (
        "Engine thread CPU per block, live at 1×",
        "≤ 1.3× `Engine::apply` folding at the same pace",
    );
    let (what_idle, goal_idle) = ("Idle server CPU", "< 1% of one core");
    let Some(v) = run.summary("engine_cpu") else {
        return [
            Target::missing(what_live, goal_live, run.missing("engine_cpu")),
            Target::missing(what_idle, goal_idle, run.missing("engine_cpu")),
        ];
    };
    let ratio = num(v, "ratio").unwrap_or(f64::NAN);
    let idle = num(v, "idle_pct").unwrap_or(f64::NAN);
    [
        Target {
            what: what_live.to_owned(),
            goal: goal_live.to_owned(),
            measured: format!(
                "{:.0} µs per block ({:.0} blocks, no stream open); `Market::apply` with `Needs::ALL` alone: {:.0} µs",
                num(v, "live_us_per_block").unwrap_or(f64::NAN),
                num(v, "blocks").unwrap_or(0.0),
                num(v, "market_us_per_block").unwrap_or(f64::NAN),
            ),
            reference: format!(
                "`Engine::apply` on the same blocks{}; back to back with warm caches {:.0} µs (live {})",
                num(v, "engine_paced_us_per_block").map_or_else(String::new, |paced| format!(
                    " paced at 1× like the live thread (caches as cold as its): {paced:.0} µs per block"
                )),
                num(v, "engine_us_per_block").unwrap_or(f64::NAN),
                times(num(v, "ratio_back_to_back").unwrap_or(f64::NAN)),
            ),
            ratio: times(ratio),
            verdict: verdict(ratio <= 1.3).to_owned(),
        },
        Target {
            what: what_idle.to_owned(),
            goal: goal_idle.to_owned(),
            measured: format!(
                "{idle:.2}% of one core (whole process, {:.0} s with no append)",
                num(v, "idle_seconds").unwrap_or(f64::NAN)
            ),
            reference: format!(
                "engine thread at 1×: {:.2}% of one core",
                num(v, "engine_core_pct").unwrap_or(f64::NAN)
            ),
            ratio: "–".to_owned(),
            verdict: verdict(idle < 1.0).to_owned(),
        },
    ]
}

pub(crate) fn fanout_targets(run: &Run) -> [Target; 3] {
    let (what, goal) = (
        "Fan-out: 10,000 `StreamBbo` streams",
        "all held, every frame, p99 ≤ 100 ms (goal 10 ms)",
    );
    let (slow_what, slow_goal) = (
        "Fan-out with 1% stalled readers",
        "stalled ones ended; others' p99 unchanged",
    );
    let (kept_what, kept_goal) = (
        "Memory after the fan-out's bursts",
        "RSS within 50 MB of a burst-free server's a minute after",
    );
    let Some(v) = run.summary("fanout") else {
        return [
            Target::missing(what, goal, run.missing("fanout")),
            Target::missing(slow_what, slow_goal, run.missing("fanout")),
            Target::missing(kept_what, kept_goal, run.missing("fanout")),
        ];
    };
    let kept = match v.get("after_bursts").filter(|a| !a.is_null()) {
        Some(a) => {
            let (after, fresh) = (
                num(a, "after_mb").unwrap_or(f64::NAN),
                num(a, "fresh_mb").unwrap_or(f64::NAN),
            );
            let kept = num(a, "kept_mb").unwrap_or(f64::NAN);
            let settle = num(a, "settle_s").unwrap_or(0.0);
            Target {
                what: kept_what.to_owned(),
                goal: kept_goal.to_owned(),
                measured: format!(
                    "{after:.0} MB {settle:.0} s after the last client ({:.0} MB before the first burst): {kept:.0} MB kept",
                    num(a, "before_mb").unwrap_or(f64::NAN),
                ),
                reference: format!("a server started then, at the same block: {fresh:.0} MB"),
                ratio: times(after / fresh),
                verdict: verdict(kept <= 50.0 && settle >= 60.0).to_owned(),
            }
        }
        None => Target::missing(
            kept_what,
            kept_goal,
            "not measured: run without `--settle`".to_owned(),
        ),
    };
    let by_streams = |a: &&&Value, b: &&&Value| {
        num(a, "streams")
            .unwrap_or(0.0)
            .total_cmp(&num(b, "streams").unwrap_or(0.0))
    };
    // The section also compares edges (WebSocket, gRPC L2 book) at the same stream counts;
    // the targets are about `StreamBbo` streams.
    let bbo = || rows(v, "runs").filter(|r| text(r, "label") == FANOUT_BBO);
    let fast: Vec<&Value> = bbo().filter(|r| num(r, "slow") == Some(0.0)).collect();
    let slow_row = bbo().find(|r| num(r, "slow").unwrap_or(0.0) > 0.0);
    let (Some(big), Some(small)) = (
        fast.iter().max_by(by_streams),
        fast.iter().min_by(by_streams),
    ) else {
        let none = || "not measured: no fan-out rows".to_owned();
        return [
            Target::missing(what, goal, none()),
            Target::missing(slow_what, slow_goal, none()),
            kept,
        ];
    };
    let p99 = num(big, "p99_ms").unwrap_or(f64::NAN);
    let streams = num(big, "streams").unwrap_or(0.0);
    let failures = num(big, "failures").unwrap_or(0.0);
    let wrong = num(big, "missing").unwrap_or(f64::NAN) + num(big, "extra").unwrap_or(f64::NAN);
    let small_p99 = num(small, "p99_ms").unwrap_or(f64::NAN);
    let held = Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{streams:.0} streams: p99 {p99:.3} ms, {:.0} frames/s of {:.0} required, {wrong:.0} missing or extra, {failures:.0} failed, {:.1} frames per write, {:.1} KiB server RSS per stream",
            num(big, "frames_per_s").unwrap_or(0.0),
            num(big, "required_per_s").unwrap_or(0.0),
            num(big, "frames_per_write").unwrap_or(f64::NAN),
            num(big, "rss_kib_per_stream").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "{:.0} streams: p99 {small_p99:.3} ms",
            num(small, "streams").unwrap_or(0.0)
        ),
        ratio: format!("{} p99", times(p99 / small_p99)),
        verdict: verdict(streams >= 10_000.0 && failures == 0.0 && wrong == 0.0 && p99 <= 100.0)
            .to_owned(),
    };
    let slow = match (slow_row, v.get("slow")) {
        (Some(row), Some(outcome)) => {
            let with = num(row, "p99_ms").unwrap_or(f64::NAN);
            let count = num(outcome, "streams").unwrap_or(0.0);
            let deadline = num(outcome, "deadline_exceeded").unwrap_or(0.0);
            let ended = num(outcome, "ended_after_s");
            Target {
                what: slow_what.to_owned(),
                goal: slow_goal.to_owned(),
                measured: format!(
                    "{count:.0} stalled: {deadline:.0} ended `DEADLINE_EXCEEDED`, all within {}; others' p99 {with:.3} ms; {:.1} KiB RSS per stalled full-depth L2 stream",
                    ended.map_or_else(|| "— (not all ended)".to_owned(), |s| format!("{s:.1} s")),
                    num(v, "stalled_kib_per_stream").unwrap_or(f64::NAN),
                ),
                reference: format!("without them: p99 {p99:.3} ms"),
                ratio: format!("{} p99", times(with / p99)),
                // "Unchanged within noise": this machine's runs swing 15–25%.
                verdict: verdict(ended.is_some() && deadline >= count && with <= p99 * 1.25)
                    .to_owned(),
            }
        }
        _ => Target::missing(slow_what, slow_goal, "not measured: no slow run".to_owned()),
    };
    [held, slow, kept]
}

pub(crate) fn memory_targets(run: &Run) -> [Target; 3] {
    let what_rss = "RSS with the full book";
    let what_cold = "Cold start to serving live";
    let what_behind = "Peak of a start with files behind the snapshot";
    let Some(v) = run.summary("memory") else {
        return [
            Target::missing(what_rss, "≤ 200 MB", run.missing("memory")),
            Target::missing(what_cold, "≤ 2 s", run.missing("memory")),
            Target::missing(what_behind, "≤ 200 MB", run.missing("memory")),
        ];
    };
    let behind = behind_target(v, what_behind);
    let full_scale = num(v, "full_scale");
    let Some(full) = rows(v, "scales").find(|r| num(r, "scale") == full_scale) else {
        return [
            Target::missing(
                what_rss,
                "≤ 200 MB",
                "not measured: no memory rows".to_owned(),
            ),
            Target::missing(
                what_cold,
                "≤ 2 s",
                "not measured: no memory rows".to_owned(),
            ),
            behind,
        ];
    };
    let book = format!(
        "{:.0} orders, {:.0} coins",
        num(full, "orders").unwrap_or(0.0),
        num(full, "coins").unwrap_or(0.0)
    );
    let rss = num(full, "rss_settled_mb").unwrap_or(f64::NAN);
    let engine_rss = num(full, "engine_rss_mb").unwrap_or(f64::NAN);
    let cold = num(full, "cold_start_s").unwrap_or(f64::NAN);
    let load = num(full, "engine_load_s").unwrap_or(f64::NAN);
    [
        Target {
            what: what_rss.to_owned(),
            goal: "≤ 200 MB".to_owned(),
            measured: format!(
                "{rss:.0} MB `VmRSS` settled, peak {:.0} MB (server process; {book})",
                num(full, "peak_mb").unwrap_or(f64::NAN)
            ),
            reference: format!("`Engine::from_snapshot` in a bare process: {engine_rss:.0} MB"),
            ratio: times(rss / engine_rss),
            verdict: verdict(rss <= 200.0).to_owned(),
        },
        Target {
            what: what_cold.to_owned(),
            goal: "≤ 2 s".to_owned(),
            measured: format!(
                "{cold:.2} s spawn → first `StreamBbo` frame ({book}, snapshot {:.0} MB)",
                num(full, "snapshot_mb").unwrap_or(f64::NAN)
            ),
            reference: format!("read + parse + `Engine::from_snapshot`: {load:.2} s"),
            ratio: times(cold / load),
            verdict: verdict(cold <= 2.0).to_owned(),
        },
        behind,
    ]
}

/// The worst peak of the catch-up starts, beside the snapshot start's.
fn behind_target(v: &Value, what: &str) -> Target {
    let full_scale = num(v, "full_scale");
    let snapshot_peak = rows(v, "scales")
        .find(|r| num(r, "scale") == full_scale)
        .and_then(|r| num(r, "peak_mb"))
        .unwrap_or(f64::NAN);
    let worst = rows(v, "behind").max_by(|a, b| {
        num(a, "peak_mb")
            .unwrap_or(0.0)
            .total_cmp(&num(b, "peak_mb").unwrap_or(0.0))
    });
    let Some(worst) = worst else {
        return Target::missing(
            what,
            "≤ 200 MB",
            "not measured: run without `--behind`".to_owned(),
        );
    };
    let peak = num(worst, "peak_mb").unwrap_or(f64::NAN);
    Target {
        what: what.to_owned(),
        goal: "≤ 200 MB".to_owned(),
        measured: format!(
            "{peak:.0} MB peak, {:.0} MB settled, {:.0} blocks ({:.0} min, {:.0} MB of files) behind",
            num(worst, "rss_settled_mb").unwrap_or(f64::NAN),
            num(worst, "blocks").unwrap_or(0.0),
            num(worst, "minutes").unwrap_or(0.0),
            num(worst, "node_mb").unwrap_or(0.0),
        ),
        reference: format!("the snapshot start's peak: {snapshot_peak:.0} MB"),
        ratio: times(peak / snapshot_peak),
        verdict: verdict(peak <= 200.0).to_owned(),
    }
}

pub(crate) fn raw_feed_target(run: &Run) -> Target {
    let (what, goal) = ("Raw feed replay, unfiltered", "≥ 1,000 MB/s");
    let Some(v) = run.summary("raw_feed") else {
        return Target::missing(what, goal, run.missing("raw_feed"));
    };
    let find = |feed: &str, layer: &str| {
        rows(v, "rows").find(|r| {
            text(r, "feed") == feed && text(r, "layer") == layer && text(r, "filter") == "none"
        })
    };
    let feed = "order_statuses";
    let (Some(grpc), Some(fs)) = (find(feed, "gRPC"), find(feed, "fs::read")) else {
        return Target::missing(what, goal, "not measured: raw feed rows missing".to_owned());
    };
    let g = num(grpc, "source_mb_s").unwrap_or(f64::NAN);
    let f = num(fs, "source_mb_s").unwrap_or(f64::NAN);
    let diffs = find("raw_book_diffs", "gRPC").and_then(|r| num(r, "source_mb_s"));
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{g:.0} MB/s over gRPC (`{feed}`, {:.0} MB){}",
            num(grpc, "source_mb").unwrap_or(0.0),
            diffs.map_or_else(String::new, |d| format!("; `raw_book_diffs` {d:.0} MB/s"))
        ),
        reference: format!("`fs::read` of the same files: {f:.0} MB/s"),
        ratio: times(g / f),
        verdict: verdict(g >= 1_000.0).to_owned(),
    }
}

pub(crate) fn checkpoint_target(run: &Run) -> Target {
    let (what, goal) = ("Load the full book from an engine checkpoint", "≤ 200 ms");
    let Some(v) = run.summary("checkpoint") else {
        return Target::missing(what, goal, run.missing("checkpoint"));
    };
    let load = num(v, "checkpoint_load_ms").unwrap_or(f64::NAN);
    let json = num(v, "json_load_ms").unwrap_or(f64::NAN);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{load:.0} ms ({:.0} orders, {:.0} coins, {:.0} MB file); taking one cost the engine thread {:.0} ms",
            num(v, "orders").unwrap_or(f64::NAN),
            num(v, "coins").unwrap_or(f64::NAN),
            num(v, "checkpoint_mb").unwrap_or(f64::NAN),
            num(v, "take_ms").unwrap_or(f64::NAN),
        ),
        reference: format!(
            "the node's JSON snapshot of the same book ({:.0} MB): read + parse + `Market::from_snapshot` {json:.0} ms",
            num(v, "json_mb").unwrap_or(f64::NAN)
        ),
        ratio: times(load / json),
        verdict: verdict(load <= 200.0).to_owned(),
    }
}

pub(crate) fn candle_history_targets(run: &Run) -> Vec<Target> {
    let what = [
        "Candle import, per core",
        "Candle store size",
        "Memory, long candle history",
        "Candle lookups, long history",
        "Info `candleSnapshot`, 5,000 `1m`",
    ];
    let goal = [
        "≥ 1,000 MB/s",
        "≤ 16 bytes per candle",
        "RSS within 20 MB of a 1-day store",
        "≥ 50,000 req/s, p99 ≤ 2 ms",
        "≤ 10 ms",
    ];
    let Some(v) = run.summary("candle_history") else {
        return (0..what.len())
            .map(|i| Target::missing(what[i], goal[i], run.missing("candle_history")))
            .collect();
    };
    let n = |k: &str| num(v, k).unwrap_or(f64::NAN);
    vec![
        Target {
            what: what[0].to_owned(),
            goal: goal[0].to_owned(),
            measured: format!(
                "{:.0} MB/s of decompressed fills ({:.0} MB over {:.0} h of simulated mainnet fills, LZ4)",
                n("import_mb_per_cpu_s"),
                n("decompressed_mb"),
                n("hours")
            ),
            reference: format!("`lz4 -dc` alone: {:.0} MB/s", n("lz4_mb_per_cpu_s")),
            ratio: times(n("import_mb_per_cpu_s") / n("lz4_mb_per_cpu_s")),
            verdict: verdict(n("import_mb_per_cpu_s") >= 1_000.0).to_owned(),
        },
        Target {
            what: what[1].to_owned(),
            goal: goal[1].to_owned(),
            measured: format!(
                "{:.2} bytes per candle over {:.0} days ({:.0} candles); {:.1} GB extrapolated since 2025-07-27",
                n("bytes_per_candle"),
                n("days"),
                n("candles"),
                n("extrapolated_gb")
            ),
            reference: "the first store: 128 bytes on disk + 16 in memory".to_owned(),
            ratio: times(n("bytes_per_candle") / 144.0),
            verdict: verdict(n("bytes_per_candle") <= 16.0).to_owned(),
        },
        Target {
            what: what[2].to_owned(),
            goal: goal[2].to_owned(),
            measured: format!(
                "{:.1} MiB RSS over {:.0} days",
                n("long_rss_mib"),
                n("days")
            ),
            reference: format!("over the 1-day store: {:.1} MiB", n("day_rss_mib")),
            ratio: format!("{:+.1} MiB", n("long_rss_mib") - n("day_rss_mib")),
            verdict: verdict((n("long_rss_mib") - n("day_rss_mib")).abs() <= 20.0).to_owned(),
        },
        Target {
            what: what[3].to_owned(),
            goal: goal[3].to_owned(),
            measured: format!(
                "{:.0} req/s, p99 {:.2} ms (random buckets over {:.0} days)",
                n("long_rps"),
                n("long_p99_ms"),
                n("days")
            ),
            reference: format!("the 1-day store: {:.0} req/s", n("day_rps")),
            ratio: times(n("long_rps") / n("day_rps")),
            verdict: verdict(n("long_rps") >= 50_000.0 && n("long_p99_ms") <= 2.0).to_owned(),
        },
        Target {
            what: what[4].to_owned(),
            goal: goal[4].to_owned(),
            measured: format!(
                "p50 {:.2} ms, p90 {:.2} ms",
                n("snapshot_p50_ms"),
                n("snapshot_p90_ms")
            ),
            reference: "–".to_owned(),
            ratio: "–".to_owned(),
            verdict: verdict(n("snapshot_p50_ms") <= 10.0).to_owned(),
        },
    ]
}

pub(crate) fn candles_target(run: &Run) -> Target {
    let (what, goal) = ("HTTP candle lookups", "≥ 50,000 req/s");
    let Some(v) = run.summary("candles_http") else {
        return Target::missing(what, goal, run.missing("candles_http"));
    };
    let rps = num(v, "rps").unwrap_or(f64::NAN);
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{rps:.0} req/s, p99 {:.3} ms ({:.0} connections from a separate process)",
            num(v, "p99_ms").unwrap_or(f64::NAN),
            num(v, "connections").unwrap_or(f64::NAN)
        ),
        reference: num(v, "reference_rps").map_or_else(
            || "–".to_owned(),
            |r| format!("{r:.0} lookups/s: {}", text(v, "reference")),
        ),
        ratio: num(v, "reference_rps").map_or_else(|| "–".to_owned(), |r| times(rps / r)),
        verdict: verdict(rps >= 50_000.0).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Run;
    use serde_json::json;

    #[test]
    fn ingest_verdict_follows_the_fold_rate() {
        let v = json!({"scale": 1.0, "blocks": 10, "rows": [
            {"name": "fold", "mb_s": 1200.0, "mb": 5.0, "events_s": 1e6},
            {"name": "memchr scan", "mb_s": 6000.0},
            {"name": "serde_json::Value", "mb_s": 100.0},
        ]});
        let t = ingest_target(&Run::with("replay@1", v));
        assert_eq!(t.verdict, "**met**");
        assert!(t.ratio.starts_with("12.00×"), "{}", t.ratio);
        let missing = ingest_target(&Run::with("other", json!({})));
        assert_eq!(missing.verdict, "not measured");
        assert!(
            missing.measured.contains("`replay` was not run"),
            "{}",
            missing.measured
        );
    }

    #[test]
    fn latency_targets_take_the_worst_market_view_of_the_default_server() {
        let v = json!({"rows": [
            {"poll_ms": null, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 0.3, "p99_ms": 1.0},
            {"poll_ms": null, "rate": 1, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 0.4, "p99_ms": 3.0},
            {"poll_ms": null, "rate": 1, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 0.2, "p99_ms": 1.5},
            {"poll_ms": null, "rate": 10, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 2.0, "p99_ms": 8.0},
            {"poll_ms": null, "rate": 10, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 1.0, "p99_ms": 4.0},
            {"poll_ms": 5, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 9.0, "p99_ms": 9.0},
            {"poll_ms": null, "rate": 10, "stream": "bbo", "reference": false, "frames": 0, "p50_ms": 99.0, "p99_ms": 99.0},
        ], "machine_floor": {"p50_ms": 0.17, "p99_ms": 0.4}, "grpc_floor": {"p50_ms": 0.31, "p99_ms": 0.9}});
        let t = latency_targets(&Run::with("latency", v));
        assert_eq!(t.len(), 3);
        assert!(t[0].measured.starts_with("0.400 ms"), "{}", t[0].measured);
        assert_eq!(t[0].verdict, "**met**");
        assert_eq!(t[0].ratio, "2.00×");
        assert!(t[1].measured.contains("worst: l4"), "{}", t[1].measured);
        assert!(t[1].reference.starts_with("1.500 ms"), "{}", t[1].reference);
        for (at, floor) in [
            (0, "machine floor 0.170 ms"),
            (1, "machine floor 0.400 ms"),
            (0, "gRPC floor 0.310 ms"),
            (1, "gRPC floor 0.900 ms"),
        ] {
            assert!(t[at].reference.contains(floor), "{}", t[at].reference);
        }
        assert_eq!(t[1].verdict, "**not met**");
        assert!(t[2].measured.starts_with("8.000 ms"), "{}", t[2].measured);
        assert_eq!(t[2].ratio, "2.00×");
        assert_eq!(t[2].verdict, "**met**");
        let missing = latency_targets(&Run::with("other", json!({})));
        assert!(missing.iter().all(|t| t.verdict == "not measured"));
    }

    #[test]
    fn replay_cli_and_engine_cpu_targets_read_their_summaries() {
        let v = json!({"mb": 791.0, "blocks": 3000, "reference": {"mb_s": 2000.0}, "rows": [
            {"view": "bbo", "mb_s": 500.0, "wall_s": 1.6, "read_mb": 791.0},
            {"view": "trades", "mb_s": 1500.0, "wall_s": 0.5, "read_mb": 1.0},
        ]});
        let t = replay_cli_targets(&Run::with("replay_cli", v));
        assert_eq!(t[0].verdict, "**not met**");
        assert_eq!(t[0].ratio, "0.25×");
        assert_eq!(t[1].verdict, "**met**");
        let v = json!({"ratio": 1.2, "live_us_per_block": 360.0, "engine_us_per_block": 300.0,
            "market_us_per_block": 330.0, "blocks": 296, "idle_pct": 1.5, "idle_seconds": 10.0,
            "engine_core_pct": 0.5});
        let [live, idle] = engine_cpu_targets(&Run::with("engine_cpu", v));
        assert_eq!(live.verdict, "**met**");
        assert_eq!(live.ratio, "1.20×");
        assert_eq!(idle.verdict, "**not met**");
    }

    #[test]
    fn fanout_targets_read_the_stream_bbo_rows_only() {
        let row = |label: &str, streams: u64, slow: u64, p99: f64| {
            json!({"label": label, "streams": streams, "slow": slow, "p99_ms": p99,
                   "frames_per_s": 1.0, "required_per_s": 1.0, "missing": 0, "extra": 0,
                   "failures": 0, "frames_per_write": 1.0, "rss_kib_per_stream": 1.0})
        };
        let v = json!({"runs": [
            row(FANOUT_BBO, 100, 0, 4.0),
            row(FANOUT_BBO, 10_000, 0, 48.0),
            row(FANOUT_BBO, 10_000, 100, 44.0),
            // The edge comparison at the same count, listed after: not the target's streams.
            row("gRPC StreamL2Book", 10_000, 0, 296.0),
        ], "slow": {"streams": 100, "deadline_exceeded": 100, "ended_after_s": 17.0},
           "after_bursts": {"settle_s": 60.0, "before_mb": 170.0, "after_mb": 240.0,
                            "fresh_mb": 180.0, "kept_mb": 60.0}});
        let [held, slow, kept] = fanout_targets(&Run::with("fanout", v));
        assert!(
            held.measured.starts_with("10000 streams: p99 48.000 ms"),
            "{}",
            held.measured
        );
        assert_eq!(held.reference, "100 streams: p99 4.000 ms");
        assert_eq!(held.verdict, "**met**");
        assert!(
            slow.measured.contains("others' p99 44.000 ms"),
            "{}",
            slow.measured
        );
        assert_eq!(slow.reference, "without them: p99 48.000 ms");
        assert_eq!(
            kept.measured,
            "240 MB 60 s after the last client (170 MB before the first burst): 60 MB kept"
        );
        assert_eq!(kept.verdict, "**not met**");
    }

    #[test]
    fn memory_targets_use_the_full_scale_row() {
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 0.5, "orders": 2e5, "coins": 150, "rss_settled_mb": 90.0, "engine_rss_mb": 60.0,
             "cold_start_s": 0.5, "engine_load_s": 0.4, "peak_mb": 100.0, "snapshot_mb": 80.0},
            {"scale": 1.0, "orders": 4.4e5, "coins": 200, "rss_settled_mb": 180.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0, "peak_mb": 400.0, "snapshot_mb": 160.0},
        ]});
        let [rss, cold, behind] = memory_targets(&Run::with("memory", v));
        assert_eq!(behind.measured, "not measured: run without `--behind`");
        assert_eq!(rss.verdict, "**met**");
        assert_eq!(rss.ratio, "1.50×");
        assert_eq!(cold.verdict, "**not met**");
        assert!(cold.measured.contains("440000 orders"), "{}", cold.measured);
        let v = json!({"full_scale": 1.0, "scales": [{"scale": 1.0, "peak_mb": 190.0}],
        "behind": [
            {"blocks": 26640, "minutes": 30.0, "node_mb": 6000.0, "peak_mb": 290.0,
             "rss_settled_mb": 210.0},
            {"blocks": 100, "minutes": 0.1, "node_mb": 20.0, "peak_mb": 191.0,
             "rss_settled_mb": 170.0},
        ]});
        let [_, _, behind] = memory_targets(&Run::with("memory", v));
        assert!(
            behind.measured.starts_with("290 MB peak"),
            "{}",
            behind.measured
        );
        assert_eq!(behind.verdict, "**not met**");
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(times(1.234), "1.23×");
        assert_eq!(times(0.0071), "0.0071×");
        assert_eq!(times(0.05), "0.050×");
        assert_eq!(times(f64::NAN), "NaN×");
    }
}
