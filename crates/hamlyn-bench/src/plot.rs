//! SVG plots of a run for `hamlyn bench --plot DIR`: one-way latency and bandwidth
//! against message size, one line per mode and per peer, drawn the way the Hamlyn
//! paper draws its figures 7–9 (a quantity against message size), on log axes since the
//! sizes and the figures span decades.
//!
//! The x axis is log2 of the message size (ticks at powers of two, labelled with
//! [`size_name`](super::report::size_name)), the y axis log10 of the value. Both are
//! drawn as linear axes over the logarithms, with ticks placed here, so the labels are
//! exactly the sizes and round numbers. Text is left to the SVG viewer's fonts: nothing
//! here needs a font file.

use std::error::Error;
use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{
    KeyPointHint, KeyPointWeight, NoDefaultFormatting, ValueFormatter,
};
use plotters::coord::Shift;
use plotters::element::ComposedElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::error::BenchError;
use super::report::size_name;

/// One line of a plot: a label for the legend and (message size in bytes, value) points.
pub struct Series {
    /// The name in the legend.
    pub label: String,
    /// (message size in bytes, value) points, in any order.
    pub points: Vec<(usize, f64)>,
}

/// One plot.
pub struct Plot<'a> {
    /// The caption above the plot.
    pub title: &'a str,
    /// What the y axis shows, with its unit.
    pub y_label: &'a str,
    /// The lines, in legend order.
    pub series: &'a [Series],
}

/// Writes `plot` as an SVG file at `path`: x = message size on a log2 axis labelled with
/// sizes like "8 B", "4 KiB", "1 MiB"; y on a log10 axis; one coloured line with point
/// markers per series, and a legend.
///
/// Points that a log axis cannot show (a size of 0, a value that is not finite or not
/// positive) are dropped, and series left without points are left out. A plot with no
/// points at all is still written, saying "no data".
pub fn write_svg(path: &Path, plot: &Plot<'_>) -> Result<(), BenchError> {
    let svg = render(plot).map_err(|e| BenchError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(path, svg).map_err(|source| BenchError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Height of a plot in pixels (more if the legend needs it).
const HEIGHT: u32 = 560;
/// Width of the plotting area per labelled power of two on the x axis.
const PER_X_LABEL: u32 = 60;
/// Most labels on the x axis; beyond that only every second (fourth, ...) power is.
const MAX_X_LABELS: usize = 24;
/// Space on the left for the y labels and the y axis description.
const Y_LABEL_AREA: u32 = 80;
/// Space below for the x labels and the x axis description.
const X_LABEL_AREA: u32 = 50;
/// Height of the caption.
const CAPTION: u32 = 40;
/// Margin around the chart.
const MARGIN: u32 = 12;
/// Vertical distance between two legend entries.
const LEGEND_LINE: i32 = 22;

/// Line colours (the "tableau 10" palette); the marker shapes tell lines apart where
/// colours do not (in grey print, or past ten series).
const COLOURS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Marker shapes, in the order series get them.
const SHAPES: [Shape; 11] = [
    Shape::Circle,
    Shape::Square,
    Shape::TriangleUp,
    Shape::Diamond,
    Shape::Cross,
    Shape::HollowCircle,
    Shape::HollowSquare,
    Shape::HollowTriangle,
    Shape::HollowDiamond,
    Shape::Plus,
    Shape::TriangleDown,
];

/// The points of one series that a log–log plot can show, in the plot's coordinates
/// (log2 of the size, log10 of the value), sorted by size.
fn log_points(series: &Series) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = series
        .points
        .iter()
        .filter(|&&(size, value)| size > 0 && value.is_finite() && value > 0.0)
        .map(|&(size, value)| ((size as f64).log2(), value.log10()))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// A series to draw (one with points), with its points in the plot's coordinates.
type Line<'s> = (&'s Series, Vec<(f64, f64)>);

/// Draws the whole plot into an SVG document.
fn render(plot: &Plot<'_>) -> Result<String, String> {
    let mut svg = String::new();
    draw(plot, &mut svg).map_err(|e| e.to_string())?;
    Ok(svg)
}

/// Draws the whole plot into `svg`.
fn draw<'a>(plot: &Plot<'_>, svg: &'a mut String) -> Result<(), Box<dyn Error + 'a>> {
    let lines: Vec<Line<'_>> = plot
        .series
        .iter()
        .map(|s| (s, log_points(s)))
        .filter(|(_, points)| !points.is_empty())
        .collect();
    if lines.is_empty() {
        let root = SVGBackend::with_string(svg, (640, 360)).into_drawing_area();
        root.fill(&WHITE)?;
        let area = root.titled(plot.title, ("sans-serif", 24))?;
        let (w, h) = area.dim_in_pixel();
        let grey = BLACK.mix(0.6);
        let centred = TextStyle::from(("sans-serif", 22).into_font())
            .color(&grey)
            .pos(Pos::new(HPos::Center, VPos::Center));
        area.draw_text("no data", &centred, (w as i32 / 2, h as i32 / 2))?;
        root.present()?;
        return Ok(());
    }

    let all = || lines.iter().flat_map(|(_, points)| points.iter());
    let (x_min, x_max) = bounds(all().map(|p| p.0));
    let (y_min, y_max) = bounds(all().map(|p| p.1));
    let x_axis = x_axis(x_min, x_max);
    let y_axis = y_axis(y_min, y_max);

    let plot_width = (x_axis.bold.len() as u32 * PER_X_LABEL).max(560);
    let chart_width = plot_width + Y_LABEL_AREA + 2 * MARGIN;
    let longest = lines
        .iter()
        .map(|(s, _)| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let legend_width = (60 + 8 * longest as u32).clamp(140, 480);
    let height = HEIGHT.max(CAPTION + 2 * MARGIN + 40 + LEGEND_LINE as u32 * lines.len() as u32);

    let root =
        SVGBackend::with_string(svg, (chart_width + legend_width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (chart_area, legend_area) = root.split_horizontally(chart_width);

    let mut chart = ChartBuilder::on(&chart_area)
        .caption(plot.title, ("sans-serif", 24))
        .margin(MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA)
        .build_cartesian_2d(x_axis, y_axis)?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc(plot.y_label)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .bold_line_style(BLACK.mix(0.25))
        .light_line_style(BLACK.mix(0.08))
        .draw()?;

    for (i, (_, points)) in lines.iter().enumerate() {
        let (colour, shape) = style(i);
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            colour.stroke_width(2),
        ))?;
        chart.draw_series(points.iter().map(|&at| marker(at, shape, colour)))?;
    }

    legend(&legend_area, &lines)?;
    root.present()?;
    Ok(())
}

/// The legend, in the strip right of the chart: per series a short line with its
/// marker, and the label.
fn legend<'a>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    lines: &[Line<'_>],
) -> Result<(), Box<dyn Error + 'a>> {
    let (width, _) = area.dim_in_pixel();
    let top = (CAPTION + MARGIN) as i32;
    let bottom = top + LEGEND_LINE * lines.len() as i32 + 8;
    area.draw(&Rectangle::new(
        [(0, top - 4), (width as i32 - MARGIN as i32, bottom)],
        BLACK.mix(0.4).stroke_width(1),
    ))?;
    let text =
        TextStyle::from(("sans-serif", 16).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (row, (series, _)) in lines.iter().enumerate() {
        let (colour, shape) = style(row);
        let y = top + 8 + LEGEND_LINE * row as i32;
        // A filled bar rather than a path: every <polyline> in the file is a series.
        area.draw(&Rectangle::new([(8, y - 1), (38, y + 1)], colour.filled()))?;
        area.draw(&marker((23, y), shape, colour))?;
        area.draw(&Text::new(series.label.as_str(), (46, y), &text))?;
    }
    Ok(())
}

/// Colour and marker of the `i`th series with points: ten colours, and past ten the
/// shapes shift, so no two of the first 110 series look the same.
fn style(i: usize) -> (RGBColor, Shape) {
    (
        COLOURS[i % COLOURS.len()],
        SHAPES[(i % COLOURS.len() + i / COLOURS.len()) % SHAPES.len()],
    )
}

/// Smallest and largest of `values` (which are finite and at least one).
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// Range of the x axis (log2 of sizes from 2^`lo` to 2^`hi`), its labelled ticks (powers
/// of two; every `step`th, aligned on multiples of `step`, so that 1 KiB and 1 MiB are
/// among them) and its grid lines (every power of two).
fn x_axis(lo: f64, hi: f64) -> LogAxis {
    let (lo, hi) = if hi - lo < 1.0 {
        (lo - 1.0, hi + 1.0)
    } else {
        (lo - 0.4, hi + 0.4)
    };
    let first = lo.ceil() as i64;
    let last = hi.floor() as i64;
    let count = (last - first + 1).max(1) as usize;
    let step = count.div_ceil(MAX_X_LABELS) as i64;
    let light: Vec<f64> = (first..=last).map(|e| e as f64).collect();
    let bold = (first..=last)
        .filter(|e| e.rem_euclid(step) == 0)
        .map(|e| e as f64)
        .collect();
    LogAxis {
        range: lo..hi,
        bold,
        light,
        sizes: true,
    }
}

/// Range of the y axis (log10 of values from 10^`lo` to 10^`hi`, at least a decade),
/// its labelled ticks (the powers of ten, and 2× and 5× them when the range spans few
/// decades) and its grid lines (1× to 9× every power of ten).
fn y_axis(lo: f64, hi: f64) -> LogAxis {
    let (lo, hi) = if hi - lo < 1.0 {
        let mid = (lo + hi) / 2.0;
        (mid - 0.5, mid + 0.5)
    } else {
        (lo, hi)
    };
    let pad = 0.05 * (hi - lo);
    let (lo, hi) = (lo - pad, hi + pad);
    let few = hi - lo < 3.0;
    let mut bold = Vec::new();
    let mut light = Vec::new();
    for decade in (lo.floor() as i64)..=(hi.ceil() as i64) {
        for m in 1..=9u32 {
            let y = decade as f64 + f64::from(m).log10();
            if y < lo || y > hi {
                continue;
            }
            light.push(y);
            if m == 1 || (few && (m == 2 || m == 5)) {
                bold.push(y);
            }
        }
    }
    LogAxis {
        range: lo..hi,
        bold,
        light,
        sizes: false,
    }
}

/// An axis over the logarithm of what it shows, with its ticks placed beforehand and
/// labelled with what they stand for. (plotters' own log axis cannot place ticks at
/// every power of two, and its linear `f64` axis with custom key points has no label
/// formatter.)
struct LogAxis {
    /// From the logarithm of the smallest to that of the largest value shown.
    range: Range<f64>,
    /// The logarithms of the labelled ticks.
    bold: Vec<f64>,
    /// The logarithms of the grid lines.
    light: Vec<f64>,
    /// Log2 of message sizes (or else log10 of values).
    sizes: bool,
}

impl Ranged for LogAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let fraction = (value - self.range.start) / (self.range.end - self.range.start);
        limit.0 + (f64::from(limit.1 - limit.0) * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight() {
            KeyPointWeight::Bold => self.bold.clone(),
            KeyPointWeight::Any => self.light.clone(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for LogAxis {
    fn format(value: &f64) -> String {
        value.to_string()
    }

    fn format_ext(&self, value: &f64) -> String {
        if self.sizes {
            size_name(2f64.powf(*value).round() as usize)
        } else {
            value_name(*value)
        }
    }
}

/// The label of a y tick at log10 `y` (a multiple 1..=9 of a power of ten): "0.05",
/// "2", "100", "1e-6".
fn value_name(y: f64) -> String {
    let decade = (y + 1e-9).floor();
    let m = 10f64.powf(y - decade).round() as u32;
    let k = decade as i32;
    match k {
        0..=5 => format!("{}", u64::from(m) * 10u64.pow(k as u32)),
        -3..=-1 => format!("{:.*}", (-k) as usize, f64::from(m) * 10f64.powi(k)),
        _ => format!("{m}e{k}"),
    }
}

/// A point marker's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    Circle,
    Square,
    TriangleUp,
    TriangleDown,
    Diamond,
    Cross,
    Plus,
    HollowCircle,
    HollowSquare,
    HollowTriangle,
    HollowDiamond,
}

/// A point marker: two polygons around a point, the second (white, or transparent and
/// so not drawn) hollowing out the first. Polygons rather than paths, so that the lines
/// of the series stay the only `<polyline>`s of the document.
type Marker<C, DB> = ComposedElement<C, DB, Polygon<(i32, i32)>, Polygon<(i32, i32)>>;

/// The marker of `shape` in `colour` at `at` (in any coordinates).
fn marker<C, DB: DrawingBackend>(at: C, shape: Shape, colour: RGBColor) -> Marker<C, DB> {
    let circle: Vec<(f64, f64)> = (0..16)
        .map(|i| f64::from(i) * std::f64::consts::PI / 8.0)
        .map(|a| (a.cos(), a.sin()))
        .collect();
    let square = [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)];
    let up = [(0.0, -1.0), (0.866, 0.5), (-0.866, 0.5)];
    let down = [(0.0, 1.0), (0.866, -0.5), (-0.866, -0.5)];
    let diamond = [(0.0, -1.0), (1.0, 0.0), (0.0, 1.0), (-1.0, 0.0)];
    let plus = [
        (0.22, 1.0),
        (0.22, 0.22),
        (1.0, 0.22),
        (1.0, -0.22),
        (0.22, -0.22),
        (0.22, -1.0),
        (-0.22, -1.0),
        (-0.22, -0.22),
        (-1.0, -0.22),
        (-1.0, 0.22),
        (-0.22, 0.22),
        (-0.22, 1.0),
    ];
    let cross: Vec<(f64, f64)> = plus
        .iter()
        .map(|&(x, y)| {
            (
                (x - y) * std::f64::consts::FRAC_1_SQRT_2,
                (x + y) * std::f64::consts::FRAC_1_SQRT_2,
            )
        })
        .collect();
    // (outline, size in pixels, size of the white hole in pixels, 0 for none)
    let (outline, size, hole): (&[(f64, f64)], f64, f64) = match shape {
        Shape::Circle => (&circle, 4.5, 0.0),
        Shape::Square => (&square, 4.0, 0.0),
        Shape::TriangleUp => (&up, 6.0, 0.0),
        Shape::TriangleDown => (&down, 6.0, 0.0),
        Shape::Diamond => (&diamond, 6.0, 0.0),
        Shape::Cross => (&cross, 6.5, 0.0),
        Shape::Plus => (&plus, 6.0, 0.0),
        Shape::HollowCircle => (&circle, 5.0, 3.0),
        Shape::HollowSquare => (&square, 4.5, 2.5),
        Shape::HollowTriangle => (&up, 7.5, 3.5),
        Shape::HollowDiamond => (&diamond, 6.5, 3.5),
    };
    let scaled = |r: f64| -> Vec<(i32, i32)> {
        outline
            .iter()
            .map(|&(x, y)| ((r * x).round() as i32, (r * y).round() as i32))
            .collect()
    };
    let hole = if hole > 0.0 {
        Polygon::new(scaled(hole), WHITE.filled())
    } else {
        Polygon::new(Vec::new(), TRANSPARENT.filled())
    };
    EmptyElement::at(at) + Polygon::new(scaled(size), colour.filled()) + hole
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str) -> TempFile {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            TempFile(std::env::temp_dir().join(format!(
                "hamlyn-plot-{}-{nanos}-{name}.svg",
                std::process::id()
            )))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn write(name: &str, plot: &Plot<'_>) -> String {
        let file = TempFile::new(name);
        write_svg(&file.0, plot).unwrap();
        std::fs::read_to_string(&file.0).unwrap()
    }

    /// The `<polyline>`s of the series: those of the axes are black.
    fn series_lines(svg: &str) -> Vec<&str> {
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && !l.contains("stroke=\"#000000\""))
            .collect()
    }

    fn series(label: &str, points: &[(usize, f64)]) -> Series {
        Series {
            label: label.to_string(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn plot_latency_lines_legend_and_size_labels() {
        let sizes = [8, 64, 512, 4096, 65536, 1 << 20];
        let line = |base: f64, per_byte: f64| -> Vec<(usize, f64)> {
            sizes
                .iter()
                .map(|&s| (s, base + per_byte * s as f64))
                .collect()
        };
        let all = [
            series("direct", &line(0.4, 0.0001)),
            series("mediated", &line(1.2, 0.0002)),
            series("ucx-shm & <peer>", &line(0.3, 0.00008)),
        ];
        let svg = write(
            "latency",
            &Plot {
                title: "one-way latency",
                y_label: "latency (µs)",
                series: &all,
            },
        );
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for label in ["direct", "mediated", "ucx-shm &amp; &lt;peer&gt;"] {
            assert!(svg.contains(&format!("\n{label}\n")), "no label {label}");
        }
        assert!(svg.contains("one-way latency"));
        assert!(svg.contains("latency (µs)"));
        assert!(svg.contains("message size"));
        assert_eq!(series_lines(&svg).len(), all.len());
        for size in ["8 B", "16 B", "1 KiB", "4 KiB", "1 MiB"] {
            assert!(svg.contains(&format!("\n{size}\n")), "no size label {size}");
        }
        // The y axis: 0.3 µs to about 300 µs.
        for tick in ["1", "10", "100"] {
            assert!(svg.contains(&format!("\n{tick}\n")), "no y tick {tick}");
        }
    }

    #[test]
    fn plot_without_points_says_no_data() {
        let all = [
            series("direct", &[]),
            series("tcp", &[(8, 0.0), (64, -1.0)]),
        ];
        for series in [&all[..], &[]] {
            let svg = write(
                "empty",
                &Plot {
                    title: "bandwidth",
                    y_label: "GB/s",
                    series,
                },
            );
            assert!(svg.starts_with("<svg"));
            assert!(svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("no data"));
            assert!(svg.contains("bandwidth"));
            assert!(!svg.contains("<polyline"));
        }
    }

    #[test]
    fn plot_drops_points_a_log_axis_cannot_show() {
        let all = [
            series(
                "tcp",
                &[
                    (4096, 0.5),
                    (65536, 0.0),
                    (1 << 20, -2.0),
                    (0, 1.0),
                    (4 << 20, f64::NAN),
                    (2 << 20, f64::INFINITY),
                    (16384, 2.0),
                ],
            ),
            series("empty", &[(8, 0.0)]),
            series("memcpy", &[(4096, 9.0), (1 << 20, 12.0)]),
        ];
        assert_eq!(
            log_points(&all[0]),
            vec![(12.0, 0.5f64.log10()), (14.0, 2f64.log10())]
        );
        let svg = write(
            "dropped",
            &Plot {
                title: "bandwidth",
                y_label: "bandwidth (GB/s)",
                series: &all,
            },
        );
        assert!(!svg.contains("no data"));
        assert_eq!(series_lines(&svg).len(), 2);
        assert!(
            !svg.contains("\nempty\n"),
            "a series without points is left out"
        );
        assert!(svg.contains("\nmemcpy\n"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        let tcp = series_lines(&svg)[0];
        assert!(tcp.contains("stroke=\"#1F77B4\""), "{tcp}");
        let points = tcp.split("points=\"").nth(1).unwrap();
        let points = &points[..points.find('"').unwrap()];
        assert_eq!(points.split_whitespace().count(), 2, "{tcp}");
    }

    #[test]
    fn tick_labels() {
        let styles: std::collections::HashSet<_> = (0..110)
            .map(|i| {
                let (colour, shape) = style(i);
                (colour.rgb(), format!("{shape:?}"))
            })
            .collect();
        assert_eq!(styles.len(), 110);
        assert_eq!(value_name(0.0), "1");
        assert_eq!(value_name(2f64.log10()), "2");
        assert_eq!(value_name(2.0 + 5f64.log10()), "500");
        assert_eq!(value_name(-1.0), "0.1");
        assert_eq!(value_name(-2.0 + 5f64.log10()), "0.05");
        assert_eq!(value_name(-6.0), "1e-6");
        assert_eq!(value_name(7.0 + 2f64.log10()), "2e7");
        let axis = x_axis(3.0, 22.0);
        assert_eq!(axis.light.len(), 20);
        assert_eq!(axis.bold.len(), 20);
        assert_eq!(axis.format_ext(&3.0), "8 B");
        assert_eq!(axis.format_ext(&20.0), "1 MiB");
        let axis = x_axis(0.0, 40.0);
        assert!(axis.bold.len() <= MAX_X_LABELS && axis.bold.contains(&20.0));
        let axis = y_axis(0.5f64.log10(), 0.5f64.log10());
        assert!(axis.bold.len() >= 2, "{:?}", axis.bold);
    }
}
