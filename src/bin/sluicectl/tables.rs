//! Owns: rendering the API's JSON as aligned tables (cells, nested fields, the column
//! sets of each list command).

use serde_json::Value;

/// A field rendered for a table cell: strings bare, null as "", numbers as they are.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        Value::Array(items) => items.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// The value at a `/`-separated path of keys.
pub fn field<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('/').fold(v, |v, k| &v[k])
}

/// An aligned table: a header row, then one row per item; the last column is not padded.
pub fn table(items: &[Value], columns: &[(&str, &str)]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| columns.iter().map(|(_, p)| cell(field(item, p))).collect())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.len()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(columns.iter().map(|(h, _)| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// An object as `key: value` lines.
pub fn pairs(v: &Value) -> String {
    match v {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", cell(v)))
            .collect(),
        Value::Null => String::new(),
        other => format!("{other}\n"),
    }
}

pub const QUEUES: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("shard", "home_shard"),
    ("ready", "messages_ready"),
    ("unacked", "messages_unacknowledged"),
    ("bytes", "message_bytes"),
    ("consumers", "consumers"),
    ("flow_blocked", "flow/blocked"),
    ("slow_policy", "slow_consumer/policy"),
    ("predicted_s", "slow_consumer/predicted_seconds"),
];
pub const CONNECTIONS: &[(&str, &str)] = &[
    ("name", "name"),
    ("user", "user"),
    ("vhost", "vhost"),
    ("shard", "home_shard"),
    ("channels", "channels"),
    ("state", "state"),
];
pub const CHANNELS: &[(&str, &str)] = &[
    ("name", "name"),
    ("user", "user"),
    ("prefetch", "prefetch_count"),
    ("unacked", "messages_unacknowledged"),
    ("consumers", "consumer_count"),
    ("state", "state"),
];
pub const CONSUMERS: &[(&str, &str)] = &[
    ("queue", "queue/name"),
    ("tag", "consumer_tag"),
    ("channel", "channel_details/name"),
    ("ack_required", "ack_required"),
    ("prefetch", "prefetch_count"),
];
pub const EXCHANGES: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("type", "type"),
    ("durable", "durable"),
];
pub const BINDINGS: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("source", "source"),
    ("destination", "destination"),
    ("type", "destination_type"),
    ("routing_key", "routing_key"),
];
pub const FEDERATION: &[(&str, &str)] = &[
    ("upstream", "upstream"),
    ("vhost", "vhost"),
    ("exchange", "exchange"),
    ("status", "status"),
    ("uri", "uri"),
    ("forwarded", "forwarded"),
    ("dropped", "dropped"),
    ("lag", "lag"),
    ("since", "timestamp"),
    ("error", "error"),
];
pub const USERS: &[(&str, &str)] = &[("name", "name"), ("tags", "tags")];
pub const VHOSTS: &[(&str, &str)] = &[("name", "name"), ("description", "description")];
pub const POLICIES: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("pattern", "pattern"),
    ("apply-to", "apply-to"),
    ("priority", "priority"),
    ("definition", "definition"),
];

pub const PERMISSIONS: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("user", "user"),
    ("configure", "configure"),
    ("write", "write"),
    ("read", "read"),
];
pub const MESSAGES: &[(&str, &str)] = &[
    ("routing_key", "routing_key"),
    ("exchange", "exchange"),
    ("message_count", "message_count"),
    ("redelivered", "redelivered"),
    ("payload_bytes", "payload_bytes"),
    ("payload", "payload"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_aligned() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[{"name":"a","n":1,"s":{"p":"x"}},{"name":"longer","n":22,"s":null}]"#,
        )
        .expect("json");
        let out = table(&items, &[("name", "name"), ("n", "n"), ("p", "s/p")]);
        assert_eq!(out, "name    n   p\na       1   x\nlonger  22\n");
    }
}
