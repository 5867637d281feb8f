use super::*;
use crate::protocol::LongStr;

fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    FieldTable::of(entries)
}

fn s(v: &str) -> FieldValue {
    FieldValue::LongStr(LongStr::from(v))
}

/// What `validate_declare` says of a stream with these arguments, as the reply text's
/// tail (after "for queue 'q' in vhost '/'").
fn declare(entries: &[(&str, FieldValue)]) -> String {
    let mut all = vec![("x-queue-type", s("stream"))];
    all.extend(entries.iter().cloned());
    match validate_declare(&table(&all)) {
        Ok(()) => "ok".into(),
        Err(QueueArgError::Invalid { argument, reason }) => format!("{argument}: {reason}"),
        Err(QueueArgError::WrongQueueType {
            argument,
            queue_type,
        }) => format!("{argument} of queue type {queue_type}"),
        Err(QueueArgError::DeadLetterExchangeType(t)) => format!("dlx type {t}"),
    }
}

#[test]
fn declare_arguments_follow_rabbitmq() {
    use FieldValue::*;
    assert_eq!(declare(&[]), "ok");
    assert_eq!(
        declare(&[
            ("x-max-length-bytes", I64(1 << 30)),
            ("x-max-age", s("7D")),
            ("x-stream-max-segment-size-bytes", I32(1_000_000)),
            ("x-stream-filter-size-bytes", U8(32)),
            ("x-initial-cluster-size", I32(3)),
            ("x-queue-leader-locator", s("balanced")),
        ]),
        "ok"
    );
    assert_eq!(
        declare(&[("x-max-length-bytes", I64(-1))]),
        "x-max-length-bytes: {value_negative,-1}"
    );
    assert_eq!(
        declare(&[("x-max-age", s("7d"))]),
        "x-max-age: invalid_max_age"
    );
    assert_eq!(
        declare(&[("x-max-age", I32(10))]),
        "x-max-age: {unacceptable_type,signedint}"
    );
    assert_eq!(
        declare(&[("x-initial-cluster-size", I32(0))]),
        "x-initial-cluster-size: {value_zero,0}"
    );
    assert_eq!(
        declare(&[("x-queue-leader-locator", s("nearest"))]),
        "x-queue-leader-locator: invalid_queue_locator_arg"
    );
    assert_eq!(
        declare(&[("x-stream-max-segment-size-bytes", s("1"))]),
        "x-stream-max-segment-size-bytes: \"expected integer, got longstr\""
    );
    // Another type's argument, whatever its value.
    assert_eq!(
        declare(&[("x-message-ttl", I32(1000))]),
        "x-message-ttl of queue type rabbit_stream_queue"
    );
    assert_eq!(
        declare(&[("x-max-length", I32(-5))]),
        "x-max-length of queue type rabbit_stream_queue"
    );
    // The validators run before the other types' arguments are refused, and those are
    // found in the table's order.
    assert_eq!(
        declare(&[("x-overflow", s("drop-head")), ("x-max-age", s("0s"))]),
        "x-max-age: invalid_max_age"
    );
    assert_eq!(
        declare(&[
            ("x-single-active-consumer", Bool(true)),
            ("x-dead-letter-exchange", s("dlx")),
        ]),
        "x-single-active-consumer of queue type rabbit_stream_queue"
    );
    // Arguments no type knows are ignored.
    assert_eq!(declare(&[("x-whatever", s("x"))]), "ok");
}

#[test]
fn max_age_units_are_rabbitmqs() {
    let d = |t: &str| parse_max_age(t.as_bytes());
    assert_eq!(d("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(d("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(d("12h"), Ok(Duration::from_secs(12 * 3600)));
    assert_eq!(d("7D"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(d("2M"), Ok(Duration::from_secs(60 * 86_400)));
    assert_eq!(d("1Y"), Ok(Duration::from_secs(365 * 86_400)));
    for bad in ["0s", "s", "10", "10S", "10ss", " 10s", "-5s", "1.5h", ""] {
        assert_eq!(d(bad), Err(Reason::InvalidMaxAge), "{bad:?}");
    }
    assert!(d("99999999999999999999999Y").is_ok());
}

#[test]
fn properties_in_rabbitmqs_order_and_words() {
    let none = FieldTable::new();
    assert_eq!(check_properties(true, false, false, &none), Ok(()));
    assert_eq!(
        check_properties(false, true, true, &none),
        Err(StreamRefusal::AutoDelete)
    );
    assert_eq!(
        check_properties(false, true, false, &none),
        Err(StreamRefusal::ExclusiveOwner)
    );
    assert_eq!(
        check_properties(false, false, false, &none),
        Err(StreamRefusal::NonDurable)
    );
    let big = table(&[(
        "x-stream-max-segment-size-bytes",
        FieldValue::I64(3_000_000_001),
    )]);
    assert_eq!(
        check_properties(true, false, false, &big),
        Err(StreamRefusal::SegmentSizeExceeded)
    );
    let small = table(&[("x-stream-filter-size-bytes", FieldValue::I32(15))]);
    assert_eq!(
        check_properties(true, false, false, &small),
        Err(StreamRefusal::FilterSizeValue)
    );
    assert_eq!(
        StreamRefusal::AutoDelete.text("s", "/"),
        "invalid property 'auto-delete' for queue 's' in vhost '/'"
    );
    assert_eq!(
        StreamRefusal::ExclusiveOwner.text("s", "/"),
        "invalid property 'exclusive-owner' for queue 's' in vhost '/'"
    );
    assert_eq!(
        StreamRefusal::NonDurable.text("s", "v"),
        "invalid property 'non-durable' for queue 's' in vhost 'v'"
    );
}

#[test]
fn consume_refusals_in_rabbitmqs_order_and_words() {
    assert_eq!(
        check_consume(0, true, true),
        Err(StreamRefusal::PrefetchNotSet)
    );
    assert_eq!(
        check_consume(10, true, true),
        Err(StreamRefusal::AutomaticAck)
    );
    assert_eq!(
        check_consume(10, false, true),
        Err(StreamRefusal::GlobalQos)
    );
    assert_eq!(check_consume(10, false, false), Ok(()));
    assert!(!StreamRefusal::PrefetchNotSet.not_implemented());
    assert!(StreamRefusal::AutomaticAck.not_implemented());
    assert!(StreamRefusal::Get.not_implemented());
    assert_eq!(
        StreamRefusal::PrefetchNotSet.text("s", "/"),
        "consumer prefetch count is not set for stream queue 's' in vhost '/'"
    );
    assert_eq!(
        StreamRefusal::AutomaticAck.text("s", "/"),
        "automatic acknowledgement not supported by stream queue 's' in vhost '/'"
    );
    assert_eq!(
        StreamRefusal::GlobalQos.text("s", "/"),
        "queue 's' in vhost '/' does not support global qos"
    );
    assert_eq!(
        StreamRefusal::Get.text("s", "/"),
        "basic.get not supported by stream queues queue 's' in vhost '/'"
    );
    assert_eq!(
        StreamRefusal::Purge.text("s", "/"),
        "queue.purge not supported by stream queues queue 's' in vhost '/'"
    );
}

fn offset(v: FieldValue) -> Result<OffsetSpec, String> {
    consumer(&table(&[("x-stream-offset", v)]))
        .map(|a| a.offset)
        .map_err(|e| match e {
            QueueArgError::Invalid { argument, reason } => format!("{argument}: {reason}"),
            other => format!("{other:?}"),
        })
}

#[test]
fn offset_specs() {
    use FieldValue::*;
    assert_eq!(offset(s("first")), Ok(OffsetSpec::First));
    assert_eq!(offset(s("last")), Ok(OffsetSpec::Last));
    assert_eq!(offset(s("next")), Ok(OffsetSpec::Next));
    assert_eq!(
        offset(Bytes(bytes::Bytes::from_static(b"first"))),
        Ok(OffsetSpec::First)
    );
    assert_eq!(offset(I64(42)), Ok(OffsetSpec::Offset(42)));
    assert_eq!(offset(U8(7)), Ok(OffsetSpec::Offset(7)));
    assert_eq!(offset(I32(-3)), Ok(OffsetSpec::Offset(-3)));
    assert_eq!(
        offset(Timestamp(1_700_000_000)),
        Ok(OffsetSpec::Timestamp(1_700_000_000_000))
    );
    assert_eq!(
        offset(s("100s")),
        Ok(OffsetSpec::Interval(Duration::from_secs(100)))
    );
    assert_eq!(
        offset(s("foo")),
        Err("x-stream-offset: {invalid_stream_offset_arg,{longstr,<<\"foo\">>}}".into())
    );
    assert_eq!(
        offset(Bool(true)),
        Err("x-stream-offset: {invalid_stream_offset_arg,{bool,true}}".into())
    );
    let defaults = consumer(&FieldTable::new()).expect("no arguments");
    assert_eq!(defaults.offset, OffsetSpec::Next);
    assert!(!defaults.offset_given);
    assert_eq!(defaults.filter, None);
}

#[test]
fn other_types_consumer_arguments_are_refused_after_the_offset() {
    use FieldValue::*;
    let r = consumer(&table(&[("x-priority", I32(5))]));
    assert_eq!(
        r,
        Err(QueueArgError::WrongQueueType {
            argument: "x-priority".into(),
            queue_type: STREAM_TYPE
        })
    );
    let r = consumer(&table(&[
        ("x-priority", I32(5)),
        ("x-stream-offset", s("bad")),
    ]));
    assert!(matches!(
        r,
        Err(QueueArgError::Invalid {
            argument: "x-stream-offset",
            ..
        })
    ));
}

#[test]
fn filters_and_tracking() {
    use FieldValue::*;
    let a = consumer(&table(&[("x-stream-filter", s("red"))])).expect("ok");
    let f = a.filter.expect("a filter");
    assert!(f.matches(Some(b"red")));
    assert!(!f.matches(Some(b"blue")));
    assert!(!f.matches(None));
    let a = consumer(&table(&[
        ("x-stream-filter", Array(vec![s("red"), I32(3), s("blue")])),
        ("x-stream-match-unfiltered", Bool(true)),
    ]))
    .expect("ok");
    let f = a.filter.expect("a filter");
    assert_eq!(f.values.len(), 2);
    assert!(f.matches(Some(b"blue")));
    assert!(f.matches(None));
    // Without a filter, match-unfiltered means nothing.
    let a = consumer(&table(&[("x-stream-match-unfiltered", Bool(true))])).expect("ok");
    assert_eq!(a.filter, None);
    // Tracking: implied by an own tag without an offset; asked for; refused.
    let plain = consumer(&FieldTable::new()).expect("ok");
    assert!(plain.tracks(false));
    assert!(!plain.tracks(true));
    let with_offset = consumer(&table(&[("x-stream-offset", s("first"))])).expect("ok");
    assert!(!with_offset.tracks(false));
    let asked = consumer(&table(&[
        ("x-stream-offset", s("first")),
        ("x-stream-automatic-offset-tracking", Bool(true)),
    ]))
    .expect("ok");
    assert!(asked.tracks(true));
    let off = consumer(&table(&[(
        "x-stream-automatic-offset-tracking",
        Bool(false),
    )]))
    .expect("ok");
    assert!(!off.tracks(false));
    assert!(consumer(&table(&[("x-stream-automatic-offset-tracking", I32(1))])).is_err());
}

#[test]
fn settings_from_arguments() {
    use FieldValue::*;
    let st = StreamSettings::from_arguments(&table(&[
        ("x-max-length-bytes", I64(1000)),
        ("x-max-age", s("1h")),
    ]));
    assert_eq!(st.max_bytes, Some(1000));
    assert_eq!(st.max_age, Some(Duration::from_secs(3600)));
    assert_eq!(st.segment_size, DEFAULT_SEGMENT_SIZE);
}
