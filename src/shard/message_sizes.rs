//! Owns: the shard's histogram of published message body sizes, in the buckets RabbitMQ
//! uses for `rabbitmq_message_size_bytes` (`rabbit_msg_size_metrics`: 100 B, 1 kB, 10 kB,
//! 100 kB, 1 MB, 10 MB, 50 MB, 100 MB and above): two cell adds per publish.
//!
//! Does not: render or sum anything across shards (`http::prometheus` does).

use std::cell::Cell;

/// The upper bounds of the finite buckets, in bytes.
pub const BOUNDS: [u64; 8] = [
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
];

/// Counts per bucket (the last is above every bound) and the sum of the sizes.
#[derive(Default)]
pub struct MessageSizes {
    counts: [Cell<u64>; BOUNDS.len() + 1],
    sum: Cell<u64>,
}

/// One shard's histogram as plain numbers (not cumulative: one count per bucket).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SizeCounts {
    pub counts: [u64; BOUNDS.len() + 1],
    pub sum: u64,
}

/// The bucket of a body of `size` bytes: the first whose bound is at least `size`.
#[inline]
pub fn bucket(size: u64) -> usize {
    // Most messages are small: the first bound answers them at once.
    BOUNDS
        .iter()
        .position(|b| size <= *b)
        .unwrap_or(BOUNDS.len())
}

impl MessageSizes {
    #[inline]
    pub fn record(&self, size: u64) {
        let cell = &self.counts[bucket(size)];
        cell.set(cell.get().wrapping_add(1));
        self.sum.set(self.sum.get().wrapping_add(size));
    }

    pub fn read(&self) -> SizeCounts {
        SizeCounts {
            counts: std::array::from_fn(|i| self.counts[i].get()),
            sum: self.sum.get(),
        }
    }
}

impl SizeCounts {
    pub fn add(&mut self, o: &SizeCounts) {
        for (a, b) in self.counts.iter_mut().zip(o.counts) {
            *a += b;
        }
        self.sum += o.sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_lands_in_the_first_bucket_whose_bound_holds_it() {
        let cases = [
            (0, 0),
            (100, 0),
            (101, 1),
            (1_000, 1),
            (1_001, 2),
            (50_000_000, 6),
        ];
        for (size, want) in cases {
            assert_eq!(bucket(size), want, "size {size}");
        }
        assert_eq!(bucket(100_000_001), BOUNDS.len());
        assert_eq!(bucket(u64::MAX), BOUNDS.len());
        let h = MessageSizes::default();
        h.record(10);
        h.record(500);
        h.record(900);
        let r = h.read();
        assert_eq!((r.counts[0], r.counts[1], r.sum), (1, 2, 1410));
    }
}
