//! Owns: the configuration of the overload policies — slow-consumer defaults per virtual
//! host and per `[[topic]]` entry, queue capacity per virtual host and per `[[queue]]`
//! entry, the policy machinery's timing, producer flow-control enforcement and the
//! memory watermark — and how a queue's effective settings are looked up from them.
//!
//! Does not: parse TOML (that is `file`) or read declare arguments (the `policy` module
//! does; declare arguments override what is found here).

use std::time::Duration;

use crate::policy::capacity::CapacitySettings;
use crate::policy::slow_consumer::SlowConsumerSettings;
use crate::policy::watermark::MemoryLimit;
pub use crate::store::quota::StoreQuota;

/// Timing of the per-queue policy checks on each shard's timer wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyTuning {
    /// How often age and rate are checked and predictions made (min 10 ms).
    pub housekeeping_interval: Duration,
    /// The window a consumption rate is measured over before it is judged.
    pub rate_window: Duration,
    /// A predicted breach closer than this is logged as a warning.
    pub warn_horizon: Duration,
    /// Minimum gap between two alert lines about one queue.
    pub alert_repeat_gap: Duration,
}

/// Producer flow-control enforcement on clients that ignore `channel.flow`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowTuning {
    /// Bytes a flow-stopped channel may still publish (what was in flight) before its
    /// connection is no longer read.
    pub grace_bytes: u64,
    /// How long a connection that also holds unacknowledged deliveries is left unread
    /// before the channel that ignores flow control is closed and reading resumes.
    pub enforcement_timeout: Duration,
}

/// The broker-wide memory limit on message data.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryConfig {
    /// Above this, every publisher is blocked.
    pub high_watermark: MemoryLimit,
    /// Below this, publishers resume; `None` means 90% of the high watermark.
    pub low_watermark: Option<MemoryLimit>,
    /// How often the memory ledger is logged (BRK-1010) when it changed; zero: never.
    pub report_interval: Duration,
    /// How often each shard gives freed memory back to the operating system; zero: never.
    pub return_interval: Duration,
    /// Whether the heap may be backed by transparent huge pages (2 MiB): fewer TLB
    /// misses at very high message rates, for about twice the RSS per heap byte in use.
    pub huge_pages: bool,
}

/// Defaults for every queue of one virtual host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VhostDefaults {
    pub capacity: CapacitySettings,
    /// Slow-consumer policy for the vhost's topic queues.
    pub slow_consumer: SlowConsumerSettings,
    /// The store's disk quota for this vhost's producers.
    pub store_quota: StoreQuota,
}

/// A `[[topic]]` entry: slow-consumer settings for queues bound to `exchange` with
/// exactly `binding`, or for the queue named `queue` (a durable subscription).
#[derive(Clone, Debug, PartialEq)]
pub struct TopicEntry {
    pub vhost: String,
    pub exchange: String,
    pub binding: Option<String>,
    pub queue: Option<String>,
    pub slow_consumer: SlowConsumerSettings,
}

/// A `[[queue]]` entry: capacity of one named queue.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueEntry {
    pub vhost: String,
    pub name: String,
    pub capacity: CapacitySettings,
}

/// Everything the policies read from the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Policies {
    pub tuning: PolicyTuning,
    pub flow: FlowTuning,
    pub memory: MemoryConfig,
    /// Per virtual host, by name; a vhost without an entry uses `VhostDefaults::default()`.
    pub vhosts: Vec<(String, VhostDefaults)>,
    pub topics: Vec<TopicEntry>,
    pub queues: Vec<QueueEntry>,
}

impl Default for Policies {
    fn default() -> Policies {
        Policies {
            tuning: PolicyTuning {
                housekeeping_interval: Duration::from_secs(1),
                rate_window: Duration::from_secs(5),
                warn_horizon: Duration::from_secs(10),
                alert_repeat_gap: Duration::from_secs(10),
            },
            flow: FlowTuning {
                grace_bytes: 256 * 1024,
                enforcement_timeout: Duration::from_secs(5),
            },
            memory: MemoryConfig {
                high_watermark: MemoryLimit::Fraction(0.4),
                low_watermark: None,
                report_interval: Duration::ZERO,
                return_interval: Duration::from_secs(1),
                huge_pages: false,
            },
            vhosts: Vec::new(),
            topics: Vec::new(),
            queues: Vec::new(),
        }
    }
}

impl Policies {
    /// The defaults of one virtual host.
    pub fn vhost(&self, vhost: &str) -> VhostDefaults {
        self.vhosts
            .iter()
            .find(|(name, _)| name == vhost)
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    }

    /// A queue's capacity from the configuration: its `[[queue]]` entry over the vhost
    /// default (declare arguments go on top of this).
    pub fn queue_capacity(&self, vhost: &str, queue: &str) -> CapacitySettings {
        let base = self.vhost(vhost).capacity;
        match self
            .queues
            .iter()
            .find(|q| q.vhost == vhost && q.name == queue)
        {
            Some(entry) => entry.capacity.over(&base),
            None => base,
        }
    }

    /// The `[[topic]]` entry for a durable subscription named `queue`, if any.
    pub fn topic_for_queue(&self, vhost: &str, queue: &str) -> Option<&TopicEntry> {
        self.topics
            .iter()
            .find(|t| t.vhost == vhost && t.queue.as_deref() == Some(queue))
    }

    /// The `[[topic]]` entry for a binding of `exchange` with `binding`, if any.
    pub fn topic_for_binding(
        &self,
        vhost: &str,
        exchange: &str,
        binding: &str,
    ) -> Option<&TopicEntry> {
        self.topics.iter().find(|t| {
            t.vhost == vhost && t.exchange == exchange && t.binding.as_deref() == Some(binding)
        })
    }

    /// The low and high watermarks in bytes, given the memory available.
    pub fn watermarks(&self, available: u64) -> (u64, u64) {
        let high = self.memory.high_watermark.resolve(available);
        let low = match self.memory.low_watermark {
            Some(l) => l.resolve(available),
            None => high / 10 * 9,
        };
        (low, high)
    }
}
