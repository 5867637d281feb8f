//! Owns: the `flow` scenario (seed 001): P publishers into one capacity-limited queue
//! drained by C consumers throttled to R msg/s, so the queue fills, the broker tells
//! the publishers to stop (`channel.flow` / `connection.blocked`) and releases them
//! as it drains. Reports how long publishes were held and whether any timed out.
//! Does not: know the broker's argument names beyond the defaults it passes
//! (`x-qpid-capacity`, `x-qpid-flow-resume-capacity`, overridable with `--queue-arg`).

use super::workq;
use super::Opts;
use super::Plan;

/// The capacity-limited queue.
pub const QUEUE: &str = "sluice.bench.flow";

/// Default queue arguments when none are given: 1 MiB capacity, resume at 800 KiB.
pub fn default_args() -> Vec<(String, String)> {
    vec![
        ("x-qpid-capacity".into(), "1048576".into()),
        ("x-qpid-flow-resume-capacity".into(), "819200".into()),
    ]
}

pub fn plan(opts: &Opts) -> Plan {
    let mut o = opts.clone();
    o.slow = o.consumers;
    let mut p = workq::plan(&o, QUEUE);
    p.notes.push(format!(
        "queue arguments {:?}; consumers throttled to {} msg/s each; see publishers' flow_held_ms",
        opts.queue_args, opts.slow_rate
    ));
    p
}
