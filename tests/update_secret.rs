//! connection.update-secret (RabbitMQ 3.8+, what OAuth clients send to refresh a token;
//! issue 24), on raw frames and amqprs against a child sluice with one and two shards.
//! RabbitMQ with its internal user database answers update-secret-ok for any new secret
//! of a password login — there is no token to refresh, nothing is re-checked — and the
//! connection keeps the identity it authenticated with. So:
//!
//! - any secret (`new_secret` as pika's and amqplib's suites send, the empty one, another
//!   user's password) is answered with update-secret-ok on a PLAIN and an AMQPLAIN login,
//!   logged as CON-1011 naming the user, its mechanism and the reason;
//! - the connection, its channels and consumers go on, with the user it logged in as and
//!   that user's permissions (not those of the user whose password was sent);
//! - an update-secret never counts as a failed login (no CON-1008, no throttling).
//!
//! Each failed before: a secret other than the user's password closed the connection
//! with `530 NOT_ALLOWED - New secret was refused by one of the backends`. EXTERNAL
//! logins are covered in `tests/tls.rs`.

#[macro_use]
mod common;

use std::time::Duration;

use common::raw::Ending;
use common::wire::{self, Enc, Props, Val};
use common::{Broker, RawConn};

const UPDATE_SECRET: (u16, u16) = (10, 70);
const UPDATE_SECRET_OK: (u16, u16) = (10, 71);

/// guest (everything) and alice, who may only touch objects named `alice.…`.
const USERS: &str = "[auth]\n\
    users = [{ name = \"guest\", password = \"guest\" }, \
             { name = \"alice\", password = \"s3cret\" }]\n\
    permissions = [\n\
      { user = \"guest\", vhost = \"/\", configure = \".*\", write = \".*\", read = \".*\" },\n\
      { user = \"alice\", vhost = \"/\", configure = \"^alice\\\\.\", write = \"^(alice\\\\.|amq\\\\.default$)\", read = \"^alice\\\\.\" },\n\
    ]\n";

shard_tests!(
    any_secret_is_accepted_and_the_user_is_kept,
    amqplain_login_accepts_a_new_secret,
    amqprs_update_secret,
);

fn send_update_secret(c: &mut RawConn, secret: &[u8], reason: &str) {
    let args = Enc::new().longstr(secret).shortstr(reason).done();
    c.send_method(0, UPDATE_SECRET, &args)
        .expect("send connection.update-secret");
}

/// The rest of a handshake after start-ok: tune-ok without heartbeats, open `/`.
fn finish_handshake(c: &mut RawConn) {
    let tune = c.read_tune();
    c.send_tune_ok(common::raw::Tune {
        heartbeat: 0,
        ..tune
    });
    c.send_open("/");
    c.read_open_ok();
}

/// A full PLAIN handshake as `user`/`password`.
fn login(broker: &Broker, user: &str, password: &str) -> RawConn {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", format!("\0{user}\0{password}").as_bytes());
    finish_handshake(&mut c);
    c
}

/// Waits for the CON-1011 line of `user` with `reason` and returns it.
fn secret_line(broker: &Broker, user: &str, mechanism: &str, reason: &str) -> String {
    let needle = format!(
        "CON-1011 : Secret updated : user '{user}' ({mechanism}) keeps its identity and \
         permissions : reason: {reason}"
    );
    broker
        .wait_for_log(&needle, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no line {needle:?} in {:#?}", broker.logs()))
}

async fn any_secret_is_accepted_and_the_user_is_kept(shards: usize) {
    let broker = Broker::start_with_config(shards, USERS);
    let mut c = login(&broker, "alice", "s3cret");
    c.channel_open(1);
    let q = c.queue_declare(1, "alice.q", false, true, false);
    c.basic_consume(1, &q, true);
    // pika's and amqplib's secret, the empty one, guest's own password, a NUL.
    for (secret, reason) in [
        (&b"new_secret"[..], "Refresh"),
        (b"", ""),
        (b"guest", "another user's password"),
        (b"s3cret\0", "token refresh"),
    ] {
        send_update_secret(&mut c, secret, reason);
        c.expect_method(0, UPDATE_SECRET_OK);
    }
    let line = secret_line(&broker, "alice", "PLAIN", "Refresh");
    assert!(
        line.contains("[con:") && line.contains("(alice@127.0.0.1:"),
        "{line}"
    );
    // The consumer is unharmed and the channel still publishes.
    c.publish(1, "", &q, &Props::default(), b"after")
        .expect("publish");
    assert_eq!(c.read_delivery(1).body, b"after");
    // Still alice, with alice's permissions: guest's password did not make it guest.
    c.channel_open(2);
    c.send_queue_declare(2, "bob.q", [false, false, false]);
    assert_eq!(
        c.expect_channel_close(2),
        (
            403,
            "ACCESS_REFUSED - configure access to queue 'bob.q' in vhost '/' refused for \
             user 'alice'"
                .to_owned()
        )
    );
    c.channel_open(3);
    // A guest connection takes alice's password the same way.
    let mut g = login(&broker, "guest", "guest");
    send_update_secret(&mut g, b"s3cret", "rotate");
    g.expect_method(0, UPDATE_SECRET_OK);
    secret_line(&broker, "guest", "PLAIN", "rotate");
    g.channel_open(1);
    g.queue_declare(1, "bob.q", false, true, false);
    assert!(
        !broker.logs().iter().any(|l| l.contains("CON-1008")),
        "an update-secret is not a failed login"
    );
}

async fn amqplain_login_accepts_a_new_secret(shards: usize) {
    let broker = Broker::start_with_config(shards, USERS);
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    let response = wire::encode_table_body(&vec![
        ("LOGIN".into(), Val::LongStr(b"alice".to_vec())),
        ("PASSWORD".into(), Val::LongStr(b"s3cret".to_vec())),
    ]);
    c.send_start_ok("AMQPLAIN", &response);
    finish_handshake(&mut c);
    send_update_secret(&mut c, b"new_secret", "Refresh");
    c.expect_method(0, UPDATE_SECRET_OK);
    secret_line(&broker, "alice", "AMQPLAIN", "Refresh");
    c.channel_open(1);
    let q = c.queue_declare(1, "alice.amqplain", false, true, false);
    c.publish(1, "", &q, &Props::default(), b"kept")
        .expect("publish");
    c.basic_consume(1, &q, true);
    assert_eq!(c.read_delivery(1).body, b"kept");
}

/// amqprs's own `test_update_secret` sends "123456" and waits for update-secret-ok.
async fn amqprs_update_secret(shards: usize) {
    let broker = Broker::start_with_config(shards, USERS);
    let conn = broker.connect().await;
    conn.conn
        .update_secret("123456", "secret rotation")
        .await
        .expect("update-secret-ok");
    let ch = conn.channel().await;
    let q = ch.declare_server_named().await;
    ch.publish("", &q, b"still guest").await;
    let (_, _, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"still guest");
    secret_line(&broker, "guest", "PLAIN", "secret rotation");
    conn.close().await;
}

/// With a login burst of one, a failed login's answer comes at once the first time and
/// the pair's next failure is dropped without a reply. Update-secrets in any number
/// spend nothing of it: alice's first wrong password afterwards is still answered with
/// its 403. (One shard: the throttle is per shard.)
#[test]
fn an_update_secret_is_not_a_failed_login() {
    let config =
        format!("{USERS}[limits.login]\ninitial_delay_ms = 0\nburst = 1\nquiet_ms = 60000\n");
    let broker = Broker::start_with_config(1, &config);
    let mut c = login(&broker, "alice", "s3cret");
    for guess in ["guess", "wrong", "123456"] {
        send_update_secret(&mut c, guess.as_bytes(), "token refresh");
        c.expect_method(0, UPDATE_SECRET_OK);
    }
    let mut next = RawConn::connect(&broker.addr());
    next.send_protocol_header();
    next.read_start();
    next.send_start_ok("PLAIN", b"\0alice\0guess");
    match next.read_until_closed(common::raw::READ_TIMEOUT) {
        Some(Ending::Close { code, text, .. }) => assert_eq!(
            (code, text.as_str()),
            (
                403,
                "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
                 For details see the broker logfile."
            )
        ),
        other => panic!("expected the first failure's 403, got {other:?}"),
    }
    let lines: Vec<String> = broker
        .logs()
        .into_iter()
        .filter(|l| l.contains("CON-1008"))
        .collect();
    assert!(
        lines.iter().all(|l| !l.contains("update-secret")),
        "{lines:#?}"
    );
    // The open connection goes on.
    c.channel_open(1);
}
