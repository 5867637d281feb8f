//! Owns: the `fanout` scenario (P publishers → one topic exchange → S subscriber
//! queues, server-named, exclusive, auto-delete, one consumer each) and `slowsub`
//! (the same with K subscribers throttled to R msg/s).
//! Does not: configure a slow-consumer policy on the broker beyond the queue
//! arguments it is given (`--policy`, `--max-count`, … or `--queue-arg`); it reports
//! what happened to the slow ones (506 close, gaps) and the fast ones apart.

use super::{queue_arguments, Opts, Plan, PubSpec, QueueSetup, SubSpec};

/// The exchange every fanout run publishes to.
pub const EXCHANGE: &str = "sluice.bench.fanout";

pub fn plan(opts: &Opts, exchange: &str, slow: usize, durable_prefix: Option<&str>) -> Plan {
    let subs = (0..opts.subscribers)
        .map(|i| SubSpec {
            id: i,
            setup: QueueSetup::Bound {
                exchange: exchange.into(),
                key: opts.routing_key.clone(),
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
        .map(|i| PubSpec::new(opts, i, exchange, &opts.routing_key))
        .collect();
    let mut notes = Vec::new();
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
        fanout_factor: opts.subscribers as u64,
        probe_queue: None,
        notes,
    }
}
