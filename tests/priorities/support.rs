//! amqprs helpers for the priority suites: argument tables, declares and consumes with
//! arguments, publishes with a priority, draining a queue with basic.get, and the barrier
//! that makes a consumer's credit visible to its queue before a test publishes.

use std::time::Duration;

use amqprs::channel::{BasicConsumeArguments, BasicQosArguments, ConsumerMessage};
use amqprs::channel::{BasicPublishArguments, QueueDeclareArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::{next_delivery, Chan, Delivery, Event};

/// A field table from (key, value) pairs.
pub fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        t.insert((*k).try_into().expect("field name"), v.clone());
    }
    t
}

/// A long string value.
pub fn longstr(s: &str) -> FieldValue {
    FieldValue::S(s.try_into().expect("long string"))
}

/// `x-max-priority` as a signed 32-bit integer (what most clients send).
pub fn max_priority(n: i32) -> FieldTable {
    table(&[("x-max-priority", FieldValue::I(n))])
}

/// queue.declare with arguments; the error if the broker refused it.
pub async fn declare(ch: &Chan, name: &str, arguments: FieldTable) -> Result<(), String> {
    ch.ch
        .queue_declare(
            QueueDeclareArguments::new(name)
                .arguments(arguments)
                .finish(),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// queue.declare that must succeed.
pub async fn declare_ok(ch: &Chan, name: &str, arguments: FieldTable) {
    declare(ch, name, arguments)
        .await
        .unwrap_or_else(|e| panic!("queue.declare {name}: {e}"));
}

/// Publishes `body` to `queue` through the default exchange, with a priority if given.
pub async fn publish(ch: &Chan, queue: &str, body: &str, priority: Option<u8>) {
    let mut props = BasicProperties::default();
    if let Some(p) = priority {
        props.with_priority(p);
    }
    ch.ch
        .basic_publish(
            props.finish(),
            body.as_bytes().to_vec(),
            BasicPublishArguments::new("", queue),
        )
        .await
        .expect("basic.publish");
}

/// Takes every ready message with basic.get (auto-ack); returns the bodies.
pub async fn drain(ch: &Chan, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((_, _, body)) = ch.get(queue, true).await {
        out.push(String::from_utf8(body).expect("utf-8 body"));
    }
    out
}

/// basic.qos then basic.consume with manual ack and these consumer arguments.
pub async fn consume_with(
    ch: &Chan,
    queue: &str,
    prefetch: u16,
    arguments: FieldTable,
    exclusive: bool,
) -> Result<(String, UnboundedReceiver<ConsumerMessage>), String> {
    ch.ch
        .basic_qos(BasicQosArguments::new(0, prefetch, false))
        .await
        .expect("basic.qos");
    let mut args = BasicConsumeArguments::new(queue, "")
        .manual_ack(true)
        .finish();
    args.arguments = arguments;
    args.exclusive = exclusive;
    ch.ch
        .basic_consume_rx(args)
        .await
        .map_err(|e| e.to_string())
}

/// A consumer with `x-priority` (none when `None`) and a prefetch; the credit its channel
/// grants is at the queue when this returns (see [`barrier`]).
pub async fn consumer(
    ch: &Chan,
    queue: &str,
    prefetch: u16,
    priority: Option<FieldValue>,
) -> UnboundedReceiver<ConsumerMessage> {
    let arguments = match priority {
        Some(p) => table(&[("x-priority", p)]),
        None => FieldTable::new(),
    };
    let (_, rx) = consume_with(ch, queue, prefetch, arguments, false)
        .await
        .expect("basic.consume");
    barrier(ch, queue).await;
    rx
}

/// A passive declare on `ch`: the queue's home shard answers it only after what `ch`'s
/// connection sent before (credit grants, acks, requeues) — they leave its shard before
/// the request, on the same inbox — so a publish after this sees them applied.
pub async fn barrier(ch: &Chan, queue: &str) {
    ch.message_count(queue).await;
}

/// The next `n` deliveries' bodies and redelivered flags.
pub async fn take(rx: &mut UnboundedReceiver<ConsumerMessage>, n: usize) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next_delivery(rx).await);
    }
    out
}

pub fn bodies(ds: &[Delivery]) -> Vec<String> {
    ds.iter()
        .map(|d| String::from_utf8(d.body.clone()).expect("utf-8 body"))
        .collect()
}

/// How long "nothing else arrives" is watched.
pub const QUIET: Duration = Duration::from_millis(300);

/// The channel.close the broker sent: code, text, class id, method id.
pub async fn expect_close(ch: &mut Chan) -> (u16, String, u16, u16) {
    loop {
        match ch.next_event().await {
            Event::ChannelClose {
                code,
                text,
                class_id,
                method_id,
            } => return (code, text, class_id, method_id),
            Event::Flow { .. } => continue,
            other => panic!("expected channel.close, got {other:?}"),
        }
    }
}

/// RabbitMQ's text for a refused argument value.
pub fn invalid_arg(argument: &str, queue: &str, term: &str) -> String {
    format!(
        "PRECONDITION_FAILED - invalid arg '{argument}' for queue '{queue}' in vhost '/': {term}"
    )
}

/// sluice's text for a redeclare with another argument value.
pub fn inequivalent(argument: &str, queue: &str, received: &str, current: &str) -> String {
    format!(
        "PRECONDITION_FAILED - inequivalent arg '{argument}' for queue '{queue}' in vhost '/': received '{received}' but current is '{current}'"
    )
}
