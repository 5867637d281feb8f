//! Owns: [`StoreEvent`], the operational log lines of the persistent store (`MST-`
//! codes, Qpid's message-store codes), rendered and emitted under `sluice::ops` like
//! every [`super::event::OpsEvent`]. Documented in `config/log-codes.md`.
//!
//! Does not: decide when they happen (`store` and `shard::home::persist` do).

use std::fmt;

use tracing::Level;

use super::escape::Escaped;
use super::event::thousands;
use super::fields::{LineFields, LogFields};

/// The damaged regions in the middle of one file that recovery skipped (MST-1010).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRegions {
    pub regions: u64,
    /// Damaged records in them; `at_least` when a region's framing was damaged too (it
    /// counts as one record then).
    pub records: u64,
    pub at_least: bool,
    pub bytes: u64,
    /// The first region's offset, and why its record failed.
    pub first_offset: u64,
    pub first_reason: String,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// One store event.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreEvent {
    /// MST-1002: where the store lives (at start).
    Location { path: String },
    /// MST-1003: a shard's store closed at shutdown, with what it wrote.
    Closed {
        shard: u16,
        commits: u64,
        fsyncs: u64,
        bytes: u64,
    },
    /// MST-1004: recovery begins.
    RecoveryStart,
    /// MST-1005: a durable queue's messages were recovered.
    QueueRecovered {
        vhost: String,
        queue: String,
        messages: usize,
    },
    /// MST-1006: recovery is complete.
    RecoveryComplete {
        messages: usize,
        queues: usize,
        millis: u64,
    },
    /// MST-1007: the shard count changed and queues moved to their new home shards.
    QueuesRehomed {
        moved: usize,
        total: usize,
        from: usize,
        to: usize,
    },
    /// MST-1008: the store is over a vhost's `store_overfull_size`: its producers are
    /// blocked.
    Overfull {
        vhost: String,
        size: u64,
        overfull: u64,
    },
    /// MST-1009: the store fell below the vhost's `store_underfull_size`.
    Underfull {
        vhost: String,
        size: u64,
        underfull: u64,
    },
    /// MST-1010: recovery found damaged records in a file: regions in the middle were
    /// skipped (every good record after them kept), a damaged tail was cut off.
    Damaged {
        path: String,
        skipped: Option<SkippedRegions>,
        /// Where the file was cut, and why.
        truncated: Option<(u64, String)>,
    },
    /// MST-1012: memory is short: the bodies of a durable queue's persistent messages
    /// were released from memory (they are read back from disk when delivered).
    Evicted {
        vhost: String,
        queue: String,
        messages: u64,
        bytes: u64,
        on_disk_only: u64,
    },
    /// MST-1013: free space on the data dir's file system is below `disk_free_limit`,
    /// or a store write failed: every publisher is blocked.
    DiskAlarmSet {
        path: String,
        /// `None` when it could not be read yet.
        free: Option<u64>,
        limit: u64,
        /// Raised by a failed write rather than by the free space.
        write_failed: bool,
    },
    /// MST-1014: the disk alarm is cleared; publishers resume.
    DiskAlarmCleared { path: String, free: u64, limit: u64 },
    /// MST-1015: a store write or fsync failed (rate-limited per writer): the
    /// publishes that waited for it were nacked, the write is retried once space is
    /// back.
    WriteFailed {
        path: String,
        error: String,
        /// Publishes nacked (confirm ranges' messages) by this failure.
        nacked: u64,
        /// Failures since the last line that were not logged.
        suppressed: u64,
    },
    /// MST-1016: at start the definitions log could not be rewritten as a snapshot
    /// (the disk is full, say): it is kept as it is and appended to.
    DefinitionsKept { path: String, error: String },
}

impl StoreEvent {
    pub fn code(&self) -> &'static str {
        match self {
            StoreEvent::Location { .. } => "MST-1002",
            StoreEvent::Closed { .. } => "MST-1003",
            StoreEvent::RecoveryStart => "MST-1004",
            StoreEvent::QueueRecovered { .. } => "MST-1005",
            StoreEvent::RecoveryComplete { .. } => "MST-1006",
            StoreEvent::QueuesRehomed { .. } => "MST-1007",
            StoreEvent::Overfull { .. } => "MST-1008",
            StoreEvent::Underfull { .. } => "MST-1009",
            StoreEvent::Damaged { .. } => "MST-1010",
            StoreEvent::Evicted { .. } => "MST-1012",
            StoreEvent::DiskAlarmSet { .. } => "MST-1013",
            StoreEvent::DiskAlarmCleared { .. } => "MST-1014",
            StoreEvent::WriteFailed { .. } => "MST-1015",
            StoreEvent::DefinitionsKept { .. } => "MST-1016",
        }
    }

    /// Logs the event at its level, with its parts as fields ([`super::fields`]).
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

impl LogFields for StoreEvent {
    fn level(&self) -> Level {
        match self {
            StoreEvent::Overfull { .. }
            | StoreEvent::Damaged { .. }
            | StoreEvent::DiskAlarmSet { .. }
            | StoreEvent::DefinitionsKept { .. } => Level::WARN,
            StoreEvent::WriteFailed { .. } => Level::ERROR,
            _ => Level::INFO,
        }
    }

    fn fields(&self) -> LineFields<'_> {
        let code = self.code();
        match self {
            StoreEvent::Location { .. }
            | StoreEvent::RecoveryStart
            | StoreEvent::RecoveryComplete { .. }
            | StoreEvent::QueuesRehomed { .. }
            | StoreEvent::Damaged { .. }
            | StoreEvent::DiskAlarmSet { .. }
            | StoreEvent::DiskAlarmCleared { .. }
            | StoreEvent::WriteFailed { .. }
            | StoreEvent::DefinitionsKept { .. } => LineFields::code(code),
            StoreEvent::Closed { shard, .. } => LineFields {
                shard: Some(*shard),
                ..LineFields::code(code)
            },
            StoreEvent::QueueRecovered { vhost, queue, .. }
            | StoreEvent::Evicted { vhost, queue, .. } => LineFields::queue(code, vhost, queue),
            StoreEvent::Overfull { vhost, .. } | StoreEvent::Underfull { vhost, .. } => {
                LineFields {
                    vhost: Some(vhost),
                    ..LineFields::code(code)
                }
            }
        }
    }
}

impl fmt::Display for StoreEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            StoreEvent::Location { path } => write!(f, "{code} : Store location : {path}"),
            StoreEvent::Closed {
                shard,
                commits,
                fsyncs,
                bytes,
            } => write!(
                f,
                "[shard:{shard}] {code} : Closed : {commits} commits, {fsyncs} fsyncs, {bytes} bytes written"
            ),
            StoreEvent::RecoveryStart => write!(f, "{code} : Recovery Start"),
            StoreEvent::QueueRecovered {
                vhost,
                queue,
                messages,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Recovered {messages} messages for queue {queue}",
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            StoreEvent::RecoveryComplete {
                messages,
                queues,
                millis,
            } => write!(
                f,
                "{code} : Recovery Complete : {messages} messages in {queues} queues, {millis} ms"
            ),
            StoreEvent::QueuesRehomed {
                moved,
                total,
                from,
                to,
            } => write!(
                f,
                "{code} : Queues re-homed : {moved} of {total} durable queues moved from {from} to {to} shards"
            ),
            StoreEvent::Overfull {
                vhost,
                size,
                overfull,
            } => write!(
                f,
                "[vh({vhost})/ms(store)] {code} : Store overfull, flow control will be enforced : Size : {} bytes, Overfull size : {}",
                thousands(*size),
                thousands(*overfull),
                vhost = Escaped(vhost),
            ),
            StoreEvent::Underfull {
                vhost,
                size,
                underfull,
            } => write!(
                f,
                "[vh({vhost})/ms(store)] {code} : Store overfull condition cleared : Size : {} bytes, Underfull size : {}",
                thousands(*size),
                thousands(*underfull),
                vhost = Escaped(vhost),
            ),
            StoreEvent::Damaged {
                path,
                skipped: None,
                truncated,
            } => {
                let (offset, reason) = match truncated {
                    Some((offset, reason)) => (*offset, reason.as_str()),
                    None => (0, "no damage"),
                };
                write!(
                    f,
                    "{code} : Store record truncated : {path} at offset {offset} : {reason}"
                )
            }
            StoreEvent::Damaged {
                path,
                skipped: Some(s),
                truncated,
            } => {
                write!(
                    f,
                    "{code} : Store records skipped : {path} : {}{} in {}, {}, first at offset {} : {}",
                    if s.at_least { "at least " } else { "" },
                    plural(s.records, "damaged record", "damaged records"),
                    plural(s.regions, "region", "regions"),
                    plural(s.bytes, "byte", "bytes"),
                    s.first_offset,
                    s.first_reason
                )?;
                match truncated {
                    Some((offset, reason)) => {
                        write!(f, " : then truncated at offset {offset} : {reason}")
                    }
                    None => Ok(()),
                }
            }
            StoreEvent::Evicted {
                vhost,
                queue,
                messages,
                bytes,
                on_disk_only,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Evicted : {} messages, {} bytes released from memory : {} on disk only",
                thousands(*messages),
                thousands(*bytes),
                thousands(*on_disk_only),
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            StoreEvent::DiskAlarmSet {
                path,
                free,
                limit,
                write_failed,
            } => {
                let free = free.map_or_else(|| "unknown".to_owned(), thousands);
                let cause = if *write_failed { " : a store write failed" } else { "" };
                write!(
                    f,
                    "{code} : Disk free space alarm set, publishers blocked : Free : {free} bytes, Limit : {} bytes : {path}{cause}",
                    thousands(*limit),
                    path = Escaped(path),
                )
            }
            StoreEvent::DiskAlarmCleared { path, free, limit } => write!(
                f,
                "{code} : Disk free space alarm cleared : Free : {} bytes, Limit : {} bytes : {path}",
                thousands(*free),
                thousands(*limit),
                path = Escaped(path),
            ),
            StoreEvent::WriteFailed {
                path,
                error,
                nacked,
                suppressed,
            } => write!(
                f,
                "{code} : Store write failed : {path} : {error} : {nacked} publishes nacked, retried when space returns ({suppressed} more failures not logged)",
                path = Escaped(path),
            ),
            StoreEvent::DefinitionsKept { path, error } => write!(
                f,
                "{code} : Definitions log not compacted, kept as it is : {path} : {error}",
                path = Escaped(path),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_lines_read_as_the_seed_writes_them() {
        let on = StoreEvent::Overfull {
            vhost: "/test".into(),
            size: 2_000,
            overfull: 1_000,
        }
        .to_string();
        assert!(on.starts_with(
            "[vh(/test)/ms(store)] MST-1008 : Store overfull, flow control will be enforced"
        ));
        let off = StoreEvent::Underfull {
            vhost: "/test".into(),
            size: 2,
            underfull: 900,
        }
        .to_string();
        assert!(
            off.starts_with("[vh(/test)/ms(store)] MST-1009 : Store overfull condition cleared")
        );
    }

    #[test]
    fn damage_lines_say_what_was_skipped_and_cut() {
        let tail = StoreEvent::Damaged {
            path: "/d/1.seg".into(),
            skipped: None,
            truncated: Some((
                1048210,
                "torn record: 1033 bytes announced, 12 present".into(),
            )),
        };
        assert_eq!(
            tail.to_string(),
            "MST-1010 : Store record truncated : /d/1.seg at offset 1048210 : torn record: 1033 bytes announced, 12 present"
        );
        let skipped = SkippedRegions {
            regions: 1,
            records: 1,
            at_least: false,
            bytes: 1046,
            first_offset: 5230,
            first_reason: "checksum mismatch".into(),
        };
        let one = StoreEvent::Damaged {
            path: "/d/1.seg".into(),
            skipped: Some(skipped.clone()),
            truncated: None,
        };
        assert_eq!(
            one.to_string(),
            "MST-1010 : Store records skipped : /d/1.seg : 1 damaged record in 1 region, 1,046 bytes, first at offset 5230 : checksum mismatch"
        );
        let both = StoreEvent::Damaged {
            path: "/d/1.seg".into(),
            skipped: Some(SkippedRegions {
                regions: 2,
                records: 2,
                at_least: true,
                ..skipped
            }),
            truncated: Some((9000, "impossible record length 0".into())),
        };
        assert_eq!(
            both.to_string(),
            "MST-1010 : Store records skipped : /d/1.seg : at least 2 damaged records in 2 regions, 1,046 bytes, first at offset 5230 : checksum mismatch : then truncated at offset 9000 : impossible record length 0"
        );
        assert_eq!(both.code(), "MST-1010");
    }
}
