//! Channel misuse: methods on unopened or closed channels, open twice, immediate publish.

use crate::common::wire::{self, m, Enc, Props};
use crate::common::RawConn;
use crate::support::{hard_error, queue_declare_args, Expect};

shard_tests!(
    method_on_unopened_channel,
    method_on_closed_channel,
    channel_open_twice,
    publish_immediate,
);

/// The spec's channel-error (504): "the client attempted to work with a channel that had
/// not been correctly opened" — RabbitMQ answers the same.
async fn method_on_unopened_channel(shards: usize) {
    hard_error(
        shards,
        Expect::Prefix(504, "CHANNEL_ERROR - expected 'channel.open'"),
        |c| {
            c.send_method(5, m::QUEUE_DECLARE, &queue_declare_args("never-opened"))
                .unwrap();
        },
    )
    .await
}

async fn method_on_closed_channel(shards: usize) {
    hard_error(
        shards,
        Expect::Prefix(504, "CHANNEL_ERROR - expected 'channel.open'"),
        |c| {
            c.channel_open(1);
            let args = Enc::new()
                .short(200)
                .shortstr("done")
                .short(0)
                .short(0)
                .done();
            c.send_method(1, m::CHANNEL_CLOSE, &args).unwrap();
            c.expect_method(1, m::CHANNEL_CLOSE_OK);
            c.send_method(1, m::QUEUE_DECLARE, &queue_declare_args("after-close"))
                .unwrap();
        },
    )
    .await
}

async fn channel_open_twice(shards: usize) {
    hard_error(shards, Expect::Prefix(504, "CHANNEL_ERROR - "), |c| {
        c.channel_open(1);
        c.send_method(1, m::CHANNEL_OPEN, &Enc::new().shortstr("").done())
            .unwrap();
    })
    .await
}

async fn publish_immediate(shards: usize) {
    hard_error(
        shards,
        Expect::Exact(540, "NOT_IMPLEMENTED - immediate=true"),
        |c| {
            c.channel_open(1);
            let mut bytes = wire::frame(
                wire::FRAME_METHOD,
                1,
                &wire::method_payload(
                    m::BASIC_PUBLISH,
                    &RawConn::publish_args("", "q", false, true),
                ),
            );
            bytes.extend(wire::frame(
                wire::FRAME_HEADER,
                1,
                &wire::content_header_payload(2, &Props::default()),
            ));
            bytes.extend(wire::frame(wire::FRAME_BODY, 1, b"hi"));
            c.send(&bytes).unwrap();
        },
    )
    .await
}
