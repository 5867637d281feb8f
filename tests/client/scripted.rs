//! The broker-initiated paths sluice does not trigger on demand, from a scripted fake
//! server: 506 `Consuming too slow.` as a channel error, and the capabilities announced.

use super::*;

pub struct Fake {
    sock: TcpStream,
    buf: BytesMut,
    client_properties: FieldTable,
}

impl Fake {
    pub async fn send(&mut self, channel: u16, m: Method) {
        let mut out = BytesMut::new();
        encode_method(&mut out, channel, &m);
        self.sock.write_all(&out).await.unwrap();
    }

    /// Next method frame from the client, skipping heartbeats and content frames.
    pub async fn recv(&mut self) -> (u16, Method) {
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
    pub async fn serve_until(&mut self, until: impl Fn(&Method) -> bool) -> (u16, Method) {
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

pub async fn fake_server() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("amqp://guest:guest@{}/", l.local_addr().unwrap());
    (l, url)
}

pub async fn accept(l: &TcpListener) -> Fake {
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
