//! Owns: a shard's turn as a connection's reader and writer tasks drive it — the entry
//! points they call with what happened on the socket (accepted, the protocol header, a
//! batch of frames, an operation's outcome from another shard, bytes written, the
//! socket's end) — and what the tasks may know of their connection ([`ReaderView`]).
//! Every entry point that changes state ends the turn here (`Shard::flush`), and the
//! connection's phase changes that I/O causes (framing lost, the writer done) are made
//! here, so `net` never borrows the shard's state, flushes, arms the wheel or sets a
//! phase.
//!
//! Does not: read or write sockets (`net` does), or interpret methods (`handler` does).

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use crate::model::ids::ConnId;
use crate::protocol::frame::{Frame, FrameError};
use crate::session::connection::{Conn, Phase, TlsPeer};
use crate::session::error::{ConnectionError, MethodId};
use crate::session::signal::ConnSignals;

use super::conns::handler::{pending, AfterFrame, HeaderCheck, Pending};
use super::{Shard, TimerKey};

/// Slices one batch of the write pass hands over, and one connection's write at most
/// (a connection's queue is an arena or two and the large bodies queued as their own
/// slices; what does not fit goes in a later write).
const WRITE_SLICES: usize = 512;
const WRITE_SLICES_PER_CONN: usize = 32;

/// Deferred deliveries one connection's write encodes at most, and one batch's (the
/// scratch buffer's size): bytes. What is left waits for the connection's next turn.
const ENCODE_PER_CONN: usize = 256 * 1024;
const ENCODE_PER_BATCH: usize = 1024 * 1024;

/// One connection's write in a batch of the write pass: its socket and its queued
/// bytes, in order.
pub struct Write<'a> {
    pub socket: std::os::fd::RawFd,
    pub slices: &'a [std::io::IoSlice<'a>],
}

/// What the reader does after handing over a batch of frames.
pub enum Step {
    /// Every complete frame is handled: read more.
    NeedMore,
    /// The connection is done with reading.
    Stop,
    /// Flow control holds this connection: do not read until released.
    Hold,
    /// A channel waits for another shard: resolve it, then [`Shard::complete`].
    Await(Pending),
    /// The turn's publishes asked for [`TURN_FANOUT_MAX`] queue entries: let the
    /// shard's other work run (its clock and memory watermark among it), then go on
    /// with the frames already read.
    Yield,
}

/// Queue entries one turn of a reader may ask for by routing before it yields: a read
/// buffer of small publishes to a wide fan-out would otherwise make millions in one
/// turn, ahead of the memory watermark (evaluated each tick) and of every other
/// connection of the shard. About 3 MiB of entries.
pub const TURN_FANOUT_MAX: usize = 65_536;

/// How the shard reaches a new connection's socket and tasks.
pub struct ConnIo {
    /// The socket the write pass writes to; `None` on TLS (the writer task encrypts).
    pub socket: Option<std::os::fd::RawFd>,
    /// The connection's signals, shared with its reader and writer tasks.
    pub signals: Rc<ConnSignals>,
    /// Starts the writer task the first time it is woken.
    pub start_writer: crate::session::connection::StartWriter,
}

/// What a connection's reader may know of it (plain values, read once per socket read).
#[derive(Clone, Copy)]
pub struct ReaderView {
    pub phase: Phase,
    pub frame_max: u32,
    /// Bytes waiting in its outbound buffer.
    pub queued_bytes: usize,
}

/// What the reader does once its socket has nothing more for it.
#[derive(PartialEq, Eq)]
pub enum AfterReading {
    /// The client has its close-ok: leave the socket for it to close.
    Linger,
    /// Closed by the broker: let the writer flush its last frames.
    Drain,
    /// Nothing left to wait for.
    Gone,
}

impl Shard {
    /// Registers an accepted connection and arms its handshake deadline (counted from
    /// `accepted`, so a TLS handshake's time counts against it).
    pub fn open_connection(
        &self,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        accepted: Instant,
        tls: Option<TlsPeer>,
        io: ConnIo,
    ) -> ConnId {
        // Wall-clock time once per connection, for `connected_at`.
        let connected_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let now = self.clock.now();
        let config = &self.config;
        let mut st = self.state.borrow_mut();
        let conn = st.conns.add(|id, serial| {
            let mut c = Conn::new(
                id,
                serial,
                peer,
                now,
                config.net.inline_body_max,
                config.limits.frame_max,
                io.signals,
            );
            c.tls = tls.map(Box::new);
            c.socket = io.socket;
            c.writer_owns = io.socket.is_none();
            c.set_writer_start(io.start_writer);
            if c.writer_owns {
                c.ensure_writer();
            }
            c.local = local;
            c.connected_at_ms = connected_at_ms;
            c
        });
        let deadline = accepted + crate::session::connection::HANDSHAKE_TIMEOUT;
        st.common.wheel.arm(deadline, TimerKey::Handshake(conn));
        conn
    }

    /// What the connection's reader may know of it; `None` once it is forgotten.
    pub fn reader_view(&self, conn: ConnId) -> Option<ReaderView> {
        self.state.borrow().conn(conn).map(|c| ReaderView {
            phase: c.phase(),
            frame_max: c.frame_max,
            queued_bytes: c.out.queued_bytes(),
        })
    }

    /// The connection's signals: its `resume` is raised when the connection closes, flow
    /// control releases it (for a reader that waits without reading), or the shard asks
    /// the idle reader to park. `None` once the connection is gone.
    pub fn resume_signal(&self, conn: ConnId) -> Option<Rc<ConnSignals>> {
        self.state
            .borrow()
            .conn(conn)
            .map(|c| Rc::clone(&c.signals))
    }

    pub fn phase(&self, conn: ConnId) -> Option<Phase> {
        self.state.borrow().conn(conn).map(|c| c.phase())
    }

    /// Whether the connection's frames are still handled (see `Conn::reading`).
    pub fn reading(&self, conn: ConnId) -> bool {
        self.state.borrow().conn(conn).is_some_and(|c| c.reading())
    }

    /// The reader read `n` bytes from the socket: counted on the connection
    /// (`recv_oct`); whether its frames are still handled (as [`Shard::reading`]).
    pub fn received(&self, conn: ConnId, n: usize) -> bool {
        match self.state.borrow_mut().conn_mut(conn) {
            Some(c) => {
                c.recv_oct += n as u64;
                // It is not idle: a request to park made before this read is void.
                c.park_asked = false;
                c.reading()
            }
            None => false,
        }
    }

    /// The 8 bytes a client sends first.
    pub fn protocol_header(self: &Rc<Self>, conn: ConnId, header: &[u8]) -> HeaderCheck {
        let check = self.state.borrow_mut().conn_side().on_protocol_header(
            conn,
            header,
            &self.config.node_name,
        );
        self.flush();
        check
    }

    /// Handles the complete frames `next` yields (it is the reader's buffer, called with
    /// the connection's frame-max) until it has no more, one needs another shard, flow
    /// control holds the connection, or the connection stops. Lost framing closes it
    /// with 501. The turn's end is [`Shard::end_of_batch`].
    pub fn frames(
        &self,
        conn: ConnId,
        mut next: impl FnMut(u32) -> Result<Option<Frame>, FrameError>,
    ) -> Step {
        let mut st = self.state.borrow_mut();
        let frame_max = st.conn(conn).map_or(0, |c| c.frame_max);
        self.turn_fanout.set(0);
        loop {
            match next(frame_max) {
                Ok(Some(frame)) => match st.conn_side().on_frame(self, conn, frame) {
                    AfterFrame::Continue => {
                        if st.conn(conn).is_some_and(|c| c.hold_requested) {
                            return Step::Hold;
                        }
                        if self.turn_fanout.get() >= TURN_FANOUT_MAX {
                            return Step::Yield;
                        }
                    }
                    AfterFrame::Stop => return Step::Stop,
                    AfterFrame::Await(p) => return Step::Await(p),
                },
                Ok(None) => return Step::NeedMore,
                Err(e) => {
                    // Framing is lost: close with 501 and read no further.
                    let err = ConnectionError::Frame(e.to_string());
                    st.conn_side()
                        .close_connection(self, conn, &err.on(MethodId::NONE));
                    if let Some(c) = st.conn_mut(conn) {
                        c.finish();
                    }
                    return Step::Stop;
                }
            }
        }
    }

    /// Ends the turn of a batch of frames: dispatch, hand publishes to other shards
    /// (waiting for room: the connection is not read meanwhile), then send the confirms
    /// that are ready.
    pub async fn end_of_batch(self: &Rc<Self>, conn: ConnId) {
        self.flush();
        let publishes = self.take_publishes();
        if !publishes.is_empty() {
            self.set_read_paused(conn, true);
            self.send_publishes(publishes).await;
            self.set_read_paused(conn, false);
        }
        self.state.borrow_mut().conn_side().flush_confirms(conn);
        self.flush();
    }

    /// Resolves an operation that waits for another shard and completes it.
    pub async fn resolve_and_complete(self: &Rc<Self>, conn: ConnId, pending: Pending) {
        let resolved = pending::resolve(self, conn, pending.channel, pending.op).await;
        self.clock.refresh();
        self.state
            .borrow_mut()
            .conn_side()
            .complete(self, conn, pending.channel, resolved);
        self.flush();
    }

    /// Marks the connection as deliberately unread (its liveness is not judged
    /// meanwhile), or as read again (the silence does not count against it).
    pub fn set_read_paused(&self, conn: ConnId, paused: bool) {
        let now = self.clock.now();
        if let Some(c) = self.state.borrow_mut().conn_mut(conn) {
            if paused {
                c.read_paused_since.get_or_insert(now);
            } else {
                c.read_paused_since = None;
                c.last_recv = now;
            }
        }
    }

    /// The peer showed signs of life without a frame (it takes our bytes, or bytes wait
    /// in its receive queue).
    pub fn peer_alive(&self, conn: ConnId) {
        self.clock.refresh();
        let now = self.clock.now();
        if let Some(c) = self.state.borrow_mut().conn_mut(conn) {
            c.last_recv = now;
        }
    }

    /// Whether flow control still holds this connection's reader, and whether the
    /// connection holds unacknowledged deliveries (whose acks must be read in time);
    /// `None` once the connection is no longer open.
    pub fn hold_state(&self, conn: ConnId) -> Option<(bool, bool)> {
        let st = self.state.borrow();
        st.conn(conn)
            .filter(|c| c.phase() == Phase::Open)
            .map(|c| (st.conns.hold_wanted(self, conn), c.holds_unacked()))
    }

    /// A held connection went on holding unacked deliveries past the enforcement
    /// timeout: its offending channels are closed.
    pub fn enforce_flow_timeout(self: &Rc<Self>, conn: ConnId) {
        self.state
            .borrow_mut()
            .conn_side()
            .enforce_flow_timeout(self, conn);
        self.flush();
    }

    /// Ends a flow-control hold; returns the connection's log subject.
    pub fn end_hold(&self, conn: ConnId) -> Option<String> {
        let subject = self.state.borrow_mut().conn_mut(conn).map(|c| {
            c.hold_requested = false;
            c.log_subject()
        });
        self.set_read_paused(conn, false);
        subject
    }

    /// The reader is done reading: what it should wait for before the connection is
    /// released. Ends the turn, so that the last frames go out.
    pub fn after_reading(self: &Rc<Self>, conn: ConnId) -> AfterReading {
        let next = match self.phase(conn) {
            Some(Phase::Lingering) => AfterReading::Linger,
            Some(Phase::Closed) => AfterReading::Drain,
            _ => AfterReading::Gone,
        };
        if next != AfterReading::Gone {
            self.flush();
        }
        next
    }

    /// A lingering connection's client closed its socket (or it was cut off).
    pub fn linger_over(self: &Rc<Self>, conn: ConnId) -> AfterReading {
        self.state.borrow_mut().conn_side().finish_connection(conn);
        self.after_reading(conn)
    }

    /// The socket is finished: the connection is released (its channels closed, its
    /// unacked deliveries requeued, its exclusive queues deleted).
    pub fn release_connection(self: &Rc<Self>, conn: ConnId) {
        self.state.borrow_mut().conn_side().drop_conn(self, conn);
        self.flush();
    }

    /// Up to `max` buffers to write, and whether the connection is closed (the writer
    /// ends once it has written them); `None` once the connection is forgotten. When
    /// nothing is left to write on a plain connection that is not closed, the writer
    /// gives the socket back to the shard's write pass.
    pub fn take_output(&self, conn: ConnId, max: usize) -> Option<(Vec<Bytes>, bool)> {
        let mut st = self.state.borrow_mut();
        let c = st.conn_mut(conn)?;
        let bufs = c.out.take(max);
        let closed = c.phase() == Phase::Closed;
        if bufs.is_empty() && !closed && c.socket.is_some() {
            c.writer_owns = false;
        }
        Some((bufs, closed))
    }

    /// The writer wrote `n` bytes: no-ack runs now on the wire stop counting against
    /// their queues, and a buffer that drained below `write_low_water` tops credit up.
    /// Settlements and credit go out with one deferred flush for every writer that
    /// completed in this tick.
    pub fn wrote(&self, conn: ConnId, n: usize) {
        let mut st = self.state.borrow_mut();
        let drained = match st.conn_mut(conn) {
            Some(c) => {
                c.out.written(n);
                self.count_written(c, n)
            }
            None => false,
        };
        self.after_written(&mut st, conn, drained);
        self.flush_soon();
    }

    /// What every write does to its connection: counted, timed; whether the buffer is
    /// now below `write_low_water`.
    fn count_written(&self, c: &mut Conn, n: usize) -> bool {
        c.send_oct += n as u64;
        c.last_send = self.clock.now();
        c.signals.progress.notify();
        super::ShardCounters::add(&self.counters.bytes_written, n);
        c.out.queued_bytes() < self.config.net.write_low_water
    }

    /// What follows a write on its connection: no-ack deliveries now on the wire are
    /// settled, and credit topped up once the buffer drained below the low-water mark.
    /// The caller asks for the deferred flush that sends what this produced.
    fn after_written(&self, st: &mut super::State, conn: ConnId, drained: bool) {
        st.conn_side().settle_written(self, conn);
        if drained {
            st.conn_side().top_up_conn(self, conn);
        }
    }

    /// The write pass's turn at up to `max` connections with bytes (in the order they got
    /// them). A connection whose writer task has the socket, a closed one and a TLS one
    /// are handed to the writer task; the others' queues are given to `send` as one batch
    /// ([`Write`]: each socket and the queue's slices, written straight from the outbound
    /// buffer without waiting, followed by its deferred deliveries encoded into `scratch`;
    /// `send` pushes what each socket took, or an error, in the same order, and skips a
    /// write without slices), then accounted for as [`Shard::wrote`] does. A socket that
    /// took less than all it was offered (full) or failed goes to its writer task, which
    /// waits for room (or finishes the connection). Returns whether connections are
    /// still waiting.
    pub fn write_batch(
        &self,
        max: usize,
        scratch: &mut bytes::BytesMut,
        send: impl FnOnce(&[Write<'_>], &mut Vec<std::io::Result<usize>>),
    ) -> bool {
        let mut st = self.state.borrow_mut();
        let mut batch: smallvec::SmallVec<[ConnId; 64]> = smallvec::SmallVec::new();
        let now = self.clock.now();
        let mut pulled_any = false;
        while batch.len() < max {
            let Some((conn, pulled)) = st.next_write(self, now, &batch) else {
                break;
            };
            pulled_any |= pulled;
            let Some(c) = st.conn_mut(conn) else {
                continue;
            };
            if c.socket.is_none() || c.writer_owns || c.phase() == Phase::Closed {
                c.writer_owns = true;
                c.wake_writer();
            } else if !c.out.is_empty() {
                batch.push(conn);
            }
        }
        if pulled_any {
            // What the pulls left for the end of a turn: settlements to other shards,
            // dead letters, a queue dispatched the usual way.
            self.flush_soon();
        }
        if batch.is_empty() {
            return st.conns.has_writes();
        }
        let mut results = Vec::with_capacity(batch.len());
        // Each connection's bytes offered from its buffer, and how many deferred
        // deliveries it has encoded where in `scratch` (offered after those bytes).
        let mut own: smallvec::SmallVec<[usize; 64]> = smallvec::SmallVec::new();
        let mut encoded: smallvec::SmallVec<[(usize, usize, usize); 64]> =
            smallvec::SmallVec::new();
        scratch.clear();
        {
            let st: &super::State = &st;
            // Deferred deliveries are encoded first (the scratch buffer may grow), for a
            // connection whose queued bytes all fit this batch's slices with one to spare.
            let mut at = 0;
            for &conn in &batch {
                let from = scratch.len();
                let mut count = 0;
                if let Some(c) = st.conn(conn) {
                    let per = (WRITE_SLICES - at).min(WRITE_SLICES_PER_CONN);
                    let slices = c.out.slice_count();
                    let room = ENCODE_PER_BATCH.saturating_sub(from);
                    if slices < per && room > 0 {
                        count = c.out.encode_deferred(scratch, room.min(ENCODE_PER_CONN));
                    }
                    at += slices.min(per) + usize::from(count > 0);
                }
                encoded.push((count, from, scratch.len()));
            }
        }
        {
            let st: &super::State = &st;
            let scratch: &[u8] = scratch;
            let mut slices = [std::io::IoSlice::new(&[]); WRITE_SLICES];
            let mut writes: smallvec::SmallVec<[Write<'_>; 64]> = smallvec::SmallVec::new();
            let mut at = 0;
            // Each connection's socket and its run of `slices`.
            let mut ranges: smallvec::SmallVec<[(std::os::fd::RawFd, usize, usize); 64]> =
                smallvec::SmallVec::new();
            for (&conn, &(count, from, to)) in batch.iter().zip(&encoded) {
                // Every connection of the batch is there (same borrow) and plain.
                let (socket, mut n) = match st.conn(conn) {
                    Some(c) => {
                        let per = (WRITE_SLICES - at).min(WRITE_SLICES_PER_CONN);
                        (
                            c.socket.unwrap_or(-1),
                            c.out.io_slices(&mut slices[at..at + per]),
                        )
                    }
                    None => (-1, 0),
                };
                let from_buffer: usize = slices[at..at + n].iter().map(|s| s.len()).sum();
                own.push(from_buffer);
                if count > 0 {
                    slices[at + n] = std::io::IoSlice::new(&scratch[from..to]);
                    n += 1;
                }
                ranges.push((socket, at, n));
                at += n;
            }
            let slices = &slices[..at];
            for &(socket, from, n) in &ranges {
                writes.push(Write {
                    socket,
                    slices: &slices[from..from + n],
                });
            }
            send(&writes, &mut results);
        }
        let mut wrote_any = false;
        let per_conn = own.into_iter().zip(encoded);
        for ((&conn, (own, (count, from, to))), res) in batch.iter().zip(per_conn).zip(results) {
            let Some(c) = st.conn_mut(conn) else {
                continue;
            };
            let want = own + (to - from);
            if want == 0 {
                // No slice left in this batch for it: the next one.
                st.conns.mark_writer(conn);
                continue;
            }
            let written = match res {
                Ok(w) if w >= want => w,
                Ok(w) => {
                    // Full: the writer task waits for room.
                    c.writer_owns = true;
                    c.wake_writer();
                    w
                }
                Err(_) => {
                    // The writer finds out and finishes the connection.
                    c.writer_owns = true;
                    c.wake_writer();
                    0
                }
            };
            if written == 0 {
                continue;
            }
            c.out.consume(written.min(own));
            if count > 0 && written > own {
                c.out.sent_encoded(count, &scratch[from..to], written - own);
            }
            let drained = self.count_written(c, written);
            if !c.writer_owns && !c.out.is_empty() {
                // More slices than one write takes: the rest later in the pass.
                st.conns.mark_writer(conn);
            }
            self.after_written(&mut st, conn, drained);
            wrote_any = true;
        }
        if wrote_any {
            self.flush_soon();
        }
        st.conns.has_writes()
    }

    /// The writer ended (close handshake done, or a failed write: the peer is gone): the
    /// connection is finished, and a reader that is not reading (held, or paused for a
    /// full buffer) must not wait for it.
    pub fn writer_finished(&self, conn: ConnId) {
        if let Some(c) = self.state.borrow_mut().conn_mut(conn) {
            c.finish();
        }
    }
}
