//! `sluice-bench`: load benchmarks for AMQP 0-9-1 brokers.
//!
//! Owns: parsing the command line (one subcommand per scenario, `cli.rs`) and
//! dispatching to the scenario it names, which sets itself up from its own flags
//! (`scenario::*::Args`); starting the embedded sluice when no `--url` is given,
//! Ctrl-C handling, raising the open-file limit for runs with thousands of
//! connections, stopping the broker (an external one only with `--stop-broker`) and
//! adding its store counters from its log to the report, and writing the summary,
//! `--json` and `--report`.
//! Does not: touch broker internals; it drives any broker through sluice's client
//! or its own lean wire client (thousands of subscribers).
//!
//! ```text
//! cargo run --release -p sluice-bench -- fanout --subscribers 16 --size 64
//! sluice-bench slowsub --subscribers 16 --size 64 --slow 1 --slow-rate 100 \
//!     --policy delete --max-count 10000 --duration 60 --json slowsub-delete.json
//! sluice-bench flow --duration 60 --json flow.json          # issue 7's capacity run
//! sluice-bench fanout --embedded process --open-loop \
//!     --broker-arg=--memory-high-watermark=268435456 --duration 60
//! sluice-bench fanout --embedded process --subscribers 10000 --rate 100  # wire client
//! sluice-bench fanout --embedded process --subscribers 10000 --topics 100
//! sluice-bench idle --embedded process --connections 10000
//! sluice-bench persistent --embedded process --size 1024 --confirm 1000 --consumers 1
//! sluice-bench persistent --url amqp://guest:guest@127.0.0.1:5672/ --broker-pid PID \
//!     --broker-log sluice.log --stop-broker          # fsyncs/s from its MST-1003 lines
//! sluice-bench persistent --url … --consumers 0 --max-messages 1000000 --warmup 0 \
//!     --duration 3600 --keep-queue                   # fill a store for a recovery test
//! ```
//!
//! With `--confirm N` each publisher keeps at most N confirms in flight and every
//! message's confirm latency (publish → its `basic.ack`) is timed on its own; the
//! summary gives confirmed msgs/s and that latency apart from delivery latency, and
//! for sluice the store's fsyncs per second (from the `MST-1003` lines each shard
//! logs at shutdown: an embedded process's output, or an external broker's
//! `--broker-log`), `n/a` for brokers whose log says nothing of it.
//!
//! A `--rate 0` run is closed loop unless `--open-loop`: each publisher stays at
//! most `--max-backlog` K (alias `--max-ahead`; 10,000, or half a smaller
//! `--max-count` of the run's queues) messages per subscriber ahead of the slowest
//! subscriber that is not throttled (or of all consumers of a shared queue), so its
//! rate is what the subscribers take; the summary's `pacing` line and the JSON say
//! which, and how long the publishers waited. `flow` is open loop by default (its
//! queue is meant to overfill).
//!
//! Every `--json` has the per-second `timeline` (published/s, delivered/s — all, fast
//! and slow subscribers —, p99, broker RSS, and for runs on one shared queue its
//! depth), the fast and slow subscribers' figures apart (`fast`, `slow`), each
//! subscriber's close code and text, gaps and p99, the spread of those across
//! subscribers (`spread`), connections, set-up time and broker RSS before, after the
//! set-up, at its peak and after disconnect (`connections`), each publisher's time
//! held by flow control and the flow signals it saw, and its time waiting for
//! subscribers (`pacing_wait_ms`).

mod broker;
mod cli;
mod html;
mod opts;
mod report;
mod scenario;
mod stats;
mod svg;

use clap::Parser;

use broker::BrokerUnderTest;
use cli::{Cli, Command};
use scenario::fanout::Kind;
use scenario::Opts;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs the scenario `command` names, with its own set-up.
async fn run(
    command: &Command,
    broker: &BrokerUnderTest,
    intr: &tokio::sync::watch::Receiver<bool>,
) -> Result<report::RunReport, String> {
    match command {
        Command::Fanout(a) => a.run(Kind::Fanout, broker, intr).await,
        Command::Slowsub(a) => a.run(Kind::Slowsub, broker, intr).await,
        Command::Workq(a) => a.run(broker, intr).await,
        Command::Flow(a) => a.run(broker, intr).await,
        Command::Persistent(a) => a.run(broker, intr).await,
        Command::Matrix(a) => a.run(broker, intr).await,
        Command::Idle(a) => a.run(broker, intr).await,
        Command::Streams(a) => a.run(broker, intr).await,
    }
}

/// Raises the soft open-file limit to the hard one: a run with 10,000 subscribers
/// holds 10,000 sockets here (and as many in an in-process broker; an embedded
/// broker process inherits the raised limit). Returns (soft, hard) after.
fn raise_open_file_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a live struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return (0, 0);
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// Descriptors a run needs: its connections (an in-process broker's too), plus slack.
fn descriptors_needed(opts: &Opts, command: &Command, in_process: bool) -> u64 {
    let conns = match command {
        Command::Idle(_) => opts.connections,
        _ => opts.subscribers + opts.publishers + opts.consumers,
    } as u64;
    conns * if in_process { 2 } else { 1 } + 64
}

fn main() -> std::process::ExitCode {
    let command = Cli::parse().command;
    let common = command.common();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_BENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .fmt_fields(sluice::ops::log::TextFields)
        .init();
    let (soft, hard) = raise_open_file_limit();
    if let Err(e) = command.check() {
        eprintln!("sluice-bench: {e}");
        return std::process::ExitCode::from(2);
    }
    if let Some(ca) = &common.tls_ca {
        match sluice::client::TlsOptions::from_ca_file(ca) {
            Ok(tls) => scenario::setup::use_tls(tls),
            Err(e) => {
                eprintln!("sluice-bench: --tls-ca: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let opts = command.opts();
    let in_process = common.url.is_none() && common.embedded == broker::Embedded::Inproc;
    let needed = descriptors_needed(&opts, &command, in_process);
    if needed > soft {
        eprintln!(
            "sluice-bench: warning: open-file limit {soft} (hard {hard}) is below the \
             ~{needed} descriptors this run needs"
        );
    }
    if common.url.is_some() && !common.broker_args.is_empty() {
        eprintln!(
            "sluice-bench: --broker-arg is for the embedded sluice; it has no effect with --url"
        );
    }
    let broker = match &common.url {
        Some(url) => BrokerUnderTest::external(
            url.clone(),
            common.broker_pid,
            common.broker_log.clone(),
            common.stop_broker,
        ),
        None => match BrokerUnderTest::embedded(
            common.shards,
            common.pin_cores.as_deref(),
            common.embedded,
            common.broker_bin.as_ref(),
            &common.broker_args,
            common.broker_log.as_deref(),
        ) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("sluice-bench: cannot start embedded sluice: {e}");
                return std::process::ExitCode::from(2);
            }
        },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(common.client_threads.max(1))
        .thread_name("bench-client")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice-bench: cannot start runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    eprintln!(
        "sluice-bench {} against {} ({})",
        command.title(),
        broker.label,
        broker.url
    );
    let result = rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: finishing up and printing the summary so far");
                let _ = tx.send(true);
            }
        });
        run(&command, &broker, &rx).await
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    let stopped = broker.stop();
    let mut report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice-bench: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    report.attach_store(stopped.store, &stopped.source);
    println!("{}", report.summary());
    if let Some(path) = &common.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                if let Err(e) = std::fs::write(path, s) {
                    eprintln!("sluice-bench: cannot write {}: {e}", path.display());
                    return std::process::ExitCode::from(1);
                }
            }
            Err(e) => eprintln!("sluice-bench: JSON: {e}"),
        }
    }
    if let Some(path) = &common.report {
        if let Err(e) = std::fs::write(path, report.html()) {
            eprintln!("sluice-bench: cannot write {}: {e}", path.display());
            return std::process::ExitCode::from(1);
        }
    }
    std::process::ExitCode::SUCCESS
}
