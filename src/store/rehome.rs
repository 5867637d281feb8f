//! Owns: moving stored messages when the shard count changed since the last run. Every
//! queue's home is `hash(vhost, name) mod shards`, so a different `--shards` moves
//! queues; each shard must own the segments of the queues it homes. The old segments
//! are read, each surviving entry is written into its queue's new home's segments
//! (with the same sequence numbers and delivered marks), and the new layout replaces
//! the old in one directory rename.
//!
//! Does not: run at any other time, or change definitions (queue ids stay).
//!
//! # Crash safety
//! The new layout is written to `messages.new` and synced; then `messages` is renamed
//! to `messages.old`, `messages.new` to `messages`, and `messages.old` removed. A crash
//! at any point leaves a layout [`tidy`] can finish or undo at the next start: the old
//! one, complete, or the new one, complete (each carries its own shard count in
//! `store.meta`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::BytesMut;

use crate::model::ids::QueueId;

use super::message_log;
use super::record;
use super::recovery::{self, RecoveredShard};
use super::shard_store::{segment_name, shard_dir};

/// The file in the messages directory that records its shard count.
pub const META: &str = "store.meta";

fn messages_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("messages")
}

/// Finishes or undoes a re-homing a crash interrupted.
pub fn tidy(data_dir: &Path) -> std::io::Result<()> {
    let (cur, new, old) = (
        messages_dir(data_dir),
        data_dir.join("messages.new"),
        data_dir.join("messages.old"),
    );
    if new.exists() {
        std::fs::remove_dir_all(&new)?;
    }
    if old.exists() {
        if cur.exists() {
            std::fs::remove_dir_all(&old)?;
        } else {
            std::fs::rename(&old, &cur)?;
        }
    }
    Ok(())
}

/// The shard count the messages directory was written for: its `store.meta`, or, for
/// a directory without one, the number of shard directories in it.
pub fn recorded_shards(data_dir: &Path) -> std::io::Result<Option<usize>> {
    let dir = messages_dir(data_dir);
    match std::fs::read_to_string(dir.join(META)) {
        Ok(text) => Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("shards = "))
            .and_then(|n| n.trim().parse().ok())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut count = 0;
            while shard_dir(data_dir, count).exists() {
                count += 1;
            }
            Ok((count > 0).then_some(count))
        }
        Err(e) => Err(e),
    }
}

/// Writes `store.meta` for `shards` into `dir` and syncs it.
pub fn write_meta(dir: &Path, shards: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Written beside it and renamed over it: a crash never leaves it empty.
    let tmp = dir.join(format!("{META}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(
            f,
            "# written by sluice; the shard count these segments are laid out for"
        )?;
        writeln!(f, "shards = {shards}")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(META))?;
    super::sync_dir(dir)
}

/// Re-homes every stored entry from the `old` layout to `shards` shards. `home` gives
/// a defined queue's new home (`None`: not defined, dropped).
pub fn rehome(
    data_dir: &Path,
    old: usize,
    shards: usize,
    segment_size: u64,
    home: &dyn Fn(QueueId) -> Option<usize>,
) -> std::io::Result<()> {
    let new_root = data_dir.join("messages.new");
    // Each new shard's output: the current segment's bytes and number.
    let mut outputs: Vec<(BytesMut, u32)> = (0..shards).map(|_| (BytesMut::new(), 1)).collect();
    let new_dir = |shard: usize| new_root.join(format!("shard-{shard}"));
    for shard in 0..shards {
        std::fs::create_dir_all(new_dir(shard))?;
    }
    let flush = |shard: usize, out: &mut (BytesMut, u32)| -> std::io::Result<()> {
        if out.0.is_empty() {
            return Ok(());
        }
        let path = new_dir(shard).join(segment_name(out.1));
        let mut f = std::fs::File::create(path)?;
        f.write_all(&out.0)?;
        f.sync_all()?;
        out.0.clear();
        out.1 += 1;
        Ok(())
    };
    let mut shard = 0;
    // Old layouts may have more directories than their meta says if a crash came
    // between writing them; read every one there is.
    while shard < old || shard_dir(data_dir, shard).exists() {
        let read: RecoveredShard =
            recovery::read_shard(&shard_dir(data_dir, shard), &|q| home(q).is_some())?;
        let mut delivered: BTreeMap<QueueId, u64> = BTreeMap::new();
        for (queue, entries) in &read.queues {
            let Some(target) = home(*queue) else {
                continue;
            };
            let Some(out) = outputs.get_mut(target) else {
                continue;
            };
            for e in entries {
                let Some(Some(parts)) = read.messages.get(e.message) else {
                    continue;
                };
                record::append(&mut out.0, out.1, |o| {
                    message_log::put_parts(
                        o,
                        &[(*queue, e.seq)],
                        &parts.exchange,
                        &parts.routing_key,
                        &parts.properties,
                        std::slice::from_ref(&parts.body),
                    )
                });
                if e.redelivered {
                    delivered.insert(*queue, e.seq);
                }
                if out.0.len() as u64 >= segment_size {
                    flush(target, out)?;
                }
            }
            if let Some(&upto) = delivered.get(queue) {
                record::append(&mut out.0, out.1, |o| {
                    message_log::put_pairs(o, true, &[(*queue, upto)])
                });
            }
        }
        shard += 1;
    }
    for (shard, out) in outputs.iter_mut().enumerate() {
        flush(shard, out)?;
        super::sync_dir(&new_dir(shard))?;
    }
    write_meta(&new_root, shards)?;
    let (cur, old_dir) = (messages_dir(data_dir), data_dir.join("messages.old"));
    if cur.exists() {
        std::fs::rename(&cur, &old_dir)?;
    }
    std::fs::rename(&new_root, &cur)?;
    super::sync_dir(data_dir)?;
    if old_dir.exists() {
        std::fs::remove_dir_all(&old_dir)?;
    }
    Ok(())
}
