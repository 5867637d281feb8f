//! Owns: the handshake's side of the admission limits — the answer to a failed login
//! (at once; after the (address, user) throttle's or the broker-wide ceiling's delay,
//! without blocking the shard: the connection's reader awaits it as a
//! [`PendingOp::LoginDelay`] holding a `DelayPermit`; or no reply at all), the record of
//! refused logins, and the `channel_max` refusal — with `crate::limits` doing the
//! counting. A login that succeeds is answered at once, whatever failed before. Also
//! the silent close of a `start-ok` whose mechanism was not offered (CON-1012).
//!
//! Does not: authenticate (`Config::authenticate`) or count connections.

use std::time::Duration;

use crate::limits::report::{Reporter, REPORT_GAP};
use crate::limits::LoginAnswer;
use crate::model::ids::ConnId;
use crate::ops::session_event::SessionEvent;
use crate::protocol::method::ConnectionTune;
use crate::protocol::Method;
use crate::session::connection::Phase;
use crate::session::error::{ConnectionError, HardError};
use crate::session::limit::LimitRefusal;

use super::{AfterFrame, Pending, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::Shard;

/// The answer to `connection.start-ok`: `connection.tune`, or a refusal with its class
/// and method ids.
pub type LoginOutcome = Result<(), HardError>;

/// Whether a connection error during the handshake is logged by the limits or the
/// permission checks (CON-1006, CON-1008, CON-1015, rate-limited) instead of one line per
/// connection.
pub fn logged_as_limit(err: &ConnectionError) -> bool {
    matches!(
        err,
        ConnectionError::Limit(_)
            | ConnectionError::LoginRefused { .. }
            | ConnectionError::LoopbackOnly { .. }
            | ConnectionError::VhostRefused { .. }
    )
}

impl ConnSide<'_> {
    /// A refused login (a wrong password at `start-ok`, a loopback-only user from
    /// elsewhere) as `user`: recorded (throttling, CON-1008),
    /// then `refusal` is sent now, after the throttle's delay (the reader awaits it,
    /// reading nothing more from this socket, while the shard serves others), or not at
    /// all (the connection is closed without a reply).
    pub(super) fn refuse_login(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        user: &str,
        mechanism: &str,
        refusal: HardError,
    ) -> AfterFrame {
        let Some(peer) = self.conn(conn).map(|c| c.peer) else {
            return AfterFrame::Stop;
        };
        crate::shard::ShardCounters::bump(&shard.counters.logins_failed);
        let answer = shard
            .limits
            .login_failed(peer, user, mechanism, shard.clock.now());
        match answer {
            LoginAnswer::Now => {
                self.send_login_outcome(shard, conn, Err(refusal));
                AfterFrame::Continue
            }
            LoginAnswer::After(delay, permit) => AfterFrame::Await(Pending {
                conn,
                channel: 0,
                op: PendingOp::LoginDelay {
                    delay,
                    outcome: Err(refusal),
                    permit,
                },
            }),
            LoginAnswer::Drop => {
                self.finish_connection(conn);
                AfterFrame::Stop
            }
        }
    }

    /// Sends `connection.tune`, or closes the connection with the refusal, unless the
    /// connection was closed meanwhile (handshake deadline, shutdown).
    pub fn send_login_outcome(&mut self, shard: &Shard, conn: ConnId, outcome: LoginOutcome) {
        match outcome {
            Err(refusal) => {
                self.close_connection(shard, conn, &refusal);
            }
            Ok(()) => {
                crate::shard::ShardCounters::bump(&shard.counters.logins_succeeded);
                let limits = &shard.config.limits;
                let Some(c) = self.conn_mut(conn) else {
                    return;
                };
                if c.phase() != Phase::AwaitTuneOk {
                    return;
                }
                c.out.method(
                    0,
                    &Method::ConnectionTune(ConnectionTune {
                        channel_max: limits.channel_max,
                        frame_max: limits.frame_max,
                        heartbeat: limits.heartbeat,
                    }),
                );
                self.mark_writer(conn);
            }
        }
    }

    /// A frame for a new channel while `channel_max` channels are open: RabbitMQ's
    /// 530 (CHN-1016, rate-limited).
    pub(super) fn channel_max_reached(
        &self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
    ) -> ConnectionError {
        let (opened, max, subject) = self
            .conn(conn)
            .map(|c| (c.channels.len(), c.channel_max, c.log_subject()))
            .unwrap_or_default();
        let refusal = LimitRefusal::ChannelMax { opened, max };
        shard
            .limits
            .channel_refused(subject, number, &refusal, shard.clock.now());
        ConnectionError::Limit(refusal)
    }
}

impl ConnSide<'_> {
    /// `basic.consume` over `limits.consumers_per_channel`: RabbitMQ's 530 (CHN-1015,
    /// rate-limited).
    pub(super) fn consumer_limit(
        &self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        refusal: LimitRefusal,
    ) -> super::MethodError {
        let subject = self.conn(conn).map(|c| c.log_subject()).unwrap_or_default();
        shard
            .limits
            .channel_refused(subject, number, &refusal, shard.clock.now());
        super::MethodError::Connection(ConnectionError::Limit(refusal))
    }
}

/// How long a connection whose `start-ok` names a mechanism that was not offered waits
/// before its socket is closed without a reply: RabbitMQ's reader's silent-close delay
/// (`?SILENT_CLOSE_DELAY`, 3 s), so a client cannot probe mechanisms in a tight loop.
pub const SILENT_CLOSE_DELAY: Duration = Duration::from_secs(3);

thread_local! {
    /// This shard's (thread's) rate limit of CON-1012 lines.
    static MECHANISM_LINES: Reporter = const { Reporter::new(REPORT_GAP, 1) };
}

impl ConnSide<'_> {
    /// `start-ok` chose `mechanism`, which `connection.start` did not offer (`offered`):
    /// the socket is closed without any frame — the 0-9-1 spec's rule, and what
    /// RabbitMQ's reader does during the handshake — after [`SILENT_CLOSE_DELAY`], or at
    /// once when the shard already holds `limits.login.max_delayed` delayed answers.
    /// Logged as CON-1012 (rate-limited); not a failed login (no user was named).
    pub(super) fn refuse_mechanism(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        mechanism: &str,
        offered: &'static str,
    ) -> AfterFrame {
        let Some(peer) = self.conn(conn).map(|c| c.peer) else {
            return AfterFrame::Stop;
        };
        let permit = shard.limits.hold_silent_close();
        let delay = if permit.is_some() {
            SILENT_CLOSE_DELAY
        } else {
            Duration::ZERO
        };
        if let Some(count) = MECHANISM_LINES.with(|r| r.note(shard.clock.now())) {
            SessionEvent::MechanismRefused {
                peer,
                mechanism: mechanism.to_owned(),
                offered,
                delay_s: delay.as_secs(),
                count,
            }
            .emit();
        }
        match permit {
            Some(permit) => AfterFrame::Await(Pending {
                conn,
                channel: 0,
                op: PendingOp::SilentClose { delay, permit },
            }),
            None => {
                self.finish_connection(conn);
                AfterFrame::Stop
            }
        }
    }
}

/// Waits out a login delay (the reader's side of [`PendingOp::LoginDelay`]).
pub async fn wait(delay: Duration) {
    tokio::time::sleep(delay).await;
}
