//! AMQP field tables and field values, with RabbitMQ's 0-9-1 errata type
//! codes (the set every RabbitMQ client actually sends).
//!
//! Owns: [`FieldTable`] (ordered, duplicates preserved as sent) and
//! [`FieldValue`], their decoding from a [`Reader`] and their byte-exact
//! re-encoding.
//! Does not: interpret any key (`x-message-ttl`, `x-match`, … belong to the
//! model); copies no string or byte-array payloads (they are `Bytes` slices of
//! the frame).

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{
    put_long_bytes, put_shortstr, DecodeError, LongStr, Reader, ShortStr, MAX_NESTING,
};

/// One value in a field table or field array.
///
/// The type octet of each variant (RabbitMQ errata for 0-9-1) is given in its
/// doc. Note that `s` is a *signed* 16-bit integer and `i`/`I` are
/// unsigned/signed 32-bit, unlike the original 0-9-1 grammar.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    /// `t`: boolean octet (any non-zero octet decodes as `true`).
    Bool(bool),
    /// `b`: signed 8-bit.
    I8(i8),
    /// `B`: unsigned 8-bit.
    U8(u8),
    /// `s`: signed 16-bit.
    I16(i16),
    /// `u`: unsigned 16-bit.
    U16(u16),
    /// `I`: signed 32-bit.
    I32(i32),
    /// `i`: unsigned 32-bit.
    U32(u32),
    /// `l`: signed 64-bit.
    I64(i64),
    /// `f`: IEEE-754 single.
    F32(f32),
    /// `d`: IEEE-754 double.
    F64(f64),
    /// `D`: decimal, `value / 10^scale`.
    Decimal {
        /// Number of decimal places.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `S`: long string.
    LongStr(LongStr),
    /// `x`: byte array (long length + bytes).
    Bytes(Bytes),
    /// `A`: field array (long byte-length + values).
    Array(Vec<FieldValue>),
    /// `T`: timestamp, seconds since the epoch.
    Timestamp(u64),
    /// `F`: nested field table.
    Table(FieldTable),
    /// `V`: no value.
    Void,
}

impl FieldValue {
    /// The type octet this value is encoded with.
    pub fn type_octet(&self) -> u8 {
        match self {
            FieldValue::Bool(_) => b't',
            FieldValue::I8(_) => b'b',
            FieldValue::U8(_) => b'B',
            FieldValue::I16(_) => b's',
            FieldValue::U16(_) => b'u',
            FieldValue::I32(_) => b'I',
            FieldValue::U32(_) => b'i',
            FieldValue::I64(_) => b'l',
            FieldValue::F32(_) => b'f',
            FieldValue::F64(_) => b'd',
            FieldValue::Decimal { .. } => b'D',
            FieldValue::LongStr(_) => b'S',
            FieldValue::Bytes(_) => b'x',
            FieldValue::Array(_) => b'A',
            FieldValue::Timestamp(_) => b'T',
            FieldValue::Table(_) => b'F',
            FieldValue::Void => b'V',
        }
    }

    /// The name RabbitMQ gives this value's type (`rabbit_binary_parser`), as its error
    /// texts show it: `"expected integer, got longstr"`, `{unacceptable_type,bool}`.
    pub fn rabbit_type_name(&self) -> &'static str {
        match self {
            FieldValue::Bool(_) => "bool",
            FieldValue::I8(_) => "byte",
            FieldValue::U8(_) => "unsignedbyte",
            FieldValue::I16(_) => "short",
            FieldValue::U16(_) => "unsignedshort",
            FieldValue::I32(_) => "signedint",
            FieldValue::U32(_) => "unsignedint",
            FieldValue::I64(_) => "long",
            FieldValue::F32(_) => "float",
            FieldValue::F64(_) => "double",
            FieldValue::Decimal { .. } => "decimal",
            FieldValue::LongStr(_) => "longstr",
            FieldValue::Bytes(_) => "binary",
            FieldValue::Array(_) => "array",
            FieldValue::Timestamp(_) => "timestamp",
            FieldValue::Table(_) => "table",
            FieldValue::Void => "void",
        }
    }

    /// The boolean, if this is a `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            FieldValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Any integer type (`b B s u I i l`) widened to `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            FieldValue::I8(v) => Some(i64::from(*v)),
            FieldValue::U8(v) => Some(i64::from(*v)),
            FieldValue::I16(v) => Some(i64::from(*v)),
            FieldValue::U16(v) => Some(i64::from(*v)),
            FieldValue::I32(v) => Some(i64::from(*v)),
            FieldValue::U32(v) => Some(i64::from(*v)),
            FieldValue::I64(v) => Some(*v),
            _ => None,
        }
    }

    /// The raw bytes of a long string (`S`) or byte array (`x`).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            FieldValue::LongStr(s) => Some(s.as_bytes()),
            FieldValue::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The text of a long string (`S`) or byte array (`x`), if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The nested table, if this is a `Table`.
    pub fn as_table(&self) -> Option<&FieldTable> {
        match self {
            FieldValue::Table(t) => Some(t),
            _ => None,
        }
    }

    /// The values, if this is an `Array`.
    pub fn as_array(&self) -> Option<&[FieldValue]> {
        match self {
            FieldValue::Array(a) => Some(a),
            _ => None,
        }
    }

    fn decode(r: &mut Reader, depth: usize) -> Result<FieldValue, DecodeError> {
        const W: &str = "field value";
        let kind = r.u8("field value type")?;
        Ok(match kind {
            b't' => FieldValue::Bool(r.u8(W)? != 0),
            b'b' => FieldValue::I8(i8::from_be_bytes([r.u8(W)?])),
            b'B' => FieldValue::U8(r.u8(W)?),
            b's' => FieldValue::I16(r.u16(W)? as i16),
            b'u' => FieldValue::U16(r.u16(W)?),
            b'I' => FieldValue::I32(r.u32(W)? as i32),
            b'i' => FieldValue::U32(r.u32(W)?),
            b'l' => FieldValue::I64(r.u64(W)? as i64),
            b'f' => FieldValue::F32(f32::from_bits(r.u32(W)?)),
            b'd' => FieldValue::F64(f64::from_bits(r.u64(W)?)),
            b'D' => FieldValue::Decimal {
                scale: r.u8(W)?,
                value: r.u32(W)?,
            },
            b'S' => FieldValue::LongStr(r.longstr("field value longstr")?),
            b'x' => {
                let len = r.u32("field value byte array")?;
                FieldValue::Bytes(r.bytes(len as usize, "field value byte array")?)
            }
            b'A' => {
                let len = r.u32("field array")?;
                let mut inner = Reader::new(r.bytes(len as usize, "field array")?);
                let depth = deeper(depth)?;
                let mut values = Vec::new();
                while inner.remaining() > 0 {
                    values.push(FieldValue::decode(&mut inner, depth)?);
                }
                FieldValue::Array(values)
            }
            b'T' => FieldValue::Timestamp(r.u64(W)?),
            b'F' => FieldValue::Table(FieldTable::decode_nested(r, "nested field table", depth)?),
            b'V' => FieldValue::Void,
            other => return Err(DecodeError::BadFieldType(other)),
        })
    }

    /// Checks one value as [`FieldValue::decode`] reads it, with the same errors,
    /// without building it (no allocation).
    fn skip(r: &mut Reader, depth: usize) -> Result<(), DecodeError> {
        const W: &str = "field value";
        let kind = r.u8("field value type")?;
        match kind {
            b't' | b'b' | b'B' => {
                r.u8(W)?;
            }
            b's' | b'u' => {
                r.u16(W)?;
            }
            b'I' | b'i' | b'f' => {
                r.u32(W)?;
            }
            b'l' | b'd' | b'T' => {
                r.u64(W)?;
            }
            b'D' => {
                r.u8(W)?;
                r.u32(W)?;
            }
            b'S' => {
                r.longstr("field value longstr")?;
            }
            b'x' => {
                let len = r.u32("field value byte array")?;
                r.bytes(len as usize, "field value byte array")?;
            }
            b'A' => {
                let len = r.u32("field array")?;
                let mut inner = Reader::new(r.bytes(len as usize, "field array")?);
                let depth = deeper(depth)?;
                while inner.remaining() > 0 {
                    FieldValue::skip(&mut inner, depth)?;
                }
            }
            b'F' => FieldTable::skip_nested(r, "nested field table", depth)?,
            b'V' => {}
            other => return Err(DecodeError::BadFieldType(other)),
        }
        Ok(())
    }

    /// Appends the value: its type octet, then the value.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.type_octet());
        match self {
            FieldValue::Bool(b) => out.put_u8(u8::from(*b)),
            FieldValue::I8(v) => out.put_i8(*v),
            FieldValue::U8(v) => out.put_u8(*v),
            FieldValue::I16(v) => out.put_i16(*v),
            FieldValue::U16(v) => out.put_u16(*v),
            FieldValue::I32(v) => out.put_i32(*v),
            FieldValue::U32(v) => out.put_u32(*v),
            FieldValue::I64(v) => out.put_i64(*v),
            FieldValue::F32(v) => out.put_u32(v.to_bits()),
            FieldValue::F64(v) => out.put_u64(v.to_bits()),
            FieldValue::Decimal { scale, value } => {
                out.put_u8(*scale);
                out.put_u32(*value);
            }
            FieldValue::LongStr(s) => put_long_bytes(out, s.as_bytes()),
            FieldValue::Bytes(b) => put_long_bytes(out, b),
            FieldValue::Array(values) => {
                let len: usize = values.iter().map(FieldValue::encoded_len).sum();
                out.put_u32(len as u32);
                for v in values {
                    v.encode(out);
                }
            }
            FieldValue::Timestamp(v) => out.put_u64(*v),
            FieldValue::Table(t) => t.encode(out),
            FieldValue::Void => {}
        }
    }

    /// Encoded size including the type octet.
    fn encoded_len(&self) -> usize {
        1 + match self {
            FieldValue::Bool(_) | FieldValue::I8(_) | FieldValue::U8(_) => 1,
            FieldValue::I16(_) | FieldValue::U16(_) => 2,
            FieldValue::I32(_) | FieldValue::U32(_) | FieldValue::F32(_) => 4,
            FieldValue::I64(_) | FieldValue::F64(_) | FieldValue::Timestamp(_) => 8,
            FieldValue::Decimal { .. } => 5,
            FieldValue::LongStr(s) => 4 + s.len(),
            FieldValue::Bytes(b) => 4 + b.len(),
            FieldValue::Array(values) => {
                4 + values.iter().map(FieldValue::encoded_len).sum::<usize>()
            }
            FieldValue::Table(t) => t.encoded_len(),
            FieldValue::Void => 0,
        }
    }
}

fn deeper(depth: usize) -> Result<usize, DecodeError> {
    if depth >= MAX_NESTING {
        return Err(DecodeError::TooDeep { limit: MAX_NESTING });
    }
    Ok(depth + 1)
}

/// An AMQP field table: `(key, value)` pairs in wire order.
///
/// Duplicate keys are kept exactly as the peer sent them so that re-encoding
/// is byte-exact; [`FieldTable::get`] returns the first match (as RabbitMQ
/// does).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FieldTable(Vec<(ShortStr, FieldValue)>);

impl FieldTable {
    /// An empty table.
    pub fn new() -> Self {
        FieldTable(Vec::new())
    }

    /// The first value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.0
            .iter()
            .find(|(k, _)| k.as_bytes() == key.as_bytes())
            .map(|(_, v)| v)
    }

    /// Replaces the first value stored under `key`, or appends a new entry.
    pub fn insert(&mut self, key: impl Into<ShortStr>, value: FieldValue) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((key, value)),
        }
    }

    /// Entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&ShortStr, &FieldValue)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// `true` if the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of entries (duplicates counted).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The entries, in wire order.
    pub fn into_inner(self) -> Vec<(ShortStr, FieldValue)> {
        self.0
    }

    /// Reads a table: long byte-length, then `shortstr key, type octet, value`
    /// entries that must exactly fill that length.
    pub fn decode(r: &mut Reader) -> Result<FieldTable, DecodeError> {
        Self::decode_nested(r, "field table", 0)
    }

    pub(crate) fn decode_nested(
        r: &mut Reader,
        what: &'static str,
        depth: usize,
    ) -> Result<FieldTable, DecodeError> {
        let len = r.u32(what)?;
        let mut inner = Reader::new(r.bytes(len as usize, what)?);
        let depth = deeper(depth)?;
        let mut entries = Vec::new();
        while inner.remaining() > 0 {
            let key = inner.shortstr("field table key")?;
            let value = FieldValue::decode(&mut inner, depth)?;
            entries.push((key, value));
        }
        Ok(FieldTable(entries))
    }

    /// Checks a table exactly as [`FieldTable::decode`] reads it — the same errors for
    /// the same bytes — without building it: the publish path validates every headers
    /// table it stores and forwards, and keeps it raw.
    pub fn validate(r: &mut Reader) -> Result<(), DecodeError> {
        Self::skip_nested(r, "field table", 0)
    }

    fn skip_nested(r: &mut Reader, what: &'static str, depth: usize) -> Result<(), DecodeError> {
        let len = r.u32(what)?;
        let mut inner = Reader::new(r.bytes(len as usize, what)?);
        let depth = deeper(depth)?;
        while inner.remaining() > 0 {
            inner.shortstr("field table key")?;
            FieldValue::skip(&mut inner, depth)?;
        }
        Ok(())
    }

    /// Writes the table including its long length prefix.
    pub fn encode(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        out.reserve(len);
        out.put_u32((len - 4) as u32);
        for (k, v) in &self.0 {
            put_shortstr(out, k);
            v.encode(out);
        }
    }

    /// The same table in one allocation of its own. A decoded table's strings are
    /// slices of the frame it came in, so a table kept for longer than its frame (a
    /// connection's client-properties) would keep the whole read buffer that frame was
    /// cut from alive, unaccounted.
    pub fn detached(&self) -> FieldTable {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        // Decoding what was just encoded cannot fail (it decoded before, within the
        // same nesting bound); if it did, nothing is kept rather than the frame.
        FieldTable::decode(&mut Reader::new(out.freeze())).unwrap_or_default()
    }

    /// Bytes [`FieldTable::encode`] writes, including the 4-byte length prefix.
    pub fn encoded_len(&self) -> usize {
        4 + self
            .0
            .iter()
            .map(|(k, v)| 1 + k.len() + v.encoded_len())
            .sum::<usize>()
    }
}

impl FieldTable {
    /// A table of `entries` in order, a later key replacing an earlier one (as
    /// [`FieldTable::insert`] does): the tests' way of writing declare arguments.
    #[cfg(test)]
    pub fn of(entries: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in entries {
            t.insert(*k, v.clone());
        }
        t
    }
}

impl From<Vec<(ShortStr, FieldValue)>> for FieldTable {
    fn from(entries: Vec<(ShortStr, FieldValue)>) -> Self {
        FieldTable(entries)
    }
}

impl FromIterator<(ShortStr, FieldValue)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (ShortStr, FieldValue)>>(iter: I) -> Self {
        FieldTable(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a FieldTable {
    type Item = &'a (ShortStr, FieldValue);
    type IntoIter = std::slice::Iter<'a, (ShortStr, FieldValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_table_shares_nothing_with_its_frame() {
        let mut t = FieldTable::new();
        t.insert(
            "connection_name",
            FieldValue::LongStr(LongStr::from("orders")),
        );
        let mut nested = FieldTable::new();
        nested.insert("basic.nack", FieldValue::Bool(true));
        t.insert("capabilities", FieldValue::Table(nested));
        let mut wire = BytesMut::new();
        t.encode(&mut wire);
        wire.extend_from_slice(&[0u8; 4096]);
        let frame = wire.freeze();
        let decoded = FieldTable::decode(&mut Reader::new(frame.clone())).unwrap();
        let detached = decoded.detached();
        assert_eq!(detached, decoded);
        let range = frame.as_ptr_range();
        let name = detached
            .get("connection_name")
            .and_then(FieldValue::as_bytes);
        assert!(name.is_some_and(|n| !range.contains(&n.as_ptr())));
        let kept = decoded
            .get("connection_name")
            .and_then(FieldValue::as_bytes);
        assert!(
            kept.is_some_and(|n| range.contains(&n.as_ptr())),
            "decode slices"
        );
    }

    /// Decodes a single value from `bytes` (type octet first), checks it equals
    /// `expected`, and that re-encoding reproduces `bytes` exactly.
    fn check_value(bytes: &[u8], expected: FieldValue) {
        let mut r = Reader::new(Bytes::copy_from_slice(bytes));
        let v = FieldValue::decode(&mut r, 0).unwrap();
        assert_eq!(r.remaining(), 0, "value {expected:?} left bytes");
        assert_eq!(v, expected);
        let mut out = BytesMut::new();
        v.encode(&mut out);
        assert_eq!(&out[..], bytes, "re-encode of {expected:?}");
        assert_eq!(v.encoded_len(), bytes.len());
    }

    #[test]
    fn every_field_type_decodes_and_reencodes() {
        check_value(b"t\x01", FieldValue::Bool(true));
        check_value(b"t\x00", FieldValue::Bool(false));
        check_value(b"b\xfe", FieldValue::I8(-2));
        check_value(b"B\xfe", FieldValue::U8(254));
        check_value(b"s\xff\xfe", FieldValue::I16(-2));
        check_value(b"u\xff\xfe", FieldValue::U16(65534));
        check_value(b"I\xff\xff\xff\xfe", FieldValue::I32(-2));
        check_value(b"i\xff\xff\xff\xfe", FieldValue::U32(0xffff_fffe));
        check_value(b"l\xff\xff\xff\xff\xff\xff\xff\xfe", FieldValue::I64(-2));
        check_value(b"f\x3f\xc0\x00\x00", FieldValue::F32(1.5));
        check_value(b"d\x3f\xf8\x00\x00\x00\x00\x00\x00", FieldValue::F64(1.5));
        check_value(
            b"D\x02\x00\x00\x30\x39",
            FieldValue::Decimal {
                scale: 2,
                value: 12345,
            },
        );
        check_value(
            b"S\x00\x00\x00\x03abc",
            FieldValue::LongStr(LongStr::from("abc")),
        );
        check_value(
            b"x\x00\x00\x00\x02\x00\xff",
            FieldValue::Bytes(Bytes::from_static(b"\x00\xff")),
        );
        check_value(
            b"T\x00\x00\x00\x00\x65\x00\x00\x00",
            FieldValue::Timestamp(0x6500_0000),
        );
        check_value(b"V", FieldValue::Void);
        check_value(
            b"A\x00\x00\x00\x07b\x01S\x00\x00\x00\x00",
            FieldValue::Array(vec![
                FieldValue::I8(1),
                FieldValue::LongStr(LongStr::default()),
            ]),
        );
        check_value(
            b"F\x00\x00\x00\x04\x01kt\x01",
            FieldValue::Table(FieldTable::from(vec![(
                ShortStr::from("k"),
                FieldValue::Bool(true),
            )])),
        );
    }

    #[test]
    fn nested_table_in_array_in_table() {
        // { "a": [ { "k": I 7 }, V ] }
        let bytes: &[u8] = b"\x00\x00\x00\x14\x01aA\x00\x00\x00\x0d\
F\x00\x00\x00\x07\x01kI\x00\x00\x00\x07V";
        let mut r = Reader::new(Bytes::from_static(bytes));
        let t = FieldTable::decode(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        let arr = t.get("a").and_then(FieldValue::as_array).unwrap();
        let inner = arr[0].as_table().unwrap();
        assert_eq!(inner.get("k").and_then(FieldValue::as_i64), Some(7));
        assert_eq!(arr[1], FieldValue::Void);
        let mut out = BytesMut::new();
        t.encode(&mut out);
        assert_eq!(&out[..], bytes);
        assert_eq!(t.encoded_len(), bytes.len());
    }

    #[test]
    fn duplicates_are_preserved_and_get_returns_first() {
        let bytes: &[u8] = b"\x00\x00\x00\x08\x01kB\x01\x01kB\x02";
        let mut r = Reader::new(Bytes::from_static(bytes));
        let mut t = FieldTable::decode(&mut r).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.get("k"), Some(&FieldValue::U8(1)));
        let mut out = BytesMut::new();
        t.encode(&mut out);
        assert_eq!(&out[..], bytes);
        t.insert("k", FieldValue::U8(9));
        t.insert("z", FieldValue::Void);
        assert_eq!(t.get("k"), Some(&FieldValue::U8(9)));
        assert_eq!(t.len(), 3);
        assert_eq!(
            t.iter().last().map(|(k, _)| k.clone()),
            Some(ShortStr::from("z"))
        );
    }

    #[test]
    fn bad_input_is_rejected_without_panicking() {
        let decode = |b: &'static [u8]| FieldTable::decode(&mut Reader::new(Bytes::from_static(b)));
        assert_eq!(
            decode(b"\x00\x00\x00\x03\x01kZ"),
            Err(DecodeError::BadFieldType(b'Z'))
        );
        assert!(matches!(
            decode(b"\x00\x00\x00\x09\x01k"),
            Err(DecodeError::Truncated { .. })
        ));
        // Entry runs past the table's declared length.
        assert!(matches!(
            decode(b"\x00\x00\x00\x03\x01kIabcd"),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(matches!(
            decode(b"\x00\x00\x00\x02\x05k"),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_bounded() {
        // 100 nested arrays: A len [A len [ ... ]]
        let depth = 100;
        let mut bytes = Vec::new();
        for i in 0..depth {
            bytes.push(b'A');
            let inner = (depth - i - 1) * 5;
            bytes.extend_from_slice(&(inner as u32).to_be_bytes());
        }
        let mut r = Reader::new(Bytes::from(bytes));
        assert_eq!(
            FieldValue::decode(&mut r, 0),
            Err(DecodeError::TooDeep { limit: MAX_NESTING })
        );
    }

    #[test]
    fn accessors() {
        assert_eq!(FieldValue::U32(5).as_i64(), Some(5));
        assert_eq!(FieldValue::I16(-5).as_i64(), Some(-5));
        assert_eq!(FieldValue::Bool(true).as_i64(), None);
        assert_eq!(FieldValue::Bool(true).as_bool(), Some(true));
        assert_eq!(
            FieldValue::LongStr(LongStr::from("all")).as_str(),
            Some("all")
        );
        assert_eq!(
            FieldValue::Bytes(Bytes::from_static(b"any")).as_str(),
            Some("any")
        );
        assert_eq!(FieldValue::Void.as_table(), None);
    }
}
