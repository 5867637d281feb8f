//! Owns: a queue's settings fixed at declaration (TTL, durability, exclusivity,
//! expiry, priorities, single active consumer, dead-letter target, the declare
//! arguments) and their sharing: thousands of queues declared alike hold one copy
//! ([`QueueSettings::shared`], issue 23).
//!
//! Does not: read declare arguments (`shard::control::plan` and `shard::home::policy`
//! build the settings) or change a queue's settings in place (a run-time policy
//! replaces them, `shard::home::runtime_policy`).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use crate::model::dead_letter::DeadLetterTarget;
use crate::protocol::FieldTable;

/// Queue properties fixed at declaration. In declaration order (`repr(C)`): what every
/// enqueue checks first (see [`Queue`](super::Queue)). A queue holds them shared
/// ([`QueueSettings::shared`]): thousands of subscribers' queues declared alike hold one
/// copy.
#[derive(Clone, Debug, Default, PartialEq)]
#[repr(C)]
pub struct QueueSettings {
    /// `x-message-ttl`.
    pub message_ttl: Option<Duration>,
    /// Durable and not exclusive: its persistent messages are in the store, and what
    /// happens to them is journaled (`store::journal`).
    pub stored: bool,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    /// `x-expires`: delete after this long without consumers, gets or redeclares.
    pub expires: Option<Duration>,
    /// `x-max-priority` (1 to 255): a priority queue with levels `0..=max`.
    pub max_priority: Option<u8>,
    /// `x-single-active-consumer`: only the earliest registered consumer receives.
    pub single_active_consumer: bool,
    /// `x-dead-letter-exchange` and friends: where messages that die here go.
    /// Boxed: most queues have none, and the target is 72 bytes (issue 23).
    pub dead_letter: Option<Box<DeadLetterTarget>>,
    pub arguments: FieldTable,
}

thread_local! {
    /// The settings the last queue made on this thread (its shard) got.
    static LAST_SETTINGS: RefCell<Option<Rc<QueueSettings>>> = const { RefCell::new(None) };
}

impl QueueSettings {
    /// These settings as a queue holds them: shared with the last queue made (or changed
    /// by a run-time policy) on this thread if it has the same — a burst of subscribers
    /// declares queues alike — in an allocation of their own otherwise. Shared, they
    /// cost a queue a pointer instead of 80 bytes, and stay in the cache for all of
    /// them (issue 23).
    pub fn shared(self) -> Rc<QueueSettings> {
        LAST_SETTINGS.with_borrow_mut(|last| match last {
            Some(last) if **last == self => Rc::clone(last),
            _ => Rc::clone(last.insert(Rc::new(self))),
        })
    }
}
