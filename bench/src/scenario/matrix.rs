//! Owns: the `matrix` scenario — seed 000's "Testing Spec" as one run: ack mode
//! (no-ack, auto, client, dups-ok, transacted) × consume mode (async, sync) × topic
//! type (durable, non-durable). Each cell is a short fanout on `amq.topic` with one
//! slow subscriber and fast ones, and reports whether the slow-consumer policy fired
//! as configured and what the fast subscribers received.
//! Does not: configure the policy beyond the subscriber queues' arguments (`--policy`
//! with `--max-count`, `--max-depth`, `--max-age-ms`, `--min-rate`, or `--queue-arg`;
//! `--policy-durable` adds `x-slow-consumer-include-durable`) or the broker's own
//! configuration; `--policy` also says what to expect (default delete). Its flags
//! are [`Args`].

use tokio::sync::watch;

use super::flags::{self, CommonArgs, Defaults, LoadArgs};
use super::{execute, fanout, AckMode, ConsumeMode, Opts};
use crate::broker::BrokerUnderTest;
pub use crate::opts::Policy;
use crate::report::{MatrixCell, RunReport};

pub const ACKS: [AckMode; 5] = [
    AckMode::NoAck,
    AckMode::Auto,
    AckMode::Client,
    AckMode::DupsOk,
    AckMode::Transacted,
];

/// The flags of `matrix` (the ack mode, consume mode, durability and throttled
/// subscriber are what it varies, so it takes no flag for them).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    /// Subscriber queues (fanout, slowsub, matrix).
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    pub persistent: bool,
    /// Routing key (and binding key) of the fanout scenarios.
    #[arg(long, default_value = flags::ROUTING_KEY)]
    pub routing_key: String,
}

impl Args {
    /// The flags resolved with the scenario's defaults: short cells at a fixed rate.
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            subscribers: 3,
            size: 64,
            rate: 2000,
            duration_s: 2.0,
            warmup_s: 0.5,
            settle_s: 0.0,
            ..Defaults::BASE
        };
        let (_, consumer) = flags::unset_groups();
        let mut o = flags::resolve(&self.common, &self.load, &consumer, &d);
        o.subscribers = self.subscribers.unwrap_or(d.subscribers);
        o.persistent = self.persistent;
        o.routing_key = self.routing_key.clone();
        o
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        self.load.check(&self.opts())
    }

    /// Runs every cell, expecting `--policy` (default delete) to fire.
    pub async fn run(
        &self,
        broker: &BrokerUnderTest,
        intr: &watch::Receiver<bool>,
    ) -> Result<RunReport, String> {
        let expected = self.load.policy.unwrap_or(Policy::Delete);
        run_cells(
            broker,
            &self.opts(),
            expected,
            self.load.policy_durable,
            intr,
        )
        .await
    }
}

async fn run_cells(
    broker: &BrokerUnderTest,
    opts: &Opts,
    policy: Policy,
    policy_durable: bool,
    interrupted: &watch::Receiver<bool>,
) -> Result<RunReport, String> {
    let mut cells = Vec::new();
    let mut reports = Vec::new();
    'outer: for ack in ACKS {
        for consume in [ConsumeMode::Async, ConsumeMode::Sync] {
            for durable in [true, false] {
                if *interrupted.borrow() {
                    break 'outer;
                }
                let mut o = opts.clone();
                o.ack = ack;
                o.consume = consume;
                o.durable = durable;
                o.subscribers = o.subscribers.max(2);
                o.slow = 1;
                o.quiet = true;
                let prefix = format!(
                    "sluice.bench.matrix.{}.{}",
                    serde_json::to_value(ack)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default(),
                    if consume == ConsumeMode::Async {
                        "async"
                    } else {
                        "sync"
                    }
                );
                let plan = fanout::plan(&o, "amq.topic", 1, durable.then_some(prefix.as_str()));
                let expected = if durable && !policy_durable {
                    Policy::None
                } else {
                    policy
                };
                eprintln!(
                    "matrix cell: ack={ack:?} consume={consume:?} {}",
                    if durable { "durable" } else { "non-durable" }
                );
                let cell = match execute("matrix-cell", broker, &o, plan, interrupted).await {
                    Ok(r) => {
                        let fast: Vec<_> = r.subscribers.iter().filter(|s| !s.slow).collect();
                        let slow = r.subscribers.iter().find(|s| s.slow);
                        let fmin = fast.iter().map(|s| s.delivered).min().unwrap_or(0);
                        let fmax = fast.iter().map(|s| s.delivered).max().unwrap_or(0);
                        let fired = match slow {
                            Some(s) if s.closed_code == Some(506) => Policy::Delete,
                            Some(s) if s.gaps > 0 => Policy::Cycle,
                            _ => Policy::None,
                        };
                        let complete = fmin == r.published;
                        let c = MatrixCell {
                            ack,
                            consume,
                            durable,
                            published: r.published,
                            fast_subscribers: fast.len(),
                            fast_min_delivered: fmin,
                            fast_max_delivered: fmax,
                            fast_complete: complete,
                            slow_delivered: slow.map_or(0, |s| s.delivered),
                            slow_gaps: slow.map_or(0, |s| s.gaps),
                            slow_closed_code: slow.and_then(|s| s.closed_code),
                            slow_closed_text: slow.and_then(|s| s.closed_text.clone()),
                            policy_fired: fired,
                            policy_expected: expected,
                            as_configured: fired == expected && complete,
                            p99_ns: r.latency.p99_ns,
                            error: None,
                        };
                        reports.push(r);
                        c
                    }
                    Err(e) => MatrixCell {
                        ack,
                        consume,
                        durable,
                        published: 0,
                        fast_subscribers: 0,
                        fast_min_delivered: 0,
                        fast_max_delivered: 0,
                        fast_complete: false,
                        slow_delivered: 0,
                        slow_gaps: 0,
                        slow_closed_code: None,
                        slow_closed_text: None,
                        policy_fired: Policy::None,
                        policy_expected: expected,
                        as_configured: false,
                        p99_ns: 0,
                        error: Some(e),
                    },
                };
                cells.push(cell);
            }
        }
    }
    let mut combined = RunReport::combine("matrix", opts, reports, *interrupted.borrow());
    combined.notes.push(format!(
        "policy expected: {policy:?} (durable cells: {})",
        if policy_durable { "same" } else { "exempt" }
    ));
    combined.cells = cells;
    Ok(combined)
}
