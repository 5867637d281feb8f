//! basic.return of unroutable mandatory messages, publisher confirms, and transactions.

use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicPublishArguments, ConfirmSelectArguments};
use amqprs::BasicProperties;

use crate::common::{assert_no_delivery, next_delivery, unique, Broker, Event};

shard_tests!(
    mandatory_unroutable_returned,
    publisher_confirms,
    tx_publish_rollback_commit,
    tx_ack_rollback_commit,
    confirm_follows_return,
    tx_and_confirm_modes_exclusive,
    confirms_cover_every_queue,
);

async fn mandatory_unroutable_returned(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    let mandatory = |x: &str, k: &str| BasicPublishArguments::new(x, k).mandatory(true).finish();
    // Routable: no return.
    ch.basic_publish(
        BasicProperties::default(),
        b"routed".to_vec(),
        mandatory("", &q),
    )
    .await
    .unwrap();
    // Unroutable through amq.direct and through the default exchange.
    ch.basic_publish(
        BasicProperties::default(),
        b"lost-1".to_vec(),
        mandatory("amq.direct", "nobody"),
    )
    .await
    .unwrap();
    let missing = unique("missing");
    ch.basic_publish(
        BasicProperties::default(),
        b"lost-2".to_vec(),
        mandatory("", &missing),
    )
    .await
    .unwrap();
    for (exchange, key, body) in [
        ("amq.direct", "nobody", "lost-1"),
        ("", missing.as_str(), "lost-2"),
    ] {
        match ch.next_event().await {
            Event::Return {
                code,
                text,
                exchange: x,
                routing_key,
                body: b,
                ..
            } => {
                assert_eq!(code, 312);
                assert_eq!(text, "NO_ROUTE");
                assert_eq!(x, exchange);
                assert_eq!(routing_key, key);
                assert_eq!(b, body.as_bytes());
            }
            other => panic!("expected basic.return, got {other:?}"),
        }
    }
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"routed");
    assert!(
        ch.events.try_recv().is_err(),
        "a routable mandatory message was returned"
    );
}

async fn publisher_confirms(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = unique("q-confirm");
    ch.declare_queue(&q).await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    const N: u64 = 200;
    for i in 0..N {
        // Every tenth message is unroutable; it is confirmed all the same.
        let key = if i % 10 == 9 {
            "nobody-home".to_string()
        } else {
            q.clone()
        };
        ch.publish("", &key, format!("c{i}").as_bytes()).await;
    }
    ch.wait_acked(N).await;
    // Confirmed means enqueued.
    assert_eq!(ch.message_count(&q).await, (N - N / 10) as u32);
    // No stray confirms afterwards.
    if let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(200), ch.events.recv()).await {
        panic!("unexpected event after all confirms: {ev:?}");
    }
}

async fn tx_publish_rollback_commit(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let q = unique("q-tx");
    let watcher = conn.channel().await;
    watcher.declare_queue(&q).await;
    let (_, mut rx) = watcher.consume_auto(&q).await;

    let tx = conn.channel().await;
    tx.tx_select().await.unwrap();
    tx.publish("", &q, b"rolled-back-1").await;
    tx.publish("", &q, b"rolled-back-2").await;
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    tx.tx_rollback().await.unwrap();
    tx.publish("", &q, b"committed-1").await;
    tx.publish("", &q, b"committed-2").await;
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    tx.tx_commit().await.unwrap();
    assert_eq!(next_delivery(&mut rx).await.body, b"committed-1");
    assert_eq!(next_delivery(&mut rx).await.body, b"committed-2");
    assert_no_delivery(&mut rx, Duration::from_millis(300)).await;
    // An empty commit is fine, and the channel stays transactional.
    tx.tx_commit().await.unwrap();
    tx.publish("", &q, b"later").await;
    assert_no_delivery(&mut rx, Duration::from_millis(200)).await;
    tx.tx_commit().await.unwrap();
    assert_eq!(next_delivery(&mut rx).await.body, b"later");
}

async fn tx_ack_rollback_commit(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let q = unique("q-txack");
    ch.declare_queue(&q).await;
    ch.publish("", &q, b"m").await;
    ch.wait_message_count(&q, 1).await;

    // Ack inside a rolled-back transaction: the ack never happened.
    let t1 = conn.channel().await;
    t1.tx_select().await.unwrap();
    let (get_ok, _, _) = t1.get(&q, false).await.expect("get-ok");
    t1.basic_ack(BasicAckArguments::new(get_ok.delivery_tag(), false))
        .await
        .unwrap();
    t1.tx_rollback().await.unwrap();
    t1.ch.clone().close().await.unwrap();
    ch.wait_message_count(&q, 1).await;

    // Ack inside a committed transaction: gone for good.
    let t2 = conn.channel().await;
    t2.tx_select().await.unwrap();
    let (get_ok, _, body) = t2.get_eventually(&q, false).await;
    assert_eq!(body, b"m");
    assert!(get_ok.redelivered());
    t2.basic_ack(BasicAckArguments::new(get_ok.delivery_tag(), false))
        .await
        .unwrap();
    t2.tx_commit().await.unwrap();
    t2.ch.clone().close().await.unwrap();
    assert_eq!(ch.message_count(&q).await, 0);
}

/// A mandatory, unroutable message in confirm mode: basic.return comes before its basic.ack.
async fn confirm_follows_return(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    ch.basic_publish(
        BasicProperties::default(),
        b"nowhere".to_vec(),
        BasicPublishArguments::new("amq.direct", "nobody")
            .mandatory(true)
            .finish(),
    )
    .await
    .unwrap();
    match ch.next_event().await {
        Event::Return { code, text, .. } => assert_eq!((code, text.as_str()), (312, "NO_ROUTE")),
        other => panic!("expected basic.return before the confirm, got {other:?}"),
    }
    match ch.next_event().await {
        Event::Ack { tag, .. } => assert_eq!(tag, 1),
        other => panic!("expected basic.ack for tag 1, got {other:?}"),
    }
}

async fn tx_and_confirm_modes_exclusive(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;

    let mut ch = conn.channel().await;
    ch.tx_select().await.unwrap();
    let r = ch.confirm_select(ConfirmSelectArguments::default()).await;
    assert!(
        r.is_err(),
        "confirm.select on a transactional channel succeeded"
    );
    assert_eq!(ch.expect_close().await.0, 406);

    let mut ch = conn.channel().await;
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    let r = ch.tx_select().await;
    assert!(r.is_err(), "tx.select on a confirm-mode channel succeeded");
    assert_eq!(ch.expect_close().await.0, 406);

    let mut ch = conn.channel().await;
    let r = ch.tx_commit().await;
    assert!(
        r.is_err(),
        "tx.commit on a non-transactional channel succeeded"
    );
    assert_eq!(ch.expect_close().await.0, 406);
    assert!(conn.conn.is_open());
}

/// In confirm mode, an ack for a message routed to many queues (on every shard) means every
/// one of those queues has it.
async fn confirms_cover_every_queue(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let x = unique("x-confirm-fan");
    ch.exchange_declare(amqprs::channel::ExchangeDeclareArguments::new(&x, "fanout"))
        .await
        .unwrap();
    let mut queues = Vec::new();
    for _ in 0..10 {
        let q = unique("q-confirm-fan");
        ch.declare_queue(&q).await;
        ch.queue_bind(amqprs::channel::QueueBindArguments::new(&q, &x, ""))
            .await
            .unwrap();
        queues.push(q);
    }
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    for i in 0..20 {
        ch.publish(&x, "", format!("{i}").as_bytes()).await;
    }
    ch.wait_acked(20).await;
    for q in &queues {
        assert_eq!(
            ch.message_count(q).await,
            20,
            "queue {q} lags behind its confirms"
        );
    }
}
