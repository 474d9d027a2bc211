//! The report's verdicts: each target read from its harness's typed summary,
//! measured against its goal, with the lookups in the summaries and the
//! numbers' formatting the other parts share.

use benches::summary::FANOUT_BBO;
use std::fmt::Write as _;

use super::{REPLAY_SCALES, Run};
use crate::{fanout, latency, memory, replay};

/// The replay row `name` of a replay summary.
pub(crate) fn replay_row<'a>(v: &'a replay::Summary, name: &str) -> Option<&'a replay::SummaryRow> {
    v.rows.iter().find(|r| r.name == name)
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

/// The verdict column for a goal `ok` met or not.
pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

/// Seconds as `42 s`, or `1 min 05 s` from a minute on.
pub(crate) fn secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{} min {:02.0} s", (s / 60.0).floor(), s % 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// One line of the summary table.
pub(crate) struct Target {
    /// What is measured.
    pub(crate) what: String,
    /// The goal.
    pub(crate) goal: String,
    /// What this run measured, or why it did not.
    pub(crate) measured: String,
    /// The reference measured in the same run, on the same data.
    pub(crate) reference: String,
    /// Measured over reference.
    pub(crate) ratio: String,
    /// [`verdict`], or `not measured`.
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

/// The ingest target, from the `replay` run at the largest scale.
pub(crate) fn ingest_target(run: &Run) -> Target {
    let (what, goal) = ("Ingest + fold, per core", "≥ 1,000 MB/s");
    let scale = REPLAY_SCALES[REPLAY_SCALES.len() - 1];
    let Some(v) = run.summaries.replay_at(scale) else {
        return Target::missing(what, goal, run.missing(&format!("replay@{scale}")));
    };
    let (Some(fold), Some(scan), Some(value)) = (
        replay_row(v, "fold"),
        replay_row(v, "memchr scan"),
        replay_row(v, "serde_json::Value"),
    ) else {
        return Target::missing(what, goal, "not measured: replay rows missing".to_owned());
    };
    let rate = |r: &replay::SummaryRow| r.mb_s;
    let blocks = v.blocks as f64;
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{:.0} MB/s, {:.2} M events/s (fold of {:.0} MB: {blocks:.0} blocks at scale {})",
            rate(fold),
            fold.events_s / 1e6,
            fold.mb,
            v.scale,
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
pub(crate) fn default_config(r: &latency::SummaryRow) -> bool {
    r.poll_ms.is_none()
}

/// The latency percentile a target is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Percentile {
    /// The median.
    P50,
    /// The 99th percentile.
    P99,
}

impl Percentile {
    /// Its name in the text: `p50`, `p99`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::P50 => "p50",
            Self::P99 => "p99",
        }
    }

    /// Its figure, of a row or floor whose p50 and p99 are given.
    pub(crate) fn of(self, p50_ms: f64, p99_ms: f64) -> f64 {
        match self {
            Self::P50 => p50_ms,
            Self::P99 => p99_ms,
        }
    }
}

/// Whether `r` has frames and was measured at `rate`, on the server with default settings.
fn latency_at(r: &latency::SummaryRow, rate: f64) -> bool {
    default_config(r) && r.frames > 0 && (r.rate - rate).abs() < 1e-9
}

/// The worst `percentile` over the market views of the default server at `rate`, ms, with the
/// view it belongs to.
pub(crate) fn latency_worst(
    v: &latency::Summary,
    rate: f64,
    percentile: Percentile,
) -> Option<(f64, &str)> {
    v.rows
        .iter()
        .filter(|r| latency_at(r, rate) && !r.reference)
        .map(|r| (percentile.of(r.p50_ms, r.p99_ms), r.stream.as_str()))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// `percentile` of the raw feed reference of the default server at `rate`, ms.
pub(crate) fn latency_reference(
    v: &latency::Summary,
    rate: f64,
    percentile: Percentile,
) -> Option<f64> {
    v.rows
        .iter()
        .find(|r| latency_at(r, rate) && r.reference)
        .map(|r| percentile.of(r.p50_ms, r.p99_ms))
}

/// The latency targets: (label, goal, rate, percentile, target in ms).
pub(crate) const LATENCY_GOALS: [(&str, &str, f64, Percentile, f64); 3] = [
    (
        "Append → frame p50 at 1× (worst market view)",
        "≤ 500 µs",
        1.0,
        Percentile::P50,
        0.5,
    ),
    (
        "Append → frame p99 at 1× (worst market view)",
        "≤ 2 ms",
        1.0,
        Percentile::P99,
        2.0,
    ),
    (
        "Append → frame p99 at 10× (worst market view)",
        "≤ 10 ms",
        10.0,
        Percentile::P99,
        10.0,
    ),
];

/// The latency targets ([`LATENCY_GOALS`]), from the `latency` run.
pub(crate) fn latency_targets(run: &Run) -> Vec<Target> {
    LATENCY_GOALS
        .iter()
        .map(|&(what, goal, rate, percentile, target_ms)| {
            let Some(v) = &run.summaries.latency else {
                return Target::missing(what, goal, run.missing("latency"));
            };
            let Some((value, stream)) = latency_worst(v, rate, percentile) else {
                return Target::missing(
                    what,
                    goal,
                    format!("not measured: no frames at {rate}× with default settings"),
                );
            };
            let quantile = percentile.name();
            let (mut reference, ratio) = latency_reference(v, rate, percentile).map_or_else(
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
            for (floor, name, what) in [
                (
                    &v.machine_floor,
                    "machine floor",
                    "append → inotify → read → loopback TCP, no l1gate code, at the 1× interval",
                ),
                (
                    &v.grpc_floor,
                    "gRPC floor",
                    "the same through a tonic stream between two tokio runtimes, no l1gate code",
                ),
            ] {
                let floor = percentile.of(floor.p50_ms, floor.p99_ms);
                let _ = write!(reference, "; {name} {floor:.3} ms ({what})");
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

/// The one-coin price views' names in the latency summary, and as the summary table says them.
const BOOK_VIEWS: [(&str, &str); 2] = [
    (latency::PRICE_VIEWS[0], "BBO"),
    (latency::PRICE_VIEWS[1], "L2 book"),
];

/// The price views' own targets from the `latency` run: BBO and L2 book at 1× quiet (p50 and
/// p99), and beside each other clients' load the run had, within 1.2× of the quiet window.
pub(crate) fn latency_view_targets(run: &Run) -> Vec<Target> {
    let quiet = (
        "Append → frame at 1×, BBO and L2 book",
        "p50 ≤ 500 µs, p99 ≤ 2 ms",
    );
    let beside = (
        "BBO and L2 book at 1× beside other clients' load",
        "p50 and p99 within 1.2× of quiet",
    );
    let Some(v) = &run.summaries.latency else {
        let why = run.missing("latency");
        return vec![
            Target::missing(quiet.0, quiet.1, why.clone()),
            Target::missing(beside.0, beside.1, why),
        ];
    };
    let views: Vec<(&str, &latency::SummaryRow)> = BOOK_VIEWS
        .iter()
        .filter_map(|&(stream, name)| {
            let row = v
                .rows
                .iter()
                .find(|r| latency_at(r, 1.0) && r.stream.starts_with(stream))?;
            Some((name, row))
        })
        .collect();
    let mut targets = vec![if views.is_empty() {
        Target::missing(
            quiet.0,
            quiet.1,
            "not measured: no BBO or L2 book frames at 1× with default settings".to_owned(),
        )
    } else {
        let worst = |q: Percentile| {
            views
                .iter()
                .map(|(_, r)| q.of(r.p50_ms, r.p99_ms))
                .fold(0.0, f64::max)
        };
        let (p50, p99) = (worst(Percentile::P50), worst(Percentile::P99));
        let raw = latency_reference(v, 1.0, Percentile::P50);
        Target {
            what: quiet.0.to_owned(),
            goal: quiet.1.to_owned(),
            measured: views
                .iter()
                .map(|(name, r)| format!("{name} {:.3} / {:.3} ms", r.p50_ms, r.p99_ms))
                .collect::<Vec<_>>()
                .join("; ")
                + " (p50 / p99, server with default settings)",
            reference: raw.map_or_else(
                || "–".to_owned(),
                |raw| {
                    format!(
                        "{raw:.3} ms: raw feed `StreamFills` live tail, unfiltered (p50, no fold)"
                    )
                },
            ),
            ratio: raw.map_or_else(|| "–".to_owned(), |raw| times(p50 / raw)),
            verdict: verdict(p50 <= latency::TARGET_P50_1X_MS && p99 <= latency::TARGET_P99_1X_MS)
                .to_owned(),
        }
    }];
    let at_1x: Vec<&latency::SummaryBeside> = v
        .beside
        .iter()
        .filter(|b| (b.rate - 1.0).abs() < 1e-9)
        .collect();
    let mut loads: Vec<&str> = Vec::new();
    for b in &at_1x {
        if !loads.contains(&b.load.as_str()) {
            loads.push(&b.load);
        }
    }
    if loads.is_empty() {
        targets.push(Target::missing(
            beside.0,
            beside.1,
            "not measured: the latency run had no load beside its 1× window".to_owned(),
        ));
    }
    for load in loads {
        let of = |stream: &str| {
            at_1x
                .iter()
                .find(|b| b.load == load && b.stream == stream)
                .map(|b| (b.p50_ratio, b.p99_ratio))
        };
        let views: Vec<(&str, (f64, f64))> = BOOK_VIEWS
            .iter()
            .filter_map(|&(stream, name)| Some((name, of(stream)?)))
            .collect();
        let what = format!("BBO and L2 book at 1× beside `{load}`");
        if views.is_empty() {
            targets.push(Target::missing(
                &what,
                beside.1,
                "not measured: no BBO or L2 book frames in that window".to_owned(),
            ));
            continue;
        }
        let worst = views
            .iter()
            .map(|(_, (p50, p99))| p50.max(*p99))
            .fold(0.0, f64::max);
        let ratios = |(p50, p99): (f64, f64)| format!("{} / {}", times(p50), times(p99));
        targets.push(Target {
            what,
            goal: beside.1.to_owned(),
            measured: views
                .iter()
                .map(|(name, r)| format!("{name} {}", ratios(*r)))
                .collect::<Vec<_>>()
                .join("; ")
                + " (p50 / p99 over the quiet window)",
            reference: of(latency::RAW_VIEW).map_or_else(
                || "–".to_owned(),
                |r| format!("raw feed, which no engine work delays: {}", ratios(r)),
            ),
            ratio: times(worst),
            verdict: verdict(worst <= latency::TARGET_BESIDE_RATIO).to_owned(),
        });
    }
    targets
}

/// The `l1gate replay` targets, one per view, from the `replay_cli` run.
pub(crate) fn replay_cli_targets(run: &Run) -> Vec<Target> {
    ["bbo", "trades"]
        .iter()
        .map(|view| {
            let what = format!("`l1gate replay --view {view} --coins BTC`, end to end");
            let goal = "≥ 1,000 MB/s";
            let Some(v) = &run.summaries.replay_cli else {
                return Target::missing(&what, goal, run.missing("replay_cli"));
            };
            let Some(row) = v.rows.iter().find(|r| r.view == *view) else {
                return Target::missing(&what, goal, format!("not measured: no `{view}` row"));
            };
            let rate = row.mb_s;
            let reference = v.reference.mb_s;
            Target {
                what,
                goal: goal.to_owned(),
                measured: format!(
                    "{rate:.0} MB/s of node output ({:.0} MB, {:.0} blocks, {:.2} s from spawn to exit; it read {})",
                    v.mb,
                    v.blocks as f64,
                    row.wall_s,
                    row.read_mb.map_or_else(|| "? MB".to_owned(), |m| format!("{m:.0} MB")),
                ),
                reference: format!("`cat FILES \\| wc -l` of the same files: {reference:.0} MB/s"),
                ratio: times(rate / reference),
                verdict: verdict(rate >= 1_000.0).to_owned(),
            }
        })
        .collect()
}

/// The engine thread's live CPU per block and the idle server's CPU, from the `engine_cpu` run.
pub(crate) fn engine_cpu_targets(run: &Run) -> [Target; 2] {
    let (what_live, goal_live) = (
        "Engine thread CPU per block, live at 1×",
        "≤ 1.3× `Engine::apply` folding at the same pace",
    );
    let (what_idle, goal_idle) = ("Idle server CPU", "< 1% of one core");
    let Some(v) = &run.summaries.engine_cpu else {
        return [
            Target::missing(what_live, goal_live, run.missing("engine_cpu")),
            Target::missing(what_idle, goal_idle, run.missing("engine_cpu")),
        ];
    };
    let ratio = v.ratio;
    let idle = v.idle_pct;
    [
        Target {
            what: what_live.to_owned(),
            goal: goal_live.to_owned(),
            measured: format!(
                "{:.0} µs per block ({:.0} blocks, no stream open); `Market::apply` with `Needs::ALL` alone: {:.0} µs",
                v.live_us_per_block,
                v.blocks as f64,
                v.market_us_per_block,
            ),
            reference: format!(
                "`Engine::apply` on the same blocks{}; back to back with warm caches {:.0} µs (live {})",
                v.engine_paced_us_per_block.map_or_else(String::new, |paced| format!(
                    " paced at 1× like the live thread (caches as cold as its): {paced:.0} µs per block"
                )),
                v.engine_us_per_block,
                times(v.ratio_back_to_back),
            ),
            ratio: times(ratio),
            verdict: verdict(ratio <= 1.3).to_owned(),
        },
        Target {
            what: what_idle.to_owned(),
            goal: goal_idle.to_owned(),
            measured: format!(
                "{idle:.2}% of one core (whole process, {:.0} s with no append)",
                v.idle_seconds
            ),
            reference: format!(
                "engine thread at 1×: {:.2}% of one core",
                v.engine_core_pct
            ),
            ratio: "–".to_owned(),
            verdict: verdict(idle < 1.0).to_owned(),
        },
    ]
}

/// The fan-out targets (the largest `StreamBbo` count, with stalled readers, memory after the
/// bursts), from the `fanout` run.
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
    let Some(v) = &run.summaries.fanout else {
        return [
            Target::missing(what, goal, run.missing("fanout")),
            Target::missing(slow_what, slow_goal, run.missing("fanout")),
            Target::missing(kept_what, kept_goal, run.missing("fanout")),
        ];
    };
    let kept = match &v.after_bursts {
        Some(a) => {
            let (after, fresh) = (a.after_mb, a.fresh_mb);
            let kept = a.kept_mb;
            let settle = a.settle_s;
            Target {
                what: kept_what.to_owned(),
                goal: kept_goal.to_owned(),
                measured: format!(
                    "{after:.0} MB {settle:.0} s after the last client ({:.0} MB before the first burst): {kept:.0} MB kept",
                    a.before_mb,
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
    let by_streams = |a: &&&fanout::SummaryRun, b: &&&fanout::SummaryRun| a.streams.cmp(&b.streams);
    // The section also compares edges (WebSocket, gRPC L2 book) at the same stream counts;
    // the targets are about `StreamBbo` streams.
    let bbo = || v.runs.iter().filter(|r| r.label == FANOUT_BBO);
    let fast: Vec<&fanout::SummaryRun> = bbo().filter(|r| r.slow == 0).collect();
    let slow_row = bbo().find(|r| r.slow > 0);
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
    let p99 = big.p99_ms;
    let streams = big.streams as f64;
    let failures = big.failures as f64;
    let wrong = big.missing as f64 + big.extra as f64;
    let small_p99 = small.p99_ms;
    let held = Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{streams:.0} streams: p99 {p99:.3} ms, {:.0} frames/s of {:.0} required, {wrong:.0} missing or extra, {failures:.0} failed, {:.1} frames per write, {:.1} KiB server RSS per stream",
            big.frames_per_s, big.required_per_s, big.frames_per_write, big.rss_kib_per_stream,
        ),
        reference: format!("{:.0} streams: p99 {small_p99:.3} ms", small.streams as f64),
        ratio: format!("{} p99", times(p99 / small_p99)),
        verdict: verdict(streams >= 10_000.0 && failures == 0.0 && wrong == 0.0 && p99 <= 100.0)
            .to_owned(),
    };
    let slow = match (slow_row, &v.slow) {
        (Some(row), Some(outcome)) => {
            let with = row.p99_ms;
            let count = outcome.streams as f64;
            let deadline = outcome.deadline_exceeded as f64;
            let ended = outcome.ended_after_s;
            Target {
                what: slow_what.to_owned(),
                goal: slow_goal.to_owned(),
                measured: format!(
                    "{count:.0} stalled: {deadline:.0} ended `DEADLINE_EXCEEDED`, all within {}; others' p99 {with:.3} ms; {:.1} KiB RSS per stalled full-depth L2 stream",
                    ended.map_or_else(|| "— (not all ended)".to_owned(), |s| format!("{s:.1} s")),
                    v.stalled_kib_per_stream.unwrap_or(f64::NAN),
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

/// The scale row of the full book of a memory summary.
pub(crate) fn memory_full(v: &memory::Summary) -> Option<&memory::SummaryScale> {
    v.scales.iter().find(|r| Some(r.scale) == v.full_scale)
}

/// The memory targets (RSS and cold start with the full book, a start with files behind),
/// from the `memory` run.
pub(crate) fn memory_targets(run: &Run) -> [Target; 3] {
    let what_rss = "RSS with the full book";
    let what_cold = "Cold start to serving live";
    let what_behind = "Peak of a start with files behind the snapshot";
    let Some(v) = &run.summaries.memory else {
        return [
            Target::missing(what_rss, "≤ 200 MB", run.missing("memory")),
            Target::missing(what_cold, "≤ 2 s", run.missing("memory")),
            Target::missing(what_behind, "≤ 200 MB", run.missing("memory")),
        ];
    };
    let behind = behind_target(v, what_behind);
    let Some(full) = memory_full(v) else {
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
        full.orders as f64, full.coins as f64
    );
    let rss = full.rss_settled_mb;
    let engine_rss = full.engine_rss_mb;
    let cold = full.cold_start_s;
    let load = full.engine_load_s;
    [
        Target {
            what: what_rss.to_owned(),
            goal: "≤ 200 MB".to_owned(),
            measured: format!(
                "{rss:.0} MB `VmRSS` settled, peak {:.0} MB (server process; {book})",
                full.peak_mb
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
                full.snapshot_mb
            ),
            reference: format!("read + parse + `Engine::from_snapshot`: {load:.2} s"),
            ratio: times(cold / load),
            verdict: verdict(cold <= 2.0).to_owned(),
        },
        behind,
    ]
}

/// The worst peak of the catch-up starts, beside the snapshot start's.
fn behind_target(v: &memory::Summary, what: &str) -> Target {
    let snapshot_peak = memory_full(v).map_or(f64::NAN, |r| r.peak_mb);
    let worst = v
        .behind
        .iter()
        .max_by(|a, b| a.peak_mb.total_cmp(&b.peak_mb));
    let Some(worst) = worst else {
        return Target::missing(
            what,
            "≤ 200 MB",
            "not measured: run without `--behind`".to_owned(),
        );
    };
    let peak = worst.peak_mb;
    let stored = worst.zstd_mb.map_or_else(String::new, |zstd| {
        format!(", {zstd:.0} MB compressed with zstd")
    });
    let others = v
        .behind
        .iter()
        .filter(|b| !std::ptr::eq(*b, worst))
        .map(|b| format!("{:.0} min: {:.0} MB", b.minutes, b.peak_mb))
        .collect::<Vec<_>>();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!("; {}", others.join(", "))
    };
    Target {
        what: what.to_owned(),
        goal: "≤ 200 MB".to_owned(),
        measured: format!(
            "{peak:.0} MB peak, {:.0} MB settled, {:.0} blocks ({:.0} min, {:.0} MB of files{stored}) behind{others}",
            worst.rss_settled_mb, worst.blocks as f64, worst.minutes, worst.node_mb,
        ),
        reference: format!("the snapshot start's peak: {snapshot_peak:.0} MB"),
        ratio: times(peak / snapshot_peak),
        verdict: verdict(peak <= 200.0).to_owned(),
    }
}

/// The unfiltered raw feed over gRPC, from the `raw_feed` run.
pub(crate) fn raw_feed_target(run: &Run) -> Target {
    let (what, goal) = ("Raw feed replay, unfiltered", "≥ 1,000 MB/s");
    let Some(v) = &run.summaries.raw_feed else {
        return Target::missing(what, goal, run.missing("raw_feed"));
    };
    let find = |feed: &str, layer: &str| {
        v.rows
            .iter()
            .find(|r| r.feed == feed && r.layer == layer && r.filter == "none")
    };
    let feed = "order_statuses";
    let (Some(grpc), Some(fs)) = (find(feed, "gRPC"), find(feed, "fs::read")) else {
        return Target::missing(what, goal, "not measured: raw feed rows missing".to_owned());
    };
    let g = grpc.source_mb_s;
    let f = fs.source_mb_s;
    // A rate written as `null` (not finite) is left out, as it always was.
    let diffs = find("raw_book_diffs", "gRPC")
        .map(|r| r.source_mb_s)
        .filter(|d| !d.is_nan());
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{g:.0} MB/s over gRPC (`{feed}`, {:.0} MB){}",
            grpc.source_mb,
            diffs.map_or_else(String::new, |d| format!("; `raw_book_diffs` {d:.0} MB/s"))
        ),
        reference: format!("`fs::read` of the same files: {f:.0} MB/s"),
        ratio: times(g / f),
        verdict: verdict(g >= 1_000.0).to_owned(),
    }
}

/// Loading the full book from a checkpoint, from the `checkpoint` run.
pub(crate) fn checkpoint_target(run: &Run) -> Target {
    let (what, goal) = ("Load the full book from an engine checkpoint", "≤ 200 ms");
    let Some(v) = &run.summaries.checkpoint else {
        return Target::missing(what, goal, run.missing("checkpoint"));
    };
    let load = v.checkpoint_load_ms;
    let json = v.json_load_ms;
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{load:.0} ms ({:.0} orders, {:.0} coins, {:.0} MB file); taking one cost the engine thread {:.0} ms",
            v.orders as f64, v.coins as f64, v.checkpoint_mb, v.take_ms,
        ),
        reference: format!(
            "the node's JSON snapshot of the same book ({:.0} MB): read + parse + `Market::from_snapshot` {json:.0} ms",
            v.json_mb
        ),
        ratio: times(load / json),
        verdict: verdict(load <= 200.0).to_owned(),
    }
}

/// The candle history targets (import, store size, memory, lookups, `candleSnapshot`), from
/// the `candle_history` run.
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
    let Some(v) = &run.summaries.candle_history else {
        return (0..what.len())
            .map(|i| Target::missing(what[i], goal[i], run.missing("candle_history")))
            .collect();
    };
    vec![
        Target {
            what: what[0].to_owned(),
            goal: goal[0].to_owned(),
            measured: format!(
                "{:.0} MB/s of decompressed fills ({:.0} MB over {:.0} h of simulated mainnet fills, LZ4)",
                v.import_mb_per_cpu_s, v.decompressed_mb, v.hours as f64
            ),
            reference: format!("`lz4 -dc` alone: {:.0} MB/s", v.lz4_mb_per_cpu_s),
            ratio: times(v.import_mb_per_cpu_s / v.lz4_mb_per_cpu_s),
            verdict: verdict(v.import_mb_per_cpu_s >= 1_000.0).to_owned(),
        },
        Target {
            what: what[1].to_owned(),
            goal: goal[1].to_owned(),
            measured: format!(
                "{:.2} bytes per candle over {:.0} days ({:.0} candles); {:.1} GB extrapolated since 2025-07-27",
                v.bytes_per_candle, v.days as f64, v.candles as f64, v.extrapolated_gb
            ),
            reference: "the first store: 128 bytes on disk + 16 in memory".to_owned(),
            ratio: times(v.bytes_per_candle / 144.0),
            verdict: verdict(v.bytes_per_candle <= 16.0).to_owned(),
        },
        Target {
            what: what[2].to_owned(),
            goal: goal[2].to_owned(),
            measured: format!(
                "{:.1} MiB RSS over {:.0} days",
                v.long_rss_mib, v.days as f64
            ),
            reference: format!("over the 1-day store: {:.1} MiB", v.day_rss_mib),
            ratio: format!("{:+.1} MiB", v.long_rss_mib - v.day_rss_mib),
            verdict: verdict((v.long_rss_mib - v.day_rss_mib).abs() <= 20.0).to_owned(),
        },
        Target {
            what: what[3].to_owned(),
            goal: goal[3].to_owned(),
            measured: format!(
                "{:.0} req/s, p99 {:.2} ms (random buckets over {:.0} days)",
                v.long_rps, v.long_p99_ms, v.days as f64
            ),
            reference: format!("the 1-day store: {:.0} req/s", v.day_rps),
            ratio: times(v.long_rps / v.day_rps),
            verdict: verdict(v.long_rps >= 50_000.0 && v.long_p99_ms <= 2.0).to_owned(),
        },
        Target {
            what: what[4].to_owned(),
            goal: goal[4].to_owned(),
            measured: format!(
                "p50 {:.2} ms, p90 {:.2} ms",
                v.snapshot_p50_ms, v.snapshot_p90_ms
            ),
            reference: "–".to_owned(),
            ratio: "–".to_owned(),
            verdict: verdict(v.snapshot_p50_ms <= 10.0).to_owned(),
        },
    ]
}

/// HTTP candle lookups, from the `candles_http` run.
pub(crate) fn candles_target(run: &Run) -> Target {
    let (what, goal) = ("HTTP candle lookups", "≥ 50,000 req/s");
    let Some(v) = &run.summaries.candles_http else {
        return Target::missing(what, goal, run.missing("candles_http"));
    };
    let rps = v.rps;
    Target {
        what: what.to_owned(),
        goal: goal.to_owned(),
        measured: format!(
            "{rps:.0} req/s, p99 {:.3} ms ({:.0} connections from a separate process)",
            v.p99_ms, v.connections as f64
        ),
        reference: v.reference_rps.map_or_else(
            || "–".to_owned(),
            |r| format!("{r:.0} lookups/s: {}", v.reference),
        ),
        ratio: v
            .reference_rps
            .map_or_else(|| "–".to_owned(), |r| times(rps / r)),
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
            {"name": "memchr scan", "mb_s": 6000.0, "mb": 5.0, "events_s": 1e6},
            {"name": "serde_json::Value", "mb_s": 100.0, "mb": 5.0, "events_s": null},
        ]});
        let t = ingest_target(&Run::with("replay@1", &v));
        assert_eq!(t.verdict, "**met**");
        assert!(t.ratio.starts_with("12.00×"), "{}", t.ratio);
        assert!(
            t.measured
                .starts_with("1200 MB/s, 1.00 M events/s (fold of 5 MB: 10 blocks at scale 1)"),
            "{}",
            t.measured
        );
        // Another scale's run is not the target's.
        let other = ingest_target(&Run::with("replay@0.5", &v));
        assert_eq!(other.verdict, "not measured");
        let missing = ingest_target(&Run::default());
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
            {"poll_ms": null, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 0.3, "p99_ms": 1.0, "curve": []},
            {"poll_ms": null, "rate": 1, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 0.4, "p99_ms": 3.0, "curve": []},
            {"poll_ms": null, "rate": 1, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 0.2, "p99_ms": 1.5, "curve": []},
            {"poll_ms": null, "rate": 10, "stream": "l4", "reference": false, "frames": 10, "p50_ms": 2.0, "p99_ms": 8.0, "curve": []},
            {"poll_ms": null, "rate": 10, "stream": "raw", "reference": true, "frames": 10, "p50_ms": 1.0, "p99_ms": 4.0, "curve": []},
            {"poll_ms": 5, "rate": 1, "stream": "bbo", "reference": false, "frames": 10, "p50_ms": 9.0, "p99_ms": 9.0, "curve": []},
            {"poll_ms": null, "rate": 10, "stream": "bbo", "reference": false, "frames": 0, "p50_ms": 99.0, "p99_ms": 99.0, "curve": []},
        ], "machine_floor": {"p50_ms": 0.17, "p99_ms": 0.4}, "grpc_floor": {"p50_ms": 0.31, "p99_ms": 0.9}});
        let t = latency_targets(&Run::with("latency", &v));
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
        let missing = latency_targets(&Run::default());
        assert!(missing.iter().all(|t| t.verdict == "not measured"));
    }

    #[test]
    fn the_price_views_targets_read_the_quiet_rows_and_the_loads_ratios() {
        let row = |stream: &str, reference: bool, p50: f64, p99: f64| {
            json!({"poll_ms": null, "rate": 1, "stream": stream, "reference": reference,
                "frames": 10, "p50_ms": p50, "p99_ms": p99, "curve": []})
        };
        let beside = |load: &str, stream: &str, p50: f64, p99: f64| json!({"rate": 1, "load": load, "stream": stream, "p50_ratio": p50, "p99_ratio": p99});
        let floor = json!({"p50_ms": 0.1, "p99_ms": 0.2});
        let v = json!({"rows": [
            row("StreamBbo (20 coins)", false, 0.45, 0.9),
            row("StreamL2Book (1 coin, 20 levels)", false, 0.48, 2.5),
            row("StreamL4OrderUpdates (all coins)", false, 1.1, 1.3),
            row("StreamFills (raw feed)", true, 0.4, 0.8),
        ], "machine_floor": floor, "grpc_floor": floor, "beside": [
            beside("openOrders ×3 accounts", "StreamBbo", 1.1, 1.15),
            beside("openOrders ×3 accounts", "StreamL2Book", 1.05, 1.2),
            beside("openOrders ×3 accounts", "StreamFills", 0.9, 1.4),
            beside("l4Book subscribes", "StreamBbo", 1.0, 1.6),
            beside("l4Book subscribes", "StreamL2Book", 1.0, 1.1),
            beside("openOrders ×3 accounts", "StreamFills", 0.9, 1.4),
            beside("other", "StreamFills", 1.0, 1.0),
        ]});
        let t = latency_view_targets(&Run::with("latency", &v));
        // One row per load, in order, each once; a load without the two views' frames is not
        // judged.
        assert_eq!(t.len(), 4);
        assert_eq!(t[3].verdict, "not measured");
        // The L2 book's p99 is over 2 ms; the L4 stream is not one of these views.
        assert_eq!(t[0].verdict, "**not met**");
        assert_eq!(
            t[0].measured,
            "BBO 0.450 / 0.900 ms; L2 book 0.480 / 2.500 ms (p50 / p99, server with default settings)"
        );
        assert_eq!(t[0].ratio, "1.20×");
        assert_eq!(
            t[1].what,
            "BBO and L2 book at 1× beside `openOrders ×3 accounts`"
        );
        assert_eq!(t[1].verdict, "**met**");
        assert_eq!(
            t[1].measured,
            "BBO 1.10× / 1.15×; L2 book 1.05× / 1.20× (p50 / p99 over the quiet window)"
        );
        assert!(
            t[1].reference.ends_with("0.90× / 1.40×"),
            "{}",
            t[1].reference
        );
        assert_eq!(t[2].verdict, "**not met**");
        assert_eq!(t[2].ratio, "1.60×");
        assert_eq!(t[2].reference, "–");

        // A run without loads (or a summary from before they were kept).
        let quiet_only = json!({"rows": v["rows"], "machine_floor": floor, "grpc_floor": floor});
        let t = latency_view_targets(&Run::with("latency", &quiet_only));
        assert_eq!(t[0].verdict, "**not met**");
        assert_eq!(t[1].verdict, "not measured");
        let missing = latency_view_targets(&Run::default());
        assert!(missing.iter().all(|t| t.verdict == "not measured"));
    }

    #[test]
    fn replay_cli_and_engine_cpu_targets_read_their_summaries() {
        let v = json!({"mb": 791.0, "blocks": 3000, "reference": {"mb_s": 2000.0}, "rows": [
            {"view": "bbo", "mb_s": 500.0, "wall_s": 1.6, "read_mb": 791.0},
            {"view": "trades", "mb_s": 1500.0, "wall_s": 0.5, "read_mb": 1.0},
        ]});
        let t = replay_cli_targets(&Run::with("replay_cli", &v));
        assert_eq!(t[0].verdict, "**not met**");
        assert_eq!(t[0].ratio, "0.25×");
        assert_eq!(t[1].verdict, "**met**");
        let v = json!({"ratio": 1.2, "live_us_per_block": 360.0, "engine_us_per_block": 300.0,
            "market_us_per_block": 330.0, "blocks": 296, "idle_pct": 1.5, "idle_seconds": 10.0,
            "engine_core_pct": 0.5, "ratio_back_to_back": 1.2});
        let [live, idle] = engine_cpu_targets(&Run::with("engine_cpu", &v));
        assert_eq!(live.verdict, "**met**");
        assert_eq!(live.ratio, "1.20×");
        assert_eq!(idle.verdict, "**not met**");
    }

    #[test]
    fn fanout_targets_read_the_stream_bbo_rows_only() {
        let row = |label: &str, streams: u64, slow: u64, p99: f64| {
            json!({"label": label, "streams": streams, "slow": slow, "p50_ms": 1.0, "p99_ms": p99, "max_ms": p99,
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
        let [held, slow, kept] = fanout_targets(&Run::with("fanout", &v));
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
            {"scale": 0.5, "orders": 200_000, "coins": 150, "blocks": 20,
             "engine_base_mb": 5.0, "rss_settled_mb": 90.0, "engine_rss_mb": 60.0,
             "cold_start_s": 0.5, "engine_load_s": 0.4, "peak_mb": 100.0, "snapshot_mb": 80.0},
            {"scale": 1.0, "orders": 440_000, "coins": 200, "blocks": 20,
             "engine_base_mb": 5.0, "rss_settled_mb": 180.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0, "peak_mb": 400.0, "snapshot_mb": 160.0},
        ], "behind": []});
        let [rss, cold, behind] = memory_targets(&Run::with("memory", &v));
        assert_eq!(behind.measured, "not measured: run without `--behind`");
        assert_eq!(rss.verdict, "**met**");
        assert_eq!(rss.ratio, "1.50×");
        assert_eq!(cold.verdict, "**not met**");
        assert!(cold.measured.contains("440000 orders"), "{}", cold.measured);
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 1.0, "orders": 440_000, "coins": 200, "blocks": 20,
             "engine_base_mb": 5.0, "rss_settled_mb": 180.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0, "peak_mb": 190.0, "snapshot_mb": 160.0},
        ],
        "behind": [
            {"blocks": 26640, "minutes": 30.0, "node_mb": 6000.0, "peak_mb": 290.0,
             "rss_settled_mb": 210.0},
            {"blocks": 100, "minutes": 0.1, "node_mb": 20.0, "peak_mb": 191.0,
             "rss_settled_mb": 170.0},
        ]});
        let [_, _, behind] = memory_targets(&Run::with("memory", &v));
        assert!(
            behind.measured.starts_with("290 MB peak"),
            "{}",
            behind.measured
        );
        assert!(
            behind.measured.ends_with("behind; 0 min: 191 MB"),
            "{}",
            behind.measured
        );
        assert_eq!(behind.verdict, "**not met**");
        // The worst over compressed files says so; every start is within the goal.
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 1.0, "orders": 440_000, "coins": 200, "blocks": 20,
             "engine_base_mb": 5.0, "rss_settled_mb": 110.0, "engine_rss_mb": 90.0,
             "cold_start_s": 0.5, "engine_load_s": 0.5, "peak_mb": 115.0, "snapshot_mb": 160.0},
        ],
        "behind": [
            {"blocks": 26640, "minutes": 30.0, "node_mb": 7000.0, "peak_mb": 145.0,
             "rss_settled_mb": 138.0},
            {"blocks": 319_680, "minutes": 360.0, "node_mb": 86000.0, "zstd_mb": 2900.0,
             "peak_mb": 196.0, "rss_settled_mb": 180.0},
        ]});
        let [_, _, behind] = memory_targets(&Run::with("memory", &v));
        assert_eq!(
            behind.measured,
            "196 MB peak, 180 MB settled, 319680 blocks (360 min, 86000 MB of files, 2900 MB \
             compressed with zstd) behind; 30 min: 145 MB"
        );
        assert_eq!(behind.verdict, "**met**");
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(times(1.234), "1.23×");
        assert_eq!(times(0.0071), "0.0071×");
        assert_eq!(times(0.05), "0.050×");
        assert_eq!(times(f64::NAN), "NaN×");
    }
}
