//! Owns: the arguments that change how a queue orders and hands out its messages —
//! `x-max-priority` and `x-single-active-consumer` on `queue.declare`, `x-priority` on
//! `basic.consume` — read from their field tables and checked as RabbitMQ checks them
//! (`rabbit_amqqueue:check_max_priority_arg/2`, `check_bool_arg/2`, `check_int_arg/2`),
//! with the error term RabbitMQ prints in its 406 text.
//!
//! Does not: turn a refusal into a reply (the control plane and the channel do, as
//! `ChannelError::QueueArgument`), order messages (`ready`) or pick consumers
//! (`consumers`).

use std::fmt;

use crate::protocol::{FieldTable, FieldValue};

/// Argument names.
pub mod arg {
    pub const MAX_PRIORITY: &str = "x-max-priority";
    pub const SINGLE_ACTIVE_CONSUMER: &str = "x-single-active-consumer";
    /// On `basic.consume`.
    pub const CONSUMER_PRIORITY: &str = "x-priority";
}

/// The highest `x-max-priority` RabbitMQ accepts (`?MAX_SUPPORTED_PRIORITY`).
pub const MAX_SUPPORTED_PRIORITY: i64 = 255;

/// Why RabbitMQ refuses an argument's value. `Display` renders the Erlang term its 406
/// text prints with `~255p`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not one of the integer types: `"expected integer, got longstr"` (a string, so
    /// Erlang prints it quoted).
    NotInteger(&'static str),
    /// `{value_negative,-1}`.
    Negative(i64),
    /// `{max_value_exceeded,256}`.
    MaxExceeded(i64),
    /// Not a boolean: `{unacceptable_type,longstr}`.
    UnacceptableType(&'static str),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotInteger(ty) => write!(f, "\"expected integer, got {ty}\""),
            Refusal::Negative(n) => write!(f, "{{value_negative,{n}}}"),
            Refusal::MaxExceeded(n) => write!(f, "{{max_value_exceeded,{n}}}"),
            Refusal::UnacceptableType(ty) => write!(f, "{{unacceptable_type,{ty}}}"),
        }
    }
}

/// An argument whose value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgRefused {
    pub argument: &'static str,
    pub refusal: Refusal,
}

fn refused(argument: &'static str, refusal: Refusal) -> ArgRefused {
    ArgRefused { argument, refusal }
}

fn integer(argument: &'static str, v: &FieldValue) -> Result<i64, ArgRefused> {
    v.as_i64()
        .ok_or_else(|| refused(argument, Refusal::NotInteger(v.rabbit_type_name())))
}

/// `x-max-priority`: the highest priority level of a priority queue, if declared. 0 to
/// 255 are accepted; 0 makes two levels like 1, as RabbitMQ's
/// `rabbit_priority_queue:priorities/1` does (`max(1, min(Requested, 255))`).
pub fn max_priority(args: &FieldTable) -> Result<Option<u8>, ArgRefused> {
    let Some(v) = args.get(arg::MAX_PRIORITY) else {
        return Ok(None);
    };
    let n = integer(arg::MAX_PRIORITY, v)?;
    if n < 0 {
        return Err(refused(arg::MAX_PRIORITY, Refusal::Negative(n)));
    }
    if n > MAX_SUPPORTED_PRIORITY {
        return Err(refused(arg::MAX_PRIORITY, Refusal::MaxExceeded(n)));
    }
    Ok(Some(u8::try_from(n.max(1)).unwrap_or(u8::MAX)))
}

/// `x-single-active-consumer`: a boolean, false when absent.
pub fn single_active_consumer(args: &FieldTable) -> Result<bool, ArgRefused> {
    match args.get(arg::SINGLE_ACTIVE_CONSUMER) {
        None => Ok(false),
        Some(FieldValue::Bool(b)) => Ok(*b),
        Some(other) => Err(refused(
            arg::SINGLE_ACTIVE_CONSUMER,
            Refusal::UnacceptableType(other.rabbit_type_name()),
        )),
    }
}

/// Checks the `queue.declare` arguments this module reads, in RabbitMQ's order.
pub fn check_declare(args: &FieldTable) -> Result<(), ArgRefused> {
    max_priority(args)?;
    single_active_consumer(args)?;
    Ok(())
}

/// `x-priority` on `basic.consume`: any integer (negative too), 0 when absent.
pub fn consumer_priority(args: &FieldTable) -> Result<i64, ArgRefused> {
    match args.get(arg::CONSUMER_PRIORITY) {
        None => Ok(0),
        Some(v) => integer(arg::CONSUMER_PRIORITY, v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LongStr;

    fn table(key: &str, v: FieldValue) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert(key, v);
        t
    }

    #[test]
    fn max_priority_values_and_texts() {
        assert_eq!(max_priority(&FieldTable::new()), Ok(None));
        let ok = |v| max_priority(&table(arg::MAX_PRIORITY, v));
        assert_eq!(ok(FieldValue::U8(10)), Ok(Some(10)));
        assert_eq!(ok(FieldValue::I64(255)), Ok(Some(255)));
        assert_eq!(ok(FieldValue::I32(0)), Ok(Some(1)));
        let text = |v| ok(v).expect_err("refused").refusal.to_string();
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
        assert_eq!(single_active_consumer(&FieldTable::new()), Ok(false));
        let sac = |v| single_active_consumer(&table(arg::SINGLE_ACTIVE_CONSUMER, v));
        assert_eq!(sac(FieldValue::Bool(true)), Ok(true));
        let e = sac(FieldValue::LongStr(LongStr::from("true"))).expect_err("refused");
        assert_eq!(e.argument, arg::SINGLE_ACTIVE_CONSUMER);
        assert_eq!(e.refusal.to_string(), "{unacceptable_type,longstr}");
        let e = sac(FieldValue::I32(1)).expect_err("refused");
        assert_eq!(e.refusal.to_string(), "{unacceptable_type,signedint}");
    }

    #[test]
    fn consumer_priority_is_any_integer() {
        assert_eq!(consumer_priority(&FieldTable::new()), Ok(0));
        let p = |v| consumer_priority(&table(arg::CONSUMER_PRIORITY, v));
        assert_eq!(p(FieldValue::I32(-5)), Ok(-5));
        assert_eq!(p(FieldValue::U32(7)), Ok(7));
        let e = p(FieldValue::Bool(true)).expect_err("refused");
        assert_eq!(e.refusal.to_string(), "\"expected integer, got bool\"");
    }
}
