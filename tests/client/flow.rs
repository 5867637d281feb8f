//! Producer flow control as the client lives it (seed 001's client): waiting, warning and
//! failing under channel.flow and connection.blocked, ignoring them when not honoured, and
//! an unread socket counted as backpressure.

use super::*;
use crate::scripted::{accept, fake_server};

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
