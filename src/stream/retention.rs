//! Owns: a stream's retention rules as osiris applies them (`x-max-length-bytes`:
//! keep the newest segments while they fit; `x-max-age`: a segment whose newest chunk is
//! older goes; never the segment being written) and a reader's lag — messages and bytes
//! behind the committed end, and the predicted time until retention removes its
//! position.
//!
//! Does not: remove anything (the stream drops the segments from its index, the shard
//! deletes the files) or read the clock (callers pass `now_ms`).

use super::index::Index;
use crate::policy::stream_args::StreamSettings;

/// How many of the oldest segments retention removes now.
pub fn segments_to_remove(index: &Index, settings: &StreamSettings, now_ms: i64) -> usize {
    let sizes: Vec<(u64, i64)> = index.segments().map(|s| (s.size, s.last_ts)).collect();
    let n = sizes.len();
    if n < 2 {
        return 0;
    }
    let mut remove = 0;
    if let Some(max) = settings.max_bytes {
        // From the newest back: the newest always stays; older ones while they fit.
        let mut limit = max.saturating_sub(sizes[n - 1].0);
        let mut keep = 1;
        for (size, _) in sizes[..n - 1].iter().rev() {
            if *size > limit {
                break;
            }
            limit -= size;
            keep += 1;
        }
        remove = n - keep;
    }
    if let Some(age) = settings.max_age {
        let cutoff = now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        while remove < n - 1 && sizes[remove].1 < cutoff {
            remove += 1;
        }
    }
    remove
}

/// How far one reader is behind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lag {
    pub messages: u64,
    pub bytes: u64,
    /// Predicted seconds until retention removes the reader's position; `None` when no
    /// limit applies or the reader keeps up.
    pub seconds_to_retention: Option<f64>,
}

/// What the lag prediction knows of the stream now.
pub struct Rates {
    /// Bytes appended per second.
    pub publish_bytes: f64,
    /// The reader's deliveries per second.
    pub reader_messages: f64,
}

/// Reader at `position` (its next offset) of a log that ends at `committed`.
pub fn lag(
    index: &Index,
    settings: &StreamSettings,
    committed: u64,
    position: u64,
    rates: &Rates,
    now_ms: i64,
) -> Lag {
    if position >= committed {
        return Lag::default();
    }
    let messages = committed - position;
    let bytes = index.bytes_from(position);
    let mut soonest: Option<f64> = None;
    let mut note = |t: f64| soonest = Some(soonest.map_or(t, |s: f64| s.min(t)));
    let Some(seg) = index.segment_of(position) else {
        return Lag {
            messages,
            bytes,
            seconds_to_retention: None,
        };
    };
    let active = index.active().is_some_and(|a| a.number == seg.number);
    // Bytes per message, to turn the reader's message rate into bytes.
    let per_message = (index.bytes() as f64 / (committed.max(1) as f64)).max(1.0);
    let reader_bytes = rates.reader_messages * per_message;
    if let Some(max) = settings.max_bytes {
        // Its segment goes once the bytes from its start to the end pass the limit,
        // unless the reader leaves it first.
        let held = index.bytes_from_segment_of(position) as f64;
        let headroom = max as f64 - held;
        if headroom <= 0.0 {
            note(0.0);
        } else if rates.publish_bytes > 0.0 {
            let deleted_in = headroom / rates.publish_bytes;
            let leaves_in = leave_time(seg.end_offset, position, rates.reader_messages);
            if leaves_in >= deleted_in {
                note(deleted_in);
            } else if reader_bytes < rates.publish_bytes {
                // It leaves this segment in time, but falls behind: the gap reaches the
                // limit when it has grown by what is left of it.
                let gap_left = (max as f64 - bytes as f64).max(0.0);
                note((gap_left / (rates.publish_bytes - reader_bytes)).max(deleted_in));
            }
        }
    }
    if let (Some(age), false) = (settings.max_age, active) {
        let deadline_ms = seg
            .last_ts
            .saturating_add(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        let left = (deadline_ms - now_ms) as f64 / 1000.0;
        // Does it read past its segment's end before then?
        let leaves_in = leave_time(seg.end_offset, position, rates.reader_messages);
        if leaves_in > left.max(0.0) {
            note(left.max(0.0));
        }
    }
    Lag {
        messages,
        bytes,
        seconds_to_retention: soonest,
    }
}

/// Seconds until a reader at `position` reading `rate` messages a second passes `end`.
fn leave_time(end: u64, position: u64, rate: f64) -> f64 {
    if rate > 0.0 {
        end.saturating_sub(position) as f64 / rate
    } else {
        f64::INFINITY
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Four segments of 100 bytes: offsets 0..10, 10..20, 20..30, 30..40, the newest
    /// chunk of segment k written at k × 1000 ms.
    fn index() -> Index {
        let mut ix = Index::default();
        for k in 0..4u32 {
            ix.start_segment(k + 1, u64::from(k) * 10);
            ix.add_chunk(k + 1, u64::from(k) * 10, 10, i64::from(k) * 1000, 0, 100);
        }
        ix
    }

    fn settings(max_bytes: Option<u64>, max_age: Option<u64>) -> StreamSettings {
        StreamSettings {
            max_bytes,
            max_age: max_age.map(Duration::from_millis),
            segment_size: 100,
        }
    }

    #[test]
    fn max_bytes_keeps_the_newest_that_fit() {
        let ix = index();
        assert_eq!(segments_to_remove(&ix, &settings(Some(400), None), 0), 0);
        assert_eq!(segments_to_remove(&ix, &settings(Some(399), None), 0), 1);
        assert_eq!(segments_to_remove(&ix, &settings(Some(250), None), 0), 2);
        // The newest stays whatever the limit.
        assert_eq!(segments_to_remove(&ix, &settings(Some(1), None), 0), 3);
    }

    #[test]
    fn max_age_removes_old_segments_but_never_the_newest() {
        let ix = index();
        // At t = 3500 with an age of 2 s: segments written at 0 and 1000 are older
        // than 1500.
        assert_eq!(
            segments_to_remove(&ix, &settings(None, Some(2000)), 3500),
            2
        );
        assert_eq!(
            segments_to_remove(&ix, &settings(None, Some(1)), 1_000_000),
            3
        );
        assert_eq!(segments_to_remove(&ix, &settings(None, None), 1_000_000), 0);
    }

    #[test]
    fn lag_and_its_prediction() {
        let ix = index();
        let rates = Rates {
            publish_bytes: 100.0,
            reader_messages: 0.0,
        };
        // A reader at 15 of 40: 25 messages behind, the bytes from its chunk on.
        let l = lag(&ix, &settings(Some(500), None), 40, 15, &rates, 0);
        assert_eq!(l.messages, 25);
        assert_eq!(l.bytes, 300);
        // Its segment starts 300 bytes from the end: 200 bytes of headroom at 100 B/s.
        assert_eq!(l.seconds_to_retention, Some(2.0));
        // Keeping up: no prediction.
        let keeps_up = Rates {
            reader_messages: 20.0,
            ..rates
        };
        assert_eq!(
            lag(&ix, &settings(Some(500), None), 40, 15, &keeps_up, 0).seconds_to_retention,
            None
        );
        // By age: its segment's newest chunk (1000 ms) ages out at 1000 + 5000.
        let l = lag(&ix, &settings(None, Some(5000)), 40, 15, &rates, 4000);
        assert_eq!(l.seconds_to_retention, Some(2.0));
        // Caught up: nothing behind.
        assert_eq!(
            lag(&ix, &settings(Some(1), None), 40, 40, &rates, 0),
            Lag::default()
        );
    }
}
