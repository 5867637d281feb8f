//! Owns: a message's basic properties as the management API's JSON, both ways, as
//! RabbitMQ's management gives and takes them: the publish's `properties` object (its
//! `headers` an object whose numbers are longs or doubles, strings long strings,
//! booleans, lists arrays, objects tables) into the content header's properties, and a
//! got message's properties into the JSON of `/api/queues/{vhost}/{name}/get`.
//!
//! Does not: route, enqueue or decide anything (`http::messages` does).

use serde_json::{Map, Value};

use crate::protocol::properties::BasicProperties;
use crate::protocol::table::FieldValue;
use crate::protocol::{FieldTable, LongStr, ShortStr};

use super::api::json::table_json;

/// The publish's `properties` as the 14 basic properties; the reason when one is not
/// what RabbitMQ takes.
pub fn properties_from_json(v: &Value) -> Result<BasicProperties, String> {
    let map = match v {
        Value::Object(map) => map,
        Value::Null => return Ok(BasicProperties::default()),
        Value::Array(a) if a.is_empty() => return Ok(BasicProperties::default()),
        other => return Err(format!("properties must be an object, not {other}")),
    };
    let mut p = BasicProperties::default();
    for (key, value) in map {
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "content_type" => p.content_type = Some(short(key, value)?),
            "content_encoding" => p.content_encoding = Some(short(key, value)?),
            "headers" => p.headers = Some(table_from_json(key, value)?),
            "delivery_mode" => p.delivery_mode = Some(small(key, value)?),
            "priority" => p.priority = Some(small(key, value)?),
            "correlation_id" => p.correlation_id = Some(short(key, value)?),
            "reply_to" => p.reply_to = Some(short(key, value)?),
            "expiration" => p.expiration = Some(short(key, value)?),
            "message_id" => p.message_id = Some(short(key, value)?),
            "timestamp" => p.timestamp = Some(integer(key, value)?),
            "type" => p.kind = Some(short(key, value)?),
            "user_id" => p.user_id = Some(short(key, value)?),
            "app_id" => p.app_id = Some(short(key, value)?),
            "cluster_id" => p.cluster_id = Some(short(key, value)?),
            other => return Err(format!("invalid property: {other}")),
        }
    }
    Ok(p)
}

/// A got message's properties, as RabbitMQ's management shows them: the properties
/// that are set, by their JSON names; `headers` as an object.
pub fn properties_json(p: &BasicProperties) -> Value {
    let mut out = Map::new();
    let mut text = |name: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            out.insert(name.to_owned(), Value::from(v.as_str_lossy().into_owned()));
        }
    };
    text("content_type", &p.content_type);
    text("content_encoding", &p.content_encoding);
    text("correlation_id", &p.correlation_id);
    text("reply_to", &p.reply_to);
    text("expiration", &p.expiration);
    text("message_id", &p.message_id);
    text("type", &p.kind);
    text("user_id", &p.user_id);
    text("app_id", &p.app_id);
    text("cluster_id", &p.cluster_id);
    if let Some(h) = &p.headers {
        out.insert("headers".into(), table_json(h));
    }
    if let Some(d) = p.delivery_mode {
        out.insert("delivery_mode".into(), Value::from(d));
    }
    if let Some(d) = p.priority {
        out.insert("priority".into(), Value::from(d));
    }
    if let Some(t) = p.timestamp {
        out.insert("timestamp".into(), Value::from(t));
    }
    Value::Object(out)
}

fn short(key: &str, v: &Value) -> Result<ShortStr, String> {
    match v {
        Value::String(s) if s.len() <= 255 => Ok(ShortStr::from(s.as_str())),
        Value::String(_) => Err(format!("{key} is longer than 255 bytes")),
        // RabbitMQ takes a number for a text property (an expiration of 60000) as its text.
        Value::Number(n) => Ok(ShortStr::from(n.to_string().as_str())),
        other => Err(format!("{key} must be a string, not {other}")),
    }
}

fn integer(key: &str, v: &Value) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{key} must be a non-negative integer, not {v}"))
}

fn small(key: &str, v: &Value) -> Result<u8, String> {
    let n = integer(key, v)?;
    u8::try_from(n).map_err(|_| format!("{key} must be at most 255, not {n}"))
}

fn table_from_json(key: &str, v: &Value) -> Result<FieldTable, String> {
    match v {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                if k.len() > 255 {
                    return Err(format!("header name longer than 255 bytes in {key}"));
                }
                Ok((ShortStr::from(k.as_str()), field_from_json(v)?))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(FieldTable::from),
        other => Err(format!("{key} must be an object, not {other}")),
    }
}

/// A JSON value as a field value, as RabbitMQ's management converts header values.
fn field_from_json(v: &Value) -> Result<FieldValue, String> {
    Ok(match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => FieldValue::I64(i),
            None => FieldValue::F64(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => FieldValue::LongStr(LongStr::from(s.as_str())),
        Value::Array(items) => FieldValue::Array(
            items
                .iter()
                .map(field_from_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Value::Object(_) => FieldValue::Table(table_from_json("a header", v)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn properties_round_trip_through_the_content_header() {
        let given = json!({
            "content_type": "text/plain",
            "delivery_mode": 2,
            "priority": 5,
            "correlation_id": "c-1",
            "expiration": "60000",
            "timestamp": 1700000000u64,
            "type": "kind",
            "app_id": "app",
            "headers": {"n": 7, "f": 1.5, "s": "x", "b": true, "l": [1, "a"], "t": {"k": "v"}},
        });
        let p = properties_from_json(&given).unwrap();
        let decoded = BasicProperties::decode(&p.to_bytes()).unwrap();
        assert_eq!(properties_json(&decoded), given);
    }

    #[test]
    fn unknown_and_mistyped_properties_are_refused() {
        assert_eq!(
            properties_from_json(&json!({"colour": "red"})).unwrap_err(),
            "invalid property: colour"
        );
        assert!(properties_from_json(&json!({"delivery_mode": "fast"})).is_err());
        assert!(properties_from_json(&json!({"headers": [1]})).is_err());
        assert!(properties_from_json(&json!("x")).is_err());
        assert_eq!(
            properties_from_json(&json!({})).unwrap(),
            BasicProperties::default()
        );
    }
}
