//! Login throttling: a failed login from an address delays the next answers to that
//! address (doubling to a cap), a burst of failures gets its sockets dropped without a
//! reply until the address has been quiet, other connections and addresses are not
//! delayed, the refused-login line names the (escaped) user and the address, and a
//! flood of failed logins leaves the broker healthy with a bounded log. One shard: the
//! throttle's memory is per shard (a client's connections spread over the shards).

use std::time::{Duration, Instant};

use super::support::{close, log_count, open, open_as, Opened};
use crate::common::wire::m;
use crate::common::Broker;

const THROTTLE: &str = r#"
[limits.login]
initial_delay_ms = 500
max_delay_ms = 1000
burst = 4
quiet_ms = 2000
"#;

const BAD_USER: &str = "bad\nuser";

/// A failed login from 127.0.0.1: how long from start-ok to the 403, and the ending.
fn failed_login(broker: &Broker) -> (Duration, Opened) {
    let started = Instant::now();
    let ended = open_as(broker, "127.0.0.1", BAD_USER, "wrong", "/");
    (started.elapsed(), ended)
}

fn assert_refused(ended: Opened) {
    let (code, text) = ended.refusal();
    assert_eq!(code, 403);
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
    );
}

#[test]
fn failed_logins_are_delayed_then_dropped_then_forgotten() {
    let broker = Broker::start_with_config(1, THROTTLE);
    // A client that is already in: it must not wait for anybody's delay.
    let mut bystander = open(&broker).conn();
    bystander.channel_open(1);

    let (_, first) = failed_login(&broker);
    assert_refused(first);
    let (second_took, second) = failed_login(&broker);
    assert_refused(second);
    assert!(
        second_took >= Duration::from_millis(500) && second_took < Duration::from_secs(5),
        "second attempt answered after {second_took:?}"
    );

    // While the third attempt waits out its delay, the bystander and a client from
    // another address are served.
    let (third, served_meanwhile) = std::thread::scope(|s| {
        let third = s.spawn(|| {
            let (took, ended) = failed_login(&broker);
            (took, ended, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(50));
        bystander.queue_declare(1, "", false, true, false);
        let other = open_as(&broker, "127.0.0.2", "guest", "guest", "/").conn();
        let served = Instant::now();
        close(other);
        (third.join().expect("third attempt"), served)
    });
    let (third_took, third_ended, third_answered) = third;
    assert_refused(third_ended);
    assert!(
        third_took >= Duration::from_millis(1000) && third_took < Duration::from_secs(5),
        "third attempt answered after {third_took:?}"
    );
    assert!(
        served_meanwhile < third_answered,
        "the bystander and the other address waited for the delayed login"
    );
    let (fourth_took, fourth) = failed_login(&broker);
    assert_refused(fourth);
    assert!(
        fourth_took >= Duration::from_millis(1000),
        "{fourth_took:?}"
    );

    // Four failures: the burst. Further attempts, even with the right password, are
    // dropped without a reply.
    let last_failure = Instant::now();
    assert!(matches!(
        open_as(&broker, "127.0.0.1", "guest", "guest", "/"),
        Opened::Dropped
    ));
    assert!(matches!(failed_login(&broker).1, Opened::Dropped));
    // Another address is not locked out.
    close(open_as(&broker, "127.0.0.2", "guest", "guest", "/").conn());

    // After the quiet period the address is forgotten.
    let quiet = Duration::from_millis(2000);
    std::thread::sleep(quiet.saturating_sub(last_failure.elapsed()) + Duration::from_millis(100));
    close(open(&broker).conn());
    close(bystander);

    // One rate-limited CON-1008 line (the first refusal), with the escaped user and
    // the address; the drops are reported by CON-1009; no per-connection lines.
    let refused: Vec<String> = broker
        .logs()
        .into_iter()
        .filter(|l| l.contains("CON-1008"))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("CON-1008 : Login refused : user 'bad\\nuser' from 127.0.0.1:"),
        "{}",
        refused[0]
    );
    assert!(broker
        .wait_for_log(
            "CON-1009 : Login attempt from 127.0.0.1 dropped without a reply : 4 failed logins",
            Duration::from_secs(5)
        )
        .is_some());
    assert_eq!(log_count(&broker, "closed during handshake"), 0);
}

shard_tests!(a_flood_of_failed_logins_is_bounded);

async fn a_flood_of_failed_logins_is_bounded(shards: usize) {
    tokio::task::spawn_blocking(move || flood(shards))
        .await
        .expect("test thread");
}

fn flood(shards: usize) {
    const ATTEMPTS: usize = 2000;
    let mut broker = Broker::start_with_config(
        shards,
        "[limits.login]\ninitial_delay_ms = 1\nmax_delay_ms = 2\nburst = 5\nquiet_ms = 60000\n",
    );
    let (mut refused, mut dropped) = (0, 0);
    for _ in 0..ATTEMPTS {
        match open_as(&broker, "127.0.0.1", "intruder", "guess", "/") {
            Opened::Refused(403, ..) => refused += 1,
            Opened::Dropped => dropped += 1,
            other => panic!("unexpected ending {other:?}"),
        }
    }
    // At most `burst` answered refusals per shard; everything else dropped.
    assert!(refused >= 5 && refused <= 5 * shards, "{refused} refused");
    assert_eq!(refused + dropped, ATTEMPTS);
    broker.assert_healthy();
    // The broker still serves another address at once.
    let mut c = open_as(&broker, "127.0.0.2", "guest", "guest", "/").conn();
    c.channel_open(1);
    c.send_method(1, m::CHANNEL_CLOSE, &[0, 200, 0, 0, 0, 0, 0])
        .expect("channel.close");
    c.expect_method(1, m::CHANNEL_CLOSE_OK);
    close(c);
    // Rate-limited lines: the first of each kind per shard, and a summary per 10 s.
    let limit = 2 * shards;
    assert!(log_count(&broker, "CON-1008") <= limit);
    assert!(log_count(&broker, "CON-1009") <= limit);
    assert!(log_count(&broker, "CON-1009") >= 1);
    assert!(
        broker.logs().len() < 100,
        "{} log lines after the flood",
        broker.logs().len()
    );
}

/// The management listener's basic auth checks the same passwords: its failures are
/// throttled per address too (growing delays, then 429 for every request from the
/// address until it has been quiet), and logged as CON-1008 with the user and address,
/// so it is no faster a password oracle than AMQP.
#[test]
fn failed_http_logins_are_throttled_too() {
    use crate::common::http::request;
    let broker = Broker::start_with_config(1, THROTTLE);
    let port = broker.http_port();
    let good = Some(("guest", "guest"));
    assert_eq!(request(port, "GET", "/api/overview", good).status, 200);
    let mut took = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        let r = request(port, "GET", "/api/overview", Some(("guest", "wrong")));
        took.push(started.elapsed());
        assert_eq!(r.status, 401);
    }
    assert!(
        took[1] >= Duration::from_millis(500) && took[1] < Duration::from_secs(5),
        "second failure answered after {:?}",
        took[1]
    );
    // The burst is spent: even the right password is refused, without a check.
    let r = request(port, "GET", "/api/overview", good);
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(broker
        .wait_for_log(
            "CON-1008 : Login refused : user 'guest' from 127.0.0.1:",
            Duration::from_secs(5)
        )
        .is_some());
    // Quiet for quiet_ms: forgotten.
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(request(port, "GET", "/api/overview", good).status, 200);
}
