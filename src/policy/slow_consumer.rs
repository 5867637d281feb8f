//! Owns: the slow-consumer policy of seed 000 as data and arithmetic — its settings at
//! each level of configuration (declare arguments, a `[[topic]]` entry, the virtual
//! host's default) and how they merge, the four thresholds (depth in bytes, message
//! count, age of the oldest message, minimum consumption rate), which threshold a
//! subscription's holdings breach, the exemptions (durable subscriptions, persistent
//! messages) and the prediction of when a growing backlog will breach one.
//!
//! Does not: read the clock, hold queue contents or act. The shard measures, asks
//! [`SlowConsumerPolicy`] for a verdict and performs it (close with 506 and delete, or
//! discard the oldest as a ring).

use std::fmt;
use std::time::Duration;

use crate::protocol::FieldTable;

use super::args::{self, ArgError};

/// What happens to a subscription that breaches a threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Close every consuming channel with 506 `Consuming too slow.` and delete the queue.
    Delete,
    /// Keep the queue as a ring: discard the oldest ready messages as new ones arrive.
    Cycle,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Delete => "delete",
            Action::Cycle => "cycle",
        }
    }

    pub const CHOICES: [(&'static str, Action); 2] =
        [("delete", Action::Delete), ("cycle", Action::Cycle)];
}

/// Declare-argument names (the contract tools and tests rely on).
pub mod arg {
    pub const MAX_DEPTH: &str = "x-slow-consumer-max-depth";
    pub const MAX_COUNT: &str = "x-slow-consumer-max-count";
    pub const MAX_AGE: &str = "x-slow-consumer-max-age";
    pub const MIN_RATE: &str = "x-slow-consumer-min-rate";
    pub const POLICY: &str = "x-slow-consumer-policy";
    pub const INCLUDE_PERSISTENT: &str = "x-slow-consumer-include-persistent";
    pub const INCLUDE_DURABLE: &str = "x-slow-consumer-include-durable";
    /// Every slow-consumer argument (for redeclare equivalence checks).
    pub const ALL: [&str; 7] = [
        MAX_DEPTH,
        MAX_COUNT,
        MAX_AGE,
        MIN_RATE,
        POLICY,
        INCLUDE_PERSISTENT,
        INCLUDE_DURABLE,
    ];
}

/// The settings one level of configuration gives; unset fields fall through to the
/// level below (declare arguments over a `[[topic]]` entry over the vhost default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlowConsumerSettings {
    pub action: Option<Action>,
    pub max_depth: Option<u64>,
    pub max_count: Option<u64>,
    pub max_age: Option<Duration>,
    pub min_rate: Option<f64>,
    pub include_persistent: Option<bool>,
    pub include_durable: Option<bool>,
}

impl SlowConsumerSettings {
    /// Reads the `x-slow-consumer-*` declare arguments. A bad value names its argument.
    pub fn from_arguments(a: &FieldTable) -> Result<SlowConsumerSettings, ArgError> {
        Ok(SlowConsumerSettings {
            action: args::choice(a, arg::POLICY, &Action::CHOICES)?,
            max_depth: args::non_negative(a, arg::MAX_DEPTH)?,
            max_count: args::non_negative(a, arg::MAX_COUNT)?,
            max_age: args::non_negative(a, arg::MAX_AGE)?.map(Duration::from_millis),
            min_rate: args::non_negative_number(a, arg::MIN_RATE)?,
            include_persistent: args::boolean(a, arg::INCLUDE_PERSISTENT)?,
            include_durable: args::boolean(a, arg::INCLUDE_DURABLE)?,
        })
    }

    /// True when this level sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == SlowConsumerSettings::default()
    }

    /// These settings, with the unset ones taken from `lower`.
    pub fn over(&self, lower: &SlowConsumerSettings) -> SlowConsumerSettings {
        SlowConsumerSettings {
            action: self.action.or(lower.action),
            max_depth: self.max_depth.or(lower.max_depth),
            max_count: self.max_count.or(lower.max_count),
            max_age: self.max_age.or(lower.max_age),
            min_rate: self.min_rate.or(lower.min_rate),
            include_persistent: self.include_persistent.or(lower.include_persistent),
            include_durable: self.include_durable.or(lower.include_durable),
        }
    }

    /// The effective policy: `None` (off) when no threshold is set. The action defaults
    /// to delete, include-persistent to true and include-durable to false.
    pub fn resolve(&self) -> Option<SlowConsumerPolicy> {
        let any = self.max_depth.is_some()
            || self.max_count.is_some()
            || self.max_age.is_some()
            || self.min_rate.is_some();
        any.then(|| SlowConsumerPolicy {
            action: self.action.unwrap_or(Action::Delete),
            max_depth: self.max_depth,
            max_count: self.max_count,
            max_age: self.max_age,
            min_rate: self.min_rate,
            include_persistent: self.include_persistent.unwrap_or(true),
            include_durable: self.include_durable.unwrap_or(false),
        })
    }
}

/// A resolved slow-consumer policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowConsumerPolicy {
    pub action: Action,
    pub max_depth: Option<u64>,
    pub max_count: Option<u64>,
    pub max_age: Option<Duration>,
    pub min_rate: Option<f64>,
    pub include_persistent: bool,
    pub include_durable: bool,
}

/// What a subscription holds: ready messages, deliveries awaiting ack, and deliveries
/// handed to the consumer's connection but not yet written.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Holdings {
    pub count: u64,
    pub bytes: u64,
    /// Age of the oldest message held.
    pub oldest_age: Option<Duration>,
}

/// Which threshold was crossed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    Depth,
    Count,
    Age,
    Rate,
}

impl Threshold {
    pub fn name(self) -> &'static str {
        match self {
            Threshold::Depth => "depth",
            Threshold::Count => "count",
            Threshold::Age => "age",
            Threshold::Rate => "rate",
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a subscription over a threshold is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exemption {
    /// A durable queue (durable subscription) and include-durable is false.
    Durable,
    /// The queue holds persistent messages and include-persistent is false.
    Persistent,
}

impl Exemption {
    pub fn name(self) -> &'static str {
        match self {
            Exemption::Durable => "durable subscription (include-durable is false)",
            Exemption::Persistent => "holds persistent messages (include-persistent is false)",
        }
    }
}

/// Rates measured on the subscription's queue, for the prediction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Trend {
    /// Messages arriving per second.
    pub arrival_rate: f64,
    /// Messages consumed per second (acked, or written for no-ack).
    pub consume_rate: f64,
}

/// When a growing subscription will breach a threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub threshold: Threshold,
    pub seconds: f64,
    /// Net growth of the holdings, messages per second.
    pub growth: f64,
}

impl SlowConsumerPolicy {
    /// The count or depth threshold the holdings exceed (checked on every enqueue).
    /// Count 10 and depth 1024 allow ten messages as long as they total at most 1024
    /// bytes.
    pub fn size_breach(&self, h: &Holdings) -> Option<Threshold> {
        if self.max_count.is_some_and(|max| h.count > max) {
            return Some(Threshold::Count);
        }
        if self.max_depth.is_some_and(|max| h.bytes > max) {
            return Some(Threshold::Depth);
        }
        None
    }

    /// The age threshold, if the oldest message held is older.
    pub fn age_breach(&self, h: &Holdings) -> Option<Threshold> {
        match (self.max_age, h.oldest_age) {
            (Some(max), Some(age)) if age > max => Some(Threshold::Age),
            _ => None,
        }
    }

    /// The rate threshold, given the consumption rate measured over a full window during
    /// which the queue had a backlog and a consumer (`None` when it cannot be judged:
    /// a new or idle subscriber is never judged).
    pub fn rate_breach(&self, judged_rate: Option<f64>) -> Option<Threshold> {
        match (self.min_rate, judged_rate) {
            (Some(min), Some(rate)) if rate < min => Some(Threshold::Rate),
            _ => None,
        }
    }

    /// Whether a queue over a threshold is left alone.
    pub fn exemption(&self, durable: bool, holds_persistent: bool) -> Option<Exemption> {
        if durable && !self.include_durable {
            return Some(Exemption::Durable);
        }
        if holds_persistent && !self.include_persistent {
            return Some(Exemption::Persistent);
        }
        None
    }

    /// Whether the count and depth bounds of a ring leave room for the holdings.
    pub fn ring_overfull(&self, h: &Holdings) -> bool {
        self.size_breach(h).is_some()
    }

    /// Predicts the earliest breach of the count, depth or age threshold from the
    /// current holdings and rates: the backlog grows by `arrival - consume` messages a
    /// second, and the oldest message ages by `1 - consume/arrival` seconds a second
    /// (it is replaced at the consumer's pace). `None` when nothing is growing.
    pub fn predict(&self, h: &Holdings, trend: &Trend) -> Option<Prediction> {
        let growth = trend.arrival_rate - trend.consume_rate;
        if growth <= 0.0 || !growth.is_finite() {
            return None;
        }
        let mut best: Option<Prediction> = None;
        let mut consider = |threshold, seconds: f64| {
            if seconds.is_finite() && seconds >= 0.0 && best.is_none_or(|b| seconds < b.seconds) {
                best = Some(Prediction {
                    threshold,
                    seconds,
                    growth,
                });
            }
        };
        if let Some(max) = self.max_count {
            consider(
                Threshold::Count,
                max.saturating_sub(h.count) as f64 / growth,
            );
        }
        if let (Some(max), true) = (self.max_depth, h.count > 0) {
            let per_message = h.bytes as f64 / h.count as f64;
            if per_message > 0.0 {
                consider(
                    Threshold::Depth,
                    max.saturating_sub(h.bytes) as f64 / (growth * per_message),
                );
            }
        }
        if let (Some(max), Some(age)) = (self.max_age, h.oldest_age) {
            let ageing = 1.0 - (trend.consume_rate / trend.arrival_rate).clamp(0.0, 1.0);
            if ageing > 0.0 {
                consider(
                    Threshold::Age,
                    max.saturating_sub(age).as_secs_f64() / ageing,
                );
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{FieldValue, LongStr};

    fn policy(count: Option<u64>, depth: Option<u64>) -> SlowConsumerPolicy {
        SlowConsumerSettings {
            max_count: count,
            max_depth: depth,
            ..Default::default()
        }
        .resolve()
        .expect("a threshold is set")
    }

    fn held(count: u64, bytes: u64) -> Holdings {
        Holdings {
            count,
            bytes,
            oldest_age: None,
        }
    }

    #[test]
    fn count_and_depth_together_as_the_seed_describes() {
        let p = policy(Some(10), Some(1024));
        assert_eq!(p.size_breach(&held(10, 1024)), None);
        assert_eq!(p.size_breach(&held(11, 100)), Some(Threshold::Count));
        assert_eq!(p.size_breach(&held(3, 1025)), Some(Threshold::Depth));
    }

    #[test]
    fn defaults_and_merging() {
        assert_eq!(SlowConsumerSettings::default().resolve(), None);
        let vhost = SlowConsumerSettings {
            action: Some(Action::Cycle),
            max_count: Some(100),
            ..Default::default()
        };
        let declared = SlowConsumerSettings {
            max_count: Some(5),
            include_durable: Some(true),
            ..Default::default()
        };
        let p = declared.over(&vhost).resolve().expect("policy");
        assert_eq!(p.action, Action::Cycle);
        assert_eq!(p.max_count, Some(5));
        assert!(p.include_persistent);
        assert!(p.include_durable);
        assert_eq!(p.exemption(true, true), None);
        let p = vhost.resolve().expect("policy");
        assert_eq!(p.exemption(true, false), Some(Exemption::Durable));
        let p = SlowConsumerSettings {
            max_count: Some(1),
            include_persistent: Some(false),
            ..Default::default()
        }
        .resolve()
        .expect("policy");
        assert_eq!(p.action, Action::Delete);
        assert_eq!(p.exemption(false, true), Some(Exemption::Persistent));
        assert_eq!(p.exemption(false, false), None);
    }

    #[test]
    fn arguments_are_validated_by_name() {
        let mut t = FieldTable::new();
        t.insert(arg::MAX_COUNT, FieldValue::I32(10));
        t.insert(arg::MAX_AGE, FieldValue::I64(1500));
        t.insert(arg::MIN_RATE, FieldValue::F64(2.5));
        t.insert(arg::POLICY, FieldValue::LongStr(LongStr::from("cycle")));
        let s = SlowConsumerSettings::from_arguments(&t).expect("valid");
        assert_eq!(s.max_count, Some(10));
        assert_eq!(s.max_age, Some(Duration::from_millis(1500)));
        assert_eq!(s.min_rate, Some(2.5));
        assert_eq!(s.action, Some(Action::Cycle));
        for (key, bad) in [
            (arg::MAX_DEPTH, FieldValue::I64(-1)),
            (arg::MAX_COUNT, FieldValue::LongStr(LongStr::from("ten"))),
            (arg::MIN_RATE, FieldValue::F64(-0.5)),
            (arg::POLICY, FieldValue::LongStr(LongStr::from("drop"))),
            (arg::INCLUDE_DURABLE, FieldValue::I32(1)),
        ] {
            let mut t = FieldTable::new();
            t.insert(key, bad);
            let e = SlowConsumerSettings::from_arguments(&t).expect_err("invalid");
            assert_eq!(e.argument, key);
        }
    }

    #[test]
    fn rate_is_judged_only_when_measured() {
        let p = SlowConsumerSettings {
            min_rate: Some(50.0),
            ..Default::default()
        }
        .resolve()
        .expect("policy");
        assert_eq!(p.rate_breach(None), None);
        assert_eq!(p.rate_breach(Some(60.0)), None);
        assert_eq!(p.rate_breach(Some(10.0)), Some(Threshold::Rate));
    }

    #[test]
    fn prediction_picks_the_nearest_threshold() {
        let p = SlowConsumerSettings {
            max_count: Some(1000),
            max_age: Some(Duration::from_secs(60)),
            ..Default::default()
        }
        .resolve()
        .expect("policy");
        let h = Holdings {
            count: 600,
            bytes: 600 * 64,
            oldest_age: Some(Duration::from_secs(2)),
        };
        let trend = Trend {
            arrival_rate: 110.0,
            consume_rate: 10.0,
        };
        let pred = p.predict(&h, &trend).expect("growing");
        assert_eq!(pred.threshold, Threshold::Count);
        assert!((pred.seconds - 4.0).abs() < 1e-9, "{}", pred.seconds);
        let shrinking = Trend {
            arrival_rate: 10.0,
            consume_rate: 20.0,
        };
        assert_eq!(p.predict(&h, &shrinking), None);
        // A stuck consumer: the oldest message ages in real time.
        let stuck = Trend {
            arrival_rate: 1.0,
            consume_rate: 0.0,
        };
        let h = Holdings {
            count: 10,
            bytes: 640,
            oldest_age: Some(Duration::from_secs(55)),
        };
        let pred = p.predict(&h, &stuck).expect("growing");
        assert_eq!(pred.threshold, Threshold::Age);
        assert!((pred.seconds - 5.0).abs() < 1e-9);
    }
}
