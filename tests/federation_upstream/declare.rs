//! Declaring the `x-federation-upstream` type (RabbitMQ's 406 texts), internal
//! exchanges (RabbitMQ's 403 text for a publish straight to one; routing into one over
//! an exchange binding), and `cluster_name` in connection.start.

use bytes::Bytes;
use sluice::client::{ClientError, ExchangeDeclareOptions, NO_PROPERTIES};
use sluice::protocol::{FieldTable, FieldValue};

use crate::common::{bounded, unique, Broker};
use crate::{broker_named, closed, connect, text, upstream_args, upstream_options, UPSTREAM_TYPE};

/// exchange.declare, the method RabbitMQ's close names.
const EXCHANGE_DECLARE: (u16, u16) = (40, 10);
/// basic.publish.
const BASIC_PUBLISH: (u16, u16) = (60, 40);

fn passive() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    }
}

/// The code, text and method of a channel close.
fn channel_closed(e: ClientError) -> (u16, String, (u16, u16)) {
    match e {
        ClientError::ChannelClosed {
            code,
            text,
            class_id,
            method_id,
        } => (code, text, (class_id, method_id)),
        other => panic!("expected a channel close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_refusals_use_rabbitmqs_texts() {
    let broker = broker_named(1, "upstream-a");
    bounded(async {
        let conn = connect(&broker).await;
        let name = unique("federation: x -> B");
        let mut without_hops = FieldTable::new();
        without_hops.insert("x-downstream-name", text("B"));
        without_hops.insert("x-downstream-vhost", text("/"));
        without_hops.insert("x-internal-purpose", text("federation"));
        let refusals = [
            (without_hops, "PRECONDITION_FAILED - Argument x-max-hops missing"),
            (
                upstream_args(FieldValue::I32(1), Some(("B", "/"))),
                "PRECONDITION_FAILED - Argument x-max-hops must be of type long",
            ),
            (
                upstream_args(text("1"), Some(("B", "/"))),
                "PRECONDITION_FAILED - Argument x-max-hops must be of type long",
            ),
        ];
        for (args, want) in refusals {
            let ch = conn.open_channel().await.expect("channel");
            let e = ch
                .exchange_declare(&name, UPSTREAM_TYPE, upstream_options(args))
                .await
                .expect_err("refused");
            assert_eq!(channel_closed(e), (406, want.to_owned(), EXCHANGE_DECLARE));
            // Nothing was declared.
            let ch = conn.open_channel().await.expect("channel");
            let e = ch
                .exchange_declare(&name, "", passive())
                .await
                .expect_err("absent");
            assert_eq!(
                closed(e),
                (404, format!("NOT_FOUND - no exchange '{name}' in vhost '/'"))
            );
        }

        let ch = conn.open_channel().await.expect("channel");
        let one = upstream_args(FieldValue::I64(1), Some(("B", "/")));
        ch.exchange_declare(&name, UPSTREAM_TYPE, upstream_options(one))
            .await
            .expect("declare");
        // Integers compare by value across widths; other arguments are not compared.
        let mut also_one = upstream_args(FieldValue::I8(1), Some(("C", "/other")));
        also_one.insert("x-extra", text("ignored"));
        ch.exchange_declare(&name, UPSTREAM_TYPE, upstream_options(also_one))
            .await
            .expect("an equivalent redeclare");
        let inequivalent = |received: &str| {
            format!(
                "PRECONDITION_FAILED - inequivalent arg 'x-max-hops' for exchange '{name}' in vhost '/': received {received} but current is the value '1' of type 'long'"
            )
        };
        let mut no_hops = FieldTable::new();
        no_hops.insert("x-downstream-name", text("B"));
        for (args, received) in [
            (
                upstream_args(FieldValue::I64(2), Some(("B", "/"))),
                "the value '2' of type 'long'",
            ),
            (no_hops, "none"),
        ] {
            let ch = conn.open_channel().await.expect("channel");
            let e = ch
                .exchange_declare(&name, UPSTREAM_TYPE, upstream_options(args))
                .await
                .expect_err("inequivalent");
            assert_eq!(
                channel_closed(e),
                (406, inequivalent(received), EXCHANGE_DECLARE)
            );
        }
        let ch = conn.open_channel().await.expect("channel");
        let e = ch
            .exchange_declare(&name, "fanout", upstream_options(FieldTable::new()))
            .await
            .expect_err("another type");
        assert_eq!(
            closed(e),
            (
                406,
                format!(
                    "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': received 'fanout' but current is 'x-federation-upstream'"
                )
            )
        );
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_exchanges_refuse_publishes_but_take_exchange_bindings() {
    let broker = broker_named(2, "upstream-a");
    bounded(async {
        let conn = connect(&broker).await;
        let ch = conn.open_channel().await.expect("channel");
        let internal = unique("internal");
        let fed = unique("federation: x -> B");
        let front = unique("front");
        let queue = unique("behind-internal");
        let internal_opts = ExchangeDeclareOptions {
            internal: true,
            ..ExchangeDeclareOptions::default()
        };
        ch.exchange_declare(&internal, "fanout", internal_opts)
            .await
            .expect("declare internal");
        let args = upstream_args(FieldValue::I64(1), Some(("B", "/")));
        ch.exchange_declare(&fed, UPSTREAM_TYPE, upstream_options(args))
            .await
            .expect("declare upstream exchange");
        ch.exchange_declare(&front, "direct", ExchangeDeclareOptions::default())
            .await
            .expect("declare front");
        ch.queue_declare(&queue, Default::default())
            .await
            .expect("declare queue");
        ch.queue_bind(&queue, &internal, "", FieldTable::new())
            .await
            .expect("bind queue");
        ch.queue_bind(&queue, &fed, "", FieldTable::new())
            .await
            .expect("bind queue to the upstream exchange");
        ch.exchange_bind(&internal, &front, "k", FieldTable::new())
            .await
            .expect("bind internal from front");
        ch.exchange_bind(&fed, &front, "k", FieldTable::new())
            .await
            .expect("bind the upstream exchange from front");

        // Into both internal exchanges over the bindings: one copy in the queue.
        ch.confirm_select().await.expect("confirm.select");
        let confirm = ch
            .basic_publish_confirmed(front.clone(), "k", false, NO_PROPERTIES, Bytes::from_static(b"via front"))
            .await
            .expect("publish");
        assert!(confirm.await.expect("confirm"));
        let got = ch.basic_get(&queue, true).await.expect("get").expect("a message");
        assert_eq!(&got.body[..], b"via front");
        assert_eq!(got.message_count, 0, "one copy however many paths");
        assert!(ch.basic_get(&queue, true).await.expect("get").is_none());

        // Straight to either: 403 on the channel, RabbitMQ's words; nothing enqueued.
        for target in [&internal, &fed] {
            let ch = conn.open_channel().await.expect("channel");
            ch.basic_publish(target.clone(), "k", false, NO_PROPERTIES, Bytes::from_static(b"direct"))
                .await
                .expect("publish is sent");
            let e = ch
                .exchange_declare(target, "", passive())
                .await
                .expect_err("the channel was closed");
            assert_eq!(
                channel_closed(e),
                (
                    403,
                    format!(
                        "ACCESS_REFUSED - cannot publish to internal exchange '{target}' in vhost '/'"
                    ),
                    BASIC_PUBLISH
                )
            );
        }
        let ch = conn.open_channel().await.expect("channel");
        assert!(ch.basic_get(&queue, true).await.expect("get").is_none());
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_name_is_the_node_name() {
    let named = broker_named(1, "upstream-a");
    let unnamed = Broker::start(1);
    bounded(async {
        let conn = connect(&named).await;
        assert_eq!(
            conn.server_properties().get("cluster_name"),
            Some(&text("upstream-a"))
        );
        conn.close().await.expect("close");
        let conn = connect(&unnamed).await;
        let host = sluice::config::federation::default_node_name();
        assert_eq!(
            conn.server_properties().get("cluster_name"),
            Some(&text(&host)),
            "the default node name is the host name"
        );
        conn.close().await.expect("close");
    })
    .await;
}
