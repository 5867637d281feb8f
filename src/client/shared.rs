//! Owns: the little state that the connection task and the application's handles
//! share — the close reason of a connection or channel (set once), and the producer
//! flow-control flags (`channel.flow`, `connection.blocked`) with their wake-ups and
//! counters — and the publisher's flow-control wait (warn every notify period, fail
//! after the wait-failure timeout, as seed 001's "Client impact" describes).
//! Does not: lock. Everything here is an atomic, a `OnceLock` written once, or a
//! `Notify`; the publish path reads two atomics when nothing is held.
//!
//! # Flow-control settings
//!
//! [`FlowOptions::default`] (and so `ConnectionOptions::default`) reads two environment
//! variables, in milliseconds, as Qpid's client read `qpid.flow_control_wait_failure`
//! and `qpid.flow_control_wait_notify_period`:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `SLUICE_FLOW_CONTROL_WAIT_FAILURE` | 60000 | a held publish fails with [`ClientError::FlowControlTimeout`] after this long |
//! | `SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD` | 5000 | a held publish logs `Message send delayed by 5s due to broker enforced flow control` this often |
//!
//! A value that is not a non-negative integer (surrounding blanks aside) is ignored
//! with a WARN naming the variable, and the default applies. Explicit values go in the
//! public fields of [`FlowOptions`]; [`FlowOptions::from_lookup`] reads from any source.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::error::{fmt_secs, ClientError};

/// Environment variable: how long a held publish waits before failing (ms).
pub const WAIT_FAILURE_ENV: &str = "SLUICE_FLOW_CONTROL_WAIT_FAILURE";
/// Environment variable: how often a held publish logs its WARN line (ms).
pub const NOTIFY_PERIOD_ENV: &str = "SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD";

/// Producer flow control as the publisher sees it: how long a publish on a held
/// channel waits, how often it says so, and whether it waits at all.
///
/// A publish on a channel the broker has stopped (`channel.flow active=false`) or on a
/// blocked connection (`connection.blocked`) waits until released. Every
/// `notify_period` it logs `Message send delayed by 5s due to broker enforced flow
/// control` (then `10s`, …; a period that is not whole seconds prints as `0.1s`); after
/// `wait_failure` it fails with [`ClientError::FlowControlTimeout`]: the message is not
/// sent, the channel stays open, and a transaction in progress is not rolled back (the
/// application may resend, or roll back itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowOptions {
    /// How often a held publish logs its WARN line (Qpid's default: 5 s).
    pub notify_period: Duration,
    /// How long a publish waits before failing with
    /// [`ClientError::FlowControlTimeout`] (Qpid's `qpid.flow_control_wait_failure`,
    /// default 60 s).
    pub wait_failure: Duration,
    /// Wait while held (default `true`). `false` imitates clients that ignore the
    /// broker's signal (pika, py-amqp): publishes go straight out, `channel.flow` is
    /// still answered with `flow-ok` and still counted in [`FlowStats`]. Meant for load
    /// tools that test a broker's enforcement, not for applications.
    pub honour_flow: bool,
}

impl FlowOptions {
    /// The wait-failure period when the environment does not say otherwise.
    pub const DEFAULT_WAIT_FAILURE: Duration = Duration::from_secs(60);
    /// The notify period when the environment does not say otherwise.
    pub const DEFAULT_NOTIFY_PERIOD: Duration = Duration::from_secs(5);

    /// The defaults, overridden by `SLUICE_FLOW_CONTROL_WAIT_FAILURE` and
    /// `SLUICE_FLOW_CONTROL_WAIT_NOTIFY_PERIOD` (milliseconds) where they are set to a
    /// non-negative integer. Never panics; a bad value is logged and ignored.
    pub fn from_env() -> FlowOptions {
        FlowOptions::from_lookup(|name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// As [`FlowOptions::from_env`], reading the variables through `lookup` (name →
    /// value, `None` when unset), so a caller (or a test) can supply them from
    /// elsewhere than the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> FlowOptions {
        let read = |name: &str, default: Duration| -> Duration {
            let Some(raw) = lookup(name) else {
                return default;
            };
            match raw.trim().parse::<u64>() {
                Ok(ms) => Duration::from_millis(ms),
                Err(_) => {
                    tracing::warn!(
                        "ignoring {name}={raw:?}: not a non-negative integer number of \
                         milliseconds; using {} ms",
                        default.as_millis()
                    );
                    default
                }
            }
        };
        FlowOptions {
            notify_period: read(NOTIFY_PERIOD_ENV, FlowOptions::DEFAULT_NOTIFY_PERIOD),
            wait_failure: read(WAIT_FAILURE_ENV, FlowOptions::DEFAULT_WAIT_FAILURE),
            honour_flow: true,
        }
    }
}

impl Default for FlowOptions {
    /// [`FlowOptions::from_env`].
    fn default() -> Self {
        FlowOptions::from_env()
    }
}

/// What one channel has seen of producer flow control (see [`super::Channel::flow_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// `channel.flow active=false` received on this channel.
    pub channel_flow_stops: u64,
    /// `connection.blocked` received on this channel's connection.
    pub connection_blocks: u64,
    /// Publishes on this channel that had to wait.
    pub waits: u64,
    /// Of those, how many gave up with [`ClientError::FlowControlTimeout`].
    pub timeouts: u64,
    /// Time publishes on this channel spent waiting for flow control, in total.
    pub held: Duration,
    /// Time publishes on this channel spent waiting for room in the connection's
    /// command queue — the socket not taking data as fast (TCP backpressure, or a
    /// broker that stopped reading this connection) — in total.
    pub backpressure: Duration,
}

/// Nanoseconds since `start`, saturating.
pub(crate) fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// State of one connection visible to its handles.
#[derive(Debug, Default)]
pub(crate) struct ConnShared {
    /// Why the connection ended; set once.
    pub error: OnceLock<ClientError>,
    /// `connection.blocked` received and not yet `connection.unblocked`.
    pub blocked: AtomicBool,
    /// `connection.blocked` received while not blocked, ever.
    pub blocks: AtomicU64,
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
    /// `channel.flow active=false` received while active, ever.
    pub flow_stops: AtomicU64,
    /// Publishes that waited for flow control.
    pub waits: AtomicU64,
    /// Of those, the ones that timed out.
    pub timeouts: AtomicU64,
    /// Nanoseconds publishes waited, in total.
    pub held_ns: AtomicU64,
    /// Nanoseconds publishes waited for room in the command queue, in total.
    pub backpressure_ns: AtomicU64,
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
        let was = self.blocked.swap(blocked, Ordering::AcqRel);
        if blocked && !was {
            self.blocks.fetch_add(1, Ordering::Relaxed);
        }
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
        let was_stopped = self.flow_stopped.swap(!active, Ordering::AcqRel);
        if !active && !was_stopped {
            self.flow_stops.fetch_add(1, Ordering::Relaxed);
        }
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

    pub fn held(&self, conn: &ConnShared) -> bool {
        self.flow_stopped.load(Ordering::Acquire) || conn.blocked.load(Ordering::Acquire)
    }

    pub fn stats(&self, conn: &ConnShared) -> FlowStats {
        FlowStats {
            channel_flow_stops: self.flow_stops.load(Ordering::Relaxed),
            connection_blocks: conn.blocks.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            held: Duration::from_nanos(self.held_ns.load(Ordering::Relaxed)),
            backpressure: Duration::from_nanos(self.backpressure_ns.load(Ordering::Relaxed)),
        }
    }

    /// Waits while the broker holds publishers back on this channel or connection
    /// (unless `opts.honour_flow` is off). Logs `Message send delayed by Ns due to
    /// broker enforced flow control` every notify period and gives up after the
    /// wait-failure timeout; the time waited is added to the channel's [`FlowStats`].
    pub async fn wait_flow(
        &self,
        conn: &ConnShared,
        opts: &FlowOptions,
    ) -> Result<(), ClientError> {
        if !opts.honour_flow || !self.held(conn) {
            return Ok(());
        }
        let start = Instant::now();
        self.waits.fetch_add(1, Ordering::Relaxed);
        let r = self.hold(conn, opts, start).await;
        self.held_ns
            .fetch_add(nanos_since(start), Ordering::Relaxed);
        if let Err(ClientError::FlowControlTimeout { .. }) = r {
            self.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    async fn hold(
        &self,
        conn: &ConnShared,
        opts: &FlowOptions,
        start: Instant,
    ) -> Result<(), ClientError> {
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
                    // Every period passed gets its line (Qpid's 5s, 10s, … sequence),
                    // even when this wake-up came late.
                    while start.elapsed() >= next_warn && next_warn < opts.wait_failure {
                        tracing::warn!(
                            "Message send delayed by {}s due to broker enforced flow control",
                            fmt_secs(next_warn)
                        );
                        next_warn += period;
                    }
                }
            }
        }
    }
}
