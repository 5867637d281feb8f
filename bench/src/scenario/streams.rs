//! Owns: the `streams` scenario: P publishers → one stream (`x-queue-type = stream`,
//! declared by the run under a fresh name, deleted after unless `--keep-queue`) ← S
//! readers, each its own consumer of the stream at `--offset` (default `next`) with a
//! prefetch and acks, as RabbitMQ requires of stream consumers; optionally the stream
//! filled first (`--prefill-bytes`, published with confirms as fast as the broker
//! confirms them: the publish-with-confirms figure), and with `--replay` one more
//! reader on its own connection that reads the prefill from `first`, pass after pass,
//! while the others read the tail: its rate is reported apart, and the readers' latency (the harness's)
//! is the tail's alone. Same publisher and reader machinery as `fanout`, so the two
//! compare at the same publish rate (fanout: one queue per subscriber bound to a topic).
//! Does not: assert anything, or know the stream's internals (any broker with
//! RabbitMQ's streams over AMQP 0-9-1).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice::client::{ConsumeOptions, QueueDeclareOptions};
use sluice::protocol::{FieldTable, FieldValue, LongStr};
use tokio::sync::watch;

use super::flags::{self, CommonArgs, ConsumerArgs, Defaults, LoadArgs};
use super::setup::connect_plain;
use super::{delete_queue, queue_arguments, Opts, Plan, PubSpec, QueueSetup, SubSpec};
use crate::broker::BrokerUnderTest;
use crate::opts::AckMode;
use crate::report::RunReport;

/// The flags of `streams`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub consumer: ConsumerArgs,
    /// Readers of the stream (each its own connection and consumer).
    #[arg(long)]
    pub subscribers: Option<usize>,
    /// Where the readers start (`x-stream-offset`: first, last, next, or a number).
    #[arg(long, default_value = "next")]
    pub offset: String,
    /// Bytes published into the stream (with confirms, 64 KiB messages unless --size
    /// is larger) before the readers attach; the rate is reported.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub prefill_bytes: u64,
    /// One more reader, on its own connection, reads the prefill from `first`, over
    /// and over, while the run goes on; its rate is reported apart.
    #[arg(long)]
    pub replay: bool,
    /// Leave the stream in the broker after the run.
    #[arg(long)]
    pub keep_queue: bool,
}

impl Args {
    /// The flags resolved with the scenario's defaults: 16 readers, 64-byte messages,
    /// manual acks (streams require them).
    pub fn opts(&self) -> Opts {
        let d = Defaults {
            subscribers: 16,
            size: 64,
            ack: AckMode::Client,
            ..Defaults::BASE
        };
        let mut o = flags::resolve(&self.common, &self.load, &self.consumer, &d);
        o.subscribers = self.subscribers.unwrap_or(d.subscribers);
        o
    }

    /// Flag combinations the parser cannot refuse on its own.
    pub fn check(&self) -> Result<(), String> {
        let o = self.opts();
        self.load.check(&o)?;
        if o.ack == AckMode::NoAck {
            return Err("streams: readers must acknowledge (--ack client)".into());
        }
        Ok(())
    }

    /// Declares the stream, fills it, runs the readers (and the replay), deletes it.
    pub async fn run(
        &self,
        broker: &BrokerUnderTest,
        intr: &watch::Receiver<bool>,
    ) -> Result<RunReport, String> {
        let opts = self.opts();
        let url = broker.url.as_str();
        let stream = format!("sluice.bench.stream.{}", std::process::id());
        declare_stream(url, &stream, &opts).await?;
        let mut notes = Vec::new();
        let prefilled = if self.prefill_bytes > 0 {
            let size = opts.size.max(64 * 1024);
            let (n, secs) = prefill(url, &stream, self.prefill_bytes, size).await?;
            notes.push(format!(
                "prefill: {n} messages of {size} B ({:.1} MiB) with confirms in {secs:.2} s: \
                 {:.0} msg/s, {:.1} MiB/s",
                (n * size as u64) as f64 / 1_048_576.0,
                n as f64 / secs,
                (n * size as u64) as f64 / 1_048_576.0 / secs
            ));
            n
        } else {
            0
        };
        let replay = (self.replay && prefilled > 0)
            .then(|| Replay::start(url.to_owned(), stream.clone(), prefilled, opts.prefetch));
        let offset = self.offset.clone();
        let r = super::harness::execute(
            "streams",
            broker,
            &opts,
            plan(&opts, &stream, &offset, notes),
            intr,
        )
        .await;
        let r = match (r, replay) {
            (Ok(mut report), Some(replay)) => {
                report.notes.push(replay.finish().await);
                Ok(report)
            }
            (r, _) => r,
        };
        if !self.keep_queue {
            delete_queue(url, &stream).await;
        }
        r
    }
}

/// The stream, with the run's queue arguments (e.g. `x-max-length-bytes`).
async fn declare_stream(url: &str, name: &str, opts: &Opts) -> Result<(), String> {
    let conn = connect_plain(url, "sluice-bench setup")
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let ch = conn.open_channel().await.map_err(|e| e.to_string())?;
    let mut arguments = queue_arguments(&opts.queue_args);
    arguments.insert("x-queue-type", FieldValue::LongStr(LongStr::from("stream")));
    ch.queue_declare(
        name,
        QueueDeclareOptions {
            durable: true,
            arguments,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| format!("declare stream {name}: {e}"))?;
    drop(ch);
    conn.close().await.map_err(|e| e.to_string())
}

/// Publishes `bytes` into the stream in `size`-byte messages with confirms (1,000 in
/// flight); returns how many and the seconds it took.
async fn prefill(url: &str, stream: &str, bytes: u64, size: usize) -> Result<(u64, f64), String> {
    let conn = connect_plain(url, "sluice-bench prefill")
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let ch = conn.open_channel().await.map_err(|e| e.to_string())?;
    ch.confirm_select().await.map_err(|e| e.to_string())?;
    let n = bytes.div_ceil(size as u64);
    let body = bytes::Bytes::from(vec![0x5a; size]);
    let props = sluice::client::encode_properties(&Default::default());
    let started = Instant::now();
    for i in 0..n {
        ch.basic_publish("", stream, false, props.clone(), body.clone())
            .await
            .map_err(|e| format!("prefill publish: {e}"))?;
        if i % 1000 == 999 && !ch.wait_for_confirms().await.map_err(|e| e.to_string())? {
            return Err("prefill: a publish was nacked".into());
        }
    }
    if !ch.wait_for_confirms().await.map_err(|e| e.to_string())? {
        return Err("prefill: a publish was nacked".into());
    }
    let secs = started.elapsed().as_secs_f64();
    drop(ch);
    let _ = conn.close().await;
    Ok((n, secs))
}

/// A reader of the prefill from `first`, on its own connection, over and over (a new
/// consumer from `first` each pass) until the run ends, so that it reads from disk
/// through the whole measured window.
struct Replay {
    task: tokio::task::JoinHandle<Result<(u64, u64, u64, f64), String>>,
    stop: Arc<AtomicBool>,
    read: Arc<AtomicU64>,
}

impl Replay {
    fn start(url: String, stream: String, target: u64, prefetch: u16) -> Replay {
        let read = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counter, stopped) = (Arc::clone(&read), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            let conn = connect_plain(&url, "sluice-bench replay")
                .await
                .map_err(|e| e.to_string())?;
            let ch = conn.open_channel().await.map_err(|e| e.to_string())?;
            ch.basic_qos(prefetch.max(2), false)
                .await
                .map_err(|e| e.to_string())?;
            let started = Instant::now();
            let (mut n, mut bytes, mut passes) = (0u64, 0u64, 0u64);
            'passes: while !stopped.load(Ordering::Relaxed) {
                let mut args = FieldTable::new();
                args.insert(
                    "x-stream-offset",
                    FieldValue::LongStr(LongStr::from("first")),
                );
                let mut consumer = ch
                    .basic_consume(
                        &stream,
                        ConsumeOptions {
                            arguments: args,
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                let tag = consumer.tag().to_string();
                for i in 1..=target {
                    if stopped.load(Ordering::Relaxed) {
                        break 'passes;
                    }
                    let Ok(d) = consumer.recv().await else {
                        break 'passes;
                    };
                    n += 1;
                    bytes += d.body.len() as u64;
                    counter.store(n, Ordering::Relaxed);
                    if i % u64::from(prefetch.max(2) / 2) == 0 || i == target {
                        ch.basic_ack(d.delivery_tag, true)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                }
                passes += 1;
                ch.basic_cancel(&tag).await.map_err(|e| e.to_string())?;
            }
            let secs = started.elapsed().as_secs_f64();
            drop(ch);
            let _ = conn.close().await;
            Ok((n, bytes, passes, secs))
        });
        Replay { task, stop, read }
    }

    /// Stops the replay and says what it read.
    async fn finish(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let read = self.read.load(Ordering::Relaxed);
        match tokio::time::timeout(std::time::Duration::from_secs(30), self.task).await {
            Ok(Ok(Ok((n, bytes, passes, secs)))) => format!(
                "replay from first, over and over through the run: {passes} whole passes, \
                 {n} messages ({:.1} MiB) in {secs:.2} s: {:.0} msg/s, {:.1} MiB/s",
                bytes as f64 / 1_048_576.0,
                n as f64 / secs,
                bytes as f64 / 1_048_576.0 / secs
            ),
            Ok(Ok(Err(e))) => format!("replay from first failed after {read} messages: {e}"),
            _ => format!("replay from first: {read} messages, then it did not stop"),
        }
    }
}

pub fn plan(opts: &Opts, stream: &str, offset: &str, notes: Vec<String>) -> Plan {
    let offset_value = match offset.parse::<i64>() {
        Ok(n) => FieldValue::I64(n),
        Err(_) => FieldValue::LongStr(LongStr::from(offset)),
    };
    let subs = (0..opts.subscribers)
        .map(|i| {
            let mut consume_args = FieldTable::new();
            consume_args.insert("x-stream-offset", offset_value.clone());
            SubSpec {
                id: i,
                setup: QueueSetup::Shared(stream.into()),
                consume_args,
                slow_rate: None,
                ack: opts.ack,
                consume: opts.consume,
                prefetch: opts.prefetch,
                publishers: opts.publishers,
            }
        })
        .collect();
    let pubs = (0..opts.publishers)
        .map(|i| PubSpec::new(opts, i, "", stream))
        .collect();
    Plan {
        subs,
        pubs,
        pacing: super::pacing::Reference::EachSubscriber,
        pacing_scale: 1,
        fanout_factor: opts.subscribers as u64,
        probe_queue: None,
        notes,
    }
}
