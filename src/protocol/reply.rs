//! AMQP reply codes.
//!
//! Owns: [`ReplyCode`] (generated from the spec's constants, with its
//! soft/hard class) and its `"404 NOT_FOUND"` rendering, and [`erlang_term`], bytes as
//! RabbitMQ's texts print them.
//! Does not: decide *when* to close a channel or connection (that is
//! `session`), or build reply texts for particular failures.

use std::fmt;

pub use super::method::ReplyCode;

impl ReplyCode {
    /// `true` for soft errors (only the channel is closed). `Success` is
    /// neither soft nor hard.
    pub const fn is_soft(self) -> bool {
        !self.is_hard() && !matches!(self, ReplyCode::Success)
    }
}

impl fmt::Display for ReplyCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.name())
    }
}

/// How Erlang's `~p` prints bytes inside RabbitMQ's reply texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErlangShape {
    /// A binary: `<<"abc">>` when printable ASCII, else `<<1,2,3>>`.
    Binary,
    /// A list of characters: `"abc"` when printable ASCII, else `[1,2,3]`.
    List,
}

/// `bytes` as Erlang's `~p` prints them in `shape`.
pub fn erlang_term(bytes: &[u8], shape: ErlangShape) -> String {
    let printable = !bytes.is_empty() && bytes.iter().all(|b| (0x20..0x7f).contains(b));
    let (open, close) = match (shape, printable) {
        (ErlangShape::Binary, true) => ("<<\"", "\">>"),
        (ErlangShape::Binary, false) => ("<<", ">>"),
        (ErlangShape::List, true) => ("\"", "\""),
        (ErlangShape::List, false) => ("[", "]"),
    };
    let mut out = String::from(open);
    if printable {
        for &b in bytes {
            if b == b'"' || b == b'\\' {
                out.push('\\');
            }
            out.push(char::from(b));
        }
    } else {
        let items: Vec<String> = bytes.iter().map(u8::to_string).collect();
        out.push_str(&items.join(","));
    }
    out.push_str(close);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_names_and_classes_match_the_spec() {
        assert_eq!(ReplyCode::NotFound.code(), 404);
        assert_eq!(ReplyCode::NotFound.to_string(), "404 NOT_FOUND");
        assert_eq!(ReplyCode::ResourceError.name(), "RESOURCE_ERROR");
        assert_eq!(ReplyCode::from_code(506), Some(ReplyCode::ResourceError));
        assert_eq!(ReplyCode::from_code(999), None);
        assert!(ReplyCode::ResourceError.is_hard());
        assert!(ReplyCode::ConnectionForced.is_hard());
        assert!(!ReplyCode::PreconditionFailed.is_hard());
        assert!(ReplyCode::PreconditionFailed.is_soft());
        assert!(!ReplyCode::Success.is_hard() && !ReplyCode::Success.is_soft());
        for code in ReplyCode::ALL {
            assert_eq!(ReplyCode::from_code(code.code()), Some(code));
        }
        let hard: Vec<u16> = ReplyCode::ALL
            .iter()
            .filter(|c| c.is_hard())
            .map(|c| c.code())
            .collect();
        assert_eq!(
            hard,
            [320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541]
        );
    }
}
