//! Raw-frame helpers for the compatibility suites: the methods `common::wire::m` does not
//! name, argument encoders, and a channel.close reader that keeps class and method ids.

use crate::common::wire::{m, Enc, Table};
use crate::common::RawConn;

pub const EXCHANGE_DECLARE: (u16, u16) = m::EXCHANGE_DECLARE;
pub const EXCHANGE_DECLARE_OK: (u16, u16) = m::EXCHANGE_DECLARE_OK;
pub const QUEUE_DELETE: (u16, u16) = (50, 40);
pub const QUEUE_DELETE_OK: (u16, u16) = (50, 41);
pub const BASIC_CANCEL: (u16, u16) = (60, 30);

/// exchange.declare flags (all false by default).
#[derive(Clone, Copy, Default, Debug)]
pub struct XFlags {
    pub passive: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub nowait: bool,
}

pub fn exchange_declare_args(name: &str, kind: &str, f: XFlags, arguments: &Table) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(name)
        .shortstr(kind)
        .bits(&[f.passive, f.durable, f.auto_delete, f.internal, f.nowait])
        .table(arguments)
        .done()
}

/// Sends exchange.declare on `channel`.
pub fn send_exchange_declare(
    c: &mut RawConn,
    channel: u16,
    name: &str,
    kind: &str,
    f: XFlags,
    arguments: &Table,
) {
    c.send_method(
        channel,
        EXCHANGE_DECLARE,
        &exchange_declare_args(name, kind, f, arguments),
    )
    .expect("send exchange.declare");
}

/// queue.delete (not if-unused, not if-empty, waits for delete-ok).
pub fn send_queue_delete(c: &mut RawConn, channel: u16, queue: &str) {
    let args = Enc::new()
        .short(0)
        .shortstr(queue)
        .bits(&[false, false, false])
        .done();
    c.send_method(channel, QUEUE_DELETE, &args)
        .expect("send queue.delete");
}

/// A channel.close from the server: code, text, class id, method id.
#[derive(Debug, PartialEq)]
pub struct Closed {
    pub code: u16,
    pub text: String,
    pub class_id: u16,
    pub method_id: u16,
}

/// Expects channel.close on `channel` (a connection.close fails the test), answers
/// close-ok.
pub fn expect_channel_close(c: &mut RawConn, channel: u16) -> Closed {
    let mth = c.expect_method(channel, m::CHANNEL_CLOSE);
    let mut d = mth.dec();
    let closed = Closed {
        code: d.short(),
        text: d.shortstr(),
        class_id: d.short(),
        method_id: d.short(),
    };
    c.send_method(channel, m::CHANNEL_CLOSE_OK, &[])
        .expect("send channel.close-ok");
    closed
}

/// A passive exchange.declare of `amq.direct` on `channel` answered with declare-ok: the
/// channel and its connection are still open.
pub fn assert_channel_usable(c: &mut RawConn, channel: u16) {
    send_exchange_declare(
        c,
        channel,
        "amq.direct",
        "direct",
        XFlags {
            passive: true,
            ..XFlags::default()
        },
        &vec![],
    );
    c.expect_method(channel, EXCHANGE_DECLARE_OK);
}

/// "code text" of a channel.close or connection.close, for failure messages.
pub fn close_text(mth: &crate::common::raw::Method) -> String {
    if mth.id == m::CHANNEL_CLOSE || mth.id == m::CONNECTION_CLOSE {
        let mut d = mth.dec();
        let code = d.short();
        format!("{code} {}", d.shortstr())
    } else {
        String::new()
    }
}
