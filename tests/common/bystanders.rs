//! Bystanders: healthy connections, opened before a test misbehaves, that must not notice
//! someone else's misbehaviour.

use amqprs::channel::ConsumerMessage;
use tokio::sync::mpsc;

use super::{next_delivery, unique, Broker, Chan, Conn};

/// A set of healthy connections, each consuming from its own queue, opened before a test
/// misbehaves. With several of them at least one usually shares the misbehaving
/// connection's shard.
pub struct Bystanders {
    members: Vec<(Conn, Chan, String, mpsc::UnboundedReceiver<ConsumerMessage>)>,
    round: u32,
}

impl Bystanders {
    pub async fn start(broker: &Broker, count: usize) -> Bystanders {
        let mut members = Vec::new();
        for _ in 0..count {
            let conn = broker.connect().await;
            let ch = conn.channel().await;
            let queue = unique("bystander");
            ch.declare_queue(&queue).await;
            let (_, rx) = ch.consume_auto(&queue).await;
            members.push((conn, ch, queue, rx));
        }
        Bystanders { members, round: 0 }
    }

    /// Publishes one message per bystander from a brand-new connection and asserts every
    /// bystander receives it, and that its connection and channel are still open.
    pub async fn assert_unharmed(&mut self, broker: &Broker) {
        self.round += 1;
        let publisher = broker.connect().await;
        let pch = publisher.channel().await;
        for (_, _, queue, _) in &self.members {
            let body = format!("still-here-{}-{queue}", self.round);
            pch.publish("", queue, body.as_bytes()).await;
        }
        for (conn, ch, queue, rx) in &mut self.members {
            let d = next_delivery(rx).await;
            assert_eq!(
                String::from_utf8_lossy(&d.body),
                format!("still-here-{}-{queue}", self.round),
                "bystander on queue {queue} got the wrong message"
            );
            assert!(conn.conn.is_open(), "bystander connection was closed");
            assert!(ch.ch.is_open(), "bystander channel was closed");
            if let Ok(ev) = ch.events.try_recv() {
                panic!("bystander channel got an unexpected event {ev:?}");
            }
            if let Ok(ev) = conn.events.try_recv() {
                panic!("bystander connection got an unexpected event {ev:?}");
            }
        }
        publisher.close().await;
    }
}
