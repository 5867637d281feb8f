//! Owns: the publisher task — connect with the run's flow-control settings, publish
//! stamped bodies (round-robin over the run's routing keys with `--topics`, each
//! topic numbered on its own) as fast as allowed (closed loop: no more than `--max-ahead` past
//! the subscribers, waiting on the run's [`Pacer`](super::pacing), and counting the
//! time it waited) or on a fixed schedule, keep at most N confirms in flight
//! (waiting for room *before* stamping a message, so the stamp is its send time; the
//! [`confirms`](super::confirms) collector times each confirm), retry a publish that
//! timed out under flow control, and report what the client saw of flow control
//! (time held, waits, timeouts, `channel.flow` stops, `connection.blocked`) and of
//! backpressure (time waiting for the socket).
//! Does not: consume, or measure delivery latency (subscribers do, from the stamp).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice::client::{
    Channel, ClientError, Confirmation, Connection, NO_PROPERTIES, PERSISTENT_PROPERTIES,
};
use sluice::protocol::ShortStr;

use super::confirms::Tracker;
use super::pacing::PubPacing;
use super::setup::connect;
use super::{PubResult, PubSpec};
use crate::stats::{BodyMaker, Shared};

/// A publisher's confirms in flight.
type Confirms = Tracker<Confirmation>;

/// How long a publisher waits for its last confirms once it stopped publishing.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

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
    let mut confirms: Option<Confirms> = (spec.confirm > 0)
        .then(|| Tracker::new(Arc::clone(&shared), spec.id as usize, spec.confirm));
    let (r, ch, confirms) = if spec.rate > 0 {
        let handle = tokio::runtime::Handle::current();
        let sh = Arc::clone(&shared);
        let joined = tokio::task::spawn_blocking(move || {
            let mut res = PubResult::default();
            let r = paced_pub(&handle, &sh, &spec, &ch, confirms.as_mut(), &mut res);
            (ch, confirms, res, r)
        })
        .await;
        match joined {
            Ok((c, t, r2, r)) => {
                res = r2;
                (r, c, t)
            }
            Err(_) => {
                res.error = Some("publisher thread failed".into());
                return res;
            }
        }
    } else {
        let r = fast_pub(
            &shared,
            &mut pacing,
            &spec,
            &ch,
            confirms.as_mut(),
            &mut res,
        )
        .await;
        (r, ch, confirms)
    };
    if let Err(e) = r {
        res.error = Some(e.to_string());
    }
    if let Some(t) = confirms {
        let (settled, why) = t.finish(SETTLE_LIMIT).await;
        res.confirmed = settled.acked;
        res.nacked = settled.nacked;
        if let Some(why) = why {
            res.error.get_or_insert(why);
        }
    }
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    res.run_ms = ms(t0.elapsed());
    res.pacing_wait_ms = ms(pacing.waited);
    res.pacing_waits = pacing.waits;
    res.pacing_released_at_s = pacing.released_at;
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

/// Publishes one message stamped `sent_ns` (with confirms, after `Tracker::room`
/// said there is room for it).
#[allow(clippy::too_many_arguments)]
async fn publish_one(
    ch: &Channel,
    spec: &PubSpec,
    key: &ShortStr,
    props: &Bytes,
    body: Bytes,
    sent_ns: u64,
    confirms: Option<&mut Confirms>,
    res: &mut PubResult,
) -> Result<Sent, ClientError> {
    let r = match confirms {
        Some(t) => ch
            .basic_publish_confirmed(
                spec.exchange.clone(),
                key.clone(),
                spec.mandatory,
                props.clone(),
                body,
            )
            .await
            .map(|c| t.track(sent_ns, c)),
        None => {
            ch.basic_publish(
                spec.exchange.clone(),
                key.clone(),
                spec.mandatory,
                props.clone(),
                body,
            )
            .await
        }
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
    mut confirms: Option<&mut Confirms>,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let mut maker = BodyMaker::new(spec.size);
    let props = props_for(spec);
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
        if let Some(t) = confirms.as_deref_mut() {
            if !t.room(|| shared.stopped()).await {
                break;
            }
        }
        if shared.stopped() {
            break;
        }
        // Stamped after any wait (pacing, room for a confirm): latency counts from
        // the actual send.
        let (key, seq) = topics.current();
        let now = shared.now_ns();
        let body = maker.make(now, seq, spec.id);
        let sent = publish_one(
            ch,
            spec,
            key,
            &props,
            body,
            now,
            confirms.as_deref_mut(),
            res,
        );
        match sent.await? {
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
    Ok(())
}

/// Fixed-rate publishing on its own thread, paced with `thread::sleep` (tens of
/// microseconds of slack, where the tokio timer has a millisecond), stamping each
/// message with its *intended* send time so latency includes any delay in sending —
/// flow control and waiting for room for a confirm included (no coordinated
/// omission); confirm latency counts from the same intended time.
fn paced_pub(
    handle: &tokio::runtime::Handle,
    shared: &Shared,
    spec: &PubSpec,
    ch: &Channel,
    mut confirms: Option<&mut Confirms>,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let mut maker = BodyMaker::new(spec.size);
    let props = props_for(spec);
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
        if let Some(t) = confirms.as_deref_mut() {
            if !handle.block_on(t.room(|| shared.stopped())) {
                break;
            }
        }
        let (key, seq) = topics.current();
        let body = maker.make(intended, seq, spec.id);
        let confirms = confirms.as_deref_mut();
        let sent = publish_one(ch, spec, key, &props, body, intended, confirms, res);
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
    Ok(())
}
