//! Owns: the `--report` page — one self-contained HTML file with the summary, SVG
//! plots (rates over time, p99 over time, broker RSS over time, the shared queue's
//! depth over time, the latency distribution) and the raw JSON.
//! Does not: compute figures (they come from the [`RunReport`]).

use std::fmt::Write as _;

use crate::report::RunReport;
use crate::svg::esc;

impl RunReport {
    /// A self-contained HTML page with SVG plots.
    pub fn html(&self) -> String {
        let mut h = String::new();
        let _ = write!(
            h,
            "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>sluice-bench {}</title>\
             <style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}\
             td:first-child{{text-align:left}}</style></head><body>",
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
        h.push_str("<h2>Rates over time</h2>");
        let mut rates = vec![
            (
                "published/s",
                "#1f77b4",
                self.timeline.iter().map(|s| s.published_per_s).collect(),
            ),
            (
                "delivered/s",
                "#d62728",
                self.timeline.iter().map(|s| s.delivered_per_s).collect(),
            ),
        ];
        if self.slow.subscribers > 0 {
            rates.push((
                "delivered/s, slow subscribers",
                "#e377c2",
                self.timeline
                    .iter()
                    .map(|s| s.slow_delivered_per_s)
                    .collect(),
            ));
        }
        h.push_str(&crate::svg::line_chart(
            "messages per second",
            &t,
            &rates,
            "seconds",
            false,
        ));
        h.push_str("<h2>p99 latency over time</h2>");
        let mut p99s = vec![(
            "p99",
            "#2ca02c",
            self.timeline
                .iter()
                .map(|s| s.p99_ns as f64 / 1e6)
                .collect::<Vec<f64>>(),
        )];
        if self.slow.subscribers > 0 {
            p99s.push((
                "p99, fast subscribers",
                "#17becf",
                self.timeline
                    .iter()
                    .map(|s| s.fast_p99_ns as f64 / 1e6)
                    .collect(),
            ));
        }
        h.push_str(&crate::svg::line_chart(
            "p99 latency (ms)",
            &t,
            &p99s,
            "seconds",
            false,
        ));
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
            "percentile (0 = p0, 1 = p90, 2 = p99, 3 = p99.9, …)",
            true,
        ));
        h.push_str("<h2>Raw figures</h2><pre>");
        h.push_str(&esc(&serde_json::to_string_pretty(self).unwrap_or_default()));
        h.push_str("</pre></body></html>\n");
        h
    }
}
