//! Properties: the full set round-trips (deliver, get-ok, return), its bytes unchanged.

use amqprs::channel::BasicPublishArguments;
use amqprs::{
    BasicProperties, ByteArray, DecimalValue, FieldArray, FieldTable, FieldValue, LongStr,
};

use crate::common::wire::{self, Props, Val};
use crate::common::{next_delivery, unique, Broker, Event};

shard_tests!(
    properties_round_trip,
    properties_bytes_unchanged,
    properties_on_get_and_return,
);

fn full_headers() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("depth".try_into().unwrap(), FieldValue::l(2));
    let mut deeper = FieldTable::new();
    deeper.insert(
        "leaf".try_into().unwrap(),
        FieldValue::S("bottom".try_into().unwrap()),
    );
    inner.insert("deeper".try_into().unwrap(), FieldValue::F(deeper));

    let array = FieldArray::try_from(vec![
        FieldValue::I(1),
        FieldValue::S("two".try_into().unwrap()),
        FieldValue::t(false),
        FieldValue::A(FieldArray::try_from(vec![FieldValue::d(3.5)]).unwrap()),
    ])
    .unwrap();

    let mut h = FieldTable::new();
    let mut put = |k: &str, v: FieldValue| {
        h.insert(k.try_into().unwrap(), v);
    };
    put("bool", FieldValue::t(true));
    put("i8", FieldValue::b(-5));
    put("u8", FieldValue::B(200));
    put("i16", FieldValue::s(-300));
    put("u16", FieldValue::u(60000));
    put("i32", FieldValue::I(-70000));
    put("u32", FieldValue::i(4_000_000_000));
    put("i64", FieldValue::l(-5_000_000_000));
    put("f32", FieldValue::f(1.5));
    put("f64", FieldValue::d(-2.25e100));
    put("decimal", FieldValue::D(DecimalValue::new(2, 12345)));
    put(
        "longstr",
        FieldValue::S(LongStr::try_from("a long string ✓").unwrap()),
    );
    put(
        "bytes",
        FieldValue::x(ByteArray::try_from(vec![0u8, 1, 2, 254, 255]).unwrap()),
    );
    put("array", FieldValue::A(array));
    put("timestamp", FieldValue::T(1_700_000_000));
    put("table", FieldValue::F(inner));
    put("void", FieldValue::V);
    h
}

/// A structural rendering of a field value with table keys sorted, for comparison.
fn canon(v: &FieldValue) -> String {
    match v {
        FieldValue::F(t) => canon_table(t),
        FieldValue::A(a) => {
            let items: Vec<FieldValue> = a.clone().into();
            format!(
                "A[{}]",
                items.iter().map(canon).collect::<Vec<_>>().join(",")
            )
        }
        FieldValue::f(x) => format!("f{:08x}", x.to_bits()),
        FieldValue::d(x) => format!("d{:016x}", x.to_bits()),
        other => format!("{other:?}"),
    }
}

fn canon_table(t: &FieldTable) -> String {
    let mut entries: Vec<(String, String)> = t
        .as_ref()
        .iter()
        .map(|(k, v)| (k.to_string(), canon(v)))
        .collect();
    entries.sort();
    format!(
        "F{{{}}}",
        entries
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    )
}

async fn properties_round_trip(shards: usize) {
    let broker = Broker::start(shards);
    let sub = broker.connect().await;
    let pubc = broker.connect().await;
    let sch = sub.channel().await;
    let q = unique("q-props");
    sch.declare_queue(&q).await;
    let (_, mut rx) = sch.consume_auto(&q).await;

    let props = BasicProperties::default()
        .with_content_type("application/x-test")
        .with_content_encoding("identity")
        .with_headers(full_headers())
        .with_delivery_mode(2)
        .with_priority(7)
        .with_correlation_id("corr-1")
        .with_reply_to("reply-queue")
        .with_expiration("600000")
        .with_message_id("msg-42")
        .with_timestamp(1_650_000_000)
        .with_message_type("kind")
        .with_user_id("guest")
        .with_app_id("itests")
        .with_cluster_id("cluster-x")
        .finish();
    let pch = pubc.channel().await;
    pch.publish_props("", &q, props.clone(), b"payload").await;
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"payload");
    let got = &d.props;
    assert_eq!(got.content_type(), props.content_type());
    assert_eq!(got.content_encoding(), props.content_encoding());
    assert_eq!(got.delivery_mode(), Some(2));
    assert_eq!(got.priority(), Some(7));
    assert_eq!(got.correlation_id(), props.correlation_id());
    assert_eq!(got.reply_to(), props.reply_to());
    assert_eq!(got.expiration(), props.expiration());
    assert_eq!(got.message_id(), props.message_id());
    assert_eq!(got.timestamp(), Some(1_650_000_000));
    assert_eq!(got.message_type(), props.message_type());
    assert_eq!(got.user_id(), props.user_id());
    assert_eq!(got.app_id(), props.app_id());
    assert_eq!(got.cluster_id(), props.cluster_id());
    assert_eq!(
        canon_table(got.headers().expect("headers missing")),
        canon_table(&full_headers())
    );

    // A message with no properties at all stays that way.
    pch.publish("", &q, b"bare").await;
    let d = next_delivery(&mut rx).await;
    assert_eq!(d.body, b"bare");
    assert!(d.props.headers().is_none() && d.props.content_type().is_none());
    assert!(d.props.delivery_mode().is_none() && d.props.timestamp().is_none());
}

/// The raw content header a consumer receives is byte-for-byte the one published (the
/// design relays properties without re-encoding them).
async fn properties_bytes_unchanged(shards: usize) {
    let broker = Broker::start(shards);
    let mut sub = broker.raw();
    sub.channel_open(1);
    let q = sub.queue_declare(1, "", false, true, false);
    sub.basic_consume(1, &q, true);
    let headers = vec![
        ("t".into(), Val::Bool(true)),
        ("b".into(), Val::I8(-1)),
        ("B".into(), Val::U8(255)),
        ("s".into(), Val::I16(-2)),
        ("u".into(), Val::U16(65535)),
        ("I".into(), Val::I32(i32::MIN)),
        ("i".into(), Val::U32(u32::MAX)),
        ("l".into(), Val::I64(i64::MIN)),
        ("f".into(), Val::F32(-0.0)),
        ("d".into(), Val::F64(f64::MAX)),
        ("D".into(), Val::Decimal(5, -1)),
        ("S".into(), Val::LongStr(vec![0, 1, 2, b'z'])),
        (
            "A".into(),
            Val::Array(vec![Val::Void, Val::Table(vec![]), Val::Array(vec![])]),
        ),
        ("T".into(), Val::Timestamp(u64::MAX)),
        (
            "F".into(),
            Val::Table(vec![(
                "n".into(),
                Val::Table(vec![("m".into(), Val::U8(1))]),
            )]),
        ),
        ("V".into(), Val::Void),
        ("x".into(), Val::Bytes(vec![0xCE, 0xCE, 0])),
    ];
    let props = Props {
        content_type: Some("text/plain".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(headers),
        delivery_mode: Some(1),
        priority: Some(9),
        correlation_id: Some("c".into()),
        reply_to: Some("r".into()),
        expiration: Some("100000".into()),
        message_id: Some("m".into()),
        timestamp: Some(42),
        kind: Some("t".into()),
        user_id: Some("guest".into()),
        app_id: Some("a".into()),
        cluster_id: Some("cl".into()),
    };
    let mut publisher = broker.raw();
    publisher.channel_open(1);
    publisher.publish(1, "", &q, &props, b"raw body").unwrap();
    let d = sub.read_delivery(1);
    assert_eq!(d.body, b"raw body");
    assert_eq!(d.props, props, "decoded properties differ");
    assert_eq!(
        d.header_payload,
        wire::content_header_payload(8, &props),
        "content header bytes were re-encoded"
    );
}

/// The hand-written property codec used above agrees with the spec's flag layout.
#[test]
fn raw_property_codec_flag_layout() {
    let only = |p: Props| u16::from_be_bytes(p.encode()[..2].try_into().unwrap());
    assert_eq!(
        only(Props {
            content_type: Some("x".into()),
            ..Props::default()
        }),
        0x8000
    );
    assert_eq!(
        only(Props {
            headers: Some(vec![]),
            ..Props::default()
        }),
        0x2000
    );
    assert_eq!(
        only(Props {
            delivery_mode: Some(2),
            ..Props::default()
        }),
        0x1000
    );
    assert_eq!(
        only(Props {
            expiration: Some("1".into()),
            ..Props::default()
        }),
        0x0100
    );
    assert_eq!(
        only(Props {
            timestamp: Some(1),
            ..Props::default()
        }),
        0x0040
    );
    assert_eq!(
        only(Props {
            cluster_id: Some("c".into()),
            ..Props::default()
        }),
        0x0004
    );
    let full = Props {
        content_type: Some("a".into()),
        content_encoding: Some("b".into()),
        headers: Some(vec![("k".into(), Val::Array(vec![Val::U8(1), Val::Void]))]),
        delivery_mode: Some(2),
        priority: Some(3),
        correlation_id: Some("c".into()),
        reply_to: Some("d".into()),
        expiration: Some("5".into()),
        message_id: Some("e".into()),
        timestamp: Some(6),
        kind: Some("f".into()),
        user_id: Some("g".into()),
        app_id: Some("h".into()),
        cluster_id: Some("i".into()),
    };
    let bytes = full.encode();
    assert_eq!(&bytes[..2], &[0xFF, 0xFC]);
    let mut d = wire::Dec::new(&bytes);
    assert_eq!(Props::decode(&mut d), full);
    assert_eq!(d.remaining(), 0);
}

/// The full property set also survives basic.get-ok and basic.return.
async fn properties_on_get_and_return(shards: usize) {
    let broker = Broker::start(shards);
    let conn = broker.connect().await;
    let mut ch = conn.channel().await;
    let q = unique("q-props-get");
    ch.declare_queue(&q).await;
    let props = BasicProperties::default()
        .with_content_type("text/x-get")
        .with_headers(full_headers())
        .with_message_id("get-1")
        .with_priority(3)
        .with_timestamp(99)
        .with_app_id("itests")
        .finish();
    let check = |got: &BasicProperties| {
        assert_eq!(got.content_type(), props.content_type());
        assert_eq!(got.message_id(), props.message_id());
        assert_eq!(got.priority(), Some(3));
        assert_eq!(got.timestamp(), Some(99));
        assert_eq!(got.app_id(), props.app_id());
        assert_eq!(
            canon_table(got.headers().expect("headers missing")),
            canon_table(&full_headers())
        );
    };
    ch.publish_props("", &q, props.clone(), b"via get").await;
    let (_, got, body) = ch.get_eventually(&q, true).await;
    assert_eq!(body, b"via get");
    check(&got);

    ch.basic_publish(
        props.clone(),
        b"via return".to_vec(),
        BasicPublishArguments::new("amq.direct", "nobody")
            .mandatory(true)
            .finish(),
    )
    .await
    .unwrap();
    match ch.next_event().await {
        Event::Return {
            props: got, body, ..
        } => {
            assert_eq!(body, b"via return");
            check(&got);
        }
        other => panic!("expected basic.return, got {other:?}"),
    }
}
