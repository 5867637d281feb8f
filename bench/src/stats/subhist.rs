//! Owns: [`SubHist`], the latency histogram every subscriber keeps of its own
//! deliveries so the report can give each subscriber's p99 and the spread of those
//! across 10,000 subscribers: a fixed array of log-linear buckets (16 per power of
//! two, so a value is reported within ±3.2 % — the bucket's midpoint), 608 `u32`
//! counts (2.4 KiB), allocated on the first value recorded.
//! Does not: replace the run's hdrhistograms, which keep 3 significant digits for the
//! latency distribution over all deliveries.

/// Sub-buckets per power of two, as bits.
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Largest power of two kept apart (2^40 ns ≈ 18 minutes); larger values share the
/// last bucket.
const MAX_EXP: u32 = 40;
/// Number of buckets.
pub const BUCKETS: usize = ((MAX_EXP - SUB_BITS + 2) as usize) * SUB as usize;

/// A small latency histogram (nanoseconds) of one subscriber.
#[derive(Clone, Debug, Default)]
pub struct SubHist {
    counts: Option<Box<[u32; BUCKETS]>>,
    total: u64,
}

/// The bucket of `v`: values below 16 exactly, above that 16 buckets per power of two.
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = (63 - v.leading_zeros()).min(MAX_EXP);
    let v = v.min((1u64 << (MAX_EXP + 1)) - 1);
    let mant = (v >> (e - SUB_BITS)) & (SUB - 1);
    ((e - SUB_BITS + 1) as u64 * SUB + mant) as usize
}

/// The value a bucket stands for: its midpoint (exact below 32).
fn value(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < SUB {
        return idx;
    }
    let e = idx / SUB + u64::from(SUB_BITS) - 1;
    let mant = idx % SUB;
    let shift = e - u64::from(SUB_BITS);
    let low = (SUB + mant) << shift;
    low + ((1u64 << shift) >> 1)
}

impl SubHist {
    pub fn new() -> SubHist {
        SubHist::default()
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let counts = self.counts.get_or_insert_with(|| Box::new([0u32; BUCKETS]));
        let c = &mut counts[index(ns)];
        *c = c.saturating_add(1);
        self.total += 1;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The value at quantile `q` (0..=1): the smallest bucket value with at least
    /// `ceil(q × len)` values at or below it; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let Some(counts) = &self.counts else {
            return 0;
        };
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return value(i);
            }
        }
        value(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_within_precision() {
        let mut last = 0;
        for v in (1..200_000u64).chain([1 << 30, (1 << 30) + 12_345, u64::MAX]) {
            let i = index(v);
            assert!(i < BUCKETS, "{v}");
            assert!(i >= last, "monotonic at {v}");
            last = i;
            if v < (1 << MAX_EXP) {
                let got = value(i) as f64;
                assert!(
                    (got - v as f64).abs() <= v as f64 * 0.033 + 0.5,
                    "{v} reported as {got}"
                );
            }
        }
    }

    #[test]
    fn quantiles() {
        let mut h = SubHist::new();
        assert_eq!((h.quantile(0.99), h.len()), (0, 0));
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p99 = h.quantile(0.99) as f64;
        assert!((p99 - 990_000.0).abs() < 990_000.0 * 0.035, "{p99}");
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 500_000.0).abs() < 500_000.0 * 0.035, "{p50}");
        assert_eq!(h.len(), 1000);
        h.record(u64::MAX);
        assert!(h.quantile(1.0) >= 1 << MAX_EXP);
    }
}
