//! Owns: the shard's side of the persistent store — what the shard owns of it
//! ([`Persistence`]), putting recovered definitions and messages back at start, group
//! commit at the end of every turn (write, fdatasync, then release the confirms the
//! group held and delete the segments garbage collection freed), the durable
//! definitions the coordinator writes before it answers, the store quota and the disk
//! alarm each tick, what a failed write or fsync does (nack the publishes that waited
//! for it, withdraw their records, raise the disk alarm, write the group again once
//! space is back — never abort), and the last commit at shutdown.
//!
//! Does not: encode records or track live entries (`store::shard_store`), or decide
//! durability (queues are `stored` from their declaration).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::limits::report::Reporter;
use crate::model::ids::{ChannelRef, ShardId};
use crate::model::message::LocalMessage;
use crate::model::routing::DirectoryChange;
use crate::ops::store_event::StoreEvent;
use crate::store::definitions;
use crate::store::definitions_writer::{self, DefinitionsWriter};
use crate::store::quota::DiskBoard;
use crate::store::recovery::RecoveredShard;
use crate::store::shard_store::{self, Group, ShardStore, Spare, COMPACT_MAX_LIVE};
use crate::stream::StreamWrite;

use super::QueueSide;
use crate::shard::inbox::{ConfirmDone, RuntimeRecords};
use crate::shard::{Shard, State};

/// What a shard owns of the store.
pub struct Persistence {
    pub store: ShardStore,
    /// The coordinator's (shard 0's) definitions log; `None` on other shards.
    pub definitions: Option<DefinitionsWriter>,
    /// Store sizes and the per-vhost quota alarm, shared by all shards.
    pub disk: Arc<DiskBoard>,
}

impl Persistence {
    /// A shard store over recovered segments.
    pub fn recovered(
        config: &Config,
        shard: ShardId,
        recovered: &mut RecoveredShard,
        definitions_bytes: u64,
        disk: Arc<DiskBoard>,
    ) -> Persistence {
        let mut store = ShardStore::new(
            shard_store::shard_dir(&config.data_dir, usize::from(shard)),
            config.store.segment_size,
            config.store.fsync,
            std::mem::take(&mut recovered.segments),
            std::mem::take(&mut recovered.runs),
        );
        // Everything recovered is on disk (and may be evicted again).
        for (queue, entries) in &recovered.queues {
            if let Some(last) = entries.last() {
                store.mark_committed(*queue, last.seq);
            }
        }
        disk.post(usize::from(shard), store.disk_bytes());
        let definitions = (shard == 0).then(|| {
            disk.post_definitions(definitions_bytes);
            DefinitionsWriter::new(&config.data_dir, definitions_bytes, config.store.fsync)
        });
        Persistence {
            store,
            definitions,
            disk,
        }
    }

    /// An empty store in `dir` (unit tests).
    pub fn empty(dir: &Path, shards: usize) -> Persistence {
        Persistence {
            store: ShardStore::new(dir.to_path_buf(), 64 << 20, false, Vec::new(), Vec::new()),
            definitions: None,
            disk: Arc::new(DiskBoard::new(
                shards,
                Vec::new(),
                crate::store::disk_free::DiskFree::new(dir.to_path_buf(), 0, shards + 1),
            )),
        }
    }
}

/// How often MST-1015 is logged per shard at most (the failures between are counted).
const FAILURE_LOG_GAP: Duration = Duration::from_secs(10);
/// A failed write is not tried again sooner than this.
const RETRY_GAP: Duration = Duration::from_secs(1);

thread_local! {
    /// MST-1015's rate limit on this shard.
    static FAILURE_LOG: Reporter = const { Reporter::new(FAILURE_LOG_GAP, 1) };
}

/// Logs MST-1015, at most once per [`FAILURE_LOG_GAP`] on this thread (the line after a
/// quiet gap counts the failures not logged).
fn log_failure(shard: &Shard, path: &Path, error: &std::io::Error, nacked: u64) {
    let now = shard.clock.now();
    let Some(count) = FAILURE_LOG.with(|r| r.note(now)) else {
        return;
    };
    StoreEvent::WriteFailed {
        path: path.display().to_string(),
        error: error.to_string(),
        nacked,
        suppressed: count - 1,
    }
    .emit();
}

/// Cuts `file` back to `len` after a failed write, so no part of the group stays in it
/// (best effort: the group is written again from there in any case).
fn cut_back(file: &tokio_uring::fs::File, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: ftruncate on a descriptor the file owns; it does not touch memory.
    let rc = unsafe { libc::ftruncate(file.as_raw_fd(), len as libc::off_t) };
    if rc != 0 {
        tracing::debug!(target: "sluice::ops", "ftruncate: {}", std::io::Error::last_os_error());
    }
}

/// Applies the recovered definitions and puts the recovered messages back in their
/// queues (before the shard accepts connections).
pub fn restore(
    st: &mut State,
    shard: &Shard,
    changes: &[DirectoryChange],
    mut recovered: RecoveredShard,
    next_queue_id: u64,
) {
    let now = shard.clock.now();
    for change in changes {
        crate::shard::control::apply_change(st, shard, change, now);
    }
    st.common.next_queue_id = st.common.next_queue_id.max(next_queue_id);
    let mut built: Vec<Option<LocalMessage>> = vec![None; recovered.messages.len()];
    for (queue, entries) in std::mem::take(&mut recovered.queues) {
        let Some(q) = st.home.queues.get_mut(&queue) else {
            continue;
        };
        for e in entries {
            let Some(Some(parts)) = recovered.messages.get(e.message) else {
                continue;
            };
            let msg = built[e.message].get_or_insert_with(|| Rc::new(parts.build()));
            q.restore(Rc::clone(msg), e.seq, e.redelivered, now);
        }
        st.queue_side().ensure_queue_timer(queue);
    }
}

impl QueueSide<'_> {
    /// A publish from `origin` (confirm number `seq`) entered durable queues here: its
    /// confirm waits for the group sealed at the end of this turn. Consecutive
    /// publishes of one channel wait as one range.
    pub fn hold_confirm(&mut self, origin: ChannelRef, seq: u64, ok: bool) {
        let done = ConfirmDone {
            channel: origin,
            first: seq,
            last: seq,
            rejected: !ok,
        };
        crate::shard::outbox::push_confirm(&mut self.home.held_confirms, done);
    }

    /// `waiter` is told once everything staged so far is on disk (true), or that the
    /// group holding it could not be written (false).
    pub fn wait_for_sync(&mut self, waiter: tokio::sync::oneshot::Sender<bool>) {
        self.home.sync_waiters.push(waiter);
    }
}

/// What waits for a group: its publishers' confirms and the management API's waiters.
#[derive(Default)]
struct Held {
    confirms: Vec<ConfirmDone>,
    waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
}

impl Held {
    fn take(st: &mut State) -> Held {
        Held {
            confirms: std::mem::take(&mut st.home.held_confirms),
            waiters: std::mem::take(&mut st.home.sync_waiters),
        }
    }

    /// Sends the confirms (nacked when `!written`) and tells the waiters; returns how
    /// many publishes were nacked.
    fn release(self, st: &mut State, written: bool) -> u64 {
        let mut nacked = 0;
        for mut done in self.confirms {
            if !written {
                nacked += done.last - done.first + 1;
                done.rejected = true;
            }
            st.common.outbox.confirm(done.channel.shard, done);
        }
        for waiter in self.waiters {
            let _ = waiter.send(written);
        }
        nacked
    }
}

/// Starts writing what this turn staged, unless a group is being written (its end
/// starts the next one).
pub fn commit_store(shard: &Rc<Shard>) {
    let group = shard.store.borrow_mut().seal();
    if let Some(group) = group {
        let (held, streams) = {
            let mut st = shard.state.borrow_mut();
            (Held::take(&mut st), st.queue_side().seal_streams())
        };
        tokio_uring::spawn(write_group(Rc::clone(shard), group, held, streams));
        return;
    }
    // Confirms held with nothing left to write (a parked publish whose message was
    // staged in an earlier turn): once no group is being written, every earlier
    // group is on disk, so they may go.
    if shard.store.borrow().in_flight {
        return;
    }
    let mut st = shard.state.borrow_mut();
    if st.home.held_confirms.is_empty() && st.home.sync_waiters.is_empty() {
        return;
    }
    Held::take(&mut st).release(&mut st, true);
    drop(st);
    shard.flush_soon();
}

/// Records the durable ones among `changes` (judged before they are applied) and
/// returns once they are synced. Coordinator only.
pub async fn persist_definitions(shard: &Rc<Shard>, changes: &[DirectoryChange]) {
    let waiter = {
        let st = shard.state.borrow();
        let mut writer = shard.definitions.borrow_mut();
        let Some(writer) = writer.as_mut() else {
            return;
        };
        for change in changes {
            if definitions::is_durable(&st.common.directory, change) {
                let vhost = change_vhost(change);
                let name = st.common.directory.vhost(vhost).map(|v| v.name.clone());
                writer.append(name.as_deref().unwrap_or("/"), change);
            }
        }
        writer.has_pending().then(|| writer.waiter())
    };
    let Some(waiter) = waiter else {
        return;
    };
    commit_definitions(shard);
    let _ = waiter.await;
}

/// Records what the admin thread changed at run time (users, permissions, vhosts,
/// limits, policies: `RuntimeRecords`) and returns once it is synced (at once where the
/// broker keeps no definitions log). Coordinator only.
pub async fn persist_runtime(shard: &Rc<Shard>, records: &RuntimeRecords) {
    let waiter = {
        let mut writer = shard.definitions.borrow_mut();
        let Some(writer) = writer.as_mut() else {
            return;
        };
        match records {
            RuntimeRecords::Access(changes) => {
                for change in changes {
                    writer.append_access(change);
                }
            }
            RuntimeRecords::Policies(changes) => {
                for change in changes {
                    writer.append_policy(change);
                }
            }
        }
        writer.has_pending().then(|| writer.waiter())
    };
    let Some(waiter) = waiter else {
        return;
    };
    commit_definitions(shard);
    let _ = waiter.await;
}

fn commit_definitions(shard: &Rc<Shard>) {
    let path = shard.config.data_dir.join(definitions::FILE);
    let slot = shard.shards;
    let group = {
        let mut writer = shard.definitions.borrow_mut();
        let Some(writer) = writer.as_mut() else {
            return;
        };
        writer.take_group()
    };
    let group = match group {
        Ok(Some(g)) => g,
        Ok(None) => return,
        Err(e) => {
            // The log could not be opened: its waiters wait, and it is tried again.
            log_failure(shard, &path, &e, 0);
            shard.disk.free.write_failed(slot, 1);
            let shard = Rc::clone(shard);
            tokio_uring::spawn(async move {
                tokio::time::sleep(RETRY_GAP).await;
                commit_definitions(&shard);
            });
            return;
        }
    };
    let shard = Rc::clone(shard);
    tokio_uring::spawn(async move {
        // Declare-ok and the others wait until their records are on disk: a failed
        // write is cut back and written again once there is room.
        while let Err(e) = definitions_writer::write_group(&group).await {
            log_failure(&shard, &path, &e, 0);
            cut_back(&group.file, group.offset);
            let bytes = group.data.len() as u64;
            shard.disk.free.write_failed(slot, bytes);
            tokio::time::sleep(RETRY_GAP).await;
            while !shard.disk.free.room_for(bytes) {
                tokio::time::sleep(RETRY_GAP).await;
            }
        }
        shard.disk.free.write_done(slot);
        for waiter in group.waiters {
            let _ = waiter.send(());
        }
        let size = {
            let mut writer = shard.definitions.borrow_mut();
            writer.as_mut().map(|w| {
                w.done();
                w.size()
            })
        };
        if let Some(size) = size {
            shard.disk.post_definitions(size);
        }
        commit_definitions(&shard);
    });
}

/// Copies the few live entries of the oldest segment forward when they pin newer
/// segments (a durable subscription holding an old message would otherwise keep
/// every segment after it), in the group sealed right after, so the segment is
/// deleted once the copies are on disk.
fn compact_store(shard: &Rc<Shard>, now: std::time::Instant) {
    let segment = {
        let store = shard.store.borrow();
        if store.compact_after.is_some_and(|at| now < at) {
            return;
        }
        match store.compaction_candidate() {
            Some(s) => s,
            None => return,
        }
    };
    let ranges = shard.store.borrow().ranges_in(segment);
    let mut found = Vec::new();
    let mut copied = 0;
    {
        let st = shard.state.borrow();
        let mut store = shard.store.borrow_mut();
        for (queue, range) in ranges {
            let Some(q) = st.home.queues.get(&queue) else {
                continue;
            };
            found.clear();
            q.persistent_in(range, COMPACT_MAX_LIVE as usize, &mut found);
            for (seq, msg, delivered) in &found {
                if store.relocate(queue, *seq, msg, segment) {
                    copied += 1;
                    if *delivered {
                        // The delivered mark may be in the segment that goes.
                        crate::model::journal::delivered(queue, *seq);
                    }
                }
            }
        }
        // Entries the queues no longer hold are gone records not yet sealed: try
        // again a little later rather than at every tick.
        let pause = if copied > 0 { 10 } else { 1000 };
        store.compact_after = Some(now + std::time::Duration::from_millis(pause));
    }
    if copied > 0 {
        commit_store(shard);
    }
}

/// Posts this shard's store size, evaluates the quota (shard 0) and applies the
/// vhosts' store alarms to this shard's publishers. Each tick.
pub fn store_tick(shard: &Rc<Shard>) {
    compact_store(shard, shard.clock.now());
    super::paging::paging_tick(shard, shard.clock.now());
    shard
        .state
        .borrow_mut()
        .queue_side()
        .streams_tick(shard, shard.clock.now());
    let bytes = shard.store.borrow().disk_bytes() + shard.state.borrow().home.stream_disk_bytes();
    shard.disk.post(usize::from(shard.id), bytes);
    if shard.id == 0 {
        shard.disk.evaluate();
        shard.disk.free.check();
    }
    if shard.disk.has_quotas() {
        shard
            .state
            .borrow_mut()
            .conn_side()
            .apply_store_alarms(shard);
    }
    let alarm = shard.disk.free.alarm();
    if alarm != shard.state.borrow().conns.disk_alarm() {
        shard
            .state
            .borrow_mut()
            .conn_side()
            .apply_disk_alarm(shard, alarm);
    }
    retry_failed(shard, shard.clock.now());
}

/// Writes the failed group again once the last check saw room for it (and not
/// sooner than [`RETRY_GAP`] after the last try).
fn retry_failed(shard: &Rc<Shard>, now: Instant) {
    let group = {
        let mut store = shard.store.borrow_mut();
        let Some(bytes) = store.failed.as_ref().map(|g| g.data.len() as u64) else {
            return;
        };
        if store.retry_at.is_some_and(|at| now < at) || !shard.disk.free.room_for(bytes) {
            return;
        }
        store.failed.take()
    };
    if let Some(group) = group {
        tokio_uring::spawn(write_group(
            Rc::clone(shard),
            group,
            Held::default(),
            Vec::new(),
        ));
    }
}

/// A group's write or fsync failed (its file already cut back): the publishes
/// whose confirms waited for it are nacked, its new messages stay in their queues
/// in memory only (withdrawn from the group, which is written again later: the
/// compaction copies and gone records in it must reach the disk), the disk alarm
/// goes up, and the segments the group emptied are deleted (which frees space).
async fn group_failed(
    shard: &Rc<Shard>,
    group: Group,
    held: Held,
    path: &Path,
    error: &std::io::Error,
) {
    let bytes = group.data.len() as u64;
    let dead = {
        let mut store = shard.store.borrow_mut();
        store.withdraw(group);
        store.retry_at = Some(shard.clock.now() + RETRY_GAP);
        store.dead_segments()
    };
    shard.disk.free.write_failed(usize::from(shard.id), bytes);
    let nacked = held.release(&mut shard.state.borrow_mut(), false);
    log_failure(shard, path, error, nacked);
    shard.flush();
    for (number, bytes) in dead {
        retire_segment(shard, number, bytes).await;
    }
}

/// Writes everything still staged and waits for it (shutdown), then logs what the
/// store wrote.
pub async fn close_store(shard: &Rc<Shard>) {
    for _ in 0..1000 {
        commit_store(shard);
        let done = {
            let store = shard.store.borrow();
            !store.in_flight && !store.has_work()
        };
        if done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let stats = shard.store.borrow().stats;
    StoreEvent::Closed {
        shard: shard.id,
        commits: stats.commits,
        fsyncs: stats.fsyncs,
        bytes: stats.bytes,
    }
    .emit();
}

fn change_vhost(change: &DirectoryChange) -> usize {
    match change {
        DirectoryChange::DeclareExchange { vhost, .. }
        | DirectoryChange::DeleteExchange { vhost, .. }
        | DirectoryChange::DeclareQueue { vhost, .. }
        | DirectoryChange::DeleteQueue { vhost, .. }
        | DirectoryChange::Bind { vhost, .. }
        | DirectoryChange::Unbind { vhost, .. }
        | DirectoryChange::BindExchange { vhost, .. }
        | DirectoryChange::UnbindExchange { vhost, .. } => *vhost,
    }
}

/// The file a group goes to: the active segment's, created for a new segment. The open
/// and the directory sync are io_uring operations too: a shard never blocks on the disk.
async fn group_file(
    shard: &Shard,
    group: &mut Group,
) -> std::io::Result<Rc<tokio_uring::fs::File>> {
    let (path, dir) = {
        let store = shard.store.borrow();
        if !group.new_file {
            if let Some((number, f)) = &store.active_file {
                if *number == group.segment {
                    return Ok(Rc::clone(f));
                }
            }
        }
        (store.segment_path(group.segment), store.dir().to_path_buf())
    };
    if !dir.exists() {
        std::fs::create_dir_all(&dir)?;
    }
    if group.recycle {
        // The spare becomes this segment and is overwritten from its start.
        tokio_uring::fs::rename(dir.join(shard_store::SPARE), &path).await?;
        shard.store.borrow_mut().spare = Spare::None;
        // Done once: a group written again after a failure opens the file only.
        group.recycle = false;
    }
    let file = tokio_uring::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .open(&path)
        .await?;
    // A file opened for the first time may be new: its name must survive a power cut
    // as well as its contents (once per segment).
    let handle = tokio_uring::fs::File::open(&dir).await?;
    handle.sync_all().await?;
    let _ = handle.close().await;
    let file = Rc::new(file);
    shard.store.borrow_mut().active_file = Some((group.segment, Rc::clone(&file)));
    Ok(file)
}

/// Gives a deleted segment's file back: it becomes the spare if there is none (see
/// [`Spare`]), otherwise it is removed.
async fn retire_segment(shard: &Shard, number: u32, bytes: u64) {
    let (path, spare_path, keep) = {
        let mut store = shard.store.borrow_mut();
        // While the disk alarm is up a dead file is removed: a spare holds its space.
        let keep = store.spare == Spare::None && !shard.disk.free.alarm();
        if keep {
            store.spare = Spare::Busy;
        }
        (
            store.segment_path(number),
            store.dir().join(shard_store::SPARE),
            keep,
        )
    };
    let result = if keep {
        let r = tokio_uring::fs::rename(&path, &spare_path).await;
        shard.store.borrow_mut().spare = if r.is_ok() {
            Spare::Ready(bytes)
        } else {
            Spare::None
        };
        r
    } else {
        tokio_uring::fs::remove_file(&path).await
    };
    if let Err(e) = result {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(target: "sluice::ops", "cannot retire {}: {e}", path.display());
        }
    }
}

/// Writes and syncs one group (the shard's segment, then each stream's part), then
/// releases its confirms, lets the next group go and deletes the segments it freed. A
/// failure of the shard's segment is [`group_failed`]'s; a stream's failed write takes
/// its chunk back and nacks the group's confirms (the shard's own part is on disk).
async fn write_group(shard: Rc<Shard>, mut group: Group, held: Held, streams: Vec<StreamWrite>) {
    if let Err((path, e)) = write_and_sync(&shard, &mut group).await {
        super::stream_io::streams_not_written(&shard, streams);
        group_failed(&shard, group, held, &path, &e).await;
        return;
    }
    let slot = usize::from(shard.id);
    let streams = super::stream_io::write_streams(&shard, streams).await;
    let stream_failure = streams.failure;
    if stream_failure.is_none() {
        shard.disk.free.write_done(slot);
    }
    let dead = {
        let mut store = shard.store.borrow_mut();
        store.external_written(streams.bytes, streams.files, group.data.is_empty());
        store.committed(&group)
    };
    let nacked = held.release(&mut shard.state.borrow_mut(), stream_failure.is_none());
    if let Some((path, e, bytes)) = stream_failure {
        shard.disk.free.write_failed(slot, bytes);
        log_failure(&shard, &path, &e, nacked);
    }
    shard.flush();
    for (number, bytes) in dead {
        retire_segment(&shard, number, bytes).await;
    }
}

/// Writes a group where it goes and syncs it; on failure the file is cut back to where
/// the group starts (a partial write must not stay).
async fn write_and_sync(shard: &Shard, group: &mut Group) -> Result<(), (PathBuf, std::io::Error)> {
    let path = shard.store.borrow().segment_path(group.segment);
    if group.data.is_empty() {
        return Ok(());
    }
    let file = group_file(shard, group)
        .await
        .map_err(|e| (path.clone(), e))?;
    let (res, _) = file.write_all_at(group.data.clone(), group.offset).await;
    let res = match res {
        Ok(()) if shard.store.borrow().fsync => file.sync_data().await,
        other => other,
    };
    if let Err(e) = res {
        cut_back(&file, group.offset);
        // A failed fsync leaves the page cache's state unknown: the cut must be made
        // durable too (best effort; the group is written again from there anyway).
        let _ = file.sync_data().await;
        return Err((path, e));
    }
    Ok(())
}
