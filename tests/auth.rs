//! Users and permissions (issue 11: stored passwords, authorization), end to end against a
//! child sluice on 127.0.0.1:0, with raw frames (exact reply codes and texts) and amqprs.
//!
//! Sections (one file each under `tests/auth/`):
//!
//! - `passwords`: a user with a RabbitMQ-format `password_hash` logs in (PLAIN via raw
//!   frames and amqprs) and a wrong password gets today's 403 text; the plain-text
//!   warning (BRK-1017) names exactly the plain-text users; `sluice hash-password` (the
//!   built binary, argument and stdin) prints a hash the broker accepts; a malformed or
//!   MD5 hash stops the broker at start naming the user;
//! - `permissions`: each permission allowed and refused with RabbitMQ's exact 403 text —
//!   configure (exchange/queue declare, server-named queues, delete), write (publish,
//!   including the default exchange as `amq.default`; queue.bind / exchange.bind on the
//!   destination), read (consume, get, purge, bind from the source exchange); a vhost with
//!   no entry is refused at connection.open with 530; refusals are logged as CHN-1010 and
//!   CON-1015, rate-limited;
//! - `import`: `sluice import-definitions` on a RabbitMQ export (tests/fixtures/) writes
//!   config a broker starts with, the imported user logs in with its password, and a
//!   publish through an imported binding arrives in the imported queue.

#[macro_use]
#[allow(unused_macros)]
mod common;

#[path = "auth/import.rs"]
mod import;
#[path = "auth/passwords.rs"]
mod passwords;
#[path = "auth/permissions.rs"]
mod permissions;

use common::wire::m;
use common::{Broker, RawConn};

/// A raw connection logged in as `user` on `vhost`, or the (code, text) of the
/// connection.close it got instead (answered with close-ok).
pub fn login(
    broker: &Broker,
    user: &str,
    password: &str,
    vhost: &str,
) -> Result<RawConn, (u16, String)> {
    let mut c = RawConn::connect(&broker.addr());
    c.send_protocol_header();
    c.read_start();
    c.send_start_ok("PLAIN", format!("\0{user}\0{password}").as_bytes());
    let closed = |c: &mut RawConn, mth: common::raw::Method| {
        let mut d = mth.dec();
        let (code, text) = (d.short(), d.shortstr());
        let _ = c.send_method(0, m::CONNECTION_CLOSE_OK, &[]);
        Err((code, text))
    };
    let mth = c.read_method().expect("tune or close");
    if mth.id == m::CONNECTION_CLOSE {
        return closed(&mut c, mth);
    }
    assert_eq!(mth.id, m::CONNECTION_TUNE, "expected connection.tune");
    c.send_tune_ok(common::raw::Tune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 0,
    });
    c.send_open(vhost);
    let mth = c.read_method().expect("open-ok or close");
    if mth.id == m::CONNECTION_CLOSE {
        return closed(&mut c, mth);
    }
    assert_eq!(mth.id, m::CONNECTION_OPEN_OK, "expected connection.open-ok");
    Ok(c)
}
