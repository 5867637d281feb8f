//! Owns: the `x-federation-upstream` exchange type, which a RabbitMQ downstream's
//! federation link declares on its upstream (`federation: X -> NODE A`, bound from `X`
//! by `exchange.bind` and to the link's queue with key "") — its declare arguments
//! (`x-max-hops`, required and a long; `x-downstream-name` and `x-downstream-vhost`,
//! long strings that older downstreams leave out), their validation and equivalence on
//! a redeclare with RabbitMQ's rules, and [`HopFilter`], the test a message passes
//! before the exchange routes it like fanout.
//!
//! Does not: route (`routes` does, with the filter in its matcher), decode message
//! properties (the route's `LazyHeaders` does, only for this type), or read
//! `x-received-from` itself (`model::hops` owns that format).

use bytes::Bytes;

use crate::model::hops::{self, DOWNSTREAM_NAME_ARG, DOWNSTREAM_VHOST_ARG, MAX_HOPS_ARG};
use crate::protocol::{FieldTable, FieldValue};

/// The type name in `exchange.declare`.
pub const TYPE_NAME: &str = "x-federation-upstream";

/// Which messages an `x-federation-upstream` exchange passes on: those that have made
/// fewer than `x-max-hops` hops and have not been in the downstream's node and vhost
/// (RabbitMQ's `rabbit_federation_upstream_exchange:route`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HopFilter {
    max_hops: u16,
    /// The downstream's node and vhost; `None` when either argument is missing or not
    /// a long string, and then no hop can match them (RabbitMQ's `unknown`).
    downstream: Option<(Bytes, Bytes)>,
}

impl HopFilter {
    /// The filter of an exchange declared with `args`, which [`validate`] accepted. A
    /// negative `x-max-hops` passes only messages without a trail, as RabbitMQ's
    /// comparison does; one above 65,535 is taken as 65,535 (no AMQP frame holds a
    /// trail that long). Were `x-max-hops` missing, the same as 0.
    pub fn from_arguments(args: &FieldTable) -> HopFilter {
        let max_hops = match args.get(MAX_HOPS_ARG) {
            Some(FieldValue::I64(n)) => u16::try_from((*n).max(0)).unwrap_or(u16::MAX),
            _ => 0,
        };
        let text = |key: &str| match args.get(key) {
            Some(FieldValue::LongStr(s)) => Some(s.clone().into_bytes()),
            _ => None,
        };
        let downstream = text(DOWNSTREAM_NAME_ARG).zip(text(DOWNSTREAM_VHOST_ARG));
        HopFilter {
            max_hops,
            downstream,
        }
    }

    /// Whether a message with these headers is routed on.
    pub fn allows(&self, headers: Option<&FieldTable>) -> bool {
        match &self.downstream {
            Some((node, vhost)) => hops::should_forward(headers, self.max_hops, node, vhost),
            None => hops::trail(headers, hops::RECEIVED_FROM)
                .is_none_or(|trail| trail.len() < usize::from(self.max_hops)),
        }
    }
}

/// Why an `x-federation-upstream` declaration is refused (406 PRECONDITION_FAILED).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamArgError {
    /// `x-max-hops` is absent (`rabbit_federation_util:validate_arg`).
    Missing,
    /// `x-max-hops` is not a long (`l`).
    NotLong,
    /// A redeclare names another `x-max-hops` than the exchange has
    /// (`rabbit_misc:assert_args_equivalence`); `None` is an absent argument.
    Inequivalent {
        received: Option<ArgShown>,
        current: Option<ArgShown>,
    },
}

/// An argument's value with its RabbitMQ type name, for an error text; displays as
/// RabbitMQ prints it: "the value 'V' of type 'T'" (a string as its text, a number or
/// boolean as Erlang prints it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgShown {
    type_name: &'static str,
    value: String,
}

impl ArgShown {
    pub fn of(value: &FieldValue) -> ArgShown {
        let text = match value {
            FieldValue::LongStr(_) | FieldValue::Bytes(_) => value
                .as_bytes()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
            FieldValue::Bool(b) => b.to_string(),
            FieldValue::F32(x) => format!("{x:?}"),
            FieldValue::F64(x) => format!("{x:?}"),
            FieldValue::Timestamp(t) => t.to_string(),
            other => other
                .as_i64()
                .map_or_else(|| format!("{other:?}"), |n| n.to_string()),
        };
        ArgShown {
            type_name: value.rabbit_type_name(),
            value: text,
        }
    }
}

impl std::fmt::Display for ArgShown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the value '{}' of type '{}'", self.value, self.type_name)
    }
}

/// Checks a new `x-federation-upstream` exchange's arguments, as RabbitMQ's `validate`.
pub fn validate(args: &FieldTable) -> Result<(), UpstreamArgError> {
    match args.get(MAX_HOPS_ARG) {
        Some(FieldValue::I64(_)) => Ok(()),
        None => Err(UpstreamArgError::Missing),
        Some(_) => Err(UpstreamArgError::NotLong),
    }
}

/// Checks a redeclare's arguments against the exchange's: `x-max-hops` must be the same
/// (integers of any width compare by value, as RabbitMQ's type classes do).
pub fn check_equivalent(
    current: &FieldTable,
    received: &FieldTable,
) -> Result<(), UpstreamArgError> {
    let (c, r) = (current.get(MAX_HOPS_ARG), received.get(MAX_HOPS_ARG));
    let same = match (c, r) {
        (None, None) => true,
        (Some(c), Some(r)) => match (c.as_i64(), r.as_i64()) {
            (Some(m), Some(n)) => m == n,
            _ => c == r,
        },
        _ => false,
    };
    if same {
        return Ok(());
    }
    Err(UpstreamArgError::Inequivalent {
        received: r.map(ArgShown::of),
        current: c.map(ArgShown::of),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hops::{prepend_received_from, ReceivedFrom};
    use crate::protocol::LongStr;

    fn args(max_hops: Option<FieldValue>, name: Option<&str>, vhost: Option<&str>) -> FieldTable {
        let mut t = FieldTable::new();
        if let Some(v) = max_hops {
            t.insert(MAX_HOPS_ARG, v);
        }
        if let Some(n) = name {
            t.insert(DOWNSTREAM_NAME_ARG, FieldValue::LongStr(LongStr::from(n)));
        }
        if let Some(v) = vhost {
            t.insert(DOWNSTREAM_VHOST_ARG, FieldValue::LongStr(LongStr::from(v)));
        }
        t
    }

    fn seen(trail: &[(&str, &str)]) -> FieldTable {
        let mut headers = None;
        for &(node, vhost) in trail.iter().rev() {
            headers = Some(prepend_received_from(
                headers,
                &ReceivedFrom {
                    uri: "amqp://h",
                    exchange: "x",
                    redelivered: false,
                    cluster_name: Some(node),
                    vhost,
                },
            ));
        }
        headers.unwrap_or_default()
    }

    #[test]
    fn filters_on_hops_and_the_downstream() {
        let f = HopFilter::from_arguments(&args(Some(FieldValue::I64(2)), Some("a"), Some("/")));
        assert!(f.allows(None));
        assert!(f.allows(Some(&FieldTable::new())));
        assert!(f.allows(Some(&seen(&[("b", "/")]))));
        assert!(
            !f.allows(Some(&seen(&[("b", "/"), ("c", "/")]))),
            "hops == max"
        );
        assert!(!f.allows(Some(&seen(&[("a", "/")]))), "been at a /");
        assert!(f.allows(Some(&seen(&[("a", "other")]))), "a, another vhost");
    }

    #[test]
    fn without_downstream_arguments_only_hops_count() {
        for (name, vhost) in [(None, Some("/")), (Some("a"), None), (None, None)] {
            let f = HopFilter::from_arguments(&args(Some(FieldValue::I64(2)), name, vhost));
            assert!(f.allows(Some(&seen(&[("a", "/")]))));
            assert!(!f.allows(Some(&seen(&[("a", "/"), ("a", "/")]))));
        }
        let mut bytes_name = args(Some(FieldValue::I64(5)), None, Some("/"));
        bytes_name.insert(
            DOWNSTREAM_NAME_ARG,
            FieldValue::Bytes(Bytes::from_static(b"a")),
        );
        let f = HopFilter::from_arguments(&bytes_name);
        assert!(
            f.allows(Some(&seen(&[("a", "/")]))),
            "a binary name is not a longstr"
        );
    }

    #[test]
    fn odd_hop_counts() {
        let zero = HopFilter::from_arguments(&args(Some(FieldValue::I64(-1)), None, None));
        assert!(zero.allows(None));
        assert!(!zero.allows(Some(&seen(&[("b", "/")]))));
        let huge = HopFilter::from_arguments(&args(Some(FieldValue::I64(1 << 40)), None, None));
        assert!(huge.allows(Some(&seen(&[("b", "/"), ("c", "/")]))));
    }

    #[test]
    fn validation_and_equivalence() {
        assert_eq!(
            validate(&args(Some(FieldValue::I64(1)), None, None)),
            Ok(())
        );
        assert_eq!(
            validate(&args(None, Some("a"), Some("/"))),
            Err(UpstreamArgError::Missing)
        );
        assert_eq!(
            validate(&args(Some(FieldValue::I32(1)), None, None)),
            Err(UpstreamArgError::NotLong)
        );
        let one = args(Some(FieldValue::I64(1)), None, None);
        assert_eq!(
            check_equivalent(&one, &args(Some(FieldValue::I16(1)), None, None)),
            Ok(())
        );
        assert_eq!(
            check_equivalent(&one, &args(None, None, None)),
            Err(UpstreamArgError::Inequivalent {
                received: None,
                current: Some(ArgShown::of(&FieldValue::I64(1)))
            })
        );
        assert!(check_equivalent(&one, &args(Some(FieldValue::I64(2)), None, None)).is_err());
    }
}
