//! Owns: a shard's clock-driven work — the housekeeping loop that advances the clock
//! and the timer wheel every `tick_ms` (heartbeats, handshake and close deadlines, queue
//! TTL and `x-expires`, the slow-consumer checks), posts and (on shard 0) evaluates the
//! memory watermark, applies the alarm, gives memory back, asks idle connections'
//! readers to park (`shard::reader_park`) and ticks the store; and the
//! deferred flush that gathers the work of many writers completing in one tick.
//!
//! Does not: decide what a timer means beyond handing its key to the side that armed it.

use std::rc::Rc;

use crate::ops::event::OpsEvent;

use super::reclaim::Reclaimer;
use super::{Shard, TimerKey};

/// Runs the flushes asked for with [`Shard::flush_soon`], once per wake-up: the task is
/// queued behind the tasks woken before it, so their work is flushed together.
pub async fn deferred_flush_loop(shard: Rc<Shard>) {
    loop {
        shard.flush_wanted.wait().await;
        shard.clock.refresh();
        shard.flush();
    }
}

/// Logs the memory ledger (BRK-1010) every report interval when it changed.
fn report_memory(
    shard: &Shard,
    last: &mut Option<(std::time::Instant, crate::model::ledger::LedgerSnapshot)>,
    now: std::time::Instant,
) {
    let every = shard.config.policies.memory.report_interval;
    if every.is_zero() {
        return;
    }
    if last.is_some_and(|(at, _)| now.saturating_duration_since(at) < every) {
        return;
    }
    let sum = shard.memory.sum();
    if last.is_none_or(|(_, seen)| seen != sum) {
        OpsEvent::MemoryReport {
            messages: sum.messages,
            entries: sum.entries,
            outbound: sum.outbound,
            partial: sum.partial,
        }
        .emit();
    }
    *last = Some((now, sum));
}

/// Runs the shard's timers and periodic work until the thread ends.
pub async fn housekeeping_loop(shard: Rc<Shard>) {
    let tick = shard.config.shard.tick;
    let mut expired = Vec::new();
    let mut last_report = None;
    let mut reclaim = Reclaimer::new(
        shard.config.policies.memory.return_interval,
        shard.clock.now(),
    );
    let mut next_park_sweep = shard.clock.now();
    loop {
        tokio::time::sleep(tick).await;
        shard.clock.refresh();
        let now = shard.clock.now();
        {
            let mut st = shard.state.borrow_mut();
            st.common.wheel.advance(now, &mut expired);
            for key in expired.drain(..) {
                match key {
                    TimerKey::Heartbeat(conn) => st.conn_side().heartbeat_tick(&shard, conn, now),
                    TimerKey::Handshake(conn) => st.conn_side().handshake_deadline(&shard, conn),
                    TimerKey::CloseTimeout(conn) => st.conn_side().close_timeout(conn),
                    TimerKey::QueueHousekeeping(queue) => {
                        st.queue_side().queue_housekeeping(&shard, queue, now)
                    }
                    TimerKey::QueuePolicy(queue) => st.queue_side().policy_tick(&shard, queue, now),
                }
            }
            shard.memory.post(usize::from(shard.id));
            if shard.id == 0 {
                let st = &mut *st;
                shard.memory.evaluate(&mut st.common.watermark);
                report_memory(&shard, &mut last_report, now);
            }
            let alarm = shard.memory.alarm();
            if alarm != st.conns.memory_alarm() {
                st.conn_side().apply_memory_alarm(&shard, alarm);
            }
            reclaim.tick(&mut st, now);
        }
        if let Some(idle) = shard.config.net.reader_park_after {
            if now >= next_park_sweep {
                shard.ask_idle_readers_to_park(now);
                next_park_sweep =
                    now + (idle / 2).max(tick).max(super::reader_park::PARK_SWEEP_MIN);
            }
        }
        super::home::persist::store_tick(&shard);
        shard.flush();
    }
}
