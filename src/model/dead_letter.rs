//! Owns: what dead-lettering does to a message's properties, as RabbitMQ's
//! `rabbit_dead_letter` does — the `x-death` header (one table per (queue, reason), most
//! recent first, the count of an existing entry incremented and the entry moved to the
//! front, as RabbitMQ 3.13+ "deaths v2"), the `x-first-death-queue/-reason/-exchange`
//! headers (set once, by the first death) and `x-last-death-*` (every death), the
//! per-message `expiration` removed (kept in the entry as
//! `original-expiration`) — and RabbitMQ's cycle detection on the updated `x-death`.
//!
//! Does not: route, enqueue or decide which queues dead-letter (`shard::home::dead_letter` and
//! the queue do); copy the body (only the property list is re-encoded).

use bytes::Bytes;

use crate::protocol::properties::BasicProperties;
use crate::protocol::{FieldTable, FieldValue, LongStr, ShortStr};

/// Declare-argument names.
pub mod arg {
    pub const EXCHANGE: &str = "x-dead-letter-exchange";
    pub const ROUTING_KEY: &str = "x-dead-letter-routing-key";
    /// sluice's own: whether slow-consumer Cycle discards are dead-lettered (boolean,
    /// default false).
    pub const SLOW_CONSUMER: &str = "x-slow-consumer-dead-letter";
}

/// Where a queue dead-letters (`x-dead-letter-exchange`, `x-dead-letter-routing-key`,
/// `x-slow-consumer-dead-letter`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeadLetterTarget {
    /// The dead-letter exchange ("" is the default exchange).
    pub exchange: ShortStr,
    /// Replaces the message's routing key; `None` keeps it.
    pub routing_key: Option<ShortStr>,
    /// Whether slow-consumer Cycle discards are dead-lettered too (default off, so that
    /// a slow subscriber's ring does not flood another queue).
    pub slow_consumer: bool,
}

/// The queue's dead-letter target from its (already validated) declare arguments;
/// `None` without `x-dead-letter-exchange`.
pub fn target(arguments: &FieldTable) -> Option<DeadLetterTarget> {
    let name = |key: &str| {
        arguments
            .get(key)
            .and_then(|v| v.as_bytes())
            .map(|b| ShortStr::from(Bytes::copy_from_slice(b)))
    };
    Some(DeadLetterTarget {
        exchange: name(arg::EXCHANGE)?,
        routing_key: name(arg::ROUTING_KEY),
        slow_consumer: arguments
            .get(arg::SLOW_CONSUMER)
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
    })
}

/// Why a message died, as the `reason` field of `x-death` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `basic.reject` / `basic.nack` with `requeue = false`.
    Rejected,
    /// Message TTL (the queue's `x-message-ttl` or the message's `expiration`).
    Expired,
    /// `x-max-length` / `x-max-length-bytes`: dropped from the head, or refused under
    /// `reject-publish-dlx`.
    Maxlen,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::Maxlen => "maxlen",
        }
    }
}

/// One death: where the message was when it died.
#[derive(Clone, Copy, Debug)]
pub struct Death<'a> {
    pub reason: Reason,
    /// The queue it died in.
    pub queue: &'a ShortStr,
    /// The exchange it had been published to (for a message dead-lettered before: the
    /// dead-letter exchange it came through).
    pub exchange: &'a ShortStr,
    /// Its routing key.
    pub routing_key: &'a ShortStr,
    /// Seconds since the epoch.
    pub time: u64,
}

fn longstr(s: &ShortStr) -> FieldValue {
    FieldValue::LongStr(LongStr::from(s.clone()))
}

fn text(s: &str) -> FieldValue {
    FieldValue::LongStr(LongStr::from(s))
}

/// The property list of the dead-lettered copy: `raw` with `x-death` updated, the
/// `x-first-death-*` headers set if absent, and `expiration` removed. Returns the
/// property list and the updated headers (for the cycle check), or `None` when `raw`
/// does not decode (the message is then dropped, not dead-lettered).
pub fn rewrite(raw: &Bytes, death: &Death<'_>) -> Option<(Bytes, FieldTable)> {
    let mut props = BasicProperties::decode(raw).ok()?;
    let original_expiration = props.expiration.take();
    let mut headers = props.headers.take().unwrap_or_default();
    if headers.get("x-first-death-reason").is_none() {
        headers.insert("x-first-death-reason", text(death.reason.name()));
        headers.insert("x-first-death-queue", longstr(death.queue));
        headers.insert("x-first-death-exchange", longstr(death.exchange));
    }
    headers.insert("x-last-death-reason", text(death.reason.name()));
    headers.insert("x-last-death-queue", longstr(death.queue));
    headers.insert("x-last-death-exchange", longstr(death.exchange));
    let mut deaths: Vec<FieldValue> = match headers.get("x-death") {
        Some(FieldValue::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    let matching = deaths.iter().position(|d| {
        d.as_table().is_some_and(|t| {
            field_is(t, "queue", death.queue.as_bytes())
                && field_is(t, "reason", death.reason.name().as_bytes())
        })
    });
    let entry = match matching {
        Some(at) => {
            let old = deaths.remove(at);
            increment_count(old)
        }
        None => {
            let mut t = FieldTable::new();
            t.insert("count", FieldValue::I64(1));
            t.insert("reason", text(death.reason.name()));
            t.insert("queue", longstr(death.queue));
            t.insert("time", FieldValue::Timestamp(death.time));
            t.insert("exchange", longstr(death.exchange));
            t.insert(
                "routing-keys",
                FieldValue::Array(vec![longstr(death.routing_key)]),
            );
            if let Some(exp) = &original_expiration {
                t.insert("original-expiration", longstr(exp));
            }
            FieldValue::Table(t)
        }
    };
    deaths.insert(0, entry);
    headers.insert("x-death", FieldValue::Array(deaths));
    props.headers = Some(headers.clone());
    Some((props.to_bytes(), headers))
}

/// An existing `x-death` entry with its count incremented (its other fields kept, as
/// RabbitMQ's `increment_xdeath_event_count`).
fn increment_count(entry: FieldValue) -> FieldValue {
    let FieldValue::Table(t) = entry else {
        return entry;
    };
    let count = t.get("count").and_then(|v| v.as_i64()).unwrap_or(0);
    let mut out = FieldTable::new();
    out.insert("count", FieldValue::I64(count.saturating_add(1)));
    for (k, v) in t.iter() {
        if k.as_bytes() != b"count" {
            out.insert(k.clone(), v.clone());
        }
    }
    FieldValue::Table(out)
}

fn field_is(t: &FieldTable, key: &str, want: &[u8]) -> bool {
    t.get(key).and_then(|v| v.as_bytes()) == Some(want)
}

/// RabbitMQ's `is_cycle`: dead-lettering into `queue` is a cycle when `queue` appears in
/// `x-death` (already updated with this death) and no death up to and including its
/// most recent one there was a rejection. Always false for a rejected message (the
/// caller does not ask then: a client decided, so the loop is not automatic).
pub fn is_cycle(headers: &FieldTable, queue: &[u8]) -> bool {
    let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
        return false;
    };
    for d in deaths {
        let Some(t) = d.as_table() else {
            // Not a table: RabbitMQ counts it as breaking the automatic cycle.
            return false;
        };
        if field_is(t, "reason", b"rejected") {
            return false;
        }
        if field_is(t, "queue", queue) {
            return true;
        }
    }
    false
}

/// The queue names `x-death` mentions (candidates for [`is_cycle`]).
pub fn death_queues(headers: &FieldTable) -> Vec<Bytes> {
    let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
        return Vec::new();
    };
    deaths
        .iter()
        .filter_map(|d| d.as_table())
        .filter_map(|t| t.get("queue").and_then(|v| v.as_bytes()))
        .map(Bytes::copy_from_slice)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death<'a>(reason: Reason, q: &'a ShortStr, x: &'a ShortStr, rk: &'a ShortStr) -> Death<'a> {
        Death {
            reason,
            queue: q,
            exchange: x,
            routing_key: rk,
            time: 7,
        }
    }

    #[test]
    fn first_death_then_increment_and_cycle() {
        let props = BasicProperties {
            expiration: Some("100".into()),
            ..Default::default()
        };
        let (q, x, rk) = (
            ShortStr::from("q"),
            ShortStr::from("ex"),
            ShortStr::from("k"),
        );
        let (raw, h) = rewrite(&props.to_bytes(), &death(Reason::Expired, &q, &x, &rk)).unwrap();
        let p = BasicProperties::decode(&raw).unwrap();
        assert!(p.expiration.is_none());
        assert_eq!(
            h.get("x-first-death-reason").unwrap().as_bytes(),
            Some(&b"expired"[..])
        );
        assert!(is_cycle(&h, b"q"));
        assert!(!is_cycle(&h, b"other"));
        let (_, h2) = rewrite(&raw, &death(Reason::Expired, &q, &x, &rk)).unwrap();
        let deaths = h2.get("x-death").unwrap().as_array().unwrap();
        assert_eq!(deaths.len(), 1);
        let t = deaths[0].as_table().unwrap();
        assert_eq!(t.get("count").unwrap().as_i64(), Some(2));
        assert_eq!(
            t.get("original-expiration").unwrap().as_bytes(),
            Some(&b"100"[..])
        );
        let (_, h3) = rewrite(&raw, &death(Reason::Rejected, &q, &x, &rk)).unwrap();
        assert!(!is_cycle(&h3, b"q"), "a rejection breaks the cycle");
        assert_eq!(h3.get("x-death").unwrap().as_array().unwrap().len(), 2);
    }
}
