//! Owns: one thread's event loop — `epoll` over its listener, its connections and its
//! inbox's eventfd; reads (every connection's bytes through one read buffer per
//! thread, an incomplete frame carried by its connection); the stream of deliveries
//! (local publishes appended and handed to the other threads, theirs appended as they
//! arrive); and the rolling pass: each subscriber in turn is sent everything it has not
//! had in one `send` (or `sendmsg` across chunks), and every `read_every` subscribers
//! the loop looks for new publishes without waiting, so that the subscribers late in a
//! long pass get them in the same pass. A full socket waits for `EPOLLOUT`; one more
//! than `max_behind` bytes behind is disconnected (the only overload rule there is).
//! Does not: speak AMQP (`conn`) or encode (`wire`, `stream`).

use std::os::fd::RawFd;
use std::sync::Arc;

use crate::conn::{Conn, Outcome, Phase};
use crate::stream::{framed, Inbox, Stream};

/// epoll token of the listener.
const LISTENER: u64 = u64::MAX;
/// epoll token of this thread's inbox.
const WAKE: u64 = u64::MAX - 1;
/// Bytes read per `recv`.
const READ_BUF: usize = 256 * 1024;
/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;
/// Iovecs per `sendmsg`.
const IOVECS: usize = 16;

/// The settings of every thread.
#[derive(Clone, Copy)]
pub struct Settings {
    /// Subscribers sent to between two looks for new publishes during a pass.
    pub read_every: usize,
    /// Bytes a subscriber may fall behind before it is disconnected.
    pub max_behind: u64,
}

/// One thread's loop.
pub struct EventLoop {
    ep: RawFd,
    listener: RawFd,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Subscribers in pass order (entries of closed or cancelled ones until `reap`).
    subs: Vec<usize>,
    /// Slots of closed connections, free after `reap`.
    closed: Vec<usize>,
    /// Some subscriber stopped: `reap` must filter `subs`.
    subs_dirty: bool,
    stream: Stream,
    /// Every subscriber not blocked has been sent the stream up to here.
    served: u64,
    inbox: Arc<Inbox>,
    peers: Vec<Arc<Inbox>>,
    /// Publishes completed in this turn, framed, not yet appended.
    done: Vec<u8>,
    incoming: Vec<u8>,
    read_buf: Vec<u8>,
    events: Vec<libc::epoll_event>,
    settings: Settings,
}

fn os_err(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn ctl(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: a valid epoll descriptor and a pointer to a live event.
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } != 0 {
        return Err(os_err("epoll_ctl"));
    }
    Ok(())
}

impl EventLoop {
    pub fn new(
        listener: RawFd,
        inbox: Arc<Inbox>,
        peers: Vec<Arc<Inbox>>,
        settings: Settings,
    ) -> std::io::Result<EventLoop> {
        // SAFETY: epoll_create1 with a valid flag.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(os_err("epoll_create1"));
        }
        ctl(
            ep,
            libc::EPOLL_CTL_ADD,
            listener,
            libc::EPOLLIN as u32,
            LISTENER,
        )?;
        ctl(
            ep,
            libc::EPOLL_CTL_ADD,
            inbox.eventfd,
            libc::EPOLLIN as u32,
            WAKE,
        )?;
        Ok(EventLoop {
            ep,
            listener,
            conns: Vec::new(),
            free: Vec::new(),
            subs: Vec::new(),
            closed: Vec::new(),
            subs_dirty: false,
            stream: Stream::new(),
            served: 0,
            inbox,
            peers,
            done: Vec::new(),
            incoming: Vec::new(),
            read_buf: vec![0; READ_BUF],
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
            settings,
        })
    }

    /// Serves until the process ends.
    pub fn run(mut self) -> ! {
        loop {
            let behind = self.stream.end() > self.served;
            self.poll(if behind { 0 } else { -1 });
            if self.stream.end() > self.served {
                self.pass();
            }
            self.reap();
        }
    }

    /// Waits up to `timeout_ms` for events and handles them; appends the publishes
    /// they completed (and hands them to the other threads).
    fn poll(&mut self, timeout_ms: i32) {
        // SAFETY: the events buffer has EVENTS live entries.
        let n = unsafe {
            libc::epoll_wait(
                self.ep,
                self.events.as_mut_ptr(),
                EVENTS as libc::c_int,
                timeout_ms,
            )
        };
        for i in 0..n.max(0) as usize {
            let ev = self.events[i];
            match ev.u64 {
                LISTENER => self.accept_all(),
                WAKE => {
                    self.inbox.take(&mut self.incoming);
                    for d in framed(&self.incoming) {
                        self.stream.append(d);
                    }
                    self.incoming.clear();
                }
                id => self.on_event(id as usize, ev.events),
            }
        }
        if !self.done.is_empty() {
            for d in framed(&self.done) {
                self.stream.append(d);
            }
            for p in &self.peers {
                p.push(&self.done);
            }
            self.done.clear();
        }
    }

    fn accept_all(&mut self) {
        loop {
            // SAFETY: accept4 on our listener; peer address not wanted.
            let fd = unsafe {
                libc::accept4(
                    self.listener,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                return;
            }
            let one: libc::c_int = 1;
            // SAFETY: setsockopt on the socket just accepted, with a live int.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            let id = match self.free.pop() {
                Some(id) => id,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if ctl(
                self.ep,
                libc::EPOLL_CTL_ADD,
                fd,
                libc::EPOLLIN as u32,
                id as u64,
            )
            .is_err()
            {
                // SAFETY: closing the descriptor we just accepted.
                unsafe { libc::close(fd) };
                self.free.push(id);
                continue;
            }
            self.conns[id] = Some(Conn::new(fd));
        }
    }

    fn on_event(&mut self, id: usize, events: u32) {
        if self.conns.get(id).is_none_or(Option::is_none) {
            return;
        }
        if events & libc::EPOLLOUT as u32 != 0 {
            self.unblock(id);
        }
        if events & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
            self.read(id);
        }
    }

    fn read(&mut self, id: usize) {
        let Some(c) = self.conns[id].as_mut() else {
            return;
        };
        let have = c.carry.len();
        if have + 4096 > self.read_buf.len() {
            self.read_buf.resize(have + READ_BUF, 0);
        }
        self.read_buf[..have].copy_from_slice(&c.carry);
        let room = &mut self.read_buf[have..];
        // SAFETY: recv into the live tail of the read buffer.
        let n = unsafe { libc::recv(c.fd, room.as_mut_ptr().cast(), room.len(), 0) };
        if n == 0 {
            return self.close(id);
        }
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                self.close(id);
            }
            return;
        }
        let end = have + n as usize;
        let mut outcome = Outcome::default();
        let used = if c.phase == Phase::Closing {
            end
        } else {
            c.handle(&self.read_buf[..end], &mut self.done, &mut outcome)
        };
        c.carry.clear();
        c.carry.extend_from_slice(&self.read_buf[used..end]);
        if outcome.consumed {
            c.consuming = true;
            c.pos = self.stream.end();
            self.subs.push(id);
        }
        if outcome.stopped {
            c.consuming = false;
            self.subs_dirty = true;
        }
        self.flush_replies(id);
    }

    /// Writes the replies a connection owes; closes it once a closing one has none.
    fn flush_replies(&mut self, id: usize) {
        let Some(c) = self.conns[id].as_mut() else {
            return;
        };
        if !c.out.is_empty() && !c.blocked {
            // SAFETY: send from the live reply buffer.
            let n = unsafe {
                libc::send(
                    c.fd,
                    c.out.as_ptr().cast(),
                    c.out.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                c.out.drain(..n as usize);
            } else if n < 0
                && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock
            {
                return self.close(id);
            }
            if !c.out.is_empty() {
                return self.block(id);
            }
        }
        if c.out.is_empty() && c.phase == Phase::Closing {
            self.close(id);
        }
    }

    fn block(&mut self, id: usize) {
        let Some(c) = self.conns[id].as_mut() else {
            return;
        };
        if !c.blocked {
            c.blocked = true;
            let ev = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
            if ctl(self.ep, libc::EPOLL_CTL_MOD, c.fd, ev, id as u64).is_err() {
                self.close(id);
            }
        }
    }

    fn unblock(&mut self, id: usize) {
        let Some(c) = self.conns[id].as_mut() else {
            return;
        };
        if c.blocked {
            c.blocked = false;
            if ctl(
                self.ep,
                libc::EPOLL_CTL_MOD,
                c.fd,
                libc::EPOLLIN as u32,
                id as u64,
            )
            .is_err()
            {
                return self.close(id);
            }
        }
        self.flush_replies(id);
        self.send_stream(id);
    }

    /// Sends a subscriber everything it has not had (one system call unless the
    /// range needs more than `IOVECS` pieces).
    fn send_stream(&mut self, id: usize) {
        let Some(c) = self.conns[id].as_mut() else {
            return;
        };
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; IOVECS];
        while c.consuming && !c.blocked && c.out.is_empty() && c.pos < self.stream.end() {
            if self.stream.end() - c.pos > self.settings.max_behind {
                eprintln!(
                    "minimal-fanout: a subscriber fell {} bytes behind: disconnected",
                    self.stream.end() - c.pos
                );
                return self.close(id);
            }
            let n = self.stream.iovecs(c.pos, &mut iov);
            let want: usize = iov[..n].iter().map(|v| v.iov_len).sum();
            // SAFETY: the iovecs point into the stream's live chunks.
            let sent = unsafe {
                if n == 1 {
                    libc::send(
                        c.fd,
                        iov[0].iov_base,
                        iov[0].iov_len,
                        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                    )
                } else {
                    let mut msg: libc::msghdr = std::mem::zeroed();
                    msg.msg_iov = iov.as_mut_ptr();
                    msg.msg_iovlen = n;
                    libc::sendmsg(c.fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
                }
            };
            if sent < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
                    return self.block(id);
                }
                return self.close(id);
            }
            c.pos += sent as u64;
            if (sent as usize) < want {
                return self.block(id);
            }
        }
    }

    /// One rolling pass over the subscribers; new publishes are read every
    /// `read_every` of them, so those later in the pass get them too.
    fn pass(&mut self) {
        let start_end = self.stream.end();
        let mut oldest = self.stream.end();
        let mut i = 0;
        let mut since_read = 0;
        while i < self.subs.len() {
            let id = self.subs[i];
            i += 1;
            self.send_stream(id);
            if let Some(c) = self.conns[id].as_ref().filter(|c| c.consuming) {
                oldest = oldest.min(c.pos);
            }
            since_read += 1;
            if since_read == self.settings.read_every {
                since_read = 0;
                self.poll(0);
            }
        }
        self.served = start_end;
        self.stream.trim(oldest.max(self.stream.base()));
    }

    fn close(&mut self, id: usize) {
        if let Some(c) = self.conns[id].take() {
            // SAFETY: closing a descriptor this connection owned (epoll forgets it).
            unsafe { libc::close(c.fd) };
            if c.consuming {
                self.subs_dirty = true;
            }
            self.closed.push(id);
        }
    }

    /// Drops closed and cancelled subscribers from the pass and frees closed slots.
    fn reap(&mut self) {
        if self.subs_dirty {
            let conns = &self.conns;
            self.subs
                .retain(|&id| conns[id].as_ref().is_some_and(|c| c.consuming));
            self.subs_dirty = false;
        }
        self.free.append(&mut self.closed);
    }
}
