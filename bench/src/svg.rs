//! Owns: drawing simple line charts as inline SVG for the HTML report (axes, ticks,
//! a legend, one polyline per series), and escaping text for that markup ([`esc`],
//! which the page in `html.rs` uses too: html → svg, never back).
//! Does not: depend on a plotting crate: a few line charts need ~100 lines of text
//! output, not a font and raster stack.

use std::fmt::Write as _;

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn label(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v.abs() >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v.abs() >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A line chart: `xs` shared by every series `(name, colour, ys)`.
pub fn line_chart(
    title: &str,
    xs: &[f64],
    series: &[(&str, &str, Vec<f64>)],
    xlabel: &str,
    points: bool,
) -> String {
    let (w, hgt, l, r, t, b) = (900.0, 320.0, 70.0, 20.0, 30.0, 45.0);
    let pw = w - l - r;
    let ph = hgt - t - b;
    let xmin = xs.iter().cloned().fold(f64::INFINITY, f64::min);
    let xmax = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (xmin, xmax) = if xs.is_empty() || xmax <= xmin {
        (0.0, 1.0)
    } else {
        (xmin, xmax)
    };
    let ymax = nice_max(
        series
            .iter()
            .flat_map(|(_, _, ys)| ys.iter().cloned())
            .fold(0.0, f64::max),
    );
    let sx = |x: f64| l + (x - xmin) / (xmax - xmin) * pw;
    let sy = |y: f64| t + ph - (y / ymax) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" viewBox=\"0 0 {w} {hgt}\" font-size=\"12\">"
    );
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"18\" font-weight=\"bold\">{}</text>",
        l,
        esc(title)
    );
    for i in 0..=5 {
        let y = ymax * f64::from(i) / 5.0;
        let py = sy(y);
        let _ = write!(
            s,
            "<line x1=\"{l}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l + pw,
            l - 6.0,
            py + 4.0,
            label(y)
        );
    }
    for i in 0..=6 {
        let x = xmin + (xmax - xmin) * f64::from(i) / 6.0;
        let px = sx(x);
        let _ = write!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#999\"/><text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            t + ph,
            t + ph + 5.0,
            t + ph + 18.0,
            label(x)
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
        let pts: Vec<String> = xs
            .iter()
            .zip(ys)
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            pts.join(" ")
        );
        if points {
            for p in &pts {
                let mut it = p.split(',');
                let (x, y) = (it.next().unwrap_or("0"), it.next().unwrap_or("0"));
                let _ = write!(
                    s,
                    "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{colour}\"/>"
                );
            }
        }
        let ly = t + 14.0 + 16.0 * i as f64;
        let _ = write!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"4\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            l + pw - 150.0,
            ly - 4.0,
            l + pw - 134.0,
            ly,
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
