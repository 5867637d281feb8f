//! Owns: [`Signal`], a single-waiter wake-up flag for tasks on one shard (a connection's
//! writer waits on it; the shard sets it when it queued bytes). It replaces a
//! cross-thread `Notify`: everything here is `!Send` and lock-free by construction.
//!
//! Also [`ConnSignals`], a connection's four signals in one allocation (issue 23: they
//! were four).
//!
//! Does not: carry data or wake more than one waiter.

use std::cell::Cell;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A level-triggered, single-waiter wake-up flag.
#[derive(Default)]
pub struct Signal {
    raised: Cell<bool>,
    waiter: Cell<Option<Waker>>,
}

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    /// Raises the flag and wakes the waiter, if any.
    pub fn notify(&self) {
        self.raised.set(true);
        if let Some(w) = self.waiter.take() {
            w.wake();
        }
    }

    /// Waits until the flag is raised, then lowers it.
    pub async fn wait(&self) {
        poll_fn(|cx| self.poll_wait(cx)).await;
    }

    /// Ready (and the flag lowered) if the flag is raised; otherwise the waiter is
    /// `cx`'s task, woken when it is.
    pub fn poll_wait(&self, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.raised.replace(false) {
            Poll::Ready(())
        } else {
            self.waiter.set(Some(cx.waker().clone()));
            Poll::Pending
        }
    }
}

/// The signals of one connection, shared by its `Conn`, its reader and its writer.
#[derive(Default)]
pub struct ConnSignals {
    /// Wakes the writer task (bytes queued, closing, TLS records to send).
    pub writer: Signal,
    /// Raised when bytes of the connection reached the socket (a reader paused for a
    /// full outbound buffer waits on it).
    pub progress: Signal,
    /// Raised when the writer task ended.
    pub writer_done: Signal,
    /// Raised when a reason to hold the reader may have gone, when the connection
    /// becomes `Closed`, and when the shard asks an idle reader to park.
    pub resume: Signal,
}
