//! Owns: the shard's side of parked readers — the set of their sockets ([`ParkSet`], an
//! epoll set of the shard's own that `net::park`'s task waits on), asking the readers of
//! idle connections to park (a sweep every half of `net.reader_park_after`, at least
//! [`PARK_SWEEP_MIN`] apart), keeping what
//! restarts a parked reader with its connection, and restarting it when its socket has
//! an event. How long a connection must be idle adapts to it ([`park_backoff_after`]):
//! a reader its peer restarts within 8 × `net.reader_park_after` of its last read
//! waits twice as long before the next park (at most three doublings), so a connection
//! that sends every second or so stops paying a park and a restart per message, while a
//! subscriber that never sends parks soon after it is set up (its set-up's memory then
//! goes at once, not seconds later).
//!
//! Does not: read sockets or start tasks (`net::park` and `net::reader` do; a restart is
//! their closure), or park a reader that has a partial frame, is held, paused or closing
//! (the reader checks its own buffer and declines).
//!
//! # Invariants
//! - A socket is in the set only while its connection's reader is parked: the reader
//!   adds it as its task ends, and whatever restarts the reader removes it first.
//! - Each socket is watched once (`EPOLLONESHOT`): one event restarts one reader.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::model::ids::ConnId;
use crate::session::connection::{Phase, RestartReader};

use super::Shard;

/// Events taken from the set per system call.
const EVENTS_PER_WAIT: usize = 256;

/// The most doublings of a connection's wait before parking: 8 × `net.reader_park_after`.
pub const PARK_BACKOFF_MAX: u8 = 3;

/// The sweep's shortest period: it reads every connection of the shard that is not
/// parked, so it does not run more often than this however short the wait.
pub const PARK_SWEEP_MIN: Duration = Duration::from_millis(250);

/// A connection's doublings of `base` before its reader may park next, after it was
/// restarted by its socket having been idle for `idle` (from its last read before the
/// park to the restart): a park that ended within 8 × `base` of that read was not worth
/// its cost (a task, a registration, two `epoll_ctl`s) and doubles the wait; a longer
/// one halves it again.
pub fn park_backoff_after(backoff: u8, idle: Duration, base: Duration) -> u8 {
    if idle < base * (1 << PARK_BACKOFF_MAX) {
        (backoff + 1).min(PARK_BACKOFF_MAX)
    } else {
        backoff.saturating_sub(1)
    }
}

/// What wakes a parked reader: bytes, the peer's half-close, hang-up or error (the last
/// two are always reported).
const WATCHED: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT) as u32;

/// The shard's epoll set of parked sockets.
pub struct ParkSet {
    /// `None` when the kernel refused one: readers then never park.
    epoll: Option<OwnedFd>,
    parked: Cell<usize>,
    /// Parks since the shard started (`sluice_shard_reader_parks`: its rate is what
    /// parking costs).
    parks: Cell<u64>,
    /// `net::park`'s task waits on the set: without it no event would restart a parked
    /// reader, so no reader may park.
    watched: Cell<bool>,
}

impl ParkSet {
    pub fn new() -> ParkSet {
        // SAFETY: no pointers; a negative result is an error.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        let epoll = (fd >= 0).then(|| {
            // SAFETY: a fresh descriptor that nothing else owns.
            unsafe { OwnedFd::from_raw_fd(fd) }
        });
        ParkSet {
            epoll,
            parked: Cell::new(0),
            parks: Cell::new(0),
            watched: Cell::new(false),
        }
    }

    /// Whether readers may park (the set exists and `net::park`'s task waits on it).
    pub fn available(&self) -> bool {
        self.epoll.is_some() && self.watched.get()
    }

    /// Whether a task waits on the set (`net::park` says so when it starts and ends).
    pub fn set_watched(&self, watched: bool) {
        self.watched.set(watched);
    }

    /// Readers parked now.
    pub fn parked(&self) -> usize {
        self.parked.get()
    }

    /// Parks since the shard started.
    pub fn parks(&self) -> u64 {
        self.parks.get()
    }

    /// Watches `socket` of `conn` until its first event.
    pub fn watch(&self, socket: RawFd, conn: ConnId) -> io::Result<()> {
        let Some(epoll) = &self.epoll else {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        };
        let mut event = libc::epoll_event {
            events: WATCHED,
            u64: conn_key(conn),
        };
        // SAFETY: both descriptors are open; the event is read during the call only.
        let rc =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, socket, &mut event) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.parked.set(self.parked.get() + 1);
        self.parks.set(self.parks.get() + 1);
        Ok(())
    }

    /// The set's descriptor (`None` without one), for the task that waits on it.
    pub fn fd(&self) -> Option<RawFd> {
        self.epoll.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Appends the connections whose sockets have an event, without waiting; true when
    /// there may be more than were taken.
    pub fn take_ready(&self, into: &mut Vec<ConnId>) -> io::Result<bool> {
        let Some(epoll) = &self.epoll else {
            return Ok(false);
        };
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        // SAFETY: `events` has room for `EVENTS_PER_WAIT` entries; a zero timeout never
        // blocks.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                EVENTS_PER_WAIT as i32,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        into.extend(events[..n].iter().map(|e| key_conn(e.u64)));
        Ok(n == EVENTS_PER_WAIT)
    }

    /// Stops watching `socket` (its reader is restarting).
    pub fn forget(&self, socket: RawFd) {
        let Some(epoll) = &self.epoll else {
            return;
        };
        let mut unused = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `watch`; a socket not in the set gives ENOENT, which changes
        // nothing.
        let rc =
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_DEL, socket, &mut unused) };
        if rc == 0 {
            self.parked.set(self.parked.get().saturating_sub(1));
        }
    }
}

impl Default for ParkSet {
    fn default() -> Self {
        ParkSet::new()
    }
}

fn conn_key(conn: ConnId) -> u64 {
    (u64::from(conn.generation) << 32) | u64::from(conn.slot)
}

fn key_conn(key: u64) -> ConnId {
    ConnId {
        slot: key as u32,
        generation: (key >> 32) as u32,
    }
}

impl Shard {
    /// Asks the reader of every open plain connection that has sent nothing for
    /// `net.reader_park_after` (doubled per step of its backoff, [`park_backoff_after`])
    /// to park at its wait for bytes (its resume signal wakes it). Called by the
    /// housekeeping loop; O(connections on the shard).
    pub fn ask_idle_readers_to_park(&self, now: Instant) {
        let Some(base) = self.config.net.reader_park_after else {
            return;
        };
        if !self.parked_readers.available() {
            return;
        }
        let mut st = self.state.borrow_mut();
        for c in st.conns.iter_mut() {
            // A parked reader is skipped on the first field read (most connections of a
            // shard of subscribers are parked).
            if c.is_reader_parked() {
                continue;
            }
            let idle_enough =
                now.saturating_duration_since(c.last_recv) >= base * (1 << c.park_backoff);
            if idle_enough
                && c.phase() == Phase::Open
                && c.socket.is_some()
                && !c.hold_requested
                && c.read_paused_since.is_none()
            {
                // Asked again at every sweep until it parks: a wake-up taken by another
                // wait of the reader is not lost for good.
                c.park_asked = true;
                c.signals.resume.notify();
            }
        }
    }

    /// Whether the connection's reader was asked to park (and the connection is still
    /// open).
    pub fn park_asked(&self, conn: ConnId) -> bool {
        self.state
            .borrow()
            .conn(conn)
            .is_some_and(|c| c.park_asked && c.phase() == Phase::Open)
    }

    /// The reader will not park now (it holds a partial frame, or its socket could not
    /// be watched): it goes on waiting in its task.
    pub fn decline_park(&self, conn: ConnId) {
        if let Some(c) = self.state.borrow_mut().conn_mut(conn) {
            c.park_asked = false;
        }
    }

    /// The reader's task is to end with `socket` watched by the park set, `restart`
    /// kept to start it again. False (`restart` dropped, the request to park cleared)
    /// when it may not: the connection is gone, was read or closed since it was asked,
    /// or the socket could not be watched; the reader then goes on in its task.
    pub fn park_reader(&self, conn: ConnId, socket: RawFd, restart: RestartReader) -> bool {
        let mut st = self.state.borrow_mut();
        let Some(c) = st.conn_mut(conn) else {
            return false;
        };
        let parked = c.park_asked
            && c.phase() == Phase::Open
            && self.parked_readers.watch(socket, conn).is_ok();
        if parked {
            c.reader_parked(restart);
        } else {
            c.park_asked = false;
        }
        parked
    }

    /// The parked reader's socket has an event (`net::park`): its task starts again. The
    /// peer's bytes (or its hang-up) count as a sign of life, so that the sweep does not
    /// ask the reader to park again before it has read them; how long the connection
    /// was idle sets how long it must be before its next park ([`park_backoff_after`]).
    /// An event for a connection that is gone, or whose reader restarted meanwhile, is
    /// ignored.
    pub fn restart_parked_reader(&self, conn: ConnId) {
        let now = self.clock.now();
        let base = self.config.net.reader_park_after.unwrap_or_default();
        let restart = self.state.borrow_mut().conn_mut(conn).and_then(|c| {
            let restart = c.take_parked_reader()?;
            let idle = now.saturating_duration_since(c.last_recv);
            c.park_backoff = park_backoff_after(c.park_backoff, idle, base);
            c.last_recv = now;
            Some(restart)
        });
        if let Some(restart) = restart {
            restart();
        }
    }

    /// Restarts every parked reader (the task that waits on the set ended: nothing else
    /// would).
    pub fn restart_every_parked_reader(&self) {
        let restarts: Vec<RestartReader> = self
            .state
            .borrow_mut()
            .conns
            .iter_mut()
            .filter_map(|c| c.take_parked_reader())
            .collect();
        for restart in restarts {
            restart();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// A connection's key carries its slot and generation both ways.
    #[test]
    fn a_connection_key_round_trips() {
        let conn = ConnId {
            slot: 70_001,
            generation: u32::MAX - 3,
        };
        assert_eq!(key_conn(conn_key(conn)), conn);
    }

    /// A park that ends within 8 × the base doubles the wait, up to 8 ×; a longer one
    /// halves it again.
    #[test]
    fn a_short_park_doubles_the_wait_and_a_long_one_halves_it() {
        let base = Duration::from_millis(250);
        let ms = Duration::from_millis;
        assert_eq!(park_backoff_after(0, ms(700), base), 1);
        assert_eq!(park_backoff_after(1, ms(1999), base), 2);
        assert_eq!(park_backoff_after(2, ms(900), base), 3);
        assert_eq!(park_backoff_after(3, ms(900), base), PARK_BACKOFF_MAX);
        assert_eq!(park_backoff_after(3, ms(2000), base), 2);
        assert_eq!(park_backoff_after(1, ms(60_000), base), 0);
        assert_eq!(park_backoff_after(0, ms(60_000), base), 0);
    }

    /// A watched socket reports once when it has bytes, and a forgotten one leaves the
    /// count; forgetting twice does not count twice.
    #[test]
    fn a_watched_socket_reports_once() {
        let set = ParkSet::new();
        assert!(!set.available(), "no task waits on it yet");
        set.set_watched(true);
        assert!(set.available());
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the pair.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) },
            0
        );
        // SAFETY: the pair is ours.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let conn = ConnId {
            slot: 3,
            generation: 9,
        };
        set.watch(a.as_raw_fd(), conn).unwrap();
        assert_eq!((set.parked(), set.parks()), (1, 1));
        let epoll = set.epoll.as_ref().unwrap().as_raw_fd();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let wait = |events: &mut [libc::epoll_event]| unsafe {
            libc::epoll_wait(epoll, events.as_mut_ptr(), events.len() as i32, 0)
        };
        assert_eq!(wait(&mut events), 0, "nothing to read yet");
        // SAFETY: writes one byte from a live buffer.
        assert_eq!(
            unsafe { libc::write(b.as_raw_fd(), b"x".as_ptr().cast(), 1) },
            1
        );
        assert_eq!(wait(&mut events), 1);
        let (got, key) = (events[0].events, events[0].u64);
        assert_eq!(key_conn(key), conn);
        assert_ne!(got & libc::EPOLLIN as u32, 0);
        assert_eq!(wait(&mut events), 0, "one shot");
        set.forget(a.as_raw_fd());
        set.forget(a.as_raw_fd());
        assert_eq!((set.parked(), set.parks()), (0, 1));
    }
}
