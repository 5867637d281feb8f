//! connection.update-secret (issue 12, item 8; RabbitMQ 3.8+, what OAuth clients send to
//! refresh a token), on raw frames against a child sluice with one and two shards:
//!
//! - the connection's own user's valid secret is answered with update-secret-ok, and the
//!   connection, its channels and their consumers go on;
//! - any other secret (another user's password included) closes the connection with
//!   530 `NOT_ALLOWED - New secret was refused by one of the backends`, naming
//!   update-secret (10, 70), as `rabbit_reader` does when a backend refuses it; other
//!   connections go on.
//!
//! Each failed before the feature: update-secret was 503 COMMAND_INVALID on any
//! connection.

#[macro_use]
mod common;

use common::raw::Ending;
use common::wire::{Enc, Props};
use common::{Broker, RawConn};

const UPDATE_SECRET: (u16, u16) = (10, 70);
const UPDATE_SECRET_OK: (u16, u16) = (10, 71);
const REFUSED: &str = "NOT_ALLOWED - New secret was refused by one of the backends";

/// Two users; guest may only connect from loopback (the tests do).
const USERS: &str = "[auth]\nusers = [{ name = \"guest\", password = \"guest\" }, \
                     { name = \"alice\", password = \"s3cret\" }]\n";

shard_tests!(
    valid_secret_is_accepted_and_the_connection_goes_on,
    wrong_secret_closes_with_530,
);

fn send_update_secret(c: &mut RawConn, secret: &[u8], reason: &str) {
    let args = Enc::new().longstr(secret).shortstr(reason).done();
    c.send_method(0, UPDATE_SECRET, &args)
        .expect("send connection.update-secret");
}

/// A full handshake as `user`/`password`.
fn login(broker: &Broker, user: &str, password: &str) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", format!("\0{user}\0{password}").as_bytes());
    let tune = c.read_tune();
    c.send_tune_ok(common::raw::Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    c.read_open_ok();
    c
}

fn expect_refused(c: &mut RawConn) {
    match c.read_until_closed(common::raw::READ_TIMEOUT) {
        Some(Ending::Close {
            code,
            text,
            class_id,
            method_id,
        }) => assert_eq!(
            (code, text.as_str(), (class_id, method_id)),
            (530, REFUSED, UPDATE_SECRET)
        ),
        other => panic!("expected connection.close 530, got {other:?}"),
    }
    assert!(
        c.wait_eof(common::raw::READ_TIMEOUT),
        "socket still open after close/close-ok"
    );
}

async fn valid_secret_is_accepted_and_the_connection_goes_on(shards: usize) {
    let broker = Broker::start_with_config(shards, USERS);
    let mut c = login(&broker, "alice", "s3cret");
    c.channel_open(1);
    let q = c.queue_declare(1, "", false, true, false);
    c.basic_consume(1, &q, true);
    send_update_secret(&mut c, b"s3cret", "token refresh");
    c.expect_method(0, UPDATE_SECRET_OK);
    // Twice, and the channel and its consumer are unharmed.
    send_update_secret(&mut c, b"s3cret", "");
    c.expect_method(0, UPDATE_SECRET_OK);
    c.publish(1, "", &q, &Props::default(), b"after")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"after");
    c.channel_open(2);
}

async fn wrong_secret_closes_with_530(shards: usize) {
    let broker = Broker::start_with_config(shards, USERS);
    for secret in [&b"wrong"[..], b"", b"guest", b"s3cret\0"] {
        let mut c = login(&broker, "alice", "s3cret");
        c.channel_open(1);
        send_update_secret(&mut c, secret, "token refresh");
        expect_refused(&mut c);
    }
    // guest's own password is fine for guest.
    let mut c = login(&broker, "guest", "guest");
    send_update_secret(&mut c, b"guest", "");
    c.expect_method(0, UPDATE_SECRET_OK);
    send_update_secret(&mut c, b"s3cret", "");
    expect_refused(&mut c);
    // Other connections are unharmed.
    let mut other = broker.raw();
    other.channel_open(1);
}

/// A wrong secret counts as a failed login of the connection's user from its address
/// (logged as CON-1008 naming the user and `update-secret`): a connection that logged in
/// without a password (EXTERNAL) cannot guess one unthrottled. With a burst of one, the
/// pair's next failure is dropped without a reply, while the right password still logs
/// in. (One shard: the throttle is per shard.)
#[test]
fn a_wrong_secret_counts_as_a_failed_login() {
    let config =
        format!("{USERS}[limits.login]\ninitial_delay_ms = 0\nburst = 1\nquiet_ms = 60000\n");
    let broker = Broker::start_with_config(1, &config);
    let mut c = login(&broker, "alice", "s3cret");
    send_update_secret(&mut c, b"guess", "token refresh");
    expect_refused(&mut c);
    let line = broker
        .wait_for_log("CON-1008", std::time::Duration::from_secs(5))
        .expect("CON-1008 line");
    assert!(
        line.contains("user 'alice'") && line.contains("(update-secret)"),
        "{line}"
    );
    // The pair's burst is spent: alice's next wrong password gets no reply.
    let mut next = RawConn::connect(&broker.addr());
    next.send_protocol_header();
    next.read_start();
    next.send_start_ok("PLAIN", b"\0alice\0guess");
    assert!(
        matches!(
            next.read_until_closed(common::raw::READ_TIMEOUT),
            Some(Ending::Eof)
        ),
        "the next failure got a reply"
    );
    // The right password is answered as ever.
    let mut again = login(&broker, "alice", "s3cret");
    again.channel_open(1);
}
