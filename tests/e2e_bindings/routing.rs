//! Routing through exchange-to-exchange bindings: each exchange of a chain applies its
//! own type's rule to the same routing key and headers; every exchange is visited at most
//! once per publish, so loops end; each queue gets a message once however many paths
//! reach it. Counts are exact: every publish waits for its confirm, and a publish is
//! confirmed once every queue it was routed to has it.

use std::time::Duration;

use amqprs::channel::BasicConsumeArguments;

use crate::common::{assert_no_delivery, next_delivery, unique, Broker};
use crate::support::*;

shard_tests!(
    chain_direct_topic_fanout,
    headers_exchanges_in_a_chain,
    loops_end_and_deliver_once,
    diamond_delivers_once,
    unbind_stops_routing,
    mandatory_through_a_chain_to_nowhere_is_returned,
    binding_publisher_and_queues_on_different_shards,
);

/// direct → topic → fanout, with queues on each; a consumer sees one delivery per
/// publish, with the exchange and routing key the publisher used.
async fn chain_direct_topic_fanout(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (d, t, f) = (unique("x-d"), unique("x-t"), unique("x-f"));
    declare_exchange(&ch, &d, "direct").await;
    declare_exchange(&ch, &t, "topic").await;
    declare_exchange(&ch, &f, "fanout").await;
    link(&ch, &d, &t, "orders.eu").await;
    link(&ch, &t, &f, "orders.*").await;
    let qd = queue_on("q-d", 0, shards);
    let qt = queue_on("q-t", shards - 1, shards);
    let qf = queue_on("q-f", 0, shards);
    queue_bound(&ch, &qd, &d, "orders.eu").await;
    queue_bound(&ch, &qt, &t, "#.eu").await;
    queue_bound(&ch, &qf, &f, "").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&d, "orders.eu").await;
    assert_counts(&ch, &[(&qd, 1), (&qt, 1), (&qf, 1)]).await;
    // The direct exchange binds only "orders.eu" onwards.
    p.publish(&d, "orders.us").await;
    assert_counts(&ch, &[(&qd, 1), (&qt, 1), (&qf, 1)]).await;
    // From the topic exchange: its own "#.eu" does not match, the fanout does.
    p.publish(&t, "orders.us").await;
    assert_counts(&ch, &[(&qd, 1), (&qt, 1), (&qf, 2)]).await;
    p.publish(&t, "stock.eu").await;
    assert_counts(&ch, &[(&qd, 1), (&qt, 2), (&qf, 2)]).await;

    // A consumer at the end of the chain sees the original exchange and key.
    let (_, mut rx) = ch
        .basic_consume_rx(BasicConsumeArguments::new(&qf, "").auto_ack(true).finish())
        .await
        .expect("basic.consume");
    for _ in 0..2 {
        next_delivery(&mut rx).await;
    }
    p.publish(&d, "orders.eu").await;
    let got = next_delivery(&mut rx).await;
    assert_eq!(
        (got.exchange.as_str(), got.routing_key.as_str()),
        (d.as_str(), "orders.eu")
    );
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
    conn.close().await;
}

/// A headers exchange as a destination and as a source: each matches on the message's
/// headers.
async fn headers_exchanges_in_a_chain(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (t, h, h2, f) = (unique("x-t"), unique("x-h"), unique("x-h2"), unique("x-f"));
    declare_exchange(&ch, &t, "topic").await;
    declare_exchange(&ch, &h, "headers").await;
    declare_exchange(&ch, &h2, "headers").await;
    declare_exchange(&ch, &f, "fanout").await;
    link(&ch, &t, &h, "trade.#").await;
    let mut any_kind = headers(&[("kind", "a")]);
    any_kind.insert("x-match".try_into().unwrap(), "any".into());
    link_with(&ch, &h2, &f, "", any_kind).await;
    let (qh, qf) = (
        queue_on("q-h", 0, shards),
        queue_on("q-f", shards - 1, shards),
    );
    ch.declare_queue(&qh).await;
    ch.queue_bind(
        amqprs::channel::QueueBindArguments::new(&qh, &h, "")
            .arguments(headers(&[("region", "eu")]))
            .finish(),
    )
    .await
    .expect("queue.bind to headers");
    queue_bound(&ch, &qf, &f, "").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish_headers(&t, "trade.x", headers(&[("region", "eu")]))
        .await;
    p.publish_headers(&t, "trade.x", headers(&[("region", "us")]))
        .await;
    p.publish_headers(&t, "other", headers(&[("region", "eu")]))
        .await;
    assert_counts(&ch, &[(&qh, 1), (&qf, 0)]).await;
    p.publish_headers(&h2, "", headers(&[("kind", "a")])).await;
    p.publish_headers(&h2, "", headers(&[("kind", "b")])).await;
    p.publish(&h2, "").await;
    assert_counts(&ch, &[(&qh, 1), (&qf, 1)]).await;
    conn.close().await;
}

/// A → B → A, A → A, and a queue bound to both: every publish ends and reaches the queue
/// once; topic exchanges in a loop too.
async fn loops_end_and_deliver_once(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (a, b) = (unique("x-a"), unique("x-b"));
    declare_exchange(&ch, &a, "fanout").await;
    declare_exchange(&ch, &b, "fanout").await;
    link(&ch, &a, &b, "").await;
    link(&ch, &b, &a, "").await;
    link(&ch, &a, &a, "").await;
    let q = queue_on("q-loop", shards - 1, shards);
    queue_bound(&ch, &q, &a, "").await;
    bind_queue(&ch, &q, &b, "").await;
    let only_b = queue_on("q-loop-b", 0, shards);
    queue_bound(&ch, &only_b, &b, "").await;

    let (t1, t2) = (unique("x-t1"), unique("x-t2"));
    declare_exchange(&ch, &t1, "topic").await;
    declare_exchange(&ch, &t2, "topic").await;
    link(&ch, &t1, &t2, "#").await;
    link(&ch, &t2, &t1, "a.*").await;
    let qt = queue_on("q-loop-t", 0, shards);
    queue_bound(&ch, &qt, &t1, "a.#").await;
    bind_queue(&ch, &qt, &t2, "#").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&a, "k").await;
    assert_counts(&ch, &[(&q, 1), (&only_b, 1)]).await;
    p.publish(&b, "k").await;
    assert_counts(&ch, &[(&q, 2), (&only_b, 2)]).await;
    p.publish(&t2, "a.b").await;
    p.publish(&t1, "z").await;
    assert_counts(&ch, &[(&qt, 2)]).await;
    conn.close().await;
}

/// Two paths from one exchange to a queue (top → left → bottom, top → right → bottom,
/// and the queue on left and bottom too): one copy.
async fn diamond_delivers_once(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (top, left, right, bottom) = (
        unique("x-top"),
        unique("x-left"),
        unique("x-right"),
        unique("x-bottom"),
    );
    declare_exchange(&ch, &top, "fanout").await;
    declare_exchange(&ch, &left, "direct").await;
    declare_exchange(&ch, &right, "topic").await;
    declare_exchange(&ch, &bottom, "fanout").await;
    link(&ch, &top, &left, "k").await;
    link(&ch, &top, &right, "#").await;
    link(&ch, &left, &bottom, "k").await;
    link(&ch, &right, &bottom, "*").await;
    let q = queue_on("q-diamond", shards - 1, shards);
    queue_bound(&ch, &q, &bottom, "").await;
    bind_queue(&ch, &q, &left, "k").await;
    bind_queue(&ch, &q, &top, "").await;
    let qr = queue_on("q-right", 0, shards);
    queue_bound(&ch, &qr, &right, "#").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&top, "k").await;
    assert_counts(&ch, &[(&q, 1), (&qr, 1)]).await;
    // "x" misses left's binding; right → bottom still delivers one copy (plus top's own).
    p.publish(&top, "x").await;
    assert_counts(&ch, &[(&q, 2), (&qr, 2)]).await;
    conn.close().await;
}

/// After exchange.unbind the destination no longer receives; binding again restores it.
async fn unbind_stops_routing(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = (unique("x-src"), unique("x-dst"));
    declare_exchange(&ch, &src, "direct").await;
    declare_exchange(&ch, &dst, "fanout").await;
    link(&ch, &src, &dst, "k").await;
    link(&ch, &src, &dst, "other").await;
    let q = queue_on("q-unbind", shards - 1, shards);
    queue_bound(&ch, &q, &dst, "").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&src, "k").await;
    assert_counts(&ch, &[(&q, 1)]).await;
    unlink(&ch, &src, &dst, "k").await;
    p.publish(&src, "k").await;
    assert_counts(&ch, &[(&q, 1)]).await;
    // The other binding between the same pair still routes.
    p.publish(&src, "other").await;
    assert_counts(&ch, &[(&q, 2)]).await;
    unlink(&ch, &src, &dst, "other").await;
    p.publish(&src, "other").await;
    assert_counts(&ch, &[(&q, 2)]).await;
    link(&ch, &src, &dst, "k").await;
    p.publish(&src, "k").await;
    assert_counts(&ch, &[(&q, 3)]).await;
    conn.close().await;
}

/// mandatory: a chain that reaches no queue returns the message with 312 NO_ROUTE,
/// naming the exchange the publisher used; once a queue is at the end it is not returned.
async fn mandatory_through_a_chain_to_nowhere_is_returned(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, mid, end) = (unique("x-src"), unique("x-mid"), unique("x-end"));
    declare_exchange(&ch, &src, "direct").await;
    declare_exchange(&ch, &mid, "topic").await;
    declare_exchange(&ch, &end, "fanout").await;
    link(&ch, &src, &mid, "k.1").await;
    link(&ch, &mid, &end, "k.*").await;

    let mut p = Publisher::new(conn.channel().await).await;
    let returned = p.publish_mandatory(&src, "k.1").await;
    assert_eq!(
        returned,
        Some((312, "NO_ROUTE".to_owned(), src.clone(), "k.1".to_owned()))
    );
    let q = queue_on("q-end", shards - 1, shards);
    queue_bound(&ch, &q, &end, "").await;
    assert_eq!(p.publish_mandatory(&src, "k.1").await, None);
    assert_counts(&ch, &[(&q, 1)]).await;
    // A key the first hop does not forward is returned again.
    assert!(p.publish_mandatory(&src, "k.2").await.is_some());
    assert_counts(&ch, &[(&q, 1)]).await;
    conn.close().await;
}

/// The chain is declared on one shard's connection, published to from the other's, and
/// routes to queues homed on both: the directory every shard holds has the bindings.
async fn binding_publisher_and_queues_on_different_shards(shards: usize) {
    let broker = Broker::start(shards);
    let (binder, bch) = connect_on(&broker, 0).await;
    let (publisher, pch) = connect_on(&broker, shards - 1).await;
    let (a, b, c) = (unique("x-a"), unique("x-b"), unique("x-c"));
    declare_exchange(&bch, &a, "topic").await;
    declare_exchange(&bch, &b, "direct").await;
    declare_exchange(&bch, &c, "fanout").await;
    link(&bch, &a, &b, "#").await;
    link(&bch, &b, &c, "p.q").await;
    let queues: Vec<String> = (0..shards)
        .flat_map(|s| [queue_on("q-x-b", s, shards), queue_on("q-x-c", s, shards)])
        .collect();
    for (i, q) in queues.iter().enumerate() {
        if i % 2 == 0 {
            queue_bound(&bch, q, &b, "p.q").await;
        } else {
            queue_bound(&bch, q, &c, "").await;
        }
    }
    let mut p = Publisher::new(pch).await;
    for _ in 0..3 {
        p.publish(&a, "p.q").await;
    }
    p.publish(&a, "p.r").await;
    for q in &queues {
        assert_counts(&bch, &[(q, 3)]).await;
    }
    // Unbinding on the binder's shard stops routing on the publisher's.
    unlink(&bch, &b, &c, "p.q").await;
    p.publish(&a, "p.q").await;
    for (i, q) in queues.iter().enumerate() {
        assert_counts(&bch, &[(q, if i % 2 == 0 { 4 } else { 3 })]).await;
    }
    publisher.close().await;
    binder.close().await;
}
