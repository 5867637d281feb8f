//! Owns: the little state that the connection task and the application's handles
//! share — the close reason of a connection or channel (set once), and the producer
//! flow-control flags (`channel.flow`, `connection.blocked`) with their wake-ups — and
//! the publisher's flow-control wait (warn every notify period, fail after the
//! wait-failure timeout, as seed 001's "Client impact" describes).
//! Does not: lock. Everything here is an atomic, a `OnceLock` written once, or a
//! `Notify`; the publish path reads two atomics when nothing is held.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::error::ClientError;

/// Producer flow-control timing.
#[derive(Clone, Copy, Debug)]
pub struct FlowOptions {
    /// How often a held publish logs its WARN line (Qpid's default: 5 s).
    pub notify_period: Duration,
    /// How long a publish waits before failing with
    /// [`ClientError::FlowControlTimeout`] (Qpid's `qpid.flow_control_wait_failure`,
    /// default 60 s).
    pub wait_failure: Duration,
}

impl Default for FlowOptions {
    fn default() -> Self {
        FlowOptions {
            notify_period: Duration::from_secs(5),
            wait_failure: Duration::from_secs(60),
        }
    }
}

/// State of one connection visible to its handles.
#[derive(Debug, Default)]
pub(crate) struct ConnShared {
    /// Why the connection ended; set once.
    pub error: OnceLock<ClientError>,
    /// `connection.blocked` received and not yet `connection.unblocked`.
    pub blocked: AtomicBool,
    /// Woken on unblock and on close.
    pub wake: Notify,
}

/// State of one channel visible to its handles.
#[derive(Debug, Default)]
pub(crate) struct ChanShared {
    /// Why the channel ended; set once.
    pub error: OnceLock<ClientError>,
    /// `channel.flow active=false` received and not yet reversed.
    pub flow_stopped: AtomicBool,
    /// Woken on flow resume and on close.
    pub wake: Notify,
}

impl ConnShared {
    /// Records why the connection ended (first reason wins) and wakes waiters.
    pub fn fail(&self, e: ClientError) {
        let _ = self.error.set(e);
        self.wake.notify_waiters();
    }

    pub fn set_blocked(&self, blocked: bool) {
        self.blocked.store(blocked, Ordering::Release);
        if !blocked {
            self.wake.notify_waiters();
        }
    }
}

impl ChanShared {
    /// Records why the channel ended (first reason wins) and wakes waiters.
    pub fn fail(&self, e: ClientError) {
        let _ = self.error.set(e);
        self.wake.notify_waiters();
    }

    pub fn set_flow(&self, active: bool) {
        self.flow_stopped.store(!active, Ordering::Release);
        if active {
            self.wake.notify_waiters();
        }
    }

    /// The channel's close reason, else the connection's.
    pub fn check(&self, conn: &ConnShared) -> Result<(), ClientError> {
        if let Some(e) = self.error.get() {
            return Err(e.clone());
        }
        if let Some(e) = conn.error.get() {
            return Err(e.clone());
        }
        Ok(())
    }

    /// The reason to report when the connection task dropped a reply.
    pub fn gone(&self, conn: &ConnShared) -> ClientError {
        match self.check(conn) {
            Err(e) => e,
            Ok(()) => ClientError::disconnected(),
        }
    }

    fn held(&self, conn: &ConnShared) -> bool {
        self.flow_stopped.load(Ordering::Acquire) || conn.blocked.load(Ordering::Acquire)
    }

    /// Waits while the broker holds publishers back on this channel or connection.
    /// Logs `Message send delayed by Ns due to broker enforced flow control` every
    /// notify period and gives up after the wait-failure timeout.
    pub async fn wait_flow(
        &self,
        conn: &ConnShared,
        opts: &FlowOptions,
    ) -> Result<(), ClientError> {
        if !self.held(conn) {
            return Ok(());
        }
        let start = Instant::now();
        let period = opts.notify_period.max(Duration::from_millis(1));
        let mut next_warn = period;
        loop {
            let chan_wake = self.wake.notified();
            let conn_wake = conn.wake.notified();
            tokio::pin!(chan_wake, conn_wake);
            // Register before re-checking so a resume in between is not lost.
            chan_wake.as_mut().enable();
            conn_wake.as_mut().enable();
            self.check(conn)?;
            if !self.held(conn) {
                return Ok(());
            }
            let elapsed = start.elapsed();
            if elapsed >= opts.wait_failure {
                return Err(ClientError::FlowControlTimeout { waited: elapsed });
            }
            let wake_at = next_warn.min(opts.wait_failure);
            tokio::select! {
                _ = &mut chan_wake => {}
                _ = &mut conn_wake => {}
                _ = tokio::time::sleep(wake_at.saturating_sub(elapsed)) => {
                    if start.elapsed() >= next_warn && next_warn < opts.wait_failure {
                        tracing::warn!(
                            "Message send delayed by {}s due to broker enforced flow control",
                            next_warn.as_secs()
                        );
                        next_warn += period;
                    }
                }
            }
        }
    }
}
