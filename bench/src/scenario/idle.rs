//! Owns: the `idle` scenario — what connections cost a broker when they do nothing:
//! broker RSS before; `--connections N` wire connections (sluice's full client for an
//! amqps:// URL) opened (handshake and one
//! channel, at most `--setup-concurrency` at once, timed); RSS once they are all
//! open and every second for `--duration` seconds; all closed (`connection.close`);
//! RSS again after `--settle` seconds. Reports RSS per connection and how much of it
//! came back. Its flags are [`Args`].
//! Does not: publish or consume.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::client::AmqpUrl;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::flags::{self, CommonArgs, Defaults};
use super::harness::wait;
use super::wire::parse::Parser;
use super::wire::WireConn;
use super::Opts;
use crate::broker::BrokerUnderTest;
use crate::opts::AckMode;
use crate::report::{Connections, RunReport};
use crate::stats::{fmt_bytes, Sample};

/// How long a close may take.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

/// One idle connection: the wire client's, or (amqps://, which the wire client does
/// not speak) sluice's full client with one channel open.
enum IdleConn {
    Wire(WireConn),
    Full(sluice::client::Connection, sluice::client::Channel),
}

/// Opens `n` connections, at most `concurrency` at once.
async fn open_all(url: &str, n: usize, concurrency: usize) -> Result<Vec<IdleConn>, String> {
    let parsed = Arc::new(AmqpUrl::parse(url).map_err(|e| e.to_string())?);
    if parsed.tls {
        return open_all_full(url, n, concurrency).await;
    }
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = JoinSet::new();
    for i in 0..n {
        let (parsed, permits) = (Arc::clone(&parsed), Arc::clone(&permits));
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let name = format!("sluice-bench idle {i}");
            WireConn::open(&parsed, &name, super::fleet::SETUP_LIMIT)
                .await
                .map(IdleConn::Wire)
                .map_err(|e| format!("idle connection {i}: {e}"))
        });
    }
    collect(set, n).await
}

/// Waits for every connection being opened; the first failure aborts the rest.
async fn collect(
    mut set: JoinSet<Result<IdleConn, String>>,
    n: usize,
) -> Result<Vec<IdleConn>, String> {
    let mut conns = Vec::with_capacity(n);
    while let Some(joined) = set.join_next().await {
        match joined.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(c) => conns.push(c),
            Err(e) => {
                set.abort_all();
                return Err(format!("{e} (after {} were open)", conns.len()));
            }
        }
    }
    Ok(conns)
}

/// As [`open_all`] with sluice's full client (amqps:// URLs).
async fn open_all_full(url: &str, n: usize, concurrency: usize) -> Result<Vec<IdleConn>, String> {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = JoinSet::new();
    for i in 0..n {
        let (url, permits) = (url.to_owned(), Arc::clone(&permits));
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let name = format!("sluice-bench idle {i}");
            let open = async {
                let conn = super::setup::connect_plain(&url, &name).await?;
                let ch = conn.open_channel().await?;
                Ok::<_, sluice::client::ClientError>(IdleConn::Full(conn, ch))
            };
            match tokio::time::timeout(super::fleet::SETUP_LIMIT, open).await {
                Ok(r) => r.map_err(|e| format!("idle connection {i}: {e}")),
                Err(_) => Err(format!("idle connection {i}: set-up timed out")),
            }
        });
    }
    collect(set, n).await
}

/// Closes every connection, at most `concurrency` at once.
async fn close_all(conns: Vec<IdleConn>, concurrency: usize) {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = JoinSet::new();
    for c in conns {
        let permits = Arc::clone(&permits);
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            match c {
                IdleConn::Wire(c) => {
                    let mut parser = Parser::new(c.frame_max as usize);
                    let mut carry = Vec::new();
                    c.close(&mut parser, &mut carry, CLOSE_LIMIT).await;
                }
                IdleConn::Full(conn, ch) => {
                    drop(ch);
                    let _ = tokio::time::timeout(CLOSE_LIMIT, conn.close()).await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
}

/// The flags of `idle`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Connections of the idle scenario.
    #[arg(long, value_name = "N", default_value_t = flags::CONNECTIONS)]
    pub connections: usize,
}

impl Args {
    /// The flags resolved with the scenario's defaults (the publisher and
    /// subscriber settings it has no use for keep theirs, for the report).
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            publishers: 0,
            subscribers: 0,
            consumers: 0,
            size: 64,
            ack: AckMode::NoAck,
            duration_s: 3.0,
            ..Defaults::BASE
        };
        let (load, consumer) = flags::unset_groups();
        let mut o = flags::resolve(&self.common, &load, &consumer, &d);
        o.connections = self.connections;
        o
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        if self.connections == 0 {
            return Err("idle needs --connections N > 0".into());
        }
        Ok(())
    }

    pub async fn run(
        &self,
        broker: &BrokerUnderTest,
        interrupted: &watch::Receiver<bool>,
    ) -> Result<RunReport, String> {
        hold_idle(broker, &self.opts(), interrupted).await
    }
}

/// Opens `opts.connections` connections, holds them for the run's duration, closes
/// them, and reports what they cost the broker.
async fn hold_idle(
    broker: &BrokerUnderTest,
    opts: &Opts,
    interrupted: &watch::Receiver<bool>,
) -> Result<RunReport, String> {
    let rss_now = || broker.usage().map(|u| u.rss).filter(|&r| r > 0);
    let n = opts.connections;
    let baseline = rss_now();
    let t0 = Instant::now();
    let conns = open_all(&broker.url, n, opts.setup_concurrency).await?;
    let setup_s = t0.elapsed().as_secs_f64();
    if !opts.quiet {
        eprintln!(
            "{n} idle connections open in {setup_s:.2} s; broker RSS {} (before: {})",
            fmt_bytes(rss_now().unwrap_or(0)),
            fmt_bytes(baseline.unwrap_or(0))
        );
    }
    let tool_rss = crate::broker::process_usage(std::process::id()).map_or(0, |u| u.rss);
    let mut timeline = Vec::new();
    let mut start = None;
    let mut peak = 0u64;
    let held = Instant::now();
    let mut was_interrupted = false;
    while !was_interrupted {
        was_interrupted = wait(1.0, interrupted).await;
        let rss = rss_now().unwrap_or(0);
        start = start.or(Some(rss).filter(|&r| r > 0));
        peak = peak.max(rss);
        timeline.push(Sample {
            t: t0.elapsed().as_secs_f64(),
            broker_rss: rss,
            ..Default::default()
        });
        if held.elapsed().as_secs_f64() >= opts.duration_s {
            break;
        }
    }
    close_all(conns, opts.setup_concurrency).await;
    let after = if opts.settle_s > 0.0 && !was_interrupted {
        let _ = wait(opts.settle_s, interrupted).await;
        rss_now()
    } else {
        None
    };
    let mut c = Connections {
        connections: n,
        subscriber_client: if broker.url.starts_with("amqps://") {
            "full".into()
        } else {
            "wire".into()
        },
        setup_concurrency: opts.setup_concurrency.max(1),
        setup_s,
        broker_rss_baseline_bytes: baseline,
        broker_rss_start_bytes: start,
        broker_rss_peak_bytes: Some(peak).filter(|&p| p > 0),
        broker_rss_after_disconnect_bytes: after,
        broker_rss_highest_ever_bytes: broker.peak_rss(),
        settle_s: if after.is_some() { opts.settle_s } else { 0.0 },
        tool_rss_bytes: tool_rss,
        ..Default::default()
    };
    c.derive(n);
    // Idle: what an open connection costs is the RSS with all open, not a peak.
    c.broker_rss_per_connection_bytes = match (baseline, start) {
        (Some(b), Some(s)) => Some(s.saturating_sub(b) as f64 / n.max(1) as f64),
        _ => None,
    };
    let mut notes = vec![format!(
        "{n} connections each logged in and opened one channel; nothing else"
    )];
    if matches!(broker.kind, crate::broker::BrokerKind::InProcess(_)) {
        notes.push("broker RSS is the whole process, tool included (in-process broker)".into());
    }
    Ok(RunReport::idle(
        broker,
        opts,
        c,
        timeline,
        notes,
        was_interrupted,
    ))
}
