//! Owns: turning a connection's frames into actions on its shard — the connection
//! methods of an open connection here, the handshake in `handshake`, an open channel's
//! frames in `channel` (which dispatches each method family to its own file), operations
//! that must wait for another shard in `pending` — the handler's error type
//! ([`MethodError`]) and the one place where typed errors become `channel.close` /
//! `connection.close`.
//!
//! Does not: touch sockets (it appends to the connection's outbound buffer) or another
//! shard's state (it goes through outboxes and the control plane).

/// The [`MethodId`] of a generated method struct, from its `CLASS_ID` and `METHOD_ID`.
macro_rules! method_id {
    ($method:ident) => {
        crate::session::error::MethodId::new($method::CLASS_ID, $method::METHOD_ID)
    };
}

pub mod access;
pub mod channel;
mod consume;
mod direct_reply;
mod exchange;
mod handshake;
mod login;
mod modes;
pub mod pending;
pub mod publish;
mod queue;
pub mod settle;
mod stream;

use std::time::{Duration, Instant};

use crate::model::ids::ConnId;
use crate::ops::escape::Escaped;
use crate::ops::event::OpsEvent;
use crate::ops::session_event::SessionEvent;
use crate::protocol::frame::{Frame, FrameKind};
use crate::protocol::method::{
    BasicPublish, ChannelClose, ChannelCloseOk, ChannelOpenOk, ConnectionClose, ConnectionCloseOk,
    ConnectionUpdateSecretOk,
};
use crate::protocol::{LongStr, Method, ShortStr};
use crate::session::channel::{Channel, ChannelPhase};
use crate::session::connection::Phase;
use crate::session::error::{ChannelError, ConnectionError, HardError, MethodId};

use super::ConnSide;
use crate::shard::inbox::QueueOp;
use crate::shard::{Shard, TimerKey};

pub use pending::{Pending, PendingOp};

thread_local! {
    /// This shard's (thread's) rate limit of CON-1011 lines: ten a second.
    static SECRET_LINES: crate::limits::report::Reporter =
        const { crate::limits::report::Reporter::new(Duration::from_secs(1), 10) };
}

/// What the reader does after a frame (named apart from flow control, which is
/// `conns::flow`).
pub enum AfterFrame {
    /// Read the next frame.
    Continue,
    /// Wait for another shard, then call [`ConnSide::complete`].
    Await(Pending),
    /// The connection is finished; stop reading.
    Stop,
}

/// A method failed: softly (the channel is closed) or hard (the connection is).
#[derive(Debug)]
pub(super) enum MethodError {
    Channel(ChannelError),
    Connection(ConnectionError),
}

impl From<ChannelError> for MethodError {
    fn from(e: ChannelError) -> Self {
        MethodError::Channel(e)
    }
}

/// `basic.publish`, which the content frames that follow it answer to.
pub(super) const PUBLISH: MethodId = method_id!(BasicPublish);

/// What the protocol header check decided.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderCheck {
    /// Valid: `connection.start` was queued.
    Accepted,
    /// Not AMQP 0-9-1: our header was queued; close after flushing.
    Refused,
}

impl ConnSide<'_> {
    /// Handles one frame. A hard error is turned into `connection.close` here.
    pub fn on_frame(&mut self, shard: &Shard, conn: ConnId, frame: Frame) -> AfterFrame {
        let now = shard.clock.now();
        let Some(c) = self.conn_mut(conn) else {
            return AfterFrame::Stop;
        };
        c.last_recv = now;
        let result = match c.phase() {
            Phase::AwaitHeader | Phase::Lingering | Phase::Closed => return AfterFrame::Stop,
            Phase::Closing => Ok(self.on_frame_while_closing(shard, conn, frame)),
            Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::AwaitOpen => {
                self.on_handshake_frame(shard, conn, frame)
            }
            Phase::Open => self.on_open_frame(shard, conn, frame),
        };
        match result {
            Ok(flow) => flow,
            Err(hard) => {
                self.close_connection(shard, conn, &hard);
                AfterFrame::Continue
            }
        }
    }

    /// While our `connection.close` waits for close-ok, everything but close-ok and the
    /// client's own close is ignored (as RabbitMQ does). Close-ok finishes the connection
    /// at once: the broker initiated the close, so it shuts the socket itself.
    fn on_frame_while_closing(&mut self, shard: &Shard, conn: ConnId, frame: Frame) -> AfterFrame {
        if frame.kind != FrameKind::Method || frame.channel != 0 {
            return AfterFrame::Continue;
        }
        match Method::decode(frame.payload) {
            Ok(Method::ConnectionCloseOk(_)) => {
                self.finish_connection(conn);
                AfterFrame::Stop
            }
            Ok(Method::ConnectionClose(_)) => {
                self.answer_close(shard, conn);
                AfterFrame::Stop
            }
            _ => AfterFrame::Continue,
        }
    }

    fn on_open_frame(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<AfterFrame, HardError> {
        if frame.channel == 0 {
            return match frame.kind {
                FrameKind::Heartbeat if !frame.payload.is_empty() => {
                    Err(ConnectionError::heartbeat_payload(&frame.payload).on(MethodId::NONE))
                }
                FrameKind::Heartbeat => Ok(AfterFrame::Continue),
                FrameKind::Method => self.on_connection_method(shard, conn, frame),
                FrameKind::Header | FrameKind::Body => Err(ConnectionError::UnexpectedFrame(
                    format!("content frame of type {:?} on channel 0", frame.kind),
                )
                .on(MethodId::NONE)),
            };
        }
        if frame.kind == FrameKind::Heartbeat {
            return Err(ConnectionError::Frame(format!(
                "heartbeat frame on channel {}; heartbeats belong on channel 0",
                frame.channel
            ))
            .on(MethodId::NONE));
        }
        self.on_channel_frame(shard, conn, frame)
    }

    fn on_connection_method(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<AfterFrame, HardError> {
        let method = Method::decode(frame.payload)
            .map_err(|e| ConnectionError::undecodable(&e).on(MethodId::NONE))?;
        match method {
            // RabbitMQ 3.8+ (an OAuth client refreshing its token). Every mechanism
            // sluice offers (PLAIN, AMQPLAIN, EXTERNAL) logs in a password or
            // certificate user, for which RabbitMQ's internal backend has no token to
            // refresh: it answers update-secret-ok for any new secret and the
            // connection keeps the user and permissions it authenticated with. So does
            // sluice (CON-1011); nothing is checked, so nothing counts as a failed login.
            Method::ConnectionUpdateSecret(update) => {
                let Some(c) = self.conn_mut(conn) else {
                    return Ok(AfterFrame::Stop);
                };
                // A client looping on update-secret cannot flood the log.
                if let Some(count) = SECRET_LINES.with(|r| r.note(shard.clock.now())) {
                    SessionEvent::SecretUpdated {
                        subject: c.log_subject(),
                        user: c.user.clone(),
                        mechanism: c.auth_mechanism.clone(),
                        reason: update.reason.as_str_lossy().into_owned(),
                        suppressed: count - 1,
                    }
                    .emit();
                }
                c.out.method(
                    0,
                    &Method::ConnectionUpdateSecretOk(ConnectionUpdateSecretOk {}),
                );
                self.mark_writer(conn);
                Ok(AfterFrame::Continue)
            }
            Method::ConnectionClose(_) => {
                self.answer_close(shard, conn);
                Ok(AfterFrame::Stop)
            }
            // A close-ok without our close: the client is done either way.
            Method::ConnectionCloseOk(_) => {
                self.finish_connection(conn);
                Ok(AfterFrame::Stop)
            }
            other => Err(ConnectionError::CommandInvalid(format!(
                "'{}' is not valid on channel 0 of an open connection",
                other.name()
            ))
            .on(MethodId::of(&other))),
        }
    }

    /// Channel-level frame routing: open, close, content assembly, methods.
    fn on_channel_frame(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<AfterFrame, HardError> {
        let number = frame.channel;
        let Some(c) = self.conn_mut(conn) else {
            return Ok(AfterFrame::Stop);
        };
        if number > c.channel_max && c.channels.len() >= usize::from(c.channel_max) {
            return Err(self
                .channel_max_reached(shard, conn, number)
                .on(MethodId::NONE));
        }
        if number > c.channel_max {
            return Err(ConnectionError::Channel(format!(
                "channel {number} is above the negotiated channel_max {}",
                c.channel_max
            ))
            .on(MethodId::NONE));
        }
        let phase = c.channels.get(&number).map(|ch| ch.phase);
        match (phase, frame.kind) {
            (None, FrameKind::Method) => {
                let method = Method::decode(frame.payload)
                    .map_err(|e| ConnectionError::undecodable(&e).on(MethodId::NONE))?;
                let id = MethodId::of(&method);
                match method {
                    Method::ChannelOpen(_) => {
                        if let Err(refusal) = shard.limits.open_channel(conn, &c.user) {
                            let now = shard.clock.now();
                            let subject = c.log_subject();
                            shard.limits.channel_refused(subject, number, &refusal, now);
                            return Err(ConnectionError::Limit(refusal).on(id));
                        }
                        let epoch = c.channel_epoch();
                        c.channels
                            .insert(number, Box::new(Channel::new(number, epoch)));
                        crate::shard::ShardCounters::bump(&shard.counters.channels_opened);
                        c.out.method(
                            number,
                            &Method::ChannelOpenOk(ChannelOpenOk {
                                channel_id: LongStr::default(),
                            }),
                        );
                        OpsEvent::ChannelCreate {
                            subject: c.log_subject(),
                            channel: number,
                        }
                        .emit();
                        self.mark_writer(conn);
                        Ok(AfterFrame::Continue)
                    }
                    // A close for a channel we already forgot: just confirm it.
                    Method::ChannelClose(_) => {
                        c.out
                            .method(number, &Method::ChannelCloseOk(ChannelCloseOk {}));
                        self.mark_writer(conn);
                        Ok(AfterFrame::Continue)
                    }
                    Method::ChannelCloseOk(_) => Ok(AfterFrame::Continue),
                    other => Err(ConnectionError::Channel(format!(
                        "expected 'channel.open' on channel {number}, got '{}'",
                        other.name()
                    ))
                    .on(MethodId::of(&other))),
                }
            }
            (None, _) => Err(ConnectionError::Channel(format!(
                "content frame on channel {number}, which is not open"
            ))
            .on(MethodId::NONE)),
            (Some(ChannelPhase::Closing), FrameKind::Method) => {
                match Method::decode(frame.payload) {
                    Ok(Method::ChannelCloseOk(_)) => {
                        c.channels.remove(&number);
                        shard.limits.close_channel(conn);
                    }
                    Ok(Method::ChannelClose(_)) => {
                        c.channels.remove(&number);
                        shard.limits.close_channel(conn);
                        c.out
                            .method(number, &Method::ChannelCloseOk(ChannelCloseOk {}));
                        self.mark_writer(conn);
                    }
                    _ => {}
                }
                Ok(AfterFrame::Continue)
            }
            (Some(ChannelPhase::Closing), _) => Ok(AfterFrame::Continue),
            (Some(ChannelPhase::Open), _) => self.on_open_channel_frame(shard, conn, frame),
        }
    }

    /// Closes a channel with a soft error: releases its consumers and unacked messages,
    /// sends `channel.close`, and discards frames until `close-ok`. An error the promotion
    /// rule ([`ChannelError::promoted`]) makes hard closes the connection instead.
    pub fn close_channel(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
        err: &ChannelError,
        cause: MethodId,
    ) {
        if let Some(hard) = err.promoted() {
            self.close_connection(shard, conn, &hard.on(cause));
            return;
        }
        self.release_channel(shard, conn, number);
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        ch.phase = ChannelPhase::Closing;
        let text = err.reply_text();
        if !matches!(err, ChannelError::Limit(_)) {
            OpsEvent::ChannelClose {
                subject: c.log_subject(),
                channel: number,
                reason: Some(format!("{} {}", err.code().code(), text)),
            }
            .emit();
        }
        c.out.method(
            number,
            &Method::ChannelClose(ChannelClose {
                reply_code: err.code().code(),
                reply_text: ShortStr::from(text),
                class_id: cause.class_id,
                method_id: cause.method_id,
            }),
        );
        self.mark_writer(conn);
    }

    /// Gives back what a channel holds: cancels its consumers at their queues and
    /// requeues its unacknowledged deliveries. The channel itself stays (the caller
    /// removes it or marks it closing).
    pub fn release_channel(&mut self, shard: &Shard, conn: ConnId, number: u16) {
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let Some(ch) = c.channels.get_mut(&number) else {
            return;
        };
        let consumers = ch.drain_consumers();
        let unacked = ch.take_all_unacked();
        ch.content.reset();
        ch.tx = None;
        for cons in consumers {
            if cons.queue_key != 0 {
                self.queues().settle_to(
                    shard,
                    cons.queue,
                    QueueOp::Cancel {
                        key: cons.queue_key,
                    },
                );
            }
        }
        for u in unacked {
            self.queues()
                .settle_to(shard, u.queue, QueueOp::Requeue(u.seq));
        }
    }

    /// Sends `connection.close` for a hard error and waits for `close-ok`.
    pub fn close_connection(&mut self, shard: &Shard, conn: ConnId, hard: &HardError) {
        let HardError { error: err, cause } = hard;
        let now = shard.clock.now();
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        if matches!(c.phase(), Phase::Closing | Phase::Closed) {
            return;
        }
        let handshake_done = c.phase() == Phase::Open;
        let text = err.reply_text();
        if handshake_done {
            c.close_logged = true;
            OpsEvent::ConnectionClose {
                subject: c.log_subject(),
                reason: format!("{} {}", err.code().code(), text),
            }
            .emit();
        } else if !login::logged_as_limit(err) {
            SessionEvent::HandshakeClosed {
                peer: c.peer,
                reason: format!("{} {}", err.code().code(), text),
                name: c.client_name(),
            }
            .emit();
        }
        c.out.method(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: err.code().code(),
                reply_text: ShortStr::from(text),
                class_id: cause.class_id,
                method_id: cause.method_id,
            }),
        );
        c.close_sent();
        let deadline = now + close_ok_timeout(c.heartbeat);
        let channels: Vec<u16> = c.channels.keys().copied().collect();
        for number in channels {
            self.release_channel(shard, conn, number);
        }
        self.common
            .wheel
            .arm(deadline, TimerKey::CloseTimeout(conn));
        self.mark_writer(conn);
    }

    /// The client closed: release its channels, ask for its exclusive queues to be
    /// deleted (RabbitMQ deletes them before it answers; here the coordinator's next
    /// round does, `control::own_deletes`), answer `close-ok`, and leave the socket for
    /// the client to close — for at most [`CLOSE_OK_LINGER`].
    fn answer_close(&mut self, shard: &Shard, conn: ConnId) {
        let deadline = shard.clock.now() + CLOSE_OK_LINGER;
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let channels: Vec<u16> = c.channels.keys().copied().collect();
        for number in channels {
            self.release_channel(shard, conn, number);
        }
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        let vhost = c.vhost;
        let exclusive = std::mem::take(&mut c.exclusive_queues);
        c.out
            .method(0, &Method::ConnectionCloseOk(ConnectionCloseOk {}));
        c.close_answered();
        self.common
            .outbox
            .delete_exclusive_queues(vhost, channel::owner(shard, conn), exclusive);
        self.common
            .wheel
            .arm(deadline, TimerKey::CloseTimeout(conn));
        self.mark_writer(conn);
    }

    /// The close timer fired: a peer that has not answered our `connection.close`, or has
    /// not closed its socket after our close-ok, is cut off (the writer shuts the socket
    /// and the reader, whose read then ends, releases the connection).
    pub fn close_timeout(&mut self, conn: ConnId) {
        let phase = self.conn(conn).map(|c| c.phase());
        if matches!(phase, Some(Phase::Closing | Phase::Lingering)) {
            self.finish_connection(conn);
        }
    }

    /// The connection is done (close handshake complete, a close timeout, or the peer gone
    /// after close-ok): the writer flushes and shuts the socket.
    pub fn finish_connection(&mut self, conn: ConnId) {
        if let Some(c) = self.conn_mut(conn) {
            // A lingering connection's reader side waits on it (`net::reader`).
            c.finish();
        }
        self.mark_writer(conn);
    }

    /// A heartbeat timer fired: send one if we have been quiet, close the connection if
    /// the peer has been silent for two intervals, re-arm.
    pub fn heartbeat_tick(&mut self, shard: &Shard, conn: ConnId, now: Instant) {
        let Some(c) = self.conn_mut(conn) else {
            return;
        };
        if c.heartbeat == 0 || matches!(c.phase(), Phase::Lingering | Phase::Closed) {
            return;
        }
        let period = heartbeat_period(c.heartbeat);
        let interval = Duration::from_secs(u64::from(c.heartbeat));
        // A connection the broker deliberately does not read is not judged by what it
        // sent meanwhile; the reader resets `last_recv` when it reads again.
        let judged = c.read_paused_since.is_none();
        if judged && now.saturating_duration_since(c.last_recv) > interval * 2 {
            let seconds = c.heartbeat;
            tracing::warn!(
                "[{}] missed heartbeats from client, timeout: {seconds}s",
                Escaped(&c.log_subject())
            );
            let missed = ConnectionError::MissedHeartbeats { seconds };
            self.close_connection(shard, conn, &missed.on(MethodId::NONE));
            // The peer is gone; do not wait for close-ok.
            self.finish_connection(conn);
            return;
        }
        if now.saturating_duration_since(c.last_send) >= period && c.out.is_empty() {
            c.out.heartbeat();
            self.mark_writer(conn);
        }
        self.common
            .wheel
            .arm(now + period, TimerKey::Heartbeat(conn));
    }

    /// The handshake deadline passed: a connection that has not opened is dropped (with
    /// `connection.close` if it got as far as `connection.start`).
    pub fn handshake_deadline(&mut self, shard: &Shard, conn: ConnId) {
        let Some(c) = self.conn(conn) else {
            return;
        };
        match c.phase() {
            Phase::Open | Phase::Closing | Phase::Lingering | Phase::Closed => {}
            Phase::AwaitHeader => self.finish_connection(conn),
            Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::AwaitOpen => {
                let err = ConnectionError::Forced(format!(
                    "handshake not completed within {} s",
                    crate::session::connection::HANDSHAKE_TIMEOUT.as_secs()
                ));
                self.close_connection(shard, conn, &err.on(MethodId::NONE));
                self.finish_connection(conn);
            }
        }
    }

    /// Closes a connection for shutdown (320 CONNECTION_FORCED).
    pub fn force_close(&mut self, shard: &Shard, conn: ConnId, reason: &str) {
        let err = ConnectionError::Forced(format!(
            "broker forced connection closure with reason '{reason}'"
        ));
        let open = self.conn(conn).map(|c| c.phase());
        match open {
            Some(Phase::Closing | Phase::Lingering | Phase::Closed) | None => {}
            Some(_) => self.close_connection(shard, conn, &err.on(MethodId::NONE)),
        }
        self.finish_connection(conn);
    }

    /// Shutdown: an open connection gets `320 CONNECTION_FORCED` and stays readable
    /// (held and paused readers resume) until its client's close-ok; one still in its
    /// handshake, or already closing, is finished as [`ConnSide::force_close`] does.
    pub fn close_for_shutdown(&mut self, shard: &Shard, conn: ConnId) {
        if self.conn(conn).map(|c| c.phase()) != Some(Phase::Open) {
            self.force_close(shard, conn, "shutdown");
            return;
        }
        let err = ConnectionError::Forced(
            "broker forced connection closure with reason 'shutdown'".to_owned(),
        );
        self.close_connection(shard, conn, &err.on(MethodId::NONE));
        if let Some(c) = self.conn_mut(conn) {
            c.signals.resume.notify();
        }
    }

    /// Forgets a connection whose socket is gone: releases channels, deletes its
    /// exclusive queues.
    pub fn drop_conn(&mut self, shard: &Shard, conn: ConnId) {
        let Some(c) = self.conn(conn) else {
            return;
        };
        shard.limits.conn_gone(conn);
        let channels: Vec<u16> = c.channels.keys().copied().collect();
        for number in channels {
            self.release_channel(shard, conn, number);
        }
        let slot = conn.slot as usize;
        let removed = self.conns.slab.remove(slot);
        if !removed.vhost_name.is_empty() {
            // It had reached connection.open-ok (vhost_name is set just before).
            crate::shard::ShardCounters::bump(&shard.counters.connections_closed);
        }
        if removed.phase() != Phase::AwaitHeader
            && !removed.vhost_name.is_empty()
            && !removed.close_logged
        {
            OpsEvent::ConnectionClose {
                subject: removed.log_subject(),
                reason: "closed".into(),
            }
            .emit();
        }
        self.common.outbox.delete_exclusive_queues(
            removed.vhost,
            channel::owner(shard, conn),
            removed.exclusive_queues,
        );
        // Queues that waited for this connection's write are dispatched this turn (its
        // consumers are cancelled above: whatever they hold goes elsewhere or stays).
        for queue in removed.pulls {
            self.queues().dispatch_this_turn(queue);
        }
        // Ends a writer task waiting for work; one never started is dropped with the
        // connection (the reader, which is ending, closes the socket).
        removed.signals.writer.notify();
    }
}

/// How long the socket stays open after close-ok answered the client's
/// `connection.close`, for the client to close it first. RabbitMQ waits up to
/// [`close_ok_timeout`] here too (`rabbit_reader:close_connection/1`); a client closes
/// its socket as soon as it has close-ok, so sluice gives one that never does a second,
/// not 30, of a descriptor and memory.
pub const CLOSE_OK_LINGER: Duration = Duration::from_secs(1);

/// How long the broker waits for close-ok after its own `connection.close`: the
/// negotiated heartbeat interval, at most 30 s, and 30 s without heartbeats — RabbitMQ's
/// rule (`?CLOSING_TIMEOUT` in `rabbit_reader`).
pub fn close_ok_timeout(heartbeat: u16) -> Duration {
    const CLOSING_TIMEOUT_SECS: u16 = 30;
    match heartbeat {
        1..CLOSING_TIMEOUT_SECS => Duration::from_secs(u64::from(heartbeat)),
        _ => Duration::from_secs(u64::from(CLOSING_TIMEOUT_SECS)),
    }
}

/// Heartbeats are sent at half the negotiated interval.
fn heartbeat_period(heartbeat: u16) -> Duration {
    Duration::from_millis(u64::from(heartbeat) * 500).max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_ok_timeout_is_the_heartbeat_capped_at_30_s() {
        let secs = |s| Duration::from_secs(s);
        assert_eq!(close_ok_timeout(0), secs(30));
        assert_eq!(close_ok_timeout(1), secs(1));
        assert_eq!(close_ok_timeout(29), secs(29));
        assert_eq!(close_ok_timeout(30), secs(30));
        assert_eq!(close_ok_timeout(60), secs(30));
        assert!(CLOSE_OK_LINGER <= close_ok_timeout(0));
    }
}
