//! Owns: the connection task — the one task per connection that owns the socket and
//! every channel's protocol state (pending replies, consumers, content assembly,
//! confirm numbering). Handles talk to it through one bounded command queue; it
//! answers through oneshots and per-consumer queues.
//! Does not: share mutable state by locks. Batching: each turn takes up to
//! [`CMD_BATCH`] commands, encodes them all into one write buffer and writes it with
//! one `write` call; reads take whatever the socket has (up to [`READ_CHUNK`]) and
//! split every complete frame out of it, bodies zero-copy.
//!
//! Backpressure: a consumer's queue is bounded. When it is full the task stops
//! reading the socket (TCP then holds the broker back, so a slow application shows up
//! as a slow consumer on the broker, not as client memory) but keeps writing.

mod inbound;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// The connection task's halves of the socket: a TCP socket's own halves, or a TLS
/// stream's (`amqps://`).
pub(crate) type BoxRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
pub(crate) type BoxWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;
use tokio::sync::{mpsc, oneshot};

use super::error::ClientError;
use super::message::{Delivery, GetMessage, Returned};
use super::shared::{ChanShared, ConnShared};
use crate::protocol::frame::{
    encode_content, encode_heartbeat, encode_method, split_frame, Frame, FrameKind,
};
use crate::protocol::method::*;
use crate::protocol::{ContentHeader, Method, ShortStr};

/// Most commands taken per turn.
pub(crate) const CMD_BATCH: usize = 1024;
/// Read buffer top-up size.
pub(crate) const READ_CHUNK: usize = 256 * 1024;
/// Stop taking commands while this many bytes wait to be written.
const WRITE_HIGH_WATER: usize = 1 << 20;

/// A reply slot for a synchronous method.
pub(crate) enum Pending {
    /// Hand the reply method back.
    Method(oneshot::Sender<Result<Method, ClientError>>),
    /// `basic.consume`: register the consumer on `consume-ok`, then hand it back.
    Consume {
        deliveries: mpsc::Sender<Vec<Delivery>>,
        batch_max: usize,
        reply: oneshot::Sender<Result<Method, ClientError>>,
    },
    /// `basic.get`: answered after the content arrives (or on `get-empty`).
    Get(oneshot::Sender<Result<Option<GetMessage>, ClientError>>),
    /// Nobody waits (e.g. the close sent when a `Channel` is dropped).
    Ignore,
}

impl Pending {
    fn fail(self, e: &ClientError) {
        match self {
            Pending::Method(tx) | Pending::Consume { reply: tx, .. } => {
                let _ = tx.send(Err(e.clone()));
            }
            Pending::Get(tx) => {
                let _ = tx.send(Err(e.clone()));
            }
            Pending::Ignore => {}
        }
    }
}

/// What the channel gets back from `OpenChannel`.
pub(crate) struct Opened {
    pub id: u16,
    pub shared: Arc<ChanShared>,
    pub returns: mpsc::UnboundedReceiver<Returned>,
}

pub(crate) type ConfirmTx = oneshot::Sender<Result<bool, ClientError>>;

/// One publish, encoded by the connection task into its write buffer.
pub(crate) struct Publish {
    pub channel: u16,
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub mandatory: bool,
    pub properties: Bytes,
    pub body: Bytes,
    pub confirm: Option<ConfirmTx>,
}

/// A request from a handle to the connection task.
pub(crate) enum Cmd {
    OpenChannel(oneshot::Sender<Result<Opened, ClientError>>),
    Rpc {
        channel: u16,
        method: Method,
        pending: Pending,
    },
    Send {
        channel: u16,
        method: Method,
    },
    Publish(Publish),
    WaitConfirms {
        channel: u16,
        reply: ConfirmTx,
    },
    Close {
        code: u16,
        text: ShortStr,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
}

struct Confirms {
    next: u64,
    outstanding: VecDeque<(u64, Option<ConfirmTx>)>,
    nacked: bool,
    waiters: Vec<ConfirmTx>,
}

impl Confirms {
    fn settle(&mut self, tag: u64, multiple: bool, ack: bool) {
        if !ack {
            self.nacked = true;
        }
        if multiple {
            while let Some((seq, _)) = self.outstanding.front() {
                if *seq > tag {
                    break;
                }
                if let Some((_, Some(tx))) = self.outstanding.pop_front() {
                    let _ = tx.send(Ok(ack));
                }
            }
        } else if let Ok(i) = self.outstanding.binary_search_by_key(&tag, |(s, _)| *s) {
            if let Some((_, Some(tx))) = self.outstanding.remove(i) {
                let _ = tx.send(Ok(ack));
            }
        }
        if self.outstanding.is_empty() {
            let all_acked = !self.nacked;
            self.nacked = false;
            for w in self.waiters.drain(..) {
                let _ = w.send(Ok(all_acked));
            }
        }
    }
}

enum Target {
    Deliver(BasicDeliver),
    Return(BasicReturn),
    Get(
        BasicGetOk,
        oneshot::Sender<Result<Option<GetMessage>, ClientError>>,
    ),
}

struct Assembly {
    target: Target,
    body_size: u64,
    properties: Option<Bytes>,
    body: Option<Bytes>,
    parts: BytesMut,
}

/// One consumer as the connection task sees it: deliveries are gathered into a batch
/// per read pass and handed over with one queue operation.
struct Slot {
    tag: ShortStr,
    tx: mpsc::Sender<Vec<Delivery>>,
    batch: Vec<Delivery>,
    batch_max: usize,
}

type Overflow = VecDeque<(mpsc::Sender<Vec<Delivery>>, Vec<Delivery>)>;

impl Slot {
    /// Hands the gathered batch to the consumer, or queues it behind `overflow`.
    fn flush(&mut self, overflow: &mut Overflow) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(self.batch_max.min(128)));
        if !overflow.is_empty() {
            overflow.push_back((self.tx.clone(), batch));
            return;
        }
        match self.tx.try_send(batch) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(batch)) => {
                overflow.push_back((self.tx.clone(), batch));
            }
        }
    }
}

struct ChanState {
    shared: Arc<ChanShared>,
    pending: VecDeque<Pending>,
    consumers: Vec<Slot>,
    assembly: Option<Assembly>,
    returns: mpsc::UnboundedSender<Returned>,
    confirms: Option<Confirms>,
}

impl ChanState {
    /// Ends the channel: every waiter and consumer learns `e`.
    fn fail(self, e: &ClientError) {
        self.shared.fail(e.clone());
        for p in self.pending {
            p.fail(e);
        }
        if let Some(Assembly {
            target: Target::Get(_, tx),
            ..
        }) = self.assembly
        {
            let _ = tx.send(Err(e.clone()));
        }
        if let Some(c) = self.confirms {
            for (_, tx) in c.outstanding {
                if let Some(tx) = tx {
                    let _ = tx.send(Err(e.clone()));
                }
            }
            for w in c.waiters {
                let _ = w.send(Err(e.clone()));
            }
        }
        // Dropping the consumer senders ends their receivers, which then report the
        // channel's error.
    }
}

/// Negotiated connection parameters.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Largest frame, header and end octet included.
    pub frame_max: u32,
    /// Highest channel number.
    pub channel_max: u16,
    /// Heartbeat interval in seconds (0 = off).
    pub heartbeat: u16,
}

pub(crate) struct ConnTask {
    reader: BoxRead,
    writer: BoxWrite,
    rbuf: BytesMut,
    wbuf: BytesMut,
    cmds: mpsc::Receiver<Cmd>,
    shared: Arc<ConnShared>,
    tuning: Tuning,
    channels: Vec<Option<ChanState>>,
    next_channel: u16,
    /// Deliveries waiting for room in their consumers' queues, in arrival order.
    /// While any wait, reading pauses — unless a synchronous reply is awaited, which
    /// may sit behind them in the socket (an application blocked on, say,
    /// `tx.commit` while its consumer queue is full would otherwise never be answered).
    overflow: Overflow,
    /// The close this client started, answered on close-ok.
    closing: Option<oneshot::Sender<Result<(), ClientError>>>,
    last_read: Instant,
    wrote_since_tick: bool,
}

enum Flow {
    Continue,
    Stop,
}

enum Event {
    Wrote(std::io::Result<usize>),
    Read(std::io::Result<usize>),
    Unstalled(Option<mpsc::OwnedPermit<Vec<Delivery>>>),
    Commands(usize),
    Tick,
}

impl ConnTask {
    pub(crate) fn new(
        reader: BoxRead,
        writer: BoxWrite,
        rbuf: BytesMut,
        cmds: mpsc::Receiver<Cmd>,
        shared: Arc<ConnShared>,
        tuning: Tuning,
    ) -> ConnTask {
        ConnTask {
            reader,
            writer,
            rbuf,
            wbuf: BytesMut::with_capacity(256 * 1024),
            cmds,
            shared,
            tuning,
            channels: Vec::new(),
            next_channel: 1,
            overflow: VecDeque::new(),
            closing: None,
            last_read: Instant::now(),
            wrote_since_tick: false,
        }
    }

    /// Runs until the connection ends; the reason is left in `ConnShared::error`.
    pub(crate) async fn run(mut self) {
        let result = self.run_loop().await;
        let err = match result {
            Ok(()) => self
                .shared
                .error
                .get()
                .cloned()
                .unwrap_or_else(ClientError::disconnected),
            Err(e) => e,
        };
        self.shared.fail(err.clone());
        if let Some(tx) = self.closing.take() {
            let _ = tx.send(Ok(()));
        }
        for ch in self.channels.drain(..).flatten() {
            ch.fail(&err);
        }
        // Answer whatever is still queued so no handle waits forever.
        self.cmds.close();
        while let Ok(cmd) = self.cmds.try_recv() {
            fail_cmd(cmd, &err);
        }
        let _ = self.writer.shutdown().await;
    }

    async fn run_loop(&mut self) -> Result<(), ClientError> {
        let hb = Duration::from_secs(u64::from(self.tuning.heartbeat));
        let mut ticker = tokio::time::interval(if hb.is_zero() {
            Duration::from_secs(3600)
        } else {
            hb / 2
        });
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch: Vec<Cmd> = Vec::with_capacity(CMD_BATCH);
        let mut cmds_open = true;
        // Frames that arrived with the handshake.
        if let Flow::Stop = self.process_frames()? {
            return Ok(());
        }
        loop {
            if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
                self.rbuf.reserve(READ_CHUNK);
            }
            let can_read = !self.paused();
            let can_take =
                cmds_open && self.wbuf.len() < WRITE_HIGH_WATER && self.closing.is_none();
            let want_write = !self.wbuf.is_empty();
            let stall = self
                .overflow
                .front()
                .map(|(tx, _)| tx.clone().reserve_owned());
            let stalled = stall.is_some();
            let ev = {
                let writer = &mut self.writer;
                let wbuf = &self.wbuf;
                let reader = &mut self.reader;
                let rbuf = &mut self.rbuf;
                let cmds = &mut self.cmds;
                let batch = &mut batch;
                tokio::select! {
                    biased;
                    n = writer.write(wbuf), if want_write => Event::Wrote(n),
                    n = reader.read_buf(rbuf), if can_read => Event::Read(n),
                    p = async { match stall { Some(f) => f.await.ok(), None => std::future::pending().await } }, if stalled => Event::Unstalled(p),
                    n = cmds.recv_many(batch, CMD_BATCH), if can_take => Event::Commands(n),
                    _ = ticker.tick(), if !hb.is_zero() => Event::Tick,
                }
            };
            match ev {
                Event::Wrote(n) => {
                    let n = n?;
                    if n == 0 {
                        return Err(ClientError::io(std::io::ErrorKind::WriteZero.into()));
                    }
                    self.wbuf.advance(n);
                    self.wrote_since_tick = true;
                }
                Event::Read(n) => {
                    if n? == 0 {
                        return Err(ClientError::io(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "server closed the socket",
                        )));
                    }
                    self.last_read = Instant::now();
                    if let Flow::Stop = self.process_frames()? {
                        return self.flush().await;
                    }
                }
                Event::Unstalled(permit) => {
                    if let Some((_, d)) = self.overflow.pop_front() {
                        if let Some(p) = permit {
                            p.send(d);
                        }
                    }
                    self.drain_overflow();
                    if let Flow::Stop = self.process_frames()? {
                        return self.flush().await;
                    }
                }
                Event::Commands(n) => {
                    if n == 0 {
                        // Every handle is gone: close politely.
                        cmds_open = false;
                        let (tx, _rx) = oneshot::channel();
                        self.start_close(200, ShortStr::from_static("Goodbye"), tx);
                    }
                    for cmd in batch.drain(..) {
                        self.command(cmd);
                    }
                }
                Event::Tick => {
                    if self.last_read.elapsed() > hb * 2 {
                        return Err(ClientError::HeartbeatTimeout(self.last_read.elapsed()));
                    }
                    if !self.wrote_since_tick && self.wbuf.is_empty() {
                        encode_heartbeat(&mut self.wbuf);
                    }
                    self.wrote_since_tick = false;
                }
            }
        }
    }

    async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.wbuf.is_empty() {
            self.writer.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    fn chan(&mut self, id: u16) -> Option<&mut ChanState> {
        self.channels
            .get_mut(usize::from(id))
            .and_then(|c| c.as_mut())
    }

    fn start_close(
        &mut self,
        code: u16,
        text: ShortStr,
        reply: oneshot::Sender<Result<(), ClientError>>,
    ) {
        let e = ClientError::ConnectionClosed {
            code,
            text: text.to_string(),
            class_id: 0,
            method_id: 0,
        };
        self.shared.fail(e);
        encode_method(
            &mut self.wbuf,
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: code,
                reply_text: text,
                class_id: 0,
                method_id: 0,
            }),
        );
        self.closing = Some(reply);
    }

    fn command(&mut self, cmd: Cmd) {
        if self.closing.is_some() {
            let e = self
                .shared
                .error
                .get()
                .cloned()
                .unwrap_or_else(ClientError::disconnected);
            fail_cmd(cmd, &e);
            return;
        }
        match cmd {
            Cmd::Publish(p) => {
                let frame_max = self.tuning.frame_max;
                let Some(ch) = self.chan(p.channel) else {
                    if let Some(tx) = p.confirm {
                        let _ = tx.send(Err(ClientError::disconnected()));
                    }
                    return;
                };
                match (&mut ch.confirms, p.confirm) {
                    (Some(c), tx) => {
                        c.next += 1;
                        c.outstanding.push_back((c.next, tx));
                    }
                    (None, Some(tx)) => {
                        let _ = tx.send(Err(ClientError::NotInConfirmMode));
                        return;
                    }
                    (None, None) => {}
                }
                encode_method(
                    &mut self.wbuf,
                    p.channel,
                    &Method::BasicPublish(BasicPublish {
                        ticket: 0,
                        exchange: p.exchange,
                        routing_key: p.routing_key,
                        mandatory: p.mandatory,
                        immediate: false,
                    }),
                );
                encode_content(
                    &mut self.wbuf,
                    p.channel,
                    CLASS_BASIC,
                    &p.properties,
                    &p.body,
                    frame_max,
                );
            }
            Cmd::Send { channel, method } => {
                if self.chan(channel).is_some() {
                    encode_method(&mut self.wbuf, channel, &method);
                }
            }
            Cmd::Rpc {
                channel,
                method,
                pending,
            } => {
                let Some(ch) = self.chan(channel) else {
                    // The channel is already closed (the broker may have closed it while
                    // this command was queued). Dropping the reply makes the caller report
                    // the channel's own close reason (a 506, say), not a dead connection.
                    drop(pending);
                    return;
                };
                if let Method::ConfirmSelect(_) = method {
                    if ch.confirms.is_none() {
                        ch.confirms = Some(Confirms {
                            next: 0,
                            outstanding: VecDeque::new(),
                            nacked: false,
                            waiters: Vec::new(),
                        });
                    }
                }
                ch.pending.push_back(pending);
                encode_method(&mut self.wbuf, channel, &method);
            }
            Cmd::WaitConfirms { channel, reply } => match self.chan(channel) {
                // As for an RPC: the caller reports the channel's close reason.
                None => drop(reply),
                Some(ChanState { confirms: None, .. }) => {
                    let _ = reply.send(Err(ClientError::NotInConfirmMode));
                }
                Some(ChanState {
                    confirms: Some(c), ..
                }) => {
                    if c.outstanding.is_empty() {
                        let _ = reply.send(Ok(!c.nacked));
                        c.nacked = false;
                    } else {
                        c.waiters.push(reply);
                    }
                }
            },
            Cmd::OpenChannel(reply) => {
                let _ = reply.send(self.open_channel());
            }
            Cmd::Close { code, text, reply } => self.start_close(code, text, reply),
        }
    }

    fn open_channel(&mut self) -> Result<Opened, ClientError> {
        let max = self.tuning.channel_max.max(1);
        let mut id = None;
        // Round-robin so a just-closed number is not reused at once.
        for _ in 0..max {
            let cand = self.next_channel;
            self.next_channel = if cand >= max { 1 } else { cand + 1 };
            if self.chan(cand).is_none() {
                id = Some(cand);
                break;
            }
        }
        let id = id.ok_or(ClientError::NoFreeChannel { channel_max: max })?;
        let shared = Arc::new(ChanShared::default());
        let (returns_tx, returns) = mpsc::unbounded_channel();
        let idx = usize::from(id);
        if self.channels.len() <= idx {
            self.channels.resize_with(idx + 1, || None);
        }
        self.channels[idx] = Some(ChanState {
            shared: Arc::clone(&shared),
            pending: VecDeque::new(),
            consumers: Vec::new(),
            assembly: None,
            returns: returns_tx,
            confirms: None,
        });
        // The handle waits for open-ok through an Rpc it sends next; the state exists
        // now so that Rpc finds it.
        Ok(Opened {
            id,
            shared,
            returns,
        })
    }

    /// Reading pauses while deliveries wait for consumer room and no synchronous
    /// reply is outstanding.
    fn paused(&self) -> bool {
        !self.overflow.is_empty() && self.channels.iter().flatten().all(|c| c.pending.is_empty())
    }

    /// Moves waiting deliveries into their consumers' queues while there is room.
    fn drain_overflow(&mut self) {
        while let Some((tx, d)) = self.overflow.pop_front() {
            match tx.try_send(d) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(d)) => {
                    self.overflow.push_front((tx, d));
                    break;
                }
            }
        }
    }
}

fn fail_cmd(cmd: Cmd, e: &ClientError) {
    match cmd {
        Cmd::OpenChannel(tx) => {
            let _ = tx.send(Err(e.clone()));
        }
        Cmd::Rpc { pending, .. } => pending.fail(e),
        Cmd::Send { .. } => {}
        Cmd::Publish(p) => {
            if let Some(tx) = p.confirm {
                let _ = tx.send(Err(e.clone()));
            }
        }
        Cmd::WaitConfirms { reply, .. } => {
            let _ = reply.send(Err(e.clone()));
        }
        Cmd::Close { reply, .. } => {
            let _ = reply.send(Ok(()));
        }
    }
}
