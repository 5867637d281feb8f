//! Owns: the persistent store under `--data-dir` — durable definitions
//! (`definitions`, written by the coordinator before it answers), each shard's message
//! segments (`shard_store` at run time, `recovery` at start, `rehome` when the shard
//! count changed), the record format they share (`record`, `message_log`), the streams'
//! segments' format (`stream_log`) and the disk quota (`quota`). Durable queues journal their removals in `model::journal`.
//!
//! Does not: route, enqueue or deliver, or read the configuration (`server` builds its
//! [`StoreOptions`] and each vhost's [`quota::StoreQuota`]). The shard stages persistent
//! messages that enter durable queues and holds their confirms until the group that
//! holds them is on disk.
//!
//! Layout:
//! ```text
//! DATA_DIR/definitions.log                 durable exchanges, queues, bindings, run-time
//!                                          users, permissions, vhosts, policies
//! DATA_DIR/messages/store.meta             the shard count of this layout
//! DATA_DIR/messages/shard-<i>/<n>.seg      shard i's segments, n = 00000001, …
//! DATA_DIR/streams/<queue id>/<n>.seg      a stream's own segments (`stream_log`)
//! ```

pub mod access;
pub mod definitions;
pub mod definitions_writer;
pub mod disk_free;
pub mod message_log;
pub mod page;
pub mod policies;
pub mod quota;
pub mod record;
pub mod recovery;
pub mod rehome;
pub mod shard_store;
pub mod stream_log;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::model::ids::{QueueId, ShardId};
use crate::model::routing::{Directory, DirectoryChange};
use crate::ops::store_event::StoreEvent;

pub use recovery::RecoveredShard;

/// Syncs a directory, so that the files created, renamed or removed in it stay so.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The data dir's lock: held (flock) for as long as the broker runs, so that a second
/// broker started on the same directory stops instead of writing the same files.
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the data dir's lock file, or says who may hold it.
pub fn lock_data_dir(data_dir: &Path) -> std::io::Result<DataDirLock> {
    use std::os::fd::AsRawFd;
    let path = data_dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    // SAFETY: flock on a descriptor we own; it is released when the file is closed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "{} is locked: another sluice uses this data dir (give each broker its own --data-dir)",
                path.display()
            ),
        ));
    }
    Ok(DataDirLock { _file: file })
}

/// What the store found at start.
pub struct Recovered {
    /// Held until the broker stops.
    pub lock: DataDirLock,
    /// The durable definitions as directory changes, for every shard to apply before it
    /// accepts connections.
    pub changes: Vec<DirectoryChange>,
    /// The next queue id the coordinator may hand out.
    pub next_queue_id: u64,
    /// Each shard's segments and queue entries.
    pub shards: Vec<RecoveredShard>,
    /// Bytes of `definitions.log` after compaction.
    pub definitions_bytes: u64,
    /// Users and permissions changed at run time, to put over the file's.
    pub access: access::AccessOverlay,
    /// Policies set at run time (`policies`), RabbitMQ's JSON of each.
    pub policies: policies::StoredPolicies,
}

/// Why the store could not be opened.
#[derive(Debug)]
pub struct StoreError {
    pub path: String,
    pub error: std::io::Error,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "message store at {}: {}", self.path, self.error)
    }
}

impl std::error::Error for StoreError {}

/// What [`open`] needs to know of the broker (the caller builds it from its
/// configuration).
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// The shard count of this run; the segments are re-homed if it changed.
    pub shards: usize,
    /// The configured virtual hosts; durable definitions of others are not loaded.
    pub vhosts: Vec<String>,
    /// A segment file rolls over once it holds this many bytes (`store.segment_size`).
    pub segment_size: u64,
}

/// Opens the store: reads and compacts the definitions, re-homes the segments if the
/// shard count changed, and reads every shard's segments back. `home_shard(vhost,
/// name, shards)` is the broker's placement rule.
pub fn open(
    options: &StoreOptions,
    home_shard: fn(&str, &[u8], usize) -> ShardId,
) -> Result<Recovered, StoreError> {
    let data_dir = options.data_dir.as_path();
    let fail = |error: std::io::Error| StoreError {
        path: data_dir.display().to_string(),
        error,
    };
    let started = Instant::now();
    std::fs::create_dir_all(data_dir).map_err(fail)?;
    let lock = lock_data_dir(data_dir).map_err(fail)?;
    StoreEvent::Location {
        path: data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf())
            .display()
            .to_string(),
    }
    .emit();
    StoreEvent::RecoveryStart.emit();
    rehome::tidy(data_dir).map_err(fail)?;
    let loaded = definitions::load(data_dir).map_err(fail)?;
    if let Some(event) = recovery::damage_event(
        &data_dir.join(definitions::FILE),
        &loaded.skipped,
        loaded.truncated.as_ref(),
    ) {
        event.emit();
    }
    let defs = loaded.definitions;
    let definitions_bytes = match definitions::compact(data_dir, &defs) {
        Ok(n) => n,
        // A full disk must not keep the broker from starting: the log as it is (cut
        // back to its last good record, which needs no space) replays to the same set.
        Err(e) => {
            let _ = std::fs::remove_file(data_dir.join(format!("{}.tmp", definitions::FILE)));
            StoreEvent::DefinitionsKept {
                path: data_dir.join(definitions::FILE).display().to_string(),
                error: e.to_string(),
            }
            .emit();
            definitions::keep_as_is(data_dir, loaded.good_len).map_err(fail)?
        }
    };
    let shards = options.shards;
    // The configured vhosts with those created and deleted at run time (the broker puts
    // the same overlay over its configuration, `config::access`).
    let vhosts = defs.access.vhosts_over(&options.vhosts);
    let directory = Directory::new(&vhosts);
    let (changes, missing) = defs.changes(&directory, &move |vhost, name| {
        home_shard(vhost, name, shards)
    });
    for vhost in missing {
        tracing::warn!(
            target: "sluice::ops",
            "durable definitions of vhost {vhost:?} are not loaded: the vhost is not configured"
        );
    }
    // Every defined queue: its vhost and name (for the log) and its home now — also
    // those of a vhost this run does not load: their messages stay counted on disk
    // (never collected, carried along by a re-homing) until the vhost is back.
    let mut queues: HashMap<QueueId, (String, String, usize)> = HashMap::new();
    for ((vhost, name), q) in &defs.queues {
        let home = usize::from(home_shard(vhost, name.as_bytes(), shards));
        queues.insert(q.id, (vhost.clone(), name.to_string(), home));
    }
    // A stream's files are its own directory; one whose queue the definitions no
    // longer have was deleted (while the broker was down, or before a crash finished).
    stream_log::remove_orphans(data_dir, |id| queues.contains_key(&id)).map_err(fail)?;
    let segment_size = options.segment_size;
    let recorded = rehome::recorded_shards(data_dir).map_err(fail)?;
    match recorded {
        Some(old) if old != shards => {
            let moved = queues
                .values()
                .filter(|(vhost, name, home)| {
                    home_shard(vhost, name.as_bytes(), old) as usize != *home
                })
                .count();
            rehome::rehome(data_dir, old, shards, segment_size, &|q| {
                queues.get(&q).map(|(_, _, home)| *home)
            })
            .map_err(fail)?;
            StoreEvent::QueuesRehomed {
                moved,
                total: queues.len(),
                from: old,
                to: shards,
            }
            .emit();
        }
        Some(_) => {}
        None => rehome::write_meta(&data_dir.join("messages"), shards).map_err(fail)?,
    }
    let mut recovered = Vec::with_capacity(shards);
    let mut total = 0;
    let mut non_empty = 0;
    for shard in 0..shards {
        let dir = shard_store::shard_dir(data_dir, shard);
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let read = recovery::read_shard(&dir, &|q| {
            queues.get(&q).is_some_and(|(_, _, home)| *home == shard)
        })
        .map_err(fail)?;
        for (queue, entries) in &read.queues {
            if let Some((vhost, name, _)) = queues.get(queue) {
                StoreEvent::QueueRecovered {
                    vhost: vhost.clone(),
                    queue: name.clone(),
                    messages: entries.len(),
                }
                .emit();
            }
            total += entries.len();
            non_empty += usize::from(!entries.is_empty());
        }
        recovered.push(read);
    }
    StoreEvent::RecoveryComplete {
        messages: total,
        queues: non_empty,
        millis: started.elapsed().as_millis() as u64,
    }
    .emit();
    Ok(Recovered {
        lock,
        changes,
        next_queue_id: defs.next_queue_id.max(1),
        shards: recovered,
        definitions_bytes,
        access: defs.access,
        policies: defs.policies,
    })
}
