//! Throughput charts for `tern bench ... --plot FILE.svg`: operations per second against
//! threads, one series per engine or variant, written as a self-contained SVG for the README.
//!
//! Series with points at several thread counts become a line chart; otherwise (one thread count,
//! or a series with a single point) a grouped bar chart with the value above each bar. Text is
//! written as SVG `<text>` elements (plotters without its `ttf` feature), so no system font is
//! needed to render; sizes used for layout are estimates.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

/// One line (or bar group) of the chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend label: engine or variant name.
    pub name: String,
    /// `(threads, operations per second)`, in any order; at most one point per thread count.
    pub points: Vec<(usize, f64)>,
}

/// Chart size in pixels.
const SIZE: (u32, u32) = (900, 540);

/// Series colours (Tableau 10 without its grey and olive); series beyond it cycle.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4), // blue
    RGBColor(0xff, 0x7f, 0x0e), // orange
    RGBColor(0x2c, 0xa0, 0x2c), // green
    RGBColor(0xd6, 0x27, 0x28), // red
    RGBColor(0x94, 0x67, 0xbd), // purple
    RGBColor(0x8c, 0x56, 0x4b), // brown
    RGBColor(0xe3, 0x77, 0xc2), // pink
    RGBColor(0x17, 0xbe, 0xcf), // cyan
];

/// Font family for all text; the SVG viewer picks the actual font.
const FONT: &str = "sans-serif";
/// Colour of the title, legend, tick and value labels.
const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
/// Colour of the subtitle, axis descriptions and axes.
const MUTED: RGBColor = RGBColor(0x55, 0x55, 0x55);
/// Colour of the grid lines.
const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);

/// A font whose rendered size is `px` pixels (plotters writes `font-size` as the size / 1.24).
fn font(px: f64) -> FontDesc<'static> {
    (FONT, px * 1.24).into_font()
}

/// Legend rows at most; further series are counted in a "(+N more)" line.
const MAX_LEGEND_ROWS: usize = 5;

/// Colour of the `i`th series.
fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Writes an SVG chart to `path`.
///
/// - If every series has points at more than one thread count: a line chart, x = threads (a
///   categorical axis over the distinct thread counts present, in increasing order, labelled
///   "threads"), y = operations per second from 0 (labels in SI: 500k, 1.2M, 3M), one coloured
///   line with circle markers per series, and a legend with the series names.
/// - Otherwise (a single thread count, or a series with one point): a grouped bar chart with one
///   group per thread count and one bar per series inside the group (a series keeps its slot, so
///   a missing point leaves a gap), bar colour per series, a legend, and the value in SI form
///   above each bar.
///
/// `title` is drawn at the top with `subtitle` on a caption line under it; the legend is a row
/// (wrapped if needed) between the captions and the plot, so it never covers data.
///
/// Errors (never panics), each message naming `path`: no series, a series without points, a
/// thread count repeated within a series, a non-finite or negative value, a value too large for
/// the axis (near `f64::MAX`), or a path that cannot be written. The file is only written once the
/// whole chart has been drawn.
pub fn throughput_chart(path: &Path, title: &str, subtitle: &str, series: &[Series]) -> Result<(), String> {
    let fail = |what: String| format!("chart {}: {what}", path.display());
    validate(series).map_err(fail)?;
    let mut svg = String::new();
    render(&mut svg, title, subtitle, series).map_err(fail)?;
    std::fs::write(path, svg).map_err(|e| fail(format!("cannot write: {e}")))
}

/// Checks the input is something we can draw.
fn validate(series: &[Series]) -> Result<(), String> {
    if series.is_empty() {
        return Err("no series to plot".into());
    }
    for s in series {
        if s.points.is_empty() {
            return Err(format!("series {:?} has no points", s.name));
        }
        let mut seen = BTreeSet::new();
        for &(threads, ops) in &s.points {
            if !ops.is_finite() || ops < 0.0 {
                return Err(format!("series {:?} at {threads} threads: invalid throughput {ops}", s.name));
            }
            if !seen.insert(threads) {
                return Err(format!("series {:?}: thread count {threads} appears twice", s.name));
            }
        }
    }
    Ok(())
}

/// A categorical x axis: category `i` is centred on `i as f64` and spans `i - 0.5 .. i + 0.5`,
/// so bars can be placed at fractional offsets inside a group.
struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let frac = (value + 0.5) / self.0 as f64;
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        let step = self.0.div_ceil(hint.max_num_points().max(1)).max(1);
        (0..self.0).step_by(step).map(|i| i as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// Draws the chart into `svg`.
fn render(svg: &mut String, title: &str, subtitle: &str, series: &[Series]) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<_>| format!("drawing failed: {e}");
    let threads: Vec<usize> =
        series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect::<BTreeSet<_>>().into_iter().collect();
    let lines = series.iter().all(|s| s.points.len() > 1);
    let max = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);

    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let width = SIZE.0 as i32;
    let centre = |v| Pos::new(HPos::Center, v);
    let title_font = font(20.0).style(FontStyle::Bold).color(&TEXT).pos(centre(VPos::Top));
    root.draw(&Text::new(title.to_string(), (width / 2, 10), title_font)).map_err(err)?;
    let subtitle_font = font(14.0).color(&MUTED).pos(centre(VPos::Top));
    root.draw(&Text::new(subtitle.to_string(), (width / 2, 40), subtitle_font)).map_err(err)?;

    // Legend: rows of (swatch, name) items, centred, below the captions.
    let legend_font = font(14.0).color(&TEXT).pos(Pos::new(HPos::Left, VPos::Center));
    let (swatch, gap, spacing, row_height) = (if lines { 26 } else { 14 }, 6, 24, 22);
    let mut rows: Vec<Vec<(usize, i32)>> = vec![vec![]];
    let mut row_width = 0;
    let mut unlisted = 0;
    for (i, s) in series.iter().enumerate() {
        let text = root.estimate_text_size(&s.name, &legend_font).map_err(err)?.0 as i32;
        let item = swatch + gap + text;
        if row_width > 0 && row_width + spacing + item > width - 40 {
            if rows.len() == MAX_LEGEND_ROWS {
                // Keep the plot usable: say how many more there are instead.
                unlisted = series.len() - i;
                break;
            }
            rows.push(vec![]);
            row_width = 0;
        }
        row_width += if row_width > 0 { spacing } else { 0 } + item;
        if let Some(row) = rows.last_mut() {
            row.push((i, item));
        }
    }
    let legend_top = 72;
    for (r, row) in rows.iter().enumerate() {
        let total: i32 = row.iter().map(|&(_, w)| w).sum::<i32>() + spacing * (row.len() as i32 - 1);
        let y = legend_top + r as i32 * row_height;
        let mut x = (width - total) / 2;
        for &(i, item) in row {
            let c = colour(i);
            if lines {
                root.draw(&PathElement::new(vec![(x, y), (x + swatch, y)], c.stroke_width(2))).map_err(err)?;
                root.draw(&Circle::new((x + swatch / 2, y), 4, c.filled())).map_err(err)?;
            } else {
                root.draw(&Rectangle::new([(x, y - 7), (x + 14, y + 7)], c.filled())).map_err(err)?;
            }
            root.draw(&Text::new(series[i].name.clone(), (x + swatch + gap, y), legend_font.clone())).map_err(err)?;
            x += item + spacing;
        }
    }
    let mut header = legend_top + rows.len() as i32 * row_height - 4;
    if unlisted > 0 {
        let more = font(14.0).color(&MUTED).pos(centre(VPos::Center));
        root.draw(&Text::new(format!("(+{unlisted} more)"), (width / 2, header + row_height / 2 - 4), more))
            .map_err(err)?;
        header += row_height;
    }
    let (_, body) = root.split_vertically(header);

    // Plot area size, for fitting the bar labels before the y range is fixed.
    let (margin_left, margin_right, margin_top, margin_bottom, x_labels, y_labels) = (12, 28, 10, 6, 46, 72);
    let plot_width = f64::from(width - margin_left - margin_right - y_labels);
    let plot_height = f64::from(SIZE.1 as i32 - header - margin_top - margin_bottom - x_labels);

    // Bars share 80% of each category and fill 88% of their slot. Value labels are upright if the
    // widest fits over a bar, else rotated to read upwards; either way the y range leaves room for
    // them above the tallest bar.
    let slot = 0.8 / series.len() as f64;
    let bar_pixels = plot_width / threads.len() as f64 * slot * 0.88;
    let label_size = if bar_pixels >= 14.0 { 12.0 } else { bar_pixels.max(8.0) };
    let mut widest = 0;
    for s in series.iter().filter(|_| !lines) {
        for &(_, v) in &s.points {
            widest = widest.max(root.estimate_text_size(&si(v), &font(label_size).into()).map_err(err)?.0);
        }
    }
    let upright = f64::from(widest) <= bar_pixels / 0.88;
    let top = if max <= 0.0 {
        1.0
    } else if lines {
        nice_ceil(max * 1.05)
    } else {
        let room = if upright { label_size + 6.0 } else { f64::from(widest) + 8.0 };
        nice_ceil(max / (1.0 - (room / plot_height).min(0.5)))
    };
    if !top.is_finite() {
        return Err(format!("throughput {max:e} is too large to plot"));
    }

    let mut chart = ChartBuilder::on(&body)
        .margin_left(margin_left)
        .margin_right(margin_right)
        .margin_top(margin_top)
        .margin_bottom(margin_bottom)
        .x_label_area_size(x_labels)
        .y_label_area_size(y_labels)
        .build_cartesian_2d(Categories(threads.len()), 0.0..top)
        .map_err(err)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if i >= 0.0 && (i as usize) < threads.len() {
            threads[i as usize].to_string()
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(threads.len().min(16))
        .y_labels(8)
        .x_label_formatter(&label_of)
        .y_label_formatter(&|y| si(*y))
        .x_desc("threads")
        .y_desc("operations / second")
        .label_style(font(13.0).color(&TEXT))
        .axis_desc_style(font(14.0).color(&MUTED))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(MUTED);
    if !lines {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(err)?;

    let index = |t: usize| threads.binary_search(&t).unwrap_or(0) as f64;
    if lines {
        for (i, s) in series.iter().enumerate() {
            let mut points: Vec<(f64, f64)> = s.points.iter().map(|&(t, v)| (index(t), v)).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = colour(i);
            chart.draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2))).map_err(err)?;
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(err)?;
        }
    } else {
        let label_font = if upright {
            font(label_size).color(&TEXT).pos(centre(VPos::Bottom))
        } else {
            font(label_size).transform(FontTransform::Rotate270).color(&TEXT).pos(Pos::new(HPos::Left, VPos::Center))
        };
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            for &(t, v) in &s.points {
                let x0 = index(t) - 0.4 + i as f64 * slot;
                let (left, right) = (x0 + slot * 0.06, x0 + slot * 0.94);
                chart
                    .draw_series(std::iter::once(Rectangle::new([(left, 0.0), (right, v)], c.filled())))
                    .map_err(err)?;
                let label = EmptyElement::at(((left + right) / 2.0, v)) + Text::new(si(v), (0, -3), label_font.clone());
                chart.draw_series(std::iter::once(label)).map_err(err)?;
            }
        }
    }
    drop(chart);
    root.present().map_err(err)
}

/// The smallest 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten that is at least `x > 0`.
fn nice_ceil(x: f64) -> f64 {
    let p = 10f64.powf(x.log10().floor());
    [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0].iter().map(|m| m * p).find(|&v| v >= x).unwrap_or(10.0 * p)
}

/// `x` to three significant digits with an SI prefix, trailing zeros dropped:
/// 999 -> "999", 1500 -> "1.5k", 2_350_000 -> "2.35M", 3e6 -> "3M".
fn si(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        return "0".into();
    }
    // Round first so 999_999 becomes "1M" rather than "1000k".
    let factor = 10f64.powf(x.abs().log10().floor() - 2.0);
    let r = (x / factor).round() * factor;
    let (scale, prefix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|&(scale, _)| r.abs() >= scale)
        .unwrap_or((1.0, ""));
    let v = r / scale;
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let mut s = format!("{v:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    s + prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(usize, f64)]) -> Series {
        Series { name: name.into(), points: points.to_vec() }
    }

    fn render_to_string(title: &str, subtitle: &str, s: &[Series]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        throughput_chart(&path, title, subtitle, s).unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    /// Whether the SVG has a `<text>` element reading exactly `t`.
    fn has_text(svg: &str, t: &str) -> bool {
        svg.contains(&format!(">\n{t}\n</text>"))
    }

    /// Number of `<tag` elements with attribute `attr` set to the colour `c`.
    fn count(svg: &str, tag: &str, attr: &str, c: RGBColor) -> usize {
        let want = format!("{attr}=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        svg.split(&format!("<{tag} ")).skip(1).filter(|e| e.split('>').next().unwrap().contains(&want)).count()
    }

    /// Number of `<rect>` elements filled with `c`.
    fn rects_of(svg: &str, c: RGBColor) -> usize {
        count(svg, "rect", "fill", c)
    }

    /// Number of `<polyline>` elements stroked with `c`.
    fn lines_of(svg: &str, c: RGBColor) -> usize {
        count(svg, "polyline", "stroke", c)
    }

    #[test]
    fn si_three_significant_digits() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(7.0), "7");
        assert_eq!(si(12.34), "12.3");
        assert_eq!(si(999.0), "999");
        assert_eq!(si(1000.0), "1k");
        assert_eq!(si(1500.0), "1.5k");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(500_000.0), "500k");
        assert_eq!(si(999_999.0), "1M");
        assert_eq!(si(1_200_000.0), "1.2M");
        assert_eq!(si(2_350_000.0), "2.35M");
        assert_eq!(si(3_000_000.0), "3M");
        assert_eq!(si(45_600_000_000.0), "45.6G");
        assert_eq!(si(200_000.000_000_01), "200k");
    }

    #[test]
    fn nice_ceil_rounds_up() {
        assert_eq!(nice_ceil(1.0), 1.0);
        assert_eq!(nice_ceil(1.05e6), 1.2e6);
        assert_eq!(nice_ceil(3.3e6), 4e6);
        assert_eq!(nice_ceil(8.5e5), 1e6);
    }

    #[test]
    fn line_chart_with_three_series() {
        let s = [
            series("tern", &[(1, 1.1e6), (4, 3.9e6), (16, 11.5e6)]),
            series("lmdb", &[(16, 14.0e6), (1, 1.6e6), (4, 5.5e6)]),
            series("rocksdb", &[(1, 0.4e6), (4, 1.3e6), (16, 3.2e6)]),
        ];
        let svg = render_to_string("YCSB C throughput", "YCSB C, 1M records, 16 B keys, 100 B values", &s);
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        for text in ["YCSB C throughput", "YCSB C, 1M records, 16 B keys, 100 B values", "tern", "lmdb", "rocksdb"] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(has_text(&svg, "threads"));
        for i in 0..s.len() {
            assert!(lines_of(&svg, colour(i)) >= 1, "series {i} has a line");
            // Three markers on the line plus one on the legend swatch.
            assert_eq!(count(&svg, "circle", "fill", colour(i)), 4, "series {i} markers");
        }
        // Categorical x axis: the thread counts themselves, not interpolated values.
        for t in ["1", "4", "16"] {
            assert!(has_text(&svg, t), "missing x label {t}");
        }
        assert!(!has_text(&svg, "2") && !has_text(&svg, "8"));
        // SI y labels.
        assert!(has_text(&svg, "0") && has_text(&svg, "10M"), "SI y labels");
        // No bars in a line chart.
        for i in 0..3 {
            assert_eq!(rects_of(&svg, colour(i)), 0);
        }
    }

    #[test]
    fn single_thread_count_is_a_bar_chart() {
        let s = [
            series("tern", &[(8, 2_350_000.0)]),
            series("lmdb", &[(8, 1_500.0)]),
            series("wiredtiger", &[(8, 999.0)]),
            series("bdb", &[(8, 500_000.0)]),
            series("rocksdb", &[(8, 1_200_000.0)]),
        ];
        let svg = render_to_string("TPC-B", "8 threads", &s);
        assert!(svg.starts_with("<svg"));
        for (i, x) in s.iter().enumerate() {
            assert!(svg.contains(&x.name));
            // One bar plus one legend swatch per series.
            assert_eq!(rects_of(&svg, colour(i)), 2, "{}", x.name);
        }
        for label in ["2.35M", "1.5k", "999", "500k", "1.2M"] {
            assert!(has_text(&svg, label), "missing value label {label}");
        }
        for i in 0..s.len() {
            assert_eq!(lines_of(&svg, colour(i)), 0, "no lines in a bar chart");
        }
    }

    #[test]
    fn a_series_with_one_point_makes_a_bar_chart() {
        let s = [series("tern", &[(1, 1e6), (2, 2e6)]), series("bdb", &[(2, 0.5e6)])];
        let svg = render_to_string("mixed", "", &s);
        assert_eq!(rects_of(&svg, colour(0)), 3);
        assert_eq!(rects_of(&svg, colour(1)), 2);
    }

    #[test]
    fn palette_cycles_beyond_its_length() {
        let s: Vec<Series> =
            (0..PALETTE.len() + 2).map(|i| series(&format!("v{i}"), &[(1, 1e5 * (i + 1) as f64)])).collect();
        let svg = render_to_string("many", "variants", &s);
        assert_eq!(rects_of(&svg, colour(0)), 4, "series 0 and series 8 share a colour");
        assert!(has_text(&svg, "v9"));
    }

    #[test]
    fn narrow_bars_get_rotated_labels() {
        let s: Vec<Series> =
            (0..10).map(|i| series(&format!("v{i}"), &[(1, 1.23e6), (2, 2.34e6), (4, 3.45e6), (8, 4.56e6)])).collect();
        let s = [&s[..], &[series("single", &[(16, 5.67e6)])]].concat();
        let svg = render_to_string("narrow", "bars", &s);
        assert!(svg.contains("rotate(270"), "labels too wide for the bars are rotated");
        assert!(has_text(&svg, "5.67M"));
    }

    #[test]
    fn a_long_legend_is_cut_short() {
        let s: Vec<Series> =
            (0..300).map(|i| series(&format!("variant number {i}"), &[(1, i as f64), (2, 2.0 * i as f64)])).collect();
        let svg = render_to_string("many", "series", &s);
        let listed = (0..300).filter(|i| has_text(&svg, &format!("variant number {i}"))).count();
        assert!(listed > 10 && listed < 300, "{listed}");
        assert!(has_text(&svg, &format!("(+{} more)", 300 - listed)));
    }

    #[test]
    fn zero_throughput_is_allowed() {
        let svg = render_to_string("zeros", "", &[series("tern", &[(1, 0.0), (2, 0.0)])]);
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn text_is_escaped() {
        let svg = render_to_string("a < b & c", "x", &[series("<tern>", &[(1, 1.0)])]);
        assert!(svg.contains("a &lt; b &amp; c") && svg.contains("&lt;tern&gt;"));
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.svg");
        let check = |s: &[Series], needle: &str| {
            let e = throughput_chart(&path, "t", "s", s).unwrap_err();
            assert!(e.contains(&path.display().to_string()) && e.contains(needle), "{e}");
            assert!(!path.exists());
        };
        check(&[], "no series");
        check(&[series("tern", &[])], "no points");
        check(&[series("tern", &[(1, f64::NAN)])], "NaN");
        check(&[series("tern", &[(1, 1.0), (2, f64::INFINITY)])], "inf");
        check(&[series("tern", &[(1, -5.0)])], "-5");
        check(&[series("tern", &[(1, 5.0), (1, 6.0)])], "twice");
        check(&[series("tern", &[(1, f64::MAX), (2, 1.0)])], "too large");

        let missing = dir.path().join("no-such-dir").join("out.svg");
        let e = throughput_chart(&missing, "t", "s", &[series("tern", &[(1, 1.0)])]).unwrap_err();
        assert!(e.contains(&missing.display().to_string()) && e.contains("cannot write"), "{e}");
    }
}
