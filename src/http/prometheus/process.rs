//! Owns: the process's file-descriptor figures for the metrics endpoints — descriptors
//! open now (the entries of `/proc/self/fd`) and the most it may open (the soft
//! `RLIMIT_NOFILE`, which `server` raises to the hard limit at start, BRK-1011).
//!
//! Does not: change any limit.

/// Descriptors open now; `None` where `/proc/self/fd` cannot be read.
pub fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory handle read_dir holds is one of the entries: not counted.
    Some((entries.count() as u64).saturating_sub(1))
}

/// The soft limit on open descriptors; `None` when unlimited or unknown.
pub fn max_fds() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_counted_below_the_limit() {
        let held: Vec<std::fs::File> = (0..16)
            .map(|_| std::fs::File::open("/proc/self/stat").expect("open"))
            .collect();
        let open = open_fds().expect("/proc/self/fd");
        assert!(open >= held.len() as u64, "{open} open, 16 held");
        assert!(open <= max_fds().unwrap_or(u64::MAX));
    }
}
