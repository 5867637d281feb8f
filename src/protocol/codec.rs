//! Primitive AMQP 0-9-1 wire types: short/long strings, the decode error, a
//! zero-copy [`Reader`] over [`Bytes`] and `put_*` writer helpers over
//! [`BytesMut`].
//!
//! Owns: the byte-level encoding of octets, shorts, longs, long-longs, bit
//! groups, `shortstr` and `longstr`, and the [`DecodeError`] every decoder in
//! `protocol` returns.
//! Does not: know about frames, methods or properties (their modules build on
//! this one), and never panics on peer input: every read is bounds-checked and
//! reports [`DecodeError::Truncated`] with what it was reading.

use std::borrow::Cow;
use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::table::FieldTable;

/// Maximum length of a `shortstr` on the wire (its length prefix is one octet).
pub const SHORTSTR_MAX: usize = 255;

/// Maximum nesting depth of field tables and arrays accepted from a peer.
///
/// Bounds recursion in [`FieldTable::decode`] so a hostile peer cannot
/// overflow the stack with `F`/`A` values nested thousands deep.
pub const MAX_NESTING: usize = 64;

/// Why a byte sequence could not be decoded. Each variant carries the evidence
/// needed to explain the failure (what was being read, which id or byte was
/// seen); [`fmt::Display`] renders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended while reading `what`.
    Truncated {
        /// The field or structure being read, e.g. `"basic.publish routing-key"`.
        what: &'static str,
    },
    /// A method frame named a class id this protocol version does not define.
    UnknownClass(u16),
    /// A method frame named a method id its (known) class does not define.
    UnknownMethod {
        /// The class id read from the frame.
        class_id: u16,
        /// The method id read from the frame.
        method_id: u16,
    },
    /// A field-table or array value used a type octet outside the 0-9-1 errata set.
    BadFieldType(u8),
    /// A `shortstr` was built from more than 255 bytes.
    ShortStrTooLong {
        /// The offending length.
        len: usize,
    },
    /// Bytes were left over after a complete structure was read.
    TrailingBytes {
        /// The structure that should have consumed the whole input.
        what: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
    /// A content header's property-flags words were malformed: a reserved bit
    /// was set, or a flag named a property the class does not have.
    BadPropertyFlags {
        /// The class id of the content header.
        class_id: u16,
        /// The offending flags word.
        flags: u16,
    },
    /// Field tables / arrays were nested deeper than [`MAX_NESTING`].
    TooDeep {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// A `shortstr` argument of a method without content was not valid UTF-8.
    MalformedUtf8 {
        /// The field being read, e.g. `"queue.declare queue"`.
        what: &'static str,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { what } => write!(f, "input truncated while reading {what}"),
            DecodeError::UnknownClass(class_id) => write!(f, "unknown class id {class_id}"),
            DecodeError::UnknownMethod {
                class_id,
                method_id,
            } => write!(f, "unknown method id {method_id} in class {class_id}"),
            DecodeError::BadFieldType(octet) => {
                write!(f, "unknown field value type 0x{octet:02x}")
            }
            DecodeError::ShortStrTooLong { len } => {
                write!(f, "shortstr of {len} bytes exceeds {SHORTSTR_MAX}")
            }
            DecodeError::TrailingBytes { what, extra } => {
                write!(f, "{extra} trailing bytes after {what}")
            }
            DecodeError::BadPropertyFlags { class_id, flags } => {
                write!(f, "bad property flags 0x{flags:04x} for class {class_id}")
            }
            DecodeError::TooDeep { limit } => {
                write!(f, "field tables nested deeper than {limit}")
            }
            DecodeError::MalformedUtf8 { what } => write!(f, "malformed UTF-8 in {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

macro_rules! string_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(Bytes);

        impl $name {
            /// Wraps a static string without copying.
            pub fn from_static(s: &'static str) -> Self {
                Self::from(Bytes::from_static(s.as_bytes()))
            }

            /// The raw bytes (AMQP strings are not required to be UTF-8).
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            /// The text, with invalid UTF-8 replaced by U+FFFD.
            pub fn as_str_lossy(&self) -> Cow<'_, str> {
                String::from_utf8_lossy(&self.0)
            }

            /// The underlying shared buffer.
            pub fn into_bytes(self) -> Bytes {
                self.0
            }

            /// Length in bytes.
            pub fn len(&self) -> usize {
                self.0.len()
            }

            /// `true` for the empty string.
            pub fn is_empty(&self) -> bool {
                self.0.is_empty()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.as_str_lossy(), f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.as_str_lossy())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self::from(s.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_bytes() == other.as_bytes()
            }
        }
    };
}

string_type!(
    /// An AMQP `shortstr`: at most 255 bytes, shared (cloning is O(1)).
    ///
    /// # Invariants
    /// `len() <= 255`, so encoding never needs to check or truncate.
    ShortStr
);

string_type!(
    /// An AMQP `longstr`: up to 2^32-1 bytes, shared (cloning is O(1)).
    LongStr
);

impl ShortStr {
    /// Checked constructor: fails if `bytes` is longer than 255 bytes.
    pub fn new(bytes: Bytes) -> Result<ShortStr, DecodeError> {
        if bytes.len() > SHORTSTR_MAX {
            return Err(DecodeError::ShortStrTooLong { len: bytes.len() });
        }
        Ok(ShortStr(bytes))
    }
}

/// Truncates to at most 255 bytes, backing off to a UTF-8 character boundary.
impl From<&str> for ShortStr {
    fn from(s: &str) -> Self {
        let mut end = s.len().min(SHORTSTR_MAX);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        ShortStr(Bytes::copy_from_slice(&s.as_bytes()[..end]))
    }
}

/// Truncates to at most 255 bytes (use [`ShortStr::new`] to reject instead).
impl From<Bytes> for ShortStr {
    fn from(mut b: Bytes) -> Self {
        b.truncate(SHORTSTR_MAX);
        ShortStr(b)
    }
}

impl From<&str> for LongStr {
    fn from(s: &str) -> Self {
        LongStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<Bytes> for LongStr {
    fn from(b: Bytes) -> Self {
        LongStr(b)
    }
}

impl From<ShortStr> for LongStr {
    fn from(s: ShortStr) -> Self {
        LongStr(s.0)
    }
}

/// A bounds-checked cursor over a shared [`Bytes`] buffer.
///
/// Strings and byte arrays come out as `Bytes::slice`s of the input: no
/// copies, no allocations beyond the reference count. Every read names what
/// it is reading so a short input yields [`DecodeError::Truncated`] with
/// evidence.
#[derive(Clone, Debug)]
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: Bytes) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless everything was consumed.
    pub fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { what, extra }),
        }
    }

    /// Consumes the rest of the input as one slice.
    pub fn rest(&mut self) -> Bytes {
        let out = self.buf.slice(self.pos.min(self.buf.len())..);
        self.pos = self.buf.len();
        out
    }

    fn take_array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let end = self
            .pos
            .checked_add(N)
            .ok_or(DecodeError::Truncated { what })?;
        let slice = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeError::Truncated { what })?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        self.pos = end;
        Ok(out)
    }

    /// Consumes `len` bytes as a zero-copy slice.
    pub fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(DecodeError::Truncated { what })?;
        let out = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(out)
    }

    /// Reads an octet.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.take_array::<1>(what).map(|[b]| b)
    }

    /// Reads a big-endian short.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.take_array(what).map(u16::from_be_bytes)
    }

    /// Reads a big-endian long.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.take_array(what).map(u32::from_be_bytes)
    }

    /// Reads a big-endian long-long.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.take_array(what).map(u64::from_be_bytes)
    }

    /// Reads a `shortstr` (octet length + bytes), zero-copy.
    pub fn shortstr(&mut self, what: &'static str) -> Result<ShortStr, DecodeError> {
        let len = self.u8(what)?;
        // A one-octet length can never exceed 255, so the invariant holds.
        self.bytes(usize::from(len), what).map(ShortStr)
    }

    /// Reads a `shortstr` that must be valid UTF-8 (the names and tags of methods
    /// without content: RabbitMQ refuses anything else with a frame error).
    pub fn shortstr_utf8(&mut self, what: &'static str) -> Result<ShortStr, DecodeError> {
        let s = self.shortstr(what)?;
        match std::str::from_utf8(s.as_bytes()) {
            Ok(_) => Ok(s),
            Err(_) => Err(DecodeError::MalformedUtf8 { what }),
        }
    }

    /// Reads a `longstr` (long length + bytes), zero-copy.
    pub fn longstr(&mut self, what: &'static str) -> Result<LongStr, DecodeError> {
        let len = self.u32(what)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated { what })?;
        self.bytes(len, what).map(LongStr)
    }

    /// Reads a field table (long length + entries).
    pub fn table(&mut self, what: &'static str) -> Result<FieldTable, DecodeError> {
        FieldTable::decode_nested(self, what, 0)
    }

    /// Reads `N` packed bits: `ceil(N/8)` octets, least significant bit first,
    /// as AMQP packs consecutive `bit` arguments.
    pub fn bits<const N: usize>(&mut self, what: &'static str) -> Result<[bool; N], DecodeError> {
        let mut out = [false; N];
        let mut octet = 0u8;
        for (i, slot) in out.iter_mut().enumerate() {
            if i % 8 == 0 {
                octet = self.u8(what)?;
            }
            *slot = octet & (1 << (i % 8)) != 0;
        }
        Ok(out)
    }
}

/// Writes a `shortstr`.
pub fn put_shortstr(out: &mut BytesMut, s: &ShortStr) {
    // Invariant of ShortStr: len <= 255.
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
}

/// Writes a `longstr`.
///
/// A string longer than `u32::MAX` bytes cannot be represented; its length
/// prefix saturates (such a string cannot have come from the wire).
pub fn put_longstr(out: &mut BytesMut, s: &LongStr) {
    put_long_bytes(out, s.as_bytes());
}

/// Writes a long-length-prefixed byte string.
pub(crate) fn put_long_bytes(out: &mut BytesMut, b: &[u8]) {
    debug_assert!(u32::try_from(b.len()).is_ok());
    out.put_u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
    out.put_slice(b);
}

/// Packs `bits` into `ceil(len/8)` octets, least significant bit first.
pub fn put_bits(out: &mut BytesMut, bits: &[bool]) {
    for chunk in bits.chunks(8) {
        let octet = chunk
            .iter()
            .enumerate()
            .fold(0u8, |acc, (i, &b)| acc | (u8::from(b) << i));
        out.put_u8(octet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortstr_from_str_truncates_on_char_boundary() {
        let long = "é".repeat(200); // 400 bytes
        let s = ShortStr::from(long.as_str());
        assert_eq!(s.len(), 254);
        assert!(std::str::from_utf8(s.as_bytes()).is_ok());
        assert_eq!(ShortStr::from("x".repeat(300)).len(), 255);
        assert_eq!(ShortStr::from(Bytes::from(vec![0u8; 300])).len(), 255);
    }

    #[test]
    fn shortstr_new_is_checked() {
        assert_eq!(
            ShortStr::new(Bytes::from(vec![1u8; 256])),
            Err(DecodeError::ShortStrTooLong { len: 256 })
        );
        assert!(ShortStr::new(Bytes::from(vec![1u8; 255])).is_ok());
    }

    #[test]
    fn string_debug_and_display_are_lossy_text() {
        let s = ShortStr::from(Bytes::from_static(b"a\xffb"));
        assert_eq!(format!("{s}"), "a\u{fffd}b");
        assert_eq!(format!("{:?}", ShortStr::from("q1")), "\"q1\"");
        assert_eq!(LongStr::from_static("x").as_str_lossy(), "x");
    }

    #[test]
    fn reader_reports_truncation_with_evidence() {
        let mut r = Reader::new(Bytes::from_static(&[0, 1, 2]));
        assert_eq!(r.u16("a"), Ok(1));
        assert_eq!(r.u16("b"), Err(DecodeError::Truncated { what: "b" }));
        let mut r = Reader::new(Bytes::from_static(&[5, b'a']));
        assert_eq!(r.shortstr("s"), Err(DecodeError::Truncated { what: "s" }));
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        assert_eq!(r.longstr("l"), Err(DecodeError::Truncated { what: "l" }));
    }

    #[test]
    fn reader_strings_are_zero_copy() {
        let input = Bytes::from_static(b"\x03abc\x00\x00\x00\x02de");
        let base = input.as_ptr() as usize;
        let mut r = Reader::new(input.clone());
        let s = r.shortstr("s").unwrap();
        let l = r.longstr("l").unwrap();
        assert_eq!(s.as_bytes().as_ptr() as usize, base + 1);
        assert_eq!(l.as_bytes().as_ptr() as usize, base + 8);
        assert!(r.finish("all").is_ok());
    }

    #[test]
    fn bits_pack_across_octets() {
        // 11 bits: octet 0 carries bits 0..8, octet 1 carries bits 8..11, LSB first.
        let bits = [
            true, false, true, true, false, false, false, true, // 0b1000_1101
            false, true, true, // 0b0000_0110
        ];
        let mut out = BytesMut::new();
        put_bits(&mut out, &bits);
        assert_eq!(&out[..], &[0b1000_1101, 0b0000_0110]);
        let mut r = Reader::new(out.freeze());
        assert_eq!(r.bits::<11>("bits"), Ok(bits));
        assert_eq!(r.remaining(), 0);
        let mut r = Reader::new(Bytes::from_static(&[0xff]));
        assert_eq!(
            r.bits::<9>("b9"),
            Err(DecodeError::Truncated { what: "b9" })
        );
    }

    #[test]
    fn decode_error_display() {
        assert_eq!(
            DecodeError::UnknownMethod {
                class_id: 60,
                method_id: 7
            }
            .to_string(),
            "unknown method id 7 in class 60"
        );
        assert_eq!(
            DecodeError::BadFieldType(b'Z').to_string(),
            "unknown field value type 0x5a"
        );
    }
}
