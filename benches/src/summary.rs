//! Machine-readable headline figures of one harness run, for the `report` binary.
//!
//! A harness run by `report` finds the environment variable [`ENV`] naming a file; at the end
//! of a successful run it writes there one JSON object with the figures of its own
//! `BENCHMARKS.md` section that the summary table and the plots need (the same values it
//! printed, not recomputed). Without the variable nothing is written, so a harness run by hand
//! behaves as before.

use std::path::PathBuf;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Environment variable naming the file a harness writes its summary to.
pub const ENV: &str = "L1GATE_BENCH_SUMMARY";

/// The label of the fan-out harness's `StreamBbo` rows (its section also compares edges at the
/// same stream counts under other labels).
pub const FANOUT_BBO: &str = "gRPC StreamBbo";

/// Quantiles of the latency curves the harnesses export (the maximum is added separately).
pub const CURVE_QUANTILES: [f64; 12] = [
    0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999,
];

/// The file named by [`ENV`], if set and not empty.
pub fn target() -> Option<PathBuf> {
    std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Writes `value` to the file named by [`ENV`]; does nothing when the variable is unset.
///
/// # Errors
/// When the file cannot be written.
pub fn emit(value: &Value) -> std::io::Result<()> {
    let Some(path) = target() else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// A latency distribution as `[[quantile, value × scale], …]` at [`CURVE_QUANTILES`], then
/// `[1.0, max × scale]`; empty for an empty histogram. `scale` converts the histogram's unit
/// to the one reported (e.g. `0.001` for µs → ms).
pub fn curve(histogram: &Histogram<u64>, scale: f64) -> Value {
    if histogram.is_empty() {
        return json!([]);
    }
    let mut points: Vec<Value> = CURVE_QUANTILES
        .iter()
        .map(|&q| json!([q, histogram.value_at_quantile(q) as f64 * scale]))
        .collect();
    points.push(json!([1.0, histogram.max() as f64 * scale]));
    Value::Array(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_end_at_the_maximum_and_rise() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        for v in 1..=10_000 {
            h.record(v).unwrap();
        }
        let Value::Array(points) = curve(&h, 0.001) else {
            panic!("not an array");
        };
        assert_eq!(points.len(), CURVE_QUANTILES.len() + 1);
        let values: Vec<f64> = points.iter().map(|p| p[1].as_f64().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
        assert_eq!(points.last().unwrap()[0].as_f64(), Some(1.0));
        assert!((values.last().unwrap() - 10.0).abs() < 0.01);
        assert!((values[3] - 5.0).abs() < 0.01, "p50 {}", values[3]);
        let empty = Histogram::<u64>::new(3).unwrap();
        assert_eq!(curve(&empty, 1.0), json!([]));
    }
}
