//! `sluice-bench`: load benchmarks for AMQP 0-9-1 brokers.
//!
//! Owns: the command line (scenario and flags, with per-scenario defaults), starting
//! the embedded sluice when no `--url` is given, Ctrl-C handling, and writing the
//! summary, `--json` and `--report`.
//! Does not: touch broker internals; it drives any broker through sluice's client.
//!
//! `cargo run --release -p sluice-bench -- fanout --subscribers 16 --size 64`

mod broker;
mod report;
mod scenario;
mod stats;
mod svg;

use std::path::PathBuf;

use clap::Parser;

use broker::{BrokerUnderTest, Embedded};
use scenario::matrix::Policy;
use scenario::{AckMode, ConsumeMode, Opts};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// P publishers → topic exchange → S subscriber queues (one consumer each).
    Fanout,
    /// P publishers → one queue ← C consumers.
    Workq,
    /// fanout with K subscribers throttled to R msg/s.
    Slowsub,
    /// Publishers into a capacity-limited queue (producer flow control).
    Flow,
    /// Durable queue, persistent messages, publisher confirms.
    Persistent,
    /// Seed 000's test matrix: ack mode × consume mode × topic type.
    Matrix,
}

/// Load benchmarks for AMQP 0-9-1 brokers. With no --url an embedded sluice is
/// started on an ephemeral loopback port.
#[derive(Parser, Debug)]
#[command(name = "sluice-bench", version)]
struct Cli {
    /// What to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Broker to drive (amqp://user:pass@host:port/vhost); none = embedded sluice.
    #[arg(long)]
    url: Option<String>,
    /// PID of an external broker, to report its CPU per message and RSS.
    #[arg(long)]
    broker_pid: Option<u32>,
    /// Shards of the embedded sluice.
    #[arg(long, default_value_t = 2)]
    shards: usize,
    /// Cores to pin the embedded sluice's shards to (e.g. 0,1).
    #[arg(long)]
    pin_cores: Option<String>,
    /// How to run the embedded sluice.
    #[arg(long, value_enum, default_value_t = Embedded::Auto)]
    embedded: Embedded,
    /// The sluice binary for --embedded process (default: next to this tool).
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// Publisher connections.
    #[arg(long)]
    publishers: Option<usize>,
    /// Subscriber queues (fanout, slowsub, matrix).
    #[arg(long)]
    subscribers: Option<usize>,
    /// Consumers on the shared queue (workq, flow, persistent).
    #[arg(long)]
    consumers: Option<usize>,
    /// Message body size in bytes (at least 20: the stamp).
    #[arg(long)]
    size: Option<usize>,
    /// Messages per second per publisher; 0 = as fast as possible.
    #[arg(long)]
    rate: Option<u64>,
    /// Measured seconds (after warm-up).
    #[arg(long)]
    duration: Option<f64>,
    /// Warm-up seconds (not measured).
    #[arg(long)]
    warmup: Option<f64>,
    /// Consumer prefetch (manual-ack modes).
    #[arg(long)]
    prefetch: Option<u16>,
    /// Acknowledgement mode.
    #[arg(long, value_enum)]
    ack: Option<AckMode>,
    /// Consume mode (async consume or sync basic.get).
    #[arg(long, value_enum)]
    consume: Option<ConsumeMode>,
    /// Durable subscriber queues (fanout: durable named queues instead of exclusive).
    #[arg(long)]
    durable: bool,
    /// Persistent messages (delivery-mode 2).
    #[arg(long)]
    persistent: bool,
    /// Publisher confirms with this many in flight (0 = off).
    #[arg(long)]
    confirm: Option<usize>,
    /// Subscribers (or consumers) throttled to --slow-rate.
    #[arg(long)]
    slow: Option<usize>,
    /// Messages per second a throttled subscriber takes.
    #[arg(long)]
    slow_rate: Option<u32>,
    /// Routing key (and binding key) of the fanout scenarios.
    #[arg(long, default_value = "sluice.bench")]
    routing_key: String,
    /// Queue argument key=value for subscriber / shared queues (repeatable).
    #[arg(long = "queue-arg", value_parser = parse_kv)]
    queue_args: Vec<(String, String)>,
    /// Stop each publisher after this many messages (0 = only the clock stops it).
    #[arg(long, default_value_t = 0)]
    max_messages: u64,
    /// Seconds to wait for in-flight deliveries after publishing stops.
    #[arg(long, default_value_t = 5.0)]
    drain_timeout: f64,
    /// matrix: the slow-consumer policy the broker is configured with.
    #[arg(long, value_enum, default_value_t = Policy::Delete)]
    policy: Policy,
    /// matrix: the policy applies to durable subscriptions too.
    #[arg(long)]
    policy_durable: bool,
    /// Worker threads of the tool's runtime.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Write every figure as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HTML report with SVG plots here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No live line.
    #[arg(long)]
    quiet: bool,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected key=value")?;
    Ok((k.to_string(), v.to_string()))
}

fn opts_for(cli: &Cli) -> Opts {
    use Scenario::*;
    let s = cli.scenario;
    let (p, subs, cons, size, ack) = match s {
        Fanout | Slowsub => (1, 16, 1, 64, AckMode::NoAck),
        Workq => (4, 1, 4, 1024, AckMode::Client),
        Flow => (2, 1, 1, 1024, AckMode::Client),
        Persistent => (1, 1, 1, 1024, AckMode::Client),
        Matrix => (1, 3, 1, 64, AckMode::Client),
    };
    let mut queue_args = cli.queue_args.clone();
    if s == Flow && queue_args.is_empty() {
        queue_args = scenario::flow::default_args();
    }
    Opts {
        publishers: cli.publishers.unwrap_or(p),
        subscribers: cli.subscribers.unwrap_or(subs),
        consumers: cli.consumers.unwrap_or(cons),
        size: cli.size.unwrap_or(size),
        rate: cli.rate.unwrap_or(if s == Matrix { 2000 } else { 0 }),
        duration_s: cli.duration.unwrap_or(if s == Matrix { 2.0 } else { 10.0 }),
        warmup_s: cli.warmup.unwrap_or(if s == Matrix { 0.5 } else { 2.0 }),
        prefetch: cli.prefetch.unwrap_or(1000),
        ack: cli.ack.unwrap_or(ack),
        consume: cli.consume.unwrap_or(ConsumeMode::Async),
        durable: cli.durable,
        persistent: cli.persistent,
        confirm: cli.confirm.unwrap_or(if s == Persistent { 100 } else { 0 }),
        slow: cli.slow.unwrap_or(match s {
            Slowsub => 1,
            _ => 0,
        }),
        slow_rate: cli.slow_rate.unwrap_or(match s {
            Flow => 1000,
            _ => 100,
        }),
        routing_key: cli.routing_key.clone(),
        queue_args,
        max_messages: cli.max_messages,
        drain_timeout_s: cli.drain_timeout,
        quiet: cli.quiet,
    }
}

async fn run(
    cli: &Cli,
    broker: &BrokerUnderTest,
    opts: &Opts,
    intr: &tokio::sync::watch::Receiver<bool>,
) -> Result<report::RunReport, String> {
    use scenario::*;
    let is_sluice = cli.url.is_none();
    let name = format!("{:?}", cli.scenario).to_lowercase();
    match cli.scenario {
        Scenario::Fanout | Scenario::Slowsub => {
            declare_exchange(&broker.url, fanout::EXCHANGE, "topic", opts.durable)
                .await
                .map_err(|e| format!("declare exchange: {e}"))?;
            let prefix = opts.durable.then_some("sluice.bench.fanout.sub");
            let plan = fanout::plan(opts, fanout::EXCHANGE, opts.slow, prefix);
            execute(&name, broker, opts, plan, intr).await
        }
        Scenario::Workq => {
            let args = queue_arguments(&opts.queue_args);
            declare_queue(&broker.url, workq::QUEUE, opts.durable, args)
                .await
                .map_err(|e| format!("declare queue: {e}"))?;
            let r = execute(&name, broker, opts, workq::plan(opts, workq::QUEUE), intr).await;
            delete_queue(&broker.url, workq::QUEUE).await;
            r
        }
        Scenario::Flow => {
            let args = queue_arguments(&opts.queue_args);
            declare_queue(&broker.url, flow::QUEUE, false, args)
                .await
                .map_err(|e| format!("declare queue: {e}"))?;
            let r = execute(&name, broker, opts, flow::plan(opts), intr).await;
            delete_queue(&broker.url, flow::QUEUE).await;
            r
        }
        Scenario::Persistent => {
            let args = queue_arguments(&opts.queue_args);
            declare_queue(&broker.url, persistent::QUEUE, true, args)
                .await
                .map_err(|e| format!("declare queue: {e}"))?;
            let mut o = opts.clone();
            o.persistent = true;
            o.confirm = o.confirm.max(1);
            let r = execute(&name, broker, &o, persistent::plan(&o, is_sluice), intr).await;
            delete_queue(&broker.url, persistent::QUEUE).await;
            r
        }
        Scenario::Matrix => matrix::run(broker, opts, cli.policy, cli.policy_durable, intr).await,
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_BENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let opts = opts_for(&cli);
    let broker = match &cli.url {
        Some(url) => BrokerUnderTest::external(url.clone(), cli.broker_pid),
        None => match BrokerUnderTest::embedded(
            cli.shards,
            cli.pin_cores.as_deref(),
            cli.embedded,
            cli.broker_bin.as_ref(),
        ) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("sluice-bench: cannot start embedded sluice: {e}");
                return std::process::ExitCode::from(2);
            }
        },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.client_threads.max(1))
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
        "sluice-bench {:?} against {} ({})",
        cli.scenario, broker.label, broker.url
    );
    let result = rt.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: finishing up and printing the summary so far");
                let _ = tx.send(true);
            }
        });
        run(&cli, &broker, &opts, &rx).await
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    broker.stop();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice-bench: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    println!("{}", report.summary());
    if let Some(path) = &cli.json {
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
    if let Some(path) = &cli.report {
        if let Err(e) = std::fs::write(path, report.html()) {
            eprintln!("sluice-bench: cannot write {}: {e}", path.display());
            return std::process::ExitCode::from(1);
        }
    }
    std::process::ExitCode::SUCCESS
}
