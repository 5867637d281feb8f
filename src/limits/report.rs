//! Owns: [`Reporter`], the rate limit of one kind of operational line on one shard:
//! the first occurrence is written, then at most one line per [`REPORT_GAP`] carrying
//! the number of occurrences since the last line.
//!
//! Does not: render or emit lines (the caller does, with the count it is given).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The shortest time between two lines of one kind on one shard.
pub const REPORT_GAP: Duration = Duration::from_secs(10);

/// Rate limit of one kind of line (per shard: no sharing, plain cells).
#[derive(Default)]
pub struct Reporter {
    last: Cell<Option<Instant>>,
    /// Occurrences since the last line, not yet reported.
    pending: Cell<u64>,
}

impl Reporter {
    /// Notes one occurrence at `now`. Returns the number of occurrences the line to
    /// write now stands for (this one included), or `None` to write nothing.
    pub fn note(&self, now: Instant) -> Option<u64> {
        let count = self.pending.get() + 1;
        let due = self
            .last
            .get()
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_GAP);
        if due {
            self.last.set(Some(now));
            self.pending.set(0);
            Some(count)
        } else {
            self.pending.set(count);
            None
        }
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
}
