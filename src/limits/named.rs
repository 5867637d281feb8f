//! Owns: [`Counter`], one count with a limit that can change while it is held, and
//! [`NamedCounts`], such counts by name (vhost or user) — every name that opened a
//! connection has one, limited or not, so that a limit set at run time starts from the
//! true count (RabbitMQ's: connections already open stay, new ones are refused).
//!
//! The map is striped and locked only to find a name's counter, when a connection opens
//! or a limit changes; the counter itself is two atomics, so a channel opening on a held
//! counter takes no lock. A name's entry stays while the broker runs (names are vhosts
//! and authenticated users: bounded by the configuration, never by a peer).
//!
//! Does not: know which limit a name has (`super::connections` sets them from the
//! configuration in force) or what a refusal says.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The limit of a counter without one.
const UNLIMITED: u32 = u32::MAX;

const STRIPES: usize = 16;

/// One limited count.
pub struct Counter {
    limit: AtomicU32,
    count: AtomicU32,
}

impl Counter {
    pub fn new(limit: Option<u32>) -> Counter {
        Counter {
            limit: AtomicU32::new(limit.unwrap_or(UNLIMITED)),
            count: AtomicU32::new(0),
        }
    }

    /// Takes one unit unless the count is at the limit; the limit that refused it.
    pub fn try_take(&self) -> Result<(), u32> {
        let limit = self.limit.load(Ordering::Acquire);
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map(|_| ())
            .map_err(|_| limit)
    }

    pub fn give(&self, units: u32) {
        self.count.fetch_sub(units, Ordering::AcqRel);
    }

    pub fn set_limit(&self, limit: Option<u32>) {
        self.limit
            .store(limit.unwrap_or(UNLIMITED), Ordering::Release);
    }

    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }
}

/// Counters by name.
pub struct NamedCounts {
    stripes: Vec<Mutex<HashMap<String, Arc<Counter>>>>,
}

impl NamedCounts {
    /// With the limits of `limited` set; every other name is unlimited.
    pub fn new(limited: &[(String, Option<u32>)]) -> NamedCounts {
        let counts = NamedCounts {
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
        };
        counts.set_limits(limited);
        counts
    }

    fn stripe(&self, name: &str) -> &Mutex<HashMap<String, Arc<Counter>>> {
        let hash = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .hash_one(name);
        &self.stripes[hash as usize % STRIPES]
    }

    /// The counter of `name`, made (unlimited) if it has none yet.
    pub fn counter(&self, name: &str) -> Arc<Counter> {
        // A poisoned stripe (a panic aborts the process first) still holds valid counts.
        let mut map = self.stripe(name).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(name) {
            return Arc::clone(c);
        }
        let c = Arc::new(Counter::new(None));
        map.insert(name.to_owned(), Arc::clone(&c));
        c
    }

    /// Puts `limited` in force: the names it lists get their limit, every other name
    /// none. Counts are kept.
    pub fn set_limits(&self, limited: &[(String, Option<u32>)]) {
        for stripe in &self.stripes {
            let map = stripe.lock().unwrap_or_else(|p| p.into_inner());
            for (name, counter) in map.iter() {
                if !limited.iter().any(|(n, _)| n == name) {
                    counter.set_limit(None);
                }
            }
        }
        for (name, limit) in limited {
            self.counter(name).set_limit(*limit);
        }
    }

    /// The count of `name` (0 for a name never counted).
    pub fn count(&self, name: &str) -> u32 {
        let map = self.stripe(name).lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).map_or(0, |c| c.count())
    }
}
