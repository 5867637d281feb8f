//! Owns: the `--report` page — one self-contained HTML file with the summary, SVG
//! plots (the published, delivered and slow subscribers' rates each on a panel and scale
//! of its own, p99 over time, broker RSS over time, the shared queue's depth over time,
//! the latency distribution on a percentile axis) and the raw JSON.
//! Does not: compute figures (they come from the [`RunReport`]).

use std::fmt::Write as _;

use crate::report::RunReport;
use crate::svg::{esc, XTicks};

/// The latency distribution's x axis: position `-log10(1 - p)`, so each "nine" is one
/// unit to the right.
const PERCENTILE_TICKS: [(f64, &str); 7] = [
    (0.0, "p0"),
    (std::f64::consts::LOG10_2, "p50"),
    (1.0, "p90"),
    (2.0, "p99"),
    (3.0, "p99.9"),
    (4.0, "p99.99"),
    (5.0, "p99.999"),
];

impl RunReport {
    /// A self-contained HTML page with SVG plots.
    pub fn html(&self) -> String {
        let mut h = String::new();
        let _ = write!(
            h,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>sluice-bench {}</title>\
             <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
             td:first-child{{text-align:left}}pre{{white-space:pre-wrap;overflow-wrap:anywhere}}\
             </style></head><body>",
            esc(&self.scenario)
        );
        let _ = write!(
            h,
            "<h1>sluice-bench: {}</h1><p>{} — {} — {} cores</p>",
            esc(&self.scenario),
            esc(&self.date_utc),
            esc(&self.broker.label),
            self.machine_cores
        );
        h.push_str("<pre>");
        h.push_str(&esc(&self.summary()));
        h.push_str("</pre>");
        let t: Vec<f64> = self.timeline.iter().map(|s| s.t).collect();
        // Published and delivered rates differ by the fan-out factor (×16 … ×10,000), and
        // the slow subscribers' rate by more: each gets a panel and a scale of its own.
        h.push_str("<h2>Rates over time</h2>");
        let panel = |title: &str, name: &str, colour: &str, ys: Vec<f64>| {
            crate::svg::line_chart(
                title,
                &t,
                &[(name, colour, ys)],
                "seconds",
                XTicks::Auto,
                false,
            )
        };
        h.push_str(&panel(
            "published messages per second",
            "published/s",
            "#1f77b4",
            self.timeline.iter().map(|s| s.published_per_s).collect(),
        ));
        h.push_str(&panel(
            "delivered messages per second, all subscribers",
            "delivered/s",
            "#d62728",
            self.timeline.iter().map(|s| s.delivered_per_s).collect(),
        ));
        if self.slow.subscribers > 0 {
            h.push_str(&panel(
                &format!(
                    "delivered messages per second, the {} slow subscriber(s)",
                    self.slow.subscribers
                ),
                "delivered/s, slow subscribers",
                "#e377c2",
                self.timeline
                    .iter()
                    .map(|s| s.slow_delivered_per_s)
                    .collect(),
            ));
        }
        // The slow subscribers' latency is seconds where the fast ones' is milliseconds:
        // the fast subscribers get a panel of their own.
        h.push_str("<h2>p99 latency over time</h2>");
        let ms = |ns: u64| ns as f64 / 1e6;
        h.push_str(&panel(
            if self.slow.subscribers > 0 {
                "p99 latency (ms), every subscriber"
            } else {
                "p99 latency (ms)"
            },
            "p99",
            "#2ca02c",
            self.timeline.iter().map(|s| ms(s.p99_ns)).collect(),
        ));
        if self.slow.subscribers > 0 {
            h.push_str(&panel(
                "p99 latency (ms), the fast subscribers",
                "p99, fast subscribers",
                "#17becf",
                self.timeline.iter().map(|s| ms(s.fast_p99_ns)).collect(),
            ));
        }
        h.push_str("<h2>Broker RSS over time</h2>");
        h.push_str(&crate::svg::line_chart(
            "broker RSS (MiB)",
            &t,
            &[(
                "RSS",
                "#8c564b",
                self.timeline
                    .iter()
                    .map(|s| s.broker_rss as f64 / (1u64 << 20) as f64)
                    .collect(),
            )],
            "seconds",
            XTicks::Auto,
            false,
        ));
        if self.timeline.iter().any(|s| s.queue_messages.is_some()) {
            h.push_str("<h2>Queue depth over time</h2>");
            h.push_str(&crate::svg::line_chart(
                "ready messages in the shared queue",
                &t,
                &[(
                    "messages",
                    "#ff7f0e",
                    self.timeline
                        .iter()
                        .map(|s| s.queue_messages.map_or(0.0, |q| q as f64))
                        .collect(),
                )],
                "seconds",
                XTicks::Auto,
                false,
            ));
        }
        h.push_str("<h2>Latency distribution</h2>");
        let xs: Vec<f64> = self
            .latency_distribution
            .iter()
            .map(|(p, _)| -(1.0 - p / 100.0).max(1e-6).log10())
            .collect();
        h.push_str(&crate::svg::line_chart(
            "latency (ms) by percentile",
            &xs,
            &[(
                "latency",
                "#9467bd",
                self.latency_distribution
                    .iter()
                    .map(|(_, v)| *v as f64 / 1e6)
                    .collect(),
            )],
            "percentile",
            XTicks::Named(&PERCENTILE_TICKS),
            true,
        ));
        h.push_str("<h2>Raw figures</h2><pre>");
        h.push_str(&esc(&serde_json::to_string_pretty(self).unwrap_or_default()));
        h.push_str("</pre></body></html>\n");
        h
    }
}
