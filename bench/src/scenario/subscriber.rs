//! Owns: the subscriber task — connect, declare and bind its queue (or join a shared
//! one), receive by `basic.consume` or `basic.get`, throttle to `--slow-rate` when
//! slow, acknowledge as the ack mode says, count deliveries and sequence gaps, record
//! latency into its group (fast or slow), tell the run's [`Pacer`](super::pacing)
//! how far it got after every batch (and, by dropping its handle, that it ended),
//! and report how its channel ended (e.g. 506 `Consuming too slow.`) — for a
//! throttled subscriber, by reading what is left in its socket after the run, since
//! a close comes behind every delivery the broker wrote before it.
//! Does not: publish, or decide when the run ends (the harness sets `stop_consumers`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::client::{
    Channel, ClientError, Connection, ConsumeOptions, Consumer, QueueDeclareOptions,
};
use sluice::protocol::FieldTable;

use super::pacing::SubPacing;
use super::setup::connect_plain;
use super::{AckMode, ConsumeMode, QueueSetup, SubResult, SubSpec};
use crate::stats::{read_stamp, Recorder, Sequence, Shared};

/// Connects a subscriber and declares/binds its queue; returns the connection,
/// channel and queue name. Done before publishers start.
pub async fn prepare_sub(
    url: &str,
    spec: &SubSpec,
) -> Result<(Connection, Channel, String), ClientError> {
    let conn = connect_plain(url, &format!("sluice-bench sub {}", spec.id)).await?;
    let ch = conn.open_channel().await?;
    if spec.ack != AckMode::NoAck && spec.prefetch > 0 {
        ch.basic_qos(spec.prefetch, false).await?;
    }
    let queue = match &spec.setup {
        QueueSetup::Bound {
            exchange,
            key,
            durable_name,
            arguments,
        } => {
            let opts = match durable_name {
                Some(_) => QueueDeclareOptions {
                    durable: true,
                    arguments: arguments.clone(),
                    ..Default::default()
                },
                None => QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    arguments: arguments.clone(),
                    ..Default::default()
                },
            };
            let info = ch
                .queue_declare(durable_name.as_deref().unwrap_or(""), opts)
                .await?;
            let name = info.name.to_string();
            if durable_name.is_some() {
                ch.queue_purge(&name).await?;
            }
            ch.queue_bind(&name, exchange, key, FieldTable::new())
                .await?;
            name
        }
        QueueSetup::Shared(q) => q.clone(),
    };
    Ok((conn, ch, queue))
}

/// Receives until told to stop (or the channel dies), acking as the mode says.
pub async fn run_sub(
    shared: Arc<Shared>,
    pacing: SubPacing,
    spec: SubSpec,
    conn: Connection,
    ch: Channel,
    queue: String,
) -> SubResult {
    let mut res = SubResult {
        id: spec.id,
        queue: queue.clone(),
        slow: spec.slow_rate.is_some(),
        ..Default::default()
    };
    let outcome = sub_loop(&shared, pacing, &spec, &ch, &queue, &mut res).await;
    if let Err(e) = outcome {
        match e {
            ClientError::ChannelClosed { code, text, .. }
            | ClientError::ConnectionClosed { code, text, .. } => {
                res.closed_code = Some(code);
                res.closed_text = Some(text);
                res.closed_at_s = Some(shared.since_start_s());
                res.closed_after_run = shared.stop_consumers.load(Ordering::Relaxed);
            }
            other => res.error = Some(other.to_string()),
        }
    }
    if let QueueSetup::Bound {
        durable_name: Some(q),
        ..
    } = &spec.setup
    {
        if ch.error().is_none() {
            let _ = ch.queue_delete(q, false, false).await;
        }
    }
    drop(ch);
    let _ = conn.close().await;
    res
}

struct Acker {
    mode: AckMode,
    unacked: u64,
    last_tag: u64,
    threshold: u64,
}

impl Acker {
    async fn on_batch(&mut self, ch: &Channel, tags: &[u64]) -> Result<(), ClientError> {
        let Some(&last) = tags.last() else {
            return Ok(());
        };
        match self.mode {
            AckMode::NoAck => {}
            AckMode::Auto => {
                for &t in tags {
                    ch.basic_ack(t, false).await?;
                }
            }
            AckMode::Client => ch.basic_ack(last, true).await?,
            AckMode::DupsOk => {
                self.unacked += tags.len() as u64;
                self.last_tag = last;
                if self.unacked >= self.threshold {
                    ch.basic_ack(last, true).await?;
                    self.unacked = 0;
                }
            }
            AckMode::Transacted => {
                ch.basic_ack(last, true).await?;
                ch.tx_commit().await?;
            }
        }
        Ok(())
    }
}

/// Counts a delivery: latency from its stamp, and the sequence numbers it skipped
/// since the previous one of the same publisher.
struct Seen<'a> {
    shared: &'a Shared,
    slot: usize,
    /// Stops pacing publishers when dropped (however `sub_loop` ends).
    pacing: SubPacing,
    rec: Recorder,
    seq: Sequence,
    /// Deliveries already added to the group's shared counter.
    counted: u64,
}

impl Seen<'_> {
    fn one(&mut self, res: &mut SubResult, body: &[u8]) {
        res.delivered += 1;
        if let Some(sent) = self.sequence(res, body) {
            self.rec.record(self.shared, sent);
        }
    }

    /// Follows the stamp's sequence number, counting what was skipped; the send time.
    fn sequence(&mut self, res: &mut SubResult, body: &[u8]) -> Option<u64> {
        let (sent, seq, publ) = read_stamp(body)?;
        let (skipped, reordered) = self.seq.see(seq, publ);
        res.gaps += skipped;
        res.reordered += u64::from(reordered);
        Some(sent)
    }

    fn flush_count(&mut self, res: &SubResult) {
        self.shared
            .group(res.slow)
            .delivered
            .add(self.slot, res.delivered - self.counted);
        self.counted = res.delivered;
        self.pacing.progress(res.delivered, res.gaps);
    }
}

/// How long a throttled subscriber may read after the run to learn how its channel
/// ended.
const FATE_READ: Duration = Duration::from_secs(2);

/// After the run, a throttled subscriber reads what is left in its socket at full
/// speed (not counted as delivered, but sequence numbers skipped are) until the
/// channel's close, nothing for 100 ms, or [`FATE_READ`]: a broker that closed it
/// (506) or discarded its oldest messages (cycle) did so behind every delivery
/// already in the socket, which at the throttled rate would take minutes to reach.
async fn learn_fate(
    consumer: &mut Consumer,
    seen: &mut Seen<'_>,
    res: &mut SubResult,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + FATE_READ;
    let mut batch = Vec::with_capacity(512);
    while Instant::now() < deadline {
        batch.clear();
        let quiet = Duration::from_millis(100);
        match tokio::time::timeout(quiet, consumer.recv_many(&mut batch, 512)).await {
            Err(_) => break,
            Ok(r) => res.read_after_run += r? as u64,
        }
        for d in &batch {
            seen.sequence(res, &d.body);
        }
    }
    Ok(())
}

async fn sub_loop(
    shared: &Shared,
    pacing: SubPacing,
    spec: &SubSpec,
    ch: &Channel,
    queue: &str,
    res: &mut SubResult,
) -> Result<(), ClientError> {
    let mut seen = Seen {
        shared,
        slot: spec.id,
        pacing,
        rec: Recorder::new(spec.id, res.slow),
        seq: Sequence::new(spec.publishers),
        counted: 0,
    };
    let mut acker = Acker {
        mode: spec.ack,
        unacked: 0,
        last_tag: 0,
        threshold: (u64::from(spec.prefetch) / 2).clamp(1, 1000),
    };
    if spec.ack == AckMode::Transacted {
        ch.tx_select().await?;
    }
    let pace = spec
        .slow_rate
        .map(|r| Duration::from_secs_f64(1.0 / f64::from(r.max(1))));
    let mut next_due = Instant::now();
    let mut tags: Vec<u64> = Vec::with_capacity(512);
    // An error (e.g. the broker closing the channel) leaves the block; the counts
    // below are flushed either way.
    let result: Result<(), ClientError> = async {
        match spec.consume {
            ConsumeMode::Async => {
                let buffer = if pace.is_some() { 16 } else { 8192 };
                let mut consumer = ch
                    .basic_consume(
                        queue,
                        ConsumeOptions {
                            no_ack: spec.ack == AckMode::NoAck,
                            buffer,
                            arguments: spec.consume_args.clone(),
                            ..Default::default()
                        },
                    )
                    .await?;
                let mut batch = Vec::with_capacity(512);
                let batch_max = if pace.is_some() { 1 } else { 512 };
                loop {
                    if shared.stop_consumers.load(Ordering::Relaxed) {
                        if pace.is_some() {
                            break learn_fate(&mut consumer, &mut seen, res).await;
                        }
                        break Ok(());
                    }
                    batch.clear();
                    let got = tokio::select! {
                        r = consumer.recv_many(&mut batch, batch_max) => Some(r),
                        _ = tokio::time::sleep(Duration::from_millis(50)) => None,
                    };
                    match got {
                        None => {}
                        Some(Err(e)) => break Err(e),
                        Some(Ok(_)) => {
                            seen.rec.batch_received(shared);
                            tags.clear();
                            for d in &batch {
                                seen.one(res, &d.body);
                                tags.push(d.delivery_tag);
                            }
                            acker.on_batch(ch, &tags).await?;
                            seen.flush_count(res);
                            seen.rec.maybe_flush(shared);
                        }
                    }
                    if let Some(p) = pace {
                        next_due += p;
                        tokio::time::sleep_until(next_due.into()).await;
                    }
                }
            }
            ConsumeMode::Sync => loop {
                if shared.stop_consumers.load(Ordering::Relaxed) {
                    break Ok(());
                }
                match ch.basic_get(queue, spec.ack == AckMode::NoAck).await? {
                    Some(m) => {
                        seen.rec.batch_received(shared);
                        seen.one(res, &m.body);
                        acker.on_batch(ch, &[m.delivery_tag]).await?;
                        seen.flush_count(res);
                        seen.rec.maybe_flush(shared);
                        if let Some(p) = pace {
                            next_due += p;
                            tokio::time::sleep_until(next_due.into()).await;
                        }
                    }
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            },
        }
    }
    .await;
    if acker.unacked > 0 && ch.error().is_none() {
        let _ = ch.basic_ack(acker.last_tag, true).await;
    }
    seen.flush_count(res);
    seen.rec.flush(shared);
    res.p99_ns = (!seen.rec.hist.is_empty()).then(|| seen.rec.hist.quantile(0.99));
    res.measured = seen.rec.hist.len();
    result
}
