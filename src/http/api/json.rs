//! Owns: AMQP field tables (declare arguments, headers) as the management API's JSON.

use serde_json::{json, Value};

use crate::protocol::{FieldTable, FieldValue};

/// Declare arguments as JSON, as RabbitMQ's management API shows them: numbers as
/// numbers, strings as strings, tables and arrays nested; byte arrays as text (lossy).
pub fn table_json(t: &FieldTable) -> Value {
    Value::Object(
        t.iter()
            .map(|(k, v)| (k.as_str_lossy().into_owned(), field_json(v)))
            .collect(),
    )
}

pub fn field_json(v: &FieldValue) -> Value {
    match v {
        FieldValue::Bool(b) => json!(b),
        FieldValue::I8(n) => json!(n),
        FieldValue::U8(n) => json!(n),
        FieldValue::I16(n) => json!(n),
        FieldValue::U16(n) => json!(n),
        FieldValue::I32(n) => json!(n),
        FieldValue::U32(n) => json!(n),
        FieldValue::I64(n) => json!(n),
        FieldValue::F32(n) => json!(n),
        FieldValue::F64(n) => json!(n),
        FieldValue::Decimal { scale, value } => {
            json!(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        FieldValue::LongStr(s) => json!(String::from_utf8_lossy(s.as_bytes())),
        FieldValue::Bytes(b) => json!(String::from_utf8_lossy(b)),
        FieldValue::Array(items) => Value::Array(items.iter().map(field_json).collect()),
        FieldValue::Timestamp(t) => json!(t),
        FieldValue::Table(t) => table_json(t),
        FieldValue::Void => Value::Null,
    }
}
