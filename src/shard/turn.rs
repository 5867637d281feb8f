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
use crate::session::signal::Signal;

use super::conns::handler::{pending, AfterFrame, HeaderCheck, Pending};
use super::{Shard, TimerKey};

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
        writer: Rc<Signal>,
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
                writer,
            );
            c.tls = tls;
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

    /// The signal raised when the connection closes, or flow control releases it (for a
    /// reader that waits without reading).
    pub fn resume_signal(&self, conn: ConnId) -> Option<Rc<Signal>> {
        self.state.borrow().conn(conn).map(|c| Rc::clone(&c.resume))
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
        loop {
            match next(frame_max) {
                Ok(Some(frame)) => match st.conn_side().on_frame(self, conn, frame) {
                    AfterFrame::Continue => {
                        if st.conn(conn).is_some_and(|c| c.hold_requested) {
                            return Step::Hold;
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
    /// ends once it has written them); `None` once the connection is forgotten.
    pub fn take_output(&self, conn: ConnId, max: usize) -> Option<(Vec<Bytes>, bool)> {
        let mut st = self.state.borrow_mut();
        let c = st.conn_mut(conn)?;
        Some((c.out.take(max), c.phase() == Phase::Closed))
    }

    /// The writer wrote `n` bytes: no-ack runs now on the wire stop counting against
    /// their queues, and a buffer that drained below `write_low_water` tops credit up.
    /// Settlements and credit go out with one deferred flush for every writer that
    /// completed in this tick.
    pub fn wrote(&self, conn: ConnId, n: usize) {
        let low_water = self.config.net.write_low_water;
        let now = self.clock.now();
        let mut st = self.state.borrow_mut();
        let drained = match st.conn_mut(conn) {
            Some(c) => {
                c.out.written(n);
                c.send_oct += n as u64;
                c.last_send = now;
                c.out.queued_bytes() < low_water
            }
            None => false,
        };
        st.conn_side().settle_written(self, conn);
        if drained {
            st.conn_side().top_up_conn(self, conn);
        }
        drop(st);
        self.flush_soon();
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
