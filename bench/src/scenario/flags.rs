//! Owns: the flag groups the subcommands flatten, and their resolution into
//! [`Opts`]: [`CommonArgs`] (every subcommand: the broker under test, duration,
//! settle, set-up concurrency, the tool's threads, `--json`, `--report`, `--quiet`),
//! [`LoadArgs`] (every scenario with publishers: message size, rate and pacing —
//! `--max-backlog` (alias `--max-ahead`) or `--open-loop` —, confirms, queue
//! arguments and their slow-consumer conveniences, flow-control settings, the
//! subscriber client) and [`ConsumerArgs`] (what the scenario's subscribers do:
//! ack and consume mode, throttling, the calibration run behind
//! `--slow-fraction`); [`resolve`] fills in what a scenario leaves out from its
//! [`Defaults`].
//! Does not: hold a flag that only one scenario reads (that is the scenario's own
//! `Args`), or run anything.

use std::path::PathBuf;

use clap::{Args, Parser as _};
use sluice::client::FlowOptions;

use super::args::{add_defaults, SlowConsumerArgs};
use super::pacing::default_max_ahead;
use crate::broker::Embedded;
use crate::opts::{AckMode, ConsumeMode, Opts, Policy, SubscriberClient};

/// The routing key of runs without `--routing-key` (and its default where it is one).
pub const ROUTING_KEY: &str = "sluice.bench";

/// `--connections`' default (and what the other scenarios' reports say).
pub const CONNECTIONS: usize = 1000;

/// The flags every subcommand takes: the broker, the run's length, the output.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Broker to drive (amqp://user:pass@host:port/vhost); none = embedded sluice.
    #[arg(long)]
    pub url: Option<String>,
    /// CA bundle (PEM) that an amqps:// --url's server certificate must chain to.
    /// Over TLS the subscribers use sluice's full client (the wire client is plain TCP
    /// only). There is no option to skip verification.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Where subscribers connect instead of --url (repeatable: subscriber i uses the
    /// i-th modulo their number), e.g. the relays of a federation tree whose root is
    /// --url. Publishers, set-up and the broker's figures stay with --url.
    #[arg(long = "subscriber-url", value_name = "URL")]
    pub subscriber_urls: Vec<String>,
    /// Seconds between the last subscriber bound and the first publish: time for the
    /// bindings to reach another broker (a federation link's upstream) before messages
    /// are published that they would route.
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = non_negative_f64)]
    pub publish_delay: f64,
    /// PID of an external broker, to report its CPU per message and RSS.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// The broker's log: an embedded sluice process's output is copied there; an
    /// external sluice's is read from there after the run. Either way its
    /// `MST-1003 : Closed : … fsyncs …` lines (each shard's store counters, logged
    /// at shutdown) give the run's fsyncs per second.
    #[arg(long, value_name = "FILE")]
    pub broker_log: Option<PathBuf>,
    /// After the run, SIGTERM the external broker (--broker-pid) and wait up to 30 s
    /// for it to exit before reading --broker-log (its store counters are logged at
    /// shutdown).
    #[arg(long, requires = "broker_pid", requires = "url")]
    pub stop_broker: bool,
    /// Shards of the embedded sluice.
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Cores to pin the embedded sluice's shards to (e.g. 0,1).
    #[arg(long)]
    pub pin_cores: Option<String>,
    /// How to run the embedded sluice.
    #[arg(long, value_enum, default_value_t = Embedded::Auto)]
    pub embedded: Embedded,
    /// The sluice binary for --embedded process (default: next to this tool).
    #[arg(long)]
    pub broker_bin: Option<PathBuf>,
    /// A command-line argument for the embedded sluice, appended to its command line
    /// (repeatable; e.g. --broker-arg=--memory-high-watermark=268435456).
    #[arg(long = "broker-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub broker_args: Vec<String>,
    /// Measured seconds (after warm-up).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Subscriber (and idle) connection set-ups in flight at most.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub setup_concurrency: usize,
    /// Seconds to wait after every connection closed before sampling the broker's
    /// RSS again (0: no sample) [default: 3; matrix: 0].
    #[arg(long, value_name = "S", value_parser = non_negative_f64)]
    pub settle: Option<f64>,
    /// Worker threads of the tool's runtime.
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Write every figure as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an HTML report with SVG plots here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// No live line.
    #[arg(long)]
    pub quiet: bool,
}

/// The flags of every scenario with publishers (all but `idle`).
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Publisher connections.
    #[arg(long)]
    pub publishers: Option<usize>,
    /// Message body size in bytes (at least 20: the stamp).
    #[arg(long)]
    pub size: Option<usize>,
    /// Messages per second per publisher (a fixed rate: open loop); 0 = as fast as
    /// the subscribers take (closed loop, see --max-backlog).
    #[arg(long)]
    pub rate: Option<u64>,
    /// --rate 0 publishers publish only while they are at most K messages per
    /// subscriber ahead of the slowest subscriber that is not throttled (fanout,
    /// slowsub, matrix) or of all consumers together (workq, flow, persistent); 0 =
    /// open loop [default: 10000, or half a smaller x-slow-consumer-max-count /
    /// -max-depth / x-max-length of the run's queues; flow: 0 (its queue is meant to
    /// overfill)]. Also --max-ahead.
    #[arg(long = "max-backlog", visible_alias = "max-ahead", value_name = "K")]
    pub max_ahead: Option<u64>,
    /// --rate 0 publishers publish as fast as they can, however far ahead of the
    /// subscribers (same as --max-backlog 0): measures backlog growth, e.g. fan-out
    /// under the memory watermark.
    #[arg(long, conflicts_with = "max_ahead")]
    pub open_loop: bool,
    /// Warm-up seconds (not measured).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Consumer prefetch (manual-ack modes).
    #[arg(long)]
    pub prefetch: Option<u16>,
    /// Publisher confirms with this many in flight per publisher (0 = off)
    /// [default: persistent 1000, else 0].
    #[arg(long)]
    pub confirm: Option<usize>,
    /// Messages per second a throttled subscriber takes.
    #[arg(long)]
    pub slow_rate: Option<u32>,
    /// The client subscribers connect with: wire (a lean consumer, for thousands of
    /// connections: no-ack or client acks only), full (sluice's client, every
    /// feature), auto (wire above 64 subscribers when the run allows it).
    #[arg(long, value_enum, default_value_t = SubscriberClient::Auto)]
    pub subscriber_client: SubscriberClient,
    /// Queue argument key=value for subscriber / shared queues (repeatable; integers
    /// are sent as signed 64-bit, decimals as doubles, true/false as booleans).
    #[arg(long = "queue-arg", value_parser = parse_kv)]
    pub queue_args: Vec<(String, String)>,
    /// Slow-consumer policy on every queue the run declares (x-slow-consumer-policy);
    /// matrix: also the policy it expects to see fire [default there: delete].
    #[arg(long, value_enum)]
    pub policy: Option<Policy>,
    /// x-slow-consumer-max-count on every queue the run declares.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub max_count: Option<i64>,
    /// x-slow-consumer-max-depth (bytes) on every queue the run declares.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(i64).range(0..))]
    pub max_depth: Option<i64>,
    /// x-slow-consumer-max-age (milliseconds) on every queue the run declares.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
    pub max_age_ms: Option<i64>,
    /// x-slow-consumer-min-rate (messages per second, may be fractional).
    #[arg(long, value_name = "R", value_parser = non_negative_f64)]
    pub min_rate: Option<f64>,
    /// x-max-length N with x-overflow=drop-head on every queue the run declares (RabbitMQ's
    /// ring, for side-by-side runs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub rabbit_max_length: Option<i64>,
    /// The slow-consumer policy applies to durable subscriptions too (matrix
    /// expectation; with a slow-consumer flag, adds x-slow-consumer-include-durable).
    #[arg(long)]
    pub policy_durable: bool,
    /// Publishers: how long a publish waits under flow control before failing (ms)
    /// [default: $SLUICE_FLOW_CONTROL_WAIT_FAILURE or 60000].
    #[arg(long, value_name = "MS")]
    pub flow_wait_failure_ms: Option<u64>,
    /// Publishers: how often a held publish logs its WARN line (ms)
    /// [default: $SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD or 5000].
    #[arg(long, value_name = "MS")]
    pub flow_notify_period_ms: Option<u64>,
    /// Publishers ignore channel.flow and connection.blocked (they still answer
    /// flow-ok), as pika and py-amqp do: measures the broker's enforcement.
    #[arg(long)]
    pub ignore_flow: bool,
    /// Publishes a publisher's connection may queue ahead of its socket [default: the
    /// client's 8192]. What is queued is already committed when channel.flow stops
    /// the channel; a small queue makes a publisher react to flow control sooner.
    #[arg(long, value_name = "N")]
    pub publisher_queue: Option<usize>,
    /// Stop each publisher after this many messages (0 = only the clock stops it);
    /// the run ends once every publisher has, even before --warmup + --duration.
    #[arg(long, default_value_t = 0)]
    pub max_messages: u64,
    /// Seconds to wait for in-flight deliveries after publishing stops.
    #[arg(long, default_value_t = 5.0)]
    pub drain_timeout: f64,
}

/// What the subscribers of a scenario do, where the scenario leaves it to the flags
/// (every scenario with publishers but `matrix`, which runs every combination).
#[derive(Args, Debug, Clone)]
pub struct ConsumerArgs {
    /// Acknowledgement mode.
    #[arg(long, value_enum)]
    pub ack: Option<AckMode>,
    /// Consume mode (async consume or sync basic.get).
    #[arg(long, value_enum)]
    pub consume: Option<ConsumeMode>,
    /// Subscribers (or consumers) throttled to --slow-rate [default: slowsub 1, flow
    /// every consumer, else 0].
    #[arg(long)]
    pub slow: Option<usize>,
    /// Throttled subscribers take this fraction of the publishers' maximum rate,
    /// measured first by a calibration run (flow: 0.1 unless --slow-rate is given).
    #[arg(long, conflicts_with = "slow_rate", value_parser = positive_f64)]
    pub slow_fraction: Option<f64>,
    /// Measured seconds of the calibration run behind --slow-fraction.
    #[arg(long, default_value_t = 3.0, value_parser = positive_f64)]
    pub calibrate: f64,
}

/// Every flag group but the common one, to read their defaults from.
#[derive(clap::Parser)]
struct UnsetGroups {
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    consumer: ConsumerArgs,
}

/// [`LoadArgs`] and [`ConsumerArgs`] as their defaults alone, for a scenario that
/// does not take them (its report's `config` still says what those settings were).
pub fn unset_groups() -> (LoadArgs, ConsumerArgs) {
    // Every flag of these groups is optional, so an empty command line parses.
    let g = UnsetGroups::try_parse_from(["defaults"]).expect("flag groups without required flags");
    (g.load, g.consumer)
}

/// A scenario's defaults for the flags given without a fixed one.
#[derive(Clone, Debug)]
pub struct Defaults {
    pub publishers: usize,
    pub subscribers: usize,
    pub consumers: usize,
    pub size: usize,
    pub ack: AckMode,
    pub rate: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub settle_s: f64,
    pub confirm: usize,
    pub slow: usize,
    /// `--rate 0` publishers are closed loop unless `--open-loop` (flow: not, its
    /// queue is meant to overfill).
    pub closed_loop: bool,
    /// Queue arguments the run adds unless the flags give the key.
    pub queue_args: fn() -> Vec<(String, String)>,
}

impl Defaults {
    /// The defaults most scenarios share; each overrides what it needs.
    pub const BASE: Defaults = Defaults {
        publishers: 1,
        subscribers: 1,
        consumers: 1,
        size: 1024,
        ack: AckMode::Client,
        rate: 0,
        duration_s: 10.0,
        warmup_s: 2.0,
        settle_s: 3.0,
        confirm: 0,
        slow: 0,
        closed_loop: true,
        queue_args: Vec::new,
    };
}

impl LoadArgs {
    /// The slow-consumer conveniences as given.
    fn slow_consumer_args(&self) -> SlowConsumerArgs {
        SlowConsumerArgs {
            policy: self.policy,
            max_count: self.max_count,
            max_depth: self.max_depth,
            max_age_ms: self.max_age_ms,
            min_rate: self.min_rate,
            include_durable: self.policy_durable,
            rabbit_max_length: self.rabbit_max_length,
        }
    }

    /// Flag combinations the parser cannot refuse on its own, given the resolved `opts`.
    pub fn check(&self, opts: &Opts) -> Result<(), String> {
        let rate = opts.rate;
        if rate > 0 && self.max_ahead.is_some_and(|n| n > 0) {
            return Err(format!(
                "--max-backlog paces --rate 0 publishers; --rate {rate} is a fixed rate (open loop)"
            ));
        }
        Ok(())
    }
}

/// The flags resolved with the scenario's defaults `d`. The flags only some
/// scenarios take (subscribers, consumers, durable, …) get `d`'s values or their
/// usual defaults here; the scenario sets them from its own `Args` after.
pub fn resolve(
    common: &CommonArgs,
    load: &LoadArgs,
    consumer: &ConsumerArgs,
    d: &Defaults,
) -> Opts {
    // Conveniences first, so an explicit --queue-arg of the same key wins.
    let mut queue_args = load.slow_consumer_args().pairs();
    queue_args.extend(load.queue_args.iter().cloned());
    add_defaults(&mut queue_args, (d.queue_args)());
    let env = FlowOptions::from_env();
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let rate = load.rate.unwrap_or(d.rate);
    let size = load.size.unwrap_or(d.size);
    let (max_ahead, max_ahead_why) = match (rate, load.open_loop, load.max_ahead) {
        (1.., _, _) | (_, true, _) => (0, None),
        (_, _, Some(n)) => (n, None),
        _ if !d.closed_loop => (0, None),
        _ => default_max_ahead(&queue_args, size),
    };
    Opts {
        publishers: load.publishers.unwrap_or(d.publishers),
        subscribers: d.subscribers,
        consumers: d.consumers,
        size,
        rate,
        max_ahead,
        max_ahead_why,
        duration_s: common.duration.unwrap_or(d.duration_s),
        warmup_s: load.warmup.unwrap_or(d.warmup_s),
        prefetch: load.prefetch.unwrap_or(1000),
        ack: consumer.ack.unwrap_or(d.ack),
        consume: consumer.consume.unwrap_or(ConsumeMode::Async),
        durable: false,
        persistent: false,
        confirm: load.confirm.unwrap_or(d.confirm),
        slow: consumer.slow.unwrap_or(d.slow),
        slow_rate: load.slow_rate.unwrap_or(100),
        slow_fraction: consumer.slow_fraction,
        calibrate_s: consumer.calibrate,
        routing_key: ROUTING_KEY.to_string(),
        topics: 0,
        subscriber_client: load.subscriber_client,
        setup_concurrency: common.setup_concurrency.max(1),
        settle_s: common.settle.unwrap_or(d.settle_s),
        connections: CONNECTIONS,
        queue_args,
        max_messages: load.max_messages,
        drain_timeout_s: load.drain_timeout,
        flow_wait_failure_ms: load.flow_wait_failure_ms.unwrap_or(ms(env.wait_failure)),
        flow_notify_period_ms: load.flow_notify_period_ms.unwrap_or(ms(env.notify_period)),
        ignore_flow: load.ignore_flow,
        publisher_queue: load.publisher_queue.unwrap_or(0),
        broker_args: common.broker_args.clone(),
        subscriber_urls: common.subscriber_urls.clone(),
        publish_delay_s: common.publish_delay,
        quiet: common.quiet,
    }
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected key=value")?;
    Ok((k.to_string(), v.to_string()))
}

fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a non-negative number")),
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match non_negative_f64(s) {
        Ok(x) if x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}
