//! Bug 4: queue.unbind is idempotent. When the queue, the exchange or both no longer exist
//! (auto-deleted when the consumer was cancelled, or deleted just before — aio-pika's RPC
//! pattern and test teardown), RabbitMQ answers unbind-ok: `rabbit_db_binding:delete`
//! returns ok when either end is missing (the Khepri `delete_v1`/`delete_v2`, and
//! `absent_errs_only` in the Mnesia version: only a queue on a node that is down was an
//! error), and `rabbit_channel` answers `queue.unbind_ok`. The default exchange stays
//! off limits (403, `check_not_default_exchange` runs before).

use std::time::Duration;

use amqprs::channel::{
    BasicCancelArguments, ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments,
    QueueDeclareArguments, QueueDeleteArguments, QueueUnbindArguments,
};

use crate::common::{eventually, unique, Broker, Chan, Conn};

shard_tests!(
    unbind_missing_queue_or_exchange_is_ok,
    unbind_queue_auto_deleted_by_cancel,
);

async fn queue_exists(conn: &Conn, name: &str) -> bool {
    let mut probe = conn.channel().await;
    let r = probe
        .queue_declare(QueueDeclareArguments::new(name).passive(true).finish())
        .await;
    match r {
        Ok(_) => true,
        Err(_) => {
            assert_eq!(probe.expect_close().await.0, 404);
            false
        }
    }
}

async fn unbind_ok(ch: &Chan, queue: &str, exchange: &str, key: &str, what: &str) {
    ch.queue_unbind(QueueUnbindArguments::new(queue, exchange, key))
        .await
        .unwrap_or_else(|e| panic!("queue.unbind {what}: {e}"));
    assert!(ch.ch.is_open(), "queue.unbind {what} closed the channel");
}

/// Every combination of a missing queue and a missing exchange answers unbind-ok on the
/// same channel, which stays open throughout.
async fn unbind_missing_queue_or_exchange_is_ok(shards: usize) {
    let mut broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let x = unique("x-unbind");
    let q = unique("q-unbind");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct"))
        .await
        .unwrap();
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k"))
        .await
        .unwrap();

    // The queue deleted just before.
    ch.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .unwrap();
    unbind_ok(&ch, &q, &x, "k", "of a deleted queue").await;

    // The exchange deleted just before (the queue exists).
    ch.declare_queue(&q).await;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k"))
        .await
        .unwrap();
    ch.exchange_delete(ExchangeDeleteArguments::new(&x))
        .await
        .unwrap();
    unbind_ok(&ch, &q, &x, "k", "from a deleted exchange").await;

    // Neither ever existed.
    unbind_ok(
        &ch,
        &unique("q-never"),
        &unique("x-never"),
        "k",
        "of a queue and an exchange that never existed",
    )
    .await;
    // A predeclared exchange and a missing queue.
    unbind_ok(
        &ch,
        &unique("q-never"),
        "amq.topic",
        "a.#",
        "of a missing queue from amq.topic",
    )
    .await;
    // Both exist but the binding does not (as before).
    unbind_ok(
        &ch,
        &q,
        "amq.direct",
        "nothing",
        "of a binding that does not exist",
    )
    .await;

    // The default exchange is still refused.
    let r = ch.queue_unbind(QueueUnbindArguments::new(&q, "", &q)).await;
    assert!(r.is_err(), "unbind from the default exchange succeeded");
    assert_eq!(
        ch.expect_close().await,
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".to_owned()
        )
    );
    conn.close().await;
    broker.assert_healthy();
}

/// aio-pika's RPC teardown: an auto-delete queue goes when its consumer is cancelled, then
/// the client unbinds it. Right after the cancel (queue possibly still there) and once it
/// is certainly gone, the unbind is answered with unbind-ok.
async fn unbind_queue_auto_deleted_by_cancel(shards: usize) {
    let mut broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let x = unique("x-rpc");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct"))
        .await
        .unwrap();
    for wait_until_gone in [false, true] {
        let (q, _, _) = ch
            .queue_declare(
                QueueDeclareArguments::new("")
                    .auto_delete(true)
                    .exclusive(true)
                    .finish(),
            )
            .await
            .unwrap()
            .unwrap();
        ch.queue_bind(QueueBindArguments::new(&q, &x, &q))
            .await
            .unwrap();
        let (tag, _rx) = ch.consume_auto(&q).await;
        ch.basic_cancel(BasicCancelArguments::new(&tag))
            .await
            .unwrap();
        if wait_until_gone {
            assert!(
                eventually(Duration::from_secs(5), || {
                    let conn = &conn;
                    let q = q.clone();
                    async move { !queue_exists(conn, &q).await }
                })
                .await,
                "auto-delete queue {q} survived the cancel of its consumer"
            );
        }
        unbind_ok(&ch, &q, &x, &q, "of an auto-deleted queue").await;
    }
    // The channel is still usable.
    ch.declare_server_named().await;
    conn.close().await;
    broker.assert_healthy();
}
