//! Exchange bindings and the exchanges' lives, as RabbitMQ has them:
//!
//! - an auto-delete exchange is deleted when the last binding where it is the source
//!   goes (`rabbit_db_exchange:maybe_auto_delete`), and deleting it removes the bindings
//!   to it, which can leave *their* auto-delete sources empty in turn; being only a
//!   destination never deletes it;
//! - exchange.delete removes the bindings from and to the exchange
//!   (`delete_for_source` and `delete_for_destination`);
//! - `if-unused` counts the bindings where the exchange is the source
//!   (`has_for_source`), to queues and exchanges alike; bindings to it do not count.

use amqprs::channel::{ExchangeDeleteArguments, QueueDeleteArguments};

use crate::common::{unique, Broker};
use crate::support::*;

shard_tests!(
    auto_delete_source_goes_with_its_last_binding,
    auto_delete_follows_deletions_backwards,
    exchange_delete_removes_bindings_both_ways,
    if_unused_counts_bindings_as_source,
);

/// Two bindings from an auto-delete source: removing one keeps it, removing the other
/// deletes it. An auto-delete destination stays (it never had a binding as source).
async fn auto_delete_source_goes_with_its_last_binding(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (src, dst) = (unique("x-ad-src"), unique("x-ad-dst"));
    declare_auto_delete(&ch, &src, "direct").await;
    declare_auto_delete(&ch, &dst, "fanout").await;
    link(&ch, &src, &dst, "a").await;
    link(&ch, &src, &dst, "b").await;
    unlink(&ch, &src, &dst, "a").await;
    assert!(
        exchange_exists(&conn, &src).await,
        "source deleted with a binding left"
    );
    unlink(&ch, &src, &dst, "b").await;
    assert!(
        !exchange_exists(&conn, &src).await,
        "auto-delete source still there after its last binding went"
    );
    assert!(
        exchange_exists(&conn, &dst).await,
        "an auto-delete exchange that was only a destination was deleted"
    );
    // A binding to a queue counts as well: the source goes with the last of either kind.
    declare_auto_delete(&ch, &src, "direct").await;
    let q = unique("q-ad");
    queue_bound(&ch, &q, &src, "k").await;
    link(&ch, &src, &dst, "a").await;
    unlink(&ch, &src, &dst, "a").await;
    assert!(
        exchange_exists(&conn, &src).await,
        "deleted with a queue binding left"
    );
    ch.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .expect("queue.delete");
    assert!(
        !exchange_exists(&conn, &src).await,
        "not deleted with its queue"
    );
    conn.close().await;
}

/// top → mid → queue, all auto-delete exchanges, plus a plain exchange bound to mid:
/// deleting the queue deletes mid (its last binding), which removes top's only binding,
/// so top goes too; the plain one stays, and still routes elsewhere.
async fn auto_delete_follows_deletions_backwards(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (top, mid, plain) = (unique("x-top"), unique("x-mid"), unique("x-plain"));
    declare_auto_delete(&ch, &top, "fanout").await;
    declare_auto_delete(&ch, &mid, "fanout").await;
    declare_exchange(&ch, &plain, "fanout").await;
    link(&ch, &top, &mid, "").await;
    link(&ch, &plain, &mid, "").await;
    let q = queue_on("q-mid", shards - 1, shards);
    queue_bound(&ch, &q, &mid, "").await;
    let other = queue_on("q-plain", 0, shards);
    queue_bound(&ch, &other, &plain, "").await;

    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&top, "").await;
    assert_counts(&ch, &[(&q, 1), (&other, 0)]).await;
    ch.queue_delete(QueueDeleteArguments::new(&q))
        .await
        .expect("queue.delete");
    assert!(
        !exchange_exists(&conn, &mid).await,
        "mid survived its last binding"
    );
    assert!(
        !exchange_exists(&conn, &top).await,
        "top survived its only binding's end"
    );
    assert!(
        exchange_exists(&conn, &plain).await,
        "a plain exchange was deleted"
    );
    p.publish(&plain, "").await;
    assert_counts(&ch, &[(&other, 1)]).await;

    // A loop of two auto-delete exchanges goes as a whole when one binding is removed.
    let (a, b) = (unique("x-ring-a"), unique("x-ring-b"));
    declare_auto_delete(&ch, &a, "fanout").await;
    declare_auto_delete(&ch, &b, "fanout").await;
    link(&ch, &a, &b, "").await;
    link(&ch, &b, &a, "").await;
    unlink(&ch, &a, &b, "").await;
    assert!(!exchange_exists(&conn, &a).await, "a survived");
    assert!(
        !exchange_exists(&conn, &b).await,
        "b survived its only binding's end"
    );
    conn.close().await;
}

/// a → b → c → queue: deleting b removes a → b and b → c. Recreated under the same name,
/// b is bound to nothing and from nothing.
async fn exchange_delete_removes_bindings_both_ways(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let (a, b, c) = (unique("x-a"), unique("x-b"), unique("x-c"));
    declare_exchange(&ch, &a, "fanout").await;
    declare_exchange(&ch, &b, "topic").await;
    declare_exchange(&ch, &c, "fanout").await;
    link(&ch, &a, &b, "").await;
    link(&ch, &b, &c, "#").await;
    let q = queue_on("q-c", shards - 1, shards);
    queue_bound(&ch, &q, &c, "").await;
    let mut p = Publisher::new(conn.channel().await).await;
    p.publish(&a, "k").await;
    assert_counts(&ch, &[(&q, 1)]).await;

    ch.exchange_delete(ExchangeDeleteArguments::new(&b))
        .await
        .expect("exchange.delete");
    assert!(
        p.publish_mandatory(&a, "k").await.is_some(),
        "a still routes"
    );
    declare_exchange(&ch, &b, "topic").await;
    assert!(
        p.publish_mandatory(&a, "k").await.is_some(),
        "a -> b came back"
    );
    assert!(
        p.publish_mandatory(&b, "k").await.is_some(),
        "b -> c came back"
    );
    assert_counts(&ch, &[(&q, 1)]).await;
    // c, the destination, is untouched and still routes.
    p.publish(&c, "k").await;
    assert_counts(&ch, &[(&q, 2)]).await;
    // Deleting a destination removes the binding to it: a has none left.
    link(&ch, &a, &b, "").await;
    link(&ch, &b, &c, "#").await;
    ch.exchange_delete(ExchangeDeleteArguments::new(&c))
        .await
        .expect("exchange.delete");
    ch.exchange_delete(ExchangeDeleteArguments::new(&b).if_unused(true).finish())
        .await
        .expect("b has no binding as source left: if-unused delete");
    ch.exchange_delete(ExchangeDeleteArguments::new(&a).if_unused(true).finish())
        .await
        .expect("a has no binding as source left: if-unused delete");
    conn.close().await;
}

/// if-unused: a binding from the exchange to another exchange makes it used (406 with
/// RabbitMQ's text); a binding to it does not.
async fn if_unused_counts_bindings_as_source(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let (src, dst) = (unique("x-src"), unique("x-dst"));
    declare_exchange(&ch, &src, "direct").await;
    declare_exchange(&ch, &dst, "fanout").await;
    link(&ch, &src, &dst, "k").await;
    let r = ch
        .exchange_delete(ExchangeDeleteArguments::new(&src).if_unused(true).finish())
        .await;
    assert!(r.is_err(), "if-unused delete of a source succeeded");
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            format!("PRECONDITION_FAILED - exchange '{src}' in vhost '/' in use")
        )
    );
    let ch = conn.channel().await;
    ch.exchange_delete(ExchangeDeleteArguments::new(&dst).if_unused(true).finish())
        .await
        .expect("if-unused delete of an exchange that is only a destination");
    assert!(!exchange_exists(&conn, &dst).await);
    // Its binding went with it: the source is unused now.
    ch.exchange_delete(ExchangeDeleteArguments::new(&src).if_unused(true).finish())
        .await
        .expect("if-unused delete once the destination went");
    assert!(!exchange_exists(&conn, &src).await);
    conn.close().await;
}
