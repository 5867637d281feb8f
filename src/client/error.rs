//! Owns: [`ClientError`], every way a client operation can fail, typed by blast
//! radius: a channel error ([`ClientError::ChannelClosed`]) leaves the connection usable;
//! a connection error ([`ClientError::ConnectionClosed`], I/O, protocol violations)
//! ends every channel of that connection.
//! Does not: decide when to close anything (that is the connection task in `io.rs`).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::protocol::frame::FrameError;
use crate::protocol::DecodeError;

/// Why a client operation failed. Cheap to clone (one error is handed to every waiter
/// of a closed channel or connection).
#[derive(Clone, Debug)]
pub enum ClientError {
    /// The `amqp://` URL could not be parsed.
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The socket failed (connect, read or write), or the peer went away.
    Io(Arc<io::Error>),
    /// The connection handshake did not finish within the connect timeout.
    HandshakeTimeout(Duration),
    /// The server does not offer the mechanism the options chose
    /// ([`super::connection::SaslMechanism`]).
    UnsupportedMechanism {
        /// The mechanism asked for (`PLAIN` or `EXTERNAL`).
        wanted: &'static str,
        /// The mechanisms the server offered.
        offered: String,
    },
    /// The server sent bytes that do not decode.
    Decode(DecodeError),
    /// The server sent a malformed frame.
    Frame(FrameError),
    /// The server sent a method or frame that is not valid at this point.
    UnexpectedFrame {
        /// The channel it arrived on.
        channel: u16,
        /// What arrived (method name or frame kind).
        got: &'static str,
    },
    /// The server (or this client, code 200) closed the connection.
    ConnectionClosed {
        /// The reply code (e.g. 320 `CONNECTION_FORCED`, 403 `ACCESS_REFUSED`).
        code: u16,
        /// The reply text.
        text: String,
        /// The class of the method that caused it (0 if none).
        class_id: u16,
        /// The method that caused it (0 if none).
        method_id: u16,
    },
    /// The server (or this client, code 200) closed the channel. The connection and
    /// its other channels stay usable.
    ChannelClosed {
        /// The reply code (e.g. 404 `NOT_FOUND`, 506 `RESOURCE_ERROR`).
        code: u16,
        /// The reply text (e.g. `Consuming too slow.`).
        text: String,
        /// The class of the method that caused it (0 if none).
        class_id: u16,
        /// The method that caused it (0 if none).
        method_id: u16,
    },
    /// Nothing arrived from the server for two heartbeat intervals.
    HeartbeatTimeout(Duration),
    /// A publish waited this long under broker flow control and was not sent. The
    /// channel stays open and a transaction in progress is not rolled back.
    FlowControlTimeout {
        /// How long the publish waited.
        waited: Duration,
    },
    /// The consumer was cancelled (by this client or by the server).
    ConsumerCancelled {
        /// Its consumer tag.
        consumer_tag: String,
    },
    /// Every channel number up to the negotiated maximum is in use.
    NoFreeChannel {
        /// The negotiated `channel-max`.
        channel_max: u16,
    },
    /// A confirm was asked for on a channel not in confirm mode.
    NotInConfirmMode,
    /// The server answered with a method other than the expected reply.
    UnexpectedReply {
        /// The reply expected.
        expected: &'static str,
        /// The method received.
        got: &'static str,
    },
}

impl ClientError {
    pub(crate) fn io(e: io::Error) -> ClientError {
        ClientError::Io(Arc::new(e))
    }

    /// The error used when the connection task is gone without leaving a reason.
    pub(crate) fn disconnected() -> ClientError {
        ClientError::io(io::Error::new(
            io::ErrorKind::NotConnected,
            "connection task ended",
        ))
    }

    /// `true` for errors that end the whole connection.
    pub fn is_connection_error(&self) -> bool {
        !matches!(
            self,
            ClientError::ChannelClosed { .. }
                | ClientError::FlowControlTimeout { .. }
                | ClientError::ConsumerCancelled { .. }
                | ClientError::NoFreeChannel { .. }
                | ClientError::NotInConfirmMode
                | ClientError::InvalidUrl { .. }
                | ClientError::UnexpectedReply { .. }
        )
    }

    /// The AMQP reply code for a channel or connection close.
    pub fn reply_code(&self) -> Option<u16> {
        match self {
            ClientError::ConnectionClosed { code, .. }
            | ClientError::ChannelClosed { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::InvalidUrl { url, reason } => write!(f, "invalid URL {url:?}: {reason}"),
            ClientError::Io(e) => write!(f, "I/O error: {e}"),
            ClientError::HandshakeTimeout(d) => {
                write!(f, "connection handshake did not finish within {d:?}")
            }
            ClientError::UnsupportedMechanism { wanted, offered } => {
                write!(
                    f,
                    "server offers no {wanted} authentication (offered: {offered})"
                )
            }
            ClientError::Decode(e) => write!(f, "undecodable data from server: {e}"),
            ClientError::Frame(e) => write!(f, "malformed frame from server: {e}"),
            ClientError::UnexpectedFrame { channel, got } => {
                write!(f, "unexpected {got} from server on channel {channel}")
            }
            ClientError::ConnectionClosed {
                code,
                text,
                class_id,
                method_id,
            } => write!(
                f,
                "connection closed: {code} {text} (class {class_id}, method {method_id})"
            ),
            ClientError::ChannelClosed {
                code,
                text,
                class_id,
                method_id,
            } => write!(
                f,
                "channel closed: {code} {text} (class {class_id}, method {method_id})"
            ),
            ClientError::HeartbeatTimeout(d) => {
                write!(f, "no data from server for {d:?} (missed heartbeats)")
            }
            ClientError::FlowControlTimeout { waited } => write!(
                f,
                "message not sent: broker enforced flow control for {}s",
                fmt_secs(*waited)
            ),
            ClientError::ConsumerCancelled { consumer_tag } => {
                write!(f, "consumer {consumer_tag:?} cancelled")
            }
            ClientError::NoFreeChannel { channel_max } => {
                write!(f, "all {channel_max} channels are in use")
            }
            ClientError::NotInConfirmMode => f.write_str("channel is not in confirm mode"),
            ClientError::UnexpectedReply { expected, got } => {
                write!(f, "expected {expected} from server, got {got}")
            }
        }
    }
}

impl std::error::Error for ClientError {}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> ClientError {
        ClientError::io(e)
    }
}

impl From<DecodeError> for ClientError {
    fn from(e: DecodeError) -> ClientError {
        ClientError::Decode(e)
    }
}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> ClientError {
        ClientError::Frame(e)
    }
}

/// `d` in seconds as the WARN line prints it: whole seconds as `5`, anything else to
/// the millisecond with trailing zeros dropped (`0.1`, `2.25`).
pub(crate) fn fmt_secs(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        return (ms / 1000).to_string();
    }
    let s = format!("{}.{:03}", ms / 1000, ms % 1000);
    s.trim_end_matches('0').to_string()
}
