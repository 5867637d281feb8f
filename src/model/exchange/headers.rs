//! Owns: the headers-exchange match rule — `x-match` = `all`/`any` (and the `-with-x`
//! variants) over the binding's arguments against a message's `headers` table.
//!
//! Also [`LazyHeaders`]: a message's headers table, decoded only when a headers exchange
//! on the route needs it, and at most once however many do.
//!
//! Does not: decode properties (the caller's closure does).

use crate::protocol::{FieldTable, FieldValue};

/// A compiled headers binding.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadersRule {
    match_all: bool,
    include_x: bool,
    pairs: Vec<(String, FieldValue)>,
}

impl HeadersRule {
    /// Compiles a binding's arguments. Unknown `x-match` values fall back to `all`, as
    /// RabbitMQ validates them at bind time (the coordinator rejects them with 406).
    pub fn compile(arguments: &FieldTable) -> HeadersRule {
        let mode = arguments
            .get("x-match")
            .and_then(field_text)
            .unwrap_or_else(|| "all".to_owned());
        let include_x = mode.ends_with("-with-x");
        let match_all = !mode.starts_with("any");
        let pairs = arguments
            .iter()
            .filter(|(k, _)| include_x || !k.as_bytes().starts_with(b"x-"))
            .filter(|(k, _)| k.as_bytes() != b"x-match")
            .map(|(k, v)| (k.as_str_lossy().into_owned(), v.clone()))
            .collect();
        HeadersRule {
            match_all,
            include_x,
            pairs,
        }
    }

    /// Whether `x-match` holds one of the accepted values.
    pub fn valid_mode(arguments: &FieldTable) -> bool {
        match arguments.get("x-match") {
            None => true,
            Some(v) => matches!(
                field_text(v).as_deref(),
                Some("all" | "any" | "all-with-x" | "any-with-x")
            ),
        }
    }

    /// Does a message with these headers match?
    pub fn matches(&self, headers: Option<&FieldTable>) -> bool {
        let empty = FieldTable::default();
        let headers = headers.unwrap_or(&empty);
        let test = |(key, want): &(String, FieldValue)| match headers.get(key) {
            None => false,
            Some(_) if matches!(want, FieldValue::Void) => true,
            Some(have) => have == want,
        };
        if self.pairs.is_empty() {
            return self.match_all;
        }
        if self.match_all {
            self.pairs.iter().all(test)
        } else {
            self.pairs.iter().any(test)
        }
    }
}

/// A message's headers, worked out on first use by the caller's closure and kept for the
/// other headers exchanges of the same route.
pub struct LazyHeaders<F> {
    make: Option<F>,
    value: Option<FieldTable>,
}

impl<F: FnOnce() -> Option<FieldTable>> LazyHeaders<F> {
    pub fn new(make: F) -> Self {
        LazyHeaders {
            make: Some(make),
            value: None,
        }
    }

    /// The headers table, if the message has one.
    pub fn get(&mut self) -> Option<&FieldTable> {
        if let Some(make) = self.make.take() {
            self.value = make();
        }
        self.value.as_ref()
    }
}

fn field_text(value: &FieldValue) -> Option<String> {
    match value {
        FieldValue::LongStr(s) => Some(s.as_str_lossy().into_owned()),
        FieldValue::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LongStr;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        FieldTable::of(entries)
    }

    fn s(text: &str) -> FieldValue {
        FieldValue::LongStr(LongStr::from(text))
    }

    #[test]
    fn all_requires_every_pair() {
        let rule = HeadersRule::compile(&table(&[
            ("x-match", s("all")),
            ("a", s("1")),
            ("b", FieldValue::I32(2)),
        ]));
        assert!(rule.matches(Some(&table(&[("a", s("1")), ("b", FieldValue::I32(2))]))));
        assert!(!rule.matches(Some(&table(&[("a", s("1"))]))));
        assert!(!rule.matches(None));
    }

    #[test]
    fn any_requires_one_pair_and_void_means_present() {
        let rule = HeadersRule::compile(&table(&[
            ("x-match", s("any")),
            ("a", s("1")),
            ("b", FieldValue::Void),
        ]));
        assert!(rule.matches(Some(&table(&[("b", s("whatever"))]))));
        assert!(rule.matches(Some(&table(&[("a", s("1"))]))));
        assert!(!rule.matches(Some(&table(&[("a", s("2"))]))));
    }

    #[test]
    fn x_keys_ignored_unless_with_x() {
        let rule = HeadersRule::compile(&table(&[("x-match", s("all")), ("x-k", s("v"))]));
        assert!(rule.matches(None));
        let rule = HeadersRule::compile(&table(&[("x-match", s("all-with-x")), ("x-k", s("v"))]));
        assert!(!rule.matches(None));
        assert!(rule.matches(Some(&table(&[("x-k", s("v"))]))));
        assert!(HeadersRule::valid_mode(&table(&[("x-match", s("any"))])));
        assert!(!HeadersRule::valid_mode(&table(&[("x-match", s("some"))])));
    }
}
