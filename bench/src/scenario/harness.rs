//! Owns: running one [`Plan`] — subscribers connected and bound (by the [`Fleet`],
//! with bounded concurrency) before any publisher starts, the run's [`Pacer`]
//! (closed loop for `--rate 0` unless `--open-loop`), warm-up, the measured window
//! (both cut short once every publisher is done, e.g. at `--max-messages`), the
//! confirms acked in it and their latency, the per-second [`Sampler`], stopping the
//! publishers, draining in-flight deliveries, disconnecting everyone, broker RSS
//! before the subscribers connect, after the set-up and `--settle` seconds after the
//! last disconnect — and gathering it all into a [`RunReport`].
//! Does not: build plans (the scenarios do) or format results (`report`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::client::ClientError;
use tokio::sync::watch;

use super::fleet::{self, Fleet};
use super::pacing::Pacer;
use super::publisher::{prepare_pub, run_pub};
use super::sampler::{QueueProbe, Sampler};
use super::{Opts, Plan, SubResult};
use crate::broker::BrokerUnderTest;
use crate::report::{Connections, Counts, GroupReport, Latency, PacingData, RunData, RunReport};
use crate::stats::{Group, Shared};

/// Sleeps `secs`, or less if the run is interrupted; `true` when interrupted.
pub async fn wait(secs: f64, intr: &watch::Receiver<bool>) -> bool {
    let mut intr = intr.clone();
    if *intr.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))) => false,
        _ = intr.changed() => true,
    }
}

/// Sleeps `secs` like [`wait`], but returns as soon as every task of `publishers`
/// (if there are any) has ended; `true` when interrupted.
async fn wait_while_publishing<T>(
    secs: f64,
    intr: &watch::Receiver<bool>,
    publishers: &[tokio::task::JoinHandle<T>],
) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    loop {
        if !publishers.is_empty() && publishers.iter().all(|t| t.is_finished()) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if wait(left.as_secs_f64().min(0.05), intr).await {
            return true;
        }
    }
}

/// Deliveries of one group at the start and end of the measured window.
struct Window {
    fast: (u64, u64),
    slow: (u64, u64),
}

fn group_report(
    subs: &[SubResult],
    slow: bool,
    g: &Group,
    (d0, d1): (u64, u64),
    window_s: f64,
    fixed_rate: bool,
) -> GroupReport {
    let members = subs.iter().filter(|s| s.slow == slow).count();
    let in_window = d1.saturating_sub(d0);
    let rate = in_window as f64 / window_s.max(1e-9);
    GroupReport {
        subscribers: members,
        delivered: subs
            .iter()
            .filter(|s| s.slow == slow)
            .map(|s| s.delivered)
            .sum(),
        delivered_in_window: in_window,
        deliver_rate: rate,
        deliver_rate_per_subscriber: rate / members.max(1) as f64,
        latency: Latency::from_hist(&g.total(), fixed_rate),
    }
}

/// Runs a plan: connect everyone, publish through warm-up and the measured window
/// with a sample each second, drain, and report.
pub async fn execute(
    scenario: &str,
    broker: &BrokerUnderTest,
    opts: &Opts,
    plan: Plan,
    interrupted: &watch::Receiver<bool>,
) -> Result<RunReport, String> {
    let url = broker.url.clone();
    let shared = Shared::new();
    let throttled: Vec<bool> = plan.subs.iter().map(|s| s.slow_rate.is_some()).collect();
    let max_ahead = if opts.rate > 0 { 0 } else { opts.max_ahead };
    let pacer = Pacer::new(max_ahead, plan.pacing, &throttled, plan.pacing_scale);
    let e = |what: &str, err: ClientError| format!("{what}: {err}");
    let tls = url.starts_with("amqps://");
    let client = fleet::choose(opts.subscriber_client, &plan.subs, tls)?;
    let n_subs = plan.subs.len();
    let n_pubs = plan.pubs.len();
    let n_confirming = plan.pubs.iter().filter(|p| p.confirm > 0).count();
    let rss_now = || broker.usage().map(|u| u.rss).filter(|&r| r > 0);
    let rss_baseline = rss_now();
    // Subscribers first, so no message is published before every queue is bound.
    let concurrency = opts.setup_concurrency;
    let sub_urls = if opts.subscriber_urls.is_empty() {
        vec![url.clone()]
    } else {
        opts.subscriber_urls.clone()
    };
    let fleet = Fleet::start(
        &sub_urls,
        plan.subs,
        client,
        concurrency,
        &shared,
        &pacer,
        opts.quiet,
    )
    .await?;
    if opts.publish_delay_s > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(opts.publish_delay_s)).await;
    }
    let rss_start = rss_now();
    let tool_rss = crate::broker::process_usage(std::process::id()).map_or(0, |u| u.rss);
    let mut pub_ready = Vec::new();
    for spec in plan.pubs {
        let (conn, ch) = prepare_pub(&url, &spec)
            .await
            .map_err(|x| e("publisher setup", x))?;
        pub_ready.push((spec, conn, ch));
    }
    let codes0 = broker.log_codes();
    let t_start = Instant::now();
    shared.started_ns.store(shared.now_ns(), Ordering::Relaxed);
    let mut pub_tasks = Vec::new();
    for (spec, conn, ch) in pub_ready {
        pub_tasks.push(tokio::spawn(run_pub(
            Arc::clone(&shared),
            pacer.publisher(),
            spec,
            conn,
            ch,
        )));
    }
    let probe = plan
        .probe_queue
        .as_deref()
        .map(|q| QueueProbe::new(&url, q));
    let sampler = Sampler::start(Arc::clone(&shared), broker, t_start, probe, opts.quiet);

    let mut was_interrupted = wait_while_publishing(opts.warmup_s, interrupted, &pub_tasks).await;
    let p0 = shared.published.load(Ordering::Relaxed);
    let k0 = shared.confirms.delivered();
    let (f0, s0) = (shared.fast.delivered(), shared.slow.delivered());
    let b0 = broker.usage();
    let c0 = broker.tool_cpu_ns();
    let w0 = Instant::now();
    let window_start_s = t_start.elapsed().as_secs_f64();
    shared.measuring.store(true, Ordering::Relaxed);
    if !was_interrupted {
        was_interrupted = wait_while_publishing(opts.duration_s, interrupted, &pub_tasks).await;
    }
    shared.measuring.store(false, Ordering::Relaxed);
    let window = w0.elapsed().as_secs_f64();
    let window_end_s = t_start.elapsed().as_secs_f64();
    let p1 = shared.published.load(Ordering::Relaxed);
    let k1 = shared.confirms.delivered();
    let (f1, s1) = (shared.fast.delivered(), shared.slow.delivered());
    let b1 = broker.usage();
    let c1 = broker.tool_cpu_ns();
    let w = Window {
        fast: (f0, f1),
        slow: (s0, s1),
    };
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
    let mut last_d = shared.delivered();
    let mut still_since = Instant::now();
    while drain_start.elapsed().as_secs_f64() < opts.drain_timeout_s {
        let d = shared.delivered();
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
    let run_s = t_start.elapsed().as_secs_f64();
    shared.stop_consumers.store(true, Ordering::Relaxed);
    let client_name = fleet.client_name();
    let (setup_s, concurrency) = (fleet.setup_s, fleet.concurrency);
    let subs = fleet.stop().await;
    let timeline = sampler.finish();
    let rss_peak = timeline
        .iter()
        .map(|s| s.broker_rss)
        .chain(rss_start)
        .chain(b1.map(|u| u.rss))
        .max()
        .filter(|&r| r > 0);
    let rss_after = if opts.settle_s > 0.0 && !was_interrupted {
        let _ = wait(opts.settle_s, interrupted).await;
        rss_now()
    } else {
        None
    };
    let mut connections = Connections {
        connections: n_subs + n_pubs,
        subscriber_connections: n_subs,
        subscriber_client: client_name.into(),
        setup_concurrency: concurrency,
        setup_s,
        broker_rss_baseline_bytes: rss_baseline,
        broker_rss_start_bytes: rss_start,
        broker_rss_peak_bytes: rss_peak,
        broker_rss_after_disconnect_bytes: rss_after,
        broker_rss_highest_ever_bytes: broker.peak_rss(),
        settle_s: if rss_after.is_some() {
            opts.settle_s
        } else {
            0.0
        },
        tool_rss_bytes: tool_rss,
        ..Default::default()
    };
    connections.derive(if n_subs > 0 { n_subs } else { n_subs + n_pubs });
    let delivered: u64 = subs.iter().map(|s| s.delivered).sum();
    let fixed_rate = opts.rate > 0;
    let fast = group_report(&subs, false, &shared.fast, w.fast, window, fixed_rate);
    let slow = group_report(&subs, true, &shared.slow, w.slow, window, fixed_rate);
    let confirm_latency =
        (n_confirming > 0).then(|| Latency::from_hist(&shared.confirms.total(), fixed_rate));
    let mut hist = shared.fast.total();
    hist.add(shared.slow.total())
        .map_err(|x| format!("merging latency histograms: {x}"))?;
    let broker_cpu_ns = match (b0, b1) {
        (Some(a), Some(b)) => Some(b.cpu_ns.saturating_sub(a.cpu_ns)),
        _ => None,
    };
    let rss_max = timeline
        .iter()
        .map(|s| s.broker_rss)
        .max()
        .unwrap_or(0)
        .max(b1.map_or(0, |u| u.rss));
    let mut notes = plan.notes;
    if let (true, Some(why)) = (max_ahead > 0, &opts.max_ahead_why) {
        notes.push(why.clone());
    }
    if matches!(broker.kind, crate::broker::BrokerKind::InProcess(_)) {
        notes.push("broker RSS is the whole process, tool included (in-process broker)".into());
    }
    if broker_cpu_ns.is_none() {
        notes.push("broker CPU unknown: pass --broker-pid for an external broker".into());
    }
    let mut broker_log_codes = broker.log_codes();
    for (code, n) in &codes0 {
        if let Some(m) = broker_log_codes.get_mut(code) {
            *m = m.saturating_sub(*n);
        }
    }
    broker_log_codes.retain(|_, n| *n > 0);
    let (written_off, stalls) = pacer.written_off();
    Ok(RunReport::new(
        scenario,
        broker,
        opts,
        RunData {
            counts: Counts {
                published,
                delivered,
                expected_delivered: expected,
                window_s: window,
                window_start_s,
                window_end_s,
                published_in_window: p1 - p0,
                delivered_in_window: (f1 + s1) - (f0 + s0),
                confirmed_in_window: k1 - k0,
                run_s,
            },
            latency: Latency::from_hist(&hist, fixed_rate),
            confirm_latency,
            hist,
            fast,
            slow,
            broker_cpu_ns,
            rss_max,
            tool_cpu_ns: c1.saturating_sub(c0),
            subscribers: subs,
            publishers: pubs,
            timeline,
            broker_log_codes,
            pacing: PacingData {
                written_off,
                stalls,
            },
            connections,
            notes,
            interrupted: was_interrupted,
        },
    ))
}
