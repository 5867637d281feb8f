//! Owns: the broker-wide memory watermark as data and a pure hysteresis — how a limit is
//! written (bytes, a fraction of the machine's memory, or a size with a unit), resolving
//! it against the memory the process may use, and the alarm that goes on above the high
//! mark and off below the low mark.
//!
//! Does not: measure memory (the shards' ledgers do), block publishers or log.

use std::fmt;

/// A memory limit as configured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryLimit {
    /// An absolute number of bytes.
    Bytes(u64),
    /// A fraction (0, 1] of the memory available to the broker.
    Fraction(f64),
}

impl MemoryLimit {
    /// Parses `"0.4"` (fraction), `"40%"`, `"2147483648"` (bytes) or a size with a unit:
    /// `"512MiB"`, `"2GiB"`, `"1GB"`, `"800KB"`.
    pub fn parse(text: &str) -> Result<MemoryLimit, String> {
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            let pct: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("'{text}' is not a percentage"))?;
            return MemoryLimit::fraction(pct / 100.0);
        }
        if t.contains('.') {
            let f: f64 = t
                .parse()
                .map_err(|_| format!("'{text}' is not a fraction"))?;
            return MemoryLimit::fraction(f);
        }
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("'{text}' is not a size (bytes, a fraction or e.g. 512MiB)"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "kib" | "k" => 1 << 10,
            "mb" => 1_000_000,
            "mib" | "m" => 1 << 20,
            "gb" => 1_000_000_000,
            "gib" | "g" => 1 << 30,
            other => return Err(format!("unknown unit '{other}' in '{text}'")),
        };
        n.checked_mul(mult)
            .map(MemoryLimit::Bytes)
            .ok_or_else(|| format!("'{text}' is too large"))
    }

    /// A fraction in (0, 1].
    pub fn fraction(f: f64) -> Result<MemoryLimit, String> {
        if f > 0.0 && f <= 1.0 {
            Ok(MemoryLimit::Fraction(f))
        } else {
            Err(format!("fraction {f} is not in (0, 1]"))
        }
    }

    /// Bytes, given the memory available to the broker.
    pub fn resolve(&self, available: u64) -> u64 {
        match *self {
            MemoryLimit::Bytes(b) => b,
            MemoryLimit::Fraction(f) => (available as f64 * f) as u64,
        }
    }
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryLimit::Bytes(b) => write!(f, "{b} bytes"),
            MemoryLimit::Fraction(x) => write!(f, "{x} of available memory"),
        }
    }
}

/// The memory alarm: on above `high`, off again below `low`.
///
/// # Invariants
/// `low <= high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermark {
    pub high: u64,
    pub low: u64,
    alarm: bool,
}

impl Watermark {
    pub fn new(high: u64, low: u64) -> Watermark {
        Watermark {
            high,
            low: low.min(high),
            alarm: false,
        }
    }

    pub fn alarm(&self) -> bool {
        self.alarm
    }

    /// Applies a new reading; returns the new alarm state when it changed.
    pub fn update(&mut self, used: u64) -> Option<bool> {
        if !self.alarm && used > self.high {
            self.alarm = true;
            return Some(true);
        }
        if self.alarm && used < self.low {
            self.alarm = false;
            return Some(false);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(MemoryLimit::parse("0.4"), Ok(MemoryLimit::Fraction(0.4)));
        assert_eq!(MemoryLimit::parse("40%"), Ok(MemoryLimit::Fraction(0.4)));
        assert_eq!(MemoryLimit::parse("1024"), Ok(MemoryLimit::Bytes(1024)));
        assert_eq!(
            MemoryLimit::parse("512MiB"),
            Ok(MemoryLimit::Bytes(512 << 20))
        );
        assert_eq!(
            MemoryLimit::parse("2GB"),
            Ok(MemoryLimit::Bytes(2_000_000_000))
        );
        assert!(MemoryLimit::parse("1.5").is_err());
        assert!(MemoryLimit::parse("12 parsecs").is_err());
        assert!(MemoryLimit::parse("-1").is_err());
        assert_eq!(MemoryLimit::Fraction(0.5).resolve(1000), 500);
    }

    #[test]
    fn alarm_hysteresis() {
        let mut w = Watermark::new(1000, 800);
        assert_eq!(w.update(1000), None);
        assert_eq!(w.update(1001), Some(true));
        assert_eq!(w.update(900), None);
        assert_eq!(w.update(799), Some(false));
        assert!(!w.alarm());
    }
}
