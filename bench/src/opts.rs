//! Owns: what a run is parameterised by — [`Opts`], the command line's flags
//! resolved with the scenario's defaults (`scenario::flags`), serialised as the
//! report's `config` — and the value types it is made of: [`AckMode`],
//! [`ConsumeMode`], [`SubscriberClient`] and the slow-consumer [`Policy`].
//! Does not: parse flags, pick defaults, or run anything; it imports nothing else of
//! the tool, so the scenarios and the report can both depend on it.

use std::time::Duration;

use serde::Serialize;
use sluice::client::FlowOptions;

/// Acknowledgement mode of subscribers (the seed's test-spec names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckMode {
    /// `no_ack = true`: the broker forgets a message once written.
    NoAck,
    /// Every message acknowledged on its own (JMS AUTO_ACKNOWLEDGE).
    Auto,
    /// One `multiple` ack per received batch (JMS CLIENT_ACKNOWLEDGE).
    Client,
    /// Lazy `multiple` acks every prefetch/2 messages (JMS DUPS_OK_ACKNOWLEDGE).
    DupsOk,
    /// Acks inside a transaction committed per received batch.
    Transacted,
}

/// How subscribers receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConsumeMode {
    /// `basic.consume` (pushed deliveries).
    Async,
    /// `basic.get` polling.
    Sync,
}

/// The client subscribers connect with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubscriberClient {
    /// The wire client above 64 subscribers when it supports the run, else full.
    Auto,
    /// A minimal consumer over a raw socket: a few KiB and a few hundred ns per
    /// delivery; no-ack or manual acks (one `multiple` ack per read), exclusive
    /// server-named queues, no throttling.
    Wire,
    /// sluice's own client (every ack mode, basic.get, throttled subscribers).
    Full,
}

/// The policy the run expects the broker to apply to the slow subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Close the slow subscriber's channel with 506 (and delete its queue).
    Delete,
    /// Discard the oldest messages for the slow subscriber (ring).
    Cycle,
    /// No policy: the slow subscriber just lags.
    None,
}

/// Everything a scenario is parameterised by (the command-line flags, resolved).
#[derive(Clone, Debug, Serialize)]
pub struct Opts {
    pub publishers: usize,
    pub subscribers: usize,
    pub consumers: usize,
    pub size: usize,
    pub rate: u64,
    /// Closed-loop pacing of `--rate 0` publishers: at most this many messages ahead
    /// of their subscribers ([`pacing`]); 0 = open loop (always 0 with a fixed rate).
    pub max_ahead: u64,
    /// Why the default max ahead is less than usual (a queue bound it stays clear of).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ahead_why: Option<String>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub prefetch: u16,
    pub ack: AckMode,
    pub consume: ConsumeMode,
    pub durable: bool,
    pub persistent: bool,
    pub confirm: usize,
    pub slow: usize,
    /// Messages per second a throttled subscriber takes (after calibration, when
    /// `slow_fraction` is set).
    pub slow_rate: u32,
    /// Throttled subscribers take this fraction of the publishers' maximum rate,
    /// measured by a calibration run first.
    pub slow_fraction: Option<f64>,
    /// Length of the calibration run (seconds).
    pub calibrate_s: f64,
    pub routing_key: String,
    /// Fan-out over this many topics (0 or 1: one routing key): subscriber `i`
    /// follows topic `i % topics`, publishers round-robin over them.
    pub topics: usize,
    /// The client subscribers connect with.
    pub subscriber_client: SubscriberClient,
    /// `--subscriber-url`: where subscribers connect (empty: the broker under test).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subscriber_urls: Vec<String>,
    /// `--publish-delay`: seconds between subscribers bound and the first publish.
    pub publish_delay_s: f64,
    /// Subscriber (and idle connection) set-ups in flight at most.
    pub setup_concurrency: usize,
    /// Seconds between the last disconnect and the after-disconnect RSS sample
    /// (0: not sampled).
    pub settle_s: f64,
    /// Connections of the `idle` scenario.
    pub connections: usize,
    /// Arguments of every subscriber queue and shared queue, as given (`--queue-arg`
    /// and the slow-consumer / capacity conveniences); typed by [`queue_arguments`].
    pub queue_args: Vec<(String, String)>,
    pub max_messages: u64,
    pub drain_timeout_s: f64,
    /// Publishers' flow-control wait before a publish fails (ms).
    pub flow_wait_failure_ms: u64,
    /// Publishers' flow-control WARN period (ms).
    pub flow_notify_period_ms: u64,
    /// Publishers ignore `channel.flow` / `connection.blocked` (as pika does).
    pub ignore_flow: bool,
    /// Publishes a publisher's connection may queue ahead of its socket (0 = the
    /// client's default, 8192): what is queued is committed, flow control or not.
    pub publisher_queue: usize,
    /// Extra command-line arguments of the embedded sluice.
    pub broker_args: Vec<String>,
    pub quiet: bool,
}

impl Opts {
    /// The publishers' flow-control settings.
    pub fn flow(&self) -> FlowOptions {
        FlowOptions {
            notify_period: Duration::from_millis(self.flow_notify_period_ms),
            wait_failure: Duration::from_millis(self.flow_wait_failure_ms),
            honour_flow: !self.ignore_flow,
        }
    }
}
