//! Owns: the hint that asks the CPU to start loading a value's cache line before it is
//! read (x86-64 `prefetcht0`; nothing elsewhere).
//!
//! At thousands of subscribers the fan-out's hot loops visit one connection, channel and
//! queue per delivery, each cold in the cache: a profile of 10,000 subscribers found most
//! of the time of `deliver_local`, `Queue::dispatch` and `enqueue` waiting on the first
//! load of each (issue 23). Those loops know which ones they will visit next, so they
//! hint them a few deliveries ahead and the loads overlap instead of following one
//! another.
//!
//! Does not: read the value (a prefetch changes nothing a program can observe and never
//! faults), or decide what to hint (the loops do).

/// Hints the cache line holding `value`.
#[inline(always)]
pub fn line<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` (SSE, part of every x86-64 CPU) only hints the cache; it
    // reads nothing the program sees and does not fault, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
