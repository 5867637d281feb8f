//! Owns: [`Escaped`], the one way a name that comes from a client (queue, exchange,
//! vhost, consumer tag, username, connection name, and the subjects and close reasons
//! that embed them) is written into a text log line, so that a client-chosen name can
//! never start a new line or imitate another log line.
//!
//! Which characters count is [`breaks_lines`]'s answer; the handler refuses queue and
//! exchange names holding any of them, so the two rules cannot drift apart.
//!
//! Does not: escape JSON (the JSON format escapes its strings itself) or change what is
//! stored or sent to clients.

use std::fmt;

/// Whether `c` may end or split a line for some reader of a log: every control character
/// (C0 `U+0000..U+001F`, DEL, C1 `U+0080..U+009F`, which holds NEL `U+0085`) and the
/// Unicode line and paragraph separators `U+2028` / `U+2029`, which editors, browsers
/// and JavaScript-based viewers treat as line breaks.
pub fn breaks_lines(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Displays a string with every [`breaks_lines`] character escaped: `\n`, `\r`, `\t` and
/// `\\` in the C style, any other character below U+0100 (C0, DEL, C1) as `\xNN`, and
/// U+2028 / U+2029 as `\u2028` / `\u2029` (Python's `repr` scheme). Printable UTF-8 is
/// kept as is.
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
                c if breaks_lines(c) => None,
                _ => continue,
            };
            f.write_str(&s[start..i])?;
            match escape {
                Some(e) => f.write_str(e)?,
                None if (c as u32) < 0x100 => write!(f, "\\x{:02x}", c as u32)?,
                None => write!(f, "\\u{:04x}", c as u32)?,
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

    #[test]
    fn c1_controls_and_unicode_separators_are_escaped() {
        assert_eq!(
            Escaped("a\u{85}b\u{80}\u{9f}c\u{2028}d\u{2029}e").to_string(),
            "a\\x85b\\x80\\x9fc\\u2028d\\u2029e"
        );
        // Neighbours that do not break lines stay as they are.
        assert_eq!(
            Escaped("\u{a0}\u{2027}\u{202a}").to_string(),
            "\u{a0}\u{2027}\u{202a}"
        );
        for c in [
            '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{85}', '\u{9f}', '\u{2028}', '\u{2029}',
        ] {
            assert!(breaks_lines(c), "{c:?}");
        }
        for c in [' ', '\u{a0}', 'é', '\u{2027}', '\u{202f}'] {
            assert!(!breaks_lines(c), "{c:?}");
        }
    }
}
