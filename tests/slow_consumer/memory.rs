//! Memory is released: the messages a deleted subscription held (shared with a fast
//! subscriber that has since drained them) are freed, and the broker's memory ledger
//! (BRK-1010, every 100 ms when it changed) returns to zero message bytes; what stays is
//! the small allocation of the fast subscriber's empty queue.

use crate::common::unique;
use crate::harness::*;

slow_tests!(deleted_subscription_releases_its_messages);

const ZERO: &str = "Messages : 0, Queue entries : ";

/// The most an empty queue that had a short backlog may keep allocated for its entries.
const EMPTY_QUEUE_ALLOCATION: u64 = 64 * 1024;

/// amqprs. A never-acking subscriber holds 2,000 messages of 1 KiB (its limit); the
/// ledger shows them; the 2,001st fires the delete; once the fast subscriber has drained
/// everything the ledger reads zero.
async fn deleted_subscription_releases_its_messages(shards: usize) {
    let broker = Cfg::with("[memory]\nreport_interval_ms = 100\n").start(shards);
    let mut fast = Sub::fast(&broker, "mem.tick").await;
    let mut slow = Sub::never_acking(
        &broker,
        &unique("mem-slow"),
        &[(MAX_COUNT, Arg::Int(2000))],
        "mem.tick",
    )
    .await;
    let (_p, pch) = publisher(&broker).await;

    publish_seqs(&pch, "amq.topic", "mem.tick", 1..=2000, 1024).await;
    // The backlog is really in memory: a ledger line shows at least the 2,000 KiB of
    // bodies the slow subscription holds.
    let held = crate::common::eventually(ACT, || async {
        broker.logs().iter().any(|l| {
            l.contains("BRK-1010 : Memory : ") && number_after(l, "Messages : ") >= 2000 * 1024
        })
    })
    .await;
    assert!(
        held,
        "no BRK-1010 line showed the 2,000 held messages:\n{}",
        lines_with(&broker, "BRK-1010").join("\n")
    );
    assert_not_detected(&broker, &slow.queue);

    publish_seqs(&pch, "amq.topic", "mem.tick", 2001..=2001, 1024).await;
    publish_end(&pch, "amq.topic", "mem.tick").await;
    fast.expect_all(2001).await;
    let sub = assert_slow_deleted(&broker, &mut slow, "count").await;
    assert!(sub.contains(" count=2,001 "), "{sub}");

    let (deleted_at, _) = wait_line(
        &broker,
        &format!("[vh(/)/qu({})] QUE-1002 : Deleted", slow.queue),
        ACT,
    )
    .await;
    let released = crate::common::eventually(ACT, || async {
        broker.logs().iter().skip(deleted_at + 1).any(|l| {
            l.contains("BRK-1010 : Memory : ")
                && l.contains(ZERO)
                && number_after(l, "Queue entries : ") <= EMPTY_QUEUE_ALLOCATION
        })
    })
    .await;
    assert!(
        released,
        "after the delete no BRK-1010 line reads {ZERO:?}:\n{}",
        lines_with(&broker, "BRK-1010").join("\n")
    );
}
