//! Owns: the store's disk quota across shards (seed 001, "Disk quota-based flow
//! control") — the board where each shard posts the bytes of its segment files (one
//! cache line each) and the coordinator the size of the definitions log, and the
//! per-vhost alarm the coordinating shard (0) raises above `store_overfull_size` and
//! lowers below `store_underfull_size`, logging MST-1008 / MST-1009.
//!
//! Does not: block anyone (each shard applies the alarm to its own publishers, with the
//! memory alarm's machinery, see `shard::conns::flow`).
//!
//! The board also carries the broker-wide disk alarm ([`DiskFree`], `disk_free_limit`),
//! so every holder of the board sees both.
//!
//! The size compared is the whole store's (one store per broker, split in per-shard
//! files); each vhost compares it with its own thresholds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ops::store_event::StoreEvent;
use crate::store::disk_free::DiskFree;

/// Store disk quota (seed 001, "Disk quota-based flow control"): above `overfull`
/// bytes on disk every producer of the vhost is blocked, below `underfull` they resume.
/// `overfull` 0 = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreQuota {
    pub overfull: u64,
    pub underfull: u64,
}

impl StoreQuota {
    /// From the file's values: an underfull of 0 is 90% of overfull.
    pub fn new(overfull: u64, underfull: u64) -> Result<StoreQuota, String> {
        if overfull > 0 && underfull > overfull {
            return Err(format!(
                "store_underfull_size {underfull} is above store_overfull_size {overfull}"
            ));
        }
        let underfull = if underfull == 0 {
            overfull / 10 * 9
        } else {
            underfull
        };
        Ok(StoreQuota {
            overfull,
            underfull,
        })
    }
}

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    bytes: AtomicU64,
}

/// Shared by `Arc`; only atomics inside.
pub struct DiskBoard {
    slots: Vec<Slot>,
    definitions: AtomicU64,
    /// Per vhost (by index): its quota and whether its producers are blocked.
    quotas: Vec<(String, StoreQuota)>,
    alarms: Vec<AtomicBool>,
    /// Free space on the data dir's file system and the disk alarm.
    pub free: DiskFree,
}

impl DiskBoard {
    pub fn new(shards: usize, quotas: Vec<(String, StoreQuota)>, free: DiskFree) -> DiskBoard {
        DiskBoard {
            free,
            slots: (0..shards).map(|_| Slot::default()).collect(),
            definitions: AtomicU64::new(0),
            alarms: quotas.iter().map(|_| AtomicBool::new(false)).collect(),
            quotas,
        }
    }

    /// Posts a shard's segment bytes.
    pub fn post(&self, shard: usize, bytes: u64) {
        if let Some(s) = self.slots.get(shard) {
            s.bytes.store(bytes, Ordering::Relaxed);
        }
    }

    /// Posts the definitions log's size.
    pub fn post_definitions(&self, bytes: u64) {
        self.definitions.store(bytes, Ordering::Relaxed);
    }

    /// The store's size on disk, as last posted.
    pub fn total(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.bytes.load(Ordering::Relaxed))
            .sum::<u64>()
            + self.definitions.load(Ordering::Relaxed)
    }

    /// Whether vhost `idx`'s producers are to be blocked.
    #[inline]
    pub fn alarm(&self, vhost: usize) -> bool {
        self.alarms
            .get(vhost)
            .is_some_and(|a| a.load(Ordering::Acquire))
    }

    /// Every vhost that has a quota: its name, thresholds and whether its producers are
    /// blocked now (the management API's `store_quotas`).
    pub fn quotas(&self) -> impl Iterator<Item = (&str, StoreQuota, bool)> + '_ {
        self.quotas
            .iter()
            .zip(&self.alarms)
            .filter(|((_, quota), _)| quota.overfull > 0)
            .map(|((vhost, quota), alarm)| (vhost.as_str(), *quota, alarm.load(Ordering::Acquire)))
    }

    /// Whether any vhost has a quota (nothing to evaluate otherwise).
    pub fn has_quotas(&self) -> bool {
        self.quotas.iter().any(|(_, q)| q.overfull > 0)
    }

    /// Evaluates every vhost's quota (the coordinating shard, each tick) and logs the
    /// changes.
    pub fn evaluate(&self) {
        if !self.has_quotas() {
            return;
        }
        let size = self.total();
        for ((vhost, quota), alarm) in self.quotas.iter().zip(&self.alarms) {
            if quota.overfull == 0 {
                continue;
            }
            let on = alarm.load(Ordering::Relaxed);
            if !on && size > quota.overfull {
                alarm.store(true, Ordering::Release);
                StoreEvent::Overfull {
                    vhost: vhost.clone(),
                    size,
                    overfull: quota.overfull,
                }
                .emit();
            } else if on && size < quota.underfull {
                alarm.store(false, Ordering::Release);
                StoreEvent::Underfull {
                    vhost: vhost.clone(),
                    size,
                    underfull: quota.underfull,
                }
                .emit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_has_hysteresis_per_vhost() {
        let quota = StoreQuota::new(1000, 500).expect("valid");
        let board = DiskBoard::new(
            2,
            vec![("/".into(), quota), ("free".into(), StoreQuota::default())],
            DiskFree::new("/".into(), 0, 3),
        );
        board.post(0, 600);
        board.post(1, 300);
        board.post_definitions(50);
        board.evaluate();
        assert!(!board.alarm(0), "950 is under 1000");
        board.post(1, 460);
        board.evaluate();
        assert!(board.alarm(0));
        assert!(!board.alarm(1), "no quota, never blocked");
        board.post(0, 100);
        board.evaluate();
        assert!(board.alarm(0), "610 is not under 500 yet");
        let shown: Vec<_> = board.quotas().collect();
        assert_eq!(shown, vec![("/", quota, true)], "only vhosts with a quota");
        board.post(1, 300);
        board.evaluate();
        assert!(!board.alarm(0));
        assert!(!board.quotas().any(|(_, _, blocked)| blocked));
    }
}
