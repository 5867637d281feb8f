//! Owns: the figures of a run at scale — [`Connections`] (how many, which subscriber
//! client, how long the set-up took, broker RSS before the subscribers connected,
//! after the set-up, at its peak and after they all disconnected and a settle
//! period, the highest it ever was, and per connection) and [`Spread`] (each
//! subscriber's p99 and delivered count, summarised as min / median / max across
//! subscribers) — and their summary lines.
//! Does not: measure (the harness samples RSS, subscribers keep their histograms).

use std::fmt::Write as _;

use serde::Serialize;

use super::SubResult;
use crate::stats::{fmt_bytes, fmt_ns};

/// Connections of a run and what they cost the broker in memory.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Connections {
    /// Connections the run held open (subscribers + publishers; idle: all).
    pub connections: usize,
    pub subscriber_connections: usize,
    /// `wire` (the tool's lean consumer) or `full` (sluice's client), or empty.
    pub subscriber_client: String,
    /// Set-ups in flight at most.
    pub setup_concurrency: usize,
    /// Seconds from the first subscriber's connect to the last one consuming.
    pub setup_s: f64,
    /// Broker RSS before any subscriber connected (bytes).
    pub broker_rss_baseline_bytes: Option<u64>,
    /// After the set-up, before publishing (idle: with every connection open).
    pub broker_rss_start_bytes: Option<u64>,
    /// Highest sampled from the set-up to the end of the drain.
    pub broker_rss_peak_bytes: Option<u64>,
    /// After every connection closed and `settle_s`.
    pub broker_rss_after_disconnect_bytes: Option<u64>,
    /// The highest RSS the broker ever had (`VmHWM`, read after the disconnect): unlike
    /// the sampled peak, it holds the moments between samples, the set-up's and the
    /// disconnect's included.
    pub broker_rss_highest_ever_bytes: Option<u64>,
    pub settle_s: f64,
    /// (peak − baseline) / connections opened (idle: (start − baseline) / N).
    pub broker_rss_per_connection_bytes: Option<f64>,
    /// RSS after disconnect as a percentage of the start value.
    pub rss_after_disconnect_pct_of_start: Option<f64>,
    /// RSS after disconnect minus the baseline (bytes; negative when below).
    pub rss_after_disconnect_above_baseline_bytes: Option<i64>,
    /// The tool's own RSS after the set-up (bytes): what its connections cost it.
    pub tool_rss_bytes: u64,
}

impl Connections {
    /// Derives the per-connection and after-disconnect figures from the samples.
    pub fn derive(&mut self, per: usize) {
        let (base, start, after) = (
            self.broker_rss_baseline_bytes,
            self.broker_rss_start_bytes,
            self.broker_rss_after_disconnect_bytes,
        );
        let top = self.broker_rss_peak_bytes.or(start);
        self.broker_rss_per_connection_bytes = match (base, top) {
            (Some(b), Some(t)) if per > 0 => Some(t.saturating_sub(b) as f64 / per as f64),
            _ => None,
        };
        self.rss_after_disconnect_pct_of_start = match (after, start) {
            (Some(a), Some(s)) if s > 0 => Some(100.0 * a as f64 / s as f64),
            _ => None,
        };
        self.rss_after_disconnect_above_baseline_bytes = match (after, base) {
            (Some(a), Some(b)) => Some(a as i64 - b as i64),
            _ => None,
        };
    }

    /// The summary lines (nothing when no connection was counted).
    pub fn summary(&self, s: &mut String) {
        if self.connections == 0 {
            return;
        }
        let b = |v: Option<u64>| fmt_bytes(v.unwrap_or(0));
        let mut line = format!("{}", self.connections);
        if self.subscriber_connections > 0 {
            let _ = write!(
                line,
                " ({} subscribers, {} client)",
                self.subscriber_connections, self.subscriber_client
            );
        }
        let _ = write!(
            line,
            "; set up in {:.2} s, at most {} at once; tool RSS {}",
            self.setup_s,
            self.setup_concurrency,
            fmt_bytes(self.tool_rss_bytes)
        );
        let _ = writeln!(s, "{:<16} {line}", "connections");
        let mut rss = format!(
            "before {}  start {}  peak {}  after disconnect (+{:.0} s) {}",
            b(self.broker_rss_baseline_bytes),
            b(self.broker_rss_start_bytes),
            b(self.broker_rss_peak_bytes),
            self.settle_s,
            b(self.broker_rss_after_disconnect_bytes),
        );
        if let Some(p) = self.rss_after_disconnect_pct_of_start {
            let _ = write!(rss, " = {p:.0} % of start");
        }
        if let Some(h) = self.broker_rss_highest_ever_bytes {
            let _ = write!(rss, "; highest ever (VmHWM) {}", fmt_bytes(h));
        }
        let _ = writeln!(s, "{:<16} {rss}", "broker RSS/conn");
        if let Some(per) = self.broker_rss_per_connection_bytes {
            let _ = writeln!(s, "{:<16} {:.1} KiB per connection", "", per / 1024.0);
        }
    }
}

/// How evenly the subscribers (those not throttled) were served.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Spread {
    /// Subscribers counted (not throttled).
    pub subscribers: usize,
    /// Of each subscriber's p99 over its deliveries in the measured window.
    pub p99_min_ns: u64,
    pub p99_median_ns: u64,
    pub p99_max_ns: u64,
    /// The subscriber with the highest p99.
    pub p99_max_subscriber: Option<usize>,
    /// Messages each subscriber received over the whole run.
    pub delivered_min: u64,
    pub delivered_max: u64,
    /// Messages each subscriber received in the measured window.
    pub window_delivered_min: u64,
    pub window_delivered_max: u64,
    /// Deliveries that came out of order, all subscribers together.
    pub reordered: u64,
}

impl Spread {
    pub fn of(subs: &[SubResult]) -> Spread {
        let fast: Vec<&SubResult> = subs.iter().filter(|s| !s.slow).collect();
        if fast.is_empty() {
            return Spread::default();
        }
        let mut p99s: Vec<(u64, usize)> = fast
            .iter()
            .filter_map(|s| s.p99_ns.map(|p| (p, s.id)))
            .collect();
        p99s.sort_unstable();
        let pick = |i: usize| p99s.get(i).map_or(0, |p| p.0);
        let delivered = fast.iter().map(|s| s.delivered);
        let window = fast.iter().map(|s| s.measured);
        Spread {
            subscribers: fast.len(),
            p99_min_ns: pick(0),
            p99_median_ns: pick(p99s.len() / 2),
            p99_max_ns: p99s.last().map_or(0, |p| p.0),
            p99_max_subscriber: p99s.last().map(|p| p.1),
            delivered_min: delivered.clone().min().unwrap_or(0),
            delivered_max: delivered.max().unwrap_or(0),
            window_delivered_min: window.clone().min().unwrap_or(0),
            window_delivered_max: window.max().unwrap_or(0),
            reordered: fast.iter().map(|s| s.reordered).sum(),
        }
    }

    /// The summary lines (nothing without subscribers).
    pub fn summary(&self, s: &mut String) {
        if self.subscribers == 0 {
            return;
        }
        let _ = writeln!(
            s,
            "{:<16} p99 min {}  median {}  max {}{} over {} subscribers",
            "per subscriber",
            fmt_ns(self.p99_min_ns),
            fmt_ns(self.p99_median_ns),
            fmt_ns(self.p99_max_ns),
            self.p99_max_subscriber
                .map_or(String::new(), |i| format!(" (subscriber {i})")),
            self.subscribers
        );
        let _ = writeln!(
            s,
            "{:<16} delivered min {} max {} (run); in window min {} max {}{}",
            "",
            self.delivered_min,
            self.delivered_max,
            self.window_delivered_min,
            self.window_delivered_max,
            if self.reordered > 0 {
                format!("; {} OUT OF ORDER", self.reordered)
            } else {
                String::new()
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_subscribers() {
        let sub = |id: usize, p99: Option<u64>, delivered: u64, slow: bool| SubResult {
            id,
            p99_ns: p99,
            delivered,
            measured: delivered / 2,
            slow,
            ..Default::default()
        };
        let subs = vec![
            sub(0, Some(5), 10, false),
            sub(1, Some(1), 12, false),
            sub(2, Some(9), 11, false),
            sub(3, Some(1000), 1, true),
        ];
        let s = Spread::of(&subs);
        assert_eq!(s.subscribers, 3);
        assert_eq!((s.p99_min_ns, s.p99_median_ns, s.p99_max_ns), (1, 5, 9));
        assert_eq!(s.p99_max_subscriber, Some(2));
        assert_eq!((s.delivered_min, s.delivered_max), (10, 12));
        assert_eq!((s.window_delivered_min, s.window_delivered_max), (5, 6));
    }

    #[test]
    fn rss_per_connection_and_return() {
        let mut c = Connections {
            connections: 101,
            broker_rss_baseline_bytes: Some(100),
            broker_rss_start_bytes: Some(1100),
            broker_rss_peak_bytes: Some(2100),
            broker_rss_after_disconnect_bytes: Some(550),
            ..Default::default()
        };
        c.derive(100);
        assert_eq!(c.broker_rss_per_connection_bytes, Some(20.0));
        assert_eq!(c.rss_after_disconnect_pct_of_start, Some(50.0));
        assert_eq!(c.rss_after_disconnect_above_baseline_bytes, Some(450));
    }
}
