//! Owns: the arguments that change how a queue orders and hands out its messages —
//! `x-max-priority` and `x-single-active-consumer` on `queue.declare`, `x-priority` on
//! `basic.consume` — read from their field tables.
//!
//! Does not: validate them (`policy::queue_args` checks them as RabbitMQ does, with its
//! 406 texts, before a queue or consumer is made), order messages (`ready`) or pick
//! consumers (`consumers`).

use crate::policy::queue_args::MAX_SUPPORTED_PRIORITY;
use crate::protocol::{FieldTable, FieldValue};

/// The names of the arguments read here (defined once, with every other declare
/// argument, in `policy::queue_args`).
pub mod arg {
    pub use crate::policy::queue_args::arg::{MAX_PRIORITY, SINGLE_ACTIVE_CONSUMER};
}

/// A queue's highest priority level: `x-max-priority`, with 0 read as 1 (as RabbitMQ
/// does); `None` for a plain queue, or for a value `policy::queue_args` would refuse.
pub fn max_priority(args: &FieldTable) -> Option<u8> {
    let n = args.get(arg::MAX_PRIORITY)?.as_i64()?;
    if !(0..=MAX_SUPPORTED_PRIORITY).contains(&n) {
        return None;
    }
    u8::try_from(n.max(1)).ok()
}

/// Whether the queue has a single active consumer (anything but `true` reads as no).
pub fn single_active_consumer(args: &FieldTable) -> bool {
    matches!(
        args.get(arg::SINGLE_ACTIVE_CONSUMER),
        Some(FieldValue::Bool(true))
    )
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
    fn max_priority_values() {
        assert_eq!(max_priority(&FieldTable::new()), None);
        let ok = |v| max_priority(&table(arg::MAX_PRIORITY, v));
        assert_eq!(ok(FieldValue::U8(10)), Some(10));
        assert_eq!(ok(FieldValue::I64(255)), Some(255));
        assert_eq!(ok(FieldValue::I32(0)), Some(1));
        assert_eq!(ok(FieldValue::I32(256)), None);
        assert_eq!(ok(FieldValue::LongStr(LongStr::from("10"))), None);
    }

    #[test]
    fn single_active_consumer_is_a_boolean() {
        assert!(!single_active_consumer(&FieldTable::new()));
        let sac = |v| single_active_consumer(&table(arg::SINGLE_ACTIVE_CONSUMER, v));
        assert!(sac(FieldValue::Bool(true)));
        assert!(!sac(FieldValue::Bool(false)));
    }
}
