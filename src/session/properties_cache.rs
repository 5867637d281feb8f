//! Owns: [`PropertiesCache`], a shard's most recent distinct `client-properties` as a
//! connection keeps them (encoded), so that the connections of one client library and
//! version — which send the same bytes but for their `connection_name` — share one
//! allocation (issue 23: ~180 bytes of every subscriber were its own copy of the same
//! table). A `connection_name` is kept apart, with the connection ([`Interned::own`]).
//!
//! Does not: decode or judge the properties, or keep a table any connection still uses
//! alive beyond its place in the cache (a connection holds its own reference).

use bytes::{Bytes, BytesMut};

use crate::protocol::FieldTable;

/// Distinct encodings kept (a new one pushes out the least recently used).
const KEPT: usize = 16;

/// The key a connection keeps apart from the shared part.
const OWN_KEY: &[u8] = b"connection_name";

/// A connection's `client-properties`: the part it may share, and its own entries (its
/// `connection_name`), each an encoded table.
pub struct Interned {
    pub shared: Bytes,
    pub own: Option<Box<[u8]>>,
}

/// The recent encodings, most recently used first.
#[derive(Default)]
pub struct PropertiesCache {
    recent: Vec<Bytes>,
    scratch: BytesMut,
}

impl PropertiesCache {
    /// `properties` encoded: the entries but its `connection_name` as one table, shared
    /// when an encoding already kept has the same bytes (a reference to them) and kept in
    /// an allocation of its own otherwise; the `connection_name` as a table of its own.
    pub fn intern(&mut self, properties: &FieldTable) -> Interned {
        let own_entry = |(k, _): &(
            &crate::protocol::ShortStr,
            &crate::protocol::table::FieldValue,
        )| { k.as_bytes() == OWN_KEY };
        let own = if properties.iter().any(|e| own_entry(&e)) {
            let split = |keep_own: bool| -> FieldTable {
                properties
                    .iter()
                    .filter(|e| own_entry(e) == keep_own)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let mut own = BytesMut::new();
            split(true).encode(&mut own);
            self.scratch.clear();
            split(false).encode(&mut self.scratch);
            Some(own.to_vec().into_boxed_slice())
        } else {
            self.scratch.clear();
            properties.encode(&mut self.scratch);
            None
        };
        Interned {
            shared: self.shared(),
            own,
        }
    }

    /// The encoding in `scratch`, shared with a kept one when equal.
    fn shared(&mut self) -> Bytes {
        let encoded = &self.scratch[..];
        if let Some(at) = self.recent.iter().position(|b| b[..] == *encoded) {
            let found = self.recent.remove(at);
            self.recent.insert(0, found.clone());
            return found;
        }
        let fresh = Bytes::copy_from_slice(encoded);
        if self.recent.len() == KEPT {
            self.recent.pop();
        }
        self.recent.insert(0, fresh.clone());
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::table::FieldValue;

    fn props(product: &str, name: Option<&str>) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("product", FieldValue::LongStr(product.into()));
        if let Some(name) = name {
            t.insert("connection_name", FieldValue::LongStr(name.into()));
        }
        t.insert("platform", FieldValue::LongStr("Rust".into()));
        t
    }

    fn decode(b: &[u8]) -> FieldTable {
        let mut r = crate::protocol::codec::Reader::new(Bytes::copy_from_slice(b));
        FieldTable::decode(&mut r).unwrap_or_default()
    }

    /// Equal tables share one allocation, also when their connection names differ (each
    /// keeps its own); a different one gets its own; the least recently used is
    /// forgotten past the bound, not the one just used.
    #[test]
    fn equal_properties_share_one_allocation() {
        let mut cache = PropertiesCache::default();
        let a = cache.intern(&props("lib-a", Some("sub-1")));
        let again = cache.intern(&props("lib-a", Some("sub-2")));
        assert_eq!(
            a.shared.as_ptr(),
            again.shared.as_ptr(),
            "the same bytes, not a copy"
        );
        assert_eq!(decode(&a.shared), props("lib-a", None));
        assert_eq!(
            decode(a.own.as_deref().unwrap_or_default()),
            FieldTable::from(vec![(
                "connection_name".into(),
                FieldValue::LongStr("sub-1".into())
            )])
        );
        let unnamed = cache.intern(&props("lib-a", None));
        assert_eq!(unnamed.shared.as_ptr(), a.shared.as_ptr());
        assert!(unnamed.own.is_none());
        let b = cache.intern(&props("lib-b", None)).shared;
        assert_ne!(a.shared.as_ptr(), b.as_ptr());
        for i in 0..KEPT - 1 {
            cache.intern(&props(&format!("other-{i}"), None));
            // lib-a stays the most recently used of the two.
            cache.intern(&props("lib-a", None));
        }
        assert_eq!(
            cache.intern(&props("lib-a", None)).shared.as_ptr(),
            a.shared.as_ptr()
        );
        assert_ne!(
            cache.intern(&props("lib-b", None)).shared.as_ptr(),
            b.as_ptr(),
            "lib-b was forgotten"
        );
        assert!(cache.recent.len() <= KEPT);
    }
}
