//! Owns: what one management connection may hold — the cap on open connections
//! ([`Slots`]: over `http.max_connections` a socket is closed as it is accepted, logged
//! as CON-1017, rate-limited), the header-read timeout (hyper's, with tokio's timer), and
//! the idle timeout ([`Activity`] and [`idle`]: a connection with no request being
//! served and no byte moving either way for `http.idle_timeout_ms` is dropped, which
//! closes its socket).
//!
//! hyper starts its header-read timer whenever it waits for a request head, at accept
//! and again after each response, so it also bounds a keep-alive connection waiting for
//! its next request; the idle timeout covers what it does not: a client that stopped
//! reading a response, or one that keeps a connection open longer than the header
//! timeout allows when that is off or longer.
//!
//! Does not: parse HTTP (hyper does), authenticate or route (`super`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The open management connections, against the cap (shared by the accept loop and
/// the connections' tasks; `Arc` because a task must be `Send`).
pub struct Slots {
    cap: usize,
    open: AtomicUsize,
}

/// One connection's place; given back when dropped.
pub struct Slot(Arc<Slots>);

impl Slots {
    /// `cap` 0 = no limit.
    pub fn new(cap: u32) -> Arc<Slots> {
        Arc::new(Slots {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            open: AtomicUsize::new(0),
        })
    }

    /// A place for a new connection, unless `cap` are open.
    pub fn take(self: &Arc<Slots>) -> Option<Slot> {
        let cap = self.cap;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (cap == 0 || n < cap).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(self)))
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When a connection last moved a byte or finished a request, and how many of its
/// requests are being served now.
pub struct Activity {
    born: Instant,
    /// Milliseconds after `born`.
    last: AtomicU64,
    busy: AtomicU32,
}

/// A request being served (the connection is not idle meanwhile, however long a shard
/// or a login delay takes); dropping it counts as activity.
pub struct Busy(Arc<Activity>);

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: Instant::now(),
            last: AtomicU64::new(0),
            busy: AtomicU32::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.born + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// Marks a request in service until the guard is dropped.
    pub fn busy(self: &Arc<Activity>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(Arc::clone(self))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves once the connection has been idle for `timeout` (never while a request is
/// in service); the caller then drops the connection.
pub async fn idle(activity: Arc<Activity>, timeout: Duration) {
    loop {
        let deadline = activity.last() + timeout;
        tokio::time::sleep_until(deadline).await;
        if activity.busy.load(Ordering::Relaxed) > 0 {
            activity.touch();
            continue;
        }
        if activity.last() + timeout <= Instant::now() {
            return;
        }
    }
}

/// A socket whose reads and writes that move bytes count as [`Activity`].
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_refuse_over_the_cap_and_come_back() {
        let slots = Slots::new(2);
        let a = slots.take().expect("first");
        let _b = slots.take().expect("second");
        assert!(slots.take().is_none());
        drop(a);
        assert!(slots.take().is_some());
        let unlimited = Slots::new(0);
        let held: Vec<_> = (0..10).filter_map(|_| unlimited.take()).collect();
        assert_eq!(held.len(), 10);
    }

    #[tokio::test]
    async fn idle_waits_while_busy_and_after_activity() {
        let activity = Activity::new();
        let busy = activity.busy();
        let timeout = Duration::from_millis(50);
        let watchdog = tokio::spawn(idle(Arc::clone(&activity), timeout));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!watchdog.is_finished(), "idle while a request is served");
        drop(busy);
        tokio::time::timeout(Duration::from_secs(10), watchdog)
            .await
            .expect("idle after the request")
            .expect("watchdog task");
    }
}
