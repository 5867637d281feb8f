//! Owns: the command line of `sluice-bench` — one subcommand per scenario, each
//! with its own flags (the scenario's `Args`, which flatten the groups of
//! `scenario::flags` they use), so `sluice-bench SUB --help` lists only what SUB
//! reads — and, for `main`, what every subcommand has in common: its name, its
//! common flags, its resolved [`Opts`] and its flag checks.
//! Does not: resolve flags (each scenario does, from its `Args`) or run anything.

use clap::{Parser, Subcommand};

use crate::scenario::flags::CommonArgs;
use crate::scenario::{fanout, flow, idle, matrix, persistent, streams, workq, Opts};

/// Load benchmarks for AMQP 0-9-1 brokers. With no --url an embedded sluice is
/// started on an ephemeral loopback port.
#[derive(Parser, Debug)]
#[command(name = "sluice-bench", version)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// P publishers → topic exchange → S subscriber queues (one consumer each).
    Fanout(fanout::Args),
    /// P publishers → one queue ← C consumers.
    Workq(workq::Args),
    /// fanout with K subscribers throttled to R msg/s (default 1 of 16 at 100 msg/s).
    Slowsub(fanout::Args),
    /// 4 publishers into a capacity-limited queue (10 MiB, resume at 8 MiB) drained
    /// by one consumer at 10 % of their maximum rate (producer flow control).
    Flow(flow::Args),
    /// Durable queue, persistent messages, publisher confirms.
    Persistent(persistent::Args),
    /// Seed 000's test matrix: ack mode × consume mode × topic type.
    Matrix(matrix::Args),
    /// --connections N connections that log in, open one channel and do nothing
    /// else for --duration seconds: broker RSS per connection, and after they close.
    Idle(idle::Args),
    /// P publishers → one stream (x-queue-type stream) ← S readers, each its own
    /// consumer at --offset; optionally a prefill and a replay from `first`.
    Streams(streams::Args),
}

impl Command {
    /// The scenario's name, as its subcommand is spelt.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Fanout(_) => "fanout",
            Command::Workq(_) => "workq",
            Command::Slowsub(_) => "slowsub",
            Command::Flow(_) => "flow",
            Command::Persistent(_) => "persistent",
            Command::Matrix(_) => "matrix",
            Command::Idle(_) => "idle",
            Command::Streams(_) => "streams",
        }
    }

    /// The scenario's name as the tool's first line prints it (`Fanout`).
    pub fn title(&self) -> String {
        let name = self.name();
        name[..1].to_uppercase() + &name[1..]
    }

    /// The flags every subcommand has.
    pub fn common(&self) -> &CommonArgs {
        match self {
            Command::Fanout(a) | Command::Slowsub(a) => &a.common,
            Command::Workq(a) => &a.common,
            Command::Flow(a) => &a.common,
            Command::Persistent(a) => &a.common,
            Command::Matrix(a) => &a.common,
            Command::Idle(a) => &a.common,
            Command::Streams(a) => &a.common,
        }
    }

    /// The flags resolved with the scenario's defaults.
    pub fn opts(&self) -> Opts {
        match self {
            Command::Fanout(a) => a.opts(fanout::Kind::Fanout),
            Command::Slowsub(a) => a.opts(fanout::Kind::Slowsub),
            Command::Workq(a) => a.opts(),
            Command::Flow(a) => a.opts(),
            Command::Persistent(a) => a.opts(),
            Command::Matrix(a) => a.opts(),
            Command::Idle(a) => a.opts(),
            Command::Streams(a) => a.opts(),
        }
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Command::Fanout(a) => a.check(fanout::Kind::Fanout),
            Command::Slowsub(a) => a.check(fanout::Kind::Slowsub),
            Command::Workq(a) => a.check(),
            Command::Flow(a) => a.check(),
            Command::Persistent(a) => a.check(),
            Command::Matrix(a) => a.check(),
            Command::Idle(a) => a.check(),
            Command::Streams(a) => a.check(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::scenario::pacing::DEFAULT_MAX_AHEAD;
    use crate::scenario::{AckMode, SubscriberClient};

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from([&["sluice-bench"][..], args].concat())
            .expect("flags parse")
            .command
    }

    fn refused(args: &[&str]) -> bool {
        Cli::try_parse_from([&["sluice-bench"][..], args].concat()).is_err()
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
        assert!(refused(&["workq", "--topics", "4"]), "--topics is fanout's");
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
        assert!(c.check().is_ok());
        assert!(matches!(&c, Command::Persistent(a) if a.shared.keep_queue));
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
        assert!(ext.common().stop_broker);
        assert_eq!(ext.common().broker_log, Some(PathBuf::from("sluice.log")));
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
