//! Owns: drawing simple line charts as inline SVG for the HTML report (axes with round
//! ticks, a legend above the plot, one polyline per series), and escaping text for that
//! markup ([`esc`], which the page in `html.rs` uses too: html → svg, never back).
//! Does not: depend on a plotting crate: a few line charts need ~200 lines of text
//! output, not a font and raster stack.

use std::fmt::Write as _;

/// A round tick step for `span` split into about `target` parts: 1, 2 or 5 × 10^k.
fn nice_step(span: f64, target: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / target;
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0] {
        if raw <= m * mag * 1.000_001 {
            return m * mag;
        }
    }
    10.0 * mag
}

/// Round ticks covering `[lo, hi]`: the first and last tick enclose the data, every tick
/// is a multiple of the step (at most ~`target` + 1 of them).
fn ticks(lo: f64, hi: f64, target: f64) -> Vec<f64> {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let step = nice_step(hi - lo, target);
    let first = (lo / step).floor();
    let last = (hi / step).ceil();
    let count = ((last - first) as usize).min(50);
    (0..=count).map(|i| (first + i as f64) * step).collect()
}

/// `v` printed with as many decimals as `step` needs, with k/M for large values (0 is
/// plain "0").
fn label(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".to_owned();
    }
    let (v, step, suffix) = if v.abs() >= 1e6 || step >= 1e6 {
        (v / 1e6, step / 1e6, "M")
    } else if v.abs() >= 1e3 || step >= 1e3 {
        (v / 1e3, step / 1e3, "k")
    } else {
        (v, step, "")
    };
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}{suffix}")
}

/// What the x axis shows under its ticks.
pub enum XTicks<'a> {
    /// Round values of x itself.
    Auto,
    /// These positions with these labels (a log or percentile axis).
    Named(&'a [(f64, &'a str)]),
}

/// A line chart: `xs` shared by every series `(name, colour, ys)`. The y axis starts at
/// 0 and ends at the first round tick above the largest value.
pub fn line_chart(
    title: &str,
    xs: &[f64],
    series: &[(&str, &str, Vec<f64>)],
    xlabel: &str,
    x_ticks: XTicks<'_>,
    points: bool,
) -> String {
    // The legend gets a row of its own above the plot, so no name is drawn over a line.
    let legend_rows = series.len().div_ceil(3) as f64;
    let (w, l, r, b) = (900.0, 70.0, 25.0, 45.0);
    let t = 30.0 + 18.0 * legend_rows;
    let hgt = t + 245.0 + b;
    let pw = w - l - r;
    let ph = hgt - t - b;
    let finite = |v: &&f64| v.is_finite();
    let xmin = xs
        .iter()
        .filter(finite)
        .cloned()
        .fold(f64::INFINITY, f64::min);
    let xmax = xs
        .iter()
        .filter(finite)
        .cloned()
        .fold(f64::NEG_INFINITY, f64::max);
    let (xmin, xmax) = if xmax > xmin {
        (xmin, xmax)
    } else {
        (0.0, 1.0)
    };
    let ymax_data = series
        .iter()
        .flat_map(|(_, _, ys)| ys.iter().cloned())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let y_ticks = ticks(0.0, if ymax_data > 0.0 { ymax_data } else { 1.0 }, 5.0);
    let ymax = y_ticks.last().copied().unwrap_or(1.0);
    let y_step = y_ticks.get(1).copied().unwrap_or(1.0) - y_ticks[0];
    let sx = |x: f64| l + (x - xmin) / (xmax - xmin) * pw;
    let sy = |y: f64| t + ph - (y / ymax) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" viewBox=\"0 0 {w} {hgt}\" font-size=\"12\">"
    );
    let _ = write!(
        s,
        "<text x=\"{l}\" y=\"18\" font-weight=\"bold\">{}</text>",
        esc(title)
    );
    for y in &y_ticks {
        let py = sy(*y);
        let _ = write!(
            s,
            "<line x1=\"{l}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l + pw,
            l - 6.0,
            py + 4.0,
            label(*y, y_step)
        );
    }
    let x_marks: Vec<(f64, String)> = match x_ticks {
        XTicks::Auto => {
            let all = ticks(xmin, xmax, 8.0);
            let step = all.get(1).copied().unwrap_or(1.0) - all[0];
            all.into_iter()
                .filter(|x| *x >= xmin - step * 1e-6 && *x <= xmax + step * 1e-6)
                .map(|x| (x, label(x, step)))
                .collect()
        }
        XTicks::Named(named) => named
            .iter()
            .filter(|(x, _)| *x >= xmin && *x <= xmax)
            .map(|(x, name)| (*x, (*name).to_owned()))
            .collect(),
    };
    for (x, text) in &x_marks {
        let px = sx(*x);
        let _ = write!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#999\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            t + ph,
            t + ph + 5.0,
            t + ph + 18.0,
            esc(text)
        );
    }
    let _ = write!(
        s,
        "<rect x=\"{l}\" y=\"{t}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#333\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        l + pw / 2.0,
        hgt - 6.0,
        esc(xlabel)
    );
    for (i, (name, colour, ys)) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(ys)
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| (sx(*x), sy(*y)))
            .collect();
        let line: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            s,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        if points {
            for (x, y) in &pts {
                let _ = write!(
                    s,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/>"
                );
            }
        }
        let (col, row) = ((i % 3) as f64, (i / 3) as f64);
        let (lx, ly) = (l + col * (pw / 3.0), 36.0 + 18.0 * row);
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 4.0,
            lx + 18.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// `s` with `&`, `<` and `>` escaped, for text inside SVG or HTML markup.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_enclose_the_data() {
        assert_eq!(ticks(0.0, 9.3, 5.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.0, 1234.0, 5.0), vec![0.0, 500.0, 1000.0, 1500.0]);
        let t = ticks(0.0, 0.37, 5.0);
        assert_eq!(t.len(), 5);
        assert!((t[4] - 0.4).abs() < 1e-9);
        assert_eq!(ticks(2.1, 57.9, 8.0).first(), Some(&0.0));
        assert_eq!(ticks(2.1, 57.9, 8.0).last(), Some(&60.0));
    }

    #[test]
    fn labels_have_the_decimals_the_step_needs() {
        assert_eq!(label(0.2, 0.1), "0.2");
        assert_eq!(label(0.25, 0.05), "0.25");
        assert_eq!(label(1500.0, 500.0), "1.5k");
        assert_eq!(label(2_000_000.0, 1_000_000.0), "2M");
        assert_eq!(label(40.0, 10.0), "40");
        assert_eq!(label(0.0, 10_000.0), "0");
    }

    #[test]
    fn a_chart_keeps_every_mark_inside_its_box() {
        let xs: Vec<f64> = (0..30).map(|i| f64::from(i) * 0.5 + 0.2).collect();
        let ys: Vec<f64> = xs.iter().map(|x| x * 1000.0).collect();
        let svg = line_chart(
            "t",
            &xs,
            &[("a long series name, slow subscribers", "#000", ys)],
            "s",
            XTicks::Auto,
            true,
        );
        // Every coordinate lies inside the 900-wide drawing (the leading space keeps
        // `viewBox="` out of the `x="` attributes).
        for attr in [" cx=\"", " x=\"", " x1=\"", " x2=\""] {
            for part in svg.split(attr).skip(1) {
                let v: f64 = part.split('"').next().unwrap_or("").parse().unwrap_or(-1.0);
                assert!((0.0..=900.0).contains(&v), "{attr}{v} outside the chart");
            }
        }
    }
}
