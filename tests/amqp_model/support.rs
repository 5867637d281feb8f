//! Checks the sections share: a soft error's channel.close, and whether a queue exists.

use std::fmt::Debug;

use amqprs::channel::QueueDeclareArguments;

use crate::common::{Chan, Conn};

/// Asserts that `r` failed and that the server closed the channel; returns (code, text).
pub(crate) async fn soft_error<T: Debug>(
    chan: &mut Chan,
    r: Result<T, amqprs::error::Error>,
) -> (u16, String) {
    assert!(
        r.is_err(),
        "operation succeeded ({r:?}) where a channel error was expected"
    );
    chan.expect_close().await
}

pub(crate) async fn queue_exists(conn: &Conn, name: &str) -> bool {
    let mut ch = conn.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(name).passive(true).finish())
        .await;
    match r {
        Ok(_) => true,
        Err(_) => {
            let (code, text) = ch.expect_close().await;
            assert_eq!(code, 404, "passive queue.declare: {text}");
            false
        }
    }
}
