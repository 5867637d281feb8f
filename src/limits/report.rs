//! Owns: [`Reporter`], the one rate limit of operational lines that can repeat (limit
//! refusals, login throttling, permission refusals, failed TLS handshakes, failed
//! accepts, the management listener's cap): the first occurrence is written, then at
//! most `lines_per_gap` lines per gap ([`REPORT_GAP`] unless told), each carrying the
//! number of occurrences since the last line.
//!
//! Does not: render or emit lines (the caller does, with the count it is given), read
//! the clock (the caller passes `now`: its shard's coarse clock, `timer::clock`), or
//! share anything between threads (plain cells: one reporter per shard, per kind).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The shortest time between two lines of one kind on one shard.
pub const REPORT_GAP: Duration = Duration::from_secs(10);

/// Rate limit of one kind of line (per shard: no sharing, plain cells).
pub struct Reporter {
    /// How long a window of lines lasts.
    gap: Duration,
    /// Lines written per window; the occurrences after them wait for the next window.
    lines_per_gap: u32,
    /// When the current window began (the first line written in it).
    window_start: Cell<Option<Instant>>,
    /// Lines written in the current window.
    lines: Cell<u32>,
    /// Occurrences since the last line, not yet reported.
    pending: Cell<u64>,
}

impl Default for Reporter {
    /// One line per [`REPORT_GAP`].
    fn default() -> Reporter {
        Reporter::new(REPORT_GAP, 1)
    }
}

impl Reporter {
    /// At most `lines_per_gap` lines per `gap` (`const`, for a `thread_local!`).
    pub const fn new(gap: Duration, lines_per_gap: u32) -> Reporter {
        Reporter {
            gap,
            lines_per_gap,
            window_start: Cell::new(None),
            lines: Cell::new(0),
            pending: Cell::new(0),
        }
    }

    /// Notes one occurrence at `now`. Returns the number of occurrences the line to
    /// write now stands for (this one included), or `None` to write nothing.
    pub fn note(&self, now: Instant) -> Option<u64> {
        self.note_many(now, 1)
    }

    /// Notes `n` occurrences at once (a batch); as [`Reporter::note`].
    pub fn note_many(&self, now: Instant, n: u64) -> Option<u64> {
        let count = self.pending.get() + n;
        let new_window = self
            .window_start
            .get()
            .is_none_or(|at| now.saturating_duration_since(at) >= self.gap);
        if new_window {
            self.window_start.set(Some(now));
            self.lines.set(0);
        }
        if self.lines.get() >= self.lines_per_gap {
            self.pending.set(count);
            return None;
        }
        self.lines.set(self.lines.get() + 1);
        self.pending.set(0);
        Some(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_one_summary_per_gap() {
        let r = Reporter::default();
        let t0 = Instant::now();
        assert_eq!(r.note(t0), Some(1));
        for i in 1..100 {
            assert_eq!(r.note(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.note(t0 + REPORT_GAP), Some(100));
        assert_eq!(r.note(t0 + REPORT_GAP + Duration::from_secs(1)), None);
    }

    #[test]
    fn several_lines_per_window() {
        let r = Reporter::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        assert_eq!(r.note(t0), Some(1));
        assert_eq!(r.note(t0 + Duration::from_secs(1)), Some(1));
        assert_eq!(r.note(t0 + Duration::from_secs(2)), Some(1));
        assert_eq!(r.note(t0 + Duration::from_secs(3)), None);
        assert_eq!(r.note(t0 + Duration::from_secs(4)), None);
        // A new window from the first line after the gap, which reports the two held.
        assert_eq!(r.note(t0 + Duration::from_secs(10)), Some(3));
        assert_eq!(r.note(t0 + Duration::from_secs(11)), Some(1));
    }
}
