//! Owns: one connection's reader task — opening the connection and giving it what starts
//! its writer task when first needed, waiting until a plain socket has bytes (readiness
//! from the runtime's epoll driver, so no read buffer is posted meanwhile: an idle
//! connection holds none) and reading them without waiting, the owned read buffer (given
//! back between reads while the connection needs no more than the smallest), the
//! protocol-header check,
//! frame splitting (zero copy: frame payloads are slices of the buffer), handing frames to
//! the shard's handler, awaiting operations that need another shard, pausing while this
//! connection's publishes wait for room at another shard, and holding (not reading) a
//! connection that goes on publishing after flow control stopped it. After close-ok to
//! the client's `connection.close` it leaves the socket for the client to close (reading
//! and discarding) until the close timeout shuts it. When the socket ends, it releases
//! the connection. Asked to park (an idle plain connection, `shard::reader_park`) while
//! it waits for bytes with nothing half-read, it ends its task and leaves the socket to
//! the shard's park set (`net::park`), keeping with the connection what starts it again.
//!
//! Does not: interpret methods, or read while an earlier read is in flight.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio_uring::buf::BoundedBuf;
use tokio_uring::net::TcpStream;

use super::read_buf::ReadBuffer;
use super::Transport;
use crate::model::ids::ConnId;
use crate::session::connection::Phase;
use crate::session::signal::{ConnSignals, Signal};
use crate::shard::conns::handler::HeaderCheck;
use crate::shard::turn::{AfterReading, ConnIo, Step};
use crate::shard::Shard;

/// How long a closed connection's writer may take to flush its last frames before the
/// socket is shut under it (a write to a peer that never reads again does not complete:
/// it must not keep the connection, its unacked deliveries and its exclusive queues).
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The reader pauses while the connection's outbound buffer holds more than this many
/// times `write_high_water` (deliveries stop at 1x; replies and returns could go on).
const READ_PAUSE_FACTOR: usize = 4;

/// Serves one accepted plain connection until it closes: opens the connection now and
/// returns the reader task's future.
pub fn serve(shard: Rc<Shard>, stream: TcpStream, peer: SocketAddr) -> impl Future<Output = ()> {
    let accepted = shard.clock.now();
    serve_transport(shard, stream, peer, accepted, Transport::Plain, None)
}

/// What a connection's reader task holds for its whole life. The task's future is this
/// and the read loop's wait for bytes: everything rarer (a read through io_uring or TLS,
/// frame processing, a hold, the wind-down) is boxed while it runs, so that the task each
/// of 10,000 idle subscribers keeps stays small (issue 23).
struct ConnTask {
    shard: Rc<Shard>,
    stream: Rc<TcpStream>,
    transport: Transport,
    conn: ConnId,
    /// The writer's (the TLS read path has records to send), progress (bytes reached
    /// the socket), writer-done and resume signals.
    signals: Rc<ConnSignals>,
}

/// Serves one connection (plain, or TLS after its handshake) until it closes: opens the
/// connection now and returns the reader task's future. The handshake deadline counts
/// from `accepted`, so a TLS handshake's time counts against it too.
pub fn serve_transport(
    shard: Rc<Shard>,
    stream: TcpStream,
    peer: SocketAddr,
    accepted: std::time::Instant,
    transport: Transport,
    tls_peer: Option<crate::session::connection::TlsPeer>,
) -> impl Future<Output = ()> {
    let stream = Rc::new(stream);
    let signals = Rc::new(ConnSignals::default());
    let local = local_addr(&stream);
    let socket = match transport {
        Transport::Plain => Some(std::os::fd::AsRawFd::as_raw_fd(&*stream)),
        Transport::Tls(_) => None,
    };
    // The writer task is started the first time the shard wakes it (a full socket, TLS,
    // closing): most plain connections are written by the shard's write pass only.
    let start_writer = {
        let shard = Rc::downgrade(&shard);
        let stream = Rc::clone(&stream);
        let transport = transport.clone();
        let signals = Rc::clone(&signals);
        Box::new(move |conn: ConnId| {
            if let Some(shard) = shard.upgrade() {
                tokio_uring::spawn(super::writer::run(shard, stream, transport, conn, signals));
            }
        })
    };
    let io = ConnIo {
        socket,
        signals: Rc::clone(&signals),
        start_writer,
    };
    let conn = shard.open_connection(peer, local, accepted, tls_peer, io);
    let task = ConnTask {
        shard,
        stream,
        transport,
        conn,
        signals,
    };
    run(task)
}

/// Runs a connection's reader task: reads until the connection ends (then winds it down
/// and releases it), or until it parks (`net::park`): the task then ends, and what its
/// socket's next event (or the connection's close) starts again is this with the same
/// handles.
// An async function would keep the task twice in its future (see the body).
#[allow(clippy::manual_async_fn)]
fn run(task: ConnTask) -> impl Future<Output = ()> {
    // An async block, not an async function, and not a loop that moves the task in and
    // out: either would keep a second copy of the task in the future (issue 23).
    async move {
        while read_loop(&task).await == Ended::Park {
            if park(&task) {
                return;
            }
        }
        let conn = task.conn;
        Box::pin(wind_down(
            &task.shard,
            &task.stream,
            conn,
            &task.signals.writer_done,
        ))
        .await;
        task.shard.release_connection(conn);
    }
}

/// Leaves the socket to the shard's park set, keeping with the connection what restarts
/// the reader task (the task's handles; the shard held weakly: a connection must not keep
/// its shard alive); the caller's task then ends. False when the reader cannot park
/// (`Shard::park_reader`): it goes on reading.
fn park(task: &ConnTask) -> bool {
    let socket = std::os::fd::AsRawFd::as_raw_fd(&*task.stream);
    let parked = ParkedTask {
        shard: Rc::downgrade(&task.shard),
        stream: Rc::clone(&task.stream),
        conn: task.conn,
        signals: Rc::clone(&task.signals),
    };
    task.shard
        .park_reader(task.conn, socket, Box::new(move || parked.restart()))
}

/// A parked plain connection's reader task, without its task: what it needs to start
/// again.
struct ParkedTask {
    shard: std::rc::Weak<Shard>,
    stream: Rc<TcpStream>,
    conn: ConnId,
    signals: Rc<ConnSignals>,
}

impl ParkedTask {
    /// Stops watching the socket and starts the reader task again (gone with the shard,
    /// it is dropped).
    fn restart(self) {
        let Some(shard) = self.shard.upgrade() else {
            return;
        };
        shard
            .parked_readers
            .forget(std::os::fd::AsRawFd::as_raw_fd(&*self.stream));
        tokio_uring::spawn(run(ConnTask {
            shard,
            stream: self.stream,
            transport: Transport::Plain,
            conn: self.conn,
            signals: self.signals,
        }));
    }
}

/// After the last read: lets a client that has its close-ok close the socket itself, and
/// the writer flush the last frames of a connection the broker closed (bounded).
async fn wind_down(shard: &Rc<Shard>, stream: &Rc<TcpStream>, conn: ConnId, writer_done: &Signal) {
    let mut next = shard.after_reading(conn);
    if next == AfterReading::Linger {
        // The client has its close-ok and closes the socket itself; otherwise the close
        // timeout or broker shutdown cuts it off, which ends the read here. Both wait in
        // this task (not a task of their own: ten thousand clients closing together
        // linger together, issue 23); the read is never dropped while in flight.
        let lingering = linger(stream);
        tokio::pin!(lingering);
        tokio::select! {
            biased;
            () = &mut lingering => {}
            () = cut_off_when_closed(shard, stream, conn) => lingering.await,
        }
        next = shard.linger_over(conn);
    }
    if next == AfterReading::Drain {
        // Let the writer flush the last frames (close-ok, connection.close, the protocol
        // header answer) before the connection is forgotten; a peer that does not read
        // gets a bounded grace period, then its socket is shut, which ends the write.
        if tokio::time::timeout(CLOSE_GRACE, writer_done.wait())
            .await
            .is_err()
        {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            let _ = tokio::time::timeout(CLOSE_GRACE, writer_done.wait()).await;
        }
    }
}

/// The broker's side of an accepted socket (`getsockname`), as a client of a dual-stack
/// listener sees it (an IPv4 address, not its IPv6 mapping); `None` if it cannot be read.
fn local_addr(stream: &TcpStream) -> Option<SocketAddr> {
    use std::os::fd::{AsRawFd, BorrowedFd};
    // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    let local = socket2::SockRef::from(&fd).local_addr().ok()?.as_socket()?;
    Some(SocketAddr::new(local.ip().to_canonical(), local.port()))
}

/// While a connection lingers after close-ok, shuts its socket as soon as the
/// connection is `Closed` (close timeout, broker shutdown, the peer gone). The writer
/// would shut it too, but not while it is stuck writing to a peer that neither reads nor
/// closes; shutting the socket ends that write and the pending linger read.
async fn cut_off_when_closed(shard: &Shard, stream: &TcpStream, conn: ConnId) {
    loop {
        if shard.phase(conn) != Some(Phase::Lingering) {
            break;
        }
        let Some(signals) = shard.resume_signal(conn) else {
            break;
        };
        signals.resume.wait().await;
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Bytes read at a time while lingering; they are discarded (few: ten thousand clients
/// closing together linger together).
const LINGER_READ: usize = 64;

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

/// Whether the reader should pause: the connection's outbound buffer holds more than
/// [`READ_PAUSE_FACTOR`] × `write_high_water` (a client that does not read what we send —
/// returns, confirms, replies — is not read either, so its outbound buffer stays
/// bounded). A closing connection is read (and discarded) whatever it has queued: its
/// client must be able to finish writing and answer.
fn outbound_full(shard: &Shard, conn: ConnId) -> bool {
    let pause_above = shard
        .config
        .net
        .write_high_water
        .saturating_mul(READ_PAUSE_FACTOR);
    shard.reader_view(conn).is_some_and(|v| {
        v.queued_bytes > pause_above && !matches!(v.phase, Phase::Closing | Phase::Closed)
    })
}

/// Why the read loop returned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The connection is done with reading (closed, the peer gone, framing lost).
    Closed,
    /// The shard asked the idle reader to park, and it holds no partial frame.
    Park,
}

/// The read loop. It keeps little across its waits (the task, the read buffer, the
/// readiness registration and the wait itself): every idle connection's task holds it
/// (issue 23), so fields of the task are reached through `task` rather than copied out.
async fn read_loop(task: &ConnTask) -> Ended {
    let conn = task.conn;
    let mut rb = ReadBuffer::new(
        task.shard.config.net.read_buffer_min,
        task.shard.config.net.read_buffer,
    );
    // A plain socket is read when it has bytes (readiness from the runtime's epoll), so
    // no read buffer is posted while it has none: an idle connection holds no buffer.
    // Without a registration (refused by the kernel) it is read through io_uring.
    let readiness = match task.transport {
        // SAFETY: the descriptor is the stream's, which the caller keeps open (and the
        // same) until after this loop, which owns the registration, has returned.
        Transport::Plain => unsafe {
            AsyncFd::register_with_interest(
                SocketFd(std::os::fd::AsRawFd::as_raw_fd(&*task.stream)),
                Interest::READABLE,
            )
        }
        .ok(),
        Transport::Tls(_) => None,
    };
    loop {
        if outbound_full(&task.shard, conn) {
            rb.release_if_empty();
            // Rare paths are boxed: the task of every connection is only as large as
            // its common path (issue 23).
            Box::pin(await_drain(
                &task.shard,
                &task.stream,
                conn,
                &task.signals.progress,
            ))
            .await;
        }
        let frame_max = task.shard.reader_view(conn).map_or(0, |v| v.frame_max);
        let mut more = false;
        let n = match (&task.transport, &readiness) {
            (Transport::Plain, Some(socket)) => {
                let Some(wait) = ReadableUntilClosed::new(&task.shard, conn, socket) else {
                    return Ended::Closed;
                };
                let mut ready = match wait.await {
                    Wait::Readable(Ok(ready)) => ready,
                    Wait::Readable(Err(_)) | Wait::Closed => return Ended::Closed,
                    // Only with nothing half-read: a partial frame stays in its task.
                    Wait::Park if rb.is_empty() => return Ended::Park,
                    Wait::Park => {
                        task.shard.decline_park(conn);
                        continue;
                    }
                };
                let mut buf = rb.take_for_read(frame_max);
                let offered = buf.capacity() - buf.len();
                let got = recv_into(socket.get_ref().0, &mut buf);
                rb.put_back(buf, *got.as_ref().unwrap_or(&0), offered);
                match got {
                    Ok(0) => return Ended::Closed,
                    Ok(n) => {
                        // A short read emptied the socket: wait for its next bytes. After
                        // a full one the socket may have more at once, and waiting for
                        // readiness would not yield: `more` lets the loop run first.
                        if n < offered {
                            ready.clear_ready();
                        } else {
                            more = true;
                        }
                        n
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        ready.clear_ready();
                        rb.release_if_idle();
                        continue;
                    }
                    // A signal during the call: the socket is fine, read again.
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => return Ended::Closed,
                }
            }
            (Transport::Plain, None) => {
                // tokio-uring reads at the start of the buffer it is given, so hand it the
                // spare capacity as a slice; the bytes already there (a partial frame)
                // stay intact.
                let buf = rb.take_for_read(frame_max);
                let (start, end) = (buf.len(), buf.capacity());
                // Boxed: the fallback when the socket could not be registered.
                let read = Box::pin(task.stream.read(buf.slice(start..end)));
                let Some((res, returned)) = Box::pin(until_closed(&task.shard, conn, read)).await
                else {
                    return Ended::Closed;
                };
                let n = match res {
                    Ok(0) | Err(_) => return Ended::Closed,
                    Ok(n) => n,
                };
                rb.put_back(returned.into_inner(), n, end - start);
                n
            }
            (Transport::Tls(session), _) => {
                let read =
                    Box::pin(session.read(&task.stream, &mut rb, frame_max, &task.signals.writer));
                match Box::pin(until_closed(&task.shard, conn, read))
                    .await
                    .flatten()
                {
                    Some(n) => n,
                    None => return Ended::Closed,
                }
            }
        };
        let shard = &task.shard;
        crate::shard::ShardCounters::add(&shard.counters.bytes_read, n);
        shard.clock.refresh();
        if !shard.received(conn, n) {
            return Ended::Closed;
        }
        if shard.phase(conn) == Some(Phase::AwaitHeader) {
            let buf = rb.bytes();
            if buf.len() < 8 {
                continue;
            }
            let header = buf.split_to(8);
            if shard.protocol_header(conn, &header) == HeaderCheck::Refused {
                return Ended::Closed;
            }
        }
        // Boxed while it runs: the task every connection keeps is then only as large as
        // its wait for bytes (issue 23).
        if !Box::pin(process_frames(&task.shard, &task.stream, conn, &mut rb)).await {
            return Ended::Closed;
        }
        rb.settle();
        if readiness.is_some() {
            rb.release_if_idle();
        }
        if more {
            // A busy publisher must not keep the shard from its other tasks (the write
            // pass, writers, the mailbox): an io_uring no-op makes the runtime park, submit
            // and complete I/O before this reader reads again, as an io_uring read did.
            let _ = tokio_uring::no_op().await;
        }
    }
}

/// A connection's socket as the runtime's readiness registration sees it (the stream
/// owns it and closes it; the registration ends first, with the read loop).
struct SocketFd(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for SocketFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Reads what the socket has into the spare capacity of `buf`, without waiting.
fn recv_into(socket: std::os::fd::RawFd, buf: &mut bytes::BytesMut) -> std::io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: the kernel writes at most `spare.len()` bytes into the spare capacity,
    // which stays allocated for the call; only the bytes it reports are then exposed.
    let n = unsafe {
        libc::recv(
            socket,
            spare.as_mut_ptr().cast(),
            spare.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = n as usize;
    // SAFETY: the kernel initialised `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Hands every complete frame in the buffer to the shard. Returns false when the
/// connection is done.
async fn process_frames(
    shard: &Rc<Shard>,
    stream: &TcpStream,
    conn: ConnId,
    rb: &mut ReadBuffer,
) -> bool {
    loop {
        let step = shard.frames(conn, |frame_max| rb.next_frame(frame_max));
        shard.end_of_batch(conn).await;
        match step {
            Step::NeedMore => return shard.reading(conn),
            Step::Stop => return false,
            Step::Hold => {
                if !Box::pin(hold(shard, stream, conn)).await {
                    return false;
                }
            }
            Step::Await(p) => Box::pin(shard.resolve_and_complete(conn, p)).await,
            Step::Yield => tokio::task::yield_now().await,
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
    shard.set_read_paused(conn, true);
    let mut unacked_since: Option<std::time::Instant> = None;
    loop {
        shard.clock.refresh();
        let now = shard.clock.now();
        let Some((wanted, unacked)) = shard.hold_state(conn) else {
            break;
        };
        let Some(signals) = shard.resume_signal(conn) else {
            break;
        };
        if !wanted {
            break;
        }
        if peer_gone(stream) {
            shard.set_read_paused(conn, false);
            return false;
        }
        if unacked {
            let since = *unacked_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= timeout {
                shard.enforce_flow_timeout(conn);
                continue;
            }
        } else {
            unacked_since = None;
        }
        let _ = tokio::time::timeout(HOLD_RECHECK, signals.resume.wait()).await;
    }
    if let Some(subject) = shard.end_hold(conn) {
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
    let signals = shard.resume_signal(conn)?;
    let resume = &signals.resume;
    let mut read = std::pin::pin!(read);
    let mut woken = false;
    let out = loop {
        tokio::select! {
            biased;
            out = &mut read => break Some(out),
            () = resume.wait() => {
                woken = true;
                if matches!(shard.phase(conn), None | Some(Phase::Closed)) {
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

/// Waits until the socket has bytes, as [`until_closed`] waits for a read: `Closed`
/// once the shard closed the connection meanwhile, `Park` when it asked the reader to
/// park. A future of its own (the readiness poll,
/// then the connection's resume signal) rather than a `select!` of two futures or an
/// async function around a poll function: every idle connection's task keeps this wait,
/// so it holds only what it needs (40 bytes; issue 23).
struct ReadableUntilClosed<'a> {
    shard: &'a Shard,
    socket: &'a AsyncFd<SocketFd>,
    signals: Rc<ConnSignals>,
    conn: ConnId,
    /// The resume signal fired while waiting: it is passed on once the wait ends.
    woken: bool,
}

impl<'a> ReadableUntilClosed<'a> {
    /// `None` when the connection is gone already.
    fn new(shard: &'a Shard, conn: ConnId, socket: &'a AsyncFd<SocketFd>) -> Option<Self> {
        Some(ReadableUntilClosed {
            shard,
            socket,
            signals: shard.resume_signal(conn)?,
            conn,
            woken: false,
        })
    }

    fn finish<T>(&mut self, out: T) -> std::task::Poll<T> {
        if std::mem::take(&mut self.woken) {
            self.signals.resume.notify();
        }
        std::task::Poll::Ready(out)
    }
}

/// How a wait for bytes ended.
enum Wait<'a> {
    Readable(std::io::Result<tokio::io::unix::AsyncFdReadyGuard<'a, SocketFd>>),
    /// The shard closed the connection meanwhile.
    Closed,
    /// The shard asked the idle reader to park.
    Park,
}

impl<'a> std::future::Future for ReadableUntilClosed<'a> {
    type Output = Wait<'a>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        let socket: &'a AsyncFd<SocketFd> = this.socket;
        if let std::task::Poll::Ready(ready) = socket.poll_read_ready(cx) {
            return this.finish(Wait::Readable(ready));
        }
        while this.signals.resume.poll_wait(cx).is_ready() {
            this.woken = true;
            if matches!(this.shard.phase(this.conn), None | Some(Phase::Closed)) {
                return this.finish(Wait::Closed);
            }
            if this.shard.park_asked(this.conn) {
                return this.finish(Wait::Park);
            }
        }
        std::task::Poll::Pending
    }
}

/// How often a reader paused for a full outbound buffer looks for signs of life.
const PAUSE_RECHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits, not reading, while the connection's outbound buffer is over the pause mark
/// because its peer does not read. This pause is the peer's doing, so it does not
/// exempt the connection from the missed-heartbeat check: the peer counts as alive
/// while the writer gets bytes onto the socket (its side takes them) or bytes arrive
/// for us to read later (heartbeats, acks). A frozen peer shows neither, and after two
/// heartbeat intervals the shard closes it.
async fn await_drain(shard: &Shard, stream: &TcpStream, conn: ConnId, progress: &Signal) {
    let mut waiting = bytes_waiting(stream);
    while outbound_full(shard, conn) {
        let alive = match tokio::time::timeout(PAUSE_RECHECK, progress.wait()).await {
            Ok(()) => true,
            Err(_) => {
                let now_waiting = bytes_waiting(stream);
                std::mem::replace(&mut waiting, now_waiting) != now_waiting
            }
        };
        if alive {
            shard.peer_alive(conn);
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
