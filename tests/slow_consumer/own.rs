//! Helpers for sluice's own client (`sluice::client`): connecting, declaring and
//! binding with arguments, numbered publishes, and the slow-consumer close as its user
//! sees it — `ClientError::ChannelClosed { code: 506, text: "Consuming too slow." }`, the
//! connection still usable, the queue gone.

use std::time::Duration;

use bytes::Bytes;
use sluice::client::{
    ClientError, Connection as OwnConn, Consumer, Delivery as OwnDelivery, QueueDeclareOptions,
    NO_PROPERTIES,
};

use crate::common::Broker;
use crate::harness::{body, own_table, Arg, ACT, TOO_SLOW};

// ---------------------------------------------------------------------------------------
// sluice's own client
// ---------------------------------------------------------------------------------------

pub async fn own_connect(broker: &Broker) -> OwnConn {
    OwnConn::connect(&format!("amqp://guest:guest@{}/", broker.addr()))
        .await
        .expect("sluice client connect")
}

/// Declares `name` (empty: server-named exclusive) with `args` and binds it to
/// `amq.topic` with `key`.
pub async fn own_declare_bound(
    ch: &sluice::client::Channel,
    name: &str,
    durable: bool,
    args: &[(&str, Arg)],
    key: &str,
) -> String {
    let info = ch
        .queue_declare(
            name,
            QueueDeclareOptions {
                durable,
                exclusive: name.is_empty(),
                arguments: own_table(args),
                ..Default::default()
            },
        )
        .await
        .expect("queue.declare");
    ch.queue_bind(
        &info.name.to_string(),
        "amq.topic",
        key,
        sluice::protocol::FieldTable::new(),
    )
    .await
    .expect("queue.bind");
    info.name.to_string()
}

/// Publishes numbered messages with sluice's client.
pub async fn own_publish_seqs(
    ch: &sluice::client::Channel,
    exchange: &str,
    key: &str,
    seqs: impl IntoIterator<Item = u32>,
    size: usize,
) {
    for i in seqs {
        ch.basic_publish(
            exchange,
            key,
            false,
            NO_PROPERTIES,
            Bytes::from(body(i, size)),
        )
        .await
        .expect("basic.publish");
    }
}

/// Asserts the error is the slow-consumer close.
pub fn assert_too_slow_error(e: &ClientError) {
    match e {
        ClientError::ChannelClosed {
            code,
            text,
            class_id,
            method_id,
        } => assert_eq!(
            (*code, text.as_str(), *class_id, *method_id),
            (506, TOO_SLOW, 0, 0),
            "slow-consumer close"
        ),
        other => panic!("expected ChannelClosed 506 {TOO_SLOW:?}, got {other:?}"),
    }
}

/// Reads a consumer until its stream ends; asserts it ended with the slow-consumer close
/// and returns what it delivered.
pub async fn own_read_until_too_slow(consumer: &mut Consumer) -> Vec<OwnDelivery> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + ACT;
    loop {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Err(_) => panic!("consumer not closed within {ACT:?}"),
            Ok(Ok(d)) => got.push(d),
            Ok(Err(e)) => {
                assert_too_slow_error(&e);
                return got;
            }
        }
    }
}

/// sluice's client: the connection survived and works; the queue is gone.
pub async fn own_assert_usable_and_gone(conn: &OwnConn, queue: &str) {
    assert!(
        conn.error().is_none(),
        "connection failed: {:?}",
        conn.error()
    );
    let ch = conn
        .open_channel()
        .await
        .expect("open a new channel at once");
    let q = ch
        .queue_declare(
            "",
            QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
        )
        .await
        .expect("declare on the new channel");
    ch.basic_publish(
        "",
        q.name.clone(),
        false,
        NO_PROPERTIES,
        Bytes::from_static(b"ok"),
    )
    .await
    .expect("publish on the new channel");
    let got = loop {
        if let Some(m) = ch
            .basic_get(&q.name.to_string(), true)
            .await
            .expect("basic.get")
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(&got.body[..], b"ok");
    let probe = conn.open_channel().await.expect("open a probe channel");
    let r = probe
        .queue_declare(
            queue,
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
        )
        .await;
    match r {
        Err(ClientError::ChannelClosed {
            code: 404, text, ..
        }) => {
            assert_eq!(text, format!("NOT_FOUND - no queue '{queue}' in vhost '/'"))
        }
        other => panic!("passive declare of the deleted queue {queue}: {other:?}"),
    }
    assert!(
        conn.error().is_none(),
        "connection failed: {:?}",
        conn.error()
    );
}
