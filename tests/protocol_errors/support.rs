//! The offender/bystander harness the sections share: `hard_error`, `Expect`, declare args.

use crate::common::wire::Enc;
use crate::common::{Broker, Bystanders, RawConn};

/// How many healthy connections watch each misbehaviour. With two shards, four random
/// connections share the bad connection's shard with probability 15/16.
pub(crate) const BYSTANDERS: usize = 4;

/// What the offender must receive.
pub(crate) enum Expect {
    Exact(u16, &'static str),
    Prefix(u16, &'static str),
}

pub(crate) fn check(code: u16, text: &str, expect: &Expect) {
    match expect {
        Expect::Exact(c, t) => {
            assert_eq!(code, *c, "reply code (text {text:?})");
            assert_eq!(text, *t);
        }
        Expect::Prefix(c, p) => {
            assert_eq!(code, *c, "reply code (text {text:?})");
            assert!(
                text.starts_with(p),
                "reply text {text:?} does not start with {p:?}"
            );
        }
    }
}

/// Starts a broker and bystanders, runs `offend` on a fresh handshaken raw connection,
/// expects connection.close as `expect`, then checks the bystanders.
pub(crate) async fn hard_error(shards: usize, expect: Expect, offend: impl FnOnce(&mut RawConn)) {
    let mut broker = Broker::start(shards);
    let mut bystanders = Bystanders::start(&broker, BYSTANDERS).await;
    let mut c = broker.raw();
    offend(&mut c);
    let (code, text) = c.expect_connection_close();
    check(code, &text, &expect);
    bystanders.assert_unharmed(&broker).await;
    broker.assert_healthy();
}

pub(crate) fn queue_declare_args(name: &str) -> Vec<u8> {
    Enc::new()
        .short(0)
        .shortstr(name)
        .bits(&[false, false, false, false, false])
        .table(&vec![])
        .done()
}
