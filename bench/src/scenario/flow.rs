//! Owns: the `flow` scenario (seed 001, issue 7's capacity run): P publishers at
//! their maximum rate into one capacity-limited queue drained by C consumers
//! throttled to R msg/s, so the queue fills, the broker tells the publishers to stop
//! (`channel.flow` / `connection.blocked`) and releases them as it drains. By default
//! R is a fraction (`--slow-fraction`, 0.1) of the publishers' maximum rate, measured
//! first by a calibration run with unthrottled consumers. Reports the queue's depth
//! each second, broker RSS, publisher throughput, how long publishes were held and
//! how many flow signals arrived; `--ignore-flow` makes the publishers behave like
//! clients that ignore the signal, to measure the broker's enforcement.
//! Does not: know the broker's argument names beyond the defaults it passes
//! (`x-qpid-capacity`, `x-qpid-flow-resume-capacity`, overridable with `--queue-arg`).

use super::workq;
use super::Opts;
use super::Plan;

/// The capacity-limited queue.
pub const QUEUE: &str = "sluice.bench.flow";

/// Default capacity (10 MiB) and resume capacity (8 MiB), seed 001's example.
pub fn default_args() -> Vec<(String, String)> {
    vec![
        ("x-qpid-capacity".into(), "10485760".into()),
        ("x-qpid-flow-resume-capacity".into(), "8388608".into()),
    ]
}

/// `opts.slow` of the consumers (by default all) throttled to `opts.slow_rate`.
pub fn plan(opts: &Opts) -> Plan {
    let mut p = workq::plan(opts, QUEUE);
    p.notes.push(format!(
        "queue arguments {:?}; {} of {} consumer(s) throttled to {} msg/s each; publishers {}",
        opts.queue_args,
        opts.slow.min(opts.consumers),
        opts.consumers,
        opts.slow_rate,
        if opts.ignore_flow {
            "ignore channel.flow and connection.blocked (--ignore-flow)"
        } else {
            "wait while flow-controlled"
        }
    ));
    p
}

/// The calibration run: the same publishers and queue, consumers unthrottled (at
/// least one per publisher), so the publishers' maximum rate is what is measured.
pub fn calibration_plan(opts: &Opts) -> Plan {
    let mut o = opts.clone();
    o.slow = 0;
    o.consumers = o.consumers.max(o.publishers);
    workq::plan(&o, QUEUE)
}
