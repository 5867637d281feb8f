//! Owns: the `fanout` scenario (P publishers → one topic exchange → S subscriber
//! queues, server-named, exclusive, auto-delete, one consumer each), its many-topics
//! form (`--topics T`: subscriber `i` follows topic `i % T` through an exact, a `*`
//! or a `#` binding that each match exactly that topic's routing key, and publishers
//! round-robin over the topics) and `slowsub` (the same with K subscribers throttled
//! to R msg/s).
//! Does not: configure a slow-consumer policy on the broker beyond the queue
//! arguments it is given (`--policy`, `--max-count`, … or `--queue-arg`); it reports
//! what happened to the slow ones (506 close, gaps) and the fast ones apart.

use super::{queue_arguments, Opts, Plan, PubSpec, QueueSetup, SubSpec};

/// The exchange every fanout run publishes to.
pub const EXCHANGE: &str = "sluice.bench.fanout";

/// The routing key of topic `t` (`--topics`).
pub fn topic_key(base: &str, t: usize) -> String {
    format!("{base}.t{t}.data")
}

/// The binding key of the `k`-th subscriber of topic `t`: exact, `*` or `#` in
/// turn, each matching `topic_key(base, t)` and no other topic's key.
pub fn topic_binding(base: &str, t: usize, k: usize) -> String {
    match k % 3 {
        0 => topic_key(base, t),
        1 => format!("{base}.t{t}.*"),
        _ => format!("#.t{t}.data"),
    }
}

pub fn plan(opts: &Opts, exchange: &str, slow: usize, durable_prefix: Option<&str>) -> Plan {
    let topics = opts.topics.max(1);
    let rk = &opts.routing_key;
    let binding = |i: usize| match opts.topics {
        0 | 1 => rk.clone(),
        t => topic_binding(rk, i % t, i / t),
    };
    let subs = (0..opts.subscribers)
        .map(|i| SubSpec {
            id: i,
            setup: QueueSetup::Bound {
                exchange: exchange.into(),
                key: binding(i),
                durable_name: durable_prefix.map(|p| format!("{p}.{i}")),
                arguments: queue_arguments(&opts.queue_args),
            },
            slow_rate: (i < slow).then_some(opts.slow_rate),
            ack: opts.ack,
            consume: opts.consume,
            prefetch: opts.prefetch,
            publishers: opts.publishers,
        })
        .collect();
    let pubs = (0..opts.publishers)
        .map(|i| {
            let mut p = PubSpec::new(opts, i, exchange, rk);
            if topics > 1 {
                p.routing_keys = (0..topics).map(|t| topic_key(rk, t).into()).collect();
            }
            p
        })
        .collect();
    let mut notes = Vec::new();
    if topics > 1 {
        notes.push(format!(
            "{topics} topics x {} subscribers (exact, * and # bindings); publishers \
             round-robin over the topics",
            opts.subscribers / topics
        ));
    }
    if slow > 0 {
        notes.push(format!(
            "{slow} of {} subscribers throttled to {} msg/s; delivered counts every subscriber",
            opts.subscribers, opts.slow_rate
        ));
    }
    Plan {
        subs,
        pubs,
        pacing: super::pacing::Reference::EachSubscriber,
        pacing_scale: topics as u64,
        fanout_factor: (opts.subscribers / topics) as u64,
        probe_queue: None,
        notes,
    }
}
