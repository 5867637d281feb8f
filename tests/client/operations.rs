//! Every client operation against a real sluice: declare, bind, publish, get, ack/nack/reject,
//! consume and cancel, confirms, transactions, returns, channel errors, credentials, exchange
//! bindings, recover, and a queue deleted under a consumer.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_bind_publish_get_ack_nack_reject() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        ch.exchange_declare("t.x", "topic", ExchangeDeclareOptions::default())
            .await
            .unwrap();
        let q = ch
            .queue_declare("t.q", QueueDeclareOptions::default())
            .await
            .unwrap();
        assert_eq!(q.name, "t.q");
        ch.queue_bind("t.q", "t.x", "a.*", FieldTable::new())
            .await
            .unwrap();
        let props = BasicProperties {
            message_id: Some(ShortStr::from("m1")),
            ..Default::default()
        };
        ch.basic_publish_with("t.x", "a.b", false, &props, body("one"))
            .await
            .unwrap();
        ch.basic_publish("t.x", "a.c", false, NO_PROPERTIES, body("two"))
            .await
            .unwrap();
        ch.basic_publish("t.x", "x.y", false, NO_PROPERTIES, body("unrouted"))
            .await
            .unwrap();
        // get + ack
        let m = loop {
            if let Some(m) = ch.basic_get("t.q", false).await.unwrap() {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(&m.body[..], b"one");
        assert_eq!(m.properties().unwrap().message_id.unwrap(), "m1");
        assert_eq!(m.routing_key, "a.b");
        ch.basic_ack(m.delivery_tag, false).await.unwrap();
        // get + reject(requeue) then get again, nack without requeue
        let m = ch
            .basic_get("t.q", false)
            .await
            .unwrap()
            .expect("second message");
        assert_eq!(&m.body[..], b"two");
        ch.basic_reject(m.delivery_tag, true).await.unwrap();
        let m = ch
            .basic_get("t.q", false)
            .await
            .unwrap()
            .expect("requeued message");
        assert_eq!(&m.body[..], b"two");
        assert!(m.redelivered);
        ch.basic_nack(m.delivery_tag, false, false).await.unwrap();
        assert!(ch.basic_get("t.q", true).await.unwrap().is_none());
        // purge, unbind, delete
        ch.basic_publish("t.x", "a.d", false, NO_PROPERTIES, body("3"))
            .await
            .unwrap();
        ch.basic_publish("t.x", "a.e", false, NO_PROPERTIES, body("4"))
            .await
            .unwrap();
        let mut purged = 0;
        for _ in 0..100 {
            purged += ch.queue_purge("t.q").await.unwrap();
            if purged >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(purged, 2);
        ch.queue_unbind("t.q", "t.x", "a.*", FieldTable::new())
            .await
            .unwrap();
        ch.basic_publish("t.x", "a.f", false, NO_PROPERTIES, body("5"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(ch.basic_get("t.q", true).await.unwrap().is_none());
        assert_eq!(ch.queue_delete("t.q", false, false).await.unwrap(), 0);
        ch.exchange_delete("t.x", false).await.unwrap();
        ch.close().await.unwrap();
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_manual_and_no_ack_then_cancel() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        ch.basic_qos(10, false).await.unwrap();
        let q = ch
            .queue_declare(
                "",
                QueueDeclareOptions {
                    exclusive: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let qname = q.name.to_string();
        assert!(qname.starts_with("amq.gen"), "{qname}");
        let mut c = ch
            .basic_consume(&qname, ConsumeOptions::default())
            .await
            .unwrap();
        for i in 0..100u32 {
            ch.basic_publish(
                "",
                q.name.clone(),
                false,
                NO_PROPERTIES,
                Bytes::from(i.to_be_bytes().to_vec()),
            )
            .await
            .unwrap();
        }
        let mut got = Vec::new();
        let mut buf = Vec::new();
        while got.len() < 100 {
            buf.clear();
            c.recv_many(&mut buf, 64).await.unwrap();
            for d in &buf {
                got.push(u32::from_be_bytes(d.body[..4].try_into().unwrap()));
                ch.basic_ack(d.delivery_tag, false).await.unwrap();
            }
        }
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        let tag = c.tag().to_string();
        ch.basic_cancel(&tag).await.unwrap();
        match c.recv().await {
            Err(ClientError::ConsumerCancelled { consumer_tag }) => assert_eq!(consumer_tag, tag),
            other => panic!("expected cancelled, got {other:?}"),
        }
        // no-ack consumer with a chosen tag
        let mut c2 = ch
            .basic_consume(
                &qname,
                ConsumeOptions {
                    no_ack: true,
                    consumer_tag: "mine".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(c2.tag(), "mine");
        ch.basic_publish("", q.name.clone(), false, NO_PROPERTIES, body("na"))
            .await
            .unwrap();
        let d = c2.recv().await.unwrap();
        assert_eq!(&d.body[..], b"na");
        conn.close().await.unwrap();
        assert!(matches!(
            c2.recv().await,
            Err(ClientError::ConnectionClosed { code: 200, .. })
        ));
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_transactions_and_returns() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let mut ch = conn.open_channel().await.unwrap();
        ch.queue_declare("c.q", QueueDeclareOptions::default())
            .await
            .unwrap();
        // confirms
        assert!(matches!(
            ch.wait_for_confirms().await,
            Err(ClientError::NotInConfirmMode)
        ));
        ch.confirm_select().await.unwrap();
        let c1 = ch
            .basic_publish_confirmed("", "c.q", false, NO_PROPERTIES, body("a"))
            .await
            .unwrap();
        for _ in 0..50 {
            ch.basic_publish("", "c.q", false, NO_PROPERTIES, body("b"))
                .await
                .unwrap();
        }
        assert!(c1.await.unwrap());
        assert!(ch.wait_for_confirms().await.unwrap());
        // mandatory publish that cannot be routed comes back
        let mut returns = ch.take_returns().unwrap();
        ch.basic_publish("", "no-such-queue", true, NO_PROPERTIES, body("r"))
            .await
            .unwrap();
        let r = returns.recv().await.unwrap();
        assert_eq!((r.reply_code, &r.body[..]), (312, &b"r"[..]));
        assert_eq!(r.routing_key, "no-such-queue");
        assert!(ch.wait_for_confirms().await.unwrap());
        // transactions on another channel
        let tx = conn.open_channel().await.unwrap();
        tx.queue_declare("t.q2", QueueDeclareOptions::default())
            .await
            .unwrap();
        tx.tx_select().await.unwrap();
        tx.basic_publish("", "t.q2", false, NO_PROPERTIES, body("rolled back"))
            .await
            .unwrap();
        tx.tx_rollback().await.unwrap();
        tx.basic_publish("", "t.q2", false, NO_PROPERTIES, body("committed"))
            .await
            .unwrap();
        tx.tx_commit().await.unwrap();
        let m = loop {
            if let Some(m) = ch.basic_get("t.q2", true).await.unwrap() {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(&m.body[..], b"committed");
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(ch.basic_get("t.q2", true).await.unwrap().is_none());
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_error_leaves_connection_usable() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        let other = conn.open_channel().await.unwrap();
        ch.queue_declare("e.q", QueueDeclareOptions::default())
            .await
            .unwrap();
        let mut c = ch
            .basic_consume("e.q", ConsumeOptions::default())
            .await
            .unwrap();
        let err = ch
            .queue_declare(
                "missing",
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        match &err {
            ClientError::ChannelClosed {
                code,
                text,
                class_id,
                method_id,
            } => {
                assert_eq!((*code, *class_id, *method_id), (404, 50, 10));
                assert!(text.contains("NOT_FOUND"), "{text}");
            }
            other => panic!("expected a channel error, got {other:?}"),
        }
        assert!(!err.is_connection_error());
        // the next operation and the consumer report the same channel error
        assert!(matches!(
            ch.basic_publish("", "e.q", false, NO_PROPERTIES, body("x"))
                .await,
            Err(ClientError::ChannelClosed { code: 404, .. })
        ));
        assert!(matches!(
            c.recv().await,
            Err(ClientError::ChannelClosed { code: 404, .. })
        ));
        // the connection carries on
        assert!(conn.error().is_none());
        other
            .basic_publish("", "e.q", false, NO_PROPERTIES, body("y"))
            .await
            .unwrap();
        let fresh = conn.open_channel().await.unwrap();
        let m = loop {
            if let Some(m) = fresh.basic_get("e.q", true).await.unwrap() {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(&m.body[..], b"y");
        conn.close().await.unwrap();
        assert!(matches!(
            other
                .basic_publish("", "e.q", false, NO_PROPERTIES, body("z"))
                .await,
            Err(ClientError::ConnectionClosed { code: 200, .. })
        ));
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_url() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let bad = url.replace("guest:guest", "guest:wrong");
        match Connection::connect(&bad).await {
            Err(ClientError::ConnectionClosed { code, .. }) => assert_eq!(code, 403),
            Err(e) => panic!("expected 403 connection close, got {e}"),
            Ok(_) => panic!("wrong password accepted"),
        }
        assert!(matches!(
            Connection::connect("http://x").await,
            Err(ClientError::InvalidUrl { .. })
        ));
        let vh = format!("{}nope", url);
        assert!(matches!(
            Connection::connect(&vh).await,
            Err(ClientError::ConnectionClosed { .. })
        ));
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_bindings_and_recover() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        ch.exchange_declare("eb.src", "direct", ExchangeDeclareOptions::default())
            .await
            .unwrap();
        ch.exchange_declare("eb.dst", "fanout", ExchangeDeclareOptions::default())
            .await
            .unwrap();
        ch.queue_declare("eb.q", QueueDeclareOptions::default())
            .await
            .unwrap();
        ch.queue_bind("eb.q", "eb.dst", "", FieldTable::new())
            .await
            .unwrap();
        // Exchange-to-exchange bindings (RabbitMQ's extension) route.
        ch.exchange_bind("eb.dst", "eb.src", "k", FieldTable::new())
            .await
            .unwrap();
        ch.basic_publish("eb.src", "k", false, NO_PROPERTIES, body("via e2e"))
            .await
            .unwrap();
        let m = loop {
            if let Some(m) = ch.basic_get("eb.q", true).await.unwrap() {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(&m.body[..], b"via e2e");
        ch.exchange_unbind("eb.dst", "eb.src", "k", FieldTable::new())
            .await
            .unwrap();
        // recover(requeue) hands back an unacknowledged delivery
        ch.basic_qos(1, false).await.unwrap();
        let mut c = ch
            .basic_consume("eb.q", ConsumeOptions::default())
            .await
            .unwrap();
        ch.basic_publish("", "eb.q", false, NO_PROPERTIES, body("again"))
            .await
            .unwrap();
        let d = c.recv().await.unwrap();
        assert!(!d.redelivered);
        ch.basic_recover(true).await.unwrap();
        let d2 = c.recv().await.unwrap();
        assert_eq!(&d2.body[..], b"again");
        assert!(d2.redelivered);
        ch.basic_ack(d2.delivery_tag, false).await.unwrap();
        ch.queue_delete("eb.q", false, false).await.unwrap();
        ch.exchange_delete("eb.dst", false).await.unwrap();
        ch.exchange_delete("eb.src", false).await.unwrap();
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    broker.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_deleted_under_a_consumer_cancels_it() {
    let (broker, url) = broker();
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        let admin = conn.open_channel().await.unwrap();
        ch.queue_declare("cc.q", QueueDeclareOptions::default())
            .await
            .unwrap();
        let mut c = ch
            .basic_consume("cc.q", ConsumeOptions::default())
            .await
            .unwrap();
        admin.queue_delete("cc.q", false, false).await.unwrap();
        // consumer_cancel_notify: the server's basic.cancel ends the consumer, the
        // channel stays open.
        match c.recv().await {
            Err(ClientError::ConsumerCancelled { consumer_tag }) => {
                assert_eq!(consumer_tag, c.tag().to_string())
            }
            other => panic!("expected a server cancel, got {other:?}"),
        }
        assert!(ch.error().is_none());
        ch.queue_declare("cc.q2", QueueDeclareOptions::default())
            .await
            .unwrap();
        ch.queue_delete("cc.q2", false, false).await.unwrap();
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    broker.shutdown();
}
