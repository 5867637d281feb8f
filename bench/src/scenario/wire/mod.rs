//! Owns: the wire client — a minimal AMQP 0-9-1 connection over a tokio `TcpStream`
//! written with sluice's public protocol types, for runs with thousands of
//! subscriber connections on two threads: the handshake (PLAIN, no heartbeats) and
//! channel 1 ([`WireConn::open`]), a subscriber's pipelined set-up — server-named
//! exclusive auto-delete queue, bind, `basic.qos` for manual acks, `basic.consume`
//! in one write ([`WireConn::subscribe`]) — and an orderly `connection.close`
//! ([`WireConn::close`]). Reads after the set-up go through one buffer per worker
//! thread ([`with_read_buf`]), so an idle connection holds no read buffer. The
//! receive loop is [`run`], its frame parser [`parse`].
//! Does not: publish, declare exchanges, or support what the big fan-out runs do not
//! need (basic.get, per-message acks, transactions, throttling, durable queues);
//! `fleet` refuses those for the wire client.

pub mod parse;
pub mod run;

use std::cell::RefCell;
use std::ops::Range;
use std::time::Duration;

use bytes::BytesMut;
use sluice::client::AmqpUrl;
use sluice::protocol::frame::{encode_method, split_frame, FrameKind, PROTOCOL_HEADER};
use sluice::protocol::method::{
    BasicConsume, BasicQos, ChannelOpen, ConnectionClose, ConnectionOpen, ConnectionStartOk,
    ConnectionTuneOk, QueueBind, QueueDeclare,
};
use sluice::protocol::{FieldTable, FieldValue, LongStr, Method, ShortStr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use parse::{Parser, Sink};

/// Frame-max the wire client asks for (the broker may offer less).
const FRAME_MAX: u32 = 131_072;

/// Bytes of the per-thread read buffer: twice a frame, so a carried-over partial
/// frame always leaves room to read.
const READ_BUF: usize = 2 * FRAME_MAX as usize + 4096;

thread_local! {
    static READ: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this worker thread's read buffer, `carry` copied to its start;
/// `f` gets the buffer and the carry's length, and returns its result with the
/// bytes to carry over to the next read (`None`: keep the carry as it is).
pub fn with_read_buf<R>(
    carry: &mut Vec<u8>,
    f: impl FnOnce(&mut [u8], usize) -> (R, Option<Range<usize>>),
) -> R {
    READ.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() < READ_BUF {
            b.resize(READ_BUF, 0);
        }
        b[..carry.len()].copy_from_slice(carry);
        let (r, keep) = f(&mut b, carry.len());
        if let Some(keep) = keep {
            carry.clear();
            carry.extend_from_slice(&b[keep]);
        }
        r
    })
}

/// A wire connection after the handshake, with channel 1 open.
pub struct WireConn {
    pub stream: TcpStream,
    /// Bytes read past the last set-up reply (handed to the receive loop).
    pub rest: BytesMut,
    /// The negotiated frame-max.
    pub frame_max: u32,
}

fn client_properties(name: &str) -> FieldTable {
    let mut caps = FieldTable::new();
    for cap in ["consumer_cancel_notify", "authentication_failure_close"] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    let s = |v: &str| FieldValue::LongStr(LongStr::from(v));
    props.insert("product", s("sluice-bench wire client"));
    props.insert("platform", s("Rust/tokio"));
    props.insert("capabilities", FieldValue::Table(caps));
    props.insert("connection_name", s(name));
    props
}

fn closed(what: &str, code: u16, text: &ShortStr) -> String {
    format!(
        "{what}: closed by the broker with {code} {}",
        text.as_str_lossy()
    )
}

impl WireConn {
    /// Connects, logs in (PLAIN) and opens channel 1, within `limit`.
    pub async fn open(url: &AmqpUrl, name: &str, limit: Duration) -> Result<WireConn, String> {
        tokio::time::timeout(limit, WireConn::handshake(url, name))
            .await
            .map_err(|_| format!("handshake took over {limit:?}"))?
    }

    async fn handshake(url: &AmqpUrl, name: &str) -> Result<WireConn, String> {
        let stream = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("connect {}:{}: {e}", url.host, url.port))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut c = WireConn {
            stream,
            rest: BytesMut::with_capacity(1024),
            frame_max: FRAME_MAX,
        };
        c.write(&PROTOCOL_HEADER).await?;
        match c.read_method().await? {
            Method::ConnectionStart(s) if s.mechanisms.as_str_lossy().contains("PLAIN") => {}
            Method::ConnectionStart(s) => {
                return Err(format!("no PLAIN in {}", s.mechanisms.as_str_lossy()))
            }
            other => return Err(format!("expected connection.start, got {}", other.name())),
        }
        let mut response = vec![0u8];
        response.extend_from_slice(url.user.as_bytes());
        response.push(0);
        response.extend_from_slice(url.password.as_bytes());
        c.send(&[Method::ConnectionStartOk(ConnectionStartOk {
            client_properties: client_properties(name),
            mechanism: ShortStr::from_static("PLAIN"),
            response: LongStr::from(bytes::Bytes::from(response)),
            locale: ShortStr::from_static("en_US"),
        })])
        .await?;
        let tune = match c.read_method().await? {
            Method::ConnectionTune(t) => t,
            other => return Err(format!("expected connection.tune, got {}", other.name())),
        };
        c.frame_max = match tune.frame_max {
            0 => FRAME_MAX,
            n => n.min(FRAME_MAX),
        };
        c.send(&[
            Method::ConnectionTuneOk(ConnectionTuneOk {
                channel_max: tune.channel_max.clamp(1, 16),
                frame_max: c.frame_max,
                heartbeat: 0,
            }),
            Method::ConnectionOpen(ConnectionOpen {
                virtual_host: ShortStr::from(url.vhost.as_str()),
                capabilities: ShortStr::default(),
                insist: false,
            }),
            Method::ChannelOpen(ChannelOpen {
                out_of_band: ShortStr::default(),
            }),
        ])
        .await?;
        c.expect("connection.open-ok", |m| {
            matches!(m, Method::ConnectionOpenOk(_))
        })
        .await?;
        c.expect("channel.open-ok", |m| matches!(m, Method::ChannelOpenOk(_)))
            .await?;
        Ok(c)
    }

    /// Declares a server-named exclusive auto-delete queue with `arguments`, binds
    /// it to `exchange` with `key` and consumes from it (`no_ack`, or manual acks
    /// with `prefetch`), in one write; returns the queue's name.
    pub async fn subscribe(
        &mut self,
        exchange: &str,
        key: &str,
        arguments: FieldTable,
        no_ack: bool,
        prefetch: u16,
    ) -> Result<String, String> {
        let mut methods = vec![
            Method::QueueDeclare(QueueDeclare {
                ticket: 0,
                queue: ShortStr::default(),
                passive: false,
                durable: false,
                exclusive: true,
                auto_delete: true,
                nowait: false,
                arguments,
            }),
            // An empty queue name is the channel's last declared queue.
            Method::QueueBind(QueueBind {
                ticket: 0,
                queue: ShortStr::default(),
                exchange: ShortStr::from(exchange),
                routing_key: ShortStr::from(key),
                nowait: false,
                arguments: FieldTable::new(),
            }),
        ];
        if !no_ack && prefetch > 0 {
            methods.push(Method::BasicQos(BasicQos {
                prefetch_size: 0,
                prefetch_count: prefetch,
                global: false,
            }));
        }
        methods.push(Method::BasicConsume(BasicConsume {
            ticket: 0,
            queue: ShortStr::default(),
            consumer_tag: ShortStr::default(),
            no_local: false,
            no_ack,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::new(),
        }));
        self.send(&methods).await?;
        let name = match self.read_method().await? {
            Method::QueueDeclareOk(ok) => ok.queue.as_str_lossy().into_owned(),
            other => return Err(format!("expected queue.declare-ok, got {}", other.name())),
        };
        self.expect("queue.bind-ok", |m| matches!(m, Method::QueueBindOk(_)))
            .await?;
        if !no_ack && prefetch > 0 {
            self.expect("basic.qos-ok", |m| matches!(m, Method::BasicQosOk(_)))
                .await?;
        }
        self.expect("basic.consume-ok", |m| {
            matches!(m, Method::BasicConsumeOk(_))
        })
        .await?;
        Ok(name)
    }

    /// Consumes an existing queue (a stream: every reader its own consumer of it) with
    /// `arguments`; returns the queue's name.
    pub async fn consume(
        &mut self,
        queue: &str,
        arguments: FieldTable,
        no_ack: bool,
        prefetch: u16,
    ) -> Result<String, String> {
        let mut methods = Vec::new();
        if !no_ack && prefetch > 0 {
            methods.push(Method::BasicQos(BasicQos {
                prefetch_size: 0,
                prefetch_count: prefetch,
                global: false,
            }));
        }
        methods.push(Method::BasicConsume(BasicConsume {
            ticket: 0,
            queue: ShortStr::from(queue),
            consumer_tag: ShortStr::default(),
            no_local: false,
            no_ack,
            exclusive: false,
            nowait: false,
            arguments,
        }));
        self.send(&methods).await?;
        if !no_ack && prefetch > 0 {
            self.expect("basic.qos-ok", |m| matches!(m, Method::BasicQosOk(_)))
                .await?;
        }
        self.expect("basic.consume-ok", |m| {
            matches!(m, Method::BasicConsumeOk(_))
        })
        .await?;
        Ok(queue.to_owned())
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    async fn send(&mut self, methods: &[Method]) -> Result<(), String> {
        let mut out = BytesMut::with_capacity(512);
        for m in methods {
            let channel = if m.class_id() == 10 { 0 } else { 1 };
            encode_method(&mut out, channel, m);
        }
        self.write(&out).await
    }

    /// Reads the next method of the set-up (heartbeats skipped); a close is an error.
    async fn read_method(&mut self) -> Result<Method, String> {
        loop {
            let frame = split_frame(&mut self.rest, self.frame_max).map_err(|e| e.to_string())?;
            let Some(frame) = frame else {
                self.rest.reserve(4096);
                let n = self
                    .stream
                    .read_buf(&mut self.rest)
                    .await
                    .map_err(|e| format!("read: {e}"))?;
                if n == 0 {
                    return Err("the broker closed the socket".into());
                }
                continue;
            };
            match frame.kind {
                FrameKind::Heartbeat => continue,
                FrameKind::Method => {}
                other => return Err(format!("unexpected {other:?} frame during set-up")),
            }
            let m = Method::decode(frame.payload).map_err(|e| e.to_string())?;
            return match m {
                Method::ConnectionClose(c) => {
                    Err(closed("connection", c.reply_code, &c.reply_text))
                }
                Method::ChannelClose(c) => Err(closed("channel", c.reply_code, &c.reply_text)),
                m => Ok(m),
            };
        }
    }

    async fn expect(&mut self, what: &str, ok: impl Fn(&Method) -> bool) -> Result<(), String> {
        let m = self.read_method().await?;
        if ok(&m) {
            Ok(())
        } else {
            Err(format!("expected {what}, got {}", m.name()))
        }
    }

    /// Sends `connection.close` and reads (deliveries still in flight included) until
    /// `connection.close-ok`, the socket's end or `limit`. `parser` and `carry` are
    /// the receive loop's, so a delivery cut in half is skipped correctly.
    pub async fn close(mut self, parser: &mut Parser, carry: &mut Vec<u8>, limit: Duration) {
        let mut out = BytesMut::with_capacity(64);
        encode_method(
            &mut out,
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: 200,
                reply_text: ShortStr::from_static("bye"),
                class_id: 0,
                method_id: 0,
            }),
        );
        if self.write(&out).await.is_err() {
            return;
        }
        carry.extend_from_slice(&self.rest);
        let _ =
            tokio::time::timeout(limit, drain_until_close_ok(&self.stream, parser, carry)).await;
    }
}

/// Ignores deliveries, stops at `connection.close-ok` or `connection.close`.
struct Closing {
    done: bool,
}

impl Sink for Closing {
    fn delivery(&mut self, _tag: u64, _stamp: &[u8]) {}
    fn method(&mut self, _channel: u16, id: (u16, u16), _args: &[u8]) -> bool {
        if matches!(id, (10, 51) | (10, 50)) {
            self.done = true;
            return false;
        }
        true
    }
}

async fn drain_until_close_ok(stream: &TcpStream, parser: &mut Parser, carry: &mut Vec<u8>) {
    let mut sink = Closing { done: false };
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        let end = with_read_buf(carry, |buf, have| match stream.try_read(&mut buf[have..]) {
            Ok(0) => (true, None),
            Ok(n) => match parser.parse(&buf[..have + n], &mut sink) {
                Ok(used) => (sink.done, Some(used..have + n)),
                Err(_) => (true, None),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => (false, None),
            Err(_) => (true, None),
        });
        if end {
            return;
        }
    }
}
