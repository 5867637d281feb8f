//! Hardening against hostile clients (issue 11): client-chosen names cannot forge log
//! lines, connection ids in logs are unique across shards, and stricter input checks
//! answer with RabbitMQ's codes and texts while other connections stay unharmed.

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Broker, RawConn};

const LOG_WAIT: Duration = Duration::from_secs(5);

shard_tests!(forged_queue_name_is_escaped, connection_ids_are_unique);

/// A queue named `x\nBRK-1003 : Shutting down FORGED` must not write a line of its own:
/// its QUE-1001 line carries the name escaped, and no line starts like the forgery.
async fn forged_queue_name_is_escaped(shards: usize) {
    let mut broker = Broker::start(shards);
    let forged = "BRK-1003 : Shutting down FORGED";
    let name = format!("x\n{forged}\r\t\\\u{1b}");
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    c.queue_declare(1, &name, false, false, false);
    let line = broker
        .wait_for_log("QUE-1001", LOG_WAIT)
        .expect("a QUE-1001 line");
    assert!(
        line.contains(&format!("qu(x\\n{forged}\\r\\t\\\\\\x1b)")),
        "QUE-1001 line without the escaped name: {line:?}"
    );
    for l in broker.logs() {
        assert!(!l.contains('\r'), "raw carriage return in {l:?}");
        let trimmed = l.trim_start();
        assert!(
            !trimmed.starts_with(forged) && !trimmed.starts_with("BRK-1003"),
            "forged line: {l:?}"
        );
        assert_ne!(trimmed, forged);
    }
    broker.assert_healthy();
}

/// Connections on different shards never share a `con:N` subject.
async fn connection_ids_are_unique(shards: usize) {
    let mut broker = Broker::start(shards);
    let mut conns = Vec::new();
    for _ in 0..(4 * shards) {
        let mut c = RawConn::connect(&broker.addr());
        c.handshake();
        conns.push(c);
    }
    let count = 4 * shards;
    let ok = common::wait_until(LOG_WAIT, || {
        broker
            .logs()
            .iter()
            .filter(|l| l.contains("CON-1001"))
            .count()
            >= count
    });
    assert!(ok, "expected {count} CON-1001 lines");
    let mut seen = HashSet::new();
    for l in broker.logs().iter().filter(|l| l.contains("CON-1001")) {
        let id = l
            .split("[con:")
            .nth(1)
            .and_then(|rest| rest.split('(').next())
            .expect("a [con:N( subject")
            .to_string();
        assert!(seen.insert(id.clone()), "con:{id} used twice: {l:?}");
    }
    drop(conns);
    broker.assert_healthy();
}
