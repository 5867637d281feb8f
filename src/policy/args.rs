//! Owns: reading policy settings out of `queue.declare` arguments — the typed accessors
//! that accept exactly the value shapes clients send (any integer type, a double where a
//! rate may be fractional, a long string for names, a boolean) and the [`ArgError`] that
//! names the offending argument.
//!
//! Does not: decide what a setting means (each policy module does) or map errors to
//! reply codes (the control plane turns an `ArgError` into 406 PRECONDITION_FAILED).

use std::fmt;

use crate::protocol::{FieldTable, FieldValue};

/// A declare argument with a value the broker refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgError {
    pub argument: String,
    pub reason: String,
}

impl ArgError {
    pub fn new(argument: &str, reason: impl Into<String>) -> ArgError {
        ArgError {
            argument: argument.to_owned(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid arg '{}': {}", self.argument, self.reason)
    }
}

/// A non-negative integer argument, if present.
pub fn non_negative(args: &FieldTable, key: &str) -> Result<Option<u64>, ArgError> {
    match args.get(key) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Ok(Some(n as u64)),
            Some(n) => Err(ArgError::new(
                key,
                format!("expected a non-negative integer, got {n}"),
            )),
            None => Err(ArgError::new(
                key,
                format!("expected a non-negative integer, got {}", describe(v)),
            )),
        },
    }
}

/// A non-negative number (integer or floating point), if present.
pub fn non_negative_number(args: &FieldTable, key: &str) -> Result<Option<f64>, ArgError> {
    let Some(v) = args.get(key) else {
        return Ok(None);
    };
    let n = match v {
        FieldValue::F32(x) => f64::from(*x),
        FieldValue::F64(x) => *x,
        FieldValue::Decimal { scale, value } => f64::from(*value) / 10f64.powi(i32::from(*scale)),
        other => match other.as_i64() {
            Some(n) => n as f64,
            None => {
                return Err(ArgError::new(
                    key,
                    format!("expected a non-negative number, got {}", describe(other)),
                ))
            }
        },
    };
    if !n.is_finite() || n < 0.0 {
        return Err(ArgError::new(
            key,
            format!("expected a non-negative number, got {n}"),
        ));
    }
    Ok(Some(n))
}

/// A boolean argument, if present.
pub fn boolean(args: &FieldTable, key: &str) -> Result<Option<bool>, ArgError> {
    match args.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| ArgError::new(key, format!("expected a boolean, got {}", describe(v)))),
    }
}

/// One of `choices` (compared without regard to ASCII case), if present.
pub fn choice<T: Copy>(
    args: &FieldTable,
    key: &str,
    choices: &[(&str, T)],
) -> Result<Option<T>, ArgError> {
    let Some(v) = args.get(key) else {
        return Ok(None);
    };
    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
    let Some(text) = v.as_str() else {
        return Err(ArgError::new(
            key,
            format!("expected one of {names:?}, got {}", describe(v)),
        ));
    };
    choices
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(text))
        .map(|(_, value)| Some(*value))
        .ok_or_else(|| ArgError::new(key, format!("expected one of {names:?}, got '{text}'")))
}

/// A short description of a value for error texts.
fn describe(v: &FieldValue) -> String {
    match v {
        FieldValue::LongStr(_) | FieldValue::Bytes(_) => match v.as_str() {
            Some(s) => format!("'{s}'"),
            None => "a byte string".to_owned(),
        },
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::F32(x) => x.to_string(),
        FieldValue::F64(x) => x.to_string(),
        FieldValue::Table(_) => "a table".to_owned(),
        FieldValue::Array(_) => "an array".to_owned(),
        FieldValue::Void => "void".to_owned(),
        FieldValue::Timestamp(_) => "a timestamp".to_owned(),
        other => other
            .as_i64()
            .map_or_else(|| "a value of another type".to_owned(), |n| n.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LongStr;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        FieldTable::of(entries)
    }

    #[test]
    fn integers_numbers_booleans_and_choices() {
        let t = table(&[
            ("n", FieldValue::I32(5)),
            ("neg", FieldValue::I64(-1)),
            ("f", FieldValue::F64(2.5)),
            ("s", FieldValue::LongStr(LongStr::from("Cycle"))),
            ("b", FieldValue::Bool(true)),
        ]);
        assert_eq!(non_negative(&t, "n"), Ok(Some(5)));
        assert_eq!(non_negative(&t, "missing"), Ok(None));
        let e = non_negative(&t, "neg").expect_err("negative");
        assert_eq!(e.argument, "neg");
        assert!(non_negative(&t, "f").is_err());
        assert_eq!(non_negative_number(&t, "f"), Ok(Some(2.5)));
        assert_eq!(non_negative_number(&t, "n"), Ok(Some(5.0)));
        assert!(non_negative_number(&t, "neg").is_err());
        assert!(non_negative_number(&t, "s").is_err());
        assert_eq!(boolean(&t, "b"), Ok(Some(true)));
        assert!(boolean(&t, "n").is_err());
        let choices = [("delete", 1), ("cycle", 2)];
        assert_eq!(choice(&t, "s", &choices), Ok(Some(2)));
        assert!(choice(&t, "n", &choices).is_err());
        let t = table(&[("s", FieldValue::LongStr(LongStr::from("ring")))]);
        let e = choice(&t, "s", &choices).expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "invalid arg 's': expected one of [\"delete\", \"cycle\"], got 'ring'"
        );
    }
}
