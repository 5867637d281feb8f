//! Owns: what the operator interfaces (`crate::http`) ask a shard and what it answers
//! ([`ObserveRequest`], [`ObserveReply`]) — plain owned views of its queues,
//! connections, channels, consumers and directory, carried by `ShardMsg::Observe`.
//!
//! Does not: build the views (`shard::observe` does, from the shard's own state) or
//! format them (`http` does).

use crate::model::ids::ShardId;
// Re-exported: the counters' types are part of the views the operator interfaces read.
pub use crate::queue::QueueCounters;
pub use crate::session::channel::ChannelStats;

/// What the operator interfaces ask a shard.
#[derive(Debug, Clone)]
pub enum ObserveRequest {
    /// The shard's counters, and the detail asked for.
    Snapshot(Want),
    /// The exchanges, queues and bindings of every vhost (any replica has them all).
    Directory,
    /// Close the connection with this name (if it is on this shard) with 320.
    CloseConnection { name: String, reason: String },
    /// Purge a home queue.
    Purge { vhost: String, name: String },
    /// The vhosts open in this shard's directory (the vhosts health check).
    Vhosts,
    /// The management API's publish, step one (any replica): the queues a message
    /// published to `exchange` with this routing key and these properties reaches.
    Route {
        vhost: String,
        exchange: crate::protocol::ShortStr,
        routing_key: crate::protocol::ShortStr,
        raw_properties: bytes::Bytes,
    },
    /// Step two, on the queues' home shard: the message into each of them, as a routed
    /// AMQP publish goes in; the sender holds `permits` of this shard's publish byte
    /// budget, given back once the message is in.
    Enqueue {
        queues: Vec<crate::model::ids::QueueId>,
        msg: crate::model::message::Message,
        permits: u32,
    },
    /// The management API's get, on the queue's home shard: up to `count` messages as
    /// `basic.get` takes them, then settled as `mode` says.
    Get {
        vhost: String,
        name: String,
        count: u32,
        mode: AckMode,
    },
    /// The message counters alone (`http::rates` samples them every few seconds).
    Counters,
}

/// How the management API's get settles what it took (RabbitMQ's `ackmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// Taken, then requeued (`basic.nack` with requeue, once all are taken).
    AckRequeueTrue,
    /// Taken with no-ack: removed.
    AckRequeueFalse,
    /// Taken, then rejected with requeue.
    RejectRequeueTrue,
    /// Taken, then rejected without requeue (dead-lettered where the queue has a DLX).
    RejectRequeueFalse,
}

/// Why a shard did not route a management publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteRefused {
    /// The vhost is not (or no longer) there.
    NoVhost,
    NoExchange,
    /// The exchange is internal: clients may not publish to it.
    Internal,
}

/// A message the management API's get took.
#[derive(Debug, Clone)]
pub struct GotView {
    pub exchange: String,
    pub routing_key: String,
    pub raw_properties: bytes::Bytes,
    pub body: bytes::Bytes,
    pub redelivered: bool,
    /// Messages left in the queue after this one was taken.
    pub remaining: u32,
}

/// Home queues per snapshot answer: a shard with many queues answers in several turns
/// (about a millisecond each), with its sockets and inboxes served in between, so a scrape
/// never stalls deliveries for the time of the whole queue list.
pub const QUEUE_CHUNK: usize = 1000;

/// Which detail a snapshot carries (counts and counters always).
#[derive(Debug, Clone, Copy, Default)]
pub struct Want {
    /// Home queues: at most [`QUEUE_CHUNK`], those with ids above `queues_after`, in id
    /// order; the reply's `next_queue` says where the next request starts.
    pub queues: bool,
    /// The queue id the previous chunk ended at (0 for the first).
    pub queues_after: u64,
    /// Every connection and channel.
    pub connections: bool,
    /// Every consumer (implies the connections' names).
    pub consumers: bool,
}

#[derive(Debug)]
pub enum ObserveReply {
    Snapshot(Box<ShardView>),
    Directory(Vec<VhostView>),
    /// Whether a connection of that name was found (and closed).
    Closed(bool),
    /// Messages purged, or `None` when the queue is not a home queue of this shard.
    Purged(Option<u32>),
    /// The queue is a stream, which does not do that (RabbitMQ's reason).
    NotSupported(String),
    /// The names of the vhosts open in this shard's directory.
    Vhosts(Vec<String>),
    /// The queues a management publish reaches.
    Routed(Result<Vec<crate::model::ids::QueueRef>, RouteRefused>),
    /// Whether every queue took the message (false: one refused it, `reject-publish`).
    Enqueued(bool),
    /// What a get took, or `None` when the queue is not a home queue of this shard.
    Got(Option<Vec<GotView>>),
    Counters(Box<CounterView>),
}

/// One shard's message counters, keyed without names where an id is unique: what the
/// management sampler keeps a few samples of.
#[derive(Debug, Default)]
pub struct CounterView {
    /// Per home queue: its id (`QueueView::id`).
    pub queues: Vec<(u64, QueueCounters)>,
    /// Per channel: (connection serial, channel number).
    pub channels: Vec<((u64, u16), ChannelStats)>,
    /// The exchanges this shard's publishers published to (the others are all zero).
    pub exchanges: Vec<ExchangeCounters>,
}

/// An exchange's counts on one shard's replica (the broker's are the sum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeCounters {
    pub vhost: String,
    pub name: String,
    pub publish_in: u64,
    pub publish_out: u64,
}

/// One shard's figures.
#[derive(Debug, Default)]
pub struct ShardView {
    pub shard: ShardId,
    pub queues: Vec<QueueView>,
    pub connections: Vec<ConnView>,
    pub channels: Vec<ChannelView>,
    pub consumers: Vec<ConsumerView>,
    /// More home queues follow: ask again with `queues_after` = this.
    pub next_queue: Option<u64>,
    /// Counts, whatever the detail.
    pub queue_count: u64,
    pub connection_count: u64,
    pub channel_count: u64,
    pub consumer_count: u64,
    /// Channels that have published at least once (RabbitMQ's `publishers`).
    pub publisher_count: u64,
    /// Messages ready and awaiting ack over every home queue (the overview's totals
    /// without a view of each queue).
    pub messages_ready: u64,
    pub messages_unacked: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Connections whose reader is parked (`net::park`).
    pub readers_parked: u64,
    /// Parks since the shard started.
    pub reader_parks: u64,
    /// The shard's connection and login totals since start (`ShardCounters`).
    pub churn: Churn,
    /// CPU time the shard's thread has used (`CLOCK_THREAD_CPUTIME_ID`): its rate is the
    /// event loop's busy fraction, since a waiting loop sleeps in the kernel.
    pub cpu_seconds: f64,
    /// The message totals of every channel this shard has had, open or closed
    /// (RabbitMQ's global counters).
    pub message_totals: ChannelStats,
    /// Published body sizes (`shard::message_sizes`).
    pub message_sizes: crate::shard::message_sizes::SizeCounts,
}

/// A shard's connection, channel and login totals since start.
#[derive(Debug, Default, Clone, Copy)]
pub struct Churn {
    pub connections_opened: u64,
    pub connections_closed: u64,
    pub channels_opened: u64,
    pub logins_succeeded: u64,
    pub logins_failed: u64,
    /// The coordinator's queue churn (zero on other shards).
    pub queues_declared: u64,
    pub queues_created: u64,
    pub queues_deleted: u64,
}

/// A home queue.
#[derive(Debug, Clone)]
pub struct QueueView {
    /// The queue's id, unique in the broker (a queue declared again gets a new one).
    pub id: u64,
    pub vhost: String,
    pub name: String,
    pub home: ShardId,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    /// The declare arguments.
    pub arguments: crate::protocol::FieldTable,
    /// The run-time policy in force on the queue.
    pub policy: Option<std::sync::Arc<crate::policy::set::Policy>>,
    pub ready: u64,
    pub unacked: u64,
    pub ready_bytes: u64,
    /// Everything held: ready, unacknowledged, no-ack deliveries not yet written.
    pub bytes: u64,
    pub consumers: u64,
    pub oldest_age_secs: f64,
    pub counters: QueueCounters,
    pub flow: Option<FlowView>,
    pub slow: Option<SlowView>,
    /// A stream's log and readers (`None` for a classic queue).
    pub stream: Option<Box<StreamView>>,
}

/// A stream: its log (offsets, segments, bytes), retention, publish rate and readers.
#[derive(Debug, Clone, Default)]
pub struct StreamView {
    pub first_offset: u64,
    /// One past the last offset on disk.
    pub committed_offset: u64,
    pub segments: u64,
    pub disk_bytes: u64,
    /// Bytes of messages in its tail cache.
    pub cache_bytes: u64,
    pub max_length_bytes: Option<u64>,
    pub max_age_secs: Option<f64>,
    pub segment_size: u64,
    pub publish_rate: f64,
    pub publish_bytes_rate: f64,
    pub tracked_consumers: u64,
    pub segments_removed: u64,
    pub messages_removed: u64,
    pub readers: Vec<ReaderView>,
}

/// One reader of a stream and how far behind it is.
#[derive(Debug, Clone, Default)]
pub struct ReaderView {
    pub consumer_tag: String,
    pub connection: String,
    pub channel: u16,
    /// The next offset it will be given.
    pub offset: u64,
    pub started_at: u64,
    pub delivered: u64,
    pub delivery_rate: f64,
    pub prefetch: u32,
    pub credit: u32,
    pub tracking: bool,
    /// Messages and bytes behind the committed end.
    pub lag_messages: u64,
    pub lag_bytes: u64,
    /// Predicted seconds until retention removes its position, if it is falling behind.
    pub seconds_to_retention: Option<f64>,
    /// A disk read for it is planned or running.
    pub reading: bool,
}

/// A queue's producer flow control (seed 001).
#[derive(Debug, Clone, Copy)]
pub struct FlowView {
    pub blocked: bool,
    pub capacity: u64,
    pub resume_capacity: u64,
    pub blocked_publishers: u64,
}

/// A queue's slow-consumer policy (seed 000) and its prediction.
#[derive(Debug, Clone)]
pub struct SlowView {
    pub action: &'static str,
    pub max_depth: Option<u64>,
    pub max_count: Option<u64>,
    pub max_age_secs: Option<f64>,
    pub min_rate: Option<f64>,
    pub arrival_rate: f64,
    pub consume_rate: f64,
    /// The threshold a growing backlog will cross first, and in how many seconds.
    pub predicted_threshold: Option<&'static str>,
    pub predicted_seconds: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct ConnView {
    pub name: String,
    pub serial: u64,
    pub shard: ShardId,
    pub peer: String,
    pub user: String,
    pub vhost: String,
    pub state: &'static str,
    pub channels: u64,
    pub frame_max: u32,
    pub channel_max: u16,
    pub heartbeat: u16,
    /// Stopped being read (flow control or the memory/disk alarms).
    pub held: bool,
    pub outbound_bytes: u64,
    /// The broker's side of the socket (`None` if it could not be read).
    pub local: Option<String>,
    /// On a TLS listener.
    pub tls: bool,
    /// When the socket was accepted, milliseconds since the Unix epoch.
    pub connected_at_ms: u64,
    /// `client-properties` of `connection.start-ok`, as sent.
    pub client_properties: crate::protocol::FieldTable,
    pub auth_mechanism: String,
    /// AMQP bytes read and written (on TLS, the plaintext).
    pub recv_oct: u64,
    pub send_oct: u64,
}

#[derive(Debug, Clone)]
pub struct ChannelView {
    pub connection: String,
    /// The connection's peer address (`connection_details`).
    pub peer: String,
    /// The connection's serial (`ConnView::serial`).
    pub serial: u64,
    pub number: u16,
    pub user: String,
    pub vhost: String,
    pub prefetch: u32,
    pub global_prefetch: u32,
    pub unacked: u64,
    pub consumers: u64,
    pub confirm: bool,
    pub transactional: bool,
    /// `channel.flow(active=false)` was sent to it (flow control or the memory alarm).
    pub flow_blocked: bool,
    pub stats: ChannelStats,
}

#[derive(Debug, Clone)]
pub struct ConsumerView {
    pub connection: String,
    pub channel: u16,
    pub tag: String,
    pub vhost: String,
    pub queue: String,
    pub ack_required: bool,
    pub prefetch: u32,
    pub unacked: u32,
}

/// One vhost's exchanges, queues and bindings.
#[derive(Debug, Clone)]
pub struct VhostView {
    pub vhost: String,
    pub exchanges: Vec<ExchangeView>,
    /// The queues as declared (their contents are the home shard's: `QueueView`).
    pub queues: Vec<QueueDefView>,
    pub bindings: Vec<BindingView>,
}

/// A queue as the directory knows it: what its declare said.
#[derive(Debug, Clone)]
pub struct QueueDefView {
    pub name: String,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: crate::protocol::FieldTable,
}

#[derive(Debug, Clone)]
pub struct ExchangeView {
    pub name: String,
    pub kind: &'static str,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: crate::protocol::FieldTable,
}

#[derive(Debug, Clone)]
pub struct BindingView {
    pub source: String,
    pub destination: String,
    /// "queue" or "exchange".
    pub destination_type: &'static str,
    pub routing_key: String,
    pub arguments: crate::protocol::FieldTable,
}
