//! Owns: RabbitMQ's rules for the arguments of a classic `queue.declare`. They say which
//! `x-queue-type` values pass: `classic` (or none, `""`, `"undefined"`) and `stream`
//! (whose arguments `policy::stream_args` checks). `quorum` is refused as not available
//! in sluice, and any other value as RabbitMQ refuses it. They also hold the checks `rabbit_amqqueue` runs on `x-expires`,
//! `x-message-ttl`, `x-dead-letter-exchange`, `x-dead-letter-routing-key`,
//! `x-max-length`, `x-max-length-bytes`, `x-max-priority` and `x-overflow`, in
//! RabbitMQ's order. Each reason is rendered as RabbitMQ renders its Erlang error term
//! (`invalid arg '~ts' for ~ts: ~255p`), so the 406 text matches RabbitMQ's.
//!
//! Does not: apply the arguments (the queue and the other policy modules do), know the
//! queue or the vhost (the control plane puts them into the text), or judge sluice's own
//! arguments (`x-slow-consumer-*`, `x-qpid-*`, read through `policy::args`). Arguments
//! that neither RabbitMQ nor sluice knows are ignored, as RabbitMQ ignores them.
//!
//! Sources (rabbitmq-server, `deps/rabbit/src`): `rabbit_channel.erl` (queue.declare:
//! the type of `x-dead-letter-exchange` is checked before anything else),
//! `rabbit_amqqueue.erl` (`check_declare_arguments`, `declare_args/0`, the `check_*_arg`
//! functions), `rabbit_misc:check_expiry/1` (at most ten years of milliseconds) and
//! `rabbit_binary_parser` (the names of the field types).

use std::fmt;

use crate::protocol::{FieldTable, FieldValue};

/// Declare-argument names.
pub mod arg {
    pub const QUEUE_TYPE: &str = "x-queue-type";
    pub const EXPIRES: &str = "x-expires";
    pub const MESSAGE_TTL: &str = "x-message-ttl";
    pub const DEAD_LETTER_EXCHANGE: &str = "x-dead-letter-exchange";
    pub const DEAD_LETTER_ROUTING_KEY: &str = "x-dead-letter-routing-key";
    pub const MAX_LENGTH: &str = "x-max-length";
    pub const MAX_LENGTH_BYTES: &str = "x-max-length-bytes";
    pub const MAX_PRIORITY: &str = "x-max-priority";
    pub const OVERFLOW: &str = "x-overflow";
    pub const SINGLE_ACTIVE_CONSUMER: &str = "x-single-active-consumer";
    /// On `basic.consume`.
    pub const CONSUMER_PRIORITY: &str = "x-priority";
}

/// `rabbit_misc:check_expiry/1`: ten years in milliseconds.
const MAX_EXPIRY_MS: i64 = 315_360_000_000;
/// The highest `x-max-priority` RabbitMQ accepts (`?MAX_SUPPORTED_PRIORITY`).
pub const MAX_SUPPORTED_PRIORITY: i64 = 255;
/// `?KNOWN_OVERFLOW_MODES`, compared byte for byte.
const OVERFLOW_MODES: [&str; 3] = ["drop-head", "reject-publish", "reject-publish-dlx"];
/// Queue types RabbitMQ has and sluice does not.
const OTHER_QUEUE_TYPES: [&str; 1] = ["quorum"];

/// Why RabbitMQ refuses a declare argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueArgError {
    /// `x-dead-letter-exchange` is not a long string. `rabbit_channel` checks this first,
    /// with its own text: `invalid type '~ts' for arg '~ts' in ~ts`.
    DeadLetterExchangeType(&'static str),
    /// A `check_*_arg` refusal: `invalid arg '~ts' for ~ts: ~255p`.
    Invalid {
        argument: &'static str,
        reason: Reason,
    },
    /// An argument of another queue type (`check_arguments_key`): `invalid arg '~ts'
    /// for ~ts of queue type ~ts`.
    WrongQueueType {
        argument: String,
        queue_type: &'static str,
    },
}

/// The Erlang error term of a `check_*_arg` refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `"expected integer, got T"` (a string, so printed in quotes).
    ExpectedInteger(&'static str),
    /// `{value_negative,N}`.
    ValueNegative(i64),
    /// `{value_zero,0}`.
    ValueZero,
    /// `{value_too_large,N}`.
    ValueTooLarge(i64),
    /// `{max_value_exceeded,N}`.
    MaxValueExceeded(i64),
    /// `{unacceptable_type,T}`.
    UnacceptableType(&'static str),
    /// `invalid_overflow`.
    InvalidOverflow,
    /// `routing_key_but_no_dlx_defined`.
    RoutingKeyButNoDlx,
    /// `"unsupported queue type '…'"`: a type RabbitMQ does not know either.
    UnsupportedQueueType(String),
    /// A RabbitMQ queue type sluice does not have (quorum), worded as RabbitMQ words an
    /// unknown one.
    NotInSluice(&'static str),
    /// `invalid_max_age` (`x-max-age`).
    InvalidMaxAge,
    /// `invalid_queue_locator_arg` (`x-queue-leader-locator`).
    InvalidQueueLocator,
    /// `{invalid_stream_offset_arg,{Type,Value}}` (`x-stream-offset`), the pair as
    /// Erlang prints it.
    InvalidStreamOffset(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ExpectedInteger(t) => {
                f.write_str(&erl_string(&format!("expected integer, got {t}")))
            }
            Reason::ValueNegative(n) => write!(f, "{{value_negative,{n}}}"),
            Reason::ValueZero => f.write_str("{value_zero,0}"),
            Reason::ValueTooLarge(n) => write!(f, "{{value_too_large,{n}}}"),
            Reason::MaxValueExceeded(n) => write!(f, "{{max_value_exceeded,{n}}}"),
            Reason::UnacceptableType(t) => write!(f, "{{unacceptable_type,{t}}}"),
            Reason::InvalidOverflow => f.write_str("invalid_overflow"),
            Reason::RoutingKeyButNoDlx => f.write_str("routing_key_but_no_dlx_defined"),
            Reason::UnsupportedQueueType(v) => {
                f.write_str(&erl_string(&format!("unsupported queue type '{v}'")))
            }
            Reason::NotInSluice(v) => f.write_str(&erl_string(&format!(
                "unsupported queue type '{v}': sluice has classic queues and streams only"
            ))),
            Reason::InvalidMaxAge => f.write_str("invalid_max_age"),
            Reason::InvalidQueueLocator => f.write_str("invalid_queue_locator_arg"),
            Reason::InvalidStreamOffset(pair) => write!(f, "{{invalid_stream_offset_arg,{pair}}}"),
        }
    }
}

/// Checks `args` as RabbitMQ checks a new classic queue's arguments, in its order.
pub fn validate(args: &FieldTable) -> Result<(), QueueArgError> {
    if let Some(v) = args.get(arg::DEAD_LETTER_EXCHANGE) {
        if !matches!(v, FieldValue::LongStr(_)) {
            return Err(QueueArgError::DeadLetterExchangeType(v.rabbit_type_name()));
        }
    }
    check(args, arg::QUEUE_TYPE, queue_type)?;
    if super::stream_args::is_stream(args) {
        return super::stream_args::validate_declare(args);
    }
    check(args, arg::EXPIRES, |v| match int(v)? {
        0 => Err(Reason::ValueZero),
        n => expiry(n),
    })?;
    check(args, arg::MESSAGE_TTL, |v| expiry(int(v)?))?;
    // The type was checked above; RabbitMQ accepts any exchange name here.
    check(args, arg::DEAD_LETTER_ROUTING_KEY, |v| match v {
        FieldValue::LongStr(_) if args.get(arg::DEAD_LETTER_EXCHANGE).is_none() => {
            Err(Reason::RoutingKeyButNoDlx)
        }
        FieldValue::LongStr(_) => Ok(()),
        other => Err(Reason::UnacceptableType(other.rabbit_type_name())),
    })?;
    check(args, arg::MAX_LENGTH, |v| non_negative(v).map(drop))?;
    check(args, arg::MAX_LENGTH_BYTES, |v| non_negative(v).map(drop))?;
    check(args, arg::MAX_PRIORITY, |v| match non_negative(v)? {
        n if n > MAX_SUPPORTED_PRIORITY => Err(Reason::MaxValueExceeded(n)),
        _ => Ok(()),
    })?;
    check(args, arg::OVERFLOW, |v| match v {
        FieldValue::LongStr(s) if OVERFLOW_MODES.iter().any(|m| m.as_bytes() == s.as_bytes()) => {
            Ok(())
        }
        FieldValue::LongStr(_) => Err(Reason::InvalidOverflow),
        other => Err(Reason::UnacceptableType(other.rabbit_type_name())),
    })?;
    check(args, arg::SINGLE_ACTIVE_CONSUMER, |v| match v {
        FieldValue::Bool(_) => Ok(()),
        other => Err(Reason::UnacceptableType(other.rabbit_type_name())),
    })
}

/// `x-priority` on `basic.consume` (`check_int_arg/2`): any integer, 0 when absent.
pub fn consumer_priority(args: &FieldTable) -> Result<i64, QueueArgError> {
    match args.get(arg::CONSUMER_PRIORITY) {
        None => Ok(0),
        Some(v) => int(v).map_err(|reason| QueueArgError::Invalid {
            argument: arg::CONSUMER_PRIORITY,
            reason,
        }),
    }
}

/// Whether `args` names the classic queue type (or none): what an existing queue, always
/// classic, is equivalent to.
pub fn is_classic(args: &FieldTable) -> bool {
    match args.get(arg::QUEUE_TYPE) {
        None => true,
        Some(FieldValue::LongStr(s)) => s.as_bytes() == b"classic",
        Some(_) => false,
    }
}

fn check(
    args: &FieldTable,
    argument: &'static str,
    rule: impl FnOnce(&FieldValue) -> Result<(), Reason>,
) -> Result<(), QueueArgError> {
    match args.get(argument) {
        None => Ok(()),
        Some(v) => rule(v).map_err(|reason| QueueArgError::Invalid { argument, reason }),
    }
}

/// `check_queue_type/2`, with the default type (none, `""`, `"undefined"`) as classic.
fn queue_type(v: &FieldValue) -> Result<(), Reason> {
    let FieldValue::LongStr(s) = v else {
        return Err(Reason::UnacceptableType(v.rabbit_type_name()));
    };
    match s.as_bytes() {
        b"" | b"undefined" | b"classic" | b"stream" => Ok(()),
        other => match OTHER_QUEUE_TYPES.iter().find(|t| t.as_bytes() == other) {
            Some(t) => Err(Reason::NotInSluice(t)),
            None => Err(Reason::UnsupportedQueueType(
                String::from_utf8_lossy(other).into_owned(),
            )),
        },
    }
}

/// `check_int_arg/2`: any of the integer field types.
fn int(v: &FieldValue) -> Result<i64, Reason> {
    v.as_i64()
        .ok_or_else(|| Reason::ExpectedInteger(v.rabbit_type_name()))
}

/// `check_non_neg_int_arg/2`.
fn non_negative(v: &FieldValue) -> Result<i64, Reason> {
    match int(v)? {
        n if n < 0 => Err(Reason::ValueNegative(n)),
        n => Ok(n),
    }
}

/// `rabbit_misc:check_expiry/1`.
fn expiry(n: i64) -> Result<(), Reason> {
    if n < 0 {
        Err(Reason::ValueNegative(n))
    } else if n > MAX_EXPIRY_MS {
        Err(Reason::ValueTooLarge(n))
    } else {
        Ok(())
    }
}

/// A string as Erlang's `~p` prints a character list: in double quotes with `"` and `\`
/// escaped, when every character is printable (Latin-1 printable, or one of the escapes
/// below); otherwise as the list of its code points. (`~255p` would also break a string
/// longer than the line; texts here are short.)
fn erl_string(s: &str) -> String {
    let escape = |c: char| match c {
        '"' => Some("\\\""),
        '\\' => Some("\\\\"),
        '\n' => Some("\\n"),
        '\r' => Some("\\r"),
        '\t' => Some("\\t"),
        '\u{0b}' => Some("\\v"),
        '\u{08}' => Some("\\b"),
        '\u{0c}' => Some("\\f"),
        '\u{1b}' => Some("\\e"),
        _ => None,
    };
    let printable = |c: char| matches!(u32::from(c), 32..=126 | 160..=255) || escape(c).is_some();
    if s.chars().all(printable) {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        for c in s.chars() {
            match escape(c) {
                Some(e) => out.push_str(e),
                None => out.push(c),
            }
        }
        out.push('"');
        out
    } else {
        let codes: Vec<String> = s.chars().map(|c| u32::from(c).to_string()).collect();
        format!("[{}]", codes.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LongStr;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        FieldTable::of(entries)
    }

    fn s(v: &str) -> FieldValue {
        FieldValue::LongStr(LongStr::from(v))
    }

    /// The reason text for one argument, or "ok".
    fn reason(entries: &[(&str, FieldValue)]) -> String {
        match validate(&table(entries)) {
            Ok(()) => "ok".into(),
            Err(QueueArgError::Invalid { argument, reason }) => format!("{argument}: {reason}"),
            Err(QueueArgError::DeadLetterExchangeType(t)) => format!("dlx type {t}"),
            Err(QueueArgError::WrongQueueType { argument, .. }) => {
                format!("{argument}: wrong type")
            }
        }
    }

    #[test]
    fn texts_are_rabbitmq_terms() {
        use FieldValue::*;
        assert_eq!(reason(&[("x-message-ttl", I32(0))]), "ok");
        assert_eq!(
            reason(&[("x-message-ttl", s("10"))]),
            "x-message-ttl: \"expected integer, got longstr\""
        );
        assert_eq!(
            reason(&[("x-message-ttl", I64(-1))]),
            "x-message-ttl: {value_negative,-1}"
        );
        assert_eq!(
            reason(&[("x-message-ttl", I64(315_360_000_001))]),
            "x-message-ttl: {value_too_large,315360000001}"
        );
        assert_eq!(reason(&[("x-expires", U8(0))]), "x-expires: {value_zero,0}");
        assert_eq!(
            reason(&[("x-expires", F64(1.5))]),
            "x-expires: \"expected integer, got double\""
        );
        assert_eq!(
            reason(&[("x-max-length", I16(-3))]),
            "x-max-length: {value_negative,-3}"
        );
        assert_eq!(reason(&[("x-max-length-bytes", U32(0))]), "ok");
        assert_eq!(
            reason(&[("x-max-priority", I32(256))]),
            "x-max-priority: {max_value_exceeded,256}"
        );
        assert_eq!(reason(&[("x-max-priority", I32(0))]), "ok");
        assert_eq!(
            reason(&[("x-overflow", s("Drop-Head"))]),
            "x-overflow: invalid_overflow"
        );
        assert_eq!(
            reason(&[("x-overflow", I32(1))]),
            "x-overflow: {unacceptable_type,signedint}"
        );
        assert_eq!(reason(&[("x-overflow", s("reject-publish-dlx"))]), "ok");
        assert_eq!(
            reason(&[("x-dead-letter-routing-key", s("k"))]),
            "x-dead-letter-routing-key: routing_key_but_no_dlx_defined"
        );
        assert_eq!(
            reason(&[
                ("x-dead-letter-exchange", s("dlx")),
                ("x-dead-letter-routing-key", Bool(true))
            ]),
            "x-dead-letter-routing-key: {unacceptable_type,bool}"
        );
        assert_eq!(
            reason(&[(
                "x-dead-letter-exchange",
                Bytes(bytes::Bytes::from_static(b"d"))
            )]),
            "dlx type binary"
        );
        assert_eq!(reason(&[("x-queue-type", s("classic"))]), "ok");
        assert_eq!(reason(&[("x-queue-type", s(""))]), "ok");
        assert_eq!(
            reason(&[("x-queue-type", s("quorum"))]),
            "x-queue-type: \"unsupported queue type 'quorum': sluice has classic queues and streams only\""
        );
        assert_eq!(
            reason(&[("x-queue-type", s("lazy\"q"))]),
            "x-queue-type: \"unsupported queue type 'lazy\\\"q'\""
        );
        assert_eq!(
            reason(&[("x-queue-type", I8(1))]),
            "x-queue-type: {unacceptable_type,byte}"
        );
        assert_eq!(reason(&[("x-no-such-arg", s("whatever"))]), "ok");
    }

    #[test]
    fn order_follows_rabbitmq() {
        use FieldValue::*;
        // The dead-letter exchange's type first, then the queue type, then declare_args.
        assert_eq!(
            reason(&[
                ("x-queue-type", s("stream")),
                ("x-dead-letter-exchange", I32(1))
            ]),
            "dlx type signedint"
        );
        assert_eq!(
            reason(&[("x-message-ttl", I32(-1)), ("x-queue-type", s("quorum"))]),
            "x-queue-type: \"unsupported queue type 'quorum': sluice has classic queues and streams only\""
        );
        assert_eq!(
            reason(&[("x-message-ttl", I32(-1)), ("x-expires", I32(0))]),
            "x-expires: {value_zero,0}"
        );
    }

    #[test]
    fn erlang_strings() {
        assert_eq!(erl_string("a\\b"), "\"a\\\\b\"");
        assert_eq!(erl_string("tab\there"), "\"tab\\there\"");
        assert_eq!(erl_string("ü"), "\"ü\"");
        assert_eq!(erl_string("a\u{1}"), "[97,1]");
        assert_eq!(erl_string("π"), "[960]");
    }

    #[test]
    fn classic_or_not() {
        assert!(is_classic(&table(&[])));
        assert!(is_classic(&table(&[("x-queue-type", s("classic"))])));
        assert!(!is_classic(&table(&[("x-queue-type", s("quorum"))])));
        assert!(!is_classic(&table(&[("x-queue-type", s(""))])));
    }

    fn one(key: &str, v: FieldValue) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert(key, v);
        t
    }

    fn refusal(r: Result<impl std::fmt::Debug, QueueArgError>) -> String {
        match r {
            Err(QueueArgError::Invalid { reason, .. }) => reason.to_string(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn max_priority_texts() {
        let text = |v| refusal(validate(&one(arg::MAX_PRIORITY, v)));
        assert_eq!(text(FieldValue::I32(256)), "{max_value_exceeded,256}");
        assert_eq!(text(FieldValue::I16(-1)), "{value_negative,-1}");
        assert_eq!(
            text(FieldValue::LongStr(LongStr::from("10"))),
            "\"expected integer, got longstr\""
        );
        assert_eq!(
            text(FieldValue::F64(2.0)),
            "\"expected integer, got double\""
        );
    }

    #[test]
    fn single_active_consumer_is_a_boolean() {
        let sac = |v| validate(&one(arg::SINGLE_ACTIVE_CONSUMER, v));
        assert!(sac(FieldValue::Bool(true)).is_ok());
        let e = sac(FieldValue::LongStr(LongStr::from("true")));
        assert!(
            matches!(&e, Err(QueueArgError::Invalid { argument, .. }) if *argument == arg::SINGLE_ACTIVE_CONSUMER)
        );
        assert_eq!(refusal(e), "{unacceptable_type,longstr}");
        assert_eq!(
            refusal(sac(FieldValue::I32(1))),
            "{unacceptable_type,signedint}"
        );
    }

    #[test]
    fn consumer_priority_is_any_integer() {
        assert_eq!(consumer_priority(&FieldTable::new()), Ok(0));
        let p = |v| consumer_priority(&one(arg::CONSUMER_PRIORITY, v));
        assert_eq!(p(FieldValue::I32(-5)), Ok(-5));
        assert_eq!(p(FieldValue::U32(7)), Ok(7));
        assert_eq!(
            refusal(p(FieldValue::Bool(true))),
            "\"expected integer, got bool\""
        );
    }
}
