//! Owns: [`Escaped`], the one way a name that comes from a client (queue, exchange,
//! vhost, consumer tag, username, connection name, and the subjects and close reasons
//! that embed them) is written into a text log line, so that a client-chosen name can
//! never start a new line or imitate another log line.
//!
//! Does not: escape JSON (the JSON format escapes its strings itself) or change what is
//! stored or sent to clients.

use std::fmt;

/// Displays a string with control characters escaped: `\n`, `\r`, `\t` and `\\` in the
/// C style, every other character below 0x20 and 0x7f as `\xNN`. Printable UTF-8 is kept
/// as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let mut start = 0;
        for (i, c) in s.char_indices() {
            let escape = match c {
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                '\\' => Some("\\\\"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => None,
                _ => continue,
            };
            f.write_str(&s[start..i])?;
            match escape {
                Some(e) => f.write_str(e)?,
                None => write!(f, "\\x{:02x}", c as u32)?,
            }
            start = i + c.len_utf8();
        }
        f.write_str(&s[start..])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_backslash_are_escaped() {
        assert_eq!(Escaped("plain").to_string(), "plain");
        assert_eq!(
            Escaped("x\nBRK-1003 : Shutting down").to_string(),
            "x\\nBRK-1003 : Shutting down"
        );
        assert_eq!(Escaped("a\r\tb\\c").to_string(), "a\\r\\tb\\\\c");
        assert_eq!(Escaped("\u{0}\u{1b}\u{7f}").to_string(), "\\x00\\x1b\\x7f");
        assert_eq!(Escaped("é ü 日本").to_string(), "é ü 日本");
    }
}
