//! Owns: the I/O of this shard's streams, all through io_uring — writing each stream's
//! part of a group commit at the end of its active segment (a new segment file is
//! created and its directory synced first; a failed write is cut back), the disk reads
//! readers behind the tail cache need (at most `stream.max_concurrent_reads` at once per
//! shard, the others waiting their turn; what a read brings back is scanned for that
//! reader alone, `store::stream_log::scan`), and deleting the segment files retention
//! removed and a deleted stream's directory.
//!
//! Does not: decide what to write, read or delete (the `stream` state machine and
//! `streams` do), or hold confirms (`persist` releases the group's once this says how
//! its streams' writes went).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;

use bytes::Bytes;

use crate::model::ids::{IdMap, QueueId};
use crate::store::stream_log::{self, ScanFor};
use crate::stream::{ReadDone, ReadPlan, StreamWrite};

use crate::shard::Shard;

/// What is left to delete.
#[derive(Debug)]
enum Removal {
    Segments(Vec<u32>),
    Directory,
}

/// The streams' open files and the work waiting for `start`.
#[derive(Default)]
pub struct StreamIo {
    /// Each stream's active segment, open for writing.
    active: IdMap<QueueId, (u32, Rc<tokio_uring::fs::File>)>,
    /// Reads waiting for a slot, and how many are running.
    waiting: VecDeque<(QueueId, ReadPlan)>,
    running: usize,
    removals: Vec<(QueueId, Removal)>,
}

impl StreamIo {
    /// Reads readers of `stream` need.
    pub fn queue_reads(&mut self, stream: QueueId, plans: Vec<ReadPlan>) {
        self.waiting.extend(plans.into_iter().map(|p| (stream, p)));
    }

    /// Segment files of `stream` retention removed.
    pub fn remove_segments(&mut self, stream: QueueId, segments: Vec<u32>) {
        self.removals.push((stream, Removal::Segments(segments)));
    }

    /// `stream` was deleted: its file is let go, its waiting reads dropped, its
    /// directory removed.
    pub fn forget(&mut self, stream: QueueId) {
        self.active.remove(&stream);
        self.waiting.retain(|(s, _)| *s != stream);
        self.removals.push((stream, Removal::Directory));
    }

    /// Whether `start` has anything to do.
    pub fn has_work(&self) -> bool {
        !self.removals.is_empty() || !self.waiting.is_empty()
    }
}

/// Starts what waits: deletions, and reads up to the shard's limit. Called at the end
/// of every turn (`Shard::flush`) and when a read ends.
pub fn start(shard: &Rc<Shard>) {
    let (removals, reads) = {
        let mut st = shard.state.borrow_mut();
        let io = &mut st.home.stream_io;
        if !io.has_work() {
            return;
        }
        let removals = std::mem::take(&mut io.removals);
        let mut reads = Vec::new();
        while io.running < shard.config.stream.max_concurrent_reads {
            let Some(r) = io.waiting.pop_front() else {
                break;
            };
            io.running += 1;
            reads.push(r);
        }
        (removals, reads)
    };
    for (stream, removal) in removals {
        tokio_uring::spawn(remove(Rc::clone(shard), stream, removal));
    }
    for (stream, plan) in reads {
        tokio_uring::spawn(read_back(Rc::clone(shard), stream, plan));
    }
}

fn dir_of(shard: &Shard, stream: QueueId) -> PathBuf {
    stream_log::stream_dir(&shard.config.data_dir, stream)
}

async fn remove(shard: Rc<Shard>, stream: QueueId, removal: Removal) {
    let dir = dir_of(&shard, stream);
    match removal {
        Removal::Segments(numbers) => {
            for n in numbers {
                let path = stream_log::segment_path(&dir, n);
                if let Err(e) = tokio_uring::fs::remove_file(&path).await {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(target: "sluice::ops", "cannot delete {}: {e}", path.display());
                    }
                }
            }
        }
        Removal::Directory => {
            let files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
                Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
                Err(_) => return,
            };
            for path in files {
                let _ = tokio_uring::fs::remove_file(&path).await;
            }
            // A write that raced the deletion may have left a file: the next start
            // removes the directory of a stream the definitions no longer have.
            let _ = tokio_uring::fs::remove_dir(&dir).await;
        }
    }
}

/// Reads `len` bytes (fewer at the file's end) of `path` at `pos`.
async fn read_at(path: &std::path::Path, pos: u64, len: u64) -> std::io::Result<Bytes> {
    let file = tokio_uring::fs::File::open(path).await?;
    let want = usize::try_from(len).unwrap_or(usize::MAX);
    let mut out: Vec<u8> = Vec::with_capacity(want);
    while out.len() < want {
        let chunk = Vec::with_capacity(want - out.len());
        let (res, chunk) = file.read_at(chunk, pos + out.len() as u64).await;
        match res {
            Ok(0) => break,
            Ok(_) => out.extend_from_slice(&chunk),
            Err(e) => {
                let _ = file.close().await;
                return Err(e);
            }
        }
    }
    let _ = file.close().await;
    Ok(Bytes::from(out))
}

/// One reader's read: the bytes planned, scanned for what the reader wants, handed to
/// its stream.
async fn read_back(shard: Rc<Shard>, stream: QueueId, plan: ReadPlan) {
    let path = stream_log::segment_path(&dir_of(&shard, stream), plan.segment);
    let scanned = match read_at(&path, plan.pos, plan.len).await {
        Ok(buf) => {
            let filter = plan.filter.as_ref();
            let wanted = |v: Option<&[u8]>| filter.is_none_or(|f| f.matches(v));
            Some(stream_log::scan(
                buf,
                &ScanFor {
                    segment: plan.segment,
                    base: plan.pos,
                    next: plan.next,
                    seek_ts: plan.seek_ts,
                    wanted: &wanted,
                    max_messages: plan.max_messages,
                    max_bytes: plan.max_bytes,
                },
            ))
        }
        // Gone meanwhile (retention), or unreadable: the reader locates again.
        Err(_) => None,
    };
    {
        let mut st = shard.state.borrow_mut();
        st.home.stream_io.running -= 1;
        st.queue_side().stream_read_done(
            stream,
            ReadDone {
                reader: plan.reader,
                epoch: plan.epoch,
                segment: plan.segment,
                pos: plan.pos,
                scanned,
            },
        );
    }
    start(&shard);
    shard.flush_soon();
}

/// Cuts `file` back to `len` after a failed write (best effort).
fn cut_back(file: &tokio_uring::fs::File, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: ftruncate on a descriptor the file owns; it does not touch memory.
    let rc = unsafe { libc::ftruncate(file.as_raw_fd(), len as libc::off_t) };
    if rc != 0 {
        tracing::debug!(target: "sluice::ops", "ftruncate: {}", std::io::Error::last_os_error());
    }
}

/// The file `w` goes to: the stream's active segment, or a new segment file (its
/// directory created if need be, and synced so that the name survives a crash).
async fn file_for(shard: &Shard, w: &StreamWrite) -> std::io::Result<Rc<tokio_uring::fs::File>> {
    if !w.new_segment {
        if let Some((n, f)) = shard.state.borrow().home.stream_io.active.get(&w.stream) {
            if *n == w.segment {
                return Ok(Rc::clone(f));
            }
        }
    }
    let dir = dir_of(shard, w.stream);
    let created = !dir.exists();
    if created {
        tokio_uring::fs::create_dir_all(&dir).await?;
    }
    let path = stream_log::segment_path(&dir, w.segment);
    let file = tokio_uring::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .open(&path)
        .await?;
    let mut synced = vec![dir.clone()];
    if created {
        if let Some(parent) = dir.parent() {
            synced.push(parent.to_path_buf());
        }
    }
    for d in synced {
        let handle = tokio_uring::fs::File::open(&d).await?;
        handle.sync_all().await?;
        let _ = handle.close().await;
    }
    let file = Rc::new(file);
    shard
        .state
        .borrow_mut()
        .home
        .stream_io
        .active
        .insert(w.stream, (w.segment, Rc::clone(&file)));
    Ok(file)
}

/// Writes (and syncs) one stream's part of a group; a failure is cut back.
async fn write_one(shard: &Shard, w: &StreamWrite) -> Result<(), (PathBuf, std::io::Error)> {
    let path = stream_log::segment_path(&dir_of(shard, w.stream), w.segment);
    let file = file_for(shard, w).await.map_err(|e| (path.clone(), e))?;
    let (res, _) = file.write_all_at(w.data.clone(), w.pos).await;
    let res = match res {
        Ok(()) if shard.config.store.fsync => file.sync_data().await,
        other => other,
    };
    if let Err(e) = res {
        cut_back(&file, w.pos);
        let _ = file.sync_data().await;
        return Err((path, e));
    }
    Ok(())
}

/// What the streams' part of a group did.
#[derive(Default)]
pub struct Written {
    /// Bytes and files written (and synced).
    pub bytes: u64,
    pub files: u64,
    /// The first failure (file, error and the bytes that could not be written) of a
    /// stream that still exists.
    pub failure: Option<(PathBuf, std::io::Error, u64)>,
}

/// Writes the streams' parts of a group (after the shard's own segment write), then
/// tells each stream how its write went.
pub async fn write_streams(shard: &Rc<Shard>, writes: Vec<StreamWrite>) -> Written {
    let mut done = Written::default();
    if writes.is_empty() {
        return done;
    }
    let mut outcomes = Vec::with_capacity(writes.len());
    for w in &writes {
        // A stream deleted since it was sealed is not written (its directory goes).
        if !shard.state.borrow().home.streams.contains_key(&w.stream) {
            continue;
        }
        match write_one(shard, w).await {
            Ok(()) => {
                done.bytes += w.data.len() as u64;
                done.files += 1;
                outcomes.push((w.stream, true));
            }
            Err((path, e)) => {
                outcomes.push((w.stream, false));
                if shard.state.borrow().home.streams.contains_key(&w.stream)
                    && done.failure.is_none()
                {
                    done.failure = Some((path, e, w.data.len() as u64));
                }
            }
        }
    }
    shard
        .state
        .borrow_mut()
        .queue_side()
        .streams_written(shard, outcomes);
    done
}

/// Every stream of a group whose shard segment write failed: nothing of them was
/// written, their offsets are taken back.
pub fn streams_not_written(shard: &Shard, writes: Vec<StreamWrite>) {
    let outcomes = writes.into_iter().map(|w| (w.stream, false)).collect();
    shard
        .state
        .borrow_mut()
        .queue_side()
        .streams_written(shard, outcomes);
}
