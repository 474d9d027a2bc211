//! The report's plots, drawn from the summaries a run has.

use benches::plot::{Axis, Corner, LineChart, Scale, Series};
use std::path::Path;

use super::targets::{default_config, replay_row};
use super::{REPLAY_SCALES, Run};
use crate::{fanout, memory, replay};

/// A point of a plot, or none when a coordinate is NaN: a figure that came out non-finite was
/// written as `null`, and is left off the plot.
fn point(x: f64, y: f64) -> Option<(f64, f64)> {
    (!x.is_nan() && !y.is_nan()).then_some((x, y))
}

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

    if let Some(v) = &run.summaries.latency {
        // The server with default settings: every view and rate, and the raw feed reference.
        let series: Vec<Series> = v
            .rows
            .iter()
            .filter(|r| r.frames > 0 && default_config(r))
            .map(|r| {
                let stream = if r.reference {
                    "raw feed StreamFills (reference)"
                } else {
                    r.stream.as_str()
                };
                Series::new(format!("{stream} · {}×", r.rate), r.curve.clone())
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

    let replays: Vec<&replay::Summary> = REPLAY_SCALES
        .iter()
        .filter_map(|&s| run.summaries.replay_at(s))
        .collect();
    if !replays.is_empty() {
        let line = |name: &str| {
            Series::new(
                name,
                replays
                    .iter()
                    .filter_map(|v| point(v.scale, replay_row(v, name)?.mb_s))
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

    if let Some(v) = &run.summaries.memory {
        let by_orders = |figure: fn(&memory::SummaryScale) -> f64| -> Vec<(f64, f64)> {
            v.scales
                .iter()
                .filter_map(|r| point(r.orders as f64 / 1e3, figure(r)))
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
                    Series::new("server VmRSS settled", by_orders(|r| r.rss_settled_mb)),
                    Series::new("server VmHWM (peak)", by_orders(|r| r.peak_mb)),
                    Series::new(
                        "Engine::from_snapshot alone (VmRSS)",
                        by_orders(|r| r.engine_rss_mb),
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
                    Series::new(
                        "spawn → first StreamBbo frame",
                        by_orders(|r| r.cold_start_s),
                    ),
                    Series::new(
                        "read + parse + Engine::from_snapshot",
                        by_orders(|r| r.engine_load_s),
                    ),
                ],
                references: vec![("target 2 s".to_owned(), 2.0)],
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = &run.summaries.fanout {
        // Every run without slow streams, the edges compared at the same counts included.
        let fast: Vec<&fanout::SummaryRun> = v.runs.iter().filter(|r| r.slow == 0).collect();
        let line = |name: &str, figure: fn(&fanout::SummaryRun) -> f64| {
            Series::new(
                name,
                fast.iter()
                    .filter_map(|r| point(r.streams as f64, figure(r)))
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
                    line("p50", |r| r.p50_ms),
                    line("p99", |r| r.p99_ms),
                    line("max", |r| r.max_ms),
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
                series: vec![line("frames/s (all streams)", |r| r.frames_per_s)],
                references: Vec::new(),
                legend: Corner::UpperLeft,
            },
        )?;
    }

    if let Some(v) = &run.summaries.candles_http {
        draw(
            "candles_latency.svg",
            "HTTP candle lookup latency distribution (`candles_http`)",
            &LineChart {
                title: "Candle lookups: request latency".to_owned(),
                x: Axis::new("quantile", Scale::Nines),
                y: Axis::new("latency, ms", Scale::Log10),
                series: vec![Series::new("GET /v1/candles", v.curve.clone())],
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
            {"scale": 0.5, "orders": 200_000, "coins": 150, "blocks": 20,
             "engine_base_mb": 5.0, "snapshot_mb": 80.0, "rss_settled_mb": 90.0,
             "peak_mb": 100.0, "engine_rss_mb": 60.0, "cold_start_s": 0.5, "engine_load_s": 0.4},
            {"scale": 1.0, "orders": 440_000, "coins": 200, "blocks": 20,
             "engine_base_mb": 5.0, "snapshot_mb": 160.0, "rss_settled_mb": 180.0,
             "peak_mb": 400.0, "engine_rss_mb": 120.0, "cold_start_s": 2.5, "engine_load_s": 1.0},
        ], "behind": []});
        let drawn = draw_plots(&Run::with("memory", &v), dir.path()).unwrap();
        let names: Vec<&str> = drawn.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["memory_scale.svg", "cold_start_scale.svg"]);
        assert!(dir.path().join("memory_scale.svg").is_file());
        assert!(!dir.path().join("latency.svg").exists());
    }
}
