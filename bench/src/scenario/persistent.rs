//! Owns: the `persistent` scenario: a durable queue, persistent messages
//! (delivery-mode 2) and publisher confirms with N in flight, drained by C consumers.
//! Does not: hide that a broker without a disk store confirms from memory: the report
//! carries that note for sluice.

use super::workq;
use super::{Opts, Plan};

/// The durable queue.
pub const QUEUE: &str = "sluice.bench.persistent";

pub fn plan(opts: &Opts, broker_is_sluice: bool) -> Plan {
    let mut o = opts.clone();
    o.persistent = true;
    o.confirm = o.confirm.max(1);
    let mut p = workq::plan(&o, QUEUE);
    if broker_is_sluice {
        p.notes.push(
            "sluice has no disk store yet: durable queues and persistent messages are kept in memory and confirms do not wait for fsync".into(),
        );
    }
    p
}
