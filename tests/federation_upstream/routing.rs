//! The `x-federation-upstream` type routes like fanout behind its binding from X, and
//! only what the hop rule allows; recovered after a restart with its arguments.

use bytes::Bytes;
use sluice::client::{Channel, ExchangeDeclareOptions};
use sluice::protocol::{FieldTable, FieldValue};

use crate::common::{unique, Broker, TestDir};
use crate::{
    broker_named, closed, connect, durable_queue, received_from, text, upstream_args,
    upstream_options, with_headers, UPSTREAM_TYPE,
};

/// One publish to X: a name (its body), its routing key, its headers, and whether the
/// link's queue must receive it.
struct Case {
    name: &'static str,
    key: &'static str,
    headers: Option<FieldTable>,
    forwarded: bool,
}

fn case(
    name: &'static str,
    key: &'static str,
    headers: Option<FieldTable>,
    forwarded: bool,
) -> Case {
    Case {
        name,
        key,
        headers,
        forwarded,
    }
}

/// The cases of an upstream exchange with x-max-hops 2 for downstream node B, vhost `/`.
fn hop_cases() -> Vec<Case> {
    let mut unrelated = FieldTable::new();
    unrelated.insert("app", text("orders"));
    let mut not_an_array = FieldTable::new();
    not_an_array.insert("x-received-from", text("B"));
    vec![
        case("no-properties", "a.b", None, true),
        case("no-trail", "a.b", Some(unrelated), true),
        case("one-hop", "a.b", Some(received_from(&[("C", "/")])), true),
        case(
            "hops-equal-max",
            "a.b",
            Some(received_from(&[("C", "/"), ("D", "/")])),
            false,
        ),
        case(
            "seen-at-b",
            "a.b",
            Some(received_from(&[("B", "/")])),
            false,
        ),
        case(
            "b-in-another-vhost",
            "a.b",
            Some(received_from(&[("B", "other")])),
            true,
        ),
        case("trail-not-an-array", "a.b", Some(not_an_array), true),
        case("key-not-bound", "b.c", None, false),
        case("last", "a.z", None, true),
    ]
}

/// The `x-bound-from` argument RabbitMQ's link puts on its `exchange.bind`.
fn bound_from(node: &str) -> FieldTable {
    let mut hop = FieldTable::new();
    hop.insert("cluster-name", text(node));
    hop.insert("vhost", text("/"));
    hop.insert("exchange", text("/:x B"));
    hop.insert("hops", FieldValue::I16(2));
    let mut args = FieldTable::new();
    args.insert(
        "x-bound-from",
        FieldValue::Array(vec![FieldValue::Table(hop)]),
    );
    args
}

/// What a RabbitMQ downstream `B` sets up on its upstream for exchange `x`: the
/// upstream exchange `federation: x -> B` with `args`, bound from `x` with `key`, and
/// its queue bound to it with "". Returns the upstream exchange's and queue's names.
async fn link_topology(ch: &Channel, x: &str, args: FieldTable, key: &str) -> (String, String) {
    let fed = format!("federation: {x} -> B");
    ch.exchange_declare(&fed, UPSTREAM_TYPE, upstream_options(args))
        .await
        .expect("declare the upstream exchange");
    ch.exchange_bind(&fed, x, key, bound_from("B"))
        .await
        .expect("bind it from x");
    let queue = format!("federation: {x} -> B");
    ch.queue_declare(&queue, durable_queue())
        .await
        .expect("declare the link's queue");
    ch.queue_bind(&queue, &fed, "", FieldTable::new())
        .await
        .expect("bind the queue");
    (fed, queue)
}

async fn declare_x(ch: &Channel, x: &str) {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(x, "topic", durable)
        .await
        .expect("declare x");
}

/// Publishes every case to `x` on a confirming channel: once confirmed, each message is
/// in every queue it was routed to.
async fn publish_all(ch: &Channel, x: &str, cases: &[Case]) {
    for c in cases {
        let confirm = ch
            .basic_publish_confirmed(
                x.to_owned(),
                c.key,
                false,
                with_headers(c.headers.clone()),
                Bytes::from_static(c.name.as_bytes()),
            )
            .await
            .expect("publish");
        assert!(confirm.await.expect("confirm"), "{} nacked", c.name);
    }
}

/// Takes every message from `queue`, in order, as their bodies.
async fn drain(ch: &Channel, queue: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    while let Some(m) = ch.basic_get(queue, true).await.expect("get") {
        bodies.push(String::from_utf8_lossy(&m.body).into_owned());
    }
    bodies
}

fn forwarded(cases: &[Case]) -> Vec<String> {
    cases
        .iter()
        .filter(|c| c.forwarded)
        .map(|c| c.name.to_owned())
        .collect()
}

/// Checks that `queue` gets exactly the forwarded cases, in order, and that a queue
/// bound to `x` with `#` got every case (nothing was lost before the filter).
async fn assert_filtered(ch: &Channel, x: &str, queue: &str, cases: &[Case]) {
    let all = unique("all");
    ch.queue_declare(&all, Default::default())
        .await
        .expect("declare all");
    ch.queue_bind(&all, x, "#", FieldTable::new())
        .await
        .expect("bind all");
    publish_all(ch, x, cases).await;
    assert_eq!(drain(ch, queue).await, forwarded(cases));
    let every: Vec<String> = cases.iter().map(|c| c.name.to_owned()).collect();
    assert_eq!(drain(ch, &all).await, every);
}

async fn routes_only_what_the_hop_rule_allows(shards: usize) {
    let broker = broker_named(shards, "upstream-a");
    let conn = connect(&broker).await;
    let ch = conn.open_channel().await.expect("channel");
    ch.confirm_select().await.expect("confirm.select");
    let x = unique("x");
    declare_x(&ch, &x).await;
    let args = upstream_args(FieldValue::I64(2), Some(("B", "/")));
    let (_, queue) = link_topology(&ch, &x, args, "a.*").await;
    assert_filtered(&ch, &x, &queue, &hop_cases()).await;
    conn.close().await.expect("close");
}

/// Without x-downstream-name / -vhost (pre-3.8.9 downstreams) no hop can be "here": only
/// the hop count applies.
async fn without_downstream_arguments_only_hops_count(shards: usize) {
    let broker = broker_named(shards, "upstream-a");
    let conn = connect(&broker).await;
    let ch = conn.open_channel().await.expect("channel");
    ch.confirm_select().await.expect("confirm.select");
    let x = unique("x");
    declare_x(&ch, &x).await;
    let (_, queue) = link_topology(&ch, &x, upstream_args(FieldValue::I64(2), None), "#").await;
    let cases = vec![
        case("seen-at-b", "k", Some(received_from(&[("B", "/")])), true),
        case(
            "two-hops",
            "k",
            Some(received_from(&[("B", "/"), ("C", "/")])),
            false,
        ),
        case("none", "k", None, true),
    ];
    assert_filtered(&ch, &x, &queue, &cases).await;
    conn.close().await.expect("close");
}

shard_tests!(
    routes_only_what_the_hop_rule_allows,
    without_downstream_arguments_only_hops_count
);

/// The definitions log keeps the exchange, its arguments (the filter is rebuilt from
/// them: a redeclare with another x-max-hops is still refused) and its bindings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovered_after_a_restart_with_its_arguments() {
    let dir = TestDir::new("sluice-fed-upstream");
    let data = dir.path().join("data");
    let toml = "[broker]\nnode_name = \"upstream-a\"\n";
    crate::common::bounded(async {
        let x = unique("x");
        let fed = format!("federation: {x} -> B");
        let queue;
        let mut broker = Broker::start_in(&data, 2, Some(toml));
        {
            let conn = connect(&broker).await;
            let ch = conn.open_channel().await.expect("channel");
            declare_x(&ch, &x).await;
            let args = upstream_args(FieldValue::I64(2), Some(("B", "/")));
            queue = link_topology(&ch, &x, args, "a.*").await.1;
            conn.close().await.expect("close");
        }
        broker.stop();

        let broker = Broker::start_in(&data, 2, Some(toml));
        let conn = connect(&broker).await;
        let ch = conn.open_channel().await.expect("channel");
        let same = upstream_options(upstream_args(FieldValue::I64(2), Some(("B", "/"))));
        ch.exchange_declare(&fed, UPSTREAM_TYPE, same)
            .await
            .expect("an equivalent redeclare");
        let other = upstream_options(upstream_args(FieldValue::I64(3), Some(("B", "/"))));
        let refused = ch
            .exchange_declare(&fed, UPSTREAM_TYPE, other)
            .await
            .expect_err("another x-max-hops");
        assert_eq!(
            closed(refused),
            (
                406,
                format!(
                    "PRECONDITION_FAILED - inequivalent arg 'x-max-hops' for exchange '{fed}' in vhost '/': received the value '3' of type 'long' but current is the value '2' of type 'long'"
                )
            )
        );
        let ch = conn.open_channel().await.expect("channel");
        ch.confirm_select().await.expect("confirm.select");
        assert_filtered(&ch, &x, &queue, &hop_cases()).await;
        conn.close().await.expect("close");
    })
    .await;
}
