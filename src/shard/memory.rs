//! Owns: the broker-wide memory watermark across shards — the board where each shard
//! posts its ledger figure (one cache line each), the alarm the coordinating shard (0)
//! raises and lowers with the watermark's hysteresis, and finding the memory the broker
//! may use (the machine's, or its cgroup limit, found by `cgroup`).
//!
//! Does not: count memory (the ledger does, per thread) or act on the alarm (each shard
//! blocks and releases its own publishers, see `flow`).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crate::model::ledger::{self, LedgerSnapshot};
use crate::ops::event::OpsEvent;
use crate::policy::watermark::Watermark;

/// One shard's posted ledger, alone on its cache line.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    messages: AtomicI64,
    entries: AtomicI64,
    outbound: AtomicI64,
    partial: AtomicI64,
}

/// What every shard posts and reads. Shared by `Arc`; only atomics inside.
pub struct MemoryBoard {
    slots: Vec<Slot>,
    alarm: AtomicBool,
    used: AtomicU64,
    pub high: u64,
    pub low: u64,
}

impl MemoryBoard {
    pub fn new(shards: usize, low: u64, high: u64) -> MemoryBoard {
        MemoryBoard {
            slots: (0..shards).map(|_| Slot::default()).collect(),
            alarm: AtomicBool::new(false),
            used: AtomicU64::new(0),
            high,
            low: low.min(high),
        }
    }

    /// Posts this thread's (this shard's) ledger.
    pub fn post(&self, shard: usize) {
        if let Some(slot) = self.slots.get(shard) {
            let l = ledger::snapshot();
            slot.messages.store(l.messages, Ordering::Relaxed);
            slot.entries.store(l.entries, Ordering::Relaxed);
            slot.outbound.store(l.outbound, Ordering::Relaxed);
            slot.partial.store(l.partial, Ordering::Relaxed);
        }
    }

    /// The whole broker's ledger, as last posted.
    pub fn sum(&self) -> LedgerSnapshot {
        let mut sum = LedgerSnapshot::default();
        for s in &self.slots {
            sum.messages += s.messages.load(Ordering::Relaxed);
            sum.entries += s.entries.load(Ordering::Relaxed);
            sum.outbound += s.outbound.load(Ordering::Relaxed);
            sum.partial += s.partial.load(Ordering::Relaxed);
        }
        sum
    }

    /// Message memory held by the whole broker, as last posted.
    pub fn total(&self) -> u64 {
        self.sum().total().max(0) as u64
    }

    /// Whether publishers are to be blocked.
    pub fn alarm(&self) -> bool {
        self.alarm.load(Ordering::Acquire)
    }

    /// The total at the last evaluation.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Evaluates the watermark (the coordinating shard does this each tick) and logs a
    /// change.
    pub fn evaluate(&self, watermark: &mut Watermark) {
        let used = self.total();
        self.used.store(used, Ordering::Relaxed);
        match watermark.update(used) {
            Some(true) => {
                self.alarm.store(true, Ordering::Release);
                OpsEvent::MemoryAlarmSet {
                    used,
                    high: watermark.high,
                }
                .emit();
            }
            Some(false) => {
                self.alarm.store(false, Ordering::Release);
                OpsEvent::MemoryAlarmCleared {
                    used,
                    low: watermark.low,
                }
                .emit();
            }
            None => {}
        }
    }
}

/// The memory the broker may use, and where that figure came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// The cgroup file whose limit was used; `None` when it is the machine's RAM.
    pub cgroup_file: Option<String>,
}

/// Memory available to the broker: the machine's RAM, or the limit of the process's own
/// cgroup (v1, v2 or hybrid, see `cgroup`) when that is lower.
pub fn available_memory() -> Available {
    // SAFETY: sysinfo only writes into the zeroed struct we own.
    let ram = unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) == 0 {
            (info.totalram as u64).saturating_mul(u64::from(info.mem_unit))
        } else {
            0
        }
    };
    let cgroup = super::cgroup::cgroup_limit(&|path| std::fs::read_to_string(path).ok());
    match cgroup {
        Some(c) if ram == 0 || c.bytes < ram => Available {
            bytes: c.bytes,
            cgroup_file: Some(c.file),
        },
        _ => Available {
            bytes: ram,
            cgroup_file: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarm_follows_the_posted_totals() {
        let board = MemoryBoard::new(2, 80, 100);
        let mut w = Watermark::new(board.high, board.low);
        board.slots[0].messages.store(60, Ordering::Relaxed);
        board.slots[1].entries.store(50, Ordering::Relaxed);
        board.evaluate(&mut w);
        assert!(board.alarm());
        board.slots[1].entries.store(-10, Ordering::Relaxed);
        board.evaluate(&mut w);
        assert!(!board.alarm());
        assert_eq!(board.used(), 50);
        assert_eq!(board.sum().messages, 60);
        assert!(available_memory().bytes > 0);
    }
}
