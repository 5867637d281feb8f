//! Owns: the scenarios (`fanout` with its `slowsub` variant and `--topics` in
//! [`fanout`], `workq`, `flow`, `persistent`, `matrix`, `idle`), what parameterises
//! them ([`Opts`], typed queue arguments in [`args`]) and what a run is made of: a
//! [`Plan`] of subscribers and publishers ([`subscriber`] on sluice's client, or the
//! lean [`wire`] client for thousands of connections, connected by the [`fleet`];
//! [`publisher`], whose confirms [`confirms`] times), run by the [`harness`] (warm-up,
//! measured window — ended early once every publisher reached `--max-messages` —,
//! per-second samples from [`sampler`], drain, disconnect, broker RSS before and
//! after), optionally after a [`calibrate`] run that measures the publishers' maximum
//! rate; `--rate 0` publishers are held a bounded number of messages per subscriber ahead
//! of their subscribers ([`pacing`], closed loop) unless `--open-loop`.
//! Does not: assert speed, or know which broker it drives (any AMQP 0-9-1 broker).

pub mod args;
pub mod calibrate;
pub mod confirms;
pub mod fanout;
pub mod fleet;
pub mod flow;
pub mod harness;
pub mod idle;
pub mod matrix;
pub mod pacing;
pub mod persistent;
pub mod publisher;
pub mod sampler;
pub mod setup;
pub mod subscriber;
pub mod wire;
pub mod workq;

use std::time::Duration;

use serde::Serialize;
use sluice::client::FlowOptions;
use sluice::protocol::{FieldTable, ShortStr};

pub use args::queue_arguments;
pub use fleet::SubscriberClient;
pub use harness::execute;
pub use setup::{declare_exchange, declare_queue, delete_queue};

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

/// How a subscriber gets its queue.
#[derive(Clone, Debug)]
pub enum QueueSetup {
    /// Its own queue bound to `exchange` with `key`: server-named, exclusive and
    /// auto-delete, or (`durable_name`) a durable named queue.
    Bound {
        exchange: String,
        key: String,
        durable_name: Option<String>,
        arguments: FieldTable,
    },
    /// A queue shared with other consumers, declared by the scenario.
    Shared(String),
}

/// One subscriber's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubResult {
    pub id: usize,
    pub queue: String,
    pub slow: bool,
    pub delivered: u64,
    /// Sequence numbers skipped (messages the broker discarded for this subscriber,
    /// e.g. by a cycle policy or `x-max-length`), including those seen skipped in
    /// `read_after_run`.
    pub gaps: u64,
    /// Deliveries whose sequence number was at or below one seen before (out of
    /// order or duplicated).
    pub reordered: u64,
    /// Deliveries in the measured window (those its latency figures cover).
    pub measured: u64,
    /// p99 latency of its deliveries in the measured window (±3.2 %).
    pub p99_ns: Option<u64>,
    /// Reply code and text if the broker closed its channel (e.g. 506
    /// `Consuming too slow.`), and when (seconds since publishing started).
    pub closed_code: Option<u16>,
    pub closed_text: Option<String>,
    pub closed_at_s: Option<f64>,
    /// The close was seen only after the run, behind `read_after_run` deliveries.
    pub closed_after_run: bool,
    /// Deliveries a throttled subscriber read (unthrottled, not counted as delivered)
    /// after the run to learn whether the broker had closed its channel behind what
    /// it had already written to the socket.
    pub read_after_run: u64,
    pub error: Option<String>,
}

/// One publisher's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PubResult {
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    /// Time publishes spent held by broker flow control (ms), measured by the client
    /// around every publish that waited.
    pub flow_held_ms: u64,
    /// Publishes that had to wait for flow control.
    pub flow_waits: u64,
    /// Time publishes waited for room toward the socket (ms): TCP backpressure, or a
    /// broker that stopped reading this connection (how an `--ignore-flow`
    /// publisher is held).
    pub send_blocked_ms: u64,
    /// Publishes that gave up under flow control (each retried until sent or stopped).
    pub flow_timeouts: u64,
    /// `channel.flow active=false` received.
    pub channel_flow_stops: u64,
    /// `connection.blocked` received.
    pub connection_blocks: u64,
    /// Time spent waiting for subscribers under closed-loop pacing (ms): while it
    /// waited, the rate was the subscribers' capacity, not the publisher's.
    pub pacing_wait_ms: u64,
    /// Times the publisher had to wait for subscribers.
    pub pacing_waits: u64,
    /// How long the publisher ran (ms), waits included.
    pub run_ms: u64,
    /// When (seconds since publishing started) no pacing subscriber was left and the
    /// publisher went on open loop.
    pub pacing_released_at_s: Option<f64>,
    pub error: Option<String>,
}

pub struct SubSpec {
    pub id: usize,
    pub setup: QueueSetup,
    pub slow_rate: Option<u32>,
    pub ack: AckMode,
    pub consume: ConsumeMode,
    pub prefetch: u16,
    pub publishers: usize,
}

pub struct PubSpec {
    pub id: u32,
    pub exchange: ShortStr,
    /// Routing keys published to in turn (one per topic); each has its own sequence
    /// numbers, so a subscriber of one topic sees no gaps.
    pub routing_keys: Vec<ShortStr>,
    pub mandatory: bool,
    pub persistent: bool,
    pub confirm: usize,
    pub rate: u64,
    pub size: usize,
    pub max_messages: u64,
    pub flow: FlowOptions,
    /// The connection's command queue (0 = the client's default).
    pub command_queue: usize,
}

impl PubSpec {
    /// Publisher `id` of a scenario, to `exchange` with `routing_key`.
    pub fn new(opts: &Opts, id: usize, exchange: &str, routing_key: &str) -> PubSpec {
        PubSpec {
            id: id as u32,
            exchange: exchange.into(),
            routing_keys: vec![routing_key.into()],
            mandatory: false,
            persistent: opts.persistent,
            confirm: opts.confirm,
            rate: opts.rate,
            size: opts.size,
            max_messages: opts.max_messages,
            flow: opts.flow(),
            command_queue: opts.publisher_queue,
        }
    }
}

/// What the harness needs from a scenario: prepared subscribers and publishers.
pub struct Plan {
    pub subs: Vec<SubSpec>,
    pub pubs: Vec<PubSpec>,
    /// Deliveries expected per published message (fanout: subscribers; workq: 1).
    pub fanout_factor: u64,
    /// What closed-loop publishers are paced against.
    pub pacing: pacing::Reference,
    /// Messages of the whole stream per message one subscriber receives (topics).
    pub pacing_scale: u64,
    /// The single queue every subscriber shares, whose depth is sampled each second.
    pub probe_queue: Option<String>,
    pub notes: Vec<String>,
}
