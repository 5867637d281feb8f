//! Owns: [`PropertiesCache`], a shard's most recent distinct `client-properties` as a
//! connection keeps them (encoded), so that the connections of one client library and
//! version — which send the same bytes — share one allocation (issue 23: ~180 bytes of
//! every subscriber were its own copy of the same table).
//!
//! Does not: decode or judge the properties, or keep a table any connection still uses
//! alive beyond its place in the cache (a connection holds its own reference).

use bytes::{Bytes, BytesMut};

use crate::protocol::FieldTable;

/// Distinct encodings kept (a new one pushes out the least recently used).
const KEPT: usize = 16;

/// The recent encodings, most recently used first.
#[derive(Default)]
pub struct PropertiesCache {
    recent: Vec<Bytes>,
    scratch: BytesMut,
}

impl PropertiesCache {
    /// `properties` encoded: an encoding already kept is shared (a reference to the same
    /// bytes), a new one is kept in an allocation of its own.
    pub fn intern(&mut self, properties: &FieldTable) -> Bytes {
        self.scratch.clear();
        properties.encode(&mut self.scratch);
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

    fn props(product: &str) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("product", FieldValue::LongStr(product.into()));
        t
    }

    /// Equal tables share one allocation; a different one gets its own; the least
    /// recently used is forgotten past the bound, not the one just used.
    #[test]
    fn equal_properties_share_one_allocation() {
        let mut cache = PropertiesCache::default();
        let a = cache.intern(&props("lib-a"));
        let again = cache.intern(&props("lib-a"));
        assert_eq!(a, again);
        assert_eq!(a.as_ptr(), again.as_ptr(), "the same bytes, not a copy");
        let b = cache.intern(&props("lib-b"));
        assert_ne!(a.as_ptr(), b.as_ptr());
        for i in 0..KEPT - 1 {
            cache.intern(&props(&format!("other-{i}")));
            // lib-a stays the most recently used of the two.
            cache.intern(&props("lib-a"));
        }
        assert_eq!(cache.intern(&props("lib-a")).as_ptr(), a.as_ptr());
        assert_ne!(
            cache.intern(&props("lib-b")).as_ptr(),
            b.as_ptr(),
            "lib-b was forgotten"
        );
        assert!(cache.recent.len() <= KEPT);
        // What a connection keeps decodes to what it sent.
        let mut r = crate::protocol::codec::Reader::new(a);
        assert_eq!(FieldTable::decode(&mut r).ok(), Some(props("lib-a")));
    }
}
