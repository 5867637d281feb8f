//! The subscriber set-up the sections share: bound server-named queues on many connections.

use amqprs::channel::QueueBindArguments;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::common::{Broker, Chan, Conn};

/// One subscriber queue: its bindings and its delivery stream.
pub(crate) struct Sub {
    pub(crate) patterns: Vec<&'static str>,
    pub(crate) queue: String,
    pub(crate) rx: UnboundedReceiver<amqprs::channel::ConsumerMessage>,
}

/// Opens `n_conns` connections and spreads `pattern_sets` over them round-robin, each as a
/// server-named exclusive queue bound to `exchange` and consumed with auto-ack.
pub(crate) async fn subscribe(
    broker: &Broker,
    n_conns: usize,
    exchange: &str,
    pattern_sets: &[Vec<&'static str>],
) -> (Vec<(Conn, Chan)>, Vec<Sub>) {
    let mut conns = Vec::new();
    for _ in 0..n_conns {
        let conn = broker.connect().await;
        let ch = conn.channel().await;
        conns.push((conn, ch));
    }
    let mut subs = Vec::new();
    for (i, patterns) in pattern_sets.iter().enumerate() {
        let (_, ch) = &conns[i % n_conns];
        let queue = ch.declare_server_named().await;
        for p in patterns {
            ch.queue_bind(QueueBindArguments::new(&queue, exchange, p))
                .await
                .unwrap();
        }
        let (_, rx) = ch.consume_auto(&queue).await;
        subs.push(Sub {
            patterns: patterns.clone(),
            queue,
            rx,
        });
    }
    (conns, subs)
}
