//! Owns: a wire subscriber's receive loop — read whatever the socket holds into the
//! worker thread's buffer (one `read` per wake-up), parse deliveries in place
//! (tag and stamp only, no allocation per message), count them, follow sequence
//! numbers, record latency, tell the pacer, and with manual acks send one `multiple`
//! ack per read — until the run stops it (its `stop` receiver fires) or the broker
//! closes its channel or connection; then an orderly `connection.close`.
//! Does not: set up its queue (`WireConn::subscribe`) or decide when the run ends.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use sluice::protocol::frame::encode_method;
use sluice::protocol::method::{BasicAck, ChannelCloseOk, ConnectionCloseOk};
use sluice::protocol::Method;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::parse::{Parser, Sink};
use super::{with_read_buf, WireConn};
use crate::scenario::pacing::SubPacing;
use crate::scenario::SubResult;
use crate::stats::{read_stamp, Recorder, Sequence, Shared};

/// How long the closing handshake may take.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// What one wire subscriber is.
pub struct WireSpec {
    pub slot: usize,
    pub no_ack: bool,
    pub publishers: usize,
}

/// The receive loop's view of a subscriber while parsing one read.
struct Hot<'a> {
    shared: &'a Shared,
    rec: &'a mut Recorder,
    seq: &'a mut Sequence,
    res: &'a mut SubResult,
    last_tag: u64,
    /// A reply owed to the broker's close (`channel.close-ok` / `connection.close-ok`).
    reply: Option<(u16, Method)>,
    /// The broker ended the channel or connection: stop after this read.
    ended: bool,
}

/// `reply-code` and `reply-text` of a close method's arguments.
fn close_args(args: &[u8]) -> (u16, String) {
    let code = match args {
        [a, b, ..] => u16::from_be_bytes([*a, *b]),
        _ => 0,
    };
    let text = args
        .get(2)
        .and_then(|&n| args.get(3..3 + usize::from(n)))
        .map_or_else(String::new, |t| String::from_utf8_lossy(t).into_owned());
    (code, text)
}

impl Sink for Hot<'_> {
    #[inline]
    fn delivery(&mut self, tag: u64, stamp: &[u8]) {
        self.res.delivered += 1;
        self.last_tag = tag;
        if let Some((sent, seq, publ)) = read_stamp(stamp) {
            let (skipped, reordered) = self.seq.see(seq, publ);
            self.res.gaps += skipped;
            self.res.reordered += u64::from(reordered);
            self.rec.record(self.shared, sent);
        }
    }

    fn method(&mut self, channel: u16, id: (u16, u16), args: &[u8]) -> bool {
        let (code, text) = match id {
            (20, 40) => {
                self.reply = Some((channel, Method::ChannelCloseOk(ChannelCloseOk)));
                close_args(args)
            }
            (10, 50) => {
                self.reply = Some((0, Method::ConnectionCloseOk(ConnectionCloseOk)));
                close_args(args)
            }
            (60, 30) => (0, "basic.cancel from the broker".to_string()),
            _ => return true,
        };
        self.res.closed_code = Some(code);
        self.res.closed_text = Some(text);
        self.res.closed_at_s = Some(self.shared.since_start_s());
        self.ended = true;
        false
    }
}

/// What one read gave.
enum Read {
    /// Bytes parsed (deliveries counted); the broker ended the subscription in them.
    Data {
        ended: bool,
    },
    Eof,
    Failed(String),
}

/// How the loop ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// The run stopped it: close the connection.
    Stopped,
    /// The broker closed the channel or cancelled the consumer: close the connection.
    Channel,
    /// The broker closed the connection (answered) or the socket broke.
    Connection,
}

/// A subscriber's receive state.
struct State {
    rec: Recorder,
    seq: Sequence,
    res: SubResult,
    parser: Parser,
    last_tag: u64,
    /// A reply owed to the broker's close.
    reply: Option<(u16, Method)>,
}

impl State {
    /// Parses `data`; the bytes used (the rest is carried over) and what it gave.
    fn parse(&mut self, shared: &Shared, data: &[u8]) -> (Read, Option<usize>) {
        self.rec.batch_received(shared);
        let mut hot = Hot {
            shared,
            rec: &mut self.rec,
            seq: &mut self.seq,
            res: &mut self.res,
            last_tag: self.last_tag,
            reply: None,
            ended: false,
        };
        let parsed = self.parser.parse(data, &mut hot);
        let ended = hot.ended;
        self.last_tag = hot.last_tag;
        self.reply = hot.reply.take();
        match parsed {
            Ok(used) => (Read::Data { ended }, Some(used)),
            Err(e) => (Read::Failed(format!("protocol: {e}")), None),
        }
    }
}

/// Reads once (when the socket has bytes) into the thread's buffer and parses.
/// A short read clears the socket's readiness (tokio's `poll_read`), so an idle
/// wait costs no extra `read` returning `EAGAIN`.
fn poll_once(
    cx: &mut Context<'_>,
    stream: &mut TcpStream,
    carry: &mut Vec<u8>,
    st: &mut State,
    shared: &Shared,
) -> Poll<Read> {
    with_read_buf(carry, |buf, have| {
        let mut rb = ReadBuf::new(&mut buf[have..]);
        match Pin::new(&mut *stream).poll_read(cx, &mut rb) {
            Poll::Pending => (Poll::Pending, None),
            Poll::Ready(Err(e)) => (Poll::Ready(Read::Failed(format!("read: {e}"))), None),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    return (Poll::Ready(Read::Eof), None);
                }
                let (r, used) = st.parse(shared, &buf[..have + n]);
                (Poll::Ready(r), used.map(|u| u..have + n))
            }
        }
    })
}

/// Receives until `stop` fires or the broker ends the subscription; returns the
/// subscriber's outcome (its p99 and in-window count from its own histogram).
pub async fn run_wire_sub(
    shared: &Shared,
    mut pacing: SubPacing,
    spec: WireSpec,
    mut conn: WireConn,
    queue: String,
    mut stop: oneshot::Receiver<()>,
) -> SubResult {
    let mut st = State {
        rec: Recorder::new(spec.slot, false),
        seq: Sequence::new(spec.publishers),
        res: SubResult {
            id: spec.slot,
            queue,
            ..Default::default()
        },
        parser: Parser::new(conn.frame_max as usize),
        last_tag: 0,
        reply: None,
    };
    let mut carry: Vec<u8> = std::mem::take(&mut conn.rest).to_vec();
    let (mut acked, mut counted) = (0u64, 0u64);
    let mut out = BytesMut::new();
    // Bytes the set-up read past its last reply are parsed before any wait.
    let mut pending = if carry.is_empty() {
        None
    } else {
        Some(with_read_buf(&mut carry, |buf, have| {
            let (r, used) = st.parse(shared, &buf[..have]);
            (r, used.map(|u| u..have))
        }))
    };
    let end = loop {
        let read = match pending.take() {
            Some(r) => r,
            None => {
                let stream = &mut conn.stream;
                let (carry, st) = (&mut carry, &mut st);
                tokio::select! {
                    biased;
                    _ = &mut stop => break End::Stopped,
                    r = poll_fn(|cx| poll_once(cx, stream, carry, st, shared)) => r,
                }
            }
        };
        let res = &mut st.res;
        if res.delivered > counted {
            shared
                .fast
                .delivered
                .add(spec.slot, res.delivered - counted);
            counted = res.delivered;
            pacing.progress(res.delivered, res.gaps);
            st.rec.maybe_flush(shared);
        }
        match read {
            Read::Data { ended: false } => {}
            Read::Data { ended: true } => {
                res.closed_after_run = shared
                    .stop_consumers
                    .load(std::sync::atomic::Ordering::Relaxed);
                let reply = st.reply.take();
                let end = match &reply {
                    Some((0, _)) => End::Connection,
                    _ => End::Channel,
                };
                if let Some((channel, m)) = reply {
                    out.clear();
                    encode_method(&mut out, channel, &m);
                    let _ = conn.stream.write_all(&out).await;
                }
                break end;
            }
            Read::Eof => {
                res.error = Some("the broker closed the socket".into());
                break End::Connection;
            }
            Read::Failed(e) => {
                res.error = Some(e);
                break End::Connection;
            }
        }
        if !spec.no_ack && st.last_tag > acked {
            out.clear();
            let ack = Method::BasicAck(BasicAck {
                delivery_tag: st.last_tag,
                multiple: true,
            });
            encode_method(&mut out, 1, &ack);
            if let Err(e) = conn.stream.write_all(&out).await {
                st.res.error = Some(format!("ack: {e}"));
                break End::Connection;
            }
            acked = st.last_tag;
        }
    };
    st.rec.flush(shared);
    drop(pacing);
    let mut res = st.res;
    res.p99_ns = (!st.rec.hist.is_empty()).then(|| st.rec.hist.quantile(0.99));
    res.measured = st.rec.hist.len();
    if end != End::Connection {
        conn.close(&mut st.parser, &mut carry, CLOSE_LIMIT).await;
    }
    res
}
