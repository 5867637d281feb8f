//! Owns: the broker-wide disk alarm (RabbitMQ's `disk_free_limit`) — the free space of
//! the data dir's file system (`statvfs`: `f_bavail × f_frsize`, read by the
//! coordinating shard (0) once per tick, never on the write path), the limit, one slot
//! per writer (each shard's segments, then the definitions log) where a writer whose
//! write or fsync failed posts the bytes it waits to write again, and the alarm: on
//! while the free space is below the limit or any writer waits, logging MST-1013 and
//! MST-1014.
//!
//! Does not: block anyone (each shard applies the alarm to its own publishers, see
//! `shard::conns::flow`) or write (`shard::home::persist` retries a failed group once
//! [`DiskFree::room_for`] says the space is back).
//!
//! # Invariants
//! - The alarm is cleared only by [`DiskFree::evaluate`] (shard 0), and only when no
//!   writer waits: a failed write raises it even while `statvfs` shows room (EIO, a
//!   quota), and it stays up until the write went through.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ops::store_event::StoreEvent;

/// Free bytes not read yet (or `statvfs` failed every time so far).
const UNKNOWN: u64 = u64::MAX;

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    waiting: AtomicU64,
}

/// Shared by `Arc` (inside the store's `DiskBoard`); only atomics inside.
pub struct DiskFree {
    path: PathBuf,
    limit: u64,
    free: AtomicU64,
    alarm: AtomicBool,
    /// Bytes each writer waits to write again after a failure (0: none).
    slots: Vec<Slot>,
}

/// Free bytes for unprivileged writers on the file system holding `path`.
pub fn statvfs_free(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes only into the zeroed struct we own; `c` is NUL-terminated.
    let (rc, st) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st), st)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

impl DiskFree {
    /// The alarm for the file system holding `path`, at `limit` bytes, with `writers`
    /// slots (the shards, plus one for the definitions log).
    pub fn new(path: PathBuf, limit: u64, writers: usize) -> DiskFree {
        DiskFree {
            path,
            limit,
            free: AtomicU64::new(UNKNOWN),
            alarm: AtomicBool::new(false),
            slots: (0..writers).map(|_| Slot::default()).collect(),
        }
    }

    /// The configured limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Free bytes at the last check (`None` before the first one).
    pub fn free(&self) -> Option<u64> {
        let f = self.free.load(Ordering::Relaxed);
        (f != UNKNOWN).then_some(f)
    }

    /// Whether publishers are to be blocked.
    #[inline]
    pub fn alarm(&self) -> bool {
        self.alarm.load(Ordering::Acquire)
    }

    /// Bytes waiting to be written again, over all writers.
    pub fn waiting(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.waiting.load(Ordering::Relaxed))
            .fold(0, u64::saturating_add)
    }

    /// Reads the free space and evaluates the alarm (shard 0, each tick). A failing
    /// `statvfs` keeps the last figure.
    pub fn check(&self) {
        match statvfs_free(&self.path) {
            Ok(free) => self.free.store(free, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!(target: "sluice::ops", "statvfs {}: {e}", self.path.display())
            }
        }
        self.evaluate();
    }

    /// Sets or clears the alarm from the last free figure and the waiting writers.
    pub fn evaluate(&self) {
        let free = self.free.load(Ordering::Relaxed);
        let waiting = self.waiting();
        let low = free != UNKNOWN && free < self.limit;
        if low || waiting > 0 {
            self.raise(free, waiting > 0 && !low);
        } else if self.alarm.swap(false, Ordering::AcqRel) {
            StoreEvent::DiskAlarmCleared {
                path: self.path.display().to_string(),
                free,
                limit: self.limit,
            }
            .emit();
        }
    }

    fn raise(&self, free: u64, write_failed: bool) {
        if !self.alarm.swap(true, Ordering::AcqRel) {
            StoreEvent::DiskAlarmSet {
                path: self.path.display().to_string(),
                free: (free != UNKNOWN).then_some(free),
                limit: self.limit,
                write_failed,
            }
            .emit();
        }
    }

    /// Writer `slot`'s write failed: it waits to write `bytes` again. Raises the alarm
    /// at once (on any shard).
    pub fn write_failed(&self, slot: usize, bytes: u64) {
        if let Some(s) = self.slots.get(slot) {
            s.waiting.store(bytes.max(1), Ordering::Relaxed);
        }
        self.raise(self.free.load(Ordering::Relaxed), true);
    }

    /// Writer `slot` wrote what it was waiting to; the alarm clears at the next
    /// evaluation if nothing else holds it.
    pub fn write_done(&self, slot: usize) {
        if let Some(s) = self.slots.get(slot) {
            s.waiting.store(0, Ordering::Relaxed);
        }
    }

    /// Whether a write of `bytes` may be tried again: the last check saw at least the
    /// limit plus `bytes` free (an unknown figure counts as room).
    pub fn room_for(&self, bytes: u64) -> bool {
        let free = self.free.load(Ordering::Relaxed);
        free == UNKNOWN || free >= self.limit.saturating_add(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_follows_free_space_and_failed_writes() {
        let d = DiskFree::new(PathBuf::from("/"), 1000, 3);
        d.evaluate();
        assert!(!d.alarm(), "unknown free space raises nothing");
        d.free.store(999, Ordering::Relaxed);
        d.evaluate();
        assert!(d.alarm());
        assert!(!d.room_for(0));
        d.free.store(1000, Ordering::Relaxed);
        d.evaluate();
        assert!(!d.alarm(), "free == limit is enough, as RabbitMQ");
        d.write_failed(1, 500);
        assert!(d.alarm(), "a failed write raises it at once");
        d.evaluate();
        assert!(d.alarm(), "and it holds while the write waits, room or not");
        assert!(!d.room_for(d.waiting()));
        d.free.store(1500, Ordering::Relaxed);
        assert!(d.room_for(d.waiting()));
        d.write_done(1);
        d.evaluate();
        assert!(!d.alarm());
    }

    #[test]
    fn statvfs_reads_a_real_file_system() {
        assert!(statvfs_free(Path::new("/")).is_ok());
        let missing = statvfs_free(Path::new("/no/such/dir/at/all")).map_err(|e| e.kind());
        assert_eq!(missing, Err(std::io::ErrorKind::NotFound));
    }
}
