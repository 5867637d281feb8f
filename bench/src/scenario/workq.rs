//! Owns: the `workq` scenario: P publishers → one shared named queue ← C consumers
//! (each message delivered once, to one of them; with none, the queue fills).
//! The queue's depth is sampled each second.
//! Does not: bind anything (publishes go through the default exchange).

use super::{Opts, Plan, PubSpec, QueueSetup, SubSpec};

/// The shared queue.
pub const QUEUE: &str = "sluice.bench.workq";

pub fn plan(opts: &Opts, queue: &str) -> Plan {
    let subs = (0..opts.consumers)
        .map(|i| SubSpec {
            id: i,
            setup: QueueSetup::Shared(queue.into()),
            slow_rate: (i < opts.slow).then_some(opts.slow_rate),
            ack: opts.ack,
            consume: opts.consume,
            prefetch: opts.prefetch,
            publishers: opts.publishers,
        })
        .collect();
    let pubs = (0..opts.publishers)
        .map(|i| PubSpec::new(opts, i, "", queue))
        .collect();
    Plan {
        subs,
        pubs,
        pacing: super::pacing::Reference::Total,
        pacing_scale: 1,
        // No consumer: nothing is delivered (the queue fills).
        fanout_factor: u64::from(opts.consumers > 0),
        probe_queue: Some(queue.into()),
        notes: Vec::new(),
    }
}
