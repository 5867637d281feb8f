//! Owns: a run's subscribers as a fleet — which client they connect with (the lean
//! [`wire`](super::wire) client or sluice's full client; `auto` takes the wire
//! client above 64 subscribers when it supports the run), connecting them with at
//! most `--setup-concurrency` set-ups in flight and timing that, running each one's
//! receive task, and stopping them all (each closes its connection) to collect their
//! outcomes in slot order.
//! Does not: publish, or decide when the run stops (the harness does).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::client::{AmqpUrl, Channel, Connection};
use tokio::sync::{oneshot, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::pacing::Pacer;
use super::subscriber::{prepare_sub, run_sub};
use super::wire::run::{run_wire_sub, WireSpec};
use super::wire::WireConn;
use super::{AckMode, ConsumeMode, QueueSetup, SubResult, SubSpec, SubscriberClient};
use crate::stats::Shared;

/// Subscribers above which `auto` takes the wire client.
pub const AUTO_WIRE_ABOVE: usize = 64;

/// Subscribers on the full client above which the tool warns of its own memory.
const FULL_CLIENT_WARN: usize = 1000;

/// How long one connection's set-up may take.
pub const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// Why the wire client cannot run subscriber `spec`, if it cannot.
pub fn wire_refuses(spec: &SubSpec) -> Option<&'static str> {
    match &spec.setup {
        QueueSetup::Shared(_) if spec.consume_args.is_empty() => {
            return Some("shared queues (workq, flow, persistent)")
        }
        QueueSetup::Shared(_) => {}
        QueueSetup::Bound {
            durable_name: Some(_),
            ..
        } => return Some("durable queues (--durable)"),
        QueueSetup::Bound { .. } => {}
    }
    if spec.slow_rate.is_some() {
        return Some("throttled subscribers (--slow, slowsub)");
    }
    if spec.consume != ConsumeMode::Async {
        return Some("basic.get (--consume sync)");
    }
    match spec.ack {
        AckMode::NoAck | AckMode::Client => None,
        _ => Some("--ack auto, dups-ok or transacted (it does no-ack and client)"),
    }
}

/// The client the run's subscribers use: `Wire` or `Full` (never `Auto`). `tls`: the
/// URL is amqps://, which the wire client does not speak.
pub fn choose(
    asked: SubscriberClient,
    subs: &[SubSpec],
    tls: bool,
) -> Result<SubscriberClient, String> {
    let refusal = if tls {
        Some("amqps:// (TLS)")
    } else {
        subs.iter().find_map(wire_refuses)
    };
    match (asked, refusal) {
        (SubscriberClient::Wire, Some(why)) => Err(format!(
            "--subscriber-client wire does not support {why}; use --subscriber-client full"
        )),
        (SubscriberClient::Auto, None) if subs.len() > AUTO_WIRE_ABOVE => {
            Ok(SubscriberClient::Wire)
        }
        (SubscriberClient::Auto, _) => Ok(SubscriberClient::Full),
        (c, _) => Ok(c),
    }
}

/// A subscriber connected and consuming, not yet receiving.
enum Ready {
    Full(Connection, Channel, String),
    Wire(WireConn, String),
}

async fn prepare(url: &str, parsed: &AmqpUrl, spec: &SubSpec, wire: bool) -> Result<Ready, String> {
    if !wire {
        let prepared = tokio::time::timeout(SETUP_LIMIT, prepare_sub(url, spec))
            .await
            .map_err(|_| format!("set-up took over {SETUP_LIMIT:?}"))?;
        let (conn, ch, queue) = prepared.map_err(|e| e.to_string())?;
        return Ok(Ready::Full(conn, ch, queue));
    }
    let name = format!("sluice-bench sub {}", spec.id);
    let mut conn = WireConn::open(parsed, &name, SETUP_LIMIT).await?;
    let no_ack = spec.ack == AckMode::NoAck;
    let subscribed = match &spec.setup {
        QueueSetup::Bound {
            exchange,
            key,
            arguments,
            ..
        } => {
            tokio::time::timeout(
                SETUP_LIMIT,
                conn.subscribe(exchange, key, arguments.clone(), no_ack, spec.prefetch),
            )
            .await
        }
        // A stream reader: its own consumer of the scenario's stream.
        QueueSetup::Shared(queue) => {
            let args = spec.consume_args.clone();
            tokio::time::timeout(
                SETUP_LIMIT,
                conn.consume(queue, args, no_ack, spec.prefetch),
            )
            .await
        }
    };
    let queue = subscribed.map_err(|_| format!("subscribe took over {SETUP_LIMIT:?}"))??;
    Ok(Ready::Wire(conn, queue))
}

/// The running subscribers.
pub struct Fleet {
    tasks: Vec<JoinHandle<SubResult>>,
    /// Dropping them stops the wire subscribers (the full ones watch
    /// `Shared::stop_consumers`).
    stops: Vec<oneshot::Sender<()>>,
    pub client: SubscriberClient,
    /// Seconds the set-up took.
    pub setup_s: f64,
    pub concurrency: usize,
}

impl Fleet {
    /// Connects every subscriber of `specs` (at most `concurrency` at once), then
    /// starts them all receiving. The first failure fails the run (connections
    /// already made are dropped).
    pub async fn start(
        urls: &[String],
        specs: Vec<SubSpec>,
        client: SubscriberClient,
        concurrency: usize,
        shared: &Arc<Shared>,
        pacer: &Arc<Pacer>,
        quiet: bool,
    ) -> Result<Fleet, String> {
        let parsed = urls
            .iter()
            .map(|u| {
                AmqpUrl::parse(u)
                    .map(Arc::new)
                    .map_err(|e| format!("{u}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if parsed.is_empty() {
            return Err("no subscriber URL".into());
        }
        let wire = client == SubscriberClient::Wire;
        if !wire && !quiet && specs.len() > FULL_CLIENT_WARN {
            eprintln!(
                "warning: {} subscribers on sluice's full client: about 750 KiB and a runtime \
                 task set each in this tool; the wire client (--subscriber-client wire) costs \
                 a few KiB",
                specs.len()
            );
        }
        let concurrency = concurrency.max(1);
        let permits = Arc::new(Semaphore::new(concurrency));
        let t0 = Instant::now();
        let n = specs.len();
        let mut set = JoinSet::new();
        for (slot, spec) in specs.into_iter().enumerate() {
            let which = slot % urls.len();
            let (url, parsed, permits) = (
                urls[which].clone(),
                Arc::clone(&parsed[which]),
                Arc::clone(&permits),
            );
            set.spawn(async move {
                let _permit = permits.acquire_owned().await;
                let r = prepare(&url, &parsed, &spec, wire).await;
                (slot, spec, r)
            });
        }
        let mut ready: Vec<Option<(SubSpec, Ready)>> = (0..n).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            let (slot, spec, r) = joined.map_err(|e| format!("subscriber set-up task: {e}"))?;
            match r {
                Ok(r) => ready[slot] = Some((spec, r)),
                Err(e) => {
                    set.abort_all();
                    return Err(format!("subscriber {} set-up: {e}", spec.id));
                }
            }
        }
        let setup_s = t0.elapsed().as_secs_f64();
        if !quiet && n > AUTO_WIRE_ABOVE {
            eprintln!(
                "{n} subscribers connected ({} client) in {setup_s:.2} s, at most {concurrency} at once",
                if wire { "wire" } else { "full" }
            );
        }
        let mut tasks = Vec::with_capacity(n);
        let mut stops = Vec::new();
        for (slot, r) in ready.into_iter().enumerate() {
            let Some((spec, r)) = r else {
                return Err(format!("subscriber {slot} was never set up"));
            };
            let pacing = pacer.subscriber(slot);
            let sh = Arc::clone(shared);
            tasks.push(match r {
                Ready::Full(conn, ch, queue) => {
                    tokio::spawn(run_sub(sh, pacing, spec, conn, ch, queue))
                }
                Ready::Wire(conn, queue) => {
                    let (tx, rx) = oneshot::channel();
                    stops.push(tx);
                    let ws = WireSpec {
                        slot,
                        no_ack: spec.ack == AckMode::NoAck,
                        publishers: spec.publishers,
                    };
                    tokio::spawn(
                        async move { run_wire_sub(&sh, pacing, ws, conn, queue, rx).await },
                    )
                }
            });
        }
        Ok(Fleet {
            tasks,
            stops,
            client,
            setup_s,
            concurrency,
        })
    }

    /// Stops every subscriber (the caller has set `stop_consumers`) and collects
    /// their outcomes once each has closed its connection.
    pub async fn stop(self) -> Vec<SubResult> {
        drop(self.stops);
        let mut subs = Vec::with_capacity(self.tasks.len());
        for t in self.tasks {
            subs.push(t.await.unwrap_or_default());
        }
        subs
    }

    pub fn client_name(&self) -> &'static str {
        match self.client {
            SubscriberClient::Wire => "wire",
            _ => "full",
        }
    }
}
