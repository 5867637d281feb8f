//! A stream in the console: a reader that stopped acknowledging shows on "subscriptions
//! at risk" under "Stream readers" with the stream's largest lag, and on the stream's
//! page with its offset and how far it is behind the committed end.

use amqprs::channel::{BasicConsumeArguments, BasicQosArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};

use crate::browser::Browser;
use crate::browser_test;
use crate::common::{eventually, http, next_delivery, unique, Broker};

browser_test!(a_lagging_stream_reader_shows_with_its_lag, 2);

fn long_string(v: &str) -> FieldValue {
    FieldValue::S(v.try_into().expect("long string"))
}

async fn a_lagging_stream_reader_shows_with_its_lag(broker: &Broker, b: &Browser) {
    let conn = broker.connect().await;
    let ch = conn.channel().await;
    let stream = unique("console-stream");
    let mut args = FieldTable::new();
    args.insert(
        "x-queue-type".try_into().expect("name"),
        long_string("stream"),
    );
    ch.queue_declare(
        QueueDeclareArguments::new(&stream)
            .durable(true)
            .arguments(args)
            .finish(),
    )
    .await
    .expect("queue.declare")
    .expect("declare-ok");
    for i in 0..30 {
        ch.publish("", &stream, format!("m{i}").as_bytes()).await;
    }
    let port = broker.http_port();
    let committed = eventually(std::time::Duration::from_secs(10), || async {
        let v = http::get(port, &format!("/api/queues/%2F/{stream}")).json();
        v["stream"]["committed_offset"] == 30
    })
    .await;
    assert!(committed, "the 30 messages were never committed");
    // A reader from the first offset with credit for 5 that acknowledges nothing: it
    // stays at offset 5, 25 behind.
    let reader = conn.channel().await;
    reader
        .basic_qos(BasicQosArguments::new(0, 5, false))
        .await
        .expect("basic.qos");
    let mut consume_args = FieldTable::new();
    consume_args.insert(
        "x-stream-offset".try_into().expect("name"),
        long_string("first"),
    );
    let (_tag, mut rx) = reader
        .basic_consume_rx(
            BasicConsumeArguments::new(&stream, "laggard")
                .manual_ack(true)
                .arguments(consume_args)
                .finish(),
        )
        .await
        .expect("basic.consume");
    for _ in 0..5 {
        next_delivery(&mut rx).await;
    }
    b.login("guest", "guest").await;
    b.find("#ov-node").await;
    b.goto("#/risk").await;
    let row = b
        .wait_text("#stream-risk tbody", |t| {
            t.lines().any(|l| l.contains(&stream) && l.contains("25"))
        })
        .await;
    assert!(row.contains(&stream), "{row}");
    b.goto(&format!("#/queues/%2F/{stream}")).await;
    let readers = b
        .wait_text("#stream tbody", |t| t.contains("laggard"))
        .await;
    let line = readers
        .lines()
        .find(|l| l.contains("laggard"))
        .unwrap_or_default();
    assert!(
        line.contains("25 · ") && line.contains("0 of 5"),
        "offset 5, 25 behind, no credit left: {line}"
    );
    b.wait_text("#stream", |t| t.contains("0 – 30")).await;
    conn.close().await;
}
