//! RabbitMQ interop, both directions, against a private RabbitMQ node (skipped with a
//! message where `rabbitmq-server` is not installed):
//!
//! (a) a sluice relay federating `amq.topic` from RabbitMQ (RabbitMQ's upstream side:
//!     its `x-federation-upstream` exchange type, its queues and acks);
//! (b) RabbitMQ federating the topic exchange `interop.b` from a sluice upstream, set up
//!     as RabbitMQ users do (`set_parameter federation-upstream` and a policy with
//!     `federation-upstream-set`), so sluice accepts RabbitMQ's link.

use std::time::{Duration, Instant};

use crate::cluster::{
    declare_topic, exchange_toml, propagated_keys, publish_numbered, received_from, upstream_toml,
    Node, Subscriber, DELIVERY_TIMEOUT, LINK_TIMEOUT,
};
use crate::common::broker::connect_to;
use crate::rabbit::RabbitNode;

const COUNT: u32 = 1_000;
/// The exchange RabbitMQ federates from sluice.
const XB: &str = "interop.b";

async fn rabbitmq_both_directions() {
    let Some(rabbit) = RabbitNode::start() else {
        return;
    };
    // The sluice node: downstream of RabbitMQ for amq.topic, upstream of it for XB.
    let sluice_toml = upstream_toml("rabbit", &rabbit.uri(), "reconnect_delay = 1")
        + &exchange_toml("amq.topic", &["rabbit"]);
    let sluice = Node::start("interop-sluice", &sluice_toml);
    sluice.wait_link_running("rabbit", "amq.topic", 1, LINK_TIMEOUT);

    // (a) RabbitMQ → sluice.
    let mut sub_a = Subscriber::new(&sluice, "sluice-sub", "amq.topic", &["interop.a.#"]).await;
    let prefix = "federation: amq.topic -> interop-sluice";
    let start = Instant::now();
    loop {
        let bound = rabbit
            .bindings()
            .into_iter()
            .any(|(s, d, k)| s == "amq.topic" && d.starts_with(prefix) && k == "interop.a.#");
        if bound {
            println!(
                "(a) sluice's binding reached RabbitMQ in {:?}",
                start.elapsed()
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "(a) RabbitMQ never got sluice's binding interop.a.#; bindings: {:?}",
            rabbit.bindings()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let rconn = connect_to(&rabbit.amqprs_args()).await;
    let rch = rconn.channel().await;
    publish_numbered(&rch, "amq.topic", "interop.a.x", "rabbit-pub", COUNT).await;
    sub_a.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    sub_a.assert_quiet().await;
    sub_a.assert_exactly(&["rabbit-pub"], COUNT);
    for d in &sub_a.got {
        assert_eq!(
            received_from(d),
            vec![(rabbit.cluster_name.clone(), "amq.topic".to_owned())],
            "(a) x-received-from of a message from RabbitMQ"
        );
    }

    // (b) sluice → RabbitMQ.
    let sconn = sluice.connect().await;
    let sch = sconn.channel().await;
    declare_topic(&sch, XB).await;
    declare_topic(&rch, XB).await;
    let upstream_def = format!(
        "{{\"uri\":\"{}\",\"reconnect-delay\":1,\"ack-mode\":\"on-confirm\"}}",
        sluice.uri()
    );
    rabbit.ctl(&[
        "set_parameter",
        "federation-upstream",
        "sluice",
        &upstream_def,
    ]);
    rabbit.ctl(&[
        "set_policy",
        "--apply-to",
        "exchanges",
        "fed-interop-b",
        "^interop\\.b$",
        "{\"federation-upstream-set\":\"all\"}",
    ]);
    let mut sub_b = Subscriber::on(
        connect_to(&rabbit.amqprs_args()).await,
        "rabbit-sub",
        XB,
        &["b.#"],
    )
    .await;
    let start = Instant::now();
    loop {
        let keys = propagated_keys(sluice.http_port(), XB, &rabbit.cluster_name);
        if keys.contains("b.#") {
            println!(
                "(b) RabbitMQ's binding reached sluice in {:?}",
                start.elapsed()
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "(b) sluice never got RabbitMQ's binding b.# on {XB}; sluice's bindings: {:?}; \
             RabbitMQ's federation status: {}",
            crate::cluster::bindings(sluice.http_port()),
            rabbit.ctl(&["eval", "rabbit_federation_status:status()."])
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    publish_numbered(&sch, XB, "b.x", "sluice-pub", COUNT).await;
    sub_b.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    sub_b.assert_quiet().await;
    sub_b.assert_exactly(&["sluice-pub"], COUNT);
    for d in &sub_b.got {
        assert_eq!(
            received_from(d),
            vec![("interop-sluice".to_owned(), XB.to_owned())],
            "(b) x-received-from of a message from sluice"
        );
    }
    sconn.close().await;
    rconn.close().await;
    let mut sluice = sluice;
    sluice.assert_healthy();
}

mod tests {
    fed_tests! {
        rabbitmq_both_directions => 240,
    }
}
