//! `RawConn`: a blocking AMQP 0-9-1 client over `std::net::TcpStream` whose every byte is
//! written by hand, so the suites can send what no well-behaved client library would.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::wire::{self, m, Dec, Enc, Props, Table, Val};

/// Default bound on any single blocking read.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What connection.start carried.
#[derive(Debug, Clone)]
pub struct Start {
    pub version_major: u8,
    pub version_minor: u8,
    pub server_properties: Table,
    pub mechanisms: String,
    pub locales: String,
}

/// What connection.tune carried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tune {
    pub channel_max: u16,
    pub frame_max: u32,
    pub heartbeat: u16,
}

/// A decoded method frame.
#[derive(Debug, Clone)]
pub struct Method {
    pub channel: u16,
    pub id: (u16, u16),
    pub args: Vec<u8>,
}

impl Method {
    pub fn dec(&self) -> Dec<'_> {
        Dec::new(&self.args)
    }
}

/// How a connection ended, as seen by the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The server sent connection.close with this code and text.
    Close {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// The server closed the socket without a connection.close.
    Eof,
}

/// A message delivered by basic.deliver or basic.get-ok.
#[derive(Debug, Clone)]
pub struct RawDelivery {
    pub method: Method,
    pub header_payload: Vec<u8>,
    pub props: Props,
    pub body: Vec<u8>,
    /// Sizes of every frame (type 2 and 3) that carried this message, including the
    /// 8 bytes of frame overhead.
    pub frame_sizes: Vec<usize>,
}

/// Client properties a real client sends: it advertises the capabilities it handles.
pub fn client_properties() -> Table {
    vec![
        ("product".into(), Val::LongStr(b"sluice-itests".to_vec())),
        ("platform".into(), Val::LongStr(b"Rust".to_vec())),
        (
            "capabilities".into(),
            Val::Table(vec![
                ("publisher_confirms".into(), Val::Bool(true)),
                ("consumer_cancel_notify".into(), Val::Bool(true)),
                ("basic.nack".into(), Val::Bool(true)),
                ("connection.blocked".into(), Val::Bool(true)),
                ("authentication_failure_close".into(), Val::Bool(true)),
            ]),
        ),
    ]
}

pub struct RawConn {
    pub stream: TcpStream,
    pub tune: Option<Tune>,
}

impl RawConn {
    /// Connects; every read is bounded by [`READ_TIMEOUT`].
    pub fn connect(addr: &str) -> RawConn {
        let stream = TcpStream::connect(addr).expect("tcp connect");
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawConn { stream, tune: None }
    }

    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn send_frame(&mut self, ty: u8, channel: u16, payload: &[u8]) -> io::Result<()> {
        self.send(&wire::frame(ty, channel, payload))
    }

    pub fn send_method(&mut self, channel: u16, id: (u16, u16), args: &[u8]) -> io::Result<()> {
        self.send_frame(wire::FRAME_METHOD, channel, &wire::method_payload(id, args))
    }

    pub fn send_heartbeat(&mut self) -> io::Result<()> {
        self.send_frame(wire::FRAME_HEARTBEAT, 0, &[])
    }

    /// Reads one frame: (type, channel, payload). Checks the frame-end octet.
    pub fn read_frame(&mut self) -> io::Result<(u8, u16, Vec<u8>)> {
        let mut hdr = [0u8; 7];
        self.stream.read_exact(&mut hdr)?;
        let ty = hdr[0];
        let channel = u16::from_be_bytes([hdr[1], hdr[2]]);
        let size = u32::from_be_bytes([hdr[3], hdr[4], hdr[5], hdr[6]]) as usize;
        assert!(
            size <= 64 << 20,
            "server announced an absurd frame size {size}"
        );
        let mut payload = vec![0u8; size + 1];
        self.stream.read_exact(&mut payload)?;
        let end = payload.pop().unwrap();
        assert_eq!(end, wire::FRAME_END, "server frame without frame-end octet");
        Ok((ty, channel, payload))
    }

    /// Reads one frame with a custom read timeout.
    pub fn read_frame_within(&mut self, timeout: Duration) -> io::Result<(u8, u16, Vec<u8>)> {
        self.stream.set_read_timeout(Some(timeout)).unwrap();
        let r = self.read_frame();
        self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        r
    }

    /// Reads frames until a method frame arrives, skipping heartbeats. Panics on a content
    /// frame.
    pub fn read_method(&mut self) -> io::Result<Method> {
        loop {
            let (ty, channel, payload) = self.read_frame()?;
            match ty {
                wire::FRAME_HEARTBEAT => continue,
                wire::FRAME_METHOD => {
                    let mut d = Dec::new(&payload);
                    let id = (d.short(), d.short());
                    return Ok(Method {
                        channel,
                        id,
                        args: payload[4..].to_vec(),
                    });
                }
                other => {
                    panic!("expected a method frame, got frame type {other} on channel {channel}")
                }
            }
        }
    }

    /// Reads the next method and asserts it is `id` on `channel`; a connection.close or
    /// channel.close instead fails the test with its code and text.
    pub fn expect_method(&mut self, channel: u16, id: (u16, u16)) -> Method {
        let got = self
            .read_method()
            .unwrap_or_else(|e| panic!("waiting for {id:?} on channel {channel}: {e}"));
        if got.id == id && got.channel == channel {
            return got;
        }
        if got.id == m::CONNECTION_CLOSE || got.id == m::CHANNEL_CLOSE {
            let mut d = got.dec();
            let code = d.short();
            let text = d.shortstr();
            panic!(
                "expected {id:?} on channel {channel}, got close {:?} on channel {}: {code} {text}",
                got.id, got.channel
            );
        }
        panic!(
            "expected {id:?} on channel {channel}, got {:?} on channel {}",
            got.id, got.channel
        );
    }

    // ---- handshake, step by step -------------------------------------------------------

    pub fn send_protocol_header(&mut self) {
        self.send(wire::PROTOCOL_HEADER)
            .expect("send protocol header");
    }

    pub fn read_start(&mut self) -> Start {
        let mth = self.expect_method(0, m::CONNECTION_START);
        let mut d = mth.dec();
        Start {
            version_major: d.octet(),
            version_minor: d.octet(),
            server_properties: d.table(),
            mechanisms: String::from_utf8_lossy(&d.longstr()).into_owned(),
            locales: String::from_utf8_lossy(&d.longstr()).into_owned(),
        }
    }

    pub fn send_start_ok(&mut self, mechanism: &str, response: &[u8]) {
        let args = Enc::new()
            .table(&client_properties())
            .shortstr(mechanism)
            .longstr(response)
            .shortstr("en_US")
            .done();
        self.send_method(0, m::CONNECTION_START_OK, &args)
            .expect("send start-ok");
    }

    pub fn read_tune(&mut self) -> Tune {
        let mth = self.expect_method(0, m::CONNECTION_TUNE);
        let mut d = mth.dec();
        Tune {
            channel_max: d.short(),
            frame_max: d.long(),
            heartbeat: d.short(),
        }
    }

    pub fn send_tune_ok(&mut self, tune: Tune) {
        let args = Enc::new()
            .short(tune.channel_max)
            .long(tune.frame_max)
            .short(tune.heartbeat)
            .done();
        self.send_method(0, m::CONNECTION_TUNE_OK, &args)
            .expect("send tune-ok");
        self.tune = Some(tune);
    }

    pub fn send_open(&mut self, vhost: &str) {
        let args = Enc::new()
            .shortstr(vhost)
            .shortstr("")
            .bits(&[false])
            .done();
        self.send_method(0, m::CONNECTION_OPEN, &args)
            .expect("send connection.open");
    }

    pub fn read_open_ok(&mut self) {
        self.expect_method(0, m::CONNECTION_OPEN_OK);
    }

    /// Full handshake as guest/guest (PLAIN) on "/", accepting the server's channel-max and
    /// frame-max and disabling heartbeats. Returns the server's tune offer.
    pub fn handshake(&mut self) -> Tune {
        self.handshake_with(0)
    }

    /// As [`RawConn::handshake`], answering tune with `heartbeat` seconds.
    pub fn handshake_with(&mut self, heartbeat: u16) -> Tune {
        self.send_protocol_header();
        self.read_start();
        self.send_start_ok("PLAIN", b"\0guest\0guest");
        let offer = self.read_tune();
        self.send_tune_ok(Tune { heartbeat, ..offer });
        self.send_open("/");
        self.read_open_ok();
        offer
    }

    // ---- endings -----------------------------------------------------------------------

    /// Reads until the server sends connection.close (answering it with close-ok) or
    /// closes the socket, for at most `timeout`. Other frames are ignored. Returns `None`
    /// if neither happened in time.
    pub fn read_until_closed(&mut self, timeout: Duration) -> Option<Ending> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.read_frame_within(left) {
                Ok((wire::FRAME_METHOD, 0, payload)) if payload.len() >= 4 => {
                    let mut d = Dec::new(&payload);
                    if (d.short(), d.short()) == m::CONNECTION_CLOSE {
                        let code = d.short();
                        let text = d.shortstr();
                        let class_id = d.short();
                        let method_id = d.short();
                        let _ = self.send_method(0, m::CONNECTION_CLOSE_OK, &[]);
                        return Some(Ending::Close {
                            code,
                            text,
                            class_id,
                            method_id,
                        });
                    }
                }
                Ok(_) => {}
                Err(e) if is_timeout(&e) => return None,
                Err(_) => return Some(Ending::Eof),
            }
        }
    }

    /// Sends connection.close (200, "bye") without waiting for the answer.
    pub fn send_close(&mut self) {
        let args = Enc::new()
            .short(200)
            .shortstr("bye")
            .short(0)
            .short(0)
            .done();
        self.send_method(0, m::CONNECTION_CLOSE, &args)
            .expect("send connection.close");
    }

    /// Closes cleanly: connection.close, then close-ok expected as the next method.
    pub fn close_cleanly(&mut self) {
        self.send_close();
        self.expect_method(0, m::CONNECTION_CLOSE_OK);
    }

    /// Expects connection.close within 5 s, answers close-ok, and then expects the server to
    /// close the socket. Returns (code, text).
    pub fn expect_connection_close(&mut self) -> (u16, String) {
        match self.read_until_closed(READ_TIMEOUT) {
            Some(Ending::Close { code, text, .. }) => {
                assert!(
                    self.wait_eof(READ_TIMEOUT),
                    "socket still open after connection.close/close-ok ({code} {text})"
                );
                (code, text)
            }
            Some(Ending::Eof) => panic!("socket closed without a connection.close"),
            None => panic!("no connection.close within {READ_TIMEOUT:?}"),
        }
    }

    /// Whether the server closes the socket within `timeout` (frames are discarded).
    pub fn wait_eof(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if is_timeout(&e) => return false,
                Err(_) => return true,
            }
        }
    }

    /// Reads everything the server writes until it closes the socket (bounded by `timeout`).
    pub fn read_to_eof(&mut self, timeout: Duration) -> (Vec<u8>, bool) {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (out, false);
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut buf) {
                Ok(0) => return (out, true),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if is_timeout(&e) => return (out, false),
                Err(_) => return (out, true),
            }
        }
    }

    /// Expects channel.close on `channel`, answers close-ok, returns (code, text).
    pub fn expect_channel_close(&mut self, channel: u16) -> (u16, String) {
        let mth = self.expect_method(channel, m::CHANNEL_CLOSE);
        let mut d = mth.dec();
        let code = d.short();
        let text = d.shortstr();
        self.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
            .expect("send channel.close-ok");
        (code, text)
    }

    // ---- common methods ----------------------------------------------------------------

    /// confirm.select on `channel`, waiting for select-ok.
    pub fn confirm_select(&mut self, channel: u16) {
        self.send_method(
            channel,
            m::CONFIRM_SELECT,
            &Enc::new().bits(&[false]).done(),
        )
        .expect("send confirm.select");
        self.expect_method(channel, m::CONFIRM_SELECT_OK);
    }

    pub fn channel_open(&mut self, channel: u16) {
        self.send_method(channel, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
            .expect("send channel.open");
        self.expect_method(channel, m::CHANNEL_OPEN_OK);
    }

    /// queue.declare with flags (durable, exclusive, auto-delete); returns the queue name.
    pub fn queue_declare(
        &mut self,
        channel: u16,
        name: &str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    ) -> String {
        self.send_queue_declare(channel, name, [durable, exclusive, auto_delete]);
        let ok = self.expect_method(channel, m::QUEUE_DECLARE_OK);
        ok.dec().shortstr()
    }

    /// Sends queue.declare with flags (durable, exclusive, auto-delete), without
    /// waiting for the answer.
    pub fn send_queue_declare(&mut self, channel: u16, name: &str, flags: [bool; 3]) {
        let [durable, exclusive, auto_delete] = flags;
        let args = Enc::new()
            .short(0)
            .shortstr(name)
            .bits(&[false, durable, exclusive, auto_delete, false])
            .table(&vec![])
            .done();
        self.send_method(channel, m::QUEUE_DECLARE, &args)
            .expect("send queue.declare");
    }

    /// Sends a passive queue.declare of `name`, without waiting for the answer.
    pub fn send_passive_declare(&mut self, channel: u16, name: &str) {
        let args = Enc::new()
            .short(0)
            .shortstr(name)
            .bits(&[true, false, false, false, false])
            .table(&vec![])
            .done();
        self.send_method(channel, m::QUEUE_DECLARE, &args)
            .expect("send passive queue.declare");
    }

    pub fn queue_bind(&mut self, channel: u16, queue: &str, exchange: &str, key: &str) {
        let args = Enc::new()
            .short(0)
            .shortstr(queue)
            .shortstr(exchange)
            .shortstr(key)
            .bits(&[false])
            .table(&vec![])
            .done();
        self.send_method(channel, m::QUEUE_BIND, &args)
            .expect("send queue.bind");
        self.expect_method(channel, m::QUEUE_BIND_OK);
    }

    /// basic.consume (no-ack as given); returns the consumer tag.
    pub fn basic_consume(&mut self, channel: u16, queue: &str, no_ack: bool) -> String {
        let args = Enc::new()
            .short(0)
            .shortstr(queue)
            .shortstr("")
            .bits(&[false, no_ack, false, false])
            .table(&vec![])
            .done();
        self.send_method(channel, m::BASIC_CONSUME, &args)
            .expect("send basic.consume");
        self.expect_method(channel, m::BASIC_CONSUME_OK)
            .dec()
            .shortstr()
    }

    /// The basic.publish method frame's arguments.
    pub fn publish_args(exchange: &str, key: &str, mandatory: bool, immediate: bool) -> Vec<u8> {
        Enc::new()
            .short(0)
            .shortstr(exchange)
            .shortstr(key)
            .bits(&[mandatory, immediate])
            .done()
    }

    /// basic.publish + content header + body frames split at the negotiated frame-max.
    pub fn publish(
        &mut self,
        channel: u16,
        exchange: &str,
        key: &str,
        props: &Props,
        body: &[u8],
    ) -> io::Result<()> {
        let mut bytes = wire::frame(
            wire::FRAME_METHOD,
            channel,
            &wire::method_payload(
                m::BASIC_PUBLISH,
                &Self::publish_args(exchange, key, false, false),
            ),
        );
        bytes.extend(wire::frame(
            wire::FRAME_HEADER,
            channel,
            &wire::content_header_payload(body.len() as u64, props),
        ));
        let max_payload = self.tune.map(|t| t.frame_max as usize).unwrap_or(131072) - 8;
        for chunk in body.chunks(max_payload.max(1)) {
            bytes.extend(wire::frame(wire::FRAME_BODY, channel, chunk));
        }
        self.send(&bytes)
    }

    /// Reads a basic.deliver (or get-ok) and its content frames.
    pub fn read_delivery(&mut self, channel: u16) -> RawDelivery {
        let method = self
            .read_method()
            .unwrap_or_else(|e| panic!("waiting for a delivery on channel {channel}: {e}"));
        assert!(
            method.id == m::BASIC_DELIVER || method.id == m::BASIC_GET_OK,
            "expected basic.deliver/get-ok, got {:?}",
            method.id
        );
        assert_eq!(method.channel, channel);
        let (ty, ch, header_payload) = self.read_frame().expect("content header");
        assert_eq!(
            (ty, ch),
            (wire::FRAME_HEADER, channel),
            "expected a content header"
        );
        let mut frame_sizes = vec![header_payload.len() + 8];
        let mut d = Dec::new(&header_payload);
        assert_eq!(d.short(), 60, "content header class");
        d.short();
        let size = d.longlong() as usize;
        let props = Props::decode(&mut d);
        let mut body = Vec::with_capacity(size);
        while body.len() < size {
            let (ty, ch, chunk) = self.read_frame().expect("content body");
            assert_eq!(
                (ty, ch),
                (wire::FRAME_BODY, channel),
                "expected a body frame"
            );
            frame_sizes.push(chunk.len() + 8);
            body.extend_from_slice(&chunk);
        }
        assert_eq!(body.len(), size, "body longer than announced");
        RawDelivery {
            method,
            header_payload,
            props,
            body,
            frame_sizes,
        }
    }
}

pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}
