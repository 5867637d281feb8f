//! Owns: the publisher task — connect with the run's flow-control settings, publish
//! stamped bodies (round-robin over the run's routing keys with `--topics`, each
//! topic numbered on its own) as fast as allowed (closed loop: no more than `--max-ahead` past
//! the subscribers, waiting on the run's [`Pacer`](super::pacing), and counting the
//! time it waited) or on a fixed schedule, keep N confirms in
//! flight, retry a publish that timed out under flow control, and report what the
//! client saw of flow control (time held, waits, timeouts, `channel.flow` stops,
//! `connection.blocked`) and of backpressure (time waiting for the socket).
//! Does not: consume, or measure latency (subscribers do, from the stamp).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice::client::{
    Channel, ClientError, Confirmation, Connection, NO_PROPERTIES, PERSISTENT_PROPERTIES,
};
use sluice::protocol::ShortStr;

use super::pacing::PubPacing;
use super::setup::connect;
use super::{PubResult, PubSpec};
use crate::stats::{BodyMaker, Shared};

/// Connects a publisher's channel (confirm mode when asked).
pub async fn prepare_pub(url: &str, spec: &PubSpec) -> Result<(Connection, Channel), ClientError> {
    let name = format!("sluice-bench pub {}", spec.id);
    let conn = connect(url, &name, spec.flow, spec.command_queue).await?;
    let ch = conn.open_channel().await?;
    if spec.confirm > 0 {
        ch.confirm_select().await?;
    }
    Ok((conn, ch))
}

/// Publishes as fast as allowed (or at `rate`) until stopped or `max_messages`.
pub async fn run_pub(
    shared: Arc<Shared>,
    mut pacing: PubPacing,
    spec: PubSpec,
    conn: Connection,
    mut ch: Channel,
) -> PubResult {
    let mut res = PubResult::default();
    let t0 = Instant::now();
    let returns = ch.take_returns();
    let (r, ch) = if spec.rate > 0 {
        let handle = tokio::runtime::Handle::current();
        let sh = Arc::clone(&shared);
        let joined = tokio::task::spawn_blocking(move || {
            let mut res = PubResult::default();
            let r = paced_pub(&handle, &sh, &spec, &ch, &mut res);
            (ch, res, r)
        })
        .await;
        match joined {
            Ok((c, r2, r)) => {
                res = r2;
                (r, c)
            }
            Err(_) => {
                res.error = Some("publisher thread failed".into());
                return res;
            }
        }
    } else {
        let r = fast_pub(&shared, &mut pacing, &spec, &ch, &mut res).await;
        (r, ch)
    };
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    res.run_ms = ms(t0.elapsed());
    res.pacing_wait_ms = ms(pacing.waited);
    res.pacing_waits = pacing.waits;
    res.pacing_released_at_s = pacing.released_at;
    if let Err(e) = r {
        res.error = Some(e.to_string());
    }
    let flow = ch.flow_stats();
    res.flow_held_ms = ms(flow.held);
    res.send_blocked_ms = ms(flow.backpressure);
    res.flow_waits = flow.waits;
    res.flow_timeouts = flow.timeouts;
    res.channel_flow_stops = flow.channel_flow_stops;
    res.connection_blocks = flow.connection_blocks;
    drop(ch);
    if let Some(mut rx) = returns {
        while rx.try_recv().is_ok() {
            res.returned += 1;
        }
    }
    let _ = conn.close().await;
    res
}

fn props_for(spec: &PubSpec) -> Bytes {
    if spec.persistent {
        PERSISTENT_PROPERTIES
    } else {
        NO_PROPERTIES
    }
}

/// What became of one attempt to publish.
enum Sent {
    Yes,
    /// Held by flow control past the wait-failure period: not sent, try again.
    TimedOut,
}

async fn publish_one(
    ch: &Channel,
    spec: &PubSpec,
    key: &ShortStr,
    props: &Bytes,
    body: Bytes,
    inflight: &mut VecDeque<Confirmation>,
    res: &mut PubResult,
) -> Result<Sent, ClientError> {
    let r = if spec.confirm > 0 {
        while inflight.len() >= spec.confirm {
            if let Some(c) = inflight.pop_front() {
                if c.await? {
                    res.confirmed += 1;
                } else {
                    res.nacked += 1;
                }
            }
        }
        ch.basic_publish_confirmed(
            spec.exchange.clone(),
            key.clone(),
            spec.mandatory,
            props.clone(),
            body,
        )
        .await
        .map(|c| inflight.push_back(c))
    } else {
        ch.basic_publish(
            spec.exchange.clone(),
            key.clone(),
            spec.mandatory,
            props.clone(),
            body,
        )
        .await
    };
    match r {
        Ok(()) => {
            res.published += 1;
            Ok(Sent::Yes)
        }
        Err(ClientError::FlowControlTimeout { .. }) => Ok(Sent::TimedOut),
        Err(e) => Err(e),
    }
}

async fn settle(
    inflight: &mut VecDeque<Confirmation>,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    while let Some(c) = inflight.pop_front() {
        let ok = tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .map_err(|_| ClientError::UnexpectedReply {
                expected: "publisher confirm within 10 s",
                got: "nothing",
            })??;
        if ok {
            res.confirmed += 1;
        } else {
            res.nacked += 1;
        }
    }
    Ok(())
}

/// The routing keys in turn, each with its own sequence numbers.
struct Topics<'a> {
    keys: &'a [ShortStr],
    seqs: Vec<u64>,
    next: usize,
}

impl<'a> Topics<'a> {
    fn new(keys: &'a [ShortStr]) -> Topics<'a> {
        Topics {
            keys,
            seqs: vec![0; keys.len()],
            next: 0,
        }
    }

    /// The next message's routing key and sequence number (within its topic).
    fn current(&self) -> (&'a ShortStr, u64) {
        (&self.keys[self.next], self.seqs[self.next])
    }

    /// The current message went out: on to the next topic.
    fn sent(&mut self) {
        self.seqs[self.next] += 1;
        self.next = (self.next + 1) % self.keys.len();
    }
}

async fn fast_pub(
    shared: &Shared,
    pacing: &mut PubPacing,
    spec: &PubSpec,
    ch: &Channel,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let mut maker = BodyMaker::new(spec.size);
    let props = props_for(spec);
    let mut inflight = VecDeque::new();
    let mut counted = 0u64;
    let mut n = 0u64;
    let mut topics = Topics::new(&spec.routing_keys);
    // The message's index in the pacer, kept across retries of the same message.
    let mut index = None;
    while !shared.stopped() && (spec.max_messages == 0 || n < spec.max_messages) {
        let i = *index.get_or_insert_with(|| pacing.take());
        pacing
            .admit(i, || shared.stopped(), || shared.since_start_s())
            .await;
        if shared.stopped() {
            break;
        }
        // Stamped after any wait: latency counts from the actual send.
        let (key, seq) = topics.current();
        let body = maker.make(shared.now_ns(), seq, spec.id);
        match publish_one(ch, spec, key, &props, body, &mut inflight, res).await? {
            Sent::Yes => {
                n += 1;
                topics.sent();
                index = None;
            }
            // Not sent: the same sequence number again, so no gap shows downstream.
            Sent::TimedOut => continue,
        }
        if n.is_multiple_of(256) {
            shared
                .published
                .fetch_add(res.published - counted, Ordering::Relaxed);
            counted = res.published;
        }
    }
    shared
        .published
        .fetch_add(res.published - counted, Ordering::Relaxed);
    settle(&mut inflight, res).await
}

/// Fixed-rate publishing on its own thread, paced with `thread::sleep` (tens of
/// microseconds of slack, where the tokio timer has a millisecond), stamping each
/// message with its *intended* send time so latency includes any delay in sending —
/// flow control included (no coordinated omission).
fn paced_pub(
    handle: &tokio::runtime::Handle,
    shared: &Shared,
    spec: &PubSpec,
    ch: &Channel,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let mut maker = BodyMaker::new(spec.size);
    let props = props_for(spec);
    let mut inflight = VecDeque::new();
    let interval_ns = 1_000_000_000 / spec.rate.max(1);
    let start_ns = shared.now_ns();
    let mut n = 0u64;
    let mut counted = 0u64;
    let mut topics = Topics::new(&spec.routing_keys);
    while !shared.stopped() && (spec.max_messages == 0 || n < spec.max_messages) {
        let intended = start_ns + n * interval_ns;
        let now = shared.now_ns();
        if intended > now {
            std::thread::sleep(Duration::from_nanos(intended - now));
        }
        let (key, seq) = topics.current();
        let body = maker.make(intended, seq, spec.id);
        let sent = publish_one(ch, spec, key, &props, body, &mut inflight, res);
        match handle.block_on(sent)? {
            Sent::Yes => {
                n += 1;
                topics.sent();
            }
            Sent::TimedOut => continue,
        }
        if res.published - counted >= 16 {
            shared
                .published
                .fetch_add(res.published - counted, Ordering::Relaxed);
            counted = res.published;
        }
    }
    shared
        .published
        .fetch_add(res.published - counted, Ordering::Relaxed);
    handle.block_on(settle(&mut inflight, res))
}
