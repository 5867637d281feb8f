//! Owns: the result of a run — [`RunReport`] with every figure (serialised as the
//! `--json` file), the final summary table, and the `--report` HTML page with SVG
//! plots (rates over time, latency over time, latency distribution).
//! Does not: measure anything (that is `stats` and the scenarios).

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::broker::BrokerUnderTest;
use crate::scenario::matrix::MatrixCell;
use crate::scenario::{Opts, PubResult, SubResult};
use crate::stats::{fmt_bytes, fmt_ns, fmt_rate, Sample};

/// Latency percentiles (publish → deliver), nanoseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// Measured from the intended send time of a fixed-rate schedule (no
    /// coordinated omission); otherwise from the actual send time.
    pub from_intended_send_time: bool,
}

impl Latency {
    pub fn from_hist(h: &Histogram<u64>, fixed_rate: bool) -> Latency {
        if h.is_empty() {
            return Latency {
                from_intended_send_time: fixed_rate,
                ..Default::default()
            };
        }
        Latency {
            count: h.len(),
            mean_ns: h.mean() as u64,
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            from_intended_send_time: fixed_rate,
        }
    }
}

pub struct Counts {
    pub published: u64,
    pub delivered: u64,
    pub expected_delivered: u64,
    pub window_s: f64,
    pub published_in_window: u64,
    pub delivered_in_window: u64,
}

/// The broker as the report names it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BrokerInfo {
    pub label: String,
    pub url: String,
    pub pid: Option<u32>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunReport {
    pub tool: String,
    pub version: String,
    pub scenario: String,
    pub date_utc: String,
    pub machine_cores: usize,
    pub broker: BrokerInfo,
    pub config: Option<Opts>,
    /// Messages published over the whole run (warm-up and drain included).
    pub published: u64,
    /// Messages delivered to all subscribers over the whole run.
    pub delivered: u64,
    /// Deliveries expected from `published` (× subscribers for fanout).
    pub expected_delivered: u64,
    /// Length of the measured window (after warm-up), seconds.
    pub window_s: f64,
    pub published_in_window: u64,
    pub delivered_in_window: u64,
    pub publish_rate: f64,
    pub deliver_rate: f64,
    pub latency: Latency,
    /// Broker CPU (user+system) during the window, ns.
    pub broker_cpu_ns: Option<u64>,
    pub broker_cpu_ns_per_delivered: Option<f64>,
    /// Broker CPU cores busy on average during the window.
    pub broker_cpu_cores: Option<f64>,
    pub broker_rss_max_bytes: u64,
    /// The tool's own CPU during the window, ns (in-process broker threads excluded).
    pub tool_cpu_ns: u64,
    /// Tool CPU per message handled (published + delivered), ns.
    pub tool_cpu_ns_per_message: f64,
    pub tool_cpu_cores: f64,
    pub subscribers: Vec<SubResult>,
    pub publishers: Vec<PubResult>,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    pub flow_held_ms: u64,
    pub flow_timeouts: u64,
    pub channel_closes: Vec<String>,
    pub timeline: Vec<Sample>,
    /// (percentile, ns) points of the latency distribution.
    pub latency_distribution: Vec<(f64, u64)>,
    pub cells: Vec<MatrixCell>,
    pub notes: Vec<String>,
    pub interrupted: bool,
}

/// Today's date and time in UTC, from the system clock.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn distribution(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for p in [
        0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
    ] {
        out.push((p, h.value_at_percentile(p)));
    }
    out
}

impl RunReport {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: &str,
        broker: &BrokerUnderTest,
        opts: &Opts,
        c: Counts,
        latency: Latency,
        broker_cpu_ns: Option<u64>,
        rss_max: u64,
        tool_cpu_ns: u64,
        subscribers: Vec<SubResult>,
        publishers: Vec<PubResult>,
        timeline: Vec<Sample>,
        hist: &Histogram<u64>,
        notes: Vec<String>,
        interrupted: bool,
    ) -> RunReport {
        let w = c.window_s.max(1e-9);
        let handled = (c.published_in_window + c.delivered_in_window).max(1);
        let channel_closes = subscribers
            .iter()
            .filter_map(|s| {
                s.closed_code.map(|code| {
                    format!(
                        "subscriber {}: {code} {}",
                        s.id,
                        s.closed_text.clone().unwrap_or_default()
                    )
                })
            })
            .collect();
        RunReport {
            tool: "sluice-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            scenario: scenario.into(),
            date_utc: utc_now(),
            machine_cores: cores(),
            broker: BrokerInfo {
                label: broker.label.clone(),
                url: broker.url.clone(),
                pid: broker.pid(),
            },
            config: Some(opts.clone()),
            published: c.published,
            delivered: c.delivered,
            expected_delivered: c.expected_delivered,
            window_s: c.window_s,
            published_in_window: c.published_in_window,
            delivered_in_window: c.delivered_in_window,
            publish_rate: c.published_in_window as f64 / w,
            deliver_rate: c.delivered_in_window as f64 / w,
            latency,
            broker_cpu_ns,
            broker_cpu_ns_per_delivered: broker_cpu_ns
                .map(|n| n as f64 / c.delivered_in_window.max(1) as f64),
            broker_cpu_cores: broker_cpu_ns.map(|n| n as f64 / 1e9 / w),
            broker_rss_max_bytes: rss_max,
            tool_cpu_ns,
            tool_cpu_ns_per_message: tool_cpu_ns as f64 / handled as f64,
            tool_cpu_cores: tool_cpu_ns as f64 / 1e9 / w,
            confirmed: publishers.iter().map(|p| p.confirmed).sum(),
            nacked: publishers.iter().map(|p| p.nacked).sum(),
            returned: publishers.iter().map(|p| p.returned).sum(),
            flow_held_ms: publishers.iter().map(|p| p.flow_held_ms).sum(),
            flow_timeouts: publishers.iter().map(|p| p.flow_timeouts).sum(),
            channel_closes,
            subscribers,
            publishers,
            timeline,
            latency_distribution: distribution(hist),
            cells: Vec::new(),
            notes,
            interrupted,
        }
    }

    /// Sums several runs (the matrix's cells) into one report; latency is the worst
    /// cell's.
    pub fn combine(
        scenario: &str,
        opts: &Opts,
        parts: Vec<RunReport>,
        interrupted: bool,
    ) -> RunReport {
        let mut r = RunReport {
            tool: "sluice-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            scenario: scenario.into(),
            date_utc: utc_now(),
            machine_cores: cores(),
            config: Some(opts.clone()),
            interrupted,
            ..Default::default()
        };
        let mut t_off = 0.0;
        let mut broker_cpu = Some(0u64);
        for p in parts {
            r.broker = p.broker.clone();
            r.published += p.published;
            r.delivered += p.delivered;
            r.expected_delivered += p.expected_delivered;
            r.window_s += p.window_s;
            r.published_in_window += p.published_in_window;
            r.delivered_in_window += p.delivered_in_window;
            r.tool_cpu_ns += p.tool_cpu_ns;
            broker_cpu = match (broker_cpu, p.broker_cpu_ns) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            r.broker_rss_max_bytes = r.broker_rss_max_bytes.max(p.broker_rss_max_bytes);
            if p.latency.p99_ns >= r.latency.p99_ns {
                r.latency = p.latency.clone();
                r.latency_distribution = p.latency_distribution.clone();
            }
            r.confirmed += p.confirmed;
            r.nacked += p.nacked;
            r.returned += p.returned;
            r.flow_held_ms += p.flow_held_ms;
            r.flow_timeouts += p.flow_timeouts;
            r.channel_closes.extend(p.channel_closes);
            let last_t = p.timeline.last().map_or(0.0, |s| s.t);
            r.timeline.extend(p.timeline.into_iter().map(|mut s| {
                s.t += t_off;
                s
            }));
            t_off += last_t;
            r.subscribers.extend(p.subscribers);
            r.publishers.extend(p.publishers);
        }
        let w = r.window_s.max(1e-9);
        r.publish_rate = r.published_in_window as f64 / w;
        r.deliver_rate = r.delivered_in_window as f64 / w;
        r.broker_cpu_ns = broker_cpu;
        r.broker_cpu_ns_per_delivered =
            broker_cpu.map(|n| n as f64 / r.delivered_in_window.max(1) as f64);
        r.broker_cpu_cores = broker_cpu.map(|n| n as f64 / 1e9 / w);
        r.tool_cpu_ns_per_message =
            r.tool_cpu_ns as f64 / (r.published_in_window + r.delivered_in_window).max(1) as f64;
        r.tool_cpu_cores = r.tool_cpu_ns as f64 / 1e9 / w;
        r
    }

    /// The final summary table, for a terminal.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let opt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("n/a".to_string(), f);
        let _ = writeln!(
            s,
            "\n== sluice-bench {} — {} ==",
            self.scenario, self.date_utc
        );
        let _ = writeln!(s, "broker           {}", self.broker.label);
        let _ = writeln!(s, "machine          {} cores", self.machine_cores);
        let rows: Vec<(&str, String)> = vec![
            ("window", format!("{:.2} s (after warm-up)", self.window_s)),
            ("published/s", fmt_rate(self.publish_rate)),
            ("delivered/s", fmt_rate(self.deliver_rate)),
            ("published", self.published.to_string()),
            (
                "delivered",
                format!("{} (expected {})", self.delivered, self.expected_delivered),
            ),
            (
                "latency",
                format!(
                    "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}{}",
                    fmt_ns(self.latency.p50_ns),
                    fmt_ns(self.latency.p90_ns),
                    fmt_ns(self.latency.p99_ns),
                    fmt_ns(self.latency.p999_ns),
                    fmt_ns(self.latency.max_ns),
                    if self.latency.from_intended_send_time {
                        "  (from intended send time)"
                    } else {
                        ""
                    }
                ),
            ),
            (
                "broker CPU",
                format!(
                    "{} ns/delivered, {} cores",
                    opt(self.broker_cpu_ns_per_delivered, &|v| format!("{v:.0}")),
                    opt(self.broker_cpu_cores, &|v| format!("{v:.2}"))
                ),
            ),
            ("broker RSS max", fmt_bytes(self.broker_rss_max_bytes)),
            (
                "tool CPU",
                format!(
                    "{:.0} ns/message handled, {:.2} cores",
                    self.tool_cpu_ns_per_message, self.tool_cpu_cores
                ),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(s, "{k:<16} {v}");
        }
        if self.confirmed + self.nacked > 0 {
            let _ = writeln!(
                s,
                "{:<16} {} acked, {} nacked",
                "confirms", self.confirmed, self.nacked
            );
        }
        if self.flow_held_ms > 0 || self.flow_timeouts > 0 {
            let _ = writeln!(
                s,
                "{:<16} held {} ms in total, {} timeouts",
                "flow control", self.flow_held_ms, self.flow_timeouts
            );
        }
        for c in &self.channel_closes {
            let _ = writeln!(s, "{:<16} {c}", "channel closed");
        }
        let slow: Vec<_> = self.subscribers.iter().filter(|x| x.slow).collect();
        if !slow.is_empty() && self.cells.is_empty() {
            for x in slow {
                let _ = writeln!(
                    s,
                    "{:<16} subscriber {}: delivered {}, skipped {}{}",
                    "slow subscriber",
                    x.id,
                    x.delivered,
                    x.gaps,
                    x.closed_code
                        .map_or(String::new(), |c| format!(", closed {c}"))
                );
            }
        }
        if !self.cells.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<11} {:<6} {:<12} {:>9} {:>10} {:>6} {:>9} {:>8} {:>8} {:>6}",
                "ack",
                "mode",
                "topic",
                "published",
                "fast min",
                "fast ok",
                "slow got",
                "fired",
                "expected",
                "as cfg"
            );
            for c in &self.cells {
                let _ = writeln!(
                    s,
                    "{:<11} {:<6} {:<12} {:>9} {:>10} {:>6} {:>9} {:>8} {:>8} {:>6}",
                    format!("{:?}", c.ack),
                    format!("{:?}", c.consume),
                    if c.durable { "durable" } else { "non-durable" },
                    c.published,
                    c.fast_min_delivered,
                    if c.fast_complete { "yes" } else { "NO" },
                    c.slow_delivered,
                    format!("{:?}", c.policy_fired),
                    format!("{:?}", c.policy_expected),
                    if c.as_configured { "yes" } else { "NO" },
                );
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if self.interrupted {
            let _ = writeln!(
                s,
                "note: interrupted (Ctrl-C); figures cover the run so far"
            );
        }
        s
    }

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
        h.push_str(&crate::svg::line_chart(
            "messages per second",
            &t,
            &[
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
            ],
            "seconds",
            false,
        ));
        h.push_str("<h2>p99 latency over time</h2>");
        h.push_str(&crate::svg::line_chart(
            "p99 latency (ms)",
            &t,
            &[(
                "p99",
                "#2ca02c",
                self.timeline
                    .iter()
                    .map(|s| s.p99_ns as f64 / 1e6)
                    .collect(),
            )],
            "seconds",
            false,
        ));
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

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
