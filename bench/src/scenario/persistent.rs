//! Owns: the `persistent` scenario: a durable queue, persistent messages
//! (delivery-mode 2) and publisher confirms with N in flight per publisher (default
//! 1,000: issue 8's workload), drained by C consumers (0: the queue only fills, e.g.
//! with `--max-messages` to fill a store). Its flags are [`Args`]; its queue's
//! set-up is `workq`'s [`run_on_shared_queue`].
//! Does not: time the confirms (the publisher's [`confirms`](super::confirms)
//! collector does) or read the broker's fsyncs (the broker's log does, at its stop).

use tokio::sync::watch;

use super::flags::{self, CommonArgs, ConsumerArgs, Defaults, LoadArgs};
use super::workq::{self, run_on_shared_queue, SharedQueue, SharedQueueArgs};
use super::{Opts, Plan};
use crate::broker::BrokerUnderTest;
use crate::report::RunReport;

/// The durable queue.
pub const QUEUE: &str = "sluice.bench.persistent";

pub fn plan(opts: &Opts) -> Plan {
    let mut o = opts.clone();
    o.persistent = true;
    o.confirm = o.confirm.max(1);
    workq::plan(&o, QUEUE)
}

/// The flags of `persistent` (its messages are always persistent, its queue durable).
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
}

impl Args {
    /// The flags resolved with the scenario's defaults: persistent messages,
    /// confirms (1,000 in flight unless `--confirm` says otherwise, at least 1).
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            confirm: 1000,
            ..Defaults::BASE
        };
        let mut o = flags::resolve(&self.common, &self.load, &self.consumer, &d);
        o.consumers = self.shared.consumers.unwrap_or(d.consumers);
        o.persistent = true;
        o.confirm = o.confirm.max(1);
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
            durable: true,
            keep: self.shared.keep_queue,
        };
        let opts = self.opts();
        run_on_shared_queue("persistent", broker, &opts, intr, queue, plan, plan).await
    }
}
