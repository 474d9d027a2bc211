//! The report's plots, drawn from the summaries a run has.

use benches::plot::{Axis, Corner, LineChart, Scale, Series};
use serde_json::Value;
use std::path::Path;

use super::targets::{curve, default_config, num, replay_row, rows, text};
use super::{REPLAY_SCALES, Run};

/// Draws every plot whose data this run has; returns `(file name, caption)` of each.
pub(crate) fn draw_plots(run: &Run, dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut drawn = Vec::new();
    let mut draw = |name: &str, caption: &str, chart: &LineChart| -> anyhow::Result<()> {
        if chart.series.iter().all(|s| s.points.is_empty()) {
            return Ok(());
        }
        benches::plot::write_svg(chart, &dir.join(name))?;
        drawn.push((name.to_owned(), caption.to_owned()));
        Ok(())
    };

    if let Some(v) = run.summary("latency") {
        // The server with default settings: every view and rate, and the raw feed reference.
        let series: Vec<Series> = rows(v, "rows")
            .filter(|r| num(r, "frames").unwrap_or(0.0) > 0.0 && default_config(r))
            .map(|r| {
                let stream = if r.get("reference").and_then(Value::as_bool) == Some(true) {
                    "raw feed StreamFills (reference)"
                } else {
                    text(r, "stream")
                };
                Series::new(
                    format!("{stream} · {}×", num(r, "rate").unwrap_or(0.0)),
                    curve(r),
                )
            })
            .collect();
        draw(
            "latency.svg",
            "Append → frame latency distribution per view, server with default settings (`latency`)",
            &LineChart {
                title: "Append → frame received, per view".to_owned(),
                x: Axis::new("quantile", Scale::Nines),
                y: Axis::new("latency, ms", Scale::Log10),
                series,
                references: vec![
                    ("target p50 at 1× 0.5 ms".to_owned(), 0.5),
                    ("target p99 at 1× 2 ms".to_owned(), 2.0),
                    ("target p99 at 10× 10 ms".to_owned(), 10.0),
                ],
                legend: Corner::LowerRight,
            },
        )?;
    }

    let replays: Vec<&Value> = REPLAY_SCALES
        .iter()
        .filter_map(|s| run.summary(&format!("replay@{s}")))
        .collect();
    if !replays.is_empty() {
        let line = |name: &str| {
            Series::new(
                name,
                replays
                    .iter()
                    .filter_map(|v| Some((num(v, "scale")?, num(replay_row(v, name)?, "mb_s")?)))
                    .collect(),
            )
        };
        draw(
            "ingest_scale.svg",
            "Ingest throughput per core vs simulator scale (`replay`)",
            &LineChart {
                title: "Ingest per core vs simulator scale (same bytes per scale)".to_owned(),
                x: Axis::new("simulator scale (1 = mainnet)", Scale::Linear),
                y: Axis::new("MB/s per core", Scale::Log10),
                series: vec![
                    line("fold"),
                    line("replay bbo"),
                    line("replay l4updates"),
                    line("serde_json::Value"),
                    line("memchr scan"),
                ],
                references: vec![("target 1,000 MB/s".to_owned(), 1_000.0)],
                legend: Corner::LowerRight,
            },
        )?;
    }

    if let Some(v) = run.summary("memory") {
        let by_orders = |key: &str| -> Vec<(f64, f64)> {
            rows(v, "scales")
                .filter_map(|r| Some((num(r, "orders")? / 1e3, num(r, key)?)))
                .collect()
        };
        draw(
            "memory_scale.svg",
            "Server RSS vs resting orders (`memory`)",
            &LineChart {
                title: "Server memory vs book size".to_owned(),
                x: Axis::new("resting orders, thousands", Scale::Linear),
                y: Axis::new("MB", Scale::Linear),
                series: vec![
                    Series::new("server VmRSS settled", by_orders("rss_settled_mb")),
                    Series::new("server VmHWM (peak)", by_orders("peak_mb")),
                    Series::new(
                        "Engine::from_snapshot alone (VmRSS)",
                        by_orders("engine_rss_mb"),
                    ),
                ],
                references: vec![("target 200 MB".to_owned(), 200.0)],
                legend: Corner::UpperLeft,
            },
        )?;
        draw(
            "cold_start_scale.svg",
            "Cold start vs resting orders (`memory`)",
            &LineChart {
                title: "Cold start vs book size".to_owned(),
                x: Axis::new("resting orders, thousands", Scale::Linear),
                y: Axis::new("seconds", Scale::Linear),
                series: vec![
                    Series::new("spawn → first StreamBbo frame", by_orders("cold_start_s")),
                    Series::new(
                        "read + parse + Engine::from_snapshot",
                        by_orders("engine_load_s"),
                    ),
                ],
                references: vec![("target 2 s".to_owned(), 2.0)],
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = run.summary("fanout") {
        let fast: Vec<&Value> = rows(v, "runs")
            .filter(|r| num(r, "slow") == Some(0.0))
            .collect();
        let line = |name: &str, key: &str| {
            Series::new(
                name,
                fast.iter()
                    .filter_map(|r| Some((num(r, "streams")?, num(r, key)?)))
                    .collect(),
            )
        };
        draw(
            "fanout_latency.svg",
            "Fan-out latency vs concurrent streams (`fanout`)",
            &LineChart {
                title: "Fan-out: append → frame latency vs streams".to_owned(),
                x: Axis::new("concurrent streams", Scale::Log10),
                y: Axis::new("latency, ms", Scale::Log10),
                series: vec![
                    line("p50", "p50_ms"),
                    line("p99", "p99_ms"),
                    line("max", "max_ms"),
                ],
                references: vec![("target p99 10 ms".to_owned(), 10.0)],
                legend: Corner::UpperLeft,
            },
        )?;
        draw(
            "fanout_throughput.svg",
            "Fan-out frames/s vs concurrent streams (`fanout`)",
            &LineChart {
                title: "Fan-out: frames delivered per second vs streams".to_owned(),
                x: Axis::new("concurrent streams", Scale::Log10),
                y: Axis::new("frames/s", Scale::Log10),
                series: vec![line("frames/s (all streams)", "frames_per_s")],
                references: Vec::new(),
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = run.summary("candles_http") {
        draw(
            "candles_latency.svg",
            "HTTP candle lookup latency distribution (`candles_http`)",
            &LineChart {
                title: "Candle lookups: request latency".to_owned(),
                x: Axis::new("quantile", Scale::Nines),
                y: Axis::new("latency, ms", Scale::Log10),
                series: vec![Series::new("GET /v1/candles", curve(v))],
                references: Vec::new(),
                legend: Corner::UpperLeft,
            },
        )?;
    }
    Ok(drawn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Run;
    use serde_json::json;

    #[test]
    fn plots_are_drawn_only_from_data_present() {
        let dir = tempfile::tempdir().unwrap();
        let v = json!({"full_scale": 1.0, "scales": [
            {"scale": 0.5, "orders": 2e5, "rss_settled_mb": 90.0, "peak_mb": 100.0, "engine_rss_mb": 60.0,
             "cold_start_s": 0.5, "engine_load_s": 0.4},
            {"scale": 1.0, "orders": 4.4e5, "rss_settled_mb": 180.0, "peak_mb": 400.0, "engine_rss_mb": 120.0,
             "cold_start_s": 2.5, "engine_load_s": 1.0},
        ]});
        let drawn = draw_plots(&Run::with("memory", v), dir.path()).unwrap();
        let names: Vec<&str> = drawn.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["memory_scale.svg", "cold_start_scale.svg"]);
        assert!(dir.path().join("memory_scale.svg").is_file());
        assert!(!dir.path().join("latency.svg").exists());
    }
}
