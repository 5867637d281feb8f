//! Owns: performing the queue policies on a queue's home shard — setting a queue's
//! limits up from its declare arguments and the configuration, learning that it is a
//! topic subscription when a topic binding is applied, the checks after every enqueue
//! (length limits, the slow-consumer count and depth thresholds, capacity), the checks
//! when a queue shrinks (underfull), the periodic check on the wheel (age and rate,
//! predictions, rate-limited alert lines), and the slow-consumer `delete` verdict: 506 to
//! every consuming channel, the queue's messages released, the queue deleted.
//!
//! Does not: compute thresholds or hysteresis (the `policy` module does) or talk to
//! publishing channels directly (flow signals go through the outbox to their shard).

use std::time::{Duration, Instant};

use crate::config::Config;
use crate::model::ids::{ChannelRef, ConnId, QueueId, QueueRef};
use crate::ops::event::{thousands, OpsEvent, SlowReport};
use crate::policy::capacity::{CapacitySettings, FlowChange};
use crate::policy::max_length::{MaxLength, Overflow};
use crate::policy::slow_consumer::{
    Action, SlowConsumerPolicy, SlowConsumerSettings, Threshold, Trend,
};
use crate::protocol::FieldTable;
use crate::queue::limits::Alerts;
use crate::queue::{Queue, QueueLimits};

use super::QueueSide;
use crate::shard::inbox::{FlowNotice, FlowSignal, ShardMsg, SlowTarget};
use crate::shard::{Shard, TimerKey};

/// A queue's limits from its declare arguments over the configuration. The arguments
/// were validated by the coordinator; a value that slipped through is ignored.
pub fn queue_limits(config: &Config, vhost: &str, queue: &str, args: &FieldTable) -> QueueLimits {
    let policies = &config.policies;
    let mut limits = QueueLimits::default();
    limits.max_length = MaxLength::from_arguments(args).ok().flatten().map(Box::new);
    let declared = CapacitySettings::from_arguments(args).unwrap_or_default();
    limits.capacity = declared
        .over(&policies.queue_capacity(vhost, queue))
        .resolve()
        .map(Box::new);
    limits
        .slow
        .set_declared(SlowConsumerSettings::from_arguments(args).unwrap_or_default());
    limits
}

/// Whether a message of `size` bytes may be enqueued: `x-overflow = reject-publish`
/// (or `reject-publish-dlx`) refuses it when the queue is at its length limit (counted
/// for the QUE-1006 line).
pub fn admits(q: &mut Queue, size: u64) -> bool {
    let Some(ml) = q.limits.max_length.as_deref().copied() else {
        return true;
    };
    if !ml.overflow.refuses() || !ml.would_exceed(q.ready_count() as u64, q.ready_bytes(), size) {
        return true;
    }
    q.count_rejected();
    q.limits.alerts_mut().rejects_unreported += 1;
    false
}

/// `x-overflow = drop-head`: discards (dead-letters) from the head until the queue is
/// within its length limits. Whether any was discarded (to be reported).
pub(super) fn drop_head_to_limit(q: &mut Queue) -> bool {
    let Some(ml) = q
        .limits
        .max_length
        .as_deref()
        .copied()
        .filter(|m| m.overflow == Overflow::DropHead)
    else {
        return false;
    };
    let mut discarded = false;
    while ml.exceeded(q.ready_count() as u64, q.ready_bytes()) {
        if q.discard_head(true).is_none() {
            break;
        }
        q.limits.alerts_mut().discards_unreported += 1;
        discarded = true;
    }
    discarded
}

/// What an enqueue changed that the shard must act on once the queue is released.
#[derive(Default)]
struct AfterEnqueue {
    flow: Option<FlowChange>,
    block: bool,
    fire: Option<Threshold>,
    arm: bool,
}

impl QueueSide<'_> {
    /// A topic binding to a home queue was added (`+1`) or removed (`-1`). The first one
    /// makes the queue a topic subscription and resolves its slow-consumer policy:
    /// declare arguments over a `[[topic]]` entry (for the queue by name, or for this
    /// binding) over the vhost default.
    pub fn topic_binding_changed(
        &mut self,
        shard: &Shard,
        queue: QueueId,
        exchange: &str,
        binding_key: &str,
        added: bool,
    ) {
        let live = shard.live();
        let policies = &live.policies;
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let slow = &mut q.limits.slow;
        if !added {
            slow.topic_bindings = slow.topic_bindings.saturating_sub(1);
            return;
        }
        slow.topic_bindings += 1;
        if !slow.from_topic_entry {
            let entry = policies
                .topic_for_queue(&q.vhost, q.name.as_str_lossy().as_ref())
                .or_else(|| policies.topic_for_binding(&q.vhost, exchange, binding_key));
            let base = match entry {
                Some(e) => {
                    slow.from_topic_entry = true;
                    e.slow_consumer.clone()
                }
                None => policies.vhost(&q.vhost).slow_consumer,
            };
            slow.policy = slow.declared().over(&base).resolve().map(Box::new);
            slow.set_base(base);
        }
        if slow.active().is_some() {
            self.ensure_policy_timer(shard, queue);
        }
    }

    /// The checks after a message from `origin` was enqueued: drop-head rings, the
    /// slow-consumer count and depth thresholds (a cycle ring discards, delete fires),
    /// capacity (overfull: `origin` is told to stop).
    pub(super) fn after_enqueue(
        &mut self,
        shard: &Shard,
        queue: QueueId,
        origin: ChannelRef,
        now: Instant,
    ) {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let mut todo = AfterEnqueue {
            arm: drop_head_to_limit(q),
            ..AfterEnqueue::default()
        };
        if let Some(policy) = q.limits.slow.active() {
            let held = q.held();
            if let Some(threshold) = policy.size_breach(&held) {
                match policy.action {
                    Action::Delete => todo.fire = Some(threshold),
                    Action::Cycle => {
                        let policy = policy.clone();
                        todo.arm |= cycle(q, &policy);
                    }
                }
            }
        }
        let size = q.held_bytes();
        if let Some(cap) = q.limits.capacity.as_mut() {
            todo.flow = cap.update(size);
            // The broker (dead-lettering) is no publisher to stop.
            todo.block = cap.is_overfull()
                && !origin.is_broker()
                && q.limits.blocked_publishers.insert(origin);
        }
        if todo.block {
            let notice = FlowNotice {
                channel: origin,
                signal: FlowSignal::Block {
                    queue: QueueRef {
                        id: queue,
                        home: shard.id,
                    },
                    name: q.name.clone(),
                },
            };
            self.common.outbox.flow(origin.shard, notice);
        }
        if let Some(change) = todo.flow {
            self.flow_changed(shard, queue, change);
        }
        if todo.arm {
            self.ensure_policy_timer(shard, queue);
        }
        if let Some(threshold) = todo.fire {
            self.slow_consumer_breach(shard, queue, threshold, now);
        }
    }

    /// A queue held less than before (ack, get, purge, expiry, a ring discard, a consumer
    /// gone): it may have become underfull.
    pub(super) fn queue_shrunk(&mut self, shard: &Shard, queue: QueueId) {
        let change = match self.home.queues.get_mut(&queue) {
            Some(q) => {
                let size = q.held_bytes();
                match q.limits.capacity.as_mut() {
                    Some(cap) => cap.update(size),
                    None => None,
                }
            }
            None => None,
        };
        if let Some(change) = change {
            self.flow_changed(shard, queue, change);
        }
    }

    /// Logs a capacity change; underfull releases every publisher the queue stopped.
    pub(super) fn flow_changed(&mut self, shard: &Shard, queue: QueueId, change: FlowChange) {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        match change {
            FlowChange::Overfull { size, capacity } => OpsEvent::QueueOverfull {
                vhost: q.vhost.clone(),
                queue: q.name.to_string(),
                size,
                capacity,
            }
            .emit(),
            FlowChange::Underfull { size, resume } => {
                OpsEvent::QueueUnderfull {
                    vhost: q.vhost.clone(),
                    queue: q.name.to_string(),
                    size,
                    resume,
                }
                .emit();
                let released: Vec<ChannelRef> = q.limits.blocked_publishers.take_all();
                self.release_publishers(shard, queue, released);
            }
        }
    }

    /// Tells publishing channels that `queue` no longer stops them.
    pub(super) fn release_publishers(
        &mut self,
        shard: &Shard,
        queue: QueueId,
        channels: Vec<ChannelRef>,
    ) {
        let queue = QueueRef {
            id: queue,
            home: shard.id,
        };
        for channel in channels {
            self.common.outbox.flow(
                channel.shard,
                FlowNotice {
                    channel,
                    signal: FlowSignal::Unblock { queue },
                },
            );
        }
    }

    /// Arms the queue's periodic policy check if it needs one and it is not armed.
    pub(super) fn ensure_policy_timer(&mut self, shard: &Shard, queue: QueueId) {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        if q.limits.timer_armed || !q.limits.needs_checks() {
            return;
        }
        q.limits.timer_armed = true;
        let at = shard.clock.now() + shard.config.policies.tuning.housekeeping_interval;
        self.common.wheel.arm(at, TimerKey::QueuePolicy(queue));
    }

    /// The periodic check: measures rates, applies the age and rate thresholds, predicts
    /// breaches, writes the alert lines that are due, and re-arms.
    pub fn policy_tick(&mut self, shard: &Shard, queue: QueueId, now: Instant) {
        let tuning = &shard.config.policies.tuning;
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        q.limits.timer_armed = false;
        if q.condemned {
            return;
        }
        let mut fire = None;
        let mut shrunk = false;
        if let Some(policy) = q.limits.slow.active().cloned() {
            let judged = measure(q, tuning.housekeeping_interval, tuning.rate_window, now);
            let held = q.holdings(now);
            match policy.action {
                Action::Delete => {
                    fire = policy
                        .size_breach(&held)
                        .or_else(|| policy.age_breach(&held))
                        .or_else(|| policy.rate_breach(judged));
                }
                Action::Cycle => {
                    if let Some(max) = policy.max_age {
                        let n = q.discard_older_than(now.checked_sub(max).unwrap_or(now));
                        q.limits.alerts_mut().discards_unreported += n;
                        shrunk |= n > 0;
                    }
                    shrunk |= cycle(q, &policy);
                    if policy.rate_breach(judged).is_some()
                        && Alerts::due(
                            q.limits.alerts().and_then(|a| a.last_detected),
                            now,
                            tuning.alert_repeat_gap,
                        )
                    {
                        q.limits.alerts_mut().last_detected = Some(now);
                        let r = report(q, &policy, Threshold::Rate, now);
                        OpsEvent::SlowConsumerDetected(Box::new(r)).emit();
                    }
                }
            }
            predict(
                q,
                &policy,
                now,
                tuning.warn_horizon,
                tuning.alert_repeat_gap,
            );
        }
        report_discards(q, now, tuning.alert_repeat_gap);
        if shrunk {
            // Cycle discards the queue dead-letters (`x-slow-consumer-dead-letter`).
            self.collect_dead(queue);
            self.queue_shrunk(shard, queue);
        }
        self.ensure_policy_timer(shard, queue);
        if let Some(threshold) = fire {
            self.slow_consumer_breach(shard, queue, threshold, now);
        }
    }

    /// A delete-policy queue crossed a threshold: unless it is exempt, every channel
    /// consuming from it is closed with 506 `Consuming too slow.`, its messages are
    /// released and it is deleted.
    pub(super) fn slow_consumer_breach(
        &mut self,
        shard: &Shard,
        queue: QueueId,
        threshold: Threshold,
        now: Instant,
    ) {
        let tuning = &shard.config.policies.tuning;
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let Some(policy) = q.limits.slow.active().cloned() else {
            return;
        };
        if q.condemned {
            return;
        }
        if let Some(exempt) = policy.exemption(q.settings.durable, q.holds_persistent()) {
            if Alerts::due(
                q.limits.alerts().and_then(|a| a.last_exempt),
                now,
                tuning.alert_repeat_gap,
            ) {
                q.limits.alerts_mut().last_exempt = Some(now);
                let mut r = report(q, &policy, threshold, now);
                r.exempt = Some(exempt.name());
                OpsEvent::SlowConsumerExempt(Box::new(r)).emit();
            }
            return;
        }
        OpsEvent::SlowConsumerDetected(Box::new(report(q, &policy, threshold, now))).emit();
        q.condemned = true;
        let window = tuning.rate_window;
        self.home
            .slow_deleted
            .retain(|(_, at)| now.saturating_duration_since(*at) <= window);
        self.home.slow_deleted.push((queue, now));
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let consumers: Vec<_> = q.consumers().iter().map(|c| c.target).collect();
        let getters = q.recent_getters(now, tuning.rate_window);
        q.release_all();
        let blocked: Vec<ChannelRef> = q.limits.blocked_publishers.take_all();
        let (vhost, name) = (q.vhost_idx, q.name.clone());
        self.release_publishers(shard, queue, blocked);
        for c in consumers {
            let target = SlowTarget::Consumer {
                channel: c.channel,
                consumer: c.consumer,
            };
            self.send_slow_close(shard, c.shard, c.conn, target, queue);
        }
        for g in getters {
            let target = SlowTarget::Getter {
                channel: g.channel,
                epoch: g.epoch,
            };
            self.send_slow_close(shard, g.shard, g.conn, target, queue);
        }
        self.common
            .outbox
            .delete_home_queue(vhost, name, queue, shard.id);
    }

    /// Whether the slow-consumer policy deleted (or is deleting) this home queue.
    pub(super) fn slow_deleted(&self, queue: QueueId, now: Instant, config: &Config) -> bool {
        let window = config.policies.tuning.rate_window;
        self.home.queues.get(&queue).is_some_and(|q| q.condemned)
            || self
                .home
                .slow_deleted
                .iter()
                .any(|(id, at)| *id == queue && now.saturating_duration_since(*at) <= window)
    }

    fn send_slow_close(
        &mut self,
        shard: &Shard,
        to: u16,
        conn: ConnId,
        target: SlowTarget,
        queue: QueueId,
    ) {
        if to == shard.id {
            self.home
                .for_connections
                .slow_closes
                .push((conn, target, queue));
        } else {
            shard.peers.send(
                to,
                ShardMsg::SlowConsumer {
                    conn,
                    target,
                    queue,
                },
            );
        }
    }
}

/// Feeds the rate meters with what happened since the last check; returns the rate
/// judged over the last full window (`window`) with a backlog and a consumer.
fn measure(q: &mut Queue, interval: Duration, window: Duration, now: Instant) -> Option<f64> {
    let enqueued = q.counters.enqueued;
    let consumed = q.counters.consumed;
    let eligible =
        q.ready_count() > 0 && (q.has_consumers() || q.has_recent_getter(now, interval * 2));
    let meters = q.limits.slow.meters_mut(window);
    let arrived = enqueued - meters.seen_enqueued;
    let done = consumed - meters.seen_consumed;
    meters.seen_enqueued = enqueued;
    meters.seen_consumed = consumed;
    meters.arrival.record(arrived);
    meters.arrival.tick(now);
    meters.consume.record(done);
    meters.consume.tick(now);
    meters.window.record(done);
    meters.window.observe(now, eligible)
}

/// A cycle ring makes room: discards the oldest ready messages while the holdings are
/// over the count or depth bound. Returns whether it discarded anything.
fn cycle(q: &mut Queue, policy: &SlowConsumerPolicy) -> bool {
    let dead_letter = q.dead_letters_cycle();
    let mut n = 0;
    loop {
        let held = q.held();
        if !policy.ring_overfull(&held) || q.discard_head(dead_letter).is_none() {
            break;
        }
        n += 1;
    }
    q.limits.alerts_mut().discards_unreported += n;
    n > 0
}

/// Predicts a breach and logs a warning when it is closer than the horizon.
fn predict(
    q: &mut Queue,
    policy: &SlowConsumerPolicy,
    now: Instant,
    horizon: Duration,
    gap: Duration,
) {
    let held = q.holdings(now);
    let trend = Trend {
        arrival_rate: q.limits.slow.arrival_rate(),
        consume_rate: q.limits.slow.consume_rate(),
    };
    let prediction = policy.predict(&held, &trend);
    q.limits.slow.set_prediction(prediction);
    let Some(p) = prediction else {
        return;
    };
    if p.seconds < horizon.as_secs_f64()
        && Alerts::due(q.limits.alerts().and_then(|a| a.last_warning), now, gap)
    {
        q.limits.alerts_mut().last_warning = Some(now);
        let mut r = report(q, policy, p.threshold, now);
        r.in_seconds = Some(p.seconds);
        OpsEvent::SlowConsumerPredicted(Box::new(r)).emit();
    }
}

/// Writes the discard and reject lines that are due (one per alert gap).
fn report_discards(q: &mut Queue, now: Instant, gap: Duration) {
    let Some(alerts) = q.limits.alerts() else {
        return;
    };
    let (discards, last_discard) = (alerts.discards_unreported, alerts.last_discard_report);
    let (rejects, last_reject) = (alerts.rejects_unreported, alerts.last_reject_report);
    if discards > 0 && Alerts::due(last_discard, now, gap) {
        let reason = match q.limits.slow.active() {
            Some(p) if p.action == Action::Cycle => "slow-consumer cycle policy",
            _ => "x-max-length drop-head",
        };
        OpsEvent::QueueDiscarded {
            vhost: q.vhost.clone(),
            queue: q.name.to_string(),
            discarded: discards,
            reason,
            count: q.held_count(),
            bytes: q.held_bytes(),
        }
        .emit();
        let alerts = q.limits.alerts_mut();
        alerts.discards_unreported = 0;
        alerts.last_discard_report = Some(now);
    }
    if rejects > 0 && Alerts::due(last_reject, now, gap) {
        OpsEvent::QueueRejected {
            vhost: q.vhost.clone(),
            queue: q.name.to_string(),
            rejected: rejects,
            count: q.ready_count() as u64,
            bytes: q.ready_bytes(),
        }
        .emit();
        let alerts = q.limits.alerts_mut();
        alerts.rejects_unreported = 0;
        alerts.last_reject_report = Some(now);
    }
}

/// The numbers behind a slow-consumer line.
fn report(
    q: &Queue,
    policy: &SlowConsumerPolicy,
    threshold: Threshold,
    now: Instant,
) -> SlowReport {
    let held = q.holdings(now);
    let slow = &q.limits.slow;
    let limit = match threshold {
        Threshold::Depth => format!("{} bytes", thousands(policy.max_depth.unwrap_or(0))),
        Threshold::Count => thousands(policy.max_count.unwrap_or(0)),
        Threshold::Age => format!(
            "{} ms",
            thousands(policy.max_age.map_or(0, |a| a.as_millis() as u64))
        ),
        Threshold::Rate => format!("{:.1} msg/s", policy.min_rate.unwrap_or(0.0)),
    };
    SlowReport {
        vhost: q.vhost.clone(),
        queue: q.name.to_string(),
        threshold: threshold.name(),
        limit,
        policy: policy.action.name(),
        count: held.count,
        bytes: held.bytes,
        age_ms: held.oldest_age.map(|a| a.as_millis() as u64),
        rate: slow.judged_rate(),
        arrival: slow.arrival_rate(),
        in_seconds: None,
        exempt: None,
    }
}
