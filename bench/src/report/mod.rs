//! Owns: the result of a run — [`RunReport`] with every figure (serialised as the
//! `--json` file), built from what the harness gathered ([`RunData`]) or summed over
//! the matrix's cells, plus the broker's store counters read from its log after it
//! stopped ([`StoreReport`]: fsyncs per second, messages per fsync); the figures at scale (connections, RSS per connection, the
//! spread across subscribers) are in [`scale`], each subscriber's, publisher's and
//! matrix cell's outcome in `outcome.rs`, the summary table in `summary.rs` (the
//! `--report` page is `html.rs`).
//! Does not: measure anything (that is `stats` and the scenarios), or import from
//! `scenario` (the scenarios fill in the report; the run's configuration is
//! `crate::opts`).

mod outcome;
pub mod scale;
mod summary;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::broker::{BrokerUnderTest, StoreCounters};
use crate::opts::Opts;
use crate::stats::Sample;

pub use outcome::{MatrixCell, PubResult, SubResult};
pub use scale::{Connections, Spread};

/// Latency percentiles, nanoseconds: publish → deliver (`latency`), or publish →
/// its `basic.ack` from the broker (`confirm_latency`).
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
    /// The measured window on the timeline's clock (seconds since publishing started).
    pub window_start_s: f64,
    pub window_end_s: f64,
    pub published_in_window: u64,
    pub delivered_in_window: u64,
    /// Publisher confirms (acks) received in the measured window.
    pub confirmed_in_window: u64,
    /// Seconds from the first publish to the end of the drain.
    pub run_s: f64,
}

/// What one group of subscribers (fast, or throttled to `--slow-rate`) received.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GroupReport {
    pub subscribers: usize,
    /// Over the whole run.
    pub delivered: u64,
    pub delivered_in_window: u64,
    /// Deliveries per second to the whole group in the measured window.
    pub deliver_rate: f64,
    /// The same per subscriber of the group.
    pub deliver_rate_per_subscriber: f64,
    pub latency: Latency,
}

/// What the run's pacer saw (see `scenario::pacing`).
pub struct PacingData {
    /// Messages written off after the subscribers stood still while publishers waited.
    pub written_off: u64,
    pub stalls: u64,
}

/// How the publishers were paced, as the report says it: `closed loop, max backlog N`
/// or `open loop` (a fixed rate is open loop by definition).
pub fn pacing_label(opts: &Opts) -> String {
    if opts.rate > 0 {
        format!("open loop (fixed rate {}/s per publisher)", opts.rate)
    } else if opts.max_ahead > 0 {
        format!("closed loop, max backlog {}", opts.max_ahead)
    } else {
        "open loop".into()
    }
}

/// Everything [`RunReport::new`] is made from.
pub struct RunData {
    pub counts: Counts,
    pub latency: Latency,
    /// Publish → `basic.ack` of the measured window, when publishers confirm.
    pub confirm_latency: Option<Latency>,
    pub hist: Histogram<u64>,
    pub fast: GroupReport,
    pub slow: GroupReport,
    pub broker_cpu_ns: Option<u64>,
    pub rss_max: u64,
    pub tool_cpu_ns: u64,
    pub subscribers: Vec<SubResult>,
    pub publishers: Vec<PubResult>,
    pub timeline: Vec<Sample>,
    pub broker_log_codes: BTreeMap<String, u64>,
    pub pacing: PacingData,
    pub connections: Connections,
    pub notes: Vec<String>,
    pub interrupted: bool,
}

/// The publishers' maximum rate measured before the run, and the slow rate derived
/// from it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Calibration {
    /// Length of the calibration's measured window (seconds).
    pub window_s: f64,
    /// Messages per second all publishers together published, unthrottled consumers.
    pub publish_rate: f64,
    /// The fraction asked for (`--slow-fraction`).
    pub fraction: f64,
    /// The resulting rate of each throttled subscriber (msg/s).
    pub slow_rate: u32,
}

/// The broker's persistent-store counters — the `MST-1003 : Closed : <commits>
/// commits, <fsyncs> fsyncs, <bytes> bytes written` line each shard logs at shutdown,
/// summed over the shards — and what they come to over the run. They cover the
/// broker's whole life (set-up, warm-up and drain included), so they are divided by
/// the run's length from the first publish to the end of the drain (`run_s`), and
/// by every message confirmed in the run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreReport {
    /// Where the lines were read: the embedded broker's output or `--broker-log`.
    pub source: String,
    /// MST-1003 lines found (one per shard).
    pub shards: usize,
    pub commits: u64,
    pub fsyncs: u64,
    pub bytes_written: u64,
    /// Seconds the counts are divided by (`run_s`).
    pub over_s: f64,
    pub fsyncs_per_s: f64,
    pub commits_per_s: f64,
    /// Messages confirmed in the whole run per fsync (the group commit's batch).
    pub confirmed_per_fsync: Option<f64>,
    /// Bytes written per message confirmed in the whole run.
    pub bytes_written_per_confirmed: Option<f64>,
}

impl StoreReport {
    fn of(c: &StoreCounters, source: &str, run_s: f64, confirmed: u64) -> StoreReport {
        let s = run_s.max(1e-9);
        let per = |n: u64| (n > 0).then(|| confirmed as f64 / n as f64);
        StoreReport {
            source: source.into(),
            shards: c.shards,
            commits: c.commits,
            fsyncs: c.fsyncs,
            bytes_written: c.bytes,
            over_s: run_s,
            fsyncs_per_s: c.fsyncs as f64 / s,
            commits_per_s: c.commits as f64 / s,
            confirmed_per_fsync: per(c.fsyncs),
            bytes_written_per_confirmed: (confirmed > 0).then(|| c.bytes as f64 / confirmed as f64),
        }
    }
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
    /// Publish → deliver (from the stamp in the body).
    pub latency: Latency,
    /// Publisher confirms (acks) received in the measured window, and per second.
    pub confirmed_in_window: u64,
    pub confirm_rate: f64,
    /// Publish → its `basic.ack` from the broker, each message timed on its own
    /// (a `multiple` ack settles many at once); `null` without `--confirm`.
    pub confirm_latency: Option<Latency>,
    /// Seconds from the first publish to the end of the drain (warm-up included).
    pub run_s: f64,
    /// The broker's store counters (fsyncs), read from its log after it stopped;
    /// `null` when not available (`store_unavailable` says why).
    pub store: Option<StoreReport>,
    pub store_unavailable: Option<String>,
    /// Broker CPU (user+system) during the window, ns.
    pub broker_cpu_ns: Option<u64>,
    pub broker_cpu_ns_per_delivered: Option<f64>,
    /// The same per message confirmed in the window (runs with `--confirm`).
    pub broker_cpu_ns_per_confirmed: Option<f64>,
    /// Broker CPU cores busy on average during the window.
    pub broker_cpu_cores: Option<f64>,
    pub broker_rss_max_bytes: u64,
    /// The measured window (after warm-up) on the timeline's clock, seconds.
    pub window_start_s: f64,
    pub window_end_s: f64,
    /// Least and most broker RSS sampled in the measured window (bytes).
    pub broker_rss_window_min_bytes: Option<u64>,
    pub broker_rss_window_max_bytes: Option<u64>,
    /// Least and most ready messages in the shared queue sampled in the window.
    pub queue_messages_min: Option<u64>,
    pub queue_messages_max: Option<u64>,
    /// The tool's own CPU during the window, ns (in-process broker threads excluded).
    pub tool_cpu_ns: u64,
    /// Tool CPU per message handled (published + delivered), ns.
    pub tool_cpu_ns_per_message: f64,
    /// Tool CPU per message delivered, ns (comparable with the broker's).
    pub tool_cpu_ns_per_delivered: f64,
    pub tool_cpu_cores: f64,
    pub subscribers: Vec<SubResult>,
    pub publishers: Vec<PubResult>,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    /// Publisher time held by flow control, all publishers together (ms).
    pub flow_held_ms: u64,
    pub flow_waits: u64,
    /// Publisher time spent waiting for the socket, all publishers together (ms).
    pub send_blocked_ms: u64,
    pub flow_timeouts: u64,
    pub flow_channel_stops: u64,
    pub flow_connection_blocks: u64,
    /// `closed loop, max backlog N` (each `--rate 0` publisher at most N messages
    /// per subscriber ahead of the slowest subscriber that is not throttled, or of
    /// all consumers of a shared queue), `open loop`, or `open loop (fixed rate …)`.
    pub pacing: String,
    /// `--max-backlog` of a closed-loop run (the name before it: max ahead).
    pub pacing_max_ahead: Option<u64>,
    /// Publisher time spent waiting for subscribers, all publishers together (ms):
    /// while waiting, the rate was the subscribers' capacity.
    pub pacing_wait_ms: u64,
    pub pacing_waits: u64,
    /// Messages written off because no subscriber progressed for 2 s while a
    /// publisher waited (lost messages, a wedged consumer), and how often.
    pub pacing_written_off: u64,
    pub pacing_stalls: u64,
    /// When the last pacing subscriber went (earliest publisher to notice): open loop
    /// from then on.
    pub pacing_released_at_s: Option<f64>,
    /// Subscribers not throttled, and throttled ones, apart.
    pub fast: GroupReport,
    pub slow: GroupReport,
    /// Each subscriber's p99 and delivered count, min / median / max across them.
    pub spread: Spread,
    /// Connections, set-up time, broker RSS per connection and after disconnect.
    pub connections: Connections,
    pub channel_closes: Vec<String>,
    /// Operational log codes the embedded broker process wrote during the run
    /// (`QUE-1003`, `SUB-…`), with counts; empty for other brokers.
    pub broker_log_codes: BTreeMap<String, u64>,
    pub calibration: Option<Calibration>,
    pub timeline: Vec<Sample>,
    /// (percentile, ns) points of the latency distribution.
    pub latency_distribution: Vec<(f64, u64)>,
    pub cells: Vec<MatrixCell>,
    pub notes: Vec<String>,
    pub interrupted: bool,
}

/// Adds a cell's group to the matrix's sum; latency is the worst cell's.
fn add_group(sum: &mut GroupReport, part: &GroupReport) {
    sum.subscribers += part.subscribers;
    sum.delivered += part.delivered;
    sum.delivered_in_window += part.delivered_in_window;
    if part.latency.p99_ns >= sum.latency.p99_ns {
        sum.latency = part.latency.clone();
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
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
    pub fn new(scenario: &str, broker: &BrokerUnderTest, opts: &Opts, d: RunData) -> RunReport {
        let c = d.counts;
        let w = c.window_s.max(1e-9);
        let handled = (c.published_in_window + c.delivered_in_window).max(1);
        let channel_closes = d
            .subscribers
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
        let in_window: Vec<&Sample> = d
            .timeline
            .iter()
            .filter(|s| s.t >= c.window_start_s && s.t <= c.window_end_s + 0.05)
            .collect();
        let rss = in_window.iter().map(|s| s.broker_rss).filter(|&r| r > 0);
        let queue = in_window.iter().filter_map(|s| s.queue_messages);
        let pubs = &d.publishers;
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
            latency: d.latency,
            confirmed_in_window: c.confirmed_in_window,
            confirm_rate: c.confirmed_in_window as f64 / w,
            broker_cpu_ns_per_confirmed: d
                .confirm_latency
                .as_ref()
                .and(d.broker_cpu_ns)
                .map(|n| n as f64 / c.confirmed_in_window.max(1) as f64),
            confirm_latency: d.confirm_latency,
            run_s: c.run_s,
            store: None,
            store_unavailable: None,
            broker_cpu_ns: d.broker_cpu_ns,
            broker_cpu_ns_per_delivered: d
                .broker_cpu_ns
                .filter(|_| c.delivered_in_window > 0)
                .map(|n| n as f64 / c.delivered_in_window as f64),
            broker_cpu_cores: d.broker_cpu_ns.map(|n| n as f64 / 1e9 / w),
            broker_rss_max_bytes: d.rss_max,
            window_start_s: c.window_start_s,
            window_end_s: c.window_end_s,
            broker_rss_window_min_bytes: rss.clone().min(),
            broker_rss_window_max_bytes: rss.max(),
            queue_messages_min: queue.clone().min(),
            queue_messages_max: queue.max(),
            tool_cpu_ns: d.tool_cpu_ns,
            tool_cpu_ns_per_message: d.tool_cpu_ns as f64 / handled as f64,
            tool_cpu_ns_per_delivered: d.tool_cpu_ns as f64 / c.delivered_in_window.max(1) as f64,
            tool_cpu_cores: d.tool_cpu_ns as f64 / 1e9 / w,
            confirmed: pubs.iter().map(|p| p.confirmed).sum(),
            nacked: pubs.iter().map(|p| p.nacked).sum(),
            returned: pubs.iter().map(|p| p.returned).sum(),
            flow_held_ms: pubs.iter().map(|p| p.flow_held_ms).sum(),
            flow_waits: pubs.iter().map(|p| p.flow_waits).sum(),
            send_blocked_ms: pubs.iter().map(|p| p.send_blocked_ms).sum(),
            flow_timeouts: pubs.iter().map(|p| p.flow_timeouts).sum(),
            flow_channel_stops: pubs.iter().map(|p| p.channel_flow_stops).sum(),
            flow_connection_blocks: pubs.iter().map(|p| p.connection_blocks).sum(),
            pacing: pacing_label(opts),
            pacing_max_ahead: (opts.rate == 0 && opts.max_ahead > 0).then_some(opts.max_ahead),
            pacing_wait_ms: pubs.iter().map(|p| p.pacing_wait_ms).sum(),
            pacing_waits: pubs.iter().map(|p| p.pacing_waits).sum(),
            pacing_written_off: d.pacing.written_off,
            pacing_stalls: d.pacing.stalls,
            pacing_released_at_s: pubs
                .iter()
                .filter_map(|p| p.pacing_released_at_s)
                .reduce(f64::min),
            fast: d.fast,
            slow: d.slow,
            spread: Spread::of(&d.subscribers),
            connections: d.connections,
            channel_closes,
            broker_log_codes: d.broker_log_codes,
            calibration: None,
            subscribers: d.subscribers,
            publishers: d.publishers,
            timeline: d.timeline,
            latency_distribution: distribution(&d.hist),
            cells: Vec::new(),
            notes: d.notes,
            interrupted: d.interrupted,
        }
    }

    /// The broker's store counters once it stopped (`Err`: why there are none), over
    /// this run's length and the messages it confirmed.
    pub fn attach_store(&mut self, counters: Result<StoreCounters, String>, source: &str) {
        match counters {
            Ok(c) => {
                self.store = Some(StoreReport::of(&c, source, self.run_s, self.confirmed));
                self.store_unavailable = None;
            }
            Err(why) => {
                self.store = None;
                self.store_unavailable = Some(why);
            }
        }
    }

    /// The report of an `idle` run: connections and RSS, no messages.
    pub fn idle(
        broker: &BrokerUnderTest,
        opts: &Opts,
        connections: Connections,
        timeline: Vec<Sample>,
        notes: Vec<String>,
        interrupted: bool,
    ) -> RunReport {
        let rss = timeline.iter().map(|s| s.broker_rss).filter(|&r| r > 0);
        RunReport {
            tool: "sluice-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            scenario: "idle".into(),
            date_utc: utc_now(),
            machine_cores: cores(),
            broker: BrokerInfo {
                label: broker.label.clone(),
                url: broker.url.clone(),
                pid: broker.pid(),
            },
            config: Some(opts.clone()),
            pacing: "none (idle)".into(),
            broker_rss_max_bytes: rss.clone().max().unwrap_or(0),
            broker_rss_window_min_bytes: rss.clone().min(),
            broker_rss_window_max_bytes: rss.max(),
            window_end_s: timeline.last().map_or(0.0, |s| s.t),
            connections,
            timeline,
            notes,
            interrupted,
            ..Default::default()
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
            pacing: pacing_label(opts),
            pacing_max_ahead: (opts.rate == 0 && opts.max_ahead > 0).then_some(opts.max_ahead),
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
            r.confirmed_in_window += p.confirmed_in_window;
            r.run_s += p.run_s;
            if let Some(cl) = &p.confirm_latency {
                if r.confirm_latency
                    .as_ref()
                    .is_none_or(|w| cl.p99_ns >= w.p99_ns)
                {
                    r.confirm_latency = Some(cl.clone());
                }
            }
            r.tool_cpu_ns += p.tool_cpu_ns;
            broker_cpu = match (broker_cpu, p.broker_cpu_ns) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            r.broker_rss_max_bytes = r.broker_rss_max_bytes.max(p.broker_rss_max_bytes);
            if p.connections.connections >= r.connections.connections {
                r.connections = p.connections.clone();
            }
            if p.latency.p99_ns >= r.latency.p99_ns {
                r.latency = p.latency.clone();
                r.latency_distribution = p.latency_distribution.clone();
            }
            r.confirmed += p.confirmed;
            r.nacked += p.nacked;
            r.returned += p.returned;
            r.flow_held_ms += p.flow_held_ms;
            r.flow_waits += p.flow_waits;
            r.send_blocked_ms += p.send_blocked_ms;
            r.flow_timeouts += p.flow_timeouts;
            r.flow_channel_stops += p.flow_channel_stops;
            r.flow_connection_blocks += p.flow_connection_blocks;
            r.pacing_wait_ms += p.pacing_wait_ms;
            r.pacing_waits += p.pacing_waits;
            r.pacing_written_off += p.pacing_written_off;
            r.pacing_stalls += p.pacing_stalls;
            add_group(&mut r.fast, &p.fast);
            add_group(&mut r.slow, &p.slow);
            r.broker_rss_window_min_bytes =
                min_opt(r.broker_rss_window_min_bytes, p.broker_rss_window_min_bytes);
            r.broker_rss_window_max_bytes = r
                .broker_rss_window_max_bytes
                .max(p.broker_rss_window_max_bytes);
            for (code, n) in p.broker_log_codes {
                *r.broker_log_codes.entry(code).or_default() += n;
            }
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
        r.confirm_rate = r.confirmed_in_window as f64 / w;
        r.broker_cpu_ns = broker_cpu;
        r.broker_cpu_ns_per_confirmed = r
            .confirm_latency
            .as_ref()
            .and(broker_cpu)
            .map(|n| n as f64 / r.confirmed_in_window.max(1) as f64);
        r.broker_cpu_ns_per_delivered =
            broker_cpu.map(|n| n as f64 / r.delivered_in_window.max(1) as f64);
        r.broker_cpu_cores = broker_cpu.map(|n| n as f64 / 1e9 / w);
        r.tool_cpu_ns_per_message =
            r.tool_cpu_ns as f64 / (r.published_in_window + r.delivered_in_window).max(1) as f64;
        r.tool_cpu_ns_per_delivered = r.tool_cpu_ns as f64 / r.delivered_in_window.max(1) as f64;
        r.spread = Spread::of(&r.subscribers);
        r.tool_cpu_cores = r.tool_cpu_ns as f64 / 1e9 / w;
        for g in [&mut r.fast, &mut r.slow] {
            g.deliver_rate = g.delivered_in_window as f64 / w;
            g.deliver_rate_per_subscriber = g.deliver_rate / g.subscribers.max(1) as f64;
        }
        r.window_end_s = r.timeline.last().map_or(0.0, |s| s.t);
        r
    }
}
