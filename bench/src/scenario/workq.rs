//! Owns: the `workq` scenario: P publishers → one shared named queue ← C consumers
//! (each message delivered once, to one of them; with none, the queue fills).
//! The queue's depth is sampled each second. Also what `flow` and `persistent`
//! share with it: the shared queue's flags ([`SharedQueueArgs`]) and its set-up
//! around a run ([`run_on_shared_queue`]: declared, re-declared after a calibration
//! run, deleted after unless `--keep-queue`).
//! Does not: bind anything (publishes go through the default exchange).

use tokio::sync::watch;

use super::calibrate::execute_calibrated;
use super::flags::{self, CommonArgs, ConsumerArgs, Defaults, LoadArgs};
use super::{
    declare_queue, delete_queue, queue_arguments, Opts, Plan, PubSpec, QueueSetup, SubSpec,
};
use crate::broker::BrokerUnderTest;
use crate::report::RunReport;

/// The shared queue.
pub const QUEUE: &str = "sluice.bench.workq";

pub fn plan(opts: &Opts, queue: &str) -> Plan {
    let subs = (0..opts.consumers)
        .map(|i| SubSpec {
            id: i,
            setup: QueueSetup::Shared(queue.into()),
            consume_args: sluice::protocol::FieldTable::new(),
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

/// The flags of the scenarios on one shared queue (workq, flow, persistent).
#[derive(clap::Args, Debug, Clone)]
pub struct SharedQueueArgs {
    /// Consumers on the shared queue (workq, flow, persistent); 0 = none (the queue
    /// fills; with --max-messages, e.g. to fill a store).
    #[arg(long)]
    pub consumers: Option<usize>,
    /// Leave the run's shared queue (workq, flow, persistent) and its messages in the
    /// broker after the run instead of deleting it (e.g. to restart the broker on
    /// what a `persistent --consumers 0 --max-messages N` run stored).
    #[arg(long)]
    pub keep_queue: bool,
}

/// The flags of `workq`.
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
    /// Durable subscriber queues (fanout: durable named queues instead of exclusive).
    #[arg(long)]
    pub durable: bool,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    pub persistent: bool,
}

impl Args {
    /// The flags resolved with the scenario's defaults.
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            publishers: 4,
            consumers: 4,
            ..Defaults::BASE
        };
        let mut o = flags::resolve(&self.common, &self.load, &self.consumer, &d);
        o.consumers = self.shared.consumers.unwrap_or(d.consumers);
        o.durable = self.durable;
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
        let opts = self.opts();
        let queue = SharedQueue {
            name: QUEUE,
            durable: opts.durable,
            keep: self.shared.keep_queue,
        };
        let plan = |o: &Opts| plan(o, QUEUE);
        run_on_shared_queue("workq", broker, &opts, intr, queue, plan, plan).await
    }
}

/// The shared queue of a run, and what becomes of it.
pub struct SharedQueue {
    pub name: &'static str,
    pub durable: bool,
    /// Left in the broker after the run (`--keep-queue`).
    pub keep: bool,
}

/// Declares `queue` (with the run's queue arguments), runs the scenario on it
/// (after a calibration run when `--slow-fraction` asks for one, re-declaring it
/// between the two) and deletes it after unless it is kept.
pub async fn run_on_shared_queue(
    scenario: &str,
    broker: &BrokerUnderTest,
    opts: &Opts,
    intr: &watch::Receiver<bool>,
    queue: SharedQueue,
    calibration_for: impl Fn(&Opts) -> Plan,
    plan_for: impl Fn(&Opts) -> Plan,
) -> Result<RunReport, String> {
    let url = broker.url.as_str();
    let (name, durable) = (queue.name, queue.durable);
    let arguments = queue_arguments(&opts.queue_args);
    let reset = || {
        let arguments = arguments.clone();
        async move {
            declare_queue(url, name, durable, arguments)
                .await
                .map_err(|e| format!("declare queue {name}: {e}"))
        }
    };
    reset().await?;
    let r = execute_calibrated(
        scenario,
        broker,
        opts,
        intr,
        calibration_for,
        plan_for,
        reset,
    )
    .await;
    if !queue.keep {
        delete_queue(url, name).await;
    }
    r
}
