//! Owns: the scenarios (`fanout` with its `slowsub` variant and `--topics` in
//! [`fanout`], `workq`, `flow`, `persistent`, `matrix`, `idle`, `streams`), each with its own
//! flags (its `Args`, flattening the shared groups of [`flags`]) and set-up, what
//! parameterises them ([`Opts`](crate::opts::Opts) resolved from those flags, typed
//! queue arguments in [`args`]) and what a run is made of: a
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
pub mod flags;
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
pub mod streams;
pub mod subscriber;
pub mod wire;
pub mod workq;

use sluice::client::FlowOptions;
use sluice::protocol::{FieldTable, ShortStr};

pub use crate::opts::{AckMode, ConsumeMode, Opts, SubscriberClient};
pub use crate::report::{PubResult, SubResult};
pub use args::queue_arguments;
pub use harness::execute;
pub use setup::{declare_exchange, declare_queue, delete_queue};

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

pub struct SubSpec {
    pub id: usize,
    pub setup: QueueSetup,
    /// `basic.consume` arguments (a stream reader's `x-stream-offset`).
    pub consume_args: FieldTable,
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
