//! Owns: the queue side's streams — creating a home stream (reading its directory back
//! when the broker starts), deleting one, appending routed messages (each marks the
//! shard store's next group as needed, so the publish's confirm waits for it), dispatch
//! to readers on this shard or through the outbox, settlements (credit, tracked acks,
//! cancels) and requests (consume, cancel, stats, delete checks), sealing the streams'
//! writes into the group commit and taking their outcome (retention when a segment
//! rolled over), and the periodic check (retention by age, lag warnings, the tail
//! caches under memory pressure).
//!
//! Does not: do I/O (`stream_io`), check consumer arguments (the connection side does,
//! `handler::stream`), or touch connections.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::config::Config;
use crate::model::ids::{QueueId, QueueRef};
use crate::model::message::{LocalMessage, Message};
use crate::model::routing::{QueueMeta, VhostIdx};
use crate::ops::event::OpsEvent;
use crate::ops::store_event::StoreEvent;
use crate::ops::stream_event::StreamEvent;
use crate::queue::QueueStats;
use crate::store::stream_log;
use crate::stream::{ReadDone, Retained, Stream, StreamWrite};

use super::QueueSide;
use crate::shard::inbox::{
    AddressedQueueOp, Delivery, QueueOp, QueueReply, QueueRequest, RemoteDelivery, ShardMsg,
};
use crate::shard::Shard;

/// Milliseconds since the Unix epoch: the time chunks are stamped with (`x-max-age`,
/// timestamp offsets).
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl QueueSide<'_> {
    /// Whether `queue` is a home stream of this shard.
    pub fn is_stream(&self, queue: QueueId) -> bool {
        !self.home.streams.is_empty() && self.home.streams.contains_key(&queue)
    }

    /// Creates a home stream from its directory entry, with what its directory holds
    /// (at start; a new stream has no directory yet).
    pub fn create_home_stream(&mut self, config: &Config, vhost: VhostIdx, meta: &QueueMeta) {
        if self.home.streams.contains_key(&meta.queue.id) {
            return;
        }
        let vhost_name = self
            .common
            .directory
            .vhost(vhost)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let mut stream = Stream::new(
            meta.queue.id,
            vhost,
            vhost_name.clone(),
            meta.name.clone(),
            meta.arguments.clone(),
            config.stream.max_tracked_consumers,
        );
        let dir = stream_log::stream_dir(&config.data_dir, meta.queue.id);
        match stream_log::recover(&dir, |number, record| stream.recovered(number, record)) {
            Ok(found) => {
                for seg in &found.segments {
                    stream.recovered_segment(seg.number, seg.size);
                }
                for d in found.damage {
                    StoreEvent::Damaged {
                        path: d.path.display().to_string(),
                        skipped: None,
                        truncated: Some((d.offset, d.reason)),
                    }
                    .emit();
                }
                if !found.segments.is_empty() {
                    StoreEvent::QueueRecovered {
                        vhost: vhost_name.clone(),
                        queue: meta.name.to_string(),
                        messages: stream.messages() as usize,
                    }
                    .emit();
                }
            }
            Err(e) => tracing::error!(
                target: "sluice::ops",
                "stream {}: cannot read {}: {e}",
                meta.name,
                dir.display()
            ),
        }
        OpsEvent::QueueCreate {
            vhost: vhost_name,
            queue: meta.name.to_string(),
            durable: true,
            exclusive: false,
            auto_delete: false,
        }
        .emit();
        self.home.streams.insert(meta.queue.id, stream);
    }

    /// Deletes a home stream: its readers' consumers are told, its files removed.
    /// Returns false when `queue` is not a stream here.
    pub fn delete_home_stream(&mut self, shard: &Shard, queue: QueueId) -> bool {
        let Some(stream) = self.home.streams.remove(&queue) else {
            return false;
        };
        self.home.dirty.retain(|id| *id != queue);
        self.home.stream_io.forget(queue);
        OpsEvent::QueueDeleted {
            vhost: stream.vhost.clone(),
            queue: stream.name.to_string(),
        }
        .emit();
        for r in stream.readers().iter() {
            if r.target.shard == shard.id {
                self.home.for_connections.consumers_gone.push(r.target);
            } else {
                shard
                    .peers
                    .send(r.target.shard, ShardMsg::ConsumerGone(r.target));
            }
        }
        true
    }

    /// Appends a message routed to a home stream. Returns false when `queue` is not a
    /// stream here (gone).
    pub fn stream_append(&mut self, shard: &Shard, queue: QueueId, msg: LocalMessage) -> bool {
        let Some(stream) = self.home.streams.get_mut(&queue) else {
            return false;
        };
        stream.append(msg);
        shard.store.borrow_mut().stage_external();
        true
    }

    /// Dispatches a home stream to its readers: deliveries for consumers here go to
    /// `local`, the others to the outbox; disk reads the readers need are queued.
    pub fn dispatch_stream(
        &mut self,
        shard: &Shard,
        qid: QueueId,
        local: &mut Vec<Delivery<LocalMessage>>,
    ) {
        let budget = shard.config.shard.dispatch_budget;
        let Some(stream) = self.home.streams.get_mut(&qid) else {
            return;
        };
        stream.in_dirty_list = false;
        let mut out = Vec::new();
        let mut reads = Vec::new();
        let more = stream.dispatch(budget, &mut out, &mut reads);
        let queue = QueueRef {
            id: qid,
            home: shard.id,
        };
        for d in out {
            if d.target.shard == shard.id {
                local.push(Delivery {
                    target: d.target,
                    queue,
                    seq: d.offset,
                    msg: d.msg,
                    redelivered: false,
                    no_ack: false,
                });
            } else if let Some(v) = self
                .common
                .outbox
                .deliver
                .get_mut(usize::from(d.target.shard))
            {
                v.push(RemoteDelivery {
                    target: d.target,
                    queue,
                    seq: d.offset,
                    msg: Message::clone(&d.msg),
                    redelivered: false,
                    no_ack: false,
                });
            }
        }
        if !reads.is_empty() {
            self.home.stream_io.queue_reads(qid, reads);
        }
        if more {
            self.home.mark_dirty(qid);
        }
    }

    /// Applies a settlement to a home stream: credit, a tracked ack, a cancel; acks,
    /// requeues and rejects of its deliveries only ever returned credit (the channel
    /// did that), so they change nothing here.
    pub fn settle_stream(&mut self, shard: &Shard, s: AddressedQueueOp) {
        let Some(stream) = self.home.streams.get_mut(&s.queue) else {
            return;
        };
        match s.op {
            QueueOp::Grant { key, credit, bytes } => {
                stream.grant(key, credit, bytes);
                self.home.mark_dirty(s.queue);
            }
            // Written with the next group sealed for any reason, and at the latest by the
            // periodic check (`streams_tick`): acks do not each cost a write and an
            // fsync; a cancel does (its cancel-ok waits for the offset to be on disk).
            QueueOp::StreamAck { key, offset } => {
                stream.ack(key, offset);
            }
            QueueOp::Cancel { key } => {
                if let Some((_, true)) = stream.remove_reader(key) {
                    shard.store.borrow_mut().stage_external();
                }
            }
            QueueOp::Ack(_)
            | QueueOp::Requeue(_)
            | QueueOp::Discard(_)
            | QueueOp::Written { .. } => {}
        }
    }

    /// Serves a request to a home stream.
    pub fn stream_request(&mut self, shard: &Shard, req: QueueRequest) -> QueueReply {
        let qid = match &req {
            QueueRequest::Consume { queue, .. }
            | QueueRequest::ConsumeStream { queue, .. }
            | QueueRequest::Cancel { queue, .. }
            | QueueRequest::Get { queue, .. }
            | QueueRequest::Stats { queue, .. }
            | QueueRequest::Purge { queue }
            | QueueRequest::CheckDelete { queue, .. } => *queue,
        };
        let Some(stream) = self.home.streams.get_mut(&qid) else {
            return QueueReply::Gone;
        };
        match req {
            QueueRequest::ConsumeStream {
                target,
                tag,
                generated_tag,
                connection,
                prefetch,
                args,
                ..
            } => {
                let (key, _) = stream.add_reader(
                    target,
                    tag,
                    connection,
                    prefetch,
                    &args,
                    generated_tag,
                    wall_ms(),
                );
                QueueReply::Consumed(Ok(key))
            }
            QueueRequest::Cancel { key, .. } => match stream.remove_reader(key) {
                Some((_, true)) => {
                    // A tracking reader: cancel-ok once its offset is on disk.
                    shard.store.borrow_mut().stage_external();
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    self.wait_for_sync(tx);
                    QueueReply::CancelledWhenSynced(rx)
                }
                _ => QueueReply::Cancelled,
            },
            QueueRequest::Stats { .. } => QueueReply::Stats(QueueStats {
                messages: u32::try_from(stream.messages()).unwrap_or(u32::MAX),
                // RabbitMQ's stream `stat/1` reports no consumers.
                consumers: 0,
                unacked: 0,
                depth_bytes: stream.disk_bytes(),
                held_bytes: stream.disk_bytes(),
            }),
            // RabbitMQ deletes a stream whatever if-unused and if-empty say, and
            // answers with no message count.
            QueueRequest::CheckDelete { .. } => QueueReply::DeleteChecked(Ok(0)),
            // The connection side refuses these for a stream (540); one that raced a
            // redeclaration finds nothing.
            QueueRequest::Get { .. } => QueueReply::Got(None),
            QueueRequest::Purge { .. } => QueueReply::Purged(0),
            QueueRequest::Consume { .. } => QueueReply::Gone,
        }
    }

    /// Seals every home stream with appended messages or tracking updates into its
    /// write for the group being committed.
    pub fn seal_streams(&mut self) -> Vec<StreamWrite> {
        if self.home.streams.is_empty() {
            return Vec::new();
        }
        let now = wall_ms();
        self.home
            .streams
            .values_mut()
            .filter(|s| s.has_work())
            .filter_map(|s| s.seal(now))
            .collect()
    }

    /// The streams' writes of a group are on disk (or failed): commit them, wake their
    /// readers, apply retention where a segment rolled over (the segment files it
    /// removes are deleted by `stream_io`).
    pub fn streams_written(&mut self, shard: &Shard, outcomes: Vec<(QueueId, bool)>) {
        let limit = cache_limit(shard);
        for (id, ok) in outcomes {
            let Some(stream) = self.home.streams.get_mut(&id) else {
                continue;
            };
            let rolled = stream.write_done(ok);
            stream.trim_cache(limit);
            if rolled {
                let retained = stream.apply_retention(wall_ms());
                if let Some(d) = retention_events(stream, retained) {
                    self.home.stream_io.remove_segments(id, d);
                }
            }
            if stream.wants_dispatch() {
                self.home.mark_dirty(id);
            }
        }
    }

    /// A reader's disk read came back.
    pub fn stream_read_done(&mut self, stream: QueueId, done: ReadDone) {
        let Some(s) = self.home.streams.get_mut(&stream) else {
            return;
        };
        if let Some(skip) = s.read_done(done) {
            StreamEvent::UnreadableSkipped {
                vhost: s.vhost.clone(),
                stream: s.name.to_string(),
                reader: skip.tag.to_string(),
                segment: skip.segment,
                from: skip.from,
                to: skip.to,
            }
            .emit();
        }
        if s.wants_dispatch() {
            self.home.mark_dirty(stream);
        }
    }

    /// The periodic check of every home stream (every `stream.retention_check`):
    /// rates and lag warnings, retention by age, the tail caches' limit.
    pub fn streams_tick(&mut self, shard: &Shard, now: Instant) {
        if self.home.streams.is_empty() {
            return;
        }
        let limit = cache_limit(shard);
        let due = self.home.next_stream_check.is_none_or(|at| now >= at);
        if due {
            self.home.next_stream_check = Some(now + shard.config.stream.retention_check);
        }
        let live = shard.live();
        let (horizon, gap) = (
            live.policies.tuning.warn_horizon,
            live.policies.tuning.alert_repeat_gap,
        );
        let now_ms = wall_ms();
        let mut deletions = Vec::new();
        let mut dirty = Vec::new();
        let mut tracked = false;
        for (id, stream) in self.home.streams.iter_mut() {
            stream.trim_cache(limit);
            if !due {
                continue;
            }
            tracked |= stream.tracking_dirty();
            for f in stream.tick(now, now_ms, horizon, gap) {
                StreamEvent::ReaderFalling {
                    vhost: stream.vhost.clone(),
                    stream: stream.name.to_string(),
                    reader: f.tag.to_string(),
                    connection: f.connection,
                    lag_messages: f.lag.messages,
                    lag_bytes: f.lag.bytes,
                    seconds: f.lag.seconds_to_retention.unwrap_or(0.0),
                }
                .emit();
            }
            if stream.settings.max_age.is_some() {
                let retained = stream.apply_retention(now_ms);
                if let Some(d) = retention_events(stream, retained) {
                    deletions.push((*id, d));
                }
            }
            if stream.wants_dispatch() {
                dirty.push(*id);
            }
        }
        for (id, segments) in deletions {
            self.home.stream_io.remove_segments(id, segments);
        }
        if tracked {
            // Acked offsets not written with a group since: written now.
            shard.store.borrow_mut().stage_external();
        }
        for id in dirty {
            self.home.mark_dirty(id);
        }
    }
}

/// The tail cache's limit now: `stream.tail_cache_bytes`, or nothing beyond what is not
/// on disk yet while message memory is above `store.page_out_fraction` of the watermark.
fn cache_limit(shard: &Shard) -> u64 {
    let fraction = shard.config.store.page_out_fraction;
    let pressed =
        fraction > 0.0 && shard.memory.used() > (shard.memory.high as f64 * fraction) as u64;
    if pressed {
        0
    } else {
        shard.config.stream.tail_cache_bytes
    }
}

/// Logs what retention did (STR-1004, and STR-1002 per reader moved on); returns the
/// segment files to delete.
fn retention_events(stream: &Stream, retained: Retained) -> Option<Vec<u32>> {
    if retained.removed.is_empty() {
        return None;
    }
    for lost in retained.lost {
        StreamEvent::PositionRemoved {
            vhost: stream.vhost.clone(),
            stream: stream.name.to_string(),
            reader: lost.tag.to_string(),
            connection: lost.connection,
            from: lost.from,
            to: lost.to,
        }
        .emit();
    }
    StreamEvent::SegmentsRemoved {
        vhost: stream.vhost.clone(),
        stream: stream.name.to_string(),
        segments: retained.removed.len(),
        first_offset: stream.first_offset(),
    }
    .emit();
    Some(retained.removed)
}
