//! Owns: the `flow` scenario (seed 001, issue 7's capacity run): P publishers at
//! their maximum rate into one capacity-limited queue drained by C consumers
//! throttled to R msg/s, so the queue fills, the broker tells the publishers to stop
//! (`channel.flow` / `connection.blocked`) and releases them as it drains. By default
//! R is a fraction (`--slow-fraction`, 0.1) of the publishers' maximum rate, measured
//! first by a calibration run with unthrottled consumers. Reports the queue's depth
//! each second, broker RSS, publisher throughput, how long publishes were held and
//! how many flow signals arrived; `--ignore-flow` makes the publishers behave like
//! clients that ignore the signal, to measure the broker's enforcement. Its flags
//! are [`Args`]; its queue's set-up is `workq`'s [`run_on_shared_queue`].
//! Does not: know the broker's argument names beyond the defaults it passes
//! (`x-qpid-capacity`, `x-qpid-flow-resume-capacity`, overridable with `--queue-arg`).

use tokio::sync::watch;

use super::flags::{self, CommonArgs, ConsumerArgs, Defaults, LoadArgs};
use super::workq::{self, run_on_shared_queue, SharedQueue, SharedQueueArgs};
use super::{Opts, Plan};
use crate::broker::BrokerUnderTest;
use crate::report::RunReport;

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

/// The flags of `flow`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub consumer: ConsumerArgs,
    #[command(flatten)]
    pub shared: SharedQueueArgs,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    pub persistent: bool,
}

impl Args {
    /// The flags resolved with the scenario's defaults: open loop, the capacity
    /// arguments, every consumer throttled to 0.1 of the publishers' maximum rate.
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            publishers: 4,
            closed_loop: false,
            queue_args: default_args,
            ..Defaults::BASE
        };
        let mut o = flags::resolve(&self.common, &self.load, &self.consumer, &d);
        o.consumers = self.shared.consumers.unwrap_or(d.consumers);
        o.slow = self.consumer.slow.unwrap_or(o.consumers);
        if self.consumer.slow_fraction.is_none() && self.load.slow_rate.is_none() {
            o.slow_fraction = Some(0.1);
        }
        o.persistent = self.persistent;
        o
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        self.load.check(&self.opts())
    }

    pub async fn run(
        &self,
        broker: &BrokerUnderTest,
        intr: &watch::Receiver<bool>,
    ) -> Result<RunReport, String> {
        let queue = SharedQueue {
            name: QUEUE,
            durable: false,
            keep: self.shared.keep_queue,
        };
        let opts = self.opts();
        run_on_shared_queue("flow", broker, &opts, intr, queue, calibration_plan, plan).await
    }
}
