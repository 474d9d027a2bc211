//! SVG line charts for the benchmark report, drawn with `plotters`' SVG backend only.
//!
//! plotters is built without its font features: text is placed with the library's own size
//! estimate and written as SVG `<text>` elements that the viewer renders, so neither the
//! build nor the run needs system font libraries.
//!
//! Axes are linear, base-10 logarithmic, or "nines" (quantiles spread as `-log10(1 - q)`, so
//! 90 %, 99 %, 99.9 % … are evenly spaced, with the maximum (`q = 1`) drawn half a step past
//! the last finite quantile). Log and nines axes are drawn on a linear coordinate over the
//! transformed values, with tick labels mapped back.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;

/// How an axis maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Values as they are.
    Linear,
    /// `log10(value)`; values ≤ 0 are left out.
    Log10,
    /// Quantiles in `[0, 1]` as `-log10(1 - q)`; `q = 1` (the maximum) half a step past the
    /// largest finite quantile of the chart.
    Nines,
}

/// One axis: its title and scale.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Axis title, with the unit.
    pub label: String,
    /// Value → position mapping.
    pub scale: Scale,
}

impl Axis {
    /// An axis titled `label` with `scale`.
    pub fn new(label: impl Into<String>, scale: Scale) -> Self {
        Self {
            label: label.into(),
            scale,
        }
    }
}

/// One line of a chart, with a marker at each point.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// `(x, y)` in data units, drawn in this order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series named `name` through `points`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
        }
    }
}

/// Where the legend goes inside the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corner {
    /// Top left.
    UpperLeft,
    /// Top right.
    UpperRight,
    /// Bottom left.
    LowerLeft,
    /// Bottom right.
    LowerRight,
}

impl Corner {
    fn position(self) -> SeriesLabelPosition {
        match self {
            Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
            Corner::UpperRight => SeriesLabelPosition::UpperRight,
            Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
            Corner::LowerRight => SeriesLabelPosition::LowerRight,
        }
    }
}

/// A line chart: series plus horizontal reference lines (targets).
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Caption above the plot.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
    /// Horizontal lines across the plot at a y value, with their legend entry.
    pub references: Vec<(String, f64)>,
    /// Corner of the legend.
    pub legend: Corner,
}

/// Line colours, in series order (repeated past the end).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];
const REFERENCE: RGBColor = RGBColor(90, 90, 90);

/// Chart size in pixels.
const SIZE: (u32, u32) = (900, 520);

/// Position of `v` on an axis of `scale` whose largest finite nines position is `nines_max`.
fn position(scale: Scale, v: f64, nines_max: f64) -> Option<f64> {
    match scale {
        Scale::Linear => v.is_finite().then_some(v),
        Scale::Log10 => (v.is_finite() && v > 0.0).then(|| v.log10()),
        Scale::Nines => {
            if !(0.0..=1.0).contains(&v) {
                None
            } else if v >= 1.0 {
                Some(nines_max + 0.5)
            } else {
                Some(-(1.0 - v).log10())
            }
        }
    }
}

/// A "nice" short form of `v` for tick labels.
fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1e6 {
        format!("{}M", short(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", short(v / 1e3))
    } else if a >= 10.0 || (a - a.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        // Two significant digits below 1, without trailing zeros.
        let digits = (-a.log10().floor()) as usize + 1;
        let text = format!("{v:.digits$}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// The tick label at axis position `p`, or empty where none belongs.
fn tick(scale: Scale, p: f64, nines_max: f64, span: f64) -> String {
    let integral = (p - p.round()).abs() < 1e-6;
    match scale {
        Scale::Linear => short(p),
        // Within two decades every tick is labelled; wider, only the powers of ten.
        Scale::Log10 if span <= 2.0 || integral => short(10f64.powf(p)),
        Scale::Nines if (p - (nines_max + 0.5)).abs() < 1e-6 => "max".to_owned(),
        Scale::Nines if integral && p >= 0.0 => {
            let q = 1.0 - 10f64.powf(-p.round());
            let pct = q * 100.0;
            let decimals = (p.round() as usize).saturating_sub(2);
            format!("{pct:.decimals$}%")
        }
        Scale::Log10 | Scale::Nines => String::new(),
    }
}

/// The plotted range of positions `lo..hi` on an axis.
fn range(scale: Scale, lo: f64, hi: f64) -> (f64, f64) {
    match scale {
        Scale::Linear => {
            let lo = lo.min(0.0);
            let pad = (hi - lo).abs().max(1e-9) * 0.08;
            (lo, hi + pad)
        }
        Scale::Log10 => {
            let (lo, hi) = (lo.floor(), hi.ceil());
            if hi - lo < 1.0 {
                (lo, lo + 1.0)
            } else {
                (lo, hi)
            }
        }
        Scale::Nines => (0.0, hi.max(1.0)),
    }
}

/// Draws `chart` as an SVG file at `path` (parent directories are created).
///
/// # Errors
/// When the chart has no drawable point, or the file cannot be written.
pub fn write_svg(chart: &LineChart, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let finite_nines = |axis: &Axis, pick: fn(&(f64, f64)) -> f64| {
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .map(pick)
            .filter(|&q| axis.scale == Scale::Nines && (0.0..1.0).contains(&q))
            .map(|q| -(1.0 - q).log10())
            .fold(0.0_f64, f64::max)
    };
    // Rounded first: -log10(1 - 0.9999) is 4 give or take the last bit.
    let x_nines = (finite_nines(&chart.x, |p| p.0) - 1e-9).ceil().max(0.0);
    let y_nines = (finite_nines(&chart.y, |p| p.1) - 1e-9).ceil().max(0.0);
    let series: Vec<(&str, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|s| {
            let points = s
                .points
                .iter()
                .filter_map(|&(x, y)| {
                    Some((
                        position(chart.x.scale, x, x_nines)?,
                        position(chart.y.scale, y, y_nines)?,
                    ))
                })
                .collect();
            (s.name.as_str(), points)
        })
        .collect();
    let references: Vec<(&str, f64)> = chart
        .references
        .iter()
        .filter_map(|(name, y)| Some((name.as_str(), position(chart.y.scale, *y, y_nines)?)))
        .collect();
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|p| p.0));
    let ys = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.1))
        .chain(references.iter().map(|r| r.1));
    let bounds = |values: &mut dyn Iterator<Item = f64>| {
        values.fold(None, |acc: Option<(f64, f64)>, v| {
            Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        })
    };
    let (x_lo, x_hi) = bounds(&mut xs.into_iter()).context("the chart has no point to draw")?;
    let (y_lo, y_hi) = bounds(&mut ys.into_iter()).context("the chart has no point to draw")?;
    let (x_lo, x_hi) = range(chart.x.scale, x_lo, x_hi);
    let (y_lo, y_hi) = range(chart.y.scale, y_lo, y_hi);
    let (x_span, y_span) = (x_hi - x_lo, y_hi - y_lo);

    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let mut plot = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(46)
            .y_label_area_size(64)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?;
        let (xs, ys) = (chart.x.scale, chart.y.scale);
        let x_label = |p: &f64| tick(xs, *p, x_nines, x_span);
        let y_label = |p: &f64| tick(ys, *p, y_nines, y_span);
        plot.configure_mesh()
            .x_desc(chart.x.label.as_str())
            .y_desc(chart.y.label.as_str())
            .x_labels(12)
            .y_labels(12)
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (i, (name, value)) in references.iter().enumerate() {
            let style = REFERENCE.mix(0.7).stroke_width(1 + u32::from(i == 0));
            plot.draw_series(LineSeries::new([(x_lo, *value), (x_hi, *value)], style))?
                .label(*name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
        }
        for (i, (name, points)) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            plot.draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
            plot.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        }
        plot.configure_series_labels()
            .position(chart.legend.position())
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 13))
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("draw {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_place_quantiles_evenly_and_the_maximum_past_them() {
        let p = |q| position(Scale::Nines, q, 4.0).unwrap();
        assert!((p(0.9999) - 4.0).abs() < 1e-9);
        assert!((p(0.9) - 1.0).abs() < 1e-9);
        assert!((p(0.999) - 3.0).abs() < 1e-9);
        assert!((p(1.0) - 4.5).abs() < 1e-9);
        assert_eq!(position(Scale::Nines, 1.5, 4.0), None);
        assert_eq!(tick(Scale::Nines, 2.0, 4.0, 4.5), "99%");
        assert_eq!(tick(Scale::Nines, 3.0, 4.0, 4.5), "99.9%");
        assert_eq!(tick(Scale::Nines, 4.5, 4.0, 4.5), "max");
        assert_eq!(tick(Scale::Nines, 2.5, 4.0, 4.5), "");
    }

    #[test]
    fn log_ticks_label_powers_of_ten_on_wide_axes() {
        assert_eq!(position(Scale::Log10, 0.0, 0.0), None);
        assert_eq!(tick(Scale::Log10, 3.0, 0.0, 6.0), "1k");
        assert_eq!(tick(Scale::Log10, -2.0, 0.0, 6.0), "0.01");
        assert_eq!(tick(Scale::Log10, 2.5, 0.0, 6.0), "");
        assert_eq!(tick(Scale::Log10, 0.5, 0.0, 1.0), "3.2");
    }

    #[test]
    fn an_svg_is_written_with_its_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plots/c.svg");
        let chart = LineChart {
            title: "latency".to_owned(),
            x: Axis::new("quantile", Scale::Nines),
            y: Axis::new("ms", Scale::Log10),
            series: vec![Series::new(
                "bbo",
                vec![(0.5, 0.2), (0.9, 0.4), (0.99, 2.0), (1.0, 9.0)],
            )],
            references: vec![("target p99 1 ms".to_owned(), 1.0)],
            legend: Corner::LowerRight,
        };
        write_svg(&chart, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for text in [
            "latency",
            "bbo",
            "target p99 1 ms",
            "99%",
            "max",
            "quantile",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        let empty = LineChart {
            series: vec![Series::new("none", vec![(0.5, -1.0)])],
            references: Vec::new(),
            ..chart
        };
        assert!(write_svg(&empty, &dir.path().join("e.svg")).is_err());
    }
}
