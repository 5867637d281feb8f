//! Owns: the handshake's side of the admission limits — login throttling (an attempt
//! from a throttled address is answered after its delay, without blocking the shard:
//! the connection's reader awaits it as a [`PendingOp::LoginDelay`]; a locked-out
//! address is dropped without a reply), the record of refused logins, and the
//! `channel_max` refusal — with `crate::limits` doing the counting.
//!
//! Does not: authenticate (`Config::authenticate`) or count connections.

use std::time::Duration;

use crate::limits::Gate;
use crate::model::ids::ConnId;
use crate::protocol::method::ConnectionTune;
use crate::protocol::Method;
use crate::session::connection::Phase;
use crate::session::error::ConnectionError;
use crate::session::limit::LimitRefusal;

use super::{Flow, Pending, PendingOp};
use crate::shard::{Shard, State};

/// The answer to `connection.start-ok`: `connection.tune`, or a refusal with its class
/// and method ids.
pub type LoginOutcome = Result<(), (ConnectionError, u16, u16)>;

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

impl State {
    /// The throttle's decision for this connection's login attempt; `None` when the
    /// connection was dropped without a reply (its address failed too often).
    pub(super) fn login_gate(&mut self, shard: &Shard, conn: ConnId) -> Option<Gate> {
        let peer = self.conn(conn)?.peer;
        let gate = shard.limits.login_gate(peer, shard.clock.now());
        if let Gate::Drop { .. } = gate {
            self.finish_connection(conn);
            return None;
        }
        Some(gate)
    }

    /// Records a refused login (throttling, CON-1008 with the username and address).
    pub(super) fn login_failed(&self, shard: &Shard, conn: ConnId, user: &str, mechanism: &str) {
        if let Some(c) = self.conn(conn) {
            shard
                .limits
                .login_failed(c.peer, user, mechanism, shard.clock.now());
        }
    }

    /// Answers the login now, or after the throttle's delay: the reader awaits the
    /// delay (reading nothing more from this socket) while the shard serves others.
    pub(super) fn login_reply(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        gate: Gate,
        outcome: LoginOutcome,
    ) -> Flow {
        if let Gate::Delay(delay) = gate {
            return Flow::Await(Pending {
                conn,
                channel: 0,
                op: PendingOp::LoginDelay { delay, outcome },
            });
        }
        self.send_login_outcome(shard, conn, outcome);
        Flow::Continue
    }

    /// Sends `connection.tune`, or closes the connection with the refusal, unless the
    /// connection was closed meanwhile (handshake deadline, shutdown).
    pub fn send_login_outcome(&mut self, shard: &Shard, conn: ConnId, outcome: LoginOutcome) {
        match outcome {
            Err((err, class_id, method_id)) => {
                self.close_connection(shard, conn, &err, class_id, method_id);
            }
            Ok(()) => {
                let limits = &shard.config.limits;
                let Some(c) = self.conn_mut(conn) else {
                    return;
                };
                if c.phase != Phase::AwaitTuneOk {
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

impl State {
    /// `basic.consume` over `limits.consumers_per_channel`: RabbitMQ's 530 (CHN-1015,
    /// rate-limited).
    pub(super) fn consumer_limit(
        &self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        refusal: LimitRefusal,
    ) -> super::channel::MethodError {
        let subject = self.conn(conn).map(|c| c.log_subject()).unwrap_or_default();
        shard
            .limits
            .channel_refused(subject, number, &refusal, shard.clock.now());
        super::channel::MethodError::Connection(ConnectionError::Limit(refusal))
    }
}

/// Waits out a login delay (the reader's side of [`PendingOp::LoginDelay`]).
pub async fn wait(delay: Duration) {
    tokio::time::sleep(delay).await;
}
