//! Owns: the stream families of `GET /metrics` (`sluice_stream_*`): per stream its
//! offsets, segments, bytes, readers and what retention removed; per reader (with
//! `http.per_queue_metrics`, the default) its offset, how far it is behind the
//! committed end in messages and bytes, and the predicted seconds until retention
//! removes its position; without per-queue metrics, per stream the largest lag and how
//! many readers are predicted to fall off.
//!
//! Does not: compute lag (the stream's home shard does, `stream::retention`) or keep
//! anything between scrapes.

use prometheus_client::registry::Registry;

use super::metrics::{counter, gauge};
use crate::shard::inbox::observe::{ShardView, StreamView};

/// Registers and fills the stream families (nothing when there is no stream).
pub fn record(reg: &mut Registry, shards: &[ShardView], per_reader: bool) {
    let streams: Vec<(&str, &str, &StreamView)> = shards
        .iter()
        .flat_map(|s| &s.queues)
        .filter_map(|q| Some((q.vhost.as_str(), q.name.as_str(), q.stream.as_deref()?)))
        .collect();
    if streams.is_empty() {
        return;
    }
    let first = gauge(
        reg,
        "stream_first_offset",
        "First offset still in the stream",
    );
    let committed = gauge(
        reg,
        "stream_committed_offset",
        "One past the last offset on disk (what readers may be given)",
    );
    let segments = gauge(reg, "stream_segments", "Segment files of the stream");
    let disk = gauge(
        reg,
        "stream_disk_bytes",
        "Bytes of the stream's segment files",
    );
    let readers = gauge(reg, "stream_readers", "Consumers reading the stream");
    let removed = counter(
        reg,
        "stream_messages_removed",
        "Messages retention removed (x-max-length-bytes, x-max-age)",
    );
    let max_lag = gauge(
        reg,
        "stream_reader_max_lag_messages",
        "Messages the furthest-behind reader is behind the committed end",
    );
    let falling = gauge(
        reg,
        "stream_readers_falling",
        "Readers predicted to lose their position to retention at the current rates",
    );
    let per = per_reader.then(|| {
        (
            gauge(reg, "stream_reader_offset", "The next offset the reader will be given"),
            gauge(
                reg,
                "stream_reader_lag_messages",
                "Messages the reader is behind the committed end",
            ),
            gauge(
                reg,
                "stream_reader_lag_bytes",
                "Bytes the reader is behind the committed end",
            ),
            gauge(
                reg,
                "stream_reader_seconds_to_retention",
                "Predicted seconds until retention removes the reader's position (only readers falling behind)",
            ),
        )
    });
    for (vhost, name, s) in streams {
        let l = vec![("vhost", vhost.to_owned()), ("queue", name.to_owned())];
        first.get_or_create(&l).set(s.first_offset as f64);
        committed.get_or_create(&l).set(s.committed_offset as f64);
        segments.get_or_create(&l).set(s.segments as f64);
        disk.get_or_create(&l).set(s.disk_bytes as f64);
        readers.get_or_create(&l).set(s.readers.len() as f64);
        removed.get_or_create(&l).inc_by(s.messages_removed);
        let lag = s.readers.iter().map(|r| r.lag_messages).max().unwrap_or(0);
        max_lag.get_or_create(&l).set(lag as f64);
        let n = s
            .readers
            .iter()
            .filter(|r| r.seconds_to_retention.is_some())
            .count();
        falling.get_or_create(&l).set(n as f64);
        let Some((offset, lag_messages, lag_bytes, seconds)) = &per else {
            continue;
        };
        for r in &s.readers {
            let rl = vec![
                ("vhost", vhost.to_owned()),
                ("queue", name.to_owned()),
                ("consumer_tag", r.consumer_tag.clone()),
                ("connection", r.connection.clone()),
                ("channel", r.channel.to_string()),
            ];
            offset.get_or_create(&rl).set(r.offset as f64);
            lag_messages.get_or_create(&rl).set(r.lag_messages as f64);
            lag_bytes.get_or_create(&rl).set(r.lag_bytes as f64);
            if let Some(secs) = r.seconds_to_retention {
                seconds.get_or_create(&rl).set(secs);
            }
        }
    }
}
