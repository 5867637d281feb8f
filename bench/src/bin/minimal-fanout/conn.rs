//! Owns: one connection's protocol state — the handshake (PLAIN accepted as given, no
//! heartbeats), channels opened and closed, every declare, bind, qos and consume
//! answered with its `-ok` (nothing is created: there are no exchanges, queues or
//! bindings), publishes assembled (`wire::Assembly`) and handed out as framed
//! deliveries, acks read and ignored, and the replies it owes — plus the position in
//! its thread's stream a subscriber has been sent up to.
//! Does not: read or write its socket, or decide when a subscriber is sent to
//! (`event_loop` does both).

use std::os::fd::RawFd;

use bytes::BytesMut;
use sluice::protocol::frame::encode_method;
use sluice::protocol::method::{
    BasicCancelOk, BasicConsumeOk, BasicQosOk, ChannelCloseOk, ChannelOpenOk, ConnectionClose,
    ConnectionCloseOk, ConnectionOpenOk, ConnectionStart, ConnectionTune, ExchangeDeclareOk,
    ExchangeDeleteOk, QueueBindOk, QueueDeclareOk, QueueDeleteOk, QueuePurgeOk, QueueUnbindOk,
};
use sluice::protocol::{FieldTable, FieldValue, LongStr, Method, ShortStr};

use crate::wire::{next_frame, Args, Assembly, Frame, CONSUMER_TAG, DELIVERY_CHANNEL, FRAME_MAX};

/// Where a connection is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    /// Waiting for the protocol header.
    Header,
    /// Handshake methods and then anything.
    Open,
    /// `connection.close` sent or answered: the socket is closed once `out` is written.
    Closing,
}

/// What the event loop must do after a read was handled.
#[derive(Default)]
pub struct Outcome {
    /// The connection started consuming: it joins the pass at the stream's end.
    pub consumed: bool,
    /// The connection stopped consuming (cancel, channel or connection close).
    pub stopped: bool,
}

/// One connection.
pub struct Conn {
    pub fd: RawFd,
    pub phase: Phase,
    /// Bytes of an incomplete frame, kept until the next read.
    pub carry: Vec<u8>,
    /// Replies not yet written (they go before any delivery).
    pub out: Vec<u8>,
    /// A subscriber: it is in its thread's pass.
    pub consuming: bool,
    /// Stream offset it has been sent up to (subscribers).
    pub pos: u64,
    /// Its socket was full: it waits for `EPOLLOUT` before the next send.
    pub blocked: bool,
    /// The publish being assembled.
    assembly: Option<Assembly>,
    /// An assembly buffer to reuse.
    spare: Vec<u8>,
    /// Number for the next server-named queue.
    queues: u32,
}

fn server_properties() -> FieldTable {
    let mut caps = FieldTable::new();
    caps.insert("consumer_cancel_notify", FieldValue::Bool(true));
    let mut props = FieldTable::new();
    props.insert(
        "product",
        FieldValue::LongStr(LongStr::from("minimal-fanout (sluice-bench)")),
    );
    props.insert("capabilities", FieldValue::Table(caps));
    props
}

impl Conn {
    pub fn new(fd: RawFd) -> Conn {
        Conn {
            fd,
            phase: Phase::Header,
            carry: Vec::new(),
            out: Vec::new(),
            consuming: false,
            pos: 0,
            blocked: false,
            assembly: None,
            spare: Vec::new(),
            queues: 0,
        }
    }

    fn reply(&mut self, channel: u16, m: &Method) {
        let mut b = BytesMut::with_capacity(64);
        encode_method(&mut b, channel, m);
        self.out.extend_from_slice(&b);
    }

    /// Sends `connection.close` with `code` and `text` and stops reading.
    fn fail(&mut self, code: u16, text: &str, id: (u16, u16)) {
        self.reply(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: code,
                reply_text: ShortStr::from(text),
                class_id: id.0,
                method_id: id.1,
            }),
        );
        self.phase = Phase::Closing;
    }

    /// Handles every complete frame of `data`; completed publishes are appended to
    /// `done` framed (`stream::framed`). Returns the bytes used (the rest is an
    /// incomplete frame to carry over).
    pub fn handle(&mut self, data: &[u8], done: &mut Vec<u8>, outcome: &mut Outcome) -> usize {
        let mut pos = 0;
        if self.phase == Phase::Header {
            let Some(h) = data.get(..8) else {
                return 0;
            };
            if h != sluice::protocol::frame::PROTOCOL_HEADER {
                self.out
                    .extend_from_slice(&sluice::protocol::frame::PROTOCOL_HEADER);
                self.phase = Phase::Closing;
                return data.len();
            }
            self.reply(
                0,
                &Method::ConnectionStart(ConnectionStart {
                    version_major: 0,
                    version_minor: 9,
                    server_properties: server_properties(),
                    mechanisms: LongStr::from("PLAIN"),
                    locales: LongStr::from("en_US"),
                }),
            );
            self.phase = Phase::Open;
            pos = 8;
        }
        while self.phase == Phase::Open {
            let (frame, used) = match next_frame(&data[pos..]) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.fail(501, &format!("FRAME_ERROR - {e}"), (0, 0));
                    break;
                }
            };
            pos += used;
            if let Err(e) = self.frame(frame, done, outcome) {
                self.fail(e.0, &e.1, e.2);
            }
        }
        if self.phase == Phase::Closing {
            return data.len();
        }
        pos
    }

    fn frame(
        &mut self,
        frame: Frame<'_>,
        done: &mut Vec<u8>,
        outcome: &mut Outcome,
    ) -> Result<(), (u16, String, (u16, u16))> {
        let unexpected = |what: &str| (505, format!("UNEXPECTED_FRAME - {what}"), (0, 0));
        match frame {
            Frame::Heartbeat => Ok(()),
            Frame::Header { channel, payload } => {
                let a = match self.assembly.as_mut() {
                    Some(a) if a.channel == channel => a,
                    _ => return Err(unexpected("content header without a publish")),
                };
                match a.header(payload) {
                    Ok(true) => self.complete(done),
                    Ok(false) => {}
                    Err(e) => return Err(unexpected(&e)),
                }
                Ok(())
            }
            Frame::Body { channel, payload } => {
                let a = match self.assembly.as_mut() {
                    Some(a) if a.channel == channel => a,
                    _ => return Err(unexpected("body without a publish")),
                };
                match a.body(payload) {
                    Ok(true) => self.complete(done),
                    Ok(false) => {}
                    Err(e) => return Err(unexpected(&e)),
                }
                Ok(())
            }
            Frame::Method { channel, id, args } => {
                if self.assembly.is_some() {
                    return Err(unexpected("method inside a publish's content"));
                }
                self.method(channel, id, args, outcome)
                    .map_err(|(code, text)| (code, text, id))
            }
        }
    }

    fn complete(&mut self, done: &mut Vec<u8>) {
        if let Some(a) = self.assembly.take() {
            done.extend_from_slice(&(a.delivery.len() as u32).to_le_bytes());
            done.extend_from_slice(&a.delivery);
            self.spare = a.delivery;
        }
    }

    fn method(
        &mut self,
        ch: u16,
        id: (u16, u16),
        args: &[u8],
        outcome: &mut Outcome,
    ) -> Result<(), (u16, String)> {
        let bad = |e: String| (502, format!("SYNTAX_ERROR - {e}"));
        let mut a = Args::new(args);
        match id {
            (10, 11) => self.reply(
                0,
                &Method::ConnectionTune(ConnectionTune {
                    channel_max: 2047,
                    frame_max: FRAME_MAX,
                    heartbeat: 0,
                }),
            ),
            (10, 31) => {}
            (10, 40) => self.reply(
                0,
                &Method::ConnectionOpenOk(ConnectionOpenOk {
                    known_hosts: ShortStr::default(),
                }),
            ),
            (10, 50) => {
                outcome.stopped |= self.consuming;
                self.reply(0, &Method::ConnectionCloseOk(ConnectionCloseOk));
                self.phase = Phase::Closing;
            }
            (10, 51) => self.phase = Phase::Closing,
            (20, 10) => self.reply(
                ch,
                &Method::ChannelOpenOk(ChannelOpenOk {
                    channel_id: LongStr::default(),
                }),
            ),
            (20, 40) => {
                if ch == DELIVERY_CHANNEL {
                    outcome.stopped |= self.consuming;
                }
                self.reply(ch, &Method::ChannelCloseOk(ChannelCloseOk));
            }
            (20, 41) => {}
            (40, 10) => {
                // ticket, exchange, type, bits (no-wait is bit 4), arguments
                a.skip(2).map_err(bad)?;
                a.shortstr().map_err(bad)?;
                a.shortstr().map_err(bad)?;
                if a.octet().map_err(bad)? & 0x10 == 0 {
                    self.reply(ch, &Method::ExchangeDeclareOk(ExchangeDeclareOk));
                }
            }
            (40, 20) => {
                a.skip(2).map_err(bad)?;
                a.shortstr().map_err(bad)?;
                if a.octet().map_err(bad)? & 0x02 == 0 {
                    self.reply(ch, &Method::ExchangeDeleteOk(ExchangeDeleteOk));
                }
            }
            (50, 10) => {
                a.skip(2).map_err(bad)?;
                let name = a.shortstr().map_err(bad)?;
                let name = if name.is_empty() {
                    self.queues += 1;
                    format!("amq.gen-minimal-{}-{}", self.fd, self.queues)
                } else {
                    String::from_utf8_lossy(name).into_owned()
                };
                if a.octet().map_err(bad)? & 0x10 == 0 {
                    self.reply(
                        ch,
                        &Method::QueueDeclareOk(QueueDeclareOk {
                            queue: ShortStr::from(name.as_str()),
                            message_count: 0,
                            consumer_count: 0,
                        }),
                    );
                }
            }
            (50, 20) => {
                a.skip(2).map_err(bad)?;
                for _ in 0..3 {
                    a.shortstr().map_err(bad)?;
                }
                if a.octet().map_err(bad)? & 0x01 == 0 {
                    self.reply(ch, &Method::QueueBindOk(QueueBindOk));
                }
            }
            (50, 30) => {
                a.skip(2).map_err(bad)?;
                a.shortstr().map_err(bad)?;
                if a.octet().map_err(bad)? & 0x01 == 0 {
                    self.reply(ch, &Method::QueuePurgeOk(QueuePurgeOk { message_count: 0 }));
                }
            }
            (50, 40) => {
                a.skip(2).map_err(bad)?;
                a.shortstr().map_err(bad)?;
                if a.octet().map_err(bad)? & 0x04 == 0 {
                    self.reply(
                        ch,
                        &Method::QueueDeleteOk(QueueDeleteOk { message_count: 0 }),
                    );
                }
            }
            (50, 50) => self.reply(ch, &Method::QueueUnbindOk(QueueUnbindOk)),
            (60, 10) => self.reply(ch, &Method::BasicQosOk(BasicQosOk)),
            (60, 20) => {
                a.skip(2).map_err(bad)?;
                a.shortstr().map_err(bad)?;
                let tag = a.shortstr().map_err(bad)?;
                let bits = a.octet().map_err(bad)?;
                if ch != DELIVERY_CHANNEL || !(tag.is_empty() || tag == CONSUMER_TAG.as_bytes()) {
                    return Err((
                        540,
                        "NOT_IMPLEMENTED - minimal-fanout: one consumer on channel 1, \
                         server-named"
                            .into(),
                    ));
                }
                if bits & 0x08 == 0 {
                    self.reply(
                        ch,
                        &Method::BasicConsumeOk(BasicConsumeOk {
                            consumer_tag: ShortStr::from(CONSUMER_TAG),
                        }),
                    );
                }
                outcome.consumed = !self.consuming;
            }
            (60, 30) => {
                let tag = a.shortstr().map_err(bad)?;
                outcome.stopped |= self.consuming;
                if a.octet().map_err(bad)? & 0x01 == 0 {
                    self.reply(
                        ch,
                        &Method::BasicCancelOk(BasicCancelOk {
                            consumer_tag: ShortStr::from(String::from_utf8_lossy(tag).as_ref()),
                        }),
                    );
                }
            }
            (60, 40) => {
                let reuse = std::mem::take(&mut self.spare);
                self.assembly = Some(Assembly::start(ch, args, reuse).map_err(bad)?);
            }
            // basic.ack, basic.reject, basic.nack: nothing is held for them.
            (60, 80) | (60, 90) | (60, 120) => {}
            (class, method) => {
                return Err((
                    540,
                    format!("NOT_IMPLEMENTED - minimal-fanout does not do {class}.{method}"),
                ))
            }
        }
        Ok(())
    }
}
