//! The disk alarm (issue 18, item 4): with the data directory on a small file system the
//! test makes (a tmpfs, as root), free space below `store.disk_free_limit` blocks every
//! publisher (`connection.blocked` "low on disk", MST-1013) while consumers and acks go
//! on; freeing space releases them (`connection.unblocked`, MST-1014); every confirmed
//! message survives a restart. Skips with a message where mounting is not allowed.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::raw::RawConn;
use common::wire::{m, Enc, Props};
use common::{thousands, unique, Broker};

shard_tests!(
    low_disk_blocks_publishers_and_space_releases_them,
    a_failed_write_nacks_and_the_broker_carries_on,
);

const CONNECTION_BLOCKED: (u16, u16) = (10, 60);
const CONNECTION_UNBLOCKED: (u16, u16) = (10, 61);
const FS_SIZE: u64 = 64 << 20;
const LIMIT: u64 = 16 << 20;
const BODY: usize = 64 * 1024;

/// A tmpfs mounted for the test, unmounted (and its mount point removed) when dropped.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount() -> Option<SmallFs> {
        Self::mount_sized(FS_SIZE)
    }

    fn mount_sized(size: u64) -> Option<SmallFs> {
        let dir = std::env::temp_dir().join(unique("sluice-smallfs"));
        std::fs::create_dir_all(&dir).ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}")])
            .arg("tmpfs")
            .arg(&dir)
            .status();
        match status {
            Ok(s) if s.success() => Some(SmallFs { dir }),
            other => {
                eprintln!("SKIPPED: cannot mount a tmpfs here ({other:?}); run as root");
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn free(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(&self.dir)
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df avail")
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection with channel 1 in confirm mode, the durable `queue` declared.
fn confirming_publisher(broker: &Broker, queue: &str) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    c.queue_declare(1, queue, true, false, false);
    c.confirm_select(1);
    c
}

fn persistent() -> Props {
    Props {
        delivery_mode: Some(2),
        ..Props::default()
    }
}

/// Publishes `n` persistent messages in confirm mode and waits for every ack.
fn publish_confirmed(c: &mut RawConn, queue: &str, from: u64, n: u64) {
    let body = vec![b'd'; BODY];
    for _ in 0..n {
        c.publish(1, "", queue, &persistent(), &body)
            .expect("publish");
    }
    let last = from + n;
    let mut acked = from;
    while acked < last {
        let mth = c.read_method().expect("basic.ack");
        assert_eq!(mth.id, m::BASIC_ACK, "a confirm, not {:?}", mth.id);
        let mut d = mth.dec();
        acked = acked.max(d.longlong());
    }
}

fn message_count(c: &mut RawConn, queue: &str) -> u32 {
    c.send_queue_declare(1, queue, [true, false, false]);
    let ok = c.expect_method(1, m::QUEUE_DECLARE_OK);
    let mut d = ok.dec();
    let _ = d.shortstr();
    d.long()
}

async fn low_disk_blocks_publishers_and_space_releases_them(shards: usize) {
    let Some(fs) = SmallFs::mount() else {
        return;
    };
    let data = fs.path().join("data");
    let toml = format!("[store]\ndisk_free_limit = {LIMIT}\n");
    let mut broker = Broker::start_in(&data, shards, Some(&toml));
    let queue = unique("durable");
    let mut publisher = confirming_publisher(&broker, &queue);
    publish_confirmed(&mut publisher, &queue, 0, 100);

    // Fill the file system to below the limit: the alarm is raised within a tick.
    let filler = fs.path().join("filler");
    let fill = fs.free().saturating_sub(LIMIT / 2);
    std::fs::write(&filler, vec![0u8; fill as usize]).expect("write the filler");
    let blocked = publisher.read_method().expect("connection.blocked");
    assert_eq!((blocked.id, blocked.channel), (CONNECTION_BLOCKED, 0));
    assert_eq!(blocked.dec().shortstr(), "low on disk");
    let line = broker
        .wait_for_log(
            "MST-1013 : Disk free space alarm set",
            Duration::from_secs(5),
        )
        .expect("MST-1013 logged");
    assert!(
        line.contains(&format!("Limit : {} bytes", thousands(LIMIT))),
        "{line}"
    );

    let overview = common::http::get(broker.http_port(), "/api/overview").json();
    assert_eq!(overview["disk_free_alarm"], true, "{overview}");
    assert_eq!(overview["disk_free_limit"], LIMIT, "{overview}");
    assert!(
        overview["disk_free"].as_u64().is_some_and(|f| f < LIMIT),
        "{overview}"
    );

    // Consumers and acks go on meanwhile.
    let mut consumer = RawConn::connect(&broker.addr());
    consumer.handshake();
    consumer.channel_open(1);
    let get = Enc::new().short(0).shortstr(&queue).bits(&[false]).done();
    consumer
        .send_method(1, m::BASIC_GET, &get)
        .expect("basic.get");
    let got = consumer.read_delivery(1);
    assert_eq!(got.body.len(), BODY);
    let mut d = got.method.dec();
    let tag = d.longlong();
    let ack = Enc::new().longlong(tag).bits(&[false]).done();
    consumer.send_method(1, m::BASIC_ACK, &ack).expect("ack");
    assert_eq!(message_count(&mut consumer, &queue), 99);

    // Space comes back: the publisher is released and its publishes are confirmed.
    std::fs::remove_file(&filler).expect("remove the filler");
    let unblocked = publisher.read_method().expect("connection.unblocked");
    assert_eq!((unblocked.id, unblocked.channel), (CONNECTION_UNBLOCKED, 0));
    broker
        .wait_for_log(
            "MST-1014 : Disk free space alarm cleared",
            Duration::from_secs(5),
        )
        .expect("MST-1014 logged");
    let overview = common::http::get(broker.http_port(), "/api/overview").json();
    assert_eq!(overview["disk_free_alarm"], false, "{overview}");
    publish_confirmed(&mut publisher, &queue, 100, 10);
    drop(publisher);
    drop(consumer);

    // Every confirmed message, less the one acked, survives a restart.
    broker.stop();
    let broker = Broker::start_in(&data, shards, Some(&toml));
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    assert_eq!(message_count(&mut c, &queue), 109);
    drop(c);
    drop(broker);
    drop(fs);
}

const BASIC_NACK: (u16, u16) = (60, 120);

/// Publishes `n` persistent messages (tags `from+1 ..= from+n`) and reads their
/// outcomes; returns the tags acked and nacked. `connection.blocked` and
/// `connection.unblocked` are noted in `blocked`.
fn publish_outcomes(
    c: &mut RawConn,
    queue: &str,
    from: u64,
    n: u64,
    blocked: &mut Vec<bool>,
) -> (Vec<u64>, Vec<u64>) {
    let body = vec![b'w'; BODY];
    for _ in 0..n {
        c.publish(1, "", queue, &persistent(), &body)
            .expect("publish");
    }
    let (mut acked, mut nacked) = (Vec::new(), Vec::new());
    let mut settled = from;
    while settled < from + n {
        let mth = c.read_method().expect("a confirm");
        match mth.id {
            CONNECTION_BLOCKED => blocked.push(true),
            CONNECTION_UNBLOCKED => blocked.push(false),
            id @ (m::BASIC_ACK | BASIC_NACK) => {
                let mut d = mth.dec();
                let tag = d.longlong();
                let multiple = d.bits(1)[0];
                let first = if multiple { settled + 1 } else { tag };
                for t in first..=tag {
                    if id == m::BASIC_ACK {
                        acked.push(t);
                    } else {
                        nacked.push(t);
                    }
                }
                settled = settled.max(tag);
            }
            other => panic!("unexpected method {other:?}"),
        }
    }
    (acked, nacked)
}

/// With no free-space limit (0), the store's writes themselves hit ENOSPC: the
/// publishes of the failed group are nacked (MST-1015), the disk alarm blocks the
/// publisher, the broker stays up. It restarts on the full disk with exactly the
/// confirmed messages and serves a consumer's get and ack; once space is freed, new
/// publishes are confirmed, and a last restart finds exactly what it should.
async fn a_failed_write_nacks_and_the_broker_carries_on(shards: usize) {
    let Some(fs) = SmallFs::mount_sized(32 << 20) else {
        return;
    };
    let data = fs.path().join("data");
    let toml = "[store]\ndisk_free_limit = 0\nsegment_size = 1048576\n";
    let mut broker = Broker::start_in(&data, shards, Some(toml));
    let queue = unique("durable");
    let mut publisher = confirming_publisher(&broker, &queue);
    // Leave about 3 MiB free.
    let filler = fs.path().join("filler");
    let fill = fs.free().saturating_sub(3 << 20);
    std::fs::write(&filler, vec![0u8; fill as usize]).expect("write the filler");
    let mut blocked = Vec::new();
    let (mut acked, mut nacked) = (Vec::new(), Vec::new());
    let mut tag = 0;
    while nacked.is_empty() && tag < 400 {
        let (a, n) = publish_outcomes(&mut publisher, &queue, tag, 4, &mut blocked);
        acked.extend(a);
        nacked.extend(n);
        tag += 4;
    }
    assert!(
        !nacked.is_empty(),
        "no publish was nacked on a full file system ({} acked); log:\n{}",
        acked.len(),
        broker.logs().join("\n")
    );
    broker
        .wait_for_log("MST-1015 : Store write failed", Duration::from_secs(5))
        .expect("MST-1015 logged");
    if !blocked.contains(&true) {
        let mth = publisher.read_method().expect("connection.blocked");
        assert_eq!(mth.id, CONNECTION_BLOCKED);
        assert_eq!(mth.dec().shortstr(), "low on disk");
    }
    assert!(broker.is_running(), "the broker exited on a full disk");
    eprintln!(
        "full file system: {} confirmed, {} nacked before space returned",
        acked.len(),
        nacked.len()
    );

    drop(publisher);

    // The broker stops and starts again on the full file system, and serves consumers:
    // every confirmed message is there, and an ack is taken.
    broker.stop();
    let mut broker = Broker::start_in(&data, shards, Some(toml));
    let mut consumer = RawConn::connect(&broker.addr());
    consumer.handshake();
    consumer.channel_open(1);
    assert_eq!(
        message_count(&mut consumer, &queue) as usize,
        acked.len(),
        "after a restart on the full disk: confirmed {} and nacked {}",
        acked.len(),
        nacked.len()
    );
    let get = Enc::new().short(0).shortstr(&queue).bits(&[false]).done();
    consumer
        .send_method(1, m::BASIC_GET, &get)
        .expect("basic.get");
    let got = consumer.read_delivery(1);
    let tag_of_get = got.method.dec().longlong();
    let ack = Enc::new().longlong(tag_of_get).bits(&[false]).done();
    consumer.send_method(1, m::BASIC_ACK, &ack).expect("ack");
    assert_eq!(
        message_count(&mut consumer, &queue) as usize,
        acked.len() - 1
    );

    // Space returns: a new publisher's messages are confirmed.
    std::fs::remove_file(&filler).expect("remove the filler");
    let mut publisher = confirming_publisher(&broker, &queue);
    let mut blocked = Vec::new();
    let (a, n) = publish_outcomes(&mut publisher, &queue, 0, 4, &mut blocked);
    assert!(n.is_empty(), "nacks after space returned: {n:?}");
    assert_eq!(a.len(), 4);
    drop(publisher);
    drop(consumer);

    broker.stop();
    let broker = Broker::start_in(&data, shards, Some(toml));
    let mut c = RawConn::connect(&broker.addr());
    c.handshake();
    c.channel_open(1);
    assert_eq!(message_count(&mut c, &queue) as usize, acked.len() - 1 + 4);
    drop(c);
    drop(broker);
    drop(fs);
}
