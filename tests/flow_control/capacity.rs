//! Where a queue's capacity comes from (declare arguments > `[[queue]]` entry > vhost
//! default), what each produces on the wire and in the log, and how bad values are
//! refused.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use amqprs::channel::{BasicAckArguments, BasicQosArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};

use crate::common::{next_delivery, unique, Broker, Chan};
use crate::support::*;

shard_tests!(
    capacity_from_declare_arguments,
    capacity_from_queue_entry,
    capacity_from_vhost_default,
    capacity_precedence,
    resume_capacity_defaults_to_capacity,
    unacked_deliveries_count_toward_the_size,
    exact_lines_for_a_raw_publisher,
    bad_capacity_arguments_are_406,
);

/// `x-qpid-capacity` 1000 and `x-qpid-flow-resume-capacity` 500 on the declare: stopped
/// at 1,100 bytes, released at 400.
async fn capacity_from_declare_arguments(shards: usize) {
    let broker = Broker::start(shards);
    let (conn, mut pch) = conn_and_channel(&broker).await;
    let q = unique("cap-args");
    declare_with(&pch, &q, capacity_args(1000, Some(500))).await;
    flow_cycle(
        &broker,
        &mut pch,
        &q,
        Limits {
            capacity: 1000,
            resume: 500,
        },
    )
    .await;
    conn.close().await;
}

/// A `[[queue]]` entry in the configuration file; a queue it does not name stays
/// unlimited.
async fn capacity_from_queue_entry(shards: usize) {
    let q = unique("cap-entry");
    let broker = Broker::start_with_config(
        shards,
        &format!(
            "[[queue]]\nvhost = \"/\"\nname = \"{q}\"\ncapacity = 1500\nflow_resume_capacity = 700\n"
        ),
    );
    let (conn, mut pch) = conn_and_channel(&broker).await;
    pch.declare_queue(&q).await;
    flow_cycle(
        &broker,
        &mut pch,
        &q,
        Limits {
            capacity: 1500,
            resume: 700,
        },
    )
    .await;
    assert_unlimited(&broker, &conn).await;
    conn.close().await;
}

/// The `[vhost."/"]` default applies to every queue of the vhost.
async fn capacity_from_vhost_default(shards: usize) {
    let broker = Broker::start_with_config(
        shards,
        "[vhost.\"/\"]\ncapacity = 800\nflow_resume_capacity = 300\n",
    );
    let (conn, mut pch) = conn_and_channel(&broker).await;
    let q = unique("cap-vhost");
    pch.declare_queue(&q).await;
    flow_cycle(
        &broker,
        &mut pch,
        &q,
        Limits {
            capacity: 800,
            resume: 300,
        },
    )
    .await;
    conn.close().await;
}

/// All three levels in one broker: the entry beats the vhost default, declare arguments
/// beat the entry.
async fn capacity_precedence(shards: usize) {
    let by_entry = unique("prec-entry");
    let by_args = unique("prec-args");
    let broker = Broker::start_with_config(
        shards,
        &format!(
            "[vhost.\"/\"]\ncapacity = 800\nflow_resume_capacity = 300\n\n\
             [[queue]]\nname = \"{by_entry}\"\ncapacity = 1500\nflow_resume_capacity = 700\n\n\
             [[queue]]\nname = \"{by_args}\"\ncapacity = 1500\nflow_resume_capacity = 700\n"
        ),
    );
    let conn = broker.connect().await;

    let mut ch = conn.channel().await;
    ch.declare_queue(&by_entry).await;
    flow_cycle(
        &broker,
        &mut ch,
        &by_entry,
        Limits {
            capacity: 1500,
            resume: 700,
        },
    )
    .await;

    let mut ch = conn.channel().await;
    declare_with(&ch, &by_args, capacity_args(1000, Some(500))).await;
    flow_cycle(
        &broker,
        &mut ch,
        &by_args,
        Limits {
            capacity: 1000,
            resume: 500,
        },
    )
    .await;
    conn.close().await;
}

/// Without `x-qpid-flow-resume-capacity` the resume capacity is the capacity.
async fn resume_capacity_defaults_to_capacity(shards: usize) {
    let broker = Broker::start(shards);
    let (conn, mut pch) = conn_and_channel(&broker).await;
    let q = unique("cap-noresume");
    declare_with(&pch, &q, capacity_args(1000, None)).await;
    flow_cycle(
        &broker,
        &mut pch,
        &q,
        Limits {
            capacity: 1000,
            resume: 1000,
        },
    )
    .await;
    conn.close().await;
}

/// The size is what the queue holds, delivered-but-unacked included: twelve messages all
/// handed to a manual-ack consumer still make the queue overfull (1,100 bytes at the
/// eleventh), and it is the acks that make it underfull (400 bytes after the eighth).
async fn unacked_deliveries_count_toward_the_size(shards: usize) {
    let broker = Broker::start(shards);
    let (admin_conn, admin) = conn_and_channel(&broker).await;
    let q = unique("cap-unacked");
    declare_with(&admin, &q, capacity_args(1000, Some(500))).await;
    let (cons_conn, cons) = conn_and_channel(&broker).await;
    cons.basic_qos(BasicQosArguments::new(0, 20, false))
        .await
        .expect("qos");
    let (_, mut deliveries) = cons.consume_manual(&q).await;
    let (pub_conn, mut pch) = conn_and_channel(&broker).await;
    for n in 1..=12 {
        pch.publish("", &q, &numbered(n)).await;
    }
    let mut tags = Vec::new();
    for n in 1..=12 {
        let d = next_delivery(&mut deliveries).await;
        assert_eq!(number_of(&d.body), n);
        tags.push(d.delivery_tag);
    }
    assert!(
        !expect_flow(&mut pch).await,
        "stopped although nothing is ready"
    );
    expect_line(&broker, &overfull_line(&q, 1100, 1000));
    assert_eq!(admin.message_count(&q).await, 0, "everything was delivered");
    for tag in &tags[..7] {
        cons.basic_ack(BasicAckArguments::new(*tag, false))
            .await
            .expect("ack");
    }
    admin.message_count(&q).await;
    assert_no_event(
        &mut pch,
        Duration::from_millis(200),
        "500 bytes held is not below 500",
    )
    .await;
    cons.basic_ack(BasicAckArguments::new(tags[7], false))
        .await
        .expect("ack");
    expect_line(&broker, &underfull_line(&q, 400, 500));
    assert!(expect_flow(&mut pch).await, "released by the acks");
    pub_conn.close().await;
    cons_conn.close().await;
    admin_conn.close().await;
}

/// Publishes 2,000 bytes to a fresh queue not named anywhere: no flow signal, no QUE-1003.
async fn assert_unlimited(broker: &Broker, conn: &crate::common::Conn) {
    let mut ch = conn.channel().await;
    let q = unique("unlimited");
    ch.declare_queue(&q).await;
    for n in 0..20 {
        ch.publish("", &q, &numbered(n)).await;
    }
    ch.wait_message_count(&q, 20).await;
    assert_no_event(
        &mut ch,
        Duration::from_millis(100),
        "queue without capacity",
    )
    .await;
    assert!(lines_containing(broker, &format!("qu({q})] QUE-1003")).is_empty());
}

/// The exact CHN lines for a connection whose port is known (raw socket): the subject is
/// `con:N(guest@127.0.0.1:PORT/)` from its CON-1001 line; the broker does not wait for
/// flow-ok (this client never sends it).
async fn exact_lines_for_a_raw_publisher(shards: usize) {
    let broker = Broker::start(shards);
    let (admin_conn, admin) = conn_and_channel(&broker).await;
    let q = unique("cap-raw");
    declare_with(&admin, &q, capacity_args(300, Some(200))).await;
    let mut raw = broker.raw();
    raw.channel_open(1);
    let subject = raw_subject(&broker, &raw);
    for n in 1..=5 {
        raw.publish(1, "", &q, &Default::default(), &numbered(n))
            .expect("publish");
    }
    assert!(!raw_expect_flow(&mut raw, 1));
    expect_line(&broker, &overfull_line(&q, 400, 300));
    expect_line(
        &broker,
        &format!("[{subject}/ch:1] CHN-1005 : Flow Control Enforced (Queue {q})"),
    );
    admin.wait_message_count(&q, 5).await;
    for _ in 0..4 {
        admin.get_eventually(&q, true).await;
    }
    expect_line(&broker, &underfull_line(&q, 100, 200));
    assert!(raw_expect_flow(&mut raw, 1));
    expect_line(
        &broker,
        &format!("[{subject}/ch:1] CHN-1006 : Flow Control Removed"),
    );
    raw_close(&mut raw);
    admin_conn.close().await;
}

// ---------------------------------------------------------------------------------------
// Bad values
// ---------------------------------------------------------------------------------------

/// Every bad capacity argument closes the channel with 406 naming the argument, and the
/// queue is not created; redeclaring with another capacity is 406 "inequivalent arg".
async fn bad_capacity_arguments_are_406(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let text_arg = |v: &str| FieldValue::S(v.try_into().unwrap());
    let mut cases: Vec<(FieldTable, &str)> = vec![
        (
            capacity_args(1000, Some(2000)),
            "x-qpid-flow-resume-capacity",
        ),
        (capacity_args(-1, None), "x-qpid-capacity"),
        (capacity_args(1000, Some(-5)), "x-qpid-flow-resume-capacity"),
    ];
    let mut t = FieldTable::new();
    t.insert("x-qpid-capacity".try_into().unwrap(), text_arg("lots"));
    cases.push((t, "x-qpid-capacity"));
    for (args, name) in cases {
        let mut ch = conn.channel().await;
        let q = unique("cap-bad");
        let r = ch
            .queue_declare(
                QueueDeclareArguments::new(&q)
                    .arguments(args.clone())
                    .finish(),
            )
            .await;
        assert!(r.is_err(), "declare with {args:?} succeeded");
        let (code, text) = ch.expect_close().await;
        assert_eq!(code, 406, "{args:?}: {text}");
        let prefix = format!("PRECONDITION_FAILED - invalid arg '{name}': ");
        assert!(
            text.starts_with(&prefix) && text.len() > prefix.len(),
            "{args:?}: expected `{prefix}<reason>`, got `{text}`"
        );
        assert!(!queue_exists(&conn, &q).await, "{q} created despite {text}");
    }

    let mut ch = conn.channel().await;
    let q = unique("cap-redeclare");
    declare_with(&ch, &q, capacity_args(1000, None)).await;
    let r = ch
        .queue_declare(
            QueueDeclareArguments::new(&q)
                .arguments(capacity_args(2000, None))
                .finish(),
        )
        .await;
    assert!(r.is_err(), "redeclare with another capacity succeeded");
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 406, "{text}");
    assert!(
        text.starts_with("PRECONDITION_FAILED - inequivalent arg 'x-qpid-capacity'"),
        "{text}"
    );
    conn.close().await;
}

async fn queue_exists(conn: &crate::common::Conn, q: &str) -> bool {
    let mut ch: Chan = conn.channel().await;
    let r = ch
        .queue_declare(QueueDeclareArguments::new(q).passive(true).finish())
        .await;
    match r {
        Ok(_) => true,
        Err(_) => {
            let (code, text) = ch.expect_close().await;
            assert_eq!(code, 404, "passive declare: {text}");
            false
        }
    }
}

/// A bad capacity in the configuration file stops the broker at start-up (non-zero
/// exit, no BRK-1004) with a message naming the key.
#[test]
fn bad_capacity_configuration_is_a_startup_error() {
    let cases = [
        (
            "[[queue]]\nname = \"orders\"\ncapacity = 1000\nflow_resume_capacity = 2000\n",
            "flow_resume_capacity",
        ),
        (
            "[vhost.\"/\"]\ncapacity = 1000\nflow_resume_capacity = 2000\n",
            "flow_resume_capacity",
        ),
        ("[[queue]]\nname = \"orders\"\ncapacity = -5\n", "capacity"),
    ];
    for (toml, key) in cases {
        let (ok, output) = run_with_config(toml);
        assert!(!ok, "sluice accepted\n{toml}\noutput:\n{output}");
        assert!(
            output.contains(key),
            "the start-up error does not name `{key}`:\n{output}\nconfig:\n{toml}"
        );
        assert!(!output.contains("BRK-1004 : Ready"), "{output}");
    }
}

/// Runs the sluice binary with `toml` as its config; returns (exited with success,
/// stdout + stderr). Kills it after 10 s (it should have refused to start).
fn run_with_config(toml: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(unique("sluice-badcfg"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sluice.toml");
    std::fs::write(&path, toml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--shards")
        .arg("1")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut output = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut output)
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Some(status) => (status.success(), output),
        None => panic!("sluice kept running with a bad config:\n{toml}\noutput:\n{output}"),
    }
}
