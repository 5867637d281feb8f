//! Owns: queue arguments — typing `key=value` strings into AMQP field values, and the
//! convenience flags that stand for the broker's declare-argument contract:
//! slow-consumer policy and thresholds (`x-slow-consumer-*`, seed 000), RabbitMQ's
//! `x-max-length` with `x-overflow=drop-head`, and the flow scenario's queue capacity
//! (`x-qpid-capacity`, `x-qpid-flow-resume-capacity`, seed 001).
//! Does not: validate what the broker accepts; a refused declare shows up as the
//! broker's 406 in the run's error.

use sluice::protocol::{FieldTable, FieldValue, LongStr};

use super::matrix::Policy;

/// A queue argument from `--queue-arg k=v` (and the conveniences): integers become
/// signed 64-bit, decimal numbers doubles, `true` / `false` booleans, anything else
/// a long string.
pub fn queue_arguments(args: &[(String, String)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in args {
        t.insert(k.as_str(), field_value(v));
    }
    t
}

fn field_value(v: &str) -> FieldValue {
    if let Ok(n) = v.parse::<i64>() {
        return FieldValue::I64(n);
    }
    if let Ok(b) = v.parse::<bool>() {
        return FieldValue::Bool(b);
    }
    let numeric = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
        && v.chars().any(|c| c.is_ascii_digit());
    match v.parse::<f64>() {
        Ok(x) if numeric && x.is_finite() => FieldValue::F64(x),
        _ => FieldValue::LongStr(LongStr::from(v)),
    }
}

/// The slow-consumer conveniences of the command line.
#[derive(Clone, Debug, Default)]
pub struct SlowConsumerArgs {
    /// `x-slow-consumer-policy` (`delete` or `cycle`; `none` adds nothing).
    pub policy: Option<Policy>,
    /// `x-slow-consumer-max-count`.
    pub max_count: Option<i64>,
    /// `x-slow-consumer-max-depth` (bytes).
    pub max_depth: Option<i64>,
    /// `x-slow-consumer-max-age` (milliseconds).
    pub max_age_ms: Option<i64>,
    /// `x-slow-consumer-min-rate` (messages per second; an integer is sent as one).
    pub min_rate: Option<f64>,
    /// `x-slow-consumer-include-durable=true` when any of the above is given.
    pub include_durable: bool,
    /// `x-max-length` with `x-overflow=drop-head` (RabbitMQ's ring).
    pub rabbit_max_length: Option<i64>,
}

impl SlowConsumerArgs {
    /// The arguments as `key=value` pairs, in a fixed order.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let push =
            |out: &mut Vec<(String, String)>, k: &str, v: String| out.push((k.to_string(), v));
        match self.policy {
            Some(Policy::Delete) => push(&mut out, "x-slow-consumer-policy", "delete".into()),
            Some(Policy::Cycle) => push(&mut out, "x-slow-consumer-policy", "cycle".into()),
            Some(Policy::None) | None => {}
        }
        if let Some(n) = self.max_count {
            push(&mut out, "x-slow-consumer-max-count", n.to_string());
        }
        if let Some(n) = self.max_depth {
            push(&mut out, "x-slow-consumer-max-depth", n.to_string());
        }
        if let Some(n) = self.max_age_ms {
            push(&mut out, "x-slow-consumer-max-age", n.to_string());
        }
        if let Some(r) = self.min_rate {
            // `{}` of a whole f64 prints no fraction ("100"), so it travels as I64.
            push(&mut out, "x-slow-consumer-min-rate", format!("{r}"));
        }
        if self.include_durable && !out.is_empty() {
            push(&mut out, "x-slow-consumer-include-durable", "true".into());
        }
        if let Some(n) = self.rabbit_max_length {
            push(&mut out, "x-max-length", n.to_string());
            push(&mut out, "x-overflow", "drop-head".into());
        }
        out
    }
}

/// Adds each `(key, value)` of `defaults` whose key `args` does not have yet.
pub fn add_defaults(args: &mut Vec<(String, String)>, defaults: Vec<(String, String)>) {
    for (k, v) in defaults {
        if !args.iter().any(|(have, _)| *have == k) {
            args.push((k, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_typed() {
        let t = queue_arguments(&[
            ("a".into(), "10485760".into()),
            ("b".into(), "-3".into()),
            ("c".into(), "0.5".into()),
            ("d".into(), "true".into()),
            ("e".into(), "drop-head".into()),
            ("f".into(), "inf".into()),
            ("g".into(), "1e3".into()),
        ]);
        assert_eq!(t.get("a"), Some(&FieldValue::I64(10_485_760)));
        assert_eq!(t.get("b"), Some(&FieldValue::I64(-3)));
        assert_eq!(t.get("c"), Some(&FieldValue::F64(0.5)));
        assert_eq!(t.get("d"), Some(&FieldValue::Bool(true)));
        assert!(matches!(t.get("e"), Some(FieldValue::LongStr(_))));
        assert!(matches!(t.get("f"), Some(FieldValue::LongStr(_))));
        assert_eq!(t.get("g"), Some(&FieldValue::F64(1000.0)));
    }

    #[test]
    fn slow_consumer_conveniences() {
        let a = SlowConsumerArgs {
            policy: Some(Policy::Cycle),
            max_count: Some(100),
            min_rate: Some(100.0),
            include_durable: true,
            rabbit_max_length: Some(1000),
            ..Default::default()
        };
        let t = queue_arguments(&a.pairs());
        assert!(
            matches!(t.get("x-slow-consumer-policy"), Some(FieldValue::LongStr(s)) if s.as_bytes() == b"cycle")
        );
        assert_eq!(
            t.get("x-slow-consumer-max-count"),
            Some(&FieldValue::I64(100))
        );
        assert_eq!(
            t.get("x-slow-consumer-min-rate"),
            Some(&FieldValue::I64(100))
        );
        assert_eq!(
            t.get("x-slow-consumer-include-durable"),
            Some(&FieldValue::Bool(true))
        );
        assert_eq!(t.get("x-max-length"), Some(&FieldValue::I64(1000)));
        let rate = SlowConsumerArgs {
            min_rate: Some(2.5),
            ..Default::default()
        };
        assert_eq!(
            queue_arguments(&rate.pairs()).get("x-slow-consumer-min-rate"),
            Some(&FieldValue::F64(2.5))
        );
        assert!(SlowConsumerArgs {
            policy: Some(Policy::None),
            include_durable: true,
            ..Default::default()
        }
        .pairs()
        .is_empty());
    }

    #[test]
    fn defaults_do_not_override() {
        let mut a = vec![("x-qpid-capacity".to_string(), "5".to_string())];
        add_defaults(
            &mut a,
            vec![
                ("x-qpid-capacity".into(), "10".into()),
                ("x-qpid-flow-resume-capacity".into(), "8".into()),
            ],
        );
        assert_eq!(
            a,
            vec![
                ("x-qpid-capacity".to_string(), "5".to_string()),
                ("x-qpid-flow-resume-capacity".to_string(), "8".to_string())
            ]
        );
    }
}
