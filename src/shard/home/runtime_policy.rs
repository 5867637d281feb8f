//! Owns: putting the policies set at run time (`Config::runtime_policies`) in force on
//! this shard's home queues — the effective arguments a queue is created with (its
//! declare arguments with the policy that applies merged in, `policy::set`), and, when
//! the set changes, resolving every home queue's TTL, expiry, dead-letter target, length
//! limits, capacity and slow-consumer settings again and acting on them at once: a queue
//! now over a lower `max-length` drops (dead-letters) from its head, a queue whose
//! capacity went away or grew releases the publishers it stopped.
//!
//! Does not: validate, store or choose policies (`policy::set`, `admin::policy`), or
//! keep any state of its own: what a queue resolved lives on the queue (`QueueLimits`).

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::model::dead_letter::DeadLetterTarget;
use crate::model::ids::QueueId;
use crate::policy::queue_args::arg;
use crate::policy::set::{self, Kind, Policy};
use crate::protocol::FieldTable;

use super::QueueSide;
use crate::shard::Shard;

/// The policy that applies to queue `name` in `vhost`, and the queue's declare
/// arguments with it merged in.
pub fn effective_arguments(
    config: &Config,
    vhost: &str,
    name: &str,
    declared: &FieldTable,
) -> (Option<Arc<Policy>>, FieldTable) {
    let policy = set::select(&config.runtime_policies, vhost, name, Kind::Queue).cloned();
    let effective = set::effective_arguments(declared, policy.as_deref());
    (policy, effective)
}

/// The queue settings read from effective arguments (validated by the coordinator or
/// by `policy::set`; a value that slipped through is ignored).
pub struct Derived {
    pub message_ttl: Option<Duration>,
    pub expires: Option<Duration>,
    pub dead_letter: Option<Box<DeadLetterTarget>>,
}

impl Derived {
    pub fn of(arguments: &FieldTable) -> Derived {
        let ms = |key: &str| {
            arguments
                .get(key)
                .and_then(|v| v.as_i64())
                .and_then(|v| u64::try_from(v).ok())
                .map(Duration::from_millis)
        };
        Derived {
            message_ttl: ms(arg::MESSAGE_TTL),
            expires: ms(arg::EXPIRES),
            dead_letter: crate::model::dead_letter::target(arguments).map(Box::new),
        }
    }
}

/// Whether two queues' choices of policy are the same one (a policy put again is a new
/// `Arc`, so a changed definition counts as a change).
fn same(a: &Option<Arc<Policy>>, b: &Option<Arc<Policy>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl QueueSide<'_> {
    /// The policy set in force changed: every home queue whose policy is another one
    /// now resolves its settings again and acts on them. Returns how many changed.
    pub fn apply_policies(&mut self, shard: &Shard) -> usize {
        let live = shard.live();
        let changed: Vec<(QueueId, Option<Arc<Policy>>)> = self
            .home
            .queues
            .iter()
            .filter(|(_, q)| !q.condemned)
            .filter_map(|(id, q)| {
                let name = q.name.as_str_lossy();
                let now = set::select(&live.runtime_policies, &q.vhost, &name, Kind::Queue);
                let now = now.cloned();
                (!same(&q.limits.policy, &now)).then_some((*id, now))
            })
            .collect();
        for (queue, policy) in &changed {
            self.reapply(shard, &live, *queue, policy.clone());
        }
        changed.len()
    }

    /// Resolves `queue`'s settings with `policy` and acts on what changed.
    fn reapply(
        &mut self,
        shard: &Shard,
        live: &Config,
        queue: QueueId,
        policy: Option<Arc<Policy>>,
    ) {
        let Some(q) = self.home.queues.get_mut(&queue) else {
            return;
        };
        let effective = set::effective_arguments(&q.settings.arguments, policy.as_deref());
        let derived = Derived::of(&effective);
        let settings = crate::queue::QueueSettings {
            message_ttl: derived.message_ttl,
            expires: derived.expires,
            dead_letter: derived.dead_letter,
            ..(*q.settings).clone()
        };
        // Unchanged settings stay shared; changed ones are shared with the queues the
        // same policy changed alike just before (`QueueSettings::shared`).
        if settings != *q.settings {
            q.settings = settings.shared();
        }
        let name = q.name.as_str_lossy().into_owned();
        let fresh = super::policy::queue_limits(live, &q.vhost, &name, &effective);
        let limits = &mut q.limits;
        limits.policy = policy;
        limits.max_length = fresh.max_length;
        let had_capacity = limits.capacity.is_some();
        limits.capacity = fresh.capacity;
        limits.slow.set_declared(fresh.slow.declared().clone());
        if limits.slow.topic_bindings > 0 {
            limits.slow.policy = limits
                .slow
                .declared()
                .over(limits.slow.base())
                .resolve()
                .map(Box::new);
        }
        // A length limit or a TTL ends dispatch at the write (`Queue::refresh_pull`).
        super::queues::refresh_pull(shard, q);
        // The discards are reported by the periodic check the timer below arms.
        super::policy::drop_head_to_limit(q);
        if had_capacity && q.limits.capacity.is_none() {
            // No capacity any more: nothing stops the publishers it stopped.
            let released: Vec<_> = q.limits.blocked_publishers.take_all();
            self.release_publishers(shard, queue, released);
        }
        self.collect_dead(queue);
        self.ensure_queue_timer(queue);
        self.queue_shrunk(shard, queue);
        self.ensure_policy_timer(shard, queue);
    }
}
