//! Shared set-up for the slow-consumer suites: broker configuration with fast policy
//! timers, numbered message bodies, declare arguments for both clients, queue placement
//! on shards, and the operational log lines. The client-specific helpers live in
//! `amqp` (amqprs) and `own` (sluice's client) and are re-exported here.

use std::time::Duration;

pub use crate::amqp::*;
use crate::common::{unique, Broker};
pub use crate::own::*;

/// Upper bound of one test body.
pub const LIMIT: Duration = Duration::from_secs(30);
/// How long a policy action (a close, a log line) may take to show.
pub const ACT: Duration = Duration::from_secs(10);
/// The reply text of a slow-consumer close (seed 000).
pub const TOO_SLOW: &str = "Consuming too slow.";
/// The body of the message that ends a numbered sequence.
pub const END: &[u8] = b"end-of-sequence";

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

/// Broker configuration: policy timers small enough for tests, plus `extra` sections.
pub struct Cfg {
    pub housekeeping_ms: u64,
    pub rate_window_ms: u64,
    pub warn_horizon_ms: u64,
    pub alert_gap_ms: u64,
    pub extra: String,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            housekeeping_ms: 50,
            rate_window_ms: 500,
            warn_horizon_ms: 10_000,
            alert_gap_ms: 200,
            extra: String::new(),
        }
    }
}

impl Cfg {
    pub fn with(extra: &str) -> Cfg {
        Cfg {
            extra: extra.to_owned(),
            ..Cfg::default()
        }
    }

    pub fn toml(&self) -> String {
        format!(
            "[policy]\nhousekeeping_interval_ms = {}\nrate_window_ms = {}\n\
             warn_horizon_ms = {}\nalert_repeat_gap_ms = {}\n\n{}\n",
            self.housekeeping_ms,
            self.rate_window_ms,
            self.warn_horizon_ms,
            self.alert_gap_ms,
            self.extra
        )
    }

    pub fn start(&self, shards: usize) -> Broker {
        Broker::start_with_config(shards, &self.toml())
    }
}

// ---------------------------------------------------------------------------------------
// Numbered bodies
// ---------------------------------------------------------------------------------------

/// A body of `size` bytes (at least 8) starting with the zero-padded sequence number.
pub fn body(seq: u32, size: usize) -> Vec<u8> {
    let mut b = format!("{seq:08}").into_bytes();
    b.resize(size.max(8), b'.');
    b
}

/// The sequence number a body starts with.
pub fn seq_of(body: &[u8]) -> u32 {
    std::str::from_utf8(&body[..body.len().min(8)])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a numbered body: {:?}", String::from_utf8_lossy(body)))
}

/// Asserts `got` is exactly `want`, with a readable message.
pub fn assert_seqs(what: &str, got: &[u32], want: impl IntoIterator<Item = u32>) {
    let want: Vec<u32> = want.into_iter().collect();
    assert!(
        got == want.as_slice(),
        "{what}: got {} messages {}, expected {} messages {}",
        got.len(),
        show(got),
        want.len(),
        show(&want)
    );
}

/// Asserts `got` runs 1, 2, 3, … without a gap (a prefix of what was published).
pub fn assert_prefix(what: &str, got: &[u32]) {
    let n = got.len() as u32;
    assert_seqs(what, got, 1..=n);
}

fn show(seqs: &[u32]) -> String {
    if seqs.len() <= 24 {
        format!("{seqs:?}")
    } else {
        format!("{:?} … {:?}", &seqs[..12], &seqs[seqs.len() - 12..])
    }
}

// ---------------------------------------------------------------------------------------
// Declare arguments, for both clients
// ---------------------------------------------------------------------------------------

/// A declare-argument value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Int(i64),
    Float(f64),
    Str(&'static str),
    Bool(bool),
}

/// The arguments as amqprs sends them (integers as `I` when they fit, else `l`).
pub fn amqprs_table(args: &[(&str, Arg)]) -> amqprs::FieldTable {
    use amqprs::FieldValue as V;
    let mut t = amqprs::FieldTable::new();
    for (k, v) in args {
        let v = match *v {
            Arg::Int(n) => match i32::try_from(n) {
                Ok(n) => V::I(n),
                Err(_) => V::l(n),
            },
            Arg::Float(x) => V::d(x),
            Arg::Str(s) => V::S(s.try_into().unwrap()),
            Arg::Bool(b) => V::t(b),
        };
        t.insert((*k).try_into().unwrap(), v);
    }
    t
}

/// The arguments as sluice's client sends them.
pub fn own_table(args: &[(&str, Arg)]) -> sluice::protocol::FieldTable {
    use sluice::protocol::{FieldValue as V, LongStr};
    let mut t = sluice::protocol::FieldTable::new();
    for (k, v) in args {
        let v = match *v {
            Arg::Int(n) => V::I64(n),
            Arg::Float(x) => V::F64(x),
            Arg::Str(s) => V::LongStr(LongStr::from(s)),
            Arg::Bool(b) => V::Bool(b),
        };
        t.insert(*k, v);
    }
    t
}

pub const MAX_COUNT: &str = "x-slow-consumer-max-count";
pub const MAX_DEPTH: &str = "x-slow-consumer-max-depth";
pub const MAX_AGE: &str = "x-slow-consumer-max-age";
pub const MIN_RATE: &str = "x-slow-consumer-min-rate";
pub const POLICY: &str = "x-slow-consumer-policy";
pub const INCLUDE_PERSISTENT: &str = "x-slow-consumer-include-persistent";
pub const INCLUDE_DURABLE: &str = "x-slow-consumer-include-durable";

// ---------------------------------------------------------------------------------------
// Shards
// ---------------------------------------------------------------------------------------

/// The home shard of queue `name` in vhost "/".
pub fn home(name: &str, shards: usize) -> u16 {
    sluice::shard::placement::home_shard("/", name.as_bytes(), shards)
}

/// A fresh queue name whose home is `shard`.
pub fn name_on_shard(prefix: &str, shard: u16, shards: usize) -> String {
    loop {
        let name = unique(prefix);
        if home(&name, shards) == shard {
            return name;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Log lines
// ---------------------------------------------------------------------------------------

/// The index and text of the first line containing `needle`, polling up to `timeout`.
pub async fn wait_line(broker: &Broker, needle: &str, timeout: Duration) -> (usize, String) {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = find_line(&broker.logs(), needle) {
            return found;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "no log line containing {needle:?} within {timeout:?}; log tail:\n{}",
                tail(broker)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn find_line(logs: &[String], needle: &str) -> Option<(usize, String)> {
    logs.iter()
        .enumerate()
        .find(|(_, l)| l.contains(needle))
        .map(|(i, l)| (i, l.clone()))
}

/// Lines containing `needle`.
pub fn lines_with(broker: &Broker, needle: &str) -> Vec<String> {
    broker
        .logs()
        .into_iter()
        .filter(|l| l.contains(needle))
        .collect()
}

/// The last 40 log lines, for failure messages.
pub fn tail(broker: &Broker) -> String {
    let logs = broker.logs();
    logs[logs.len().saturating_sub(40)..].join("\n")
}

/// `[vh(/)/qu(NAME)] CODE : `, the start of a queue's operational line.
pub fn queue_line(queue: &str, code: &str) -> String {
    format!("[vh(/)/qu({queue})] {code} : ")
}

/// The number after `marker` in `line`, thousands separators removed.
pub fn number_after(line: &str, marker: &str) -> u64 {
    let at = line
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} not in {line:?}"));
    let digits: String = line[at + marker.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {marker:?} in {line:?}"))
}

/// Sums the counts of a queue's QUE-1005 (`Discarded : N messages`) or QUE-1006
/// (`Rejected : N publishes`) lines, polling until the sum reaches `want` (or `timeout`).
pub async fn wait_reported(
    broker: &Broker,
    queue: &str,
    code: &str,
    marker: &str,
    want: u64,
    timeout: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let lines = lines_with(broker, &queue_line(queue, code));
        let sum: u64 = lines.iter().map(|l| number_after(l, marker)).sum();
        if sum >= want {
            assert_eq!(
                sum, want,
                "{code} lines for {queue} add up to more: {lines:#?}"
            );
            return lines;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "{code} lines for {queue} add up to {sum}, expected {want}: {lines:#?}\nlog tail:\n{}",
                tail(broker)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SUB-1003 (with the threshold and policy=delete) then QUE-1002 for `queue`, and at
/// least `closes` channel closes with 506; returns the SUB-1003 line.
pub async fn assert_delete_logged(
    broker: &Broker,
    queue: &str,
    threshold: &str,
    closes: usize,
) -> String {
    let (sub_at, sub) = wait_line(broker, &queue_line(queue, "SUB-1003"), ACT).await;
    assert!(
        sub.contains(&format!(
            "SUB-1003 : Slow consumer detected : queue={queue} depth="
        )) && sub.contains(&format!(" threshold={threshold} (limit "))
            && sub.ends_with(" policy=delete"),
        "SUB-1003 line: {sub}"
    );
    let (del_at, _) = wait_line(
        broker,
        &format!("[vh(/)/qu({queue})] QUE-1002 : Deleted"),
        ACT,
    )
    .await;
    assert!(del_at > sub_at, "QUE-1002 logged before SUB-1003");
    let close = "CHN-1003 : Close : 506 Consuming too slow.";
    let ok = crate::common::eventually(ACT, || async {
        broker.logs().iter().filter(|l| l.ends_with(close)).count() >= closes
    })
    .await;
    assert!(
        ok,
        "fewer than {closes} lines ending {close:?}:\n{}",
        tail(broker)
    );
    sub
}

/// Asserts no SUB-1003 line was logged for `queue`.
pub fn assert_not_detected(broker: &Broker, queue: &str) {
    let lines = lines_with(broker, &queue_line(queue, "SUB-1003"));
    assert!(
        lines.is_empty(),
        "unexpected SUB-1003 for {queue}: {lines:#?}"
    );
}
