//! Owns: [`ShardMsg`], everything one shard can say to another, and the two inboxes each
//! shard reads: a bounded one for publishes (the only traffic whose volume a client
//! controls) and an unbounded one for traffic that is already bounded elsewhere —
//! deliveries (bounded by consumer credit), settlements (bounded by deliveries),
//! dead-lettered messages (bounded by what the source queues held) and the rare control
//! plane.
//!
//! The publish inbox is bounded twice: in batches, and in bytes of message data (a byte
//! budget per destination shard, taken by the sender before it sends and given back by the
//! destination once the messages are in their queues), so "256 batches" cannot hide
//! gigabytes of large messages.
//!
//! Does not: block. Only connection reader tasks ever await inbox capacity or budget (a
//! publisher is paused, its socket unread); a shard's own inbox loop only uses the
//! unbounded inbox, so waits between shards cannot form a cycle.

pub mod observe;

use std::sync::Arc;

use smallvec::SmallVec;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::model::exchange::ExchangeDef;
use crate::model::ids::{
    ChannelRef, ConnId, ConnOwner, ConsumerTarget, QueueId, QueueRef, ShardId,
};
use crate::model::message::Message;
use crate::model::routing::{DirectoryChange, VhostIdx};
use crate::protocol::{FieldTable, ShortStr};
use crate::queue::{ConsumeRefused, QueueStats};
use crate::session::error::ChannelError;

/// One published message for the queues of one shard, tagged with the channel that
/// published it: the queue's shard tells that channel to stop when a queue is overfull,
/// and reports the confirm (or the refusal) back to it.
#[derive(Debug)]
pub struct Routed {
    pub queues: SmallVec<[QueueId; 8]>,
    pub msg: Message,
    pub origin: ChannelRef,
    /// The publisher's confirm sequence number; 0 when its channel is not in confirm mode.
    pub confirm: u64,
}

/// A direct reply-to publish (`amq.rabbitmq.reply-to.<token>` on the default exchange)
/// for the reply consumer of channel `to`, which lives on the receiving shard: no queue
/// in between. `origin` and `confirm` as in [`Routed`]; under `mandatory` a reply whose
/// consumer is gone comes back as a [`ReturnedReply`].
#[derive(Debug)]
pub struct DirectReply {
    pub to: ChannelRef,
    pub msg: Message,
    pub origin: ChannelRef,
    pub confirm: u64,
    pub mandatory: bool,
}

/// A mandatory direct reply whose consumer was gone, for `basic.return` (312 NO_ROUTE)
/// on its publishing channel.
#[derive(Debug)]
pub struct ReturnedReply {
    pub origin: ChannelRef,
    pub msg: Message,
}

/// The publishes one reader turn routed to one shard.
#[derive(Debug)]
pub struct PublishBatch {
    pub from: ShardId,
    pub routed: Vec<Routed>,
    /// Direct replies for reply consumers on that shard (in the same byte budget).
    pub replies: Vec<DirectReply>,
    /// Units of the destination's byte budget the sender holds for this batch; the
    /// destination returns them once the messages are in their queues.
    pub permits: u32,
}

/// Bytes per unit of a shard's publish byte budget.
pub const PERMIT_BYTES: u64 = 1024;

/// A confirm outcome reported by a queue's home shard to the publishing channel: every
/// publish `first..=last` of `channel` was handled there (refused by a queue when
/// `rejected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfirmDone {
    pub channel: ChannelRef,
    pub first: u64,
    pub last: u64,
    pub rejected: bool,
}

/// Producer flow control sent by a queue's home shard to a publishing channel.
#[derive(Debug, Clone)]
pub enum FlowSignal {
    /// The queue is overfull: stop publishing to it.
    Block { queue: QueueRef, name: ShortStr },
    /// The queue is underfull again (or gone).
    Unblock { queue: QueueRef },
}

#[derive(Debug, Clone)]
pub struct FlowNotice {
    pub channel: ChannelRef,
    pub signal: FlowSignal,
}

/// Which channel a slow-consumer close is for, and how to tell it is still that one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowTarget {
    /// A consumer of the queue (its channel-local id).
    Consumer { channel: u16, consumer: u32 },
    /// A channel that drained the queue with `basic.get`.
    Getter { channel: u16, epoch: u32 },
}

/// A message a queue hands to a consumer. `M` is the message handle: `Message` (an
/// `Arc`) when it crosses to another shard, `LocalMessage` (an `Rc`) on the queue's own.
#[derive(Debug)]
pub struct Delivery<M> {
    pub target: ConsumerTarget,
    pub queue: QueueRef,
    pub seq: u64,
    pub msg: M,
    pub redelivered: bool,
    pub no_ack: bool,
}

/// A delivery to a consumer on another shard.
pub type RemoteDelivery = Delivery<Message>;

/// An operation a consumer's channel does on a queue, answered by nothing: settle one
/// delivery (by the queue's sequence number), grant credit, report no-ack writes, or
/// cancel the consumer.
#[derive(Debug, Clone, Copy)]
pub enum QueueOp {
    Ack(u64),
    Requeue(u64),
    Discard(u64),
    /// More credit for the queue-side consumer `key`, in messages and bytes.
    Grant {
        key: u64,
        credit: u32,
        bytes: u64,
    },
    /// The consumer's connection wrote `count` no-ack deliveries of `bytes`.
    Written {
        key: u64,
        count: u32,
        bytes: u64,
    },
    /// The consumer is gone (channel or connection closed).
    Cancel {
        key: u64,
    },
    /// A stream reader's consumer acknowledged up to `offset` (the highest of one
    /// `basic.ack`): a tracking reader keeps it. Sent instead of `Ack` for stream
    /// consumers, whose acks only return credit.
    StreamAck {
        key: u64,
        offset: u64,
    },
}

/// A [`QueueOp`] addressed to one of the destination shard's home queues: what
/// [`ShardMsg::Settle`] carries between shards.
#[derive(Debug, Clone, Copy)]
pub struct AddressedQueueOp {
    pub queue: QueueId,
    pub op: QueueOp,
}

/// Requests to a queue's home shard that need an answer.
#[derive(Debug)]
pub enum QueueRequest {
    Consume {
        queue: QueueId,
        target: ConsumerTarget,
        no_ack: bool,
        exclusive: bool,
        /// `x-priority`.
        priority: i64,
    },
    /// `basic.consume` on a stream (arguments and channel already checked).
    ConsumeStream {
        queue: QueueId,
        target: ConsumerTarget,
        tag: ShortStr,
        /// The tag was made by the broker (an own tag implies offset tracking).
        generated_tag: bool,
        /// The consumer's connection, for the operator views.
        connection: String,
        prefetch: u32,
        args: Box<crate::policy::stream_args::ConsumerArgs>,
    },
    Cancel {
        queue: QueueId,
        key: u64,
    },
    Get {
        queue: QueueId,
        no_ack: bool,
        from: ChannelRef,
    },
    Stats {
        queue: QueueId,
        touch: bool,
    },
    Purge {
        queue: QueueId,
    },
    CheckDelete {
        queue: QueueId,
        if_unused: bool,
        if_empty: bool,
    },
}

/// A message taken by `basic.get`.
#[derive(Debug)]
pub struct GotMessage {
    pub seq: u64,
    pub msg: Message,
    pub redelivered: bool,
    pub remaining: u32,
}

/// Why a queue refused a delete with `if-unused`/`if-empty`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteRefused {
    InUse,
    NotEmpty,
}

#[derive(Debug)]
pub enum QueueReply {
    Consumed(Result<u64, ConsumeRefused>),
    Cancelled,
    /// A tracking stream reader was cancelled: its offset is on disk once this says so
    /// (`basic.cancel-ok` waits for it).
    CancelledWhenSynced(oneshot::Receiver<bool>),
    Got(Option<GotMessage>),
    Stats(QueueStats),
    Purged(u32),
    DeleteChecked(Result<u32, DeleteRefused>),
    /// The queue no longer exists on its home shard.
    Gone,
    /// The slow-consumer policy deleted the queue: a channel consuming from it gets 506.
    SlowConsumerClosed,
}

/// Control-plane requests, all served by the coordinator (shard 0).
#[derive(Debug, Clone)]
pub enum ControlRequest {
    DeclareExchange {
        vhost: VhostIdx,
        def: ExchangeDef,
    },
    DeleteExchange {
        vhost: VhostIdx,
        name: ShortStr,
        if_unused: bool,
    },
    DeclareQueue {
        vhost: VhostIdx,
        name: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnOwner>,
        auto_delete: bool,
        arguments: FieldTable,
        /// The declaring connection (another connection's exclusive queue is 405).
        requester: ConnOwner,
    },
    DeleteQueue {
        vhost: VhostIdx,
        name: ShortStr,
        if_unused: bool,
        if_empty: bool,
        /// The connection asking, for the exclusivity check; `None` for the broker's own
        /// deletions (auto-delete, x-expires, exclusive owner gone).
        requester: Option<ConnOwner>,
    },
    Bind {
        vhost: VhostIdx,
        exchange: ShortStr,
        queue: ShortStr,
        routing_key: ShortStr,
        arguments: FieldTable,
        requester: ConnOwner,
        unbind: bool,
    },
    /// Queues the broker deletes on its own (auto-delete, x-expires, the slow-consumer
    /// policy, exclusive owner gone), collected by one shard and deleted together
    /// (`control::own_deletes`).
    DeleteOwnQueues {
        queues: Vec<OwnDelete>,
    },
    /// A vhost deleted at run time (already closed to connections): every queue of it
    /// deleted as `queue.delete` deletes one, then every exchange of it that is not
    /// predeclared, durable ones off the definitions log.
    EmptyVhost {
        vhost: VhostIdx,
    },
    /// `exchange.bind` / `exchange.unbind`: a binding from `source` to `destination`.
    BindExchange {
        vhost: VhostIdx,
        source: ShortStr,
        destination: ShortStr,
        routing_key: ShortStr,
        arguments: FieldTable,
        unbind: bool,
    },
}

/// A queue the broker deletes on its own (auto-delete, x-expires, the slow-consumer
/// policy, its exclusive owner gone), and what the queue of that name must still be when
/// its round comes (`control::own_deletes`): a queue declared under the name since is
/// another queue, and stays.
#[derive(Clone, Debug)]
pub struct OwnDelete {
    pub vhost: VhostIdx,
    pub name: ShortStr,
    pub only_if: StillThe,
}

/// What makes the queue of an [`OwnDelete`]'s name the one meant.
#[derive(Clone, Copy, Debug)]
pub enum StillThe {
    /// The queue its home shard decided to delete.
    Queue(QueueRef),
    /// An exclusive queue of this connection, which is gone.
    ExclusiveOf(ConnOwner),
}

#[derive(Debug)]
pub enum ControlOk {
    ExchangeDeclared,
    ExchangeDeleted,
    QueueDeclared { queue: QueueRef },
    QueueDeleted { messages: u32 },
    Bound,
}

pub type ControlReply = Result<ControlOk, ChannelError>;

/// Run-time changes of the definitions log's access and policy records.
#[derive(Debug)]
pub enum RuntimeRecords {
    Access(Vec<crate::store::access::AccessChange>),
    Policies(Vec<crate::store::policies::PolicyChange>),
}

/// Everything that crosses between shards.
#[derive(Debug)]
pub enum ShardMsg {
    Publish(PublishBatch),
    /// Dead-lettered messages for queues on this shard, re-published by their source
    /// queue's home shard ([`ChannelRef::broker`] as origin, no confirm). Sent on the
    /// unbounded inbox: the sender's inbox loop must not wait, and the volume is bounded
    /// by what the source queues held.
    DeadLetter(Vec<Routed>),
    /// Confirm outcomes for publishing channels on this shard.
    Confirms(Vec<ConfirmDone>),
    /// Whether channel `.0` (of this shard) has a direct reply-to consumer: a passive
    /// `queue.declare` of its reply address on another shard.
    ReplyConsumer(ChannelRef, oneshot::Sender<bool>),
    /// Mandatory direct replies whose reply consumer was gone, for their publishing
    /// channels on this shard; sent before the confirms of the same turn.
    RepliesReturned(Vec<ReturnedReply>),
    /// Flow control for publishing channels on this shard.
    Flow(Vec<FlowNotice>),
    /// The slow-consumer policy deleted `queue`: close this channel with 506.
    SlowConsumer {
        conn: ConnId,
        target: SlowTarget,
        queue: QueueId,
    },
    Deliver(Vec<RemoteDelivery>),
    Settle(Vec<AddressedQueueOp>),
    /// Apply these directory changes, then acknowledge.
    Apply(Arc<Vec<DirectoryChange>>, oneshot::Sender<()>),
    Control(ControlRequest, oneshot::Sender<ControlReply>),
    Queue(QueueRequest, oneshot::Sender<QueueReply>),
    /// A queue dropped this consumer (queue deleted): tell the client if it wants to know.
    ConsumerGone(ConsumerTarget),
    /// Close every connection with 320 and stop.
    Shutdown,
    /// Put this reloaded configuration in force (SIGHUP), then acknowledge.
    Reload(Arc<crate::config::Config>, oneshot::Sender<()>),
    /// What the admin thread changed at run time, for the coordinator (shard 0) to write
    /// to the definitions log; the sender is told once it is synced.
    PersistRuntime(RuntimeRecords, oneshot::Sender<()>),
    /// The policies set at run time changed: put this configuration in force and apply
    /// them to the home queues at once; answered with how many queues changed policy.
    Policies(Arc<crate::config::Config>, oneshot::Sender<usize>),
    /// The operator interfaces (`crate::http`) ask for figures or an action; answered
    /// from the shard's own state in the turn it arrives (`shard::observe`).
    Observe(
        observe::ObserveRequest,
        oneshot::Sender<observe::ObserveReply>,
    ),
    /// The coordinator (shard 0) only: send the federated exchanges and their bindings,
    /// then every change to them, on this channel (`shard::binding_watch`).
    WatchBindings(
        super::binding_watch::WatchSender,
        super::binding_watch::Watched,
    ),
}

/// The sending halves of every shard's two inboxes, indexed by shard, and each shard's
/// publish byte budget (units of [`PERMIT_BYTES`]).
#[derive(Clone)]
pub struct Peers {
    pub publish: Vec<mpsc::Sender<ShardMsg>>,
    pub control: Vec<mpsc::UnboundedSender<ShardMsg>>,
    pub publish_budget: Vec<Arc<Semaphore>>,
    /// Units in each budget.
    pub budget_permits: u32,
}

impl Peers {
    pub fn len(&self) -> usize {
        self.control.len()
    }

    pub fn is_empty(&self) -> bool {
        self.control.is_empty()
    }

    /// Sends on the unbounded inbox. A closed inbox means that shard has stopped.
    pub fn send(&self, shard: ShardId, msg: ShardMsg) {
        if let Some(tx) = self.control.get(usize::from(shard)) {
            let _ = tx.send(msg);
        }
    }

    /// The budget units a batch of `bytes` takes (at least one, at most the whole budget).
    pub fn permits_for(&self, bytes: u64) -> u32 {
        let units = bytes.div_ceil(PERMIT_BYTES).max(1);
        u32::try_from(units)
            .unwrap_or(u32::MAX)
            .min(self.budget_permits)
    }

    /// Gives budget units back to `shard`'s publish budget.
    pub fn release_budget(&self, shard: ShardId, permits: u32) {
        if let Some(budget) = self.publish_budget.get(usize::from(shard)) {
            budget.add_permits(permits as usize);
        }
    }
}

/// The receiving halves of one shard's inboxes.
pub struct Inbox {
    pub publish: mpsc::Receiver<ShardMsg>,
    pub control: mpsc::UnboundedReceiver<ShardMsg>,
}

/// Creates the inboxes of `shards` shards: `publish_capacity` batches and
/// `publish_bytes` bytes of message data in flight to each.
pub fn mesh(shards: usize, publish_capacity: usize, publish_bytes: u64) -> (Peers, Vec<Inbox>) {
    let budget_permits =
        u32::try_from((publish_bytes / PERMIT_BYTES).max(1)).unwrap_or(u32::MAX >> 4);
    let mut peers = Peers {
        publish: Vec::with_capacity(shards),
        control: Vec::with_capacity(shards),
        publish_budget: (0..shards)
            .map(|_| Arc::new(Semaphore::new(budget_permits as usize)))
            .collect(),
        budget_permits,
    };
    let mut inboxes = Vec::with_capacity(shards);
    for _ in 0..shards {
        let (ptx, prx) = mpsc::channel(publish_capacity);
        let (ctx, crx) = mpsc::unbounded_channel();
        peers.publish.push(ptx);
        peers.control.push(ctx);
        inboxes.push(Inbox {
            publish: prx,
            control: crx,
        });
    }
    (peers, inboxes)
}
