//! Owns: the command line of `sluice-bench` — the scenario, its flags and their
//! per-scenario defaults — resolved into the [`Opts`] a run is made of (queue
//! arguments typed from the conveniences, flow-control settings from the flags or
//! the client's environment variables, closed-loop pacing of `--rate 0` publishers:
//! `--max-backlog` (alias `--max-ahead`), default 10,000 except for `flow`, or
//! `--open-loop`; the subscriber client, set-up concurrency and settle time of runs
//! with thousands of connections; `--topics`; the `idle` scenario's connections; the
//! broker's log for its store counters: `--broker-log`, `--stop-broker`).
//! Does not: run anything.

use std::path::PathBuf;

use clap::Parser;
use sluice::client::FlowOptions;

use crate::broker::Embedded;
use crate::scenario::args::{add_defaults, SlowConsumerArgs};
use crate::scenario::matrix::Policy;
use crate::scenario::pacing::default_max_ahead;
use crate::scenario::{flow, AckMode, ConsumeMode, Opts, SubscriberClient};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// P publishers → topic exchange → S subscriber queues (one consumer each).
    Fanout,
    /// P publishers → one queue ← C consumers.
    Workq,
    /// fanout with K subscribers throttled to R msg/s (default 1 of 16 at 100 msg/s).
    Slowsub,
    /// 4 publishers into a capacity-limited queue (10 MiB, resume at 8 MiB) drained
    /// by one consumer at 10 % of their maximum rate (producer flow control).
    Flow,
    /// Durable queue, persistent messages, publisher confirms.
    Persistent,
    /// Seed 000's test matrix: ack mode × consume mode × topic type.
    Matrix,
    /// --connections N connections that log in, open one channel and do nothing
    /// else for --duration seconds: broker RSS per connection, and after they close.
    Idle,
}

/// Load benchmarks for AMQP 0-9-1 brokers. With no --url an embedded sluice is
/// started on an ephemeral loopback port.
#[derive(Parser, Debug)]
#[command(name = "sluice-bench", version)]
pub struct Cli {
    /// What to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Broker to drive (amqp://user:pass@host:port/vhost); none = embedded sluice.
    #[arg(long)]
    pub url: Option<String>,
    /// CA bundle (PEM) that an amqps:// --url's server certificate must chain to.
    /// Over TLS the subscribers use sluice's full client (the wire client is plain TCP
    /// only). There is no option to skip verification.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
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
    /// Leave the run's shared queue (workq, flow, persistent) and its messages in the
    /// broker after the run instead of deleting it (e.g. to restart the broker on
    /// what a `persistent --consumers 0 --max-messages N` run stored).
    #[arg(long)]
    pub keep_queue: bool,
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
    /// Publisher connections.
    #[arg(long)]
    pub publishers: Option<usize>,
    /// Subscriber queues (fanout, slowsub, matrix).
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// Consumers on the shared queue (workq, flow, persistent); 0 = none (the queue
    /// fills; with --max-messages, e.g. to fill a store).
    #[arg(long)]
    pub consumers: Option<usize>,
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
    /// Measured seconds (after warm-up).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Warm-up seconds (not measured).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Consumer prefetch (manual-ack modes).
    #[arg(long)]
    pub prefetch: Option<u16>,
    /// Acknowledgement mode.
    #[arg(long, value_enum)]
    pub ack: Option<AckMode>,
    /// Consume mode (async consume or sync basic.get).
    #[arg(long, value_enum)]
    pub consume: Option<ConsumeMode>,
    /// Durable subscriber queues (fanout: durable named queues instead of exclusive).
    #[arg(long)]
    pub durable: bool,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    pub persistent: bool,
    /// Publisher confirms with this many in flight per publisher (0 = off)
    /// [default: persistent 1000, else 0].
    #[arg(long)]
    pub confirm: Option<usize>,
    /// Subscribers (or consumers) throttled to --slow-rate [default: slowsub 1, flow
    /// every consumer, else 0].
    #[arg(long)]
    pub slow: Option<usize>,
    /// Messages per second a throttled subscriber takes.
    #[arg(long)]
    pub slow_rate: Option<u32>,
    /// Throttled subscribers take this fraction of the publishers' maximum rate,
    /// measured first by a calibration run (flow: 0.1 unless --slow-rate is given).
    #[arg(long, conflicts_with = "slow_rate", value_parser = positive_f64)]
    pub slow_fraction: Option<f64>,
    /// Measured seconds of the calibration run behind --slow-fraction.
    #[arg(long, default_value_t = 3.0, value_parser = positive_f64)]
    pub calibrate: f64,
    /// Routing key (and binding key) of the fanout scenarios.
    #[arg(long, default_value = "sluice.bench")]
    pub routing_key: String,
    /// fanout over T topics: subscriber i follows topic i % T (exact, `*` and `#`
    /// bindings, each matching only its topic) and publishers round-robin over the
    /// topics; --subscribers must be a multiple of T.
    #[arg(long, value_name = "T", default_value_t = 0)]
    pub topics: usize,
    /// The client subscribers connect with: wire (a lean consumer, for thousands of
    /// connections: no-ack or client acks only), full (sluice's client, every
    /// feature), auto (wire above 64 subscribers when the run allows it).
    #[arg(long, value_enum, default_value_t = SubscriberClient::Auto)]
    pub subscriber_client: SubscriberClient,
    /// Subscriber (and idle) connection set-ups in flight at most.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub setup_concurrency: usize,
    /// Seconds to wait after every connection closed before sampling the broker's
    /// RSS again (0: no sample) [default: 3; matrix: 0].
    #[arg(long, value_name = "S", value_parser = non_negative_f64)]
    pub settle: Option<f64>,
    /// Connections of the idle scenario.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub connections: usize,
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

impl Cli {
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

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        let o = self.opts();
        let rate = o.rate;
        if rate > 0 && self.max_ahead.is_some_and(|n| n > 0) {
            return Err(format!(
                "--max-backlog paces --rate 0 publishers; --rate {rate} is a fixed rate (open loop)"
            ));
        }
        if self.topics > 1 {
            if !matches!(self.scenario, Scenario::Fanout | Scenario::Slowsub) {
                return Err("--topics is a form of fanout (and slowsub)".into());
            }
            if !o.subscribers.is_multiple_of(self.topics) {
                return Err(format!(
                    "--subscribers {} is not a multiple of --topics {}",
                    o.subscribers, self.topics
                ));
            }
        }
        if self.scenario == Scenario::Idle && self.connections == 0 {
            return Err("idle needs --connections N > 0".into());
        }
        Ok(())
    }

    /// The flags resolved with the scenario's defaults.
    pub fn opts(&self) -> Opts {
        use Scenario::*;
        let s = self.scenario;
        let (p, subs, cons, size, ack) = match s {
            Fanout | Slowsub => (1, 16, 1, 64, AckMode::NoAck),
            Workq => (4, 1, 4, 1024, AckMode::Client),
            Flow => (4, 1, 1, 1024, AckMode::Client),
            Persistent => (1, 1, 1, 1024, AckMode::Client),
            Matrix => (1, 3, 1, 64, AckMode::Client),
            Idle => (0, 0, 0, 64, AckMode::NoAck),
        };
        // Conveniences first, so an explicit --queue-arg of the same key wins.
        let mut queue_args = self.slow_consumer_args().pairs();
        queue_args.extend(self.queue_args.iter().cloned());
        if s == Flow {
            add_defaults(&mut queue_args, flow::default_args());
        }
        let env = FlowOptions::from_env();
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let slow_fraction = match (self.slow_fraction, s, self.slow_rate) {
            (Some(f), _, _) => Some(f),
            (None, Flow, None) => Some(0.1),
            _ => None,
        };
        let consumers = self.consumers.unwrap_or(cons);
        let rate = self.rate.unwrap_or(if s == Matrix { 2000 } else { 0 });
        let size = self.size.unwrap_or(size);
        let (max_ahead, max_ahead_why) = match (rate, self.open_loop, self.max_ahead) {
            (1.., _, _) | (_, true, _) => (0, None),
            (_, _, Some(n)) => (n, None),
            _ if s == Flow => (0, None),
            _ => default_max_ahead(&queue_args, size),
        };
        Opts {
            publishers: self.publishers.unwrap_or(p),
            subscribers: self.subscribers.unwrap_or(subs),
            consumers,
            size,
            rate,
            max_ahead,
            max_ahead_why,
            duration_s: self.duration.unwrap_or(match s {
                Matrix => 2.0,
                Idle => 3.0,
                _ => 10.0,
            }),
            warmup_s: self.warmup.unwrap_or(if s == Matrix { 0.5 } else { 2.0 }),
            prefetch: self.prefetch.unwrap_or(1000),
            ack: self.ack.unwrap_or(ack),
            consume: self.consume.unwrap_or(ConsumeMode::Async),
            durable: self.durable,
            persistent: self.persistent,
            confirm: self
                .confirm
                .unwrap_or(if s == Persistent { 1000 } else { 0 }),
            slow: self.slow.unwrap_or(match s {
                Slowsub => 1,
                Flow => consumers,
                _ => 0,
            }),
            slow_rate: self.slow_rate.unwrap_or(100),
            slow_fraction,
            calibrate_s: self.calibrate,
            routing_key: self.routing_key.clone(),
            topics: self.topics,
            subscriber_client: self.subscriber_client,
            setup_concurrency: self.setup_concurrency.max(1),
            settle_s: self.settle.unwrap_or(if s == Matrix { 0.0 } else { 3.0 }),
            connections: self.connections,
            queue_args,
            max_messages: self.max_messages,
            drain_timeout_s: self.drain_timeout,
            flow_wait_failure_ms: self.flow_wait_failure_ms.unwrap_or(ms(env.wait_failure)),
            flow_notify_period_ms: self.flow_notify_period_ms.unwrap_or(ms(env.notify_period)),
            ignore_flow: self.ignore_flow,
            publisher_queue: self.publisher_queue.unwrap_or(0),
            broker_args: self.broker_args.clone(),
            quiet: self.quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::pacing::DEFAULT_MAX_AHEAD;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from([&["sluice-bench"][..], args].concat()).expect("flags parse")
    }

    #[test]
    fn flow_defaults_are_the_capacity_run() {
        let o = parse(&["flow"]).opts();
        assert_eq!((o.publishers, o.consumers, o.slow, o.rate), (4, 1, 1, 0));
        assert_eq!(o.slow_fraction, Some(0.1));
        assert!(o
            .queue_args
            .contains(&("x-qpid-capacity".into(), "10485760".into())));
        assert!(o
            .queue_args
            .contains(&("x-qpid-flow-resume-capacity".into(), "8388608".into())));
        let o = parse(&[
            "flow",
            "--slow-rate",
            "500",
            "--queue-arg",
            "x-qpid-capacity=1000",
        ])
        .opts();
        assert_eq!((o.slow_fraction, o.slow_rate), (None, 500));
        assert!(o
            .queue_args
            .contains(&("x-qpid-capacity".into(), "1000".into())));
        assert!(!o
            .queue_args
            .contains(&("x-qpid-capacity".into(), "10485760".into())));
        assert!(Cli::try_parse_from([
            "sluice-bench",
            "flow",
            "--slow-rate",
            "5",
            "--slow-fraction",
            "0.1"
        ])
        .is_err());
    }

    #[test]
    fn max_rate_runs_are_closed_loop_by_default() {
        for sc in ["fanout", "slowsub", "workq", "persistent"] {
            assert_eq!(parse(&[sc]).opts().max_ahead, DEFAULT_MAX_AHEAD, "{sc}");
        }
        assert_eq!(parse(&["matrix", "--rate", "0"]).opts().max_ahead, 10_000);
        assert_eq!(
            parse(&["flow"]).opts().max_ahead,
            0,
            "flow overfills its queue"
        );
        assert_eq!(parse(&["flow", "--max-ahead", "500"]).opts().max_ahead, 500);
        assert_eq!(
            parse(&["fanout", "--max-ahead", "1000"]).opts().max_ahead,
            1000
        );
        assert_eq!(
            parse(&["fanout", "--max-backlog", "700"]).opts().max_ahead,
            700,
            "--max-backlog is the name, --max-ahead its alias"
        );
        assert_eq!(parse(&["fanout", "--open-loop"]).opts().max_ahead, 0);
        assert_eq!(parse(&["fanout", "--max-ahead", "0"]).opts().max_ahead, 0);
        // A fixed rate is open loop.
        assert_eq!(parse(&["fanout", "--rate", "1000"]).opts().max_ahead, 0);
        assert_eq!(parse(&["matrix"]).opts().max_ahead, 0);
        let capped = parse(&["slowsub", "--policy", "delete", "--max-count", "10000"]).opts();
        assert_eq!(
            capped.max_ahead, 5_000,
            "clear of the fast subscribers' threshold"
        );
        assert!(capped.max_ahead_why.is_some());
        let explicit = ["slowsub", "--max-count", "10000", "--max-ahead", "10000"];
        assert_eq!(parse(&explicit).opts().max_ahead, 10_000);
        assert!(parse(&["fanout", "--rate", "10", "--max-ahead", "5"])
            .check()
            .is_err());
        assert!(parse(&["fanout", "--rate", "0", "--max-ahead", "5"])
            .check()
            .is_ok());
        assert!(
            Cli::try_parse_from(["sluice-bench", "fanout", "--open-loop", "--max-ahead", "5"])
                .is_err()
        );
    }

    #[test]
    fn scale_flags() {
        let o = parse(&["fanout", "--subscribers", "10000", "--topics", "100"]).opts();
        assert_eq!((o.subscribers, o.topics), (10_000, 100));
        assert_eq!(o.subscriber_client, SubscriberClient::Auto);
        assert_eq!((o.setup_concurrency, o.settle_s), (256, 3.0));
        assert!(parse(&["fanout", "--subscribers", "10", "--topics", "3"])
            .check()
            .is_err());
        assert!(parse(&["workq", "--topics", "4"]).check().is_err());
        assert!(parse(&["fanout", "--subscribers", "12", "--topics", "3"])
            .check()
            .is_ok());
        assert_eq!(parse(&["matrix"]).opts().settle_s, 0.0);
        let idle = parse(&["idle", "--connections", "500", "--settle", "1"]);
        assert!(idle.check().is_ok());
        assert_eq!((idle.opts().connections, idle.opts().settle_s), (500, 1.0));
        assert!(parse(&["idle", "--connections", "0"]).check().is_err());
        let w = parse(&[
            "fanout",
            "--subscriber-client",
            "wire",
            "--setup-concurrency",
            "8",
        ]);
        assert_eq!(w.opts().subscriber_client, SubscriberClient::Wire);
        assert_eq!(w.opts().setup_concurrency, 8);
    }

    #[test]
    fn persistent_is_the_store_workload_and_can_fill_a_queue() {
        let o = parse(&["persistent"]).opts();
        assert_eq!(
            (
                o.publishers,
                o.consumers,
                o.size,
                o.confirm,
                o.ack,
                o.prefetch
            ),
            (1, 1, 1024, 1000, AckMode::Client, 1000)
        );
        let c = parse(&[
            "persistent",
            "--consumers",
            "0",
            "--max-messages",
            "1000000",
            "--keep-queue",
        ]);
        assert!(c.check().is_ok() && c.keep_queue);
        assert_eq!((c.opts().consumers, c.opts().max_messages), (0, 1_000_000));
        let ext = parse(&[
            "persistent",
            "--url",
            "amqp://guest:guest@127.0.0.1:5672/",
            "--broker-pid",
            "1234",
            "--broker-log",
            "sluice.log",
            "--stop-broker",
        ]);
        assert!(ext.stop_broker);
        assert_eq!(ext.broker_log, Some(PathBuf::from("sluice.log")));
        // Stopping needs the broker's pid (and is for an external broker only).
        assert!(Cli::try_parse_from(["sluice-bench", "persistent", "--stop-broker"]).is_err());
        assert!(Cli::try_parse_from([
            "sluice-bench",
            "persistent",
            "--url",
            "amqp://x/",
            "--stop-broker"
        ])
        .is_err());
    }

    #[test]
    fn flow_control_flags_reach_the_publishers() {
        let o = parse(&[
            "flow",
            "--ignore-flow",
            "--flow-wait-failure-ms",
            "1500",
            "--flow-notify-period-ms",
            "250",
            "--broker-arg=--memory-high-watermark=1000",
            "--broker-arg",
            "--log-level=info",
        ])
        .opts();
        let f = o.flow();
        assert!(!f.honour_flow);
        assert_eq!(f.wait_failure, std::time::Duration::from_millis(1500));
        assert_eq!(f.notify_period, std::time::Duration::from_millis(250));
        assert_eq!(
            o.broker_args,
            vec!["--memory-high-watermark=1000", "--log-level=info"]
        );
    }

    #[test]
    fn slow_consumer_flags_become_queue_arguments() {
        let o = parse(&[
            "slowsub",
            "--policy",
            "cycle",
            "--max-count",
            "100",
            "--max-depth",
            "65536",
            "--max-age-ms",
            "5000",
            "--min-rate",
            "0.5",
        ])
        .opts();
        for kv in [
            ("x-slow-consumer-policy", "cycle"),
            ("x-slow-consumer-max-count", "100"),
            ("x-slow-consumer-max-depth", "65536"),
            ("x-slow-consumer-max-age", "5000"),
            ("x-slow-consumer-min-rate", "0.5"),
        ] {
            assert!(
                o.queue_args.contains(&(kv.0.into(), kv.1.into())),
                "{kv:?} in {:?}",
                o.queue_args
            );
        }
        let o = parse(&["slowsub", "--rabbit-max-length", "1000"]).opts();
        assert_eq!(
            o.queue_args,
            vec![
                ("x-max-length".to_string(), "1000".to_string()),
                ("x-overflow".to_string(), "drop-head".to_string())
            ]
        );
        assert!(Cli::try_parse_from(["sluice-bench", "slowsub", "--max-count", "-1"]).is_err());
        assert!(Cli::try_parse_from(["sluice-bench", "slowsub", "--min-rate", "nan"]).is_err());
        assert!(parse(&["matrix"]).opts().queue_args.is_empty());
    }
}
