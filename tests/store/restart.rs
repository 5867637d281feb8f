//! What a SIGTERM restart keeps: durable entities, persistent messages on durable queues
//! (with their properties, exchange and routing key, in order), the redelivered flag of
//! messages delivered before the stop, and a durable subscription on amq.topic.

use amqprs::channel::{
    BasicAckArguments, BasicQosArguments, ExchangeBindArguments, ExchangeDeclareArguments,
    QueueDeclareArguments,
};
use amqprs::{BasicProperties, FieldTable, FieldValue};

use crate::common::{next_delivery, unique, Delivery};
use crate::support::*;

store_tests!(
    restart_keeps_durable_entities_and_persistent_messages,
    unacked_deliveries_come_back_redelivered,
    durable_subscription_survives_restart,
);

fn field(name: &str) -> amqprs::FieldName {
    name.try_into().unwrap()
}

/// The properties of the first message: every basic property the store must keep.
fn rich_props() -> BasicProperties {
    let mut headers = FieldTable::new();
    headers.insert(field("x-test"), FieldValue::S("one".try_into().unwrap()));
    headers.insert(field("n"), FieldValue::l(42));
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("application/x-sluice-test")
        .with_content_encoding("identity")
        .with_headers(headers)
        .with_priority(3)
        .with_correlation_id("corr-0")
        .with_reply_to("reply-here")
        .with_message_id("msg-0")
        .with_timestamp(1_700_000_000)
        .with_message_type("test.kind")
        .with_app_id("store-suite")
        .finish()
}

fn assert_rich_props(p: &BasicProperties) {
    assert_eq!(p.delivery_mode(), Some(2));
    assert_eq!(
        p.content_type().map(String::as_str),
        Some("application/x-sluice-test")
    );
    assert_eq!(p.content_encoding().map(String::as_str), Some("identity"));
    let headers = p.headers().expect("headers kept");
    assert_eq!(
        headers.get(&field("x-test")),
        Some(&FieldValue::S("one".try_into().unwrap())),
        "header x-test"
    );
    assert_eq!(
        headers.get(&field("n")),
        Some(&FieldValue::l(42)),
        "header n"
    );
    assert_eq!(p.priority(), Some(3));
    assert_eq!(p.correlation_id().map(String::as_str), Some("corr-0"));
    assert_eq!(p.reply_to().map(String::as_str), Some("reply-here"));
    assert_eq!(p.message_id().map(String::as_str), Some("msg-0"));
    assert_eq!(p.timestamp(), Some(1_700_000_000));
    assert_eq!(p.message_type().map(String::as_str), Some("test.kind"));
    assert_eq!(p.app_id().map(String::as_str), Some("store-suite"));
}

/// One recovered message: exact body, exchange, routing key, persistent, not redelivered.
fn assert_msg(d: &Delivery, exchange: &str, key: &str, body: &[u8]) {
    assert!(
        d.body == body,
        "expected body {:?} ({} bytes), got {:?} ({} bytes)",
        String::from_utf8_lossy(&body[..body.len().min(40)]),
        body.len(),
        String::from_utf8_lossy(&d.body[..d.body.len().min(40)]),
        d.body.len()
    );
    assert_eq!(
        (d.exchange.as_str(), d.routing_key.as_str()),
        (exchange, key),
        "exchange and routing key of {:?}",
        String::from_utf8_lossy(&body[..body.len().min(40)])
    );
    assert_eq!(d.props.delivery_mode(), Some(2));
    assert!(!d.redelivered, "never delivered, yet redelivered");
}

/// Before the restart:
/// - DX: durable topic exchange; DQ: durable queue bound to DX with `orders.*`; FX:
///   durable fanout exchange bound to DX with `audit.#` (exchange-to-exchange); AQ:
///   durable queue bound to FX;
/// - NX: non-durable direct exchange, bound to DQ with `via-nx`; NQ: non-durable queue;
///   XQ: durable but exclusive queue;
/// - into DQ, in this order: p0 (persistent, every basic property set) through DX, t0
///   (delivery-mode 1) through DX, p1 through DX with another key, t1 (no delivery
///   mode) through DX, p2 (persistent, empty body), p3 (persistent, 300,000 bytes, three
///   body frames), p4 through the default exchange, p5 through NX; one persistent
///   message each into NQ and XQ; a0 through DX with `audit.one` (into AQ through FX).
///   All confirmed. XQ's owner stays connected.
///
/// After SIGTERM and a restart on the same directory:
/// - DX, FX, DQ and AQ exist (passive declare); redeclaring DX as durable topic is fine, as
///   direct is 406 (its type survived); NX, NQ and XQ are 404;
/// - DQ holds exactly p0..p5, in order, byte for byte, with p0's properties, each with
///   the exchange and routing key it was published with, not redelivered;
/// - DX still routes `orders.*` to DQ and only that (a mandatory publish with
///   `orders.a.b` is returned 312); the binding from NX did not survive (NX redeclared:
///   a mandatory publish with `via-nx` is returned); AQ holds a0 (exchange DX, key
///   `audit.one`), and DX → FX → AQ still routes `audit.two`.
async fn restart_keeps_durable_entities_and_persistent_messages() {
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let (dx, dq) = (unique("store-dx"), unique("store-dq"));
    let (nx, nq, xq) = (unique("store-nx"), unique("store-nq"), unique("store-xq"));
    let (fx, aq) = (unique("store-fx"), unique("store-aq"));
    let big = body("big", 3, 300_000);
    // Stays open through the SIGTERM: XQ's owner never closes, so it is the store that
    // must not bring it back.
    let owner = broker.connect().await;
    {
        let conn = &owner;
        let mut p = Publisher::open(conn).await;
        p.ch.exchange_declare(
            ExchangeDeclareArguments::new(&dx, "topic")
                .durable(true)
                .finish(),
        )
        .await
        .expect("declare DX");
        declare_durable(&p.ch, &dq).await;
        bind(&p.ch, &dq, &dx, "orders.*").await;
        p.ch.exchange_declare(ExchangeDeclareArguments::new(&nx, "direct"))
            .await
            .expect("declare NX");
        bind(&p.ch, &dq, &nx, "via-nx").await;
        p.ch.exchange_declare(
            ExchangeDeclareArguments::new(&fx, "fanout")
                .durable(true)
                .finish(),
        )
        .await
        .expect("declare FX");
        p.ch.exchange_bind(ExchangeBindArguments::new(&fx, &dx, "audit.#"))
            .await
            .expect("exchange.bind FX <- DX");
        declare_durable(&p.ch, &aq).await;
        bind(&p.ch, &aq, &fx, "").await;
        p.ch.declare_queue(&nq).await;
        p.ch.queue_declare(
            QueueDeclareArguments::new(&xq)
                .durable(true)
                .exclusive(true)
                .finish(),
        )
        .await
        .expect("declare XQ")
        .expect("declare-ok");

        p.publish(&dx, "orders.new", rich_props(), b"p0").await;
        p.publish(&dx, "orders.new", transient(), b"t0").await;
        p.publish(&dx, "orders.old", persistent(), b"p1").await;
        p.publish(&dx, "orders.new", BasicProperties::default(), b"t1")
            .await;
        p.publish(&dx, "orders.new", persistent(), b"").await;
        p.publish(&dx, "orders.big", persistent(), &big).await;
        p.publish("", &dq, persistent(), b"p4").await;
        p.publish(&nx, "via-nx", persistent(), b"p5").await;
        p.publish(&dx, "audit.one", persistent(), b"a0").await;
        p.publish("", &nq, persistent(), b"on a non-durable queue")
            .await;
        p.publish("", &xq, persistent(), b"on an exclusive queue")
            .await;
        p.wait_all().await;
        assert!(p.returns.is_empty(), "returned: {:?}", p.returns);
        assert_eq!(p.ch.message_count(&dq).await, 8, "DQ before the restart");
        assert_eq!(p.ch.message_count(&nq).await, 1, "NQ before the restart");
        assert_eq!(p.ch.message_count(&xq).await, 1, "XQ before the restart");
    }

    restart(&mut broker, &node, SHARDS);
    drop(owner);

    let conn = broker.connect().await;
    let ch = conn.channel().await;
    ch.exchange_declare(
        ExchangeDeclareArguments::new(&dx, "topic")
            .passive(true)
            .finish(),
    )
    .await
    .expect("passive declare of the durable exchange");
    assert_eq!(ch.message_count(&dq).await, 6, "DQ after the restart");
    ch.exchange_declare(
        ExchangeDeclareArguments::new(&dx, "topic")
            .durable(true)
            .finish(),
    )
    .await
    .expect("equivalent redeclare of the durable exchange");
    {
        let mut other = conn.channel().await;
        let r = other
            .exchange_declare(
                ExchangeDeclareArguments::new(&dx, "direct")
                    .durable(true)
                    .finish(),
            )
            .await;
        assert!(r.is_err(), "DX redeclared as direct after the restart");
        let (code, text) = other.expect_close().await;
        assert_eq!(code, 406, "redeclare DX as direct: {text}");
    }
    assert_exchange_gone(&conn, &nx).await;
    assert_queue_gone(&conn, &nq).await;
    assert_queue_gone(&conn, &xq).await;
    ch.exchange_declare(
        ExchangeDeclareArguments::new(&fx, "fanout")
            .passive(true)
            .finish(),
    )
    .await
    .expect("passive declare of the durable fanout exchange");
    let got = drain(&conn, &aq).await;
    assert_eq!(got.len(), 1, "AQ after the restart");
    assert_msg(&got[0], &dx, "audit.one", b"a0");

    let got = drain(&conn, &dq).await;
    assert_eq!(got.len(), 6);
    assert_msg(&got[0], &dx, "orders.new", b"p0");
    assert_rich_props(&got[0].props);
    assert_msg(&got[1], &dx, "orders.old", b"p1");
    assert_msg(&got[2], &dx, "orders.new", b"");
    assert_msg(&got[3], &dx, "orders.big", &big);
    assert_msg(&got[4], "", &dq, b"p4");
    assert_msg(&got[5], &nx, "via-nx", b"p5");
    for d in &got[1..] {
        assert_eq!(d.props.content_type(), None, "no content-type was set");
        assert!(d.props.headers().is_none(), "no headers were set");
    }

    // The recovered binding routes, exactly as declared.
    let mut p = Publisher::open(&conn).await;
    p.publish_mandatory(&dx, "orders.after", persistent(), b"after")
        .await;
    p.publish_mandatory(&dx, "orders.a.b", persistent(), b"two words")
        .await;
    p.publish_mandatory(&dx, "audit.two", persistent(), b"a1")
        .await;
    ch.exchange_declare(ExchangeDeclareArguments::new(&nx, "direct"))
        .await
        .expect("redeclare NX");
    p.publish_mandatory(&nx, "via-nx", persistent(), b"old binding")
        .await;
    p.wait_all().await;
    let returned: Vec<(u16, &str, &str)> = p
        .returns
        .iter()
        .map(|(c, x, k, _)| (*c, x.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        returned,
        vec![
            (312, dx.as_str(), "orders.a.b"),
            (312, nx.as_str(), "via-nx")
        ],
        "returned as unroutable"
    );
    let got = drain(&conn, &dq).await;
    assert_eq!(got.len(), 1);
    assert_msg(&got[0], &dx, "orders.after", b"after");
    let got = drain(&conn, &aq).await;
    assert_eq!(got.len(), 1);
    assert_msg(&got[0], &dx, "audit.two", b"a1");
    conn.close().await;
    stop(&mut broker);
}

/// Ten persistent messages on a durable queue; a consumer with prefetch 5 and manual ack
/// receives 0..4, acks 0 and 1 (a passive declare on its channel then makes sure the
/// acks were processed), receives 5 and 6 in their place, and holds 2..6 unacked when the
/// broker gets SIGTERM. After the restart the queue holds exactly 2..9 in order: 2..6
/// redelivered=true, 7..9 (never delivered) redelivered=false.
async fn unacked_deliveries_come_back_redelivered() {
    const SIZE: usize = 64;
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let q = unique("store-redeliver");
    let conn = broker.connect().await;
    let mut p = Publisher::open(&conn).await;
    declare_durable(&p.ch, &q).await;
    for i in 0..10 {
        p.publish("", &q, persistent(), &body(&q, i, SIZE)).await;
    }
    p.wait_all().await;

    let consumer = broker.connect().await;
    let c = consumer.channel().await;
    c.basic_qos(BasicQosArguments::new(0, 5, false))
        .await
        .expect("basic.qos");
    let (_tag, mut rx) = c.consume_manual(&q).await;
    let mut held = Vec::new();
    for i in 0..5 {
        let d = next_delivery(&mut rx).await;
        assert_delivery(&d, &q, i, SIZE, false);
        held.push(d);
    }
    for d in &held[..2] {
        c.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("basic.ack");
    }
    // The contract's way to know the acks were processed: a passive declare on the same
    // channel.
    c.message_count(&q).await;
    for i in 5..7 {
        let d = next_delivery(&mut rx).await;
        assert_delivery(&d, &q, i, SIZE, false);
    }
    assert_eq!(c.message_count(&q).await, 3, "ready messages (7..9)");

    // SIGTERM with the consumer still connected and five deliveries unacked.
    restart(&mut broker, &node, SHARDS);
    drop((c, consumer, p, conn));

    let conn = broker.connect().await;
    let got = drain(&conn, &q).await;
    assert_series(&got, &q, 2..10, SIZE, |i| i <= 6);
    conn.close().await;
    stop(&mut broker);
}

/// A durable subscription: durable queue SUB bound to amq.topic with `stocks.#`.
/// - the subscriber receives and acks s0..s2, then disconnects;
/// - while it is away: persistent s3..s9 (keys under `stocks`), a transient message on
///   `stocks.x`, and a persistent one on `bonds.us` (not routed), all confirmed;
/// - SIGTERM, restart: the binding still routes — s10..s14 published now arrive;
/// - the subscriber reconnects (redeclaring SUB as a real subscriber would, without
///   binding again) and receives exactly s3..s14, old then new, in order, none missing,
///   with their routing keys, on amq.topic, not redelivered; nothing after them.
async fn durable_subscription_survives_restart() {
    const SIZE: usize = 200;
    const KEYS: [&str; 3] = ["stocks.nyse.ibm", "stocks.lse.bp", "stocks"];
    let key = |i: u64| KEYS[(i % 3) as usize];
    let node = Node::new(None);
    let mut broker = node.start(SHARDS);
    let sub = unique("store-sub");

    let subscriber = broker.connect().await;
    let s = subscriber.channel().await;
    declare_durable(&s, &sub).await;
    bind(&s, &sub, "amq.topic", "stocks.#").await;
    let (_tag, mut rx) = s.consume_manual(&sub).await;

    let pconn = broker.connect().await;
    let mut p = Publisher::open(&pconn).await;
    for i in 0..3 {
        p.publish("amq.topic", key(i), persistent(), &body(&sub, i, SIZE))
            .await;
    }
    p.wait_all().await;
    for i in 0..3 {
        let d = next_delivery(&mut rx).await;
        assert_delivery(&d, &sub, i, SIZE, false);
        s.basic_ack(BasicAckArguments::new(d.delivery_tag, false))
            .await
            .expect("basic.ack");
    }
    assert_eq!(s.message_count(&sub).await, 0);
    subscriber.close().await;
    // Away for sure: a close that amqprs cut short reaches the broker as a socket close.
    wait_no_consumers(&p.ch, &sub).await;

    for i in 3..10 {
        p.publish("amq.topic", key(i), persistent(), &body(&sub, i, SIZE))
            .await;
        if i == 5 {
            p.publish("amq.topic", "stocks.x", transient(), b"transient")
                .await;
            p.publish("amq.topic", "bonds.us", persistent(), b"not routed")
                .await;
        }
    }
    p.wait_all().await;
    assert_eq!(
        p.ch.message_count(&sub).await,
        8,
        "7 persistent + 1 transient"
    );
    pconn.close().await;

    restart(&mut broker, &node, SHARDS);

    let pconn = broker.connect().await;
    let mut p = Publisher::open(&pconn).await;
    for i in 10..15 {
        p.publish("amq.topic", key(i), persistent(), &body(&sub, i, SIZE))
            .await;
    }
    p.wait_all().await;
    assert_eq!(p.ch.message_count(&sub).await, 12, "s3..s14");

    let subscriber = broker.connect().await;
    let s = subscriber.channel().await;
    declare_durable(&s, &sub).await;
    let (tag, mut rx) = s.consume_manual(&sub).await;
    let mut got = Vec::new();
    for _ in 3..15 {
        got.push(next_delivery(&mut rx).await);
    }
    assert_series(&got, &sub, 3..15, SIZE, |_| false);
    for d in &got {
        let (_, i) = parse_body(&d.body);
        assert_eq!(
            (d.exchange.as_str(), d.routing_key.as_str()),
            ("amq.topic", key(i)),
            "exchange and routing key of s{i}"
        );
    }
    s.basic_ack(BasicAckArguments::new(
        got.last().unwrap().delivery_tag,
        true,
    ))
    .await
    .expect("basic.ack multiple");
    s.basic_cancel(amqprs::channel::BasicCancelArguments::new(&tag))
        .await
        .expect("basic.cancel");
    if let Ok(extra) = rx.try_recv() {
        let d = Delivery::from(extra);
        panic!(
            "a message after s14: {:?}",
            String::from_utf8_lossy(&d.body[..d.body.len().min(40)])
        );
    }
    assert_eq!(s.message_count(&sub).await, 0);
    subscriber.close().await;
    pconn.close().await;
    stop(&mut broker);
}
