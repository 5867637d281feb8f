//! Owns: the final summary table of a run, for a terminal (and the top of the
//! `--report` page): rates, latency (delivery, and confirm when publishers confirm),
//! the broker's fsyncs (or why not), the spread across subscribers, connections and
//! broker RSS per connection, CPU of broker and tool, pacing, flow control, and how
//! the slow subscribers ended.
//! Does not: compute figures (they are in the [`RunReport`]).

use std::fmt::Write as _;

use super::{Latency, RunReport};
use crate::stats::{fmt_bytes, fmt_ns, fmt_rate};

impl RunReport {
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
        if self.scenario == "idle" {
            self.connections.summary(&mut s);
            self.summary_notes(&mut s);
            return s;
        }
        let confirming = self.confirm_latency.is_some();
        let mut rows: Vec<(&str, String)> = vec![
            ("window", format!("{:.2} s (after warm-up)", self.window_s)),
            ("published/s", fmt_rate(self.publish_rate)),
            ("delivered/s", fmt_rate(self.deliver_rate)),
        ];
        if let Some(cl) = &self.confirm_latency {
            let in_flight = self.config.as_ref().map_or(0, |c| c.confirm);
            rows.push((
                "confirmed/s",
                format!(
                    "{} ({} acked in the window; at most {in_flight} in flight per publisher)",
                    fmt_rate(self.confirm_rate),
                    self.confirmed_in_window
                ),
            ));
            rows.push((
                "confirm latency",
                format!("{} (publish → basic.ack)", percentiles(cl)),
            ));
        }
        rows.extend([
            ("published", self.published.to_string()),
            (
                "delivered",
                format!("{} (expected {})", self.delivered, self.expected_delivered),
            ),
            (
                if confirming {
                    "deliver latency"
                } else {
                    "latency"
                },
                if self.latency.count == 0 && self.delivered_in_window == 0 {
                    "n/a (nothing delivered in the window)".to_string()
                } else {
                    format!(
                        "{}{}",
                        percentiles(&self.latency),
                        if confirming {
                            " (publish → deliver)"
                        } else {
                            ""
                        }
                    )
                },
            ),
        ]);
        if confirming || self.store.is_some() {
            rows.push(("fsyncs", self.store_line()));
        }
        rows.extend([
            (
                "broker CPU",
                format!(
                    "{} ns/delivered, {}{} cores",
                    opt(self.broker_cpu_ns_per_delivered, &|v| format!("{v:.0}")),
                    if confirming {
                        format!(
                            "{} ns/confirmed, ",
                            opt(self.broker_cpu_ns_per_confirmed, &|v| format!("{v:.0}"))
                        )
                    } else {
                        String::new()
                    },
                    opt(self.broker_cpu_cores, &|v| format!("{v:.2}"))
                ),
            ),
            (
                "broker RSS",
                format!(
                    "window min {} max {}; run max {}",
                    fmt_bytes(self.broker_rss_window_min_bytes.unwrap_or(0)),
                    fmt_bytes(self.broker_rss_window_max_bytes.unwrap_or(0)),
                    fmt_bytes(self.broker_rss_max_bytes)
                ),
            ),
            (
                "tool CPU",
                format!(
                    "{} ns/delivered ({:.0} ns/message handled), {:.2} cores",
                    if self.delivered_in_window > 0 {
                        format!("{:.0}", self.tool_cpu_ns_per_delivered)
                    } else {
                        "n/a".into()
                    },
                    self.tool_cpu_ns_per_message,
                    self.tool_cpu_cores
                ),
            ),
        ]);
        for (k, v) in rows {
            let _ = writeln!(s, "{k:<16} {v}");
        }
        self.spread.summary(&mut s);
        self.connections.summary(&mut s);
        self.summary_pacing(&mut s);
        if self.confirmed + self.nacked > 0 {
            let _ = writeln!(
                s,
                "{:<16} {} acked, {} nacked",
                "confirms", self.confirmed, self.nacked
            );
        }
        self.summary_flow(&mut s);
        self.summary_subscribers(&mut s);
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
        self.summary_notes(&mut s);
        s
    }

    /// The fsyncs row: from the broker's store counters, or why there are none.
    fn store_line(&self) -> String {
        match (&self.store, &self.store_unavailable) {
            (Some(st), _) => {
                let per = st
                    .confirmed_per_fsync
                    .map_or("n/a".into(), |v| format!("{v:.1}"));
                format!(
                    "{:.0}/s ({} fsyncs, {} commits over {:.1} s of the run, {} shards; {per} \
                     confirmed msgs per fsync; {} written{}) [{}]",
                    st.fsyncs_per_s,
                    st.fsyncs,
                    st.commits,
                    st.over_s,
                    st.shards,
                    fmt_bytes(st.bytes_written),
                    st.bytes_written_per_confirmed
                        .map_or(String::new(), |b| format!(", {b:.0} B per confirmed msg")),
                    st.source
                )
            }
            (None, Some(why)) => format!("n/a ({why})"),
            (None, None) => "n/a".into(),
        }
    }

    fn summary_notes(&self, s: &mut String) {
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if self.interrupted {
            let _ = writeln!(
                s,
                "note: interrupted (Ctrl-C); figures cover the run so far"
            );
        }
    }

    /// The pacing line: closed or open loop, and how long closed-loop publishers
    /// waited for their subscribers.
    fn summary_pacing(&self, s: &mut String) {
        let mut line = self.pacing.clone();
        if self.pacing_max_ahead.is_some() {
            let pubs = self.publishers.len().max(1) as f64;
            let ran_ms: u64 = self.publishers.iter().map(|p| p.run_ms).sum();
            let _ = write!(
                line,
                "; publishers waited for subscribers {:.0} % of the time ({:.1} s of {:.1} s each)",
                (100.0 * self.pacing_wait_ms as f64 / ran_ms.max(1) as f64).min(100.0),
                self.pacing_wait_ms as f64 / 1e3 / pubs,
                ran_ms as f64 / 1e3 / pubs
            );
            if let Some(at) = self.pacing_released_at_s {
                let _ = write!(
                    line,
                    "; no pacing subscriber left at {at:.1} s: open loop since"
                );
            }
            if self.pacing_stalls > 0 {
                let _ = write!(
                    line,
                    "; {} stalls, {} messages written off",
                    self.pacing_stalls, self.pacing_written_off
                );
            }
        }
        let _ = writeln!(s, "{:<16} {line}", "pacing");
    }

    /// Queue depth, flow control, calibration and broker log lines of the summary.
    fn summary_flow(&self, s: &mut String) {
        if let (Some(lo), Some(hi)) = (self.queue_messages_min, self.queue_messages_max) {
            let size = self.config.as_ref().map_or(0, |c| c.size) as u64;
            let _ = writeln!(
                s,
                "{:<16} window min {lo} max {hi} messages (bodies {} .. {})",
                "queue depth",
                fmt_bytes(lo * size),
                fmt_bytes(hi * size)
            );
        }
        let any_flow = self.flow_waits + self.flow_channel_stops + self.flow_connection_blocks > 0;
        if self.scenario == "flow" || any_flow {
            let pubs = self.publishers.len().max(1) as f64;
            let secs = |ms: u64| ms as f64 / 1e3;
            let _ = writeln!(
                s,
                "{:<16} publishers held {:.1} s in total ({:.1} s each), {} waits, {} timeouts; \
                 {} channel.flow stops, {} connection.blocked",
                "flow control",
                secs(self.flow_held_ms),
                secs(self.flow_held_ms) / pubs,
                self.flow_waits,
                self.flow_timeouts,
                self.flow_channel_stops,
                self.flow_connection_blocks
            );
            let _ = writeln!(
                s,
                "{:<16} publishers waited {:.1} s in total ({:.1} s each) for the socket",
                "backpressure",
                secs(self.send_blocked_ms),
                secs(self.send_blocked_ms) / pubs
            );
        }
        if let Some(c) = &self.calibration {
            let _ = writeln!(
                s,
                "{:<16} publishers' maximum {}/s over {:.1} s; slow rate {} x that = {} msg/s",
                "calibration",
                fmt_rate(c.publish_rate),
                c.window_s,
                c.fraction,
                c.slow_rate
            );
        }
        if !self.broker_log_codes.is_empty() {
            let codes: Vec<String> = self
                .broker_log_codes
                .iter()
                .map(|(code, n)| format!("{code} x{n}"))
                .collect();
            let _ = writeln!(s, "{:<16} {}", "broker log", codes.join(", "));
        }
    }

    /// Fast and slow subscribers apart, and how each slow one ended.
    fn summary_subscribers(&self, s: &mut String) {
        const MAX_LINES: usize = 20;
        // Printed for a slowsub run without slow subscribers too: it is the baseline
        // the fast subscribers of the other runs are compared with.
        if self.slow.subscribers > 0 || self.scenario == "slowsub" {
            for (name, g) in [
                ("fast subscribers", &self.fast),
                ("slow subscribers", &self.slow),
            ] {
                if g.subscribers == 0 {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "{name:<16} {}: {}/s each ({}/s together), p99 {}",
                    g.subscribers,
                    fmt_rate(g.deliver_rate_per_subscriber),
                    fmt_rate(g.deliver_rate),
                    fmt_ns(g.latency.p99_ns)
                );
            }
        }
        for c in self.channel_closes.iter().take(MAX_LINES) {
            let _ = writeln!(s, "{:<16} {c}", "channel closed");
        }
        if self.channel_closes.len() > MAX_LINES {
            let more = self.channel_closes.len() - MAX_LINES;
            let _ = writeln!(s, "{:<16} … and {more} more (see --json)", "channel closed");
        }
        if !self.cells.is_empty() {
            return;
        }
        let slow: Vec<_> = self.subscribers.iter().filter(|x| x.slow).collect();
        for x in slow.iter().take(MAX_LINES) {
            let closed = match (x.closed_code, &x.closed_text, x.closed_at_s) {
                (Some(c), t, _) if x.closed_after_run => format!(
                    ", closed {c} {:?} (seen after the run, behind {} deliveries already in \
                     its socket)",
                    t.as_deref().unwrap_or(""),
                    x.read_after_run
                ),
                (Some(c), t, at) => format!(
                    ", closed {c} {:?}{}",
                    t.as_deref().unwrap_or(""),
                    at.map_or(String::new(), |a| format!(" at {a:.1} s"))
                ),
                _ if x.read_after_run > 0 => format!(
                    " (skipped counted through {} more read after the run)",
                    x.read_after_run
                ),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "{:<16} subscriber {}: delivered {}, skipped {}{closed}",
                "slow subscriber", x.id, x.delivered, x.gaps,
            );
        }
        if slow.len() > MAX_LINES {
            let more = slow.len() - MAX_LINES;
            let _ = writeln!(
                s,
                "{:<16} … and {more} more (see --json)",
                "slow subscriber"
            );
        }
    }
}

/// `p50 … p90 … p99 … p99.9 … max …` of a latency.
fn percentiles(l: &Latency) -> String {
    format!(
        "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}{}",
        fmt_ns(l.p50_ns),
        fmt_ns(l.p90_ns),
        fmt_ns(l.p99_ns),
        fmt_ns(l.p999_ns),
        fmt_ns(l.max_ns),
        if l.from_intended_send_time {
            "  (from intended send time)"
        } else {
            ""
        }
    )
}
