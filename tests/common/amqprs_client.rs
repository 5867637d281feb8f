//! Thin helpers around the amqprs client: `Conn` and `Chan` with the server-initiated
//! [`Event`]s of each, and bounded waits for events and deliveries.

use std::time::Duration;

use amqprs::channel::{
    BasicConsumeArguments, BasicGetArguments, BasicPublishArguments, Channel, ConsumerMessage,
    QueueDeclareArguments,
};
use amqprs::connection::Connection;
use amqprs::BasicProperties;
use tokio::sync::mpsc;

use super::amqprs_events::ChanEvents;
use super::EVENT_TIMEOUT;

/// Something the server sent on its own initiative.
#[derive(Debug)]
pub enum Event {
    ChannelClose {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    ConnectionClose {
        code: u16,
        text: String,
    },
    Cancel {
        consumer_tag: String,
    },
    Ack {
        tag: u64,
        multiple: bool,
    },
    Nack {
        tag: u64,
        multiple: bool,
    },
    Return {
        code: u16,
        text: String,
        exchange: String,
        routing_key: String,
        props: Box<BasicProperties>,
        body: Vec<u8>,
    },
    Flow {
        active: bool,
    },
    Blocked {
        reason: String,
    },
    Unblocked,
}

/// An amqprs connection plus the server-initiated connection events.
pub struct Conn {
    pub conn: Connection,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl Conn {
    /// Opens a channel whose server-initiated methods arrive on the returned receiver.
    pub async fn channel(&self) -> Chan {
        let ch = self.conn.open_channel(None).await.expect("open channel");
        let (tx, rx) = mpsc::unbounded_channel();
        ch.register_callback(ChanEvents { tx })
            .await
            .expect("register channel callback");
        Chan { ch, events: rx }
    }

    pub async fn close(self) {
        close_amqprs(self.conn).await;
    }
}

/// connection.close through amqprs, tolerating one known client-side race: amqprs's
/// `Connection::close` marks the connection closed before it registers for close-ok, and if
/// its reader task is just finishing another frame it sees the flag, shuts the socket down
/// itself and the close then fails with "failed to register responder". The broker then
/// sees the socket close instead of connection.close; the raw-socket suites cover the
/// close handshake itself.
pub async fn close_amqprs(conn: Connection) {
    match conn.close().await {
        Ok(()) => {}
        Err(amqprs::error::Error::ConnectionCloseError(msg))
            if msg.starts_with("failed to register responder") => {}
        // The same race, lost one step later (after close was sent, before close-ok).
        Err(amqprs::error::Error::InternalChannelError(_)) => {}
        Err(e) => panic!("connection.close failed: {e}"),
    }
}

/// An amqprs channel plus the server-initiated channel events.
pub struct Chan {
    pub ch: Channel,
    pub events: mpsc::UnboundedReceiver<Event>,
}

impl std::ops::Deref for Chan {
    type Target = Channel;
    fn deref(&self) -> &Channel {
        &self.ch
    }
}

impl Chan {
    /// Next event within [`EVENT_TIMEOUT`]; panics if none arrives.
    pub async fn next_event(&mut self) -> Event {
        next_event(&mut self.events).await
    }

    /// Waits for the server's channel.close and returns (code, text).
    pub async fn expect_close(&mut self) -> (u16, String) {
        loop {
            match self.next_event().await {
                Event::ChannelClose { code, text, .. } => return (code, text),
                Event::Flow { .. } => continue,
                other => panic!("expected channel.close, got {other:?}"),
            }
        }
    }

    /// Declares a plain (non-durable, non-exclusive) queue named by the caller.
    pub async fn declare_queue(&self, name: &str) {
        self.ch
            .queue_declare(QueueDeclareArguments::new(name))
            .await
            .expect("queue.declare")
            .expect("declare-ok");
    }

    /// Declares a server-named exclusive queue and returns its name.
    pub async fn declare_server_named(&self) -> String {
        let (name, _, _) = self
            .ch
            .queue_declare(QueueDeclareArguments::exclusive_server_named())
            .await
            .expect("queue.declare")
            .expect("declare-ok");
        name
    }

    pub async fn publish(&self, exchange: &str, routing_key: &str, body: &[u8]) {
        self.publish_props(exchange, routing_key, BasicProperties::default(), body)
            .await
    }

    pub async fn publish_props(
        &self,
        exchange: &str,
        routing_key: &str,
        props: BasicProperties,
        body: &[u8],
    ) {
        self.ch
            .basic_publish(
                props,
                body.to_vec(),
                BasicPublishArguments::new(exchange, routing_key),
            )
            .await
            .expect("basic.publish");
    }

    /// Message count of `queue` from a passive declare.
    pub async fn message_count(&self, queue: &str) -> u32 {
        let (_, count, _) = self
            .ch
            .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
            .await
            .expect("passive queue.declare")
            .expect("declare-ok");
        count
    }

    /// Polls the passive message count until it equals `n`; panics after 5 s.
    pub async fn wait_message_count(&self, queue: &str, n: u32) {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            let got = self.message_count(queue).await;
            if got == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "queue {queue} has {got} messages, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// basic.get (auto-ack as given).
    pub async fn get(&self, queue: &str, no_ack: bool) -> Option<amqprs::channel::GetMessage> {
        self.ch
            .basic_get(BasicGetArguments::new(queue).no_ack(no_ack).finish())
            .await
            .expect("basic.get")
    }

    /// Polls basic.get until a message arrives; panics after 5 s.
    pub async fn get_eventually(&self, queue: &str, no_ack: bool) -> amqprs::channel::GetMessage {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            if let Some(m) = self.get(queue, no_ack).await {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no message in {queue} within {EVENT_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// In confirm mode: waits until the broker has acked every tag up to `last`; panics on
    /// a nack or an unrelated event.
    pub async fn wait_acked(&mut self, last: u64) {
        let mut acked = std::collections::BTreeSet::new();
        let mut upto = 0u64;
        while !(upto >= last || (1..=last).all(|t| t <= upto || acked.contains(&t))) {
            match self.next_event().await {
                Event::Ack { tag, multiple } => {
                    assert!(
                        tag >= 1 && tag <= last,
                        "ack for tag {tag}, only 1..={last} published"
                    );
                    if multiple {
                        upto = upto.max(tag);
                    } else {
                        assert!(tag > upto && acked.insert(tag), "tag {tag} acked twice");
                    }
                }
                other => panic!("waiting for publisher acks up to {last}, got {other:?}"),
            }
        }
    }

    /// basic.consume with auto-ack; returns the consumer tag and the delivery stream.
    pub async fn consume_auto(
        &self,
        queue: &str,
    ) -> (String, mpsc::UnboundedReceiver<ConsumerMessage>) {
        let args = BasicConsumeArguments::new(queue, "")
            .auto_ack(true)
            .finish();
        self.ch.basic_consume_rx(args).await.expect("basic.consume")
    }

    /// basic.consume with manual ack.
    pub async fn consume_manual(
        &self,
        queue: &str,
    ) -> (String, mpsc::UnboundedReceiver<ConsumerMessage>) {
        let args = BasicConsumeArguments::new(queue, "")
            .manual_ack(true)
            .finish();
        self.ch.basic_consume_rx(args).await.expect("basic.consume")
    }
}

/// Next event within [`EVENT_TIMEOUT`]; panics if none arrives.
pub async fn next_event(rx: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    match tokio::time::timeout(EVENT_TIMEOUT, rx.recv()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => panic!("event stream ended"),
        Err(_) => panic!("no server event within {EVENT_TIMEOUT:?}"),
    }
}

/// Next delivery within [`EVENT_TIMEOUT`]; panics if none arrives.
pub async fn next_delivery(rx: &mut mpsc::UnboundedReceiver<ConsumerMessage>) -> Delivery {
    match tokio::time::timeout(EVENT_TIMEOUT, rx.recv()).await {
        Ok(Some(msg)) => Delivery::from(msg),
        Ok(None) => panic!("consumer stream ended"),
        Err(_) => panic!("no delivery within {EVENT_TIMEOUT:?}"),
    }
}

/// Asserts that no delivery arrives within `quiet`.
pub async fn assert_no_delivery(
    rx: &mut mpsc::UnboundedReceiver<ConsumerMessage>,
    quiet: Duration,
) {
    if let Ok(Some(msg)) = tokio::time::timeout(quiet, rx.recv()).await {
        let d = Delivery::from(msg);
        panic!(
            "unexpected delivery tag {} body {:?}",
            d.delivery_tag,
            String::from_utf8_lossy(&d.body)
        );
    }
}

/// A delivery with its pieces unwrapped.
#[derive(Debug)]
pub struct Delivery {
    pub consumer_tag: String,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub exchange: String,
    pub routing_key: String,
    pub props: BasicProperties,
    pub body: Vec<u8>,
}

impl From<ConsumerMessage> for Delivery {
    fn from(mut m: ConsumerMessage) -> Self {
        let d = m.deliver.take().expect("deliver");
        Delivery {
            consumer_tag: d.consumer_tag().clone(),
            delivery_tag: d.delivery_tag(),
            redelivered: d.redelivered(),
            exchange: d.exchange().clone(),
            routing_key: d.routing_key().clone(),
            props: m.basic_properties.take().expect("properties"),
            body: m.content.take().expect("content"),
        }
    }
}
