//! Owns: the `persistent` scenario: a durable queue, persistent messages
//! (delivery-mode 2) and publisher confirms with N in flight per publisher (default
//! 1,000: issue 8's workload), drained by C consumers (0: the queue only fills, e.g.
//! with `--max-messages` to fill a store).
//! Does not: time the confirms (the publisher's [`confirms`](super::confirms)
//! collector does) or read the broker's fsyncs (the broker's log does, at its stop).

use super::workq;
use super::{Opts, Plan};

/// The durable queue.
pub const QUEUE: &str = "sluice.bench.persistent";

pub fn plan(opts: &Opts) -> Plan {
    let mut o = opts.clone();
    o.persistent = true;
    o.confirm = o.confirm.max(1);
    workq::plan(&o, QUEUE)
}
