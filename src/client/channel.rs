//! Owns: [`Channel`] — the application's handle to one AMQP channel: declare, bind,
//! purge and delete; qos; publish (mandatory, confirms, transactions) with producer
//! flow control; consume, get, ack/nack/reject, cancel; `basic.return`s.
//! Does not: hold protocol state or write to the socket; every operation becomes a
//! command for the connection task (`io.rs`), and synchronous ones wait on a oneshot.
//! A channel closed by the broker fails the next operation with
//! [`ClientError::ChannelClosed`]; the connection and other channels carry on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::consumer::Consumer;
use super::error::ClientError;
use super::io::{Cmd, Opened, Pending, Publish, Tuning};
use super::message::{encode_properties, GetMessage, Returned};
use super::shared::{nanos_since, ChanShared, ConnShared, FlowOptions, FlowStats};
use crate::protocol::method::*;
use crate::protocol::{BasicProperties, FieldTable, Method, ShortStr};

/// Flags of `exchange.declare`.
#[derive(Clone, Debug, Default)]
pub struct ExchangeDeclareOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
    /// Extra arguments.
    pub arguments: FieldTable,
}

/// Flags of `queue.declare`.
#[derive(Clone, Debug, Default)]
pub struct QueueDeclareOptions {
    /// Only check that it exists.
    pub passive: bool,
    /// Survives a broker restart.
    pub durable: bool,
    /// Private to this connection, deleted with it.
    pub exclusive: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Extra arguments (`x-message-ttl`, `x-max-length`, …).
    pub arguments: FieldTable,
}

/// The answer to `queue.declare`.
#[derive(Clone, Debug)]
pub struct QueueInfo {
    /// The queue's name (server-chosen when declared with an empty name).
    pub name: ShortStr,
    /// Messages ready in it.
    pub message_count: u32,
    /// Consumers on it.
    pub consumer_count: u32,
}

/// Flags of `basic.consume`.
#[derive(Clone, Debug)]
pub struct ConsumeOptions {
    /// The tag (empty: server-chosen).
    pub consumer_tag: String,
    /// Deliveries need no acknowledgement.
    pub no_ack: bool,
    /// No other consumer on the queue.
    pub exclusive: bool,
    /// Extra arguments.
    pub arguments: FieldTable,
    /// Deliveries the client buffers before it stops reading the socket.
    pub buffer: usize,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            consumer_tag: String::new(),
            no_ack: false,
            exclusive: false,
            arguments: FieldTable::new(),
            buffer: 8192,
        }
    }
}

/// Settles when the broker confirms (or nacks) one publish: `Ok(true)` for ack,
/// `Ok(false)` for nack.
pub struct Confirmation {
    rx: oneshot::Receiver<Result<bool, ClientError>>,
    chan: Arc<ChanShared>,
    conn: Arc<ConnShared>,
}

impl Confirmation {
    /// The outcome if the broker has already answered, without waiting.
    pub fn try_result(&mut self) -> Option<Result<bool, ClientError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(self.chan.gone(&self.conn))),
        }
    }
}

impl Future for Confirmation {
    type Output = Result<bool, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(r)) => Poll::Ready(r),
            Poll::Ready(Err(_)) => Poll::Ready(Err(self.chan.gone(&self.conn))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// One AMQP channel. Operations take `&self`, so a channel can be shared by
/// reference between a consumer loop and its acks. Dropping it closes the channel.
pub struct Channel {
    id: u16,
    cmd: mpsc::Sender<Cmd>,
    shared: Arc<ChanShared>,
    conn: Arc<ConnShared>,
    flow: FlowOptions,
    tuning: Tuning,
    returns: Option<mpsc::UnboundedReceiver<Returned>>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        if self.shared.check(&self.conn).is_ok() {
            let _ = self.cmd.try_send(Cmd::Rpc {
                channel: self.id,
                method: close_method(),
                pending: Pending::Ignore,
            });
        }
    }
}

fn close_method() -> Method {
    Method::ChannelClose(ChannelClose {
        reply_code: 200,
        reply_text: ShortStr::from_static("Goodbye"),
        class_id: 0,
        method_id: 0,
    })
}

macro_rules! expect {
    ($reply:expr, $variant:ident, $name:literal) => {
        match $reply {
            Method::$variant(m) => Ok(m),
            other => Err(ClientError::UnexpectedReply {
                expected: $name,
                got: other.name(),
            }),
        }
    };
}

impl Channel {
    pub(crate) fn new(
        opened: Opened,
        cmd: mpsc::Sender<Cmd>,
        conn: Arc<ConnShared>,
        flow: FlowOptions,
        tuning: Tuning,
    ) -> Channel {
        Channel {
            id: opened.id,
            cmd,
            shared: opened.shared,
            conn,
            flow,
            tuning,
            returns: Some(opened.returns),
        }
    }

    /// The channel number.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The connection's negotiated parameters.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Why the channel ended, if it has (the channel's own reason, else the
    /// connection's).
    pub fn error(&self) -> Option<ClientError> {
        self.shared.check(&self.conn).err()
    }

    /// `true` while the broker holds publishers back on this channel
    /// (`channel.flow active=false`) or connection (`connection.blocked`).
    pub fn is_flow_held(&self) -> bool {
        self.shared.held(&self.conn)
    }

    /// What this channel has seen of producer flow control: `channel.flow` stops,
    /// `connection.blocked` on its connection, and how many publishes waited, for how
    /// long in total, and how many of them timed out.
    pub fn flow_stats(&self) -> FlowStats {
        self.shared.stats(&self.conn)
    }

    /// The flow-control settings this channel's publishes follow.
    pub fn flow_options(&self) -> FlowOptions {
        self.flow
    }

    /// Takes the receiver of `basic.return`s (mandatory publishes the broker could
    /// not route). Returns are buffered until taken; `None` after the first call.
    pub fn take_returns(&mut self) -> Option<mpsc::UnboundedReceiver<Returned>> {
        self.returns.take()
    }

    async fn send(&self, cmd: Cmd) -> Result<(), ClientError> {
        self.cmd
            .send(cmd)
            .await
            .map_err(|_| self.shared.gone(&self.conn))
    }

    async fn rpc(&self, method: Method) -> Result<Method, ClientError> {
        self.shared.check(&self.conn)?;
        let (tx, rx) = oneshot::channel();
        self.send(Cmd::Rpc {
            channel: self.id,
            method,
            pending: Pending::Method(tx),
        })
        .await?;
        rx.await.map_err(|_| self.shared.gone(&self.conn))?
    }

    async fn send_method(&self, method: Method) -> Result<(), ClientError> {
        self.shared.check(&self.conn)?;
        self.send(Cmd::Send {
            channel: self.id,
            method,
        })
        .await
    }

    /// `exchange.declare`.
    pub async fn exchange_declare(
        &self,
        name: &str,
        kind: &str,
        opts: ExchangeDeclareOptions,
    ) -> Result<(), ClientError> {
        let m = ExchangeDeclare {
            ticket: 0,
            exchange: name.into(),
            kind: kind.into(),
            passive: opts.passive,
            durable: opts.durable,
            auto_delete: opts.auto_delete,
            internal: opts.internal,
            nowait: false,
            arguments: opts.arguments,
        };
        expect!(
            self.rpc(m.into()).await?,
            ExchangeDeclareOk,
            "exchange.declare-ok"
        )
        .map(|_| ())
    }

    /// `exchange.delete`.
    pub async fn exchange_delete(&self, name: &str, if_unused: bool) -> Result<(), ClientError> {
        let m = ExchangeDelete {
            ticket: 0,
            exchange: name.into(),
            if_unused,
            nowait: false,
        };
        expect!(
            self.rpc(m.into()).await?,
            ExchangeDeleteOk,
            "exchange.delete-ok"
        )
        .map(|_| ())
    }

    /// `exchange.bind` (exchange-to-exchange, a RabbitMQ extension).
    pub async fn exchange_bind(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), ClientError> {
        let m = ExchangeBind {
            ticket: 0,
            destination: destination.into(),
            source: source.into(),
            routing_key: routing_key.into(),
            nowait: false,
            arguments,
        };
        expect!(
            self.rpc(m.into()).await?,
            ExchangeBindOk,
            "exchange.bind-ok"
        )
        .map(|_| ())
    }

    /// `exchange.unbind`.
    pub async fn exchange_unbind(
        &self,
        destination: &str,
        source: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), ClientError> {
        let m = ExchangeUnbind {
            ticket: 0,
            destination: destination.into(),
            source: source.into(),
            routing_key: routing_key.into(),
            nowait: false,
            arguments,
        };
        expect!(
            self.rpc(m.into()).await?,
            ExchangeUnbindOk,
            "exchange.unbind-ok"
        )
        .map(|_| ())
    }

    /// `queue.declare`; an empty name asks the server to choose one.
    pub async fn queue_declare(
        &self,
        name: &str,
        opts: QueueDeclareOptions,
    ) -> Result<QueueInfo, ClientError> {
        let m = QueueDeclare {
            ticket: 0,
            queue: name.into(),
            passive: opts.passive,
            durable: opts.durable,
            exclusive: opts.exclusive,
            auto_delete: opts.auto_delete,
            nowait: false,
            arguments: opts.arguments,
        };
        let ok = expect!(
            self.rpc(m.into()).await?,
            QueueDeclareOk,
            "queue.declare-ok"
        )?;
        Ok(QueueInfo {
            name: ok.queue,
            message_count: ok.message_count,
            consumer_count: ok.consumer_count,
        })
    }

    /// `queue.bind`.
    pub async fn queue_bind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), ClientError> {
        let m = QueueBind {
            ticket: 0,
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            nowait: false,
            arguments,
        };
        expect!(self.rpc(m.into()).await?, QueueBindOk, "queue.bind-ok").map(|_| ())
    }

    /// `queue.unbind`.
    pub async fn queue_unbind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        arguments: FieldTable,
    ) -> Result<(), ClientError> {
        let m = QueueUnbind {
            ticket: 0,
            queue: queue.into(),
            exchange: exchange.into(),
            routing_key: routing_key.into(),
            arguments,
        };
        expect!(self.rpc(m.into()).await?, QueueUnbindOk, "queue.unbind-ok").map(|_| ())
    }

    /// `queue.purge`; returns how many messages were removed.
    pub async fn queue_purge(&self, queue: &str) -> Result<u32, ClientError> {
        let m = QueuePurge {
            ticket: 0,
            queue: queue.into(),
            nowait: false,
        };
        expect!(self.rpc(m.into()).await?, QueuePurgeOk, "queue.purge-ok")
            .map(|ok| ok.message_count)
    }

    /// `queue.delete`; returns how many messages were deleted with it.
    pub async fn queue_delete(
        &self,
        queue: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> Result<u32, ClientError> {
        let m = QueueDelete {
            ticket: 0,
            queue: queue.into(),
            if_unused,
            if_empty,
            nowait: false,
        };
        expect!(self.rpc(m.into()).await?, QueueDeleteOk, "queue.delete-ok")
            .map(|ok| ok.message_count)
    }

    /// `basic.qos` with a message-count prefetch (0 = unlimited).
    pub async fn basic_qos(&self, prefetch_count: u16, global: bool) -> Result<(), ClientError> {
        let m = BasicQos {
            prefetch_size: 0,
            prefetch_count,
            global,
        };
        expect!(self.rpc(m.into()).await?, BasicQosOk, "basic.qos-ok").map(|_| ())
    }

    /// Publishes one message. `properties` is the raw property part (see
    /// [`super::NO_PROPERTIES`], [`super::encode_properties`]); `exchange` and
    /// `routing_key` are cheap to clone when given as [`ShortStr`]. Waits while the
    /// broker holds publishers back (see [`FlowOptions`]); after the wait-failure
    /// period it returns [`ClientError::FlowControlTimeout`] without sending the
    /// message, and the channel (with any transaction in progress) stays as it was.
    pub async fn basic_publish(
        &self,
        exchange: impl Into<ShortStr>,
        routing_key: impl Into<ShortStr>,
        mandatory: bool,
        properties: Bytes,
        body: Bytes,
    ) -> Result<(), ClientError> {
        self.publish_inner(
            exchange.into(),
            routing_key.into(),
            mandatory,
            properties,
            body,
            None,
        )
        .await
    }

    /// Publishes with typed properties (encoded per call; for repeated sends encode
    /// once with [`super::encode_properties`] and use [`Channel::basic_publish`]).
    pub async fn basic_publish_with(
        &self,
        exchange: impl Into<ShortStr>,
        routing_key: impl Into<ShortStr>,
        mandatory: bool,
        properties: &BasicProperties,
        body: Bytes,
    ) -> Result<(), ClientError> {
        self.basic_publish(
            exchange,
            routing_key,
            mandatory,
            encode_properties(properties),
            body,
        )
        .await
    }

    /// Publishes on a channel in confirm mode and returns a future of the broker's
    /// confirm for this message (`true` ack, `false` nack).
    pub async fn basic_publish_confirmed(
        &self,
        exchange: impl Into<ShortStr>,
        routing_key: impl Into<ShortStr>,
        mandatory: bool,
        properties: Bytes,
        body: Bytes,
    ) -> Result<Confirmation, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.publish_inner(
            exchange.into(),
            routing_key.into(),
            mandatory,
            properties,
            body,
            Some(tx),
        )
        .await?;
        Ok(Confirmation {
            rx,
            chan: Arc::clone(&self.shared),
            conn: Arc::clone(&self.conn),
        })
    }

    async fn publish_inner(
        &self,
        exchange: ShortStr,
        routing_key: ShortStr,
        mandatory: bool,
        properties: Bytes,
        body: Bytes,
        confirm: Option<super::io::ConfirmTx>,
    ) -> Result<(), ClientError> {
        self.shared.check(&self.conn)?;
        self.shared.wait_flow(&self.conn, &self.flow).await?;
        let cmd = Cmd::Publish(Publish {
            channel: self.id,
            exchange,
            routing_key,
            mandatory,
            properties,
            body,
            confirm,
        });
        match self.cmd.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self.shared.gone(&self.conn)),
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                // The socket is not keeping up: count the wait (FlowStats::backpressure).
                let start = Instant::now();
                let r = self.send(cmd).await;
                self.shared
                    .backpressure_ns
                    .fetch_add(nanos_since(start), Ordering::Relaxed);
                r
            }
        }
    }

    /// `confirm.select`: from now on the broker confirms every publish.
    pub async fn confirm_select(&self) -> Result<(), ClientError> {
        let m = ConfirmSelect { nowait: false };
        expect!(
            self.rpc(m.into()).await?,
            ConfirmSelectOk,
            "confirm.select-ok"
        )
        .map(|_| ())
    }

    /// Waits until every publish so far is confirmed; `true` if none was nacked
    /// since the previous wait.
    pub async fn wait_for_confirms(&self) -> Result<bool, ClientError> {
        self.shared.check(&self.conn)?;
        let (tx, rx) = oneshot::channel();
        self.send(Cmd::WaitConfirms {
            channel: self.id,
            reply: tx,
        })
        .await?;
        rx.await.map_err(|_| self.shared.gone(&self.conn))?
    }

    /// `tx.select`.
    pub async fn tx_select(&self) -> Result<(), ClientError> {
        expect!(self.rpc(TxSelect.into()).await?, TxSelectOk, "tx.select-ok").map(|_| ())
    }

    /// `tx.commit`.
    pub async fn tx_commit(&self) -> Result<(), ClientError> {
        expect!(self.rpc(TxCommit.into()).await?, TxCommitOk, "tx.commit-ok").map(|_| ())
    }

    /// `tx.rollback`.
    pub async fn tx_rollback(&self) -> Result<(), ClientError> {
        expect!(
            self.rpc(TxRollback.into()).await?,
            TxRollbackOk,
            "tx.rollback-ok"
        )
        .map(|_| ())
    }

    /// `basic.consume`; deliveries arrive through the returned [`Consumer`].
    pub async fn basic_consume(
        &self,
        queue: &str,
        opts: ConsumeOptions,
    ) -> Result<Consumer, ClientError> {
        self.shared.check(&self.conn)?;
        // Deliveries travel in batches of up to `batch_max`; the queue holds enough
        // batches for `buffer` deliveries.
        let buffer = opts.buffer.max(1);
        let batch_max = buffer.min(256);
        let (dtx, drx) = mpsc::channel((buffer / batch_max).max(1));
        let (tx, rx) = oneshot::channel();
        let m = BasicConsume {
            ticket: 0,
            queue: queue.into(),
            consumer_tag: opts.consumer_tag.as_str().into(),
            no_local: false,
            no_ack: opts.no_ack,
            exclusive: opts.exclusive,
            nowait: false,
            arguments: opts.arguments,
        };
        self.send(Cmd::Rpc {
            channel: self.id,
            method: m.into(),
            pending: Pending::Consume {
                deliveries: dtx,
                batch_max,
                reply: tx,
            },
        })
        .await?;
        let reply = rx.await.map_err(|_| self.shared.gone(&self.conn))??;
        let ok = expect!(reply, BasicConsumeOk, "basic.consume-ok")?;
        Ok(Consumer::new(
            ok.consumer_tag,
            drx,
            Arc::clone(&self.shared),
            Arc::clone(&self.conn),
        ))
    }

    /// `basic.cancel`; the consumer's receiver ends once the server confirms.
    pub async fn basic_cancel(&self, consumer_tag: &str) -> Result<(), ClientError> {
        let m = BasicCancel {
            consumer_tag: consumer_tag.into(),
            nowait: false,
        };
        expect!(self.rpc(m.into()).await?, BasicCancelOk, "basic.cancel-ok").map(|_| ())
    }

    /// `basic.get`: one message, or `None` if the queue is empty.
    pub async fn basic_get(
        &self,
        queue: &str,
        no_ack: bool,
    ) -> Result<Option<GetMessage>, ClientError> {
        self.shared.check(&self.conn)?;
        let (tx, rx) = oneshot::channel();
        let m = BasicGet {
            ticket: 0,
            queue: queue.into(),
            no_ack,
        };
        self.send(Cmd::Rpc {
            channel: self.id,
            method: m.into(),
            pending: Pending::Get(tx),
        })
        .await?;
        rx.await.map_err(|_| self.shared.gone(&self.conn))?
    }

    /// `basic.ack`.
    pub async fn basic_ack(&self, delivery_tag: u64, multiple: bool) -> Result<(), ClientError> {
        self.send_method(
            BasicAck {
                delivery_tag,
                multiple,
            }
            .into(),
        )
        .await
    }

    /// `basic.nack`.
    pub async fn basic_nack(
        &self,
        delivery_tag: u64,
        multiple: bool,
        requeue: bool,
    ) -> Result<(), ClientError> {
        self.send_method(
            BasicNack {
                delivery_tag,
                multiple,
                requeue,
            }
            .into(),
        )
        .await
    }

    /// `basic.reject`.
    pub async fn basic_reject(&self, delivery_tag: u64, requeue: bool) -> Result<(), ClientError> {
        self.send_method(
            BasicReject {
                delivery_tag,
                requeue,
            }
            .into(),
        )
        .await
    }

    /// `basic.recover` (requeue or redeliver unacknowledged messages).
    pub async fn basic_recover(&self, requeue: bool) -> Result<(), ClientError> {
        expect!(
            self.rpc(BasicRecover { requeue }.into()).await?,
            BasicRecoverOk,
            "basic.recover-ok"
        )
        .map(|_| ())
    }

    /// Closes the channel (code 200) and waits for the server's close-ok.
    pub async fn close(self) -> Result<(), ClientError> {
        if self.shared.check(&self.conn).is_err() {
            return Ok(());
        }
        let r = self.rpc(close_method()).await;
        match r {
            Ok(_) => Ok(()),
            Err(ClientError::ChannelClosed { code: 200, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
