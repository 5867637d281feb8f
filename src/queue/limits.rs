//! Owns: the policy state a queue carries with it on its home shard — its length limits
//! (`x-max-length`), its capacity and the publishers it has flow-stopped, and its
//! slow-consumer state: the settings found so far, the resolved policy (active only while
//! the queue has a topic binding), the rate meters and the alert bookkeeping that keeps
//! operational log lines to one per alert gap; and the run-time policy (`policy::set`)
//! its limits were last resolved with.
//!
//! Does not: decide (the `policy` module does) or act (the shard does). Everything here is
//! plain data that lives and dies with the queue, so a check needs no lookup beyond the
//! queue itself.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::ids::{ChannelRef, IdHasher};
use crate::policy::capacity::Capacity;
use crate::policy::max_length::MaxLength;
use crate::policy::rate::{RateEstimator, WindowMeter};
use crate::policy::set::Policy;
use crate::policy::slow_consumer::{Prediction, SlowConsumerPolicy, SlowConsumerSettings};

/// A queue's limits and policy state. In declaration order (`repr(C)`): what every
/// enqueue checks first (see `Queue`). `Default`: no limit, no policy.
#[derive(Debug, Default)]
#[repr(C)]
pub struct QueueLimits {
    /// Boxed, as the capacity: most queues have neither, and an absent box is 8 bytes
    /// where an absent limit was 40 (and 24): issue 23.
    pub max_length: Option<Box<MaxLength>>,
    pub capacity: Option<Box<Capacity>>,
    pub slow: SlowState,
    /// Publishing channels told to stop because of this queue (while it is overfull).
    pub blocked_publishers: BlockedPublishers,
    /// Allocated at the first alert (most queues never have one: issue 23).
    alerts: Option<Box<Alerts>>,
    /// The periodic policy check is armed on the shard's wheel.
    pub timer_armed: bool,
    /// The run-time policy whose definition is merged into the declare arguments the
    /// limits above (and the queue's TTL, expiry and dead-letter settings) came from.
    pub policy: Option<Arc<Policy>>,
}

/// The publishing channels a queue has flow-stopped, allocated at the first (most queues
/// never stop one; an empty set inline was 48 bytes of every queue: issue 23).
#[derive(Debug, Default)]
#[allow(clippy::box_collection)]
pub struct BlockedPublishers(Option<Box<HashSet<ChannelRef, BuildHasherDefault<IdHasher>>>>);

impl BlockedPublishers {
    /// Adds `channel`; false if it was stopped already.
    pub fn insert(&mut self, channel: ChannelRef) -> bool {
        self.0.get_or_insert_with(Box::default).insert(channel)
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |set| set.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes every channel (to release them) and gives the allocation back.
    pub fn take_all(&mut self) -> Vec<ChannelRef> {
        self.0
            .take()
            .map_or_else(Vec::new, |set| set.into_iter().collect())
    }
}

impl QueueLimits {
    /// Whether the queue needs the periodic policy check.
    pub fn needs_checks(&self) -> bool {
        self.slow.active().is_some()
            || self
                .alerts
                .as_ref()
                .is_some_and(|a| a.discards_unreported > 0 || a.rejects_unreported > 0)
    }

    /// When the queue last logged each kind of alert, and what it has not reported;
    /// `None` before its first alert.
    pub fn alerts(&self) -> Option<&Alerts> {
        self.alerts.as_deref()
    }

    /// The same, allocated at the first alert.
    pub fn alerts_mut(&mut self) -> &mut Alerts {
        self.alerts.get_or_insert_with(Box::default)
    }
}

/// Slow-consumer state of one queue (seed 000). In declaration order (`repr(C)`): what
/// [`SlowState::active`] reads first.
#[derive(Debug, Default)]
#[repr(C)]
pub struct SlowState {
    /// Bindings to topic exchanges; the policy applies while this is above zero.
    pub topic_bindings: u32,
    /// Whether the settings below came from a `[[topic]]` entry (more specific than the
    /// vhost default, so a later binding does not replace them).
    pub from_topic_entry: bool,
    /// The resolved policy, once the queue has been bound to a topic exchange.
    /// Boxed: most queues are never bound to a topic exchange (issue 23).
    pub policy: Option<Box<SlowConsumerPolicy>>,
    /// The declared and configured levels the policy was resolved from; `None` while
    /// both are unset (most queues: issue 23).
    levels: Option<Box<SlowLevels>>,
    /// The rates the periodic check measures, made at the queue's first check (most
    /// queues never have one: issue 23).
    meters: Option<Box<SlowMeters>>,
}

/// What the slow-consumer check measures of one queue.
#[derive(Debug)]
pub struct SlowMeters {
    /// Messages arriving per second (EWMA).
    pub arrival: RateEstimator,
    /// Messages consumed per second (EWMA): acks, or deliveries written for no-ack.
    pub consume: RateEstimator,
    /// Consumption over whole windows with a backlog and a consumer: the judged rate.
    pub window: WindowMeter,
    /// Counter values at the previous check.
    pub seen_enqueued: u64,
    pub seen_consumed: u64,
    /// The latest prediction of a breach, kept for metrics.
    pub prediction: Option<Prediction>,
}

impl SlowState {
    /// The meters, made at the first check with the judging window in force then
    /// (`policy.rate_window_ms`). The EWMAs' memory is half the window, so they follow a
    /// change within about one window.
    pub fn meters_mut(&mut self, window: Duration) -> &mut SlowMeters {
        self.meters.get_or_insert_with(|| {
            Box::new(SlowMeters {
                arrival: RateEstimator::new(window / 2),
                consume: RateEstimator::new(window / 2),
                window: WindowMeter::new(window),
                seen_enqueued: 0,
                seen_consumed: 0,
                prediction: None,
            })
        })
    }

    /// Keeps the latest prediction with the meters it came from (none before the first
    /// check, which makes them).
    pub fn set_prediction(&mut self, prediction: Option<Prediction>) {
        if let Some(m) = self.meters.as_mut() {
            m.prediction = prediction;
        }
    }

    /// Messages arriving per second (0 before the first check).
    pub fn arrival_rate(&self) -> f64 {
        self.meters.as_ref().map_or(0.0, |m| m.arrival.rate())
    }

    /// Messages consumed per second (0 before the first check).
    pub fn consume_rate(&self) -> f64 {
        self.meters.as_ref().map_or(0.0, |m| m.consume.rate())
    }

    /// The rate judged over the last whole window, else the consumption EWMA.
    pub fn judged_rate(&self) -> f64 {
        self.meters
            .as_ref()
            .map_or(0.0, |m| m.window.last().unwrap_or_else(|| m.consume.rate()))
    }

    /// The latest prediction of a breach.
    pub fn prediction(&self) -> Option<Prediction> {
        self.meters.as_ref().and_then(|m| m.prediction)
    }

    /// The `x-slow-consumer-*` declare arguments, with the run-time policy's
    /// `sluice-slow-consumer-*` keys filling in those the queue does not declare.
    pub fn declared(&self) -> &SlowConsumerSettings {
        self.levels.as_ref().map_or(&UNSET, |l| &l.declared)
    }

    /// The configuration file's level found at the first topic binding (a `[[topic]]`
    /// entry or the vhost default): what `declared` is resolved over again when the
    /// queue's run-time policy changes.
    pub fn base(&self) -> &SlowConsumerSettings {
        self.levels.as_ref().map_or(&UNSET, |l| &l.base)
    }

    pub fn set_declared(&mut self, declared: SlowConsumerSettings) {
        if let Some(levels) = self.levels_for(&declared) {
            levels.declared = declared;
        }
    }

    pub fn set_base(&mut self, base: SlowConsumerSettings) {
        if let Some(levels) = self.levels_for(&base) {
            levels.base = base;
        }
    }

    /// The levels to store `level` in; `None` when it is unset and there are none (an
    /// unset level is what `declared()` and `base()` read then).
    fn levels_for(&mut self, level: &SlowConsumerSettings) -> Option<&mut SlowLevels> {
        if self.levels.is_none() && *level == UNSET {
            return None;
        }
        Some(self.levels.get_or_insert_with(Box::default))
    }

    /// The policy in force: resolved and the queue bound to a topic exchange.
    pub fn active(&self) -> Option<&SlowConsumerPolicy> {
        // The binding count first: it is in the line an enqueue reads anyway.
        if self.topic_bindings == 0 {
            return None;
        }
        self.policy.as_deref()
    }
}

/// A slow-consumer level none of whose fields is set.
const UNSET: SlowConsumerSettings = SlowConsumerSettings {
    action: None,
    max_depth: None,
    max_count: None,
    max_age: None,
    min_rate: None,
    include_persistent: None,
    include_durable: None,
};

/// The declare arguments' and the configuration file's slow-consumer levels of a queue.
#[derive(Debug, Default)]
struct SlowLevels {
    declared: SlowConsumerSettings,
    base: SlowConsumerSettings,
}

/// When the queue last logged each kind of alert, and what it has not reported yet.
#[derive(Debug, Default)]
pub struct Alerts {
    pub last_warning: Option<Instant>,
    pub last_exempt: Option<Instant>,
    pub last_detected: Option<Instant>,
    pub last_discard_report: Option<Instant>,
    pub discards_unreported: u64,
    pub last_reject_report: Option<Instant>,
    pub rejects_unreported: u64,
}

impl Alerts {
    /// Whether an alert last logged at `last` may be logged again at `now`.
    pub fn due(last: Option<Instant>, now: Instant, gap: Duration) -> bool {
        last.is_none_or(|t| now.saturating_duration_since(t) >= gap)
    }
}
