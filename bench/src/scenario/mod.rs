//! Owns: the scenarios (`fanout` with its `slowsub` variant in [`fanout`], `workq`,
//! `flow`, `persistent`, `matrix`) and the pieces they share: the publisher and
//! subscriber tasks and the harness that times a run (warm-up, measured window, live
//! line, drain) and turns it into a [`crate::report::RunReport`].
//! Does not: assert speed, or know which broker it drives (any AMQP 0-9-1 broker).

pub mod fanout;
pub mod flow;
pub mod matrix;
pub mod persistent;
pub mod workq;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use sluice::client::{
    Channel, ClientError, Connection, ConnectionOptions, ConsumeOptions, ExchangeDeclareOptions,
    QueueDeclareOptions, NO_PROPERTIES, PERSISTENT_PROPERTIES,
};
use sluice::protocol::{FieldTable, FieldValue, LongStr, ShortStr};

use crate::broker::BrokerUnderTest;
use crate::report::{Latency, RunReport};
use crate::stats::{fmt_bytes, fmt_ns, fmt_rate, read_stamp, BodyMaker, Recorder, Sample, Shared};

/// Acknowledgement mode of subscribers (the seed's test-spec names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckMode {
    /// `no_ack = true`: the broker forgets a message once written.
    NoAck,
    /// Every message acknowledged on its own (JMS AUTO_ACKNOWLEDGE).
    Auto,
    /// One `multiple` ack per received batch (JMS CLIENT_ACKNOWLEDGE).
    Client,
    /// Lazy `multiple` acks every prefetch/2 messages (JMS DUPS_OK_ACKNOWLEDGE).
    DupsOk,
    /// Acks inside a transaction committed per received batch.
    Transacted,
}

/// How subscribers receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConsumeMode {
    /// `basic.consume` (pushed deliveries).
    Async,
    /// `basic.get` polling.
    Sync,
}

/// Everything a scenario is parameterised by (the command-line flags).
#[derive(Clone, Debug, Serialize)]
pub struct Opts {
    pub publishers: usize,
    pub subscribers: usize,
    pub consumers: usize,
    pub size: usize,
    pub rate: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub prefetch: u16,
    pub ack: AckMode,
    pub consume: ConsumeMode,
    pub durable: bool,
    pub persistent: bool,
    pub confirm: usize,
    pub slow: usize,
    pub slow_rate: u32,
    pub routing_key: String,
    pub queue_args: Vec<(String, String)>,
    pub max_messages: u64,
    pub drain_timeout_s: f64,
    pub quiet: bool,
}

/// A queue argument from `--queue-arg k=v`: integers become signed 64-bit, `true` /
/// `false` booleans, anything else a long string.
pub fn queue_arguments(args: &[(String, String)]) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in args {
        let value = if let Ok(n) = v.parse::<i64>() {
            FieldValue::I64(n)
        } else if let Ok(b) = v.parse::<bool>() {
            FieldValue::Bool(b)
        } else {
            FieldValue::LongStr(LongStr::from(v.as_str()))
        };
        t.insert(k.as_str(), value);
    }
    t
}

/// How a subscriber gets its queue.
#[derive(Clone, Debug)]
pub enum QueueSetup {
    /// Its own queue bound to `exchange` with `key`: server-named, exclusive and
    /// auto-delete, or (`durable_name`) a durable named queue.
    Bound {
        exchange: String,
        key: String,
        durable_name: Option<String>,
        arguments: FieldTable,
    },
    /// A queue shared with other consumers, declared by the scenario.
    Shared(String),
}

/// One subscriber's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubResult {
    pub id: usize,
    pub queue: String,
    pub slow: bool,
    pub delivered: u64,
    /// Sequence numbers skipped (messages the broker discarded for this subscriber).
    pub gaps: u64,
    /// Reply code and text if the broker closed its channel (e.g. 506).
    pub closed_code: Option<u16>,
    pub closed_text: Option<String>,
    pub error: Option<String>,
}

/// One publisher's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PubResult {
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    /// Time publishes spent held by broker flow control (ms).
    pub flow_held_ms: u64,
    /// Publishes that gave up under flow control.
    pub flow_timeouts: u64,
    pub error: Option<String>,
}

pub struct SubSpec {
    pub id: usize,
    pub setup: QueueSetup,
    pub slow_rate: Option<u32>,
    pub ack: AckMode,
    pub consume: ConsumeMode,
    pub prefetch: u16,
    pub publishers: usize,
}

pub struct PubSpec {
    pub id: u32,
    pub exchange: ShortStr,
    pub routing_key: ShortStr,
    pub mandatory: bool,
    pub persistent: bool,
    pub confirm: usize,
    pub rate: u64,
    pub size: usize,
    pub max_messages: u64,
}

async fn connect(url: &str, name: &str) -> Result<Connection, ClientError> {
    let opts = ConnectionOptions {
        name: Some(name.into()),
        heartbeat: 0,
        ..Default::default()
    };
    Connection::connect_with(url, opts).await
}

/// Connects a subscriber and declares/binds its queue; returns the connection,
/// channel and queue name. Done before publishers start.
pub async fn prepare_sub(
    url: &str,
    spec: &SubSpec,
) -> Result<(Connection, Channel, String), ClientError> {
    let conn = connect(url, &format!("sluice-bench sub {}", spec.id)).await?;
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
    let outcome = sub_loop(&shared, &spec, &ch, &queue, &mut res).await;
    if let Err(e) = outcome {
        match e {
            ClientError::ChannelClosed { code, text, .. }
            | ClientError::ConnectionClosed { code, text, .. } => {
                res.closed_code = Some(code);
                res.closed_text = Some(text);
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

async fn sub_loop(
    shared: &Shared,
    spec: &SubSpec,
    ch: &Channel,
    queue: &str,
    res: &mut SubResult,
) -> Result<(), ClientError> {
    let mut last_seq = vec![u64::MAX; spec.publishers.max(1)];
    let mut rec = Recorder::new();
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
    let mut seen = |res: &mut SubResult, rec: &mut Recorder, body: &[u8]| {
        res.delivered += 1;
        if let Some((sent, seq, publ)) = read_stamp(body) {
            rec.record(shared, sent);
            if let Some(l) = last_seq.get_mut(publ as usize) {
                if *l != u64::MAX && seq > *l + 1 {
                    res.gaps += seq - *l - 1;
                }
                if *l == u64::MAX || seq > *l {
                    *l = seq;
                }
            }
        }
    };
    let flush_count = |res: &SubResult, counted: &mut u64| {
        shared
            .delivered
            .fetch_add(res.delivered - *counted, Ordering::Relaxed);
        *counted = res.delivered;
    };
    let mut counted = 0u64;
    let result = match spec.consume {
        ConsumeMode::Async => {
            let buffer = if pace.is_some() { 16 } else { 8192 };
            let mut consumer = ch
                .basic_consume(
                    queue,
                    ConsumeOptions {
                        no_ack: spec.ack == AckMode::NoAck,
                        buffer,
                        ..Default::default()
                    },
                )
                .await?;
            let mut batch = Vec::with_capacity(512);
            let batch_max = if pace.is_some() { 1 } else { 512 };
            loop {
                if shared.stop_consumers.load(Ordering::Relaxed) {
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
                        rec.batch_received(shared);
                        tags.clear();
                        for d in &batch {
                            seen(res, &mut rec, &d.body);
                            tags.push(d.delivery_tag);
                        }
                        acker.on_batch(ch, &tags).await?;
                        flush_count(res, &mut counted);
                        rec.maybe_flush(shared);
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
                    rec.batch_received(shared);
                    seen(res, &mut rec, &m.body);
                    acker.on_batch(ch, &[m.delivery_tag]).await?;
                    flush_count(res, &mut counted);
                    rec.maybe_flush(shared);
                    if let Some(p) = pace {
                        next_due += p;
                        tokio::time::sleep_until(next_due.into()).await;
                    }
                }
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        },
    };
    if acker.unacked > 0 && ch.error().is_none() {
        let _ = ch.basic_ack(acker.last_tag, true).await;
    }
    flush_count(res, &mut counted);
    rec.flush(shared);
    result
}

/// Connects a publisher's channel (confirm mode when asked).
pub async fn prepare_pub(url: &str, spec: &PubSpec) -> Result<(Connection, Channel), ClientError> {
    let conn = connect(url, &format!("sluice-bench pub {}", spec.id)).await?;
    let ch = conn.open_channel().await?;
    if spec.confirm > 0 {
        ch.confirm_select().await?;
    }
    Ok((conn, ch))
}

/// Publishes as fast as allowed (or at `rate`) until stopped or `max_messages`.
pub async fn run_pub(
    shared: Arc<Shared>,
    spec: PubSpec,
    conn: Connection,
    mut ch: Channel,
) -> PubResult {
    let mut res = PubResult::default();
    let returns = ch.take_returns();
    let r = if spec.rate > 0 {
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
                drop(c);
                r
            }
            Err(_) => {
                res.error = Some("publisher thread failed".into());
                return res;
            }
        }
    } else {
        let r = fast_pub(&shared, &spec, &ch, &mut res).await;
        drop(ch);
        r
    };
    match r {
        Err(ClientError::FlowControlTimeout { .. }) => res.flow_timeouts += 1,
        Err(e) => res.error = Some(e.to_string()),
        Ok(()) => {}
    }
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

async fn publish_one(
    ch: &Channel,
    spec: &PubSpec,
    props: &Bytes,
    body: Bytes,
    inflight: &mut VecDeque<sluice::client::Confirmation>,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let held = ch.is_flow_held().then(Instant::now);
    if spec.confirm > 0 {
        while inflight.len() >= spec.confirm {
            if let Some(c) = inflight.pop_front() {
                if c.await? {
                    res.confirmed += 1;
                } else {
                    res.nacked += 1;
                }
            }
        }
        let c = ch
            .basic_publish_confirmed(
                spec.exchange.clone(),
                spec.routing_key.clone(),
                spec.mandatory,
                props.clone(),
                body,
            )
            .await;
        if let Some(t) = held {
            res.flow_held_ms += t.elapsed().as_millis() as u64;
        }
        inflight.push_back(c?);
    } else {
        let r = ch
            .basic_publish(
                spec.exchange.clone(),
                spec.routing_key.clone(),
                spec.mandatory,
                props.clone(),
                body,
            )
            .await;
        if let Some(t) = held {
            res.flow_held_ms += t.elapsed().as_millis() as u64;
        }
        r?;
    }
    res.published += 1;
    Ok(())
}

async fn settle(
    inflight: &mut VecDeque<sluice::client::Confirmation>,
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

async fn fast_pub(
    shared: &Shared,
    spec: &PubSpec,
    ch: &Channel,
    res: &mut PubResult,
) -> Result<(), ClientError> {
    let mut maker = BodyMaker::new(spec.size);
    let props = props_for(spec);
    let mut inflight = VecDeque::new();
    let mut counted = 0u64;
    let mut seq = 0u64;
    while !shared.stopped() && (spec.max_messages == 0 || seq < spec.max_messages) {
        let body = maker.make(shared.now_ns(), seq, spec.id);
        publish_one(ch, spec, &props, body, &mut inflight, res).await?;
        seq += 1;
        if seq.is_multiple_of(256) {
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
/// message with its *intended* send time so latency includes any delay in sending
/// (no coordinated omission).
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
    let mut seq = 0u64;
    let mut counted = 0u64;
    while !shared.stopped() && (spec.max_messages == 0 || seq < spec.max_messages) {
        let intended = start_ns + seq * interval_ns;
        let now = shared.now_ns();
        if intended > now {
            std::thread::sleep(Duration::from_nanos(intended - now));
        }
        let body = maker.make(intended, seq, spec.id);
        handle.block_on(publish_one(ch, spec, &props, body, &mut inflight, res))?;
        seq += 1;
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

/// Declares an exchange on a short-lived connection.
pub async fn declare_exchange(
    url: &str,
    name: &str,
    kind: &str,
    durable: bool,
) -> Result<(), ClientError> {
    let conn = connect(url, "sluice-bench setup").await?;
    let ch = conn.open_channel().await?;
    ch.exchange_declare(
        name,
        kind,
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
    )
    .await?;
    drop(ch);
    conn.close().await
}

/// Declares (and empties) a named queue on a short-lived connection.
pub async fn declare_queue(
    url: &str,
    name: &str,
    durable: bool,
    arguments: FieldTable,
) -> Result<(), ClientError> {
    let conn = connect(url, "sluice-bench setup").await?;
    let ch = conn.open_channel().await?;
    ch.queue_declare(
        name,
        QueueDeclareOptions {
            durable,
            arguments,
            ..Default::default()
        },
    )
    .await?;
    ch.queue_purge(name).await?;
    drop(ch);
    conn.close().await
}

/// Deletes a queue on a short-lived connection (best effort).
pub async fn delete_queue(url: &str, name: &str) {
    if let Ok(conn) = connect(url, "sluice-bench cleanup").await {
        if let Ok(ch) = conn.open_channel().await {
            let _ = ch.queue_delete(name, false, false).await;
        }
        let _ = conn.close().await;
    }
}

/// What the harness needs from a scenario: prepared subscribers and publishers.
pub struct Plan {
    pub subs: Vec<SubSpec>,
    pub pubs: Vec<PubSpec>,
    /// Deliveries expected per published message (fanout: subscribers; workq: 1).
    pub fanout_factor: u64,
    pub notes: Vec<String>,
}

/// Runs a plan: connect everyone, publish through warm-up and the measured window
/// with a live line each second, drain, and report.
pub async fn execute(
    scenario: &str,
    broker: &BrokerUnderTest,
    opts: &Opts,
    plan: Plan,
    interrupted: &tokio::sync::watch::Receiver<bool>,
) -> Result<RunReport, String> {
    let url = broker.url.clone();
    let shared = Shared::new();
    let e = |what: &str, err: ClientError| format!("{what}: {err}");
    // Subscribers first, so no message is published before every queue is bound.
    let mut sub_tasks = Vec::new();
    for spec in plan.subs {
        let (conn, ch, queue) = prepare_sub(&url, &spec)
            .await
            .map_err(|x| e("subscriber setup", x))?;
        sub_tasks.push(tokio::spawn(run_sub(
            Arc::clone(&shared),
            spec,
            conn,
            ch,
            queue,
        )));
    }
    let mut pub_ready = Vec::new();
    for spec in plan.pubs {
        let (conn, ch) = prepare_pub(&url, &spec)
            .await
            .map_err(|x| e("publisher setup", x))?;
        pub_ready.push((spec, conn, ch));
    }
    let t_start = Instant::now();
    let mut pub_tasks = Vec::new();
    for (spec, conn, ch) in pub_ready {
        pub_tasks.push(tokio::spawn(run_pub(Arc::clone(&shared), spec, conn, ch)));
    }
    let timeline: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
    let rss_max = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Live sampler.
    let sampler = {
        let shared = Arc::clone(&shared);
        let timeline = Arc::clone(&timeline);
        let rss_max = Arc::clone(&rss_max);
        let pid = broker.pid();
        let inproc = matches!(broker.kind, crate::broker::BrokerKind::InProcess(_));
        let quiet = opts.quiet;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            let (mut lp, mut ld) = (0u64, 0u64);
            let mut last = Instant::now();
            loop {
                tick.tick().await;
                let p = shared.published.load(Ordering::Relaxed);
                let d = shared.delivered.load(Ordering::Relaxed);
                let dt = last.elapsed().as_secs_f64().max(1e-6);
                last = Instant::now();
                let p99 = shared
                    .interval
                    .lock()
                    .map(|mut h| {
                        let v = if h.is_empty() {
                            0
                        } else {
                            h.value_at_quantile(0.99)
                        };
                        h.reset();
                        v
                    })
                    .unwrap_or(0);
                let rss = if inproc {
                    crate::broker::process_usage(std::process::id()).map_or(0, |u| u.rss)
                } else {
                    pid.and_then(crate::broker::process_usage)
                        .map_or(0, |u| u.rss)
                };
                rss_max.fetch_max(rss, Ordering::Relaxed);
                let s = Sample {
                    t: t_start.elapsed().as_secs_f64(),
                    published_per_s: (p - lp) as f64 / dt,
                    delivered_per_s: (d - ld) as f64 / dt,
                    p99_ns: p99,
                    broker_rss: rss,
                };
                if !quiet {
                    eprintln!(
                        "{:>6.1}s  published {:>8}/s  delivered {:>8}/s  p99 {:>9}  broker RSS {:>9}",
                        s.t,
                        fmt_rate(s.published_per_s),
                        fmt_rate(s.delivered_per_s),
                        if p99 == 0 { "-".into() } else { fmt_ns(p99) },
                        fmt_bytes(rss)
                    );
                }
                if let Ok(mut t) = timeline.lock() {
                    t.push(s);
                }
                lp = p;
                ld = d;
            }
        })
    };
    let mut intr = interrupted.clone();
    let wait = |secs: f64, intr: &mut tokio::sync::watch::Receiver<bool>| {
        let intr = intr.clone();
        async move {
            let mut intr = intr;
            if *intr.borrow() {
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(secs)) => false,
                _ = intr.changed() => true,
            }
        }
    };
    let mut was_interrupted = wait(opts.warmup_s, &mut intr).await;
    let p0 = shared.published.load(Ordering::Relaxed);
    let d0 = shared.delivered.load(Ordering::Relaxed);
    let b0 = broker.usage();
    let c0 = broker.tool_cpu_ns();
    let w0 = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    if !was_interrupted {
        was_interrupted = wait(opts.duration_s, &mut intr).await;
    }
    shared.measuring.store(false, Ordering::Relaxed);
    let window = w0.elapsed().as_secs_f64();
    let p1 = shared.published.load(Ordering::Relaxed);
    let d1 = shared.delivered.load(Ordering::Relaxed);
    let b1 = broker.usage();
    let c1 = broker.tool_cpu_ns();
    shared.stop.store(true, Ordering::Relaxed);
    let mut pubs = Vec::new();
    for t in pub_tasks {
        pubs.push(t.await.unwrap_or_default());
    }
    let published: u64 = pubs.iter().map(|p| p.published).sum();
    // Drain: until every expected delivery arrived, or nothing moved for 500 ms, or
    // the drain timeout.
    let expected = published * plan.fanout_factor;
    let drain_start = Instant::now();
    let mut last_d = shared.delivered.load(Ordering::Relaxed);
    let mut still_since = Instant::now();
    while drain_start.elapsed().as_secs_f64() < opts.drain_timeout_s {
        let d = shared.delivered.load(Ordering::Relaxed);
        if d >= expected {
            break;
        }
        if d != last_d {
            last_d = d;
            still_since = Instant::now();
        } else if still_since.elapsed() > Duration::from_millis(500) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shared.stop_consumers.store(true, Ordering::Relaxed);
    let mut subs = Vec::new();
    for t in sub_tasks {
        subs.push(t.await.unwrap_or_default());
    }
    sampler.abort();
    let delivered: u64 = subs.iter().map(|s| s.delivered).sum();
    let hist = shared
        .total
        .lock()
        .map(|h| h.clone())
        .map_err(|_| "histogram lock poisoned")?;
    let latency = Latency::from_hist(&hist, opts.rate > 0);
    let dp = p1 - p0;
    let dd = d1 - d0;
    let broker_cpu_ns = match (b0, b1) {
        (Some(a), Some(b)) => Some(b.cpu_ns.saturating_sub(a.cpu_ns)),
        _ => None,
    };
    let tool_cpu_ns = c1.saturating_sub(c0);
    let timeline = timeline.lock().map(|t| t.clone()).unwrap_or_default();
    let rss_max = rss_max.load(Ordering::Relaxed).max(b1.map_or(0, |u| u.rss));
    let mut notes = plan.notes;
    if broker_cpu_ns.is_none() {
        notes.push("broker CPU unknown: pass --broker-pid for an external broker".into());
    }
    let report = RunReport::new(
        scenario,
        broker,
        opts,
        crate::report::Counts {
            published,
            delivered,
            expected_delivered: expected,
            window_s: window,
            published_in_window: dp,
            delivered_in_window: dd,
        },
        latency,
        broker_cpu_ns,
        rss_max,
        tool_cpu_ns,
        subs,
        pubs,
        timeline,
        &hist,
        notes,
        was_interrupted,
    );
    Ok(report)
}
