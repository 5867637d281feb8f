//! Owns: the typed errors a session raises — [`ChannelError`] (soft: the channel is
//! closed) and [`ConnectionError`] (hard: the connection is closed) — each variant carrying
//! its evidence; the single place where they become a reply code and text; the one
//! promotion rule that makes a channel error close the connection
//! ([`ChannelError::promoted`]); and [`HardError`], a connection error with the
//! [`MethodId`] that `connection.close` echoes.
//!
//! Does not: decide when to close (the session does) or write frames.

use std::fmt;

use crate::model::exchange::upstream::{ArgShown, UpstreamArgError};
use crate::model::hops::MAX_HOPS_ARG;
use crate::policy::queue_args::QueueArgError;
use crate::policy::stream_args::StreamRefusal;
use crate::protocol::reply::{erlang_term, ErlangShape};
use crate::protocol::{Method, ReplyCode};

/// Which kind of object an error is about, for texts like "no queue 'x' in vhost '/'".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    Exchange,
    Queue,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Exchange => "exchange",
            ObjectKind::Queue => "queue",
        })
    }
}

/// A soft error: closes one channel with `channel.close`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelError {
    NotFound {
        kind: ObjectKind,
        name: String,
        vhost: String,
    },
    ExclusiveLocked {
        queue: String,
        vhost: String,
    },
    Inequivalent {
        kind: ObjectKind,
        name: String,
        vhost: String,
        field: &'static str,
        received: String,
        current: String,
    },
    InUse {
        kind: ObjectKind,
        name: String,
        vhost: String,
    },
    NotEmpty {
        queue: String,
        vhost: String,
    },
    UnknownDeliveryTag(u64),
    DefaultExchange,
    ReservedPrefix {
        kind: ObjectKind,
        name: String,
    },
    /// A queue or exchange name with a control character (a newline, NUL, DEL, ...):
    /// refused at creation so that no such name reaches logs, tools or other clients.
    /// `name` is the name with its control characters escaped.
    ControlCharacter {
        kind: ObjectKind,
        name: String,
    },
    ExclusiveConsumer {
        queue: String,
        vhost: String,
    },
    ConsumerTagInUse(String),
    InternalExchange {
        name: String,
        vhost: String,
    },
    InvalidArgument {
        argument: String,
        reason: String,
    },
    /// A `queue.declare` argument RabbitMQ refuses, in RabbitMQ's words.
    QueueArgument {
        queue: String,
        vhost: String,
        error: QueueArgError,
    },
    /// What a stream refuses (a declaration's properties, a consumer's channel,
    /// `basic.get`, `queue.purge`), in RabbitMQ's words: 406, or 540 (which closes the
    /// connection) where RabbitMQ raises `not_implemented`.
    Stream {
        refusal: StreamRefusal,
        queue: String,
        vhost: String,
    },
    UnknownExchangeType(String),
    /// An `x-federation-upstream` declaration RabbitMQ refuses, in RabbitMQ's words.
    UpstreamArgument {
        exchange: String,
        vhost: String,
        /// Boxed: the inequivalence evidence would make every `ChannelError` larger.
        error: Box<UpstreamArgError>,
    },
    /// A published `expiration` property that is not a TTL: RabbitMQ's
    /// `check_expiration_header` text, with its reason term.
    InvalidExpiration {
        value: String,
        reason: String,
    },
    /// A publish whose `user-id` property names another user (RabbitMQ's validated
    /// user-id; only users tagged `impersonator` may).
    UserIdMismatch {
        claimed: String,
        user: String,
    },
    MessageTooLarge {
        size: u64,
        max: u64,
    },
    TxNotSelected,
    TxTooLarge {
        max: usize,
    },
    ConfirmInTx,
    TxInConfirm,
    /// The slow-consumer policy closed this channel.
    ConsumingTooSlow,
    /// The channel went on publishing for this long after flow control stopped it, on a
    /// connection the broker could not stop reading (it holds unacknowledged deliveries).
    FlowControlIgnored {
        millis: u64,
    },
    /// Direct reply-to refused an operation, in `rabbit_channel`'s words.
    DirectReply(DirectReplyRefusal),
    /// Something the broker could not do for an internal reason (shutting down).
    Internal(String),
    /// The user lacks a permission on the resource (rabbit_access_control's text).
    AccessRefused {
        permission: &'static str,
        kind: ObjectKind,
        name: String,
        vhost: String,
        user: String,
    },
    /// A configured limit (queues per vhost, bindings per exchange, consumers per
    /// channel) refused the operation.
    Limit(super::limit::LimitRefusal),
}

/// Why direct reply-to (`amq.rabbitmq.reply-to`) refused an operation: 406
/// PRECONDITION_FAILED with `rabbit_channel`'s texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectReplyRefusal {
    /// `basic.consume` on the pseudo-queue without no-ack.
    ManualAck,
    /// A second reply consumer on one channel.
    AlreadySet,
    /// A publish with `reply_to = amq.rabbitmq.reply-to` on a channel without one.
    NoConsumer,
}

impl ChannelError {
    pub fn code(&self) -> ReplyCode {
        match self {
            ChannelError::NotFound { .. } => ReplyCode::NotFound,
            ChannelError::ExclusiveLocked { .. } => ReplyCode::ResourceLocked,
            ChannelError::Inequivalent { .. }
            | ChannelError::InUse { .. }
            | ChannelError::NotEmpty { .. }
            | ChannelError::UnknownDeliveryTag(_)
            | ChannelError::InvalidArgument { .. }
            | ChannelError::QueueArgument { .. }
            | ChannelError::MessageTooLarge { .. }
            | ChannelError::TxNotSelected
            | ChannelError::TxTooLarge { .. }
            | ChannelError::ConfirmInTx
            | ChannelError::TxInConfirm
            | ChannelError::UnknownExchangeType(_)
            | ChannelError::UpstreamArgument { .. }
            | ChannelError::InvalidExpiration { .. }
            | ChannelError::UserIdMismatch { .. }
            | ChannelError::ControlCharacter { .. }
            | ChannelError::DirectReply(_) => ReplyCode::PreconditionFailed,
            ChannelError::DefaultExchange
            | ChannelError::ReservedPrefix { .. }
            | ChannelError::ExclusiveConsumer { .. }
            | ChannelError::InternalExchange { .. } => ReplyCode::AccessRefused,
            ChannelError::ConsumerTagInUse(_) => ReplyCode::CommandInvalid,
            ChannelError::ConsumingTooSlow | ChannelError::FlowControlIgnored { .. } => {
                ReplyCode::ResourceError
            }
            ChannelError::Internal(_) => ReplyCode::InternalError,
            ChannelError::Stream { refusal, .. } if refusal.not_implemented() => {
                ReplyCode::NotImplemented
            }
            ChannelError::Stream { .. } => ReplyCode::PreconditionFailed,
            ChannelError::AccessRefused { .. } => ReplyCode::AccessRefused,
            ChannelError::Limit(refusal) => refusal.code(),
        }
    }

    /// The promotion rule, the one place that decides a channel error's blast radius:
    /// an error whose code RabbitMQ treats as hard on a channel (503 COMMAND_INVALID, 530
    /// NOT_ALLOWED, 540 NOT_IMPLEMENTED, 541 INTERNAL_ERROR) closes the connection, as
    /// this connection error with the same text; any other closes only the channel
    /// (`None`). The spec classes 506 RESOURCE_ERROR as hard too, but a slow consumer is
    /// deliberately a channel close (the connection stays usable), so the class alone
    /// does not decide. sluice has no 541 connection error: an internal failure closes
    /// the connection with 320 CONNECTION_FORCED.
    pub fn promoted(&self) -> Option<ConnectionError> {
        let text = || self.to_string();
        match self.code() {
            ReplyCode::CommandInvalid => Some(ConnectionError::CommandInvalid(text())),
            ReplyCode::NotAllowed => Some(ConnectionError::NotAllowed(text())),
            ReplyCode::NotImplemented => Some(ConnectionError::NotImplemented(text())),
            ReplyCode::InternalError => Some(ConnectionError::Forced(text())),
            _ => None,
        }
    }

    /// Whether this error closes the connection rather than the channel
    /// ([`ChannelError::promoted`]).
    pub fn closes_connection(&self) -> bool {
        self.promoted().is_some()
    }

    /// The reply text sent on the wire.
    pub fn reply_text(&self) -> String {
        match self {
            ChannelError::ConsumingTooSlow => self.to_string(),
            _ => format!("{} - {}", self.code().name(), self),
        }
    }
}

/// An argument's value as `rabbit_misc:assert_args_equivalence` prints it: `none` when
/// absent, else "the value 'V' of type 'T'".
fn shown(value: Option<&ArgShown>) -> String {
    value.map_or_else(|| "none".to_owned(), ToString::to_string)
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::NotFound { kind, name, vhost } => {
                write!(f, "no {kind} '{name}' in vhost '{vhost}'")
            }
            ChannelError::ExclusiveLocked { queue, vhost } => write!(
                f,
                "cannot obtain exclusive access to locked queue '{queue}' in vhost '{vhost}'"
            ),
            ChannelError::Inequivalent {
                kind,
                name,
                vhost,
                field,
                received,
                current,
            } => write!(
                f,
                "inequivalent arg '{field}' for {kind} '{name}' in vhost '{vhost}': received '{received}' but current is '{current}'"
            ),
            ChannelError::InUse { kind, name, vhost } => {
                write!(f, "{kind} '{name}' in vhost '{vhost}' in use")
            }
            ChannelError::NotEmpty { queue, vhost } => {
                write!(f, "queue '{queue}' in vhost '{vhost}' not empty")
            }
            ChannelError::UnknownDeliveryTag(tag) => write!(f, "unknown delivery tag {tag}"),
            ChannelError::DefaultExchange => {
                f.write_str("operation not permitted on the default exchange")
            }
            ChannelError::ReservedPrefix { kind, name } => {
                write!(f, "{kind} name '{name}' contains reserved prefix 'amq.*'")
            }
            ChannelError::ControlCharacter { kind, name } => {
                write!(f, "{kind} name '{name}' contains a control character")
            }
            ChannelError::ExclusiveConsumer { queue, vhost } => {
                write!(f, "queue '{queue}' in vhost '{vhost}' in exclusive use")
            }
            ChannelError::ConsumerTagInUse(tag) => {
                write!(f, "consumer tag '{tag}' already in use on this channel")
            }
            ChannelError::InternalExchange { name, vhost } => write!(
                f,
                "cannot publish to internal exchange '{name}' in vhost '{vhost}'"
            ),
            ChannelError::InvalidArgument { argument, reason } => {
                write!(f, "invalid arg '{argument}': {reason}")
            }
            ChannelError::InvalidExpiration { value, reason } => {
                write!(f, "invalid expiration '{value}': {reason}")
            }
            ChannelError::UserIdMismatch { claimed, user } => write!(
                f,
                "user_id property set to '{claimed}' but authenticated user was '{user}'"
            ),
            ChannelError::QueueArgument {
                queue,
                vhost,
                error,
            } => match error {
                QueueArgError::DeadLetterExchangeType(t) => write!(
                    f,
                    "invalid type '{t}' for arg 'x-dead-letter-exchange' in queue '{queue}' in vhost '{vhost}'"
                ),
                QueueArgError::Invalid { argument, reason } => write!(
                    f,
                    "invalid arg '{argument}' for queue '{queue}' in vhost '{vhost}': {reason}"
                ),
                QueueArgError::WrongQueueType {
                    argument,
                    queue_type,
                } => write!(
                    f,
                    "invalid arg '{argument}' for queue '{queue}' in vhost '{vhost}' of queue type {queue_type}"
                ),
            },
            ChannelError::Stream {
                refusal,
                queue,
                vhost,
            } => f.write_str(&refusal.text(queue, vhost)),
            ChannelError::UnknownExchangeType(kind) => {
                write!(f, "unknown exchange type '{kind}'")
            }
            ChannelError::UpstreamArgument {
                exchange,
                vhost,
                error,
            } => match error.as_ref() {
                UpstreamArgError::Missing => write!(f, "Argument {MAX_HOPS_ARG} missing"),
                UpstreamArgError::NotLong => {
                    write!(f, "Argument {MAX_HOPS_ARG} must be of type long")
                }
                UpstreamArgError::Inequivalent { received, current } => write!(
                    f,
                    "inequivalent arg '{MAX_HOPS_ARG}' for exchange '{exchange}' in vhost '{vhost}': received {} but current is {}",
                    shown(received.as_ref()),
                    shown(current.as_ref()),
                ),
            },
            ChannelError::MessageTooLarge { size, max } => write!(
                f,
                "message size {size} is larger than configured max size {max}"
            ),
            ChannelError::TxNotSelected => f.write_str("channel is not transactional"),
            ChannelError::TxTooLarge { max } => write!(
                f,
                "transaction holds more than {max} operations; commit more often"
            ),
            ChannelError::ConfirmInTx => {
                f.write_str("cannot switch from tx to confirm mode")
            }
            ChannelError::TxInConfirm => {
                f.write_str("cannot switch from confirm to tx mode")
            }
            ChannelError::ConsumingTooSlow => f.write_str("Consuming too slow."),
            ChannelError::DirectReply(refusal) => f.write_str(match refusal {
                DirectReplyRefusal::ManualAck => "reply consumer cannot acknowledge",
                DirectReplyRefusal::AlreadySet => "reply consumer already set",
                DirectReplyRefusal::NoConsumer => "fast reply consumer does not exist",
            }),
            ChannelError::FlowControlIgnored { millis } => write!(
                f,
                "channel kept publishing for {} ms after flow control stopped it; publish and consume on separate connections",
                millis
            ),
            ChannelError::Internal(why) => f.write_str(why),
            ChannelError::AccessRefused {
                permission,
                kind,
                name,
                vhost,
                user,
            } => write!(
                f,
                "{permission} access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
            ),
            ChannelError::Limit(refusal) => write!(f, "{refusal}"),
        }
    }
}

/// The method a `channel.close` or `connection.close` answers, as its class and method
/// id; [`MethodId::NONE`] (0, 0) when no method caused the close (a frame error, a
/// timer, the broker itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MethodId {
    pub class_id: u16,
    pub method_id: u16,
}

impl MethodId {
    /// No method caused the close.
    pub const NONE: MethodId = MethodId {
        class_id: 0,
        method_id: 0,
    };

    pub const fn new(class_id: u16, method_id: u16) -> MethodId {
        MethodId {
            class_id,
            method_id,
        }
    }

    /// The method a decoded frame carried.
    pub fn of(method: &Method) -> MethodId {
        MethodId::new(method.class_id(), method.method_id())
    }
}

/// A connection error together with the method that caused it: everything
/// `connection.close` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardError {
    pub error: ConnectionError,
    pub cause: MethodId,
}

/// A hard error: closes the whole connection with `connection.close`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionError {
    /// A frame that could not be split: bad end octet, unknown type, too large.
    Frame(String),
    /// A method or header whose arguments could not be decoded.
    Syntax(String),
    /// A method not valid in the current state (e.g. on a channel that is not open).
    CommandInvalid(String),
    /// channel.open on an open channel, channel number above channel-max, …
    Channel(String),
    /// A frame arriving out of order (content without publish, method inside content…).
    UnexpectedFrame(String),
    /// Authentication failed.
    LoginRefused {
        mechanism: String,
    },
    /// The virtual host does not exist.
    VhostNotFound(String),
    /// The user may not connect from this address.
    LoopbackOnly {
        user: String,
    },
    /// A negotiated value out of range.
    NotAllowed(String),
    NotImplemented(String),
    /// The broker is shutting down, or an operator closed the connection.
    Forced(String),
    /// No heartbeat from the peer within two intervals.
    MissedHeartbeats {
        seconds: u16,
    },
    /// The user has no permissions on the vhost it opens.
    VhostRefused {
        vhost: String,
        user: String,
    },
    /// A configured connection or channel limit refused the operation.
    Limit(super::limit::LimitRefusal),
}

impl ConnectionError {
    pub fn code(&self) -> ReplyCode {
        match self {
            ConnectionError::Frame(_) => ReplyCode::FrameError,
            ConnectionError::Syntax(_) => ReplyCode::SyntaxError,
            ConnectionError::CommandInvalid(_) => ReplyCode::CommandInvalid,
            ConnectionError::Channel(_) => ReplyCode::ChannelError,
            ConnectionError::UnexpectedFrame(_) => ReplyCode::UnexpectedFrame,
            ConnectionError::LoginRefused { .. } | ConnectionError::LoopbackOnly { .. } => {
                ReplyCode::AccessRefused
            }
            ConnectionError::VhostNotFound(_)
            | ConnectionError::VhostRefused { .. }
            | ConnectionError::NotAllowed(_) => ReplyCode::NotAllowed,
            ConnectionError::NotImplemented(_) => ReplyCode::NotImplemented,
            ConnectionError::Forced(_) | ConnectionError::MissedHeartbeats { .. } => {
                ReplyCode::ConnectionForced
            }
            ConnectionError::Limit(refusal) => refusal.code(),
        }
    }

    pub fn reply_text(&self) -> String {
        format!("{} - {}", self.code().name(), self)
    }

    /// This error as the answer to `cause`.
    pub fn on(self, cause: MethodId) -> HardError {
        HardError { error: self, cause }
    }

    /// A method frame whose arguments could not be decoded: a short string that is not
    /// UTF-8 is RabbitMQ's `frame_error` "Malformed UTF-8 in shortstr"; anything else is a
    /// syntax error.
    pub fn undecodable(e: &crate::protocol::codec::DecodeError) -> ConnectionError {
        match e {
            crate::protocol::codec::DecodeError::MalformedUtf8 { .. } => {
                ConnectionError::Frame("Malformed UTF-8 in shortstr".to_owned())
            }
            other => ConnectionError::Syntax(other.to_string()),
        }
    }

    /// A heartbeat frame that carries a payload: rabbit_reader's `frame_error` for an
    /// `unknown_frame`, `type 8, all octets = <<...>>: unknown_frame` (the first 16
    /// octets when longer).
    pub fn heartbeat_payload(payload: &[u8]) -> ConnectionError {
        let (which, shown) = if payload.len() <= 16 {
            ("all", payload)
        } else {
            ("first 16", &payload[..16])
        };
        ConnectionError::Frame(format!(
            "type 8, {which} octets = {}: unknown_frame",
            erlang_term(shown, ErlangShape::Binary)
        ))
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionError::Frame(why)
            | ConnectionError::Syntax(why)
            | ConnectionError::CommandInvalid(why)
            | ConnectionError::Channel(why)
            | ConnectionError::UnexpectedFrame(why)
            | ConnectionError::NotAllowed(why)
            | ConnectionError::NotImplemented(why)
            | ConnectionError::Forced(why) => f.write_str(why),
            ConnectionError::LoginRefused { mechanism } => write!(
                f,
                "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
            ),
            ConnectionError::VhostNotFound(vhost) => write!(f, "vhost '{vhost}' not found"),
            // rabbit_reader's text for a refused secret (it names no user).
            ConnectionError::LoopbackOnly { user } => write!(
                f,
                "user '{user}' can only connect via localhost"
            ),
            ConnectionError::MissedHeartbeats { seconds } => write!(
                f,
                "missed heartbeats from client, timeout: {seconds}s"
            ),
            ConnectionError::VhostRefused { vhost, user } => write!(
                f,
                "access to vhost '{vhost}' refused for user '{user}'"
            ),
            ConnectionError::Limit(refusal) => write!(f, "{refusal}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_texts() {
        let e = ChannelError::NotFound {
            kind: ObjectKind::Queue,
            name: "q".into(),
            vhost: "/".into(),
        };
        assert_eq!(e.code().code(), 404);
        assert_eq!(e.reply_text(), "NOT_FOUND - no queue 'q' in vhost '/'");
        assert_eq!(ChannelError::ConsumingTooSlow.code().code(), 506);
        assert_eq!(
            ChannelError::ConsumingTooSlow.reply_text(),
            "Consuming too slow."
        );
        for (refusal, text) in [
            (
                DirectReplyRefusal::ManualAck,
                "PRECONDITION_FAILED - reply consumer cannot acknowledge",
            ),
            (
                DirectReplyRefusal::AlreadySet,
                "PRECONDITION_FAILED - reply consumer already set",
            ),
            (
                DirectReplyRefusal::NoConsumer,
                "PRECONDITION_FAILED - fast reply consumer does not exist",
            ),
        ] {
            let e = ChannelError::DirectReply(refusal);
            assert_eq!((e.code().code(), e.reply_text().as_str()), (406, text));
        }
        let e = ConnectionError::VhostNotFound("nosuch".into());
        assert_eq!(e.code().code(), 530);
        assert_eq!(e.reply_text(), "NOT_ALLOWED - vhost 'nosuch' not found");
        let e = ChannelError::Inequivalent {
            kind: ObjectKind::Exchange,
            name: "x".into(),
            vhost: "/".into(),
            field: "type",
            received: "fanout".into(),
            current: "direct".into(),
        };
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'"
        );
        let e = ChannelError::QueueArgument {
            error: QueueArgError::Invalid {
                argument: "x-max-priority",
                reason: crate::policy::queue_args::Reason::MaxValueExceeded(256),
            },
            queue: "q".into(),
            vhost: "/".into(),
        };
        assert_eq!(e.code().code(), 406);
        assert!(!e.closes_connection());
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"
        );
    }

    #[test]
    fn stream_refusals_are_406_or_540_with_rabbitmqs_texts() {
        let stream = |refusal| ChannelError::Stream {
            refusal,
            queue: "s".into(),
            vhost: "/".into(),
        };
        let e = stream(StreamRefusal::PrefetchNotSet);
        assert!(!e.closes_connection());
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - consumer prefetch count is not set for stream queue 's' in vhost '/'"
        );
        let e = stream(StreamRefusal::Get);
        assert_eq!(
            e.promoted().map(|c| c.reply_text()),
            Some(
                "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's' in vhost '/'"
                    .to_owned()
            )
        );
        let e = ChannelError::QueueArgument {
            error: QueueArgError::WrongQueueType {
                argument: "x-message-ttl".into(),
                queue_type: "rabbit_stream_queue",
            },
            queue: "s".into(),
            vhost: "/".into(),
        };
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 's' in vhost '/' of queue type rabbit_stream_queue"
        );
    }

    #[test]
    fn heartbeat_payload_reads_like_rabbit_reader() {
        assert_eq!(
            ConnectionError::heartbeat_payload(b"abc").reply_text(),
            "FRAME_ERROR - type 8, all octets = <<\"abc\">>: unknown_frame"
        );
        assert_eq!(
            ConnectionError::heartbeat_payload(&[1, 2, 3]).reply_text(),
            "FRAME_ERROR - type 8, all octets = <<1,2,3>>: unknown_frame"
        );
        assert_eq!(
            ConnectionError::heartbeat_payload(&[0; 20]).to_string(),
            "type 8, first 16 octets = <<0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0>>: unknown_frame"
        );
        let e = ChannelError::InvalidExpiration {
            value: "abc".into(),
            reason: "no_integer".into(),
        };
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - invalid expiration 'abc': no_integer"
        );
    }

    #[test]
    fn hard_channel_errors_are_promoted_with_their_text() {
        let e = ChannelError::ConsumerTagInUse("t".into());
        assert_eq!(
            e.promoted(),
            Some(ConnectionError::CommandInvalid(e.to_string()))
        );
        let e = ChannelError::Internal("vhost gone".into());
        assert_eq!(
            e.promoted(),
            Some(ConnectionError::Forced("vhost gone".into()))
        );
        assert_eq!(ChannelError::ConsumingTooSlow.promoted(), None);
        assert_eq!(ChannelError::DefaultExchange.promoted(), None);
        assert_eq!(MethodId::default(), MethodId::NONE);
    }

    #[test]
    fn hard_and_soft_classes_match_the_spec() {
        let hard = [
            ConnectionError::Frame(String::new()),
            ConnectionError::Syntax(String::new()),
            ConnectionError::CommandInvalid(String::new()),
            ConnectionError::Channel(String::new()),
            ConnectionError::UnexpectedFrame(String::new()),
            ConnectionError::NotAllowed(String::new()),
            ConnectionError::NotImplemented(String::new()),
            ConnectionError::Forced(String::new()),
        ];
        for e in hard {
            assert!(e.code().is_hard(), "{:?}", e.code());
        }
        let soft = [
            ChannelError::DefaultExchange,
            ChannelError::UnknownDeliveryTag(1),
            ChannelError::ExclusiveLocked {
                queue: String::new(),
                vhost: String::new(),
            },
        ];
        for e in soft {
            assert!(!e.code().is_hard(), "{:?}", e.code());
            assert!(!e.closes_connection());
        }
        // 506 is a hard code in the spec, but a slow consumer only loses its channel.
        assert!(!ChannelError::ConsumingTooSlow.closes_connection());
        assert!(ChannelError::ConsumerTagInUse("t".into()).closes_connection());
        // RabbitMQ 3.13.3+ (rabbit_exchange:check_type): 406 on the channel.
        let e = ChannelError::UnknownExchangeType("no-such".into());
        assert!(!e.closes_connection());
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - unknown exchange type 'no-such'"
        );
        // rabbit_amqqueue: "invalid arg '~ts' for ~ts: ~255p".
        let e = ChannelError::QueueArgument {
            queue: "q".into(),
            vhost: "/".into(),
            error: QueueArgError::Invalid {
                argument: "x-message-ttl",
                reason: crate::policy::queue_args::Reason::ValueNegative(-1),
            },
        };
        assert!(!e.closes_connection());
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
        );
    }

    #[test]
    fn federation_upstream_argument_texts_are_rabbitmqs() {
        use crate::protocol::{FieldValue, LongStr};
        let e = |error| ChannelError::UpstreamArgument {
            exchange: "federation: x -> a".into(),
            vhost: "/".into(),
            error: Box::new(error),
        };
        assert_eq!(
            e(UpstreamArgError::Missing).reply_text(),
            "PRECONDITION_FAILED - Argument x-max-hops missing"
        );
        assert_eq!(
            e(UpstreamArgError::NotLong).reply_text(),
            "PRECONDITION_FAILED - Argument x-max-hops must be of type long"
        );
        let inequivalent = e(UpstreamArgError::Inequivalent {
            received: Some(ArgShown::of(&FieldValue::I32(2))),
            current: Some(ArgShown::of(&FieldValue::I64(1))),
        });
        assert_eq!(inequivalent.code(), ReplyCode::PreconditionFailed);
        assert_eq!(
            inequivalent.reply_text(),
            "PRECONDITION_FAILED - inequivalent arg 'x-max-hops' for exchange 'federation: x -> a' in vhost '/': received the value '2' of type 'signedint' but current is the value '1' of type 'long'"
        );
        assert_eq!(
            e(UpstreamArgError::Inequivalent {
                received: None,
                current: Some(ArgShown::of(&FieldValue::LongStr(LongStr::from("two")))),
            })
            .reply_text(),
            "PRECONDITION_FAILED - inequivalent arg 'x-max-hops' for exchange 'federation: x -> a' in vhost '/': received none but current is the value 'two' of type 'longstr'"
        );
    }
}
