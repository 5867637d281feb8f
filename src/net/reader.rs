//! Owns: one connection's reader task — the owned read buffer, protocol-header check,
//! frame splitting (zero copy: frame payloads are slices of the buffer), handing frames to
//! the shard's handler, awaiting operations that need another shard, pausing while this
//! connection's publishes wait for room at another shard, and holding (not reading) a
//! connection that goes on publishing after flow control stopped it. After close-ok to
//! the client's `connection.close` it leaves the socket for the client to close (reading
//! and discarding) until the close timeout shuts it. When the socket ends, it releases
//! the connection.
//!
//! Does not: interpret methods, or read while an earlier read is in flight.

use std::net::SocketAddr;
use std::rc::Rc;

use tokio_uring::buf::BoundedBuf;
use tokio_uring::net::TcpStream;

use super::read_buf::ReadBuffer;
use crate::model::ids::ConnId;
use crate::session::connection::{Conn, Phase};
use crate::session::error::{ConnectionError, MethodId};
use crate::session::signal::Signal;
use crate::shard::handler::{pending, AfterFrame, HeaderCheck};
use crate::shard::Shard;

/// How long a closed connection's writer may take to flush its last frames before the
/// socket is shut under it (a write to a peer that never reads again does not complete:
/// it must not keep the connection, its unacked deliveries and its exclusive queues).
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The reader pauses while the connection's outbound buffer holds more than this many
/// times `write_high_water` (deliveries stop at 1x; replies and returns could go on).
const READ_PAUSE_FACTOR: usize = 4;

/// How a connection's bytes reach the socket: as they are (zero-copy `writev` of the
/// outbound buffers), or through a TLS session (`net::tls`).
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(Rc<super::tls::Session>),
}

/// Serves one accepted plain connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, peer: SocketAddr) {
    let accepted = shard.clock.now();
    serve_transport(shard, stream, peer, accepted, Transport::Plain, None).await;
}

/// Serves one connection (plain, or TLS after its handshake) until it closes. The
/// handshake deadline counts from `accepted`, so a TLS handshake's time counts against
/// it too.
pub async fn serve_transport(
    shard: Rc<Shard>,
    stream: TcpStream,
    peer: SocketAddr,
    accepted: std::time::Instant,
    transport: Transport,
    tls_peer: Option<crate::session::connection::TlsPeer>,
) {
    let stream = Rc::new(stream);
    let signal = Rc::new(Signal::new());
    let now = shard.clock.now();
    let conn = {
        let config = &shard.config;
        let writer = Rc::clone(&signal);
        shard.state.borrow_mut().conns.add(|id, serial| {
            Conn::new(
                id,
                serial,
                peer,
                now,
                config.net.inline_body_max,
                config.limits.frame_max,
                writer,
            )
        })
    };
    if tls_peer.is_some() {
        if let Some(c) = shard.state.borrow_mut().conn_mut(conn) {
            c.tls = tls_peer;
        }
    }
    {
        let mut st = shard.state.borrow_mut();
        let deadline = accepted + crate::shard::handler::HANDSHAKE_TIMEOUT;
        st.common
            .wheel
            .arm(deadline, crate::shard::TimerKey::Handshake(conn));
    }
    let writer_done = Rc::new(Signal::new());
    let writer_progress = Rc::new(Signal::new());
    tokio_uring::spawn(super::writer::run(
        Rc::clone(&shard),
        Rc::clone(&stream),
        transport.clone(),
        conn,
        Rc::clone(&signal),
        Rc::clone(&writer_progress),
        Rc::clone(&writer_done),
    ));
    read_loop(&shard, &stream, &transport, conn, &writer_progress, &signal).await;
    if matches!(phase(&shard, conn), Some(Phase::Lingering)) {
        // The client has its close-ok and closes the socket itself; otherwise the close
        // timeout or broker shutdown cuts it off, which ends the read here.
        shard.flush();
        let cutoff = tokio_uring::spawn(cut_off_when_closed(
            Rc::clone(&shard),
            Rc::clone(&stream),
            conn,
        ));
        linger(&stream).await;
        shard.state.borrow_mut().conn_side().finish_connection(conn);
        let _ = cutoff.await;
    }
    if matches!(phase(&shard, conn), Some(Phase::Closed)) {
        // Let the writer flush the last frames (close-ok, connection.close, the protocol
        // header answer) before the connection is forgotten; a peer that does not read
        // gets a bounded grace period, then its socket is shut, which ends the write.
        shard.flush();
        if tokio::time::timeout(CLOSE_GRACE, writer_done.wait())
            .await
            .is_err()
        {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            let _ = tokio::time::timeout(CLOSE_GRACE, writer_done.wait()).await;
        }
    }
    shard.state.borrow_mut().conn_side().drop_conn(&shard, conn);
    shard.flush();
}

fn phase(shard: &Shard, conn: ConnId) -> Option<Phase> {
    shard.state.borrow().conn(conn).map(|c| c.phase)
}

/// Whether frames are still read from this connection.
fn reading(phase: Option<Phase>) -> bool {
    !matches!(phase, None | Some(Phase::Lingering | Phase::Closed))
}

/// While a connection lingers after close-ok, shuts its socket as soon as the
/// connection is `Closed` (close timeout, broker shutdown, the peer gone). The writer
/// would shut it too, but not while it is stuck writing to a peer that neither reads nor
/// closes; shutting the socket ends that write and the pending linger read.
async fn cut_off_when_closed(shard: Rc<Shard>, stream: Rc<TcpStream>, conn: ConnId) {
    loop {
        let resume = match shard.state.borrow().conn(conn) {
            Some(c) if c.phase == Phase::Lingering => Rc::clone(&c.resume),
            _ => break,
        };
        resume.wait().await;
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Bytes read at a time while lingering; they are discarded.
const LINGER_READ: usize = 512;

/// Reads and discards until the peer closes the socket, it fails, or the broker shuts it
/// (`cut_off_when_closed` or the writer: a shut socket's pending read completes with 0).
/// Holds no more than `LINGER_READ` bytes.
async fn linger(stream: &TcpStream) {
    let mut buf = Vec::with_capacity(LINGER_READ);
    loop {
        let (res, returned) = stream.read(buf).await;
        buf = returned;
        match res {
            Ok(0) | Err(_) => return,
            Ok(_) => buf.clear(),
        }
    }
}

async fn read_loop(
    shard: &Rc<Shard>,
    stream: &TcpStream,
    transport: &Transport,
    conn: ConnId,
    progress: &Signal,
    writer: &Signal,
) {
    let mut rb = ReadBuffer::new(
        shard.config.net.read_buffer_min,
        shard.config.net.read_buffer,
    );
    let pause_above = shard
        .config
        .net
        .write_high_water
        .saturating_mul(READ_PAUSE_FACTOR);
    loop {
        // A client that does not read what we send (returns, confirms, replies) is not
        // read either: its outbound buffer stays bounded.
        let full = |shard: &Shard| {
            shard.state.borrow().conn(conn).is_some_and(|c| {
                // A closing connection is read (and discarded) whatever it has
                // queued: its client must be able to finish writing and answer.
                c.out.queued_bytes() > pause_above
                    && !matches!(c.phase, Phase::Closing | Phase::Closed)
            })
        };
        if full(shard) {
            rb.release_if_empty();
            await_drain(shard, stream, conn, progress, &full).await;
        }
        let frame_max = shard.state.borrow().conn(conn).map_or(0, |c| c.frame_max);
        let n = match transport {
            Transport::Plain => {
                // tokio-uring reads at the start of the buffer it is given, so hand it the
                // spare capacity as a slice; the bytes already there (a partial frame)
                // stay intact.
                let buf = rb.take_for_read(frame_max);
                let (start, end) = (buf.len(), buf.capacity());
                let read = stream.read(buf.slice(start..end));
                let Some((res, returned)) = until_closed(shard, conn, read).await else {
                    return;
                };
                let n = match res {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                rb.put_back(returned.into_inner(), n, end - start);
                n
            }
            Transport::Tls(session) => {
                let read = session.read(stream, &mut rb, frame_max, writer);
                match until_closed(shard, conn, read).await.flatten() {
                    Some(n) => n,
                    None => return,
                }
            }
        };
        crate::shard::ShardCounters::add(&shard.counters.bytes_read, n);
        shard.clock.refresh();
        let current = phase(shard, conn);
        if !reading(current) {
            return;
        }
        if current == Some(Phase::AwaitHeader) {
            let buf = rb.bytes();
            if buf.len() < 8 {
                continue;
            }
            let header = buf.split_to(8);
            let check = shard
                .state
                .borrow_mut()
                .conn_side()
                .on_protocol_header(conn, &header);
            shard.flush();
            if check == HeaderCheck::Refused {
                return;
            }
        }
        if !process_frames(shard, stream, conn, &mut rb).await {
            return;
        }
        rb.settle();
    }
}

/// Handles every complete frame in `buf`. Returns false when the connection is done.
async fn process_frames(
    shard: &Rc<Shard>,
    stream: &TcpStream,
    conn: ConnId,
    rb: &mut ReadBuffer,
) -> bool {
    loop {
        let step = {
            let mut st = shard.state.borrow_mut();
            let frame_max = st.conn(conn).map_or(0, |c| c.frame_max);
            let mut step = Step::NeedMore;
            loop {
                match rb.next_frame(frame_max) {
                    Ok(Some(frame)) => match st.conn_side().on_frame(shard, conn, frame) {
                        AfterFrame::Continue => {
                            if st.conn(conn).is_some_and(|c| c.hold_requested) {
                                step = Step::Hold;
                                break;
                            }
                        }
                        AfterFrame::Stop => {
                            step = Step::Stop;
                            break;
                        }
                        AfterFrame::Await(p) => {
                            step = Step::Await(p);
                            break;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        // Framing is lost: close with 501 and read no further.
                        let err = ConnectionError::Frame(e.to_string());
                        st.conn_side()
                            .close_connection(shard, conn, &err.on(MethodId::NONE));
                        if let Some(c) = st.conn_mut(conn) {
                            c.phase = Phase::Closed;
                        }
                        step = Step::Stop;
                        break;
                    }
                }
            }
            step
        };
        end_of_batch(shard, conn).await;
        match step {
            Step::NeedMore => return reading(phase(shard, conn)),
            Step::Stop => return false,
            Step::Hold => {
                if !hold(shard, stream, conn).await {
                    return false;
                }
            }
            Step::Await(p) => {
                let resolved = pending::resolve(shard, conn, p.channel, p.op).await;
                shard.clock.refresh();
                shard
                    .state
                    .borrow_mut()
                    .conn_side()
                    .complete(shard, conn, p.channel, resolved);
                shard.flush();
            }
        }
    }
}

/// Finishes a batch of frames: dispatch, hand publishes to other shards (waiting for
/// room), then send the confirms that are ready.
async fn end_of_batch(shard: &Rc<Shard>, conn: ConnId) {
    shard.flush();
    let publishes = shard.take_publishes();
    if !publishes.is_empty() {
        set_paused(shard, conn, true);
        shard.send_publishes(publishes).await;
        set_paused(shard, conn, false);
    }
    shard.state.borrow_mut().conn_side().flush_confirms(conn);
    shard.flush();
}

/// Marks the connection as deliberately unread (its liveness is not judged meanwhile),
/// or as read again (the silence does not count against it).
fn set_paused(shard: &Shard, conn: ConnId, paused: bool) {
    let now = shard.clock.now();
    if let Some(c) = shard.state.borrow_mut().conn_mut(conn) {
        if paused {
            c.read_paused_since.get_or_insert(now);
        } else {
            c.read_paused_since = None;
            c.last_recv = now;
        }
    }
}

/// How often a held reader re-checks its connection (new unacked deliveries, the
/// enforcement timeout).
const HOLD_RECHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// Producer flow control enforcement: a channel went on publishing past its grace after
/// it was told to stop, so this connection is not read until it may publish again. A
/// connection that holds unacknowledged deliveries needs its acks read: after the
/// enforcement timeout the offending channels are closed and reading resumes. A peer
/// that goes away meanwhile is noticed without reading (returns false).
async fn hold(shard: &Rc<Shard>, stream: &TcpStream, conn: ConnId) -> bool {
    let timeout = shard.config.policies.flow.enforcement_timeout;
    set_paused(shard, conn, true);
    let mut unacked_since: Option<std::time::Instant> = None;
    loop {
        shard.clock.refresh();
        let now = shard.clock.now();
        let (wanted, unacked, resume) = {
            let st = shard.state.borrow();
            match st.conn(conn) {
                Some(c) if c.phase == Phase::Open => (
                    st.conns.hold_wanted(shard, conn),
                    c.holds_unacked(),
                    Rc::clone(&c.resume),
                ),
                _ => break,
            }
        };
        if !wanted {
            break;
        }
        if peer_gone(stream) {
            set_paused(shard, conn, false);
            return false;
        }
        if unacked {
            let since = *unacked_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= timeout {
                shard
                    .state
                    .borrow_mut()
                    .conn_side()
                    .enforce_flow_timeout(shard, conn);
                shard.flush();
                continue;
            }
        } else {
            unacked_since = None;
        }
        let _ = tokio::time::timeout(HOLD_RECHECK, resume.wait()).await;
    }
    let subject = {
        let mut st = shard.state.borrow_mut();
        st.conn_mut(conn).map(|c| {
            c.hold_requested = false;
            c.log_subject()
        })
    };
    set_paused(shard, conn, false);
    if let Some(subject) = subject {
        crate::ops::event::OpsEvent::ReadingResumed { subject }.emit();
    }
    true
}

/// Runs a read of the socket until it completes, or gives it up (`None`) once the
/// shard closed the connection meanwhile (a missed-heartbeat close, the close timeout):
/// a frozen peer sends nothing, and its read must not keep the connection alive. The
/// connection's `resume` signal is raised when it closes; other wake-ups (flow release)
/// are passed on.
async fn until_closed<T>(
    shard: &Shard,
    conn: ConnId,
    read: impl std::future::Future<Output = T>,
) -> Option<T> {
    let resume = shard
        .state
        .borrow()
        .conn(conn)
        .map(|c| Rc::clone(&c.resume))?;
    let mut read = std::pin::pin!(read);
    let mut woken = false;
    let out = loop {
        tokio::select! {
            biased;
            out = &mut read => break Some(out),
            () = resume.wait() => {
                woken = true;
                if matches!(phase(shard, conn), None | Some(Phase::Closed)) {
                    break None;
                }
            }
        }
    };
    if woken {
        resume.notify();
    }
    out
}

/// How often a reader paused for a full outbound buffer looks for signs of life.
const PAUSE_RECHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits, not reading, while the connection's outbound buffer is over the pause mark
/// because its peer does not read. This pause is the peer's doing, so it does not
/// exempt the connection from the missed-heartbeat check: the peer counts as alive
/// while the writer gets bytes onto the socket (its side takes them) or bytes arrive
/// for us to read later (heartbeats, acks). A frozen peer shows neither, and after two
/// heartbeat intervals the shard closes it.
async fn await_drain(
    shard: &Shard,
    stream: &TcpStream,
    conn: ConnId,
    progress: &Signal,
    full: &impl Fn(&Shard) -> bool,
) {
    let mut waiting = bytes_waiting(stream);
    while full(shard) {
        let alive = match tokio::time::timeout(PAUSE_RECHECK, progress.wait()).await {
            Ok(()) => true,
            Err(_) => {
                let now_waiting = bytes_waiting(stream);
                std::mem::replace(&mut waiting, now_waiting) != now_waiting
            }
        };
        if alive {
            shard.clock.refresh();
            let now = shard.clock.now();
            if let Some(c) = shard.state.borrow_mut().conn_mut(conn) {
                c.last_recv = now;
            }
        }
    }
}

/// Bytes the peer sent that are waiting in the socket's receive queue (0 if unknown).
fn bytes_waiting(stream: &TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int for an fd this task owns.
    let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        n
    } else {
        0
    }
}

/// Whether the peer closed or reset the socket, found without reading from it.
fn peer_gone(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for an fd this task owns; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

enum Step {
    NeedMore,
    Stop,
    Hold,
    Await(crate::shard::handler::Pending),
}
