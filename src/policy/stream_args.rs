//! Owns: RabbitMQ's rules for streams (`x-queue-type = stream`) over AMQP 0-9-1, as
//! typed values and in RabbitMQ's order and words — the declare arguments a stream
//! takes and refuses (`validate_declare`), the properties a stream must have
//! (`check_properties`), the consumer arguments (`consumer`: `x-stream-offset`,
//! `x-stream-filter`, `x-stream-match-unfiltered`, sluice's
//! `x-stream-automatic-offset-tracking`), the channel settings a stream consumer needs
//! (`check_consume`), and RabbitMQ's duration syntax (`parse_max_age`: `7D`, `12h`).
//!
//! Does not: know a stream's contents or resolve an offset spec against a log (the
//! `stream` module does), or read the clock (an interval is handed on as a duration).
//!
//! Sources (rabbitmq-server, `deps/rabbit/src`): `rabbit_amqqueue.erl`
//! (`check_declare_arguments`, `check_consume_arguments`, `declare_args/0`,
//! `consume_args/0`, `check_max_age/1`), `rabbit_stream_queue.erl` (`declare/2`,
//! `consume/3`, `parse_offset_arg/1`, `filter_spec/1`, `dequeue`, `purge`,
//! `capabilities/0`), `rabbit_queue_type_util.erl` (the property checks),
//! `rabbit_classic_queue.erl` and `rabbit_quorum_queue.erl` (the other types' argument
//! lists), `rabbit_channel.erl` (`queue.purge`).

use std::fmt;
use std::time::Duration;

use smallvec::SmallVec;

use super::queue_args::{QueueArgError, Reason};
use crate::protocol::reply::{erlang_term, ErlangShape};
use crate::protocol::{FieldTable, FieldValue};

/// Argument names.
pub mod arg {
    pub const QUEUE_TYPE: &str = "x-queue-type";
    pub const MAX_LENGTH_BYTES: &str = "x-max-length-bytes";
    pub const MAX_AGE: &str = "x-max-age";
    pub const MAX_SEGMENT_SIZE: &str = "x-stream-max-segment-size-bytes";
    pub const FILTER_SIZE: &str = "x-stream-filter-size-bytes";
    pub const INITIAL_CLUSTER_SIZE: &str = "x-initial-cluster-size";
    pub const LEADER_LOCATOR: &str = "x-queue-leader-locator";
    /// On `basic.consume`.
    pub const OFFSET: &str = "x-stream-offset";
    pub const FILTER: &str = "x-stream-filter";
    pub const MATCH_UNFILTERED: &str = "x-stream-match-unfiltered";
    /// sluice's (and LavinMQ's): keep this consumer's offset in the stream.
    pub const AUTOMATIC_TRACKING: &str = "x-stream-automatic-offset-tracking";
    /// On a published message: the value consumers filter on.
    pub const FILTER_VALUE: &str = "x-stream-filter-value";
}

/// The queue type's module name, as RabbitMQ's texts print it.
pub const STREAM_TYPE: &str = "rabbit_stream_queue";
/// RabbitMQ's `?MAX_STREAM_MAX_SEGMENT_SIZE`.
pub const MAX_SEGMENT_SIZE: i64 = 3_000_000_000;
/// osiris' default segment size (`max_segment_size_bytes`).
pub const DEFAULT_SEGMENT_SIZE: u64 = 500_000_000;

/// Declare arguments RabbitMQ checks for a stream, in `declare_args/0` order.
const STREAM_VALIDATED: [&str; 7] = [
    arg::MAX_LENGTH_BYTES,
    arg::QUEUE_TYPE,
    arg::MAX_AGE,
    arg::MAX_SEGMENT_SIZE,
    arg::FILTER_SIZE,
    arg::INITIAL_CLUSTER_SIZE,
    arg::LEADER_LOCATOR,
];

/// The other queue types' declare arguments (classic and quorum): refused on a stream.
const OTHER_TYPES_ARGUMENTS: [&str; 22] = [
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-master-locator",
    "x-quorum-initial-group-size",
    "x-member-placement-tag",
    "x-delivery-limit",
    "x-consumer-disconnected-timeout",
    "x-consumer-timeout",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
];

/// The other queue types' consumer arguments: refused on a stream consumer.
const OTHER_TYPES_CONSUMER_ARGUMENTS: [&str; 2] = ["x-priority", "x-consumer-timeout"];

/// `?QUEUE_LEADER_LOCATORS` (with the deprecated ones, still accepted).
const LEADER_LOCATORS: [&str; 5] = [
    "client-local",
    "balanced",
    "random",
    "least-leaders",
    "min-masters",
];

/// Whether `args` declare a stream.
pub fn is_stream(args: &FieldTable) -> bool {
    matches!(args.get(arg::QUEUE_TYPE), Some(FieldValue::LongStr(s)) if s.as_bytes() == b"stream")
}

/// RabbitMQ's `check_declare_arguments` for the stream type (the queue type itself and
/// the dead-letter exchange's type were checked before): the stream's validators in
/// order, then any other queue type's argument, in the table's order.
pub fn validate_declare(args: &FieldTable) -> Result<(), QueueArgError> {
    for argument in STREAM_VALIDATED {
        let Some(v) = args.get(argument) else {
            continue;
        };
        let checked = match argument {
            arg::MAX_LENGTH_BYTES | arg::MAX_SEGMENT_SIZE | arg::FILTER_SIZE => {
                non_negative(v).map(drop)
            }
            arg::MAX_AGE => match v {
                FieldValue::LongStr(s) => parse_max_age(s.as_bytes()).map(drop),
                other => Err(Reason::UnacceptableType(other.rabbit_type_name())),
            },
            arg::INITIAL_CLUSTER_SIZE => match non_negative(v) {
                Ok(0) => Err(Reason::ValueZero),
                other => other.map(drop),
            },
            arg::LEADER_LOCATOR => match v {
                FieldValue::LongStr(s)
                    if LEADER_LOCATORS.iter().any(|l| l.as_bytes() == s.as_bytes()) =>
                {
                    Ok(())
                }
                FieldValue::LongStr(_) => Err(Reason::InvalidQueueLocator),
                other => Err(Reason::UnacceptableType(other.rabbit_type_name())),
            },
            // The queue type was checked by the caller.
            _ => Ok(()),
        };
        checked.map_err(|reason| QueueArgError::Invalid { argument, reason })?;
    }
    refuse_other_types(args, &OTHER_TYPES_ARGUMENTS)
}

/// `check_arguments_key`: the first argument of the table that belongs to another
/// queue type.
fn refuse_other_types(args: &FieldTable, others: &[&str]) -> Result<(), QueueArgError> {
    match args
        .iter()
        .find(|(k, _)| others.iter().any(|o| o.as_bytes() == k.as_bytes()))
    {
        Some((key, _)) => Err(QueueArgError::WrongQueueType {
            argument: key.to_string(),
            queue_type: STREAM_TYPE,
        }),
        None => Ok(()),
    }
}

/// `check_int_arg/2` then `check_non_neg_int_arg/2`.
fn non_negative(v: &FieldValue) -> Result<i64, Reason> {
    match v.as_i64() {
        None => Err(Reason::ExpectedInteger(v.rabbit_type_name())),
        Some(n) if n < 0 => Err(Reason::ValueNegative(n)),
        Some(n) => Ok(n),
    }
}

/// RabbitMQ's `check_max_age/1`: digits (a value above 0) and one unit of `Y` (365
/// days), `M` (30 days), `D`, `h`, `m`, `s`, nothing else; `invalid_max_age` otherwise.
pub fn parse_max_age(text: &[u8]) -> Result<Duration, Reason> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = text.split_at(digits);
    let secs: u64 = match unit {
        b"Y" => 365 * 86_400,
        b"M" => 30 * 86_400,
        b"D" => 86_400,
        b"h" => 3_600,
        b"m" => 60,
        b"s" => 1,
        _ => return Err(Reason::InvalidMaxAge),
    };
    // Erlang integers have no bound; a value past u64 seconds is as good as forever.
    let value = std::str::from_utf8(number)
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .or_else(|| (!number.is_empty()).then_some(u64::MAX));
    match value {
        Some(n) if n > 0 => Ok(Duration::from_secs(n.saturating_mul(secs))),
        _ => Err(Reason::InvalidMaxAge),
    }
}

/// A stream's own settings from its (validated) declare arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamSettings {
    /// `x-max-length-bytes`: retention by size.
    pub max_bytes: Option<u64>,
    /// `x-max-age`: retention by age.
    pub max_age: Option<Duration>,
    /// `x-stream-max-segment-size-bytes`.
    pub segment_size: u64,
}

impl StreamSettings {
    /// The settings `args` give (arguments that would not validate count as absent).
    pub fn from_arguments(args: &FieldTable) -> StreamSettings {
        let bytes = |key| {
            args.get(key)
                .and_then(FieldValue::as_i64)
                .and_then(|n| u64::try_from(n).ok())
        };
        StreamSettings {
            max_bytes: bytes(arg::MAX_LENGTH_BYTES),
            max_age: match args.get(arg::MAX_AGE) {
                Some(FieldValue::LongStr(s)) => parse_max_age(s.as_bytes()).ok(),
                _ => None,
            },
            segment_size: bytes(arg::MAX_SEGMENT_SIZE)
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_SEGMENT_SIZE),
        }
    }
}

/// Why a stream refused a declaration or an operation, in RabbitMQ's words (the texts
/// that name the queue take it from [`StreamRefusal::text`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRefusal {
    /// `queue.declare` with auto-delete (406).
    AutoDelete,
    /// `queue.declare` with exclusive (406).
    ExclusiveOwner,
    /// `queue.declare` without durable (406).
    NonDurable,
    /// `x-stream-max-segment-size-bytes` above 3,000,000,000 (406).
    SegmentSizeExceeded,
    /// `x-stream-filter-size-bytes` not an integer type (406).
    FilterSizeType,
    /// `x-stream-filter-size-bytes` outside 16..=255 (406).
    FilterSizeValue,
    /// `basic.consume` on a channel without a consumer prefetch (406).
    PrefetchNotSet,
    /// `basic.consume` with no-ack (540).
    AutomaticAck,
    /// `basic.consume` on a channel with a global prefetch (540).
    GlobalQos,
    /// `basic.get` (540).
    Get,
    /// `queue.purge` (540).
    Purge,
}

impl StreamRefusal {
    /// Whether RabbitMQ raises it as `not_implemented` (540, which closes the
    /// connection) rather than `precondition_failed` (406).
    pub fn not_implemented(self) -> bool {
        matches!(
            self,
            StreamRefusal::AutomaticAck
                | StreamRefusal::GlobalQos
                | StreamRefusal::Get
                | StreamRefusal::Purge
        )
    }

    /// The reply text (without the code's name) for stream `queue` in `vhost`.
    pub fn text(self, queue: &str, vhost: &str) -> String {
        let rs = format!("queue '{queue}' in vhost '{vhost}'");
        match self {
            StreamRefusal::AutoDelete => format!("invalid property 'auto-delete' for {rs}"),
            StreamRefusal::ExclusiveOwner => {
                format!("invalid property 'exclusive-owner' for {rs}")
            }
            StreamRefusal::NonDurable => format!("invalid property 'non-durable' for {rs}"),
            StreamRefusal::SegmentSizeExceeded => {
                "Exceeded max value for x-stream-max-segment-size-bytes".to_owned()
            }
            StreamRefusal::FilterSizeType => {
                "Invalid type for x-stream-filter-size-bytes".to_owned()
            }
            StreamRefusal::FilterSizeValue => {
                "Invalid value for x-stream-filter-size-bytes".to_owned()
            }
            StreamRefusal::PrefetchNotSet => {
                format!("consumer prefetch count is not set for stream {rs}")
            }
            StreamRefusal::AutomaticAck => {
                format!("automatic acknowledgement not supported by stream {rs}")
            }
            StreamRefusal::GlobalQos => format!("{rs} does not support global qos"),
            StreamRefusal::Get => format!("basic.get not supported by stream queues {rs}"),
            StreamRefusal::Purge => format!("queue.purge not supported by stream queues {rs}"),
        }
    }
}

/// `rabbit_stream_queue:declare/2`'s checks after the arguments: auto-delete, exclusive,
/// durable, then the segment size's maximum and the filter size.
pub fn check_properties(
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    args: &FieldTable,
) -> Result<(), StreamRefusal> {
    if auto_delete {
        return Err(StreamRefusal::AutoDelete);
    }
    if exclusive {
        return Err(StreamRefusal::ExclusiveOwner);
    }
    if !durable {
        return Err(StreamRefusal::NonDurable);
    }
    if args
        .get(arg::MAX_SEGMENT_SIZE)
        .and_then(FieldValue::as_i64)
        .is_some_and(|n| n > MAX_SEGMENT_SIZE)
    {
        return Err(StreamRefusal::SegmentSizeExceeded);
    }
    match args.get(arg::FILTER_SIZE) {
        None => Ok(()),
        Some(v) => match v.as_i64() {
            None => Err(StreamRefusal::FilterSizeType),
            Some(n) if !(16..=255).contains(&n) => Err(StreamRefusal::FilterSizeValue),
            Some(_) => Ok(()),
        },
    }
}

/// `rabbit_stream_queue:consume/3`'s checks of the channel: a consumer prefetch
/// (`basic.qos` with global false) is required, no-ack and a global prefetch are not
/// supported.
pub fn check_consume(prefetch: u32, no_ack: bool, global_qos: bool) -> Result<(), StreamRefusal> {
    if prefetch == 0 {
        Err(StreamRefusal::PrefetchNotSet)
    } else if no_ack {
        Err(StreamRefusal::AutomaticAck)
    } else if global_qos {
        Err(StreamRefusal::GlobalQos)
    } else {
        Ok(())
    }
}

/// Where a reader starts (`x-stream-offset`, `parse_offset_arg/1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first offset in the log.
    First,
    /// The first offset of the last chunk (`next` when the log is empty).
    Last,
    /// The next offset to be written: new messages only (the default).
    Next,
    /// This offset, clamped to the log.
    Offset(i64),
    /// The first chunk written at or after this time (milliseconds since the epoch).
    Timestamp(i64),
    /// The first chunk written at or after "now minus this" (an interval string such
    /// as `"100s"`), resolved when the consumer attaches.
    Interval(Duration),
}

/// A reader's filter: the values it wants, and whether it also wants messages that
/// carry none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilterSpec {
    pub values: SmallVec<[bytes::Bytes; 2]>,
    pub match_unfiltered: bool,
}

impl FilterSpec {
    /// Whether a message with filter value `value` (or none) passes.
    pub fn matches(&self, value: Option<&[u8]>) -> bool {
        match value {
            None => self.match_unfiltered,
            Some(v) => self.values.iter().any(|f| f.as_ref() == v),
        }
    }
}

/// A stream consumer's arguments, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerArgs {
    pub offset: OffsetSpec,
    /// Whether `x-stream-offset` was given (a consumer that gives none and has its own
    /// tag tracks its offset).
    pub offset_given: bool,
    pub filter: Option<FilterSpec>,
    /// `x-stream-automatic-offset-tracking`, if given.
    pub tracking: Option<bool>,
}

impl ConsumerArgs {
    /// Whether this consumer's offset is tracked: asked for, or implied by a tag of its
    /// own and no `x-stream-offset`.
    pub fn tracks(&self, generated_tag: bool) -> bool {
        self.tracking
            .unwrap_or(!self.offset_given && !generated_tag)
    }
}

/// RabbitMQ's `check_consume_arguments` for a stream (the `x-stream-offset` validator,
/// then any other type's consumer argument in table order) and the arguments as typed
/// values (`filter_spec/1`: a string or an array of strings; other values ignored).
pub fn consumer(args: &FieldTable) -> Result<ConsumerArgs, QueueArgError> {
    let (offset, offset_given) = match args.get(arg::OFFSET) {
        None => (OffsetSpec::Next, false),
        Some(v) => (
            parse_offset(v).map_err(|reason| QueueArgError::Invalid {
                argument: arg::OFFSET,
                reason,
            })?,
            true,
        ),
    };
    refuse_other_types(args, &OTHER_TYPES_CONSUMER_ARGUMENTS)?;
    let values: Option<SmallVec<[bytes::Bytes; 2]>> = match args.get(arg::FILTER) {
        Some(FieldValue::LongStr(s)) => Some(SmallVec::from_iter([bytes::Bytes::copy_from_slice(
            s.as_bytes(),
        )])),
        Some(FieldValue::Array(items)) => Some(
            items
                .iter()
                .filter_map(|i| match i {
                    FieldValue::LongStr(s) => Some(bytes::Bytes::copy_from_slice(s.as_bytes())),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    };
    let filter = values.filter(|v| !v.is_empty()).map(|values| FilterSpec {
        values,
        match_unfiltered: matches!(
            args.get(arg::MATCH_UNFILTERED),
            Some(FieldValue::Bool(true))
        ),
    });
    let tracking = match args.get(arg::AUTOMATIC_TRACKING) {
        None => None,
        Some(FieldValue::Bool(b)) => Some(*b),
        Some(FieldValue::LongStr(s)) if s.as_bytes() == b"true" => Some(true),
        Some(FieldValue::LongStr(s)) if s.as_bytes() == b"false" => Some(false),
        Some(other) => {
            return Err(QueueArgError::Invalid {
                argument: arg::AUTOMATIC_TRACKING,
                reason: Reason::UnacceptableType(other.rabbit_type_name()),
            })
        }
    };
    Ok(ConsumerArgs {
        offset,
        offset_given,
        filter,
        tracking,
    })
}

/// `parse_offset_arg/1`: `first`, `last`, `next` (as a string of any type), a
/// timestamp, an interval string, or an integer offset.
fn parse_offset(v: &FieldValue) -> Result<OffsetSpec, Reason> {
    let invalid = || Reason::InvalidStreamOffset(typed_term(v));
    if let Some(text) = v.as_bytes() {
        match text {
            b"first" => return Ok(OffsetSpec::First),
            b"last" => return Ok(OffsetSpec::Last),
            b"next" => return Ok(OffsetSpec::Next),
            _ => {}
        }
    }
    match v {
        FieldValue::Timestamp(secs) => Ok(OffsetSpec::Timestamp(
            i64::try_from(*secs)
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000),
        )),
        FieldValue::LongStr(s) => parse_max_age(s.as_bytes())
            .map(OffsetSpec::Interval)
            .map_err(|_| invalid()),
        other => match other.as_i64() {
            Some(n) => Ok(OffsetSpec::Offset(n)),
            // RabbitMQ hands anything else to osiris as an offset, which fails later;
            // here it is refused at once, in the validator's words.
            None => Err(invalid()),
        },
    }
}

/// A field value as Erlang prints RabbitMQ's `{Type, Value}` pair with `~p`.
fn typed_term(v: &FieldValue) -> String {
    format!("{{{},{}}}", v.rabbit_type_name(), erlang_value(v))
}

fn erlang_value(v: &FieldValue) -> String {
    match v {
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::F32(x) => format!("{x:?}"),
        FieldValue::F64(x) => format!("{x:?}"),
        FieldValue::Decimal { scale, value } => format!("{{{scale},{value}}}"),
        FieldValue::LongStr(s) => erlang_term(s.as_bytes(), ErlangShape::Binary),
        FieldValue::Bytes(b) => erlang_term(b, ErlangShape::Binary),
        FieldValue::Array(items) => {
            let items: Vec<String> = items.iter().map(typed_term).collect();
            format!("[{}]", items.join(","))
        }
        FieldValue::Table(t) => {
            let items: Vec<String> = t
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{{{},{},{}}}",
                        erlang_term(k.as_bytes(), ErlangShape::Binary),
                        v.rabbit_type_name(),
                        erlang_value(v)
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        }
        FieldValue::Void => "undefined".to_owned(),
        FieldValue::Timestamp(t) => t.to_string(),
        other => other.as_i64().map(|n| n.to_string()).unwrap_or_default(),
    }
}

impl fmt::Display for OffsetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetSpec::First => f.write_str("first"),
            OffsetSpec::Last => f.write_str("last"),
            OffsetSpec::Next => f.write_str("next"),
            OffsetSpec::Offset(n) => write!(f, "{n}"),
            OffsetSpec::Timestamp(ms) => write!(f, "timestamp {ms} ms"),
            OffsetSpec::Interval(d) => write!(f, "{} s ago", d.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests;
