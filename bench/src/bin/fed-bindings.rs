//! `fed-bindings`: how long a relay's bindings take to reach its federation upstream.
//!
//! Binds `--count` distinct routing keys from a queue on the relay (`--relay`) to the
//! federated exchange, then publishes on the root (`--root`) with the last key until
//! that message arrives at the relay: a link propagates bindings in order on one
//! channel, so the last key routing means every earlier one does. Prints the time from
//! the first local bind to that delivery, and the same for unbinding all but one key
//! (the last key's message then still arrives; an unbound key's no longer does).
//! Measures; asserts nothing.

use std::time::{Duration, Instant};

use clap::Parser;
use sluice::client::{Connection, ConsumeOptions, QueueDeclareOptions, NO_PROPERTIES};
use sluice::protocol::FieldTable;

#[derive(Parser, Debug)]
#[command(
    name = "fed-bindings",
    about = "Time binding propagation over a federation link"
)]
struct Args {
    /// The upstream (root) broker.
    #[arg(long)]
    root: String,
    /// The downstream (relay) broker, which federates --exchange from --root.
    #[arg(long)]
    relay: String,
    /// The federated exchange (a topic exchange on both).
    #[arg(long, default_value = "amq.topic")]
    exchange: String,
    /// Distinct binding keys.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

async fn wait_for(
    root: &sluice::client::Channel,
    consumer: &mut sluice::client::Consumer,
    exchange: &str,
    key: &str,
    limit: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        if start.elapsed() > limit {
            return Err(format!("no delivery for {key} within {limit:?}"));
        }
        root.basic_publish(
            exchange,
            key,
            false,
            NO_PROPERTIES,
            key.as_bytes().to_vec().into(),
        )
        .await
        .map_err(|e| e.to_string())?;
        match tokio::time::timeout(Duration::from_millis(20), consumer.recv()).await {
            Ok(Ok(d)) if d.routing_key.as_bytes() == key.as_bytes() => return Ok(start.elapsed()),
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => return Err(e.to_string()),
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let e = |x: sluice::client::ClientError| x.to_string();
    let relay = Connection::connect(&args.relay).await.map_err(e)?;
    let root = Connection::connect(&args.root).await.map_err(e)?;
    let sub = relay.open_channel().await.map_err(e)?;
    let q = sub
        .queue_declare("", QueueDeclareOptions::default())
        .await
        .map_err(e)?;
    let queue = q.name.to_string();
    let mut consumer = sub
        .basic_consume(
            &queue,
            ConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
        )
        .await
        .map_err(e)?;
    let publisher = root.open_channel().await.map_err(e)?;
    let keys: Vec<String> = (0..args.count).map(|i| format!("fedbench.{i}")).collect();
    let limit = Duration::from_secs(args.timeout);
    // Local binds, pipelined over a few channels (the relay's own speed is not the
    // point; the clock runs from the first bind).
    let start = Instant::now();
    let chans: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..8 {
            v.push(relay.open_channel().await.map_err(e)?);
        }
        v
    };
    on_all(&chans, &queue, &args.exchange, &keys, true)
        .await
        .map_err(e)?;
    let local = start.elapsed();
    let last = keys.last().cloned().unwrap_or_default();
    wait_for(&publisher, &mut consumer, &args.exchange, &last, limit).await?;
    let total = start.elapsed();
    println!(
        "bind {} keys: local binds done in {:.3} s, routed from the root after {:.3} s",
        args.count,
        local.as_secs_f64(),
        total.as_secs_f64()
    );
    // Unbind all but the last; then an unbound key must stop crossing.
    let start = Instant::now();
    let all_but_last = &keys[..keys.len().saturating_sub(1)];
    on_all(&chans, &queue, &args.exchange, all_but_last, false)
        .await
        .map_err(e)?;
    // The link keeps each binding's changes in order on one channel, and the upstream
    // applies its connections' changes in the order they arrive: once a key bound after
    // the unbinds routes from the root, the unbinds before it are (almost always) in
    // force there too; the check of an unbound key below says whether they were.
    let fence = "fedbench.fence";
    sub.queue_bind(&queue, &args.exchange, fence, FieldTable::new())
        .await
        .map_err(e)?;
    wait_for(&publisher, &mut consumer, &args.exchange, fence, limit).await?;
    println!(
        "unbind {} keys: propagated within {:.3} s",
        args.count.saturating_sub(1),
        start.elapsed().as_secs_f64()
    );
    let unbound = keys.first().cloned().unwrap_or_default();
    publisher
        .basic_publish(
            args.exchange.as_str(),
            unbound.as_str(),
            false,
            NO_PROPERTIES,
            "late".into(),
        )
        .await
        .map_err(e)?;
    let mut leaked = 0;
    while let Ok(Ok(d)) = tokio::time::timeout(Duration::from_millis(300), consumer.recv()).await {
        if d.routing_key.as_bytes() == unbound.as_bytes() {
            leaked += 1;
        }
    }
    println!("a message on an unbound key crossed the link: {leaked} times (0 expected)");
    Ok(())
}

/// Binds (or unbinds) `keys` from `exchange` to `queue`, the keys split over `chans`,
/// each channel's share in order.
async fn on_all(
    chans: &[sluice::client::Channel],
    queue: &str,
    exchange: &str,
    keys: &[String],
    bind: bool,
) -> Result<(), sluice::client::ClientError> {
    let share = keys.len().div_ceil(chans.len().max(1)).max(1);
    let work = keys.chunks(share).zip(chans).map(|(chunk, ch)| async move {
        for k in chunk {
            if bind {
                ch.queue_bind(queue, exchange, k, FieldTable::new()).await?;
            } else {
                ch.queue_unbind(queue, exchange, k, FieldTable::new())
                    .await?;
            }
        }
        Ok::<(), sluice::client::ClientError>(())
    });
    for r in join_all(work).await {
        r?;
    }
    Ok(())
}

/// Polls every future to completion (a handful; no extra dependency).
async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut handles: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = handles.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, h) in handles.iter_mut().enumerate() {
            if out[i].is_none() {
                match h.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fed-bindings: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fed-bindings: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
