//! Owns: the management API's message rates — a sampler task on the HTTP thread that
//! asks every shard for its message counters (`ObserveRequest::Counters`) every
//! `http.stats_interval`, and the table of rates it publishes ([`Board`]): per queue,
//! channel and exchange and for the overview, each rate is the change between the last
//! two samples, per second (RabbitMQ's instant rate over its `collect_statistics_interval`),
//! and `0.0` once the last sample is older than two intervals (the sampler stopped
//! hearing from a shard).
//!
//! Memory is bounded: the sampler holds the previous sample of each object and the table
//! one rate array per object; an object missing from a sample (deleted, closed) is
//! forgotten with it. The shards only copy plain counters into the reply; every sum and
//! division happens here.
//!
//! Does not: count anything (the shards do, in `queue::QueueCounters`,
//! `session::channel::ChannelStats` and the directory's exchanges), or format JSON beyond
//! the `message_stats` object ([`message_stats`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::Context;
use crate::shard::inbox::observe::{
    ChannelStats, CounterView, ObserveReply, ObserveRequest, QueueCounters,
};

/// The fields of a queue's, a channel's and the overview's `message_stats`, in order.
pub const MESSAGE_FIELDS: [&str; 8] = [
    "publish",
    "deliver_get",
    "deliver",
    "deliver_no_ack",
    "get",
    "get_no_ack",
    "ack",
    "redeliver",
];

/// An exchange's `message_stats` fields.
pub const EXCHANGE_FIELDS: [&str; 2] = ["publish_in", "publish_out"];

/// Counts in [`MESSAGE_FIELDS`] order.
pub type Counts = [u64; 8];
/// Rates (per second) in [`MESSAGE_FIELDS`] order.
pub type Rates = [f64; 8];

/// A queue's counters as the management API names them (`publish` is what it took in).
pub fn queue_counts(c: &QueueCounters) -> Counts {
    let deliver = c
        .delivered
        .saturating_sub(c.delivered_no_ack + c.got + c.got_no_ack);
    [
        c.enqueued,
        c.delivered,
        deliver,
        c.delivered_no_ack,
        c.got,
        c.got_no_ack,
        c.acked,
        c.redelivered,
    ]
}

/// A channel's counters as the management API names them.
pub fn channel_counts(s: &ChannelStats) -> Counts {
    [
        s.publish,
        s.delivery.delivered(),
        s.delivery.deliver,
        s.delivery.deliver_no_ack,
        s.delivery.get,
        s.delivery.get_no_ack,
        s.delivery.ack,
        s.delivery.redeliver,
    ]
}

/// `message_stats` as RabbitMQ shows it: each count, and beside it `NAME_details` with
/// its rate (`0.0` without one).
pub fn message_stats<const N: usize>(
    fields: &[&str; N],
    counts: &[u64; N],
    rates: Option<&[f64; N]>,
) -> Value {
    let mut out = Map::new();
    for (i, field) in fields.iter().enumerate() {
        let rate = rates.map_or(0.0, |r| r[i]);
        out.insert((*field).to_owned(), json!(counts[i]));
        out.insert(format!("{field}_details"), json!({ "rate": rate }));
    }
    Value::Object(out)
}

/// The rates of the last sample.
#[derive(Debug, Default)]
pub struct RateTable {
    /// When the last sample was taken, and the sampling interval.
    taken: Option<Instant>,
    interval: Duration,
    queues: HashMap<u64, Rates>,
    channels: HashMap<(u64, u16), Rates>,
    exchanges: HashMap<(String, String), [f64; 2]>,
    overview: Rates,
}

impl RateTable {
    /// Whether the rates are live: the last sample is at most two intervals old.
    fn live(&self) -> bool {
        self.taken
            .is_some_and(|t| t.elapsed() <= self.interval.saturating_mul(2))
    }

    pub fn queue(&self, id: u64) -> Option<&Rates> {
        self.queues.get(&id).filter(|_| self.live())
    }

    pub fn channel(&self, serial: u64, number: u16) -> Option<&Rates> {
        self.channels.get(&(serial, number)).filter(|_| self.live())
    }

    pub fn exchange(&self, vhost: &str, name: &str) -> Option<&[f64; 2]> {
        self.exchanges
            .get(&(vhost.to_owned(), name.to_owned()))
            .filter(|_| self.live())
    }

    pub fn overview(&self) -> Option<&Rates> {
        self.live().then_some(&self.overview)
    }
}

/// Where the sampler publishes its table and the API reads it (a `watch` channel: the
/// readers take the current `Arc`, the sampler replaces it).
#[derive(Debug)]
pub struct Board {
    tx: watch::Sender<Arc<RateTable>>,
}

impl Default for Board {
    fn default() -> Board {
        Board {
            tx: watch::Sender::new(Arc::new(RateTable::default())),
        }
    }
}

impl Board {
    /// The rates of the last sample.
    pub fn current(&self) -> Arc<RateTable> {
        Arc::clone(&self.tx.borrow())
    }

    fn publish(&self, table: RateTable) {
        self.tx.send_replace(Arc::new(table));
    }
}

/// One sample: the counters of every object at one moment.
#[derive(Default)]
struct Sample {
    at: Option<Instant>,
    queues: HashMap<u64, Counts>,
    channels: HashMap<(u64, u16), Counts>,
    exchanges: HashMap<(String, String), [u64; 2]>,
    overview: Counts,
}

impl Sample {
    /// Merges the shards' replies (an exchange counts on every shard's replica).
    fn of(views: Vec<CounterView>, at: Instant) -> Sample {
        let mut sample = Sample {
            at: Some(at),
            exchanges: exchange_totals(&views),
            ..Sample::default()
        };
        for view in views {
            for (id, c) in view.queues {
                sample.queues.insert(id, queue_counts(&c));
            }
            for (key, s) in view.channels {
                sample.channels.insert(key, channel_counts(&s));
            }
        }
        sample.overview = overview_counts(
            sample.queues.values(),
            sample.exchanges.values().map(|e| e[0]),
        );
        sample
    }
}

/// Every shard's counters now (one short turn each); `None` if a shard did not answer.
pub async fn counters(ctx: &Context) -> Option<Vec<CounterView>> {
    ctx.ask_all(ObserveRequest::Counters)
        .await?
        .into_iter()
        .map(|r| match r {
            ObserveReply::Counters(v) => Some(*v),
            _ => None,
        })
        .collect()
}

/// The exchanges' counts, summed over the shards' replicas, by (vhost, name); the
/// default exchange is the empty name.
pub fn exchange_totals(views: &[CounterView]) -> HashMap<(String, String), [u64; 2]> {
    let mut out: HashMap<(String, String), [u64; 2]> = HashMap::new();
    for e in views.iter().flat_map(|v| &v.exchanges) {
        let slot = out.entry((e.vhost.clone(), e.name.clone())).or_default();
        slot[0] += e.publish_in;
        slot[1] += e.publish_out;
    }
    out
}

/// The overview's counts: what the broker's exchanges took in (`publish`, the default
/// exchange included) and what its queues delivered and were acked.
pub fn overview_counts<'a>(
    queues: impl Iterator<Item = &'a Counts>,
    published: impl Iterator<Item = u64>,
) -> Counts {
    let mut total = [0u64; 8];
    for q in queues {
        for (t, v) in total.iter_mut().zip(q.iter()).skip(1) {
            *t += v;
        }
    }
    total[0] = published.sum();
    total
}

fn rates<const N: usize>(new: &[u64; N], old: &[u64; N], secs: f64) -> [f64; N] {
    let mut out = [0.0; N];
    for (i, r) in out.iter_mut().enumerate() {
        // A counter that went down (an exchange declared again, objects gone from a
        // sum) has no rate rather than a negative one.
        *r = new[i].saturating_sub(old[i]) as f64 / secs;
    }
    out
}

/// The rates between two samples; objects only in `new` have none yet (as RabbitMQ's
/// first sample), objects only in `old` are gone.
fn table(old: &Sample, new: &Sample, interval: Duration) -> RateTable {
    let secs = match (old.at, new.at) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        _ => {
            return RateTable {
                taken: new.at,
                interval,
                ..RateTable::default()
            }
        }
    };
    fn each<K: Clone + Eq + std::hash::Hash, const N: usize>(
        old: &HashMap<K, [u64; N]>,
        new: &HashMap<K, [u64; N]>,
        secs: f64,
    ) -> HashMap<K, [f64; N]> {
        new.iter()
            .filter_map(|(k, n)| old.get(k).map(|o| (k.clone(), rates(n, o, secs))))
            .collect()
    }
    RateTable {
        taken: new.at,
        interval,
        queues: each(&old.queues, &new.queues, secs),
        channels: each(&old.channels, &new.channels, secs),
        exchanges: each(&old.exchanges, &new.exchanges, secs),
        overview: rates(&new.overview, &old.overview, secs),
    }
}

/// The sampler: runs on the HTTP thread until its runtime stops. A round the shards do
/// not answer (shutdown, a stuck shard) is skipped, and the table goes stale.
pub async fn sample(ctx: Arc<Context>) {
    let interval = ctx.config.http.stats_interval;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Sample::default();
    loop {
        ticks.tick().await;
        let Some(views) = counters(&ctx).await else {
            continue;
        };
        let started = thread_cpu_seconds();
        let next = Sample::of(views, Instant::now());
        ctx.rates.publish(table(&last, &next, interval));
        last = next;
        let cpu = thread_cpu_seconds() - started;
        tracing::trace!(
            queues = last.queues.len(),
            cpu_us = cpu * 1e6,
            "management rates sampled"
        );
    }
}

/// CPU time used by the calling thread, seconds (what one sample cost, for the trace).
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: Instant, queue: Counts) -> Sample {
        let mut s = Sample {
            at: Some(at),
            ..Sample::default()
        };
        s.queues.insert(7, queue);
        s.overview = overview_counts(s.queues.values(), std::iter::once(queue[0]));
        s
    }

    #[test]
    fn rate_is_the_change_per_second_between_two_samples() {
        let t0 = Instant::now();
        let old = sample(t0, [10, 4, 4, 0, 0, 0, 2, 0]);
        let new = sample(t0 + Duration::from_secs(2), [30, 8, 8, 0, 0, 0, 10, 0]);
        let t = table(&old, &new, Duration::from_secs(5));
        let r = t.queues.get(&7).copied().unwrap_or_default();
        assert_eq!(r, [10.0, 2.0, 2.0, 0.0, 0.0, 0.0, 4.0, 0.0]);
        assert_eq!(t.overview[0], 10.0);
    }

    #[test]
    fn new_objects_have_no_rate_and_gone_ones_are_forgotten() {
        let t0 = Instant::now();
        let mut old = sample(t0, [1; 8]);
        old.queues.insert(9, [5; 8]);
        let mut new = Sample {
            at: Some(t0 + Duration::from_secs(1)),
            ..Sample::default()
        };
        new.queues.insert(8, [100; 8]);
        let t = table(&old, &new, Duration::from_secs(5));
        assert!(t.queues.is_empty());
    }

    #[test]
    fn a_counter_that_went_down_has_rate_zero() {
        let t0 = Instant::now();
        let old = sample(t0, [50; 8]);
        let new = sample(t0 + Duration::from_secs(1), [3; 8]);
        let t = table(&old, &new, Duration::from_secs(5));
        assert_eq!(t.queues.get(&7).copied(), Some([0.0; 8]));
    }

    #[test]
    fn message_stats_has_each_count_and_its_rate() {
        let v = message_stats(&EXCHANGE_FIELDS, &[3, 6], Some(&[1.5, 3.0]));
        assert_eq!(
            v,
            json!({
                "publish_in": 3, "publish_in_details": {"rate": 1.5},
                "publish_out": 6, "publish_out_details": {"rate": 3.0},
            })
        );
    }
}
