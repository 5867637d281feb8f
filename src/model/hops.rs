//! Owns: federation's loop and hop rules over AMQP tables, as RabbitMQ's federation
//! writes and reads them — the `x-received-from` message header (an array of tables
//! `uri`, `exchange`, `redelivered`, `cluster-name`, `vhost`, newest first) and the
//! `x-bound-from` binding argument (tables `cluster-name`, `vhost`, `exchange`, `hops`) —
//! shared by the federation link (`crate::federation`) and the `x-federation-upstream`
//! exchange type.
//!
//! Does not: decode message properties (callers hand it the headers table) or know
//! links, upstreams or configuration.

use crate::protocol::{FieldTable, FieldValue, LongStr};

/// The message header a link prepends at each hop.
pub const RECEIVED_FROM: &str = "x-received-from";
/// The binding argument a link prepends when it propagates a binding upstream.
pub const BOUND_FROM: &str = "x-bound-from";
/// `x-federation-upstream` exchange arguments (`rabbit_federation_upstream_exchange`).
pub const MAX_HOPS_ARG: &str = "x-max-hops";
pub const DOWNSTREAM_NAME_ARG: &str = "x-downstream-name";
pub const DOWNSTREAM_VHOST_ARG: &str = "x-downstream-vhost";

fn long_str(table: &FieldTable, key: &str) -> Option<Vec<u8>> {
    table
        .get(key)
        .and_then(|v| v.as_bytes())
        .map(<[u8]>::to_vec)
}

/// The hop tables of `key` (`x-received-from` or `x-bound-from`) in `table`: `None`
/// when absent or not an array.
pub fn trail<'a>(table: Option<&'a FieldTable>, key: &str) -> Option<&'a [FieldValue]> {
    table.and_then(|t| t.get(key)).and_then(|v| v.as_array())
}

/// Whether any hop of `trail` came from node `node`'s vhost `vhost`
/// (RabbitMQ's `already_seen`).
pub fn already_seen(node: &[u8], vhost: &[u8], trail: &[FieldValue]) -> bool {
    trail.iter().any(|hop| {
        hop.as_table().is_some_and(|t| {
            long_str(t, "cluster-name").as_deref() == Some(node)
                && long_str(t, "vhost").as_deref() == Some(vhost)
        })
    })
}

/// Whether a message with these headers may be forwarded into node `node`'s vhost
/// `vhost`: it has made fewer than `max_hops` hops and has not been there
/// (RabbitMQ's `should_forward`). A header that is not an array does not count.
pub fn should_forward(
    headers: Option<&FieldTable>,
    max_hops: u16,
    node: &[u8],
    vhost: &[u8],
) -> bool {
    match trail(headers, RECEIVED_FROM) {
        None => true,
        Some(hops) => hops.len() < usize::from(max_hops) && !already_seen(node, vhost, hops),
    }
}

/// One hop of `x-received-from`, as the downstream writes it about the upstream it
/// received the message from.
pub struct ReceivedFrom<'a> {
    /// The upstream's URI without credentials.
    pub uri: &'a str,
    /// The upstream exchange.
    pub exchange: &'a str,
    pub redelivered: bool,
    /// The upstream's node name (its `cluster_name` server property), if it said.
    pub cluster_name: Option<&'a str>,
    /// The upstream's vhost.
    pub vhost: &'a str,
}

/// `headers` with `hop` prepended to `x-received-from` (created when absent; a value
/// that is not an array is replaced).
pub fn prepend_received_from(headers: Option<FieldTable>, hop: &ReceivedFrom<'_>) -> FieldTable {
    let s = |v: &str| FieldValue::LongStr(LongStr::from(v));
    let mut entry = FieldTable::new();
    entry.insert("uri", s(hop.uri));
    entry.insert("exchange", s(hop.exchange));
    entry.insert("redelivered", FieldValue::Bool(hop.redelivered));
    if let Some(name) = hop.cluster_name {
        entry.insert("cluster-name", s(name));
    }
    entry.insert("vhost", s(hop.vhost));
    prepend(headers.unwrap_or_default(), RECEIVED_FROM, entry)
}

/// `table` with `entry` prepended to the array at `key`.
pub fn prepend(table: FieldTable, key: &str, entry: FieldTable) -> FieldTable {
    let mut out = FieldTable::new();
    let mut array = vec![FieldValue::Table(entry)];
    for (k, v) in table.into_inner() {
        if k.as_bytes() == key.as_bytes() {
            if let FieldValue::Array(old) = v {
                array.extend(old);
            }
        } else {
            out.insert(k, v);
        }
    }
    out.insert(key, FieldValue::Array(array));
    out
}

/// How many more links a binding with these arguments may propagate over, crossing a
/// link of `max_hops` whose upstream is node `upstream_node`'s vhost `upstream_vhost`
/// (RabbitMQ's `update_binding`): `max_hops` for a local binding; for one that itself
/// came over a link, one less than it had, capped by `max_hops`, and 0 if the upstream
/// is already in its trail. 0 = do not propagate.
pub fn binding_hops(
    args: &FieldTable,
    max_hops: u16,
    upstream_node: Option<&[u8]>,
    upstream_vhost: &[u8],
) -> u16 {
    let Some(trail) = trail(Some(args), BOUND_FROM) else {
        return max_hops;
    };
    if let Some(node) = upstream_node {
        if already_seen(node, upstream_vhost, trail) {
            return 0;
        }
    }
    let previous = trail
        .first()
        .and_then(|t| t.as_table())
        .and_then(|t| t.get("hops"))
        .and_then(|h| h.as_i64())
        .unwrap_or(0);
    let previous = u16::try_from(previous.max(0)).unwrap_or(u16::MAX);
    previous.saturating_sub(1).min(max_hops)
}

/// The arguments a propagated binding carries upstream: `args` with this node's hop
/// prepended to `x-bound-from`.
pub fn prepend_bound_from(
    args: &FieldTable,
    node: &str,
    vhost: &str,
    exchange: &str,
    hops: u16,
) -> FieldTable {
    let s = |v: &str| FieldValue::LongStr(LongStr::from(v));
    let mut entry = FieldTable::new();
    entry.insert("cluster-name", s(node));
    entry.insert("vhost", s(vhost));
    entry.insert("exchange", s(exchange));
    entry.insert(
        "hops",
        FieldValue::I16(i16::try_from(hops).unwrap_or(i16::MAX)),
    );
    prepend(args.clone(), BOUND_FROM, entry)
}

/// Whether a binding came over a federation link (it carries `x-bound-from`).
pub fn is_propagated(args: &FieldTable) -> bool {
    trail(Some(args), BOUND_FROM).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(node: &str, vhost: &str) -> ReceivedFrom<'static> {
        ReceivedFrom {
            uri: "amqp://h",
            exchange: "x",
            redelivered: false,
            cluster_name: Some(Box::leak(node.to_owned().into_boxed_str())),
            vhost: Box::leak(vhost.to_owned().into_boxed_str()),
        }
    }

    #[test]
    fn hops_and_loops() {
        assert!(should_forward(None, 1, b"a", b"/"));
        let once = prepend_received_from(None, &hop("root", "/"));
        assert!(
            !should_forward(Some(&once), 1, b"relay", b"/"),
            "max_hops 1 reached"
        );
        assert!(should_forward(Some(&once), 2, b"relay", b"/"));
        assert!(
            !should_forward(Some(&once), 2, b"root", b"/"),
            "been at root /"
        );
        assert!(should_forward(Some(&once), 2, b"root", b"other"));
        let twice = prepend_received_from(Some(once), &hop("relay", "/"));
        let trail = trail(Some(&twice), RECEIVED_FROM).unwrap();
        assert_eq!(trail.len(), 2);
        let newest = trail[0].as_table().unwrap();
        assert_eq!(
            newest.get("cluster-name").unwrap().as_bytes(),
            Some(&b"relay"[..])
        );
        assert!(!should_forward(Some(&twice), 2, b"leaf", b"/"));
    }

    #[test]
    fn bindings_count_down_to_the_tightest_link() {
        let local = FieldTable::new();
        assert_eq!(binding_hops(&local, 2, Some(b"b"), b"/"), 2);
        let once = prepend_bound_from(&local, "c", "/", "/:x A", 2);
        assert!(is_propagated(&once));
        assert_eq!(binding_hops(&once, 1, Some(b"a"), b"/"), 1);
        assert_eq!(binding_hops(&once, 5, Some(b"a"), b"/"), 1);
        let twice = prepend_bound_from(&once, "b", "/", "/:x A", 1);
        assert_eq!(binding_hops(&twice, 3, Some(b"a"), b"/"), 0);
        assert_eq!(
            binding_hops(&once, 5, Some(b"c"), b"/"),
            0,
            "back to where it came from"
        );
    }
}
