//! SIGTERM under load (issue 18, item 7): every open connection — confirming publishers
//! at full speed, publishers held by flow control (not read), acking consumers — gets
//! `connection.close 320 CONNECTION_FORCED - broker forced connection closure with
//! reason 'shutdown'` before its socket closes; the broker logs BRK-1003 and exits 0;
//! and, after a restart on the same data dir, no confirmed persistent message is lost.
//!
//! The clients are raw-frame ones (`RawConn`), each with a reader thread that records
//! how the connection ended and a writer thread that publishes as fast as the socket
//! takes it (and answers the close with close-ok).

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::raw::Ending;
use common::wire::{self, m, Dec, Enc, Props, Table, Val};
use common::{Broker, RawConn, TestDir};

/// The close every connection must get at shutdown (the README's words).
const SHUTDOWN_TEXT: &str =
    "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'";

/// A durable queue for the confirming publishers and the consumers.
const WORK: &str = "shutdown.work";
/// A transient queue for the publishers without confirms (nothing consumes it).
const FAST: &str = "shutdown.fast";
/// A queue whose tiny capacity stops (and, past the grace, holds) its publishers.
const TINY: &str = "shutdown.tiny";
/// Unconfirmed publishes a confirming publisher keeps in flight.
const WINDOW: u64 = 500;

/// Flow grace small enough that a publisher ignoring channel.flow is held at once.
const CONFIG: &str = "[flow]\ngrace_bytes = 4096\n";

/// What one client thread saw.
struct Outcome {
    role: &'static str,
    ending: Option<Ending>,
    /// Whether the socket was closed by the broker after the close (EOF seen).
    eof_after: bool,
}

/// Shared between a connection's reader and writer threads.
#[derive(Default)]
struct Shared {
    /// connection.close seen: the writer stops publishing and sends close-ok.
    closing: AtomicBool,
    /// Highest delivery tag confirmed (basic.ack, multiple or not).
    confirmed: AtomicU64,
    /// Deliveries acknowledged by a consumer.
    acked: AtomicU64,
    /// A write (a publish, or the close-ok) failed: a client doing its reads and writes
    /// on one thread would have seen the connection reset, not the close.
    write_failed: AtomicBool,
}

fn open(broker: &Broker) -> RawConn {
    let mut c = broker.raw();
    c.channel_open(1);
    c
}

fn declare(c: &mut RawConn, name: &str, durable: bool, args: &Table) {
    let enc = Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, durable, false, false, false])
        .table(args)
        .done();
    c.send_method(1, m::QUEUE_DECLARE, &enc)
        .expect("send queue.declare");
    c.expect_method(1, m::QUEUE_DECLARE_OK);
}

fn message_count(c: &mut RawConn, name: &str) -> u32 {
    let enc = Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[true, true, false, false, false])
        .table(&vec![])
        .done();
    c.send_method(1, m::QUEUE_DECLARE, &enc)
        .expect("send queue.declare");
    let ok = c.expect_method(1, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    d.shortstr();
    d.long()
}

/// Reads until connection.close (recording it, telling the writer) and then until the
/// socket closes; acks deliveries if `acks`; counts confirms.
fn read_side(mut c: RawConn, shared: Arc<Shared>, acks: bool, role: &'static str) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ending = None;
    while ending.is_none() && Instant::now() < deadline {
        match c.read_frame_within(Duration::from_secs(30)) {
            Ok((wire::FRAME_METHOD, ch, payload)) if payload.len() >= 4 => {
                let mut d = Dec::new(&payload);
                match (d.short(), d.short()) {
                    m::CONNECTION_CLOSE => {
                        let code = d.short();
                        let text = d.shortstr();
                        let class_id = d.short();
                        let method_id = d.short();
                        ending = Some(Ending::Close {
                            code,
                            text,
                            class_id,
                            method_id,
                        });
                        shared.closing.store(true, Ordering::SeqCst);
                    }
                    m::BASIC_ACK => {
                        let tag = d.longlong();
                        shared.confirmed.fetch_max(tag, Ordering::SeqCst);
                    }
                    m::BASIC_DELIVER if acks => {
                        d.shortstr();
                        let tag = d.longlong();
                        let args = Enc::new().longlong(tag).bits(&[false]).done();
                        if c.send_method(ch, m::BASIC_ACK, &args).is_ok() {
                            shared.acked.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    _ => {}
                }
            }
            Ok(_) => {}
            Err(_) => ending = Some(Ending::Eof),
        }
    }
    shared.closing.store(true, Ordering::SeqCst);
    let eof_after =
        matches!(ending, Some(Ending::Close { .. })) && c.wait_eof(Duration::from_secs(15));
    Outcome {
        role,
        ending,
        eof_after,
    }
}

/// A publisher: with `confirm` the channel is in confirm mode, messages are persistent
/// and at most [`WINDOW`] are unconfirmed; it publishes to `queue` as fast as the socket
/// takes it until the broker closes the connection, then sends close-ok.
fn publisher(
    broker: &Broker,
    queue: &'static str,
    confirm: bool,
    role: &'static str,
) -> (thread::JoinHandle<Outcome>, Arc<Shared>) {
    let mut c = open(broker);
    if confirm {
        c.send_method(1, m::CONFIRM_SELECT, &Enc::new().bits(&[false]).done())
            .expect("send confirm.select");
        c.expect_method(1, m::CONFIRM_SELECT_OK);
    }
    let shared = Arc::new(Shared::default());
    let mut w = RawConn {
        stream: c.stream.try_clone().expect("clone socket"),
        tune: c.tune,
    };
    let (s_read, s_write) = (Arc::clone(&shared), Arc::clone(&shared));
    let reader = thread::spawn(move || read_side(c, s_read, false, role));
    thread::spawn(move || {
        let props = Props {
            delivery_mode: Some(if confirm { 2 } else { 1 }),
            ..Props::default()
        };
        let body = [7u8; 256];
        let mut sent = 0u64;
        while !s_write.closing.load(Ordering::SeqCst) {
            if confirm && sent >= s_write.confirmed.load(Ordering::SeqCst) + WINDOW {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            if w.publish(1, "", queue, &props, &body).is_err() {
                s_write.write_failed.store(true, Ordering::SeqCst);
                return;
            }
            sent += 1;
        }
        if w.send_method(0, m::CONNECTION_CLOSE_OK, &[]).is_err() {
            s_write.write_failed.store(true, Ordering::SeqCst);
        }
    });
    (reader, shared)
}

/// A consumer with manual acks (prefetch 50) on `WORK`.
fn consumer(broker: &Broker) -> (thread::JoinHandle<Outcome>, Arc<Shared>) {
    let mut c = open(broker);
    let qos = Enc::new().long(0).short(50).bits(&[false]).done();
    c.send_method(1, m::BASIC_QOS, &qos)
        .expect("send basic.qos");
    c.expect_method(1, m::BASIC_QOS_OK);
    c.basic_consume(1, WORK, false);
    let shared = Arc::new(Shared::default());
    let s = Arc::clone(&shared);
    let mut w = RawConn {
        stream: c.stream.try_clone().expect("clone socket"),
        tune: c.tune,
    };
    let reader = thread::spawn(move || {
        let out = read_side(c, Arc::clone(&s), true, "consumer");
        if matches!(out.ending, Some(Ending::Close { .. })) {
            let _ = w.send_method(0, m::CONNECTION_CLOSE_OK, &[]);
        }
        out
    });
    (reader, shared)
}

#[test]
fn sigterm_under_load_closes_every_connection_with_320() {
    let dir = TestDir::new("shutdown-load");
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, Some(CONFIG));
    {
        let mut setup = open(&broker);
        declare(&mut setup, WORK, true, &vec![]);
        declare(&mut setup, FAST, false, &vec![]);
        declare(
            &mut setup,
            TINY,
            false,
            &vec![("x-qpid-capacity".into(), Val::I64(2048))],
        );
    }
    let mut clients = Vec::new();
    let mut writers = Vec::new();
    let mut confirming = Vec::new();
    let mut consuming = Vec::new();
    for i in 0..16 {
        let (role, queue, confirm) = match i % 4 {
            0 | 1 => ("confirming publisher", WORK, true),
            2 => ("publisher", FAST, false),
            _ => ("held publisher", TINY, false),
        };
        let (handle, shared) = publisher(&broker, queue, confirm, role);
        writers.push(Arc::clone(&shared));
        if confirm {
            confirming.push(shared);
        }
        clients.push(handle);
    }
    for _ in 0..2 {
        let (handle, shared) = consumer(&broker);
        consuming.push(shared);
        clients.push(handle);
    }
    // Load runs until the held publishers are held and confirms flow.
    assert!(
        broker
            .wait_for_log("CON-1003 : Reading suspended", Duration::from_secs(20))
            .is_some(),
        "no publisher of {TINY} was held"
    );
    assert!(
        common::wait_until(Duration::from_secs(20), || {
            confirming
                .iter()
                .all(|s| s.confirmed.load(Ordering::SeqCst) > 0)
        }),
        "not every confirming publisher got a confirm"
    );
    thread::sleep(Duration::from_millis(500));
    broker.sigterm();
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    let mut wrong = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        if w.write_failed.load(Ordering::SeqCst) {
            wrong.push(format!(
                "connection {i}: a write failed (reset by the broker)"
            ));
        }
    }
    for (i, o) in outcomes.iter().enumerate() {
        match &o.ending {
            Some(Ending::Close { code, text, .. })
                if *code == 320 && text == SHUTDOWN_TEXT && o.eof_after => {}
            other => wrong.push(format!(
                "connection {i} ({}): {other:?}, socket closed after: {}",
                o.role, o.eof_after
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} connections did not get 320 then EOF:\n{}",
        wrong.len(),
        outcomes.len(),
        wrong.join("\n")
    );
    let status = broker
        .wait_exit(Duration::from_secs(15))
        .expect("sluice still running 15 s after SIGTERM");
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGTERM: {status}"
    );
    assert!(
        broker
            .logs()
            .iter()
            .any(|l| l.contains("BRK-1003 : Shutting down")),
        "no BRK-1003 in the log"
    );

    // Every confirmed message is either in the queue after the restart or was acked
    // by a consumer (an ack the broker never read leaves it in the queue).
    let confirmed: u64 = confirming
        .iter()
        .map(|s| s.confirmed.load(Ordering::SeqCst))
        .sum();
    let acked: u64 = consuming
        .iter()
        .map(|s| s.acked.load(Ordering::SeqCst))
        .sum();
    drop(broker);
    let mut broker = Broker::start_in(&data, 2, Some(CONFIG));
    let mut c = open(&broker);
    let kept = u64::from(message_count(&mut c, WORK));
    assert!(
        kept + acked >= confirmed,
        "confirmed {confirmed}, acked by consumers {acked}, in {WORK} after restart {kept}"
    );
    drop(c);
    broker.stop();
}
