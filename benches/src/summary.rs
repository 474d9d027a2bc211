//! Machine-readable headline figures of one harness run, for the `report` binary.
//!
//! A harness run by `report` finds the environment variable [`ENV`] naming a file; at the end
//! of a successful run it writes there one JSON object with the figures of its own
//! `BENCHMARKS.md` section that the summary table and the plots need (the same values it
//! printed, not recomputed). Without the variable nothing is written, so a harness run by hand
//! behaves as before.
//!
//! The object is the harness's own `Summary` type (defined in the harness's file, serialized
//! with serde), and `report` reads it back into the same type: a figure renamed on one side is
//! renamed on the other, and a file that does not parse fails the step.

use std::path::PathBuf;

use hdrhistogram::Histogram;
use serde::{Deserialize as _, Deserializer, Serialize};

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

/// Writes `value` as JSON to the file named by [`ENV`]; does nothing when the variable is unset.
///
/// # Errors
/// When the file cannot be written.
pub fn emit<T: Serialize + ?Sized>(value: &T) -> std::io::Result<()> {
    let Some(path) = target() else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// A latency distribution as `(quantile, value × scale)` at [`CURVE_QUANTILES`], then
/// `(1.0, max × scale)`; empty for an empty histogram. `scale` converts the histogram's unit
/// to the one reported (e.g. `0.001` for µs → ms). In JSON, `[[quantile, value], …]`.
pub fn curve(histogram: &Histogram<u64>, scale: f64) -> Vec<(f64, f64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<(f64, f64)> = CURVE_QUANTILES
        .iter()
        .map(|&q| (q, histogram.value_at_quantile(q) as f64 * scale))
        .collect();
    points.push((1.0, histogram.max() as f64 * scale));
    points
}

/// Reads a figure written as a JSON number, or as `null` as NaN: serde_json writes NaN and the
/// infinities as `null`, so a figure that came out non-finite (a rate over no time, a ratio to
/// a reference not measured) reads back as NaN instead of failing the whole summary. The key
/// must still be there. For a summary's `f64` fields:
/// `#[serde(deserialize_with = "benches::summary::or_nan")]`.
///
/// # Errors
/// When the value is neither a number nor `null`.
pub fn or_nan<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
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
        let points = curve(&h, 0.001);
        assert_eq!(points.len(), CURVE_QUANTILES.len() + 1);
        let values: Vec<f64> = points.iter().map(|p| p.1).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
        assert_eq!(points.last().map(|p| p.0.to_bits()), Some(1f64.to_bits()));
        assert!((values.last().unwrap() - 10.0).abs() < 0.01);
        assert!((values[3] - 5.0).abs() < 0.01, "p50 {}", values[3]);
        // In JSON, an array of `[quantile, value]` pairs, as before.
        let json = serde_json::to_value(&points).unwrap();
        assert_eq!(json[0][0].as_f64(), Some(0.01));
        assert_eq!(json[3][1].as_f64(), Some(values[3]));
        let empty = Histogram::<u64>::new(3).unwrap();
        assert!(curve(&empty, 1.0).is_empty());
    }

    #[test]
    fn figures_written_as_null_read_back_as_nan() {
        #[derive(Serialize, serde::Deserialize)]
        struct Figures {
            #[serde(deserialize_with = "or_nan")]
            rate: f64,
        }
        let text = serde_json::to_string(&Figures {
            rate: f64::INFINITY,
        })
        .unwrap();
        assert_eq!(text, r#"{"rate":null}"#);
        let back: Figures = serde_json::from_str(&text).unwrap();
        assert!(back.rate.is_nan());
        let back: Figures = serde_json::from_str(r#"{"rate":2.5}"#).unwrap();
        assert_eq!(back.rate.to_bits(), 2.5f64.to_bits());
        assert!(
            serde_json::from_str::<Figures>("{}").is_err(),
            "the key is required"
        );
        assert!(serde_json::from_str::<Figures>(r#"{"rate":"x"}"#).is_err());
    }
}
