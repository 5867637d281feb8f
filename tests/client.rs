//! The sluice client against a real sluice (every client operation) and against a
//! scripted fake server (the broker-initiated paths sluice does not trigger on demand:
//! 506 `Consuming too slow.`, `channel.flow`, `connection.blocked`, connection.close).
//! Bounded in time; no speed assertions.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice::client::{
    ClientError, Connection, ConnectionOptions, ConsumeOptions, ExchangeDeclareOptions,
    FlowOptions, QueueDeclareOptions, NOTIFY_PERIOD_ENV, NO_PROPERTIES, WAIT_FAILURE_ENV,
};
use sluice::config::Config;
use sluice::protocol::frame::{
    encode_content, encode_method, split_frame, FrameKind, PROTOCOL_HEADER,
};
use sluice::protocol::method::*;
use sluice::protocol::{BasicProperties, FieldTable, LongStr, Method, ShortStr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

fn broker() -> (sluice::server::Broker, String) {
    let config = Config {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        shards: 2,
        ..Config::default()
    };
    let broker = sluice::server::start(config).expect("broker starts");
    let url = format!("amqp://guest:guest@{}/", broker.addresses[0]);
    (broker, url)
}

fn body(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

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

// ---- scripted fake server -------------------------------------------------------

struct Fake {
    sock: TcpStream,
    buf: BytesMut,
    client_properties: FieldTable,
}

impl Fake {
    async fn send(&mut self, channel: u16, m: Method) {
        let mut out = BytesMut::new();
        encode_method(&mut out, channel, &m);
        self.sock.write_all(&out).await.unwrap();
    }

    /// Next method frame from the client, skipping heartbeats and content frames.
    async fn recv(&mut self) -> (u16, Method) {
        loop {
            if let Some(f) = split_frame(&mut self.buf, 0).unwrap() {
                if f.kind == FrameKind::Method {
                    return (f.channel, Method::decode(f.payload).unwrap());
                }
                continue;
            }
            self.buf.reserve(4096);
            assert!(
                self.sock.read_buf(&mut self.buf).await.unwrap() > 0,
                "client hung up"
            );
        }
    }

    /// Answers channel.open and basic.consume until `until` matches.
    async fn serve_until(&mut self, until: impl Fn(&Method) -> bool) -> (u16, Method) {
        loop {
            let (ch, m) = self.recv().await;
            if until(&m) {
                return (ch, m);
            }
            match m {
                Method::ChannelOpen(_) => {
                    self.send(
                        ch,
                        ChannelOpenOk {
                            channel_id: LongStr::default(),
                        }
                        .into(),
                    )
                    .await
                }
                Method::BasicConsume(c) => {
                    self.send(
                        ch,
                        BasicConsumeOk {
                            consumer_tag: if c.consumer_tag.is_empty() {
                                "ctag".into()
                            } else {
                                c.consumer_tag
                            },
                        }
                        .into(),
                    )
                    .await
                }
                _ => {}
            }
        }
    }
}

async fn fake_server() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("amqp://guest:guest@{}/", l.local_addr().unwrap());
    (l, url)
}

async fn accept(l: &TcpListener) -> Fake {
    let (mut sock, _) = l.accept().await.unwrap();
    let mut hdr = [0u8; 8];
    sock.read_exact(&mut hdr).await.unwrap();
    assert_eq!(hdr, PROTOCOL_HEADER);
    let mut f = Fake {
        sock,
        buf: BytesMut::new(),
        client_properties: FieldTable::new(),
    };
    f.send(
        0,
        ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: FieldTable::new(),
            mechanisms: LongStr::from("PLAIN"),
            locales: LongStr::from("en_US"),
        }
        .into(),
    )
    .await;
    let Method::ConnectionStartOk(ok) = f.recv().await.1 else {
        panic!("start-ok")
    };
    assert_eq!(ok.response.as_bytes(), b"\0guest\0guest");
    f.client_properties = ok.client_properties;
    f.send(
        0,
        ConnectionTune {
            channel_max: 100,
            frame_max: 131072,
            heartbeat: 0,
        }
        .into(),
    )
    .await;
    assert!(matches!(f.recv().await.1, Method::ConnectionTuneOk(_)));
    assert!(matches!(f.recv().await.1, Method::ConnectionOpen(_)));
    f.send(
        0,
        ConnectionOpenOk {
            known_hosts: ShortStr::default(),
        }
        .into(),
    )
    .await;
    f
}

#[tokio::test]
async fn slow_consumer_506_is_a_channel_error_and_capabilities_are_announced() {
    let (l, url) = fake_server().await;
    let server = tokio::spawn(async move {
        let mut f = accept(&l).await;
        let caps = f
            .client_properties
            .get("capabilities")
            .and_then(|v| v.as_table())
            .cloned()
            .unwrap();
        for cap in ["connection.blocked", "consumer_cancel_notify"] {
            assert_eq!(caps.get(cap).and_then(|v| v.as_bool()), Some(true), "{cap}");
        }
        // A delivery, then the slow-consumer close.
        let (ch, _) = f.serve_until(|m| matches!(m, Method::BasicQos(_))).await;
        f.send(ch, BasicQosOk.into()).await;
        f.serve_until(|m| matches!(m, Method::BasicPublish(_)))
            .await;
        let mut out = BytesMut::new();
        encode_method(
            &mut out,
            ch,
            &BasicDeliver {
                consumer_tag: "ctag".into(),
                delivery_tag: 1,
                redelivered: false,
                exchange: "amq.topic".into(),
                routing_key: "a.b".into(),
            }
            .into(),
        );
        encode_content(&mut out, ch, 60, &[0, 0], b"hello", 131072);
        f.sock.write_all(&out).await.unwrap();
        f.send(
            ch,
            ChannelClose {
                reply_code: 506,
                reply_text: "Consuming too slow.".into(),
                class_id: 0,
                method_id: 0,
            }
            .into(),
        )
        .await;
        let (c2, m) = f.recv().await;
        assert_eq!(c2, ch);
        assert!(matches!(m, Method::ChannelCloseOk(_)), "{m:?}");
        // A new channel on the same connection still works.
        let (c3, _) = f
            .serve_until(|m| matches!(m, Method::QueueDeclare(_)))
            .await;
        assert_ne!(c3, ch);
        f.send(
            c3,
            QueueDeclareOk {
                queue: "q".into(),
                message_count: 0,
                consumer_count: 0,
            }
            .into(),
        )
        .await;
        f.serve_until(|m| matches!(m, Method::ConnectionClose(_)))
            .await;
        f.send(0, ConnectionCloseOk.into()).await;
    });
    timeout(LIMIT, async {
        let conn = Connection::connect(&url).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        ch.basic_qos(10, false).await.unwrap();
        let mut c = ch
            .basic_consume("q", ConsumeOptions::default())
            .await
            .unwrap();
        ch.basic_publish("amq.topic", "a.b", false, NO_PROPERTIES, body("go"))
            .await
            .unwrap();
        let d = c.recv().await.unwrap();
        assert_eq!(&d.body[..], b"hello");
        match c.recv().await {
            Err(ClientError::ChannelClosed {
                code: 506, text, ..
            }) => assert_eq!(text, "Consuming too slow."),
            other => panic!("expected 506, got {other:?}"),
        }
        match ch.basic_ack(1, false).await {
            Err(ClientError::ChannelClosed {
                code: 506, text, ..
            }) => assert_eq!(text, "Consuming too slow."),
            other => panic!("expected 506 on next operation, got {other:?}"),
        }
        assert!(conn.error().is_none());
        let ch2 = conn.open_channel().await.unwrap();
        ch2.queue_declare("q", QueueDeclareOptions::default())
            .await
            .unwrap();
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    server.await.unwrap();
}

// ---- producer flow control (seed 001's client) ----------------------------------

/// Log lines written while the guard lives, on this thread only (tests run in
/// parallel; a `#[tokio::test]` runs its tasks on its own thread).
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture_logs() -> (LogBuf, tracing::subscriber::DefaultGuard) {
    let buf = LogBuf::default();
    let w = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    (buf, tracing::subscriber::set_default(subscriber))
}

#[test]
fn flow_options_read_milliseconds_from_the_environment() {
    assert_eq!(WAIT_FAILURE_ENV, "SLUICE_FLOW_CONTROL_WAIT_FAILURE");
    assert_eq!(NOTIFY_PERIOD_ENV, "SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD");
    let env = |failure: Option<&'static str>, notify: Option<&'static str>| {
        move |name: &str| match name {
            WAIT_FAILURE_ENV => failure.map(String::from),
            NOTIFY_PERIOD_ENV => notify.map(String::from),
            other => panic!("unexpected variable {other}"),
        }
    };
    let defaults = FlowOptions {
        notify_period: Duration::from_secs(5),
        wait_failure: Duration::from_secs(60),
        honour_flow: true,
    };
    assert_eq!(FlowOptions::from_lookup(env(None, None)), defaults);
    assert_eq!(
        FlowOptions::from_lookup(env(Some("1500"), Some(" 250\n"))),
        FlowOptions {
            notify_period: Duration::from_millis(250),
            wait_failure: Duration::from_millis(1500),
            honour_flow: true,
        }
    );
    assert_eq!(
        FlowOptions::from_lookup(env(Some("0"), None)).wait_failure,
        Duration::ZERO
    );
    // Anything but a non-negative integer is ignored with a warning naming it.
    let (logs, _guard) = capture_logs();
    for bad in ["-1", "1.5", "5s", "", "abc", "99999999999999999999999"] {
        let o = FlowOptions::from_lookup(env(Some(bad), Some(bad)));
        assert_eq!(o, defaults, "{bad:?}");
    }
    let text = logs.text();
    assert_eq!(text.matches("WARN").count(), 12, "{text}");
    assert_eq!(text.matches(WAIT_FAILURE_ENV).count(), 6, "{text}");
    assert_eq!(text.matches(NOTIFY_PERIOD_ENV).count(), 6, "{text}");
    // The process environment is what Default reads (no test sets these variables).
    assert_eq!(ConnectionOptions::default().flow, FlowOptions::from_env());
}

#[tokio::test]
async fn flow_control_holds_warns_and_times_out() {
    let (logs, _guard) = capture_logs();
    let (l, url) = fake_server().await;
    let server = tokio::spawn(async move {
        let mut f = accept(&l).await;
        let (ch, _) = f.serve_until(|m| matches!(m, Method::TxSelect(_))).await;
        f.send(ch, TxSelectOk.into()).await;
        f.serve_until(|m| matches!(m, Method::BasicPublish(_)))
            .await;
        f.send(ch, ChannelFlow { active: false }.into()).await;
        let (_, m) = f.recv().await;
        assert!(
            matches!(m, Method::ChannelFlowOk(ChannelFlowOk { active: false })),
            "{m:?}"
        );
        // The held publish must not arrive; the next thing is the marker queue.declare.
        let (_, m) = f
            .serve_until(|m| matches!(m, Method::QueueDeclare(_) | Method::BasicPublish(_)))
            .await;
        assert!(
            matches!(m, Method::QueueDeclare(_)),
            "publish sent while flow-stopped: {m:?}"
        );
        f.send(
            ch,
            QueueDeclareOk {
                queue: "q".into(),
                message_count: 0,
                consumer_count: 0,
            }
            .into(),
        )
        .await;
        f.send(ch, ChannelFlow { active: true }.into()).await;
        let (_, m) = f.recv().await;
        assert!(matches!(
            m,
            Method::ChannelFlowOk(ChannelFlowOk { active: true })
        ));
        let (_, m) = f.recv().await;
        assert!(
            matches!(m, Method::BasicPublish(_)),
            "released publish: {m:?}"
        );
        // The transaction was not rolled back by the timeout: it commits.
        let (_, m) = f.recv().await;
        assert!(matches!(m, Method::TxCommit(_)), "{m:?}");
        f.send(ch, TxCommitOk.into()).await;
        // connection.blocked holds too, unblocked releases
        f.send(
            0,
            ConnectionBlocked {
                reason: "low on memory".into(),
            }
            .into(),
        )
        .await;
        f.serve_until(|m| matches!(m, Method::QueueDeclare(_)))
            .await;
        f.send(
            ch,
            QueueDeclareOk {
                queue: "q".into(),
                message_count: 0,
                consumer_count: 0,
            }
            .into(),
        )
        .await;
        let (_, m) = f
            .serve_until(|m| matches!(m, Method::QueueDeclare(_) | Method::BasicPublish(_)))
            .await;
        assert!(
            matches!(m, Method::QueueDeclare(_)),
            "publish sent while blocked: {m:?}"
        );
        f.send(0, ConnectionUnblocked.into()).await;
        f.send(
            ch,
            QueueDeclareOk {
                queue: "q".into(),
                message_count: 0,
                consumer_count: 0,
            }
            .into(),
        )
        .await;
        let (_, m) = f.recv().await;
        assert!(matches!(m, Method::BasicPublish(_)));
        // finally the server closes the connection
        f.send(
            0,
            ConnectionClose {
                reply_code: 320,
                reply_text: "CONNECTION_FORCED - shutdown".into(),
                class_id: 0,
                method_id: 0,
            }
            .into(),
        )
        .await;
        let (_, m) = f.recv().await;
        assert!(matches!(m, Method::ConnectionCloseOk(_)));
    });
    timeout(LIMIT, async {
        let opts = ConnectionOptions {
            flow: FlowOptions {
                notify_period: Duration::from_millis(100),
                wait_failure: Duration::from_millis(350),
                honour_flow: true,
            },
            ..Default::default()
        };
        let conn = Connection::connect_with(&url, opts).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        ch.tx_select().await.unwrap();
        ch.basic_publish("", "q", false, NO_PROPERTIES, body("1"))
            .await
            .unwrap();
        while !ch.is_flow_held() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let t0 = std::time::Instant::now();
        let err = ch
            .basic_publish("", "q", false, NO_PROPERTIES, body("held"))
            .await
            .unwrap_err();
        match &err {
            ClientError::FlowControlTimeout { waited } => {
                assert!(*waited >= Duration::from_millis(350))
            }
            other => panic!("expected flow-control timeout, got {other:?}"),
        }
        assert!(t0.elapsed() >= Duration::from_millis(350));
        assert!(!err.is_connection_error());
        // Seed 001's WARN line every notify period, none after the failure.
        let text = logs.text();
        for n in ["0.1", "0.2", "0.3"] {
            let line = format!("Message send delayed by {n}s due to broker enforced flow control");
            assert_eq!(text.matches(&line).count(), 1, "{line:?} in\n{text}");
        }
        assert_eq!(text.matches("Message send delayed").count(), 3, "{text}");
        let stats = ch.flow_stats();
        assert_eq!(
            (
                stats.channel_flow_stops,
                stats.connection_blocks,
                stats.waits,
                stats.timeouts
            ),
            (1, 0, 1, 1)
        );
        assert!(stats.held >= Duration::from_millis(350), "{stats:?}");
        // The channel is still usable: the marker declare, then a publish released by
        // flow active=true, then the transaction commits.
        assert!(ch.error().is_none());
        ch.queue_declare("q", QueueDeclareOptions::default())
            .await
            .unwrap();
        ch.basic_publish("", "q", false, NO_PROPERTIES, body("2"))
            .await
            .unwrap();
        assert!(!ch.is_flow_held());
        ch.tx_commit().await.unwrap();
        while !conn.is_blocked() {
            ch.queue_declare("q", QueueDeclareOptions::default())
                .await
                .unwrap();
        }
        assert_eq!(conn.blocked_count(), 1);
        let waiter = async {
            ch.basic_publish("", "q", false, NO_PROPERTIES, body("3"))
                .await
        };
        let marker = async { ch.queue_declare("q", QueueDeclareOptions::default()).await };
        let (a, b) = tokio::join!(waiter, marker);
        a.unwrap();
        b.unwrap();
        assert_eq!(ch.flow_stats().connection_blocks, 1);
        let e = loop {
            if let Some(e) = conn.error() {
                break e;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        assert!(
            matches!(&e, ClientError::ConnectionClosed { code: 320, .. }),
            "{e:?}"
        );
        assert!(e.is_connection_error());
        assert!(matches!(
            ch.basic_publish("", "q", false, NO_PROPERTIES, body("4"))
                .await,
            Err(ClientError::ConnectionClosed { code: 320, .. })
        ));
        assert!(matches!(
            conn.open_channel().await,
            Err(ClientError::ConnectionClosed { code: 320, .. })
        ));
    })
    .await
    .expect("bounded");
    server.await.unwrap();
}

/// `honour_flow: false` imitates pika / py-amqp: flow-ok is answered, publishing
/// carries on through `channel.flow active=false` and `connection.blocked`.
#[tokio::test]
async fn flow_control_ignored_when_not_honoured() {
    let (l, url) = fake_server().await;
    let server = tokio::spawn(async move {
        let mut f = accept(&l).await;
        let (ch, _) = f
            .serve_until(|m| matches!(m, Method::BasicPublish(_)))
            .await;
        f.send(ch, ChannelFlow { active: false }.into()).await;
        let (_, m) = f.recv().await;
        assert!(
            matches!(m, Method::ChannelFlowOk(ChannelFlowOk { active: false })),
            "flow-ok still answered: {m:?}"
        );
        let (_, m) = f.recv().await;
        assert!(matches!(m, Method::BasicPublish(_)), "{m:?}");
        f.send(
            0,
            ConnectionBlocked {
                reason: "low on memory".into(),
            }
            .into(),
        )
        .await;
        let (_, m) = f.recv().await;
        assert!(matches!(m, Method::BasicPublish(_)), "{m:?}");
        f.serve_until(|m| matches!(m, Method::ConnectionClose(_)))
            .await;
        f.send(0, ConnectionCloseOk.into()).await;
    });
    timeout(LIMIT, async {
        let opts = ConnectionOptions {
            flow: FlowOptions {
                notify_period: Duration::from_millis(100),
                wait_failure: Duration::from_secs(30),
                honour_flow: false,
            },
            ..Default::default()
        };
        let conn = Connection::connect_with(&url, opts).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        assert!(!ch.flow_options().honour_flow);
        ch.basic_publish("", "q", false, NO_PROPERTIES, body("1"))
            .await
            .unwrap();
        while !ch.is_flow_held() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let t0 = std::time::Instant::now();
        ch.basic_publish("", "q", false, NO_PROPERTIES, body("2"))
            .await
            .unwrap();
        while !conn.is_blocked() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ch.basic_publish("", "q", false, NO_PROPERTIES, body("3"))
            .await
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5));
        let stats = ch.flow_stats();
        assert_eq!(
            (
                stats.channel_flow_stops,
                stats.connection_blocks,
                stats.waits,
                stats.timeouts
            ),
            (1, 1, 0, 0)
        );
        assert_eq!(stats.held, Duration::ZERO);
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    server.await.unwrap();
}

/// A connection whose socket is not read (as a broker holds a client that ignores
/// channel.flow) holds publishes once the buffers are full; the wait is counted as
/// backpressure, not as flow control.
#[tokio::test]
async fn an_unread_socket_shows_as_backpressure() {
    let (l, url) = fake_server().await;
    let server = tokio::spawn(async move {
        let mut f = accept(&l).await;
        f.serve_until(|m| matches!(m, Method::BasicPublish(_)))
            .await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        f.serve_until(|m| matches!(m, Method::ConnectionClose(_)))
            .await;
        f.send(0, ConnectionCloseOk.into()).await;
    });
    timeout(LIMIT, async {
        let opts = ConnectionOptions {
            command_queue: 16,
            ..Default::default()
        };
        let conn = Connection::connect_with(&url, opts).await.unwrap();
        let ch = conn.open_channel().await.unwrap();
        let big = Bytes::from(vec![b'x'; 64 * 1024]);
        // 32 MiB: more than the client's write buffer and both sockets' buffers.
        for _ in 0..512 {
            ch.basic_publish("", "q", false, NO_PROPERTIES, big.clone())
                .await
                .unwrap();
        }
        let stats = ch.flow_stats();
        assert!(
            stats.backpressure >= Duration::from_millis(100),
            "{stats:?}"
        );
        assert_eq!((stats.waits, stats.held), (0, Duration::ZERO));
        conn.close().await.unwrap();
    })
    .await
    .expect("bounded");
    server.await.unwrap();
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
