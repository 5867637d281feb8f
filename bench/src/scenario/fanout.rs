//! Owns: the `fanout` scenario (P publishers → one topic exchange → S subscriber
//! queues, server-named, exclusive, auto-delete, one consumer each), its many-topics
//! form (`--topics T`: subscriber `i` follows topic `i % T` through an exact, a `*`
//! or a `#` binding that each match exactly that topic's routing key, and publishers
//! round-robin over the topics) and `slowsub` (the same with K subscribers throttled
//! to R msg/s): their flags ([`Args`]) and set-up (the exchange, then the run).
//! Does not: configure a slow-consumer policy on the broker beyond the queue
//! arguments it is given (`--policy`, `--max-count`, … or `--queue-arg`); it reports
//! what happened to the slow ones (506 close, gaps) and the fast ones apart.

use tokio::sync::watch;

use super::calibrate::execute_calibrated;
use super::flags::{self, CommonArgs, ConsumerArgs, Defaults, LoadArgs};
use super::{declare_exchange, queue_arguments, Opts, Plan, PubSpec, QueueSetup, SubSpec};
use crate::broker::BrokerUnderTest;
use crate::opts::AckMode;
use crate::report::RunReport;

/// The exchange every fanout run publishes to.
pub const EXCHANGE: &str = "sluice.bench.fanout";

/// The routing key of topic `t` (`--topics`).
pub fn topic_key(base: &str, t: usize) -> String {
    format!("{base}.t{t}.data")
}

/// The binding key of the `k`-th subscriber of topic `t`: exact, `*` or `#` in
/// turn, each matching `topic_key(base, t)` and no other topic's key.
pub fn topic_binding(base: &str, t: usize, k: usize) -> String {
    match k % 3 {
        0 => topic_key(base, t),
        1 => format!("{base}.t{t}.*"),
        _ => format!("#.t{t}.data"),
    }
}

/// The flags of `fanout` and `slowsub`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub consumer: ConsumerArgs,
    /// Subscriber queues (fanout, slowsub, matrix).
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// Durable subscriber queues (fanout: durable named queues instead of exclusive).
    #[arg(long)]
    pub durable: bool,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    pub persistent: bool,
    /// Routing key (and binding key) of the fanout scenarios.
    #[arg(long, default_value = flags::ROUTING_KEY)]
    pub routing_key: String,
    /// fanout over T topics: subscriber i follows topic i % T (exact, `*` and `#`
    /// bindings, each matching only its topic) and publishers round-robin over the
    /// topics; --subscribers must be a multiple of T.
    #[arg(long, value_name = "T", default_value_t = 0)]
    pub topics: usize,
}

/// Which of the two scenarios these flags run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Fanout,
    /// The same with `--slow` (default 1) subscribers throttled.
    Slowsub,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Fanout => "fanout",
            Kind::Slowsub => "slowsub",
        }
    }
}

impl Args {
    /// The flags resolved with the scenario's defaults.
    pub fn opts(&self, kind: Kind) -> Opts {
        let d = Defaults {
            subscribers: 16,
            size: 64,
            ack: AckMode::NoAck,
            slow: usize::from(kind == Kind::Slowsub),
            ..Defaults::BASE
        };
        let mut o = flags::resolve(&self.common, &self.load, &self.consumer, &d);
        o.subscribers = self.subscribers.unwrap_or(d.subscribers);
        o.durable = self.durable;
        o.persistent = self.persistent;
        o.routing_key = self.routing_key.clone();
        o.topics = self.topics;
        o
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self, kind: Kind) -> Result<(), String> {
        let o = self.opts(kind);
        self.load.check(&o)?;
        if self.topics > 1 && !o.subscribers.is_multiple_of(self.topics) {
            return Err(format!(
                "--subscribers {} is not a multiple of --topics {}",
                o.subscribers, self.topics
            ));
        }
        Ok(())
    }

    /// Declares the exchange and runs the scenario (after its calibration run when
    /// `--slow-fraction` asks for one).
    pub async fn run(
        &self,
        kind: Kind,
        broker: &BrokerUnderTest,
        intr: &watch::Receiver<bool>,
    ) -> Result<RunReport, String> {
        let opts = self.opts(kind);
        declare_exchange(&broker.url, EXCHANGE, "topic", opts.durable)
            .await
            .map_err(|e| format!("declare exchange: {e}"))?;
        // Subscribers on other brokers (--subscriber-url) bind there.
        for url in &opts.subscriber_urls {
            declare_exchange(url, EXCHANGE, "topic", opts.durable)
                .await
                .map_err(|e| format!("declare exchange at a subscriber URL: {e}"))?;
        }
        let prefix = opts.durable.then_some("sluice.bench.fanout.sub");
        let plan = |o: &Opts| plan(o, EXCHANGE, o.slow, prefix);
        let nothing = || async { Ok(()) };
        execute_calibrated(kind.name(), broker, &opts, intr, plan, plan, nothing).await
    }
}

pub fn plan(opts: &Opts, exchange: &str, slow: usize, durable_prefix: Option<&str>) -> Plan {
    let topics = opts.topics.max(1);
    let rk = &opts.routing_key;
    let binding = |i: usize| match opts.topics {
        0 | 1 => rk.clone(),
        t => topic_binding(rk, i % t, i / t),
    };
    let subs = (0..opts.subscribers)
        .map(|i| SubSpec {
            id: i,
            setup: QueueSetup::Bound {
                exchange: exchange.into(),
                key: binding(i),
                durable_name: durable_prefix.map(|p| format!("{p}.{i}")),
                arguments: queue_arguments(&opts.queue_args),
            },
            consume_args: sluice::protocol::FieldTable::new(),
            slow_rate: (i < slow).then_some(opts.slow_rate),
            ack: opts.ack,
            consume: opts.consume,
            prefetch: opts.prefetch,
            publishers: opts.publishers,
        })
        .collect();
    let pubs = (0..opts.publishers)
        .map(|i| {
            let mut p = PubSpec::new(opts, i, exchange, rk);
            if topics > 1 {
                p.routing_keys = (0..topics).map(|t| topic_key(rk, t).into()).collect();
            }
            p
        })
        .collect();
    let mut notes = Vec::new();
    if topics > 1 {
        notes.push(format!(
            "{topics} topics x {} subscribers (exact, * and # bindings); publishers \
             round-robin over the topics",
            opts.subscribers / topics
        ));
    }
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
        pacing_scale: topics as u64,
        fanout_factor: (opts.subscribers / topics) as u64,
        probe_queue: None,
        notes,
    }
}
