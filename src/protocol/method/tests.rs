//! Method codec tests: round trips of every variant and hand-written bytes.

use bytes::{Bytes, BytesMut};

use super::*;
use crate::protocol::codec::{DecodeError, LongStr, ShortStr};
use crate::protocol::table::{FieldTable, FieldValue};

fn encode(m: &Method) -> Vec<u8> {
    let mut out = BytesMut::new();
    m.encode(&mut out);
    out.to_vec()
}

fn decode(bytes: &[u8]) -> Result<Method, DecodeError> {
    Method::decode(Bytes::copy_from_slice(bytes))
}

#[test]
fn every_method_round_trips() {
    let samples = sample_methods();
    assert_eq!(samples.len(), 66, "one sample per method in the spec");
    for m in samples {
        let bytes = encode(&m);
        let back = decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", m.name()));
        assert_eq!(back, m, "{}", m.name());
        assert_eq!(encode(&back), bytes, "{}", m.name());
        // Every strict prefix is rejected as truncated, never a panic.
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..cut]), Err(DecodeError::Truncated { .. })),
                "{} cut at {cut}",
                m.name()
            );
        }
        // Extra bytes after the arguments are rejected.
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(matches!(
            decode(&extra),
            Err(DecodeError::TrailingBytes { extra: 1, .. })
        ));
    }
}

#[test]
fn accessors_follow_the_spec() {
    let publish = Method::from(BasicPublish::default());
    assert_eq!(publish.name(), "basic.publish");
    assert_eq!((publish.class_id(), publish.method_id()), (60, 40));
    assert!(publish.carries_content());
    assert!(!publish.is_synchronous());
    let content: Vec<&str> = sample_methods()
        .iter()
        .filter(|m| m.carries_content())
        .map(Method::name)
        .collect();
    assert_eq!(
        content,
        [
            "basic.publish",
            "basic.return",
            "basic.deliver",
            "basic.get-ok"
        ]
    );
    assert!(Method::from(QueueDeclare::default()).is_synchronous());
    assert!(!Method::from(BasicAck::default()).is_synchronous());
    assert_eq!(CLASS_BASIC, 60);
    assert_eq!(CLASS_CONFIRM, 85);
    assert_eq!(
        (FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT),
        (1, 2, 3, 8)
    );
    assert_eq!(FRAME_END, 0xCE);
    assert_eq!(FRAME_MIN_SIZE, 4096);
}

#[test]
fn unknown_ids_are_reported() {
    assert_eq!(
        decode(&[0, 60, 0, 7]),
        Err(DecodeError::UnknownMethod {
            class_id: 60,
            method_id: 7
        })
    );
    assert_eq!(decode(&[0, 61, 0, 10]), Err(DecodeError::UnknownClass(61)));
    assert_eq!(
        decode(&[0]),
        Err(DecodeError::Truncated {
            what: "method class-id"
        })
    );
}

#[test]
fn connection_tune_bytes() {
    let bytes = [0, 10, 0, 30, 0x07, 0xff, 0x00, 0x02, 0x00, 0x00, 0x00, 0x3c];
    let m = Method::ConnectionTune(ConnectionTune {
        channel_max: 2047,
        frame_max: 131072,
        heartbeat: 60,
    });
    assert_eq!(decode(&bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
}

#[test]
fn basic_publish_bytes_with_bits() {
    let bytes = b"\x00\x3c\x00\x28\x00\x00\x03amq\x02rk\x02";
    let m = Method::BasicPublish(BasicPublish {
        ticket: 0,
        exchange: ShortStr::from("amq"),
        routing_key: ShortStr::from("rk"),
        mandatory: false,
        immediate: true,
    });
    assert_eq!(decode(bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
    let both = b"\x00\x3c\x00\x28\x00\x00\x00\x00\x03";
    let Ok(Method::BasicPublish(p)) = decode(both) else {
        panic!("not a publish")
    };
    assert!(p.mandatory && p.immediate);
}

#[test]
fn basic_publish_strings_are_zero_copy() {
    let frame = Bytes::from_static(b"\x00\x3c\x00\x28\x00\x00\x03amq\x02rk\x00");
    let base = frame.as_ptr() as usize;
    let Ok(Method::BasicPublish(p)) = Method::decode(frame.clone()) else {
        panic!("not a publish")
    };
    assert_eq!(p.exchange.as_bytes().as_ptr() as usize, base + 7);
    assert_eq!(p.routing_key.as_bytes().as_ptr() as usize, base + 11);
}

#[test]
fn basic_deliver_bytes() {
    let bytes = b"\x00\x3c\x00\x3c\x04ctag\x00\x00\x00\x00\x00\x00\x01\x00\x01\x02ex\x01k";
    let m = Method::BasicDeliver(BasicDeliver {
        consumer_tag: ShortStr::from("ctag"),
        delivery_tag: 256,
        redelivered: true,
        exchange: ShortStr::from("ex"),
        routing_key: ShortStr::from("k"),
    });
    assert_eq!(decode(bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
}

#[test]
fn queue_declare_bytes_with_arguments() {
    let bytes = b"\x00\x32\x00\x0a\x00\x00\x01q\x0a\
\x00\x00\x00\x13\x0dx-message-ttlI\x00\x00\xea\x60";
    let mut arguments = FieldTable::new();
    arguments.insert("x-message-ttl", FieldValue::I32(60_000));
    let m = Method::QueueDeclare(QueueDeclare {
        ticket: 0,
        queue: ShortStr::from("q"),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: true,
        nowait: false,
        arguments,
    });
    assert_eq!(decode(bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
}

#[test]
fn channel_close_bytes() {
    let bytes = b"\x00\x14\x00\x28\x01\x94\x09NOT_FOUND\x00\x32\x00\x0a";
    let m = Method::ChannelClose(ChannelClose {
        reply_code: 404,
        reply_text: ShortStr::from("NOT_FOUND"),
        class_id: 50,
        method_id: 10,
    });
    assert_eq!(decode(bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
}

#[test]
fn connection_start_ok_bytes() {
    let bytes =
        b"\x00\x0a\x00\x0b\x00\x00\x00\x00\x05PLAIN\x00\x00\x00\x0c\x00guest\x00guest\x05en_US";
    let m = Method::ConnectionStartOk(ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: ShortStr::from("PLAIN"),
        response: LongStr::from("\0guest\0guest"),
        locale: ShortStr::from("en_US"),
    });
    assert_eq!(decode(bytes), Ok(m.clone()));
    assert_eq!(encode(&m), bytes);
}

#[test]
fn basic_ack_and_nack_bytes() {
    let ack = b"\x00\x3c\x00\x50\x00\x00\x00\x00\x00\x00\x00\x2a\x01";
    let m = Method::BasicAck(BasicAck {
        delivery_tag: 42,
        multiple: true,
    });
    assert_eq!(decode(ack), Ok(m.clone()));
    assert_eq!(encode(&m), ack);
    let nack = b"\x00\x3c\x00\x78\x00\x00\x00\x00\x00\x00\x00\x2a\x02";
    let m = Method::BasicNack(BasicNack {
        delivery_tag: 42,
        multiple: false,
        requeue: true,
    });
    assert_eq!(decode(nack), Ok(m.clone()));
    assert_eq!(encode(&m), nack);
}

#[test]
fn exchange_declare_type_is_kind() {
    let m = ExchangeDeclare {
        kind: ShortStr::from("topic"),
        ..Default::default()
    };
    let bytes = encode(&m.clone().into());
    assert_eq!(decode(&bytes), Ok(Method::ExchangeDeclare(m)));
}

/// Counts heap allocations made by the current thread, to prove the
/// publish/ack decode fast paths allocate nothing.
mod alloc_count {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static ALLOCS: Cell<usize> = const { Cell::new(0) };
    }

    struct Counting;

    fn bump() {
        // `try_with` so allocations during thread teardown do not panic.
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }

    // SAFETY: delegates every call unchanged to the system allocator.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            bump();
            // SAFETY: same contract as the caller's.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as the caller's.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            bump();
            // SAFETY: same contract as the caller's.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Allocations made on this thread while running `f`.
    pub fn count<R>(f: impl FnOnce() -> R) -> (usize, R) {
        let before = ALLOCS.with(Cell::get);
        let r = f();
        (ALLOCS.with(Cell::get) - before, r)
    }
}

#[test]
fn publish_and_ack_decode_do_not_allocate() {
    use crate::protocol::frame::split_frame;

    let mut wire = BytesMut::new();
    let publish = Method::from(BasicPublish {
        exchange: ShortStr::from("amq.topic"),
        routing_key: ShortStr::from("a.b.c"),
        mandatory: true,
        ..Default::default()
    });
    let ack = Method::from(BasicAck {
        delivery_tag: 9,
        multiple: true,
    });
    crate::protocol::frame::encode_method(&mut wire, 1, &publish);
    crate::protocol::frame::encode_method(&mut wire, 1, &ack);
    // Split once outside the counter: the first split of a fresh buffer
    // promotes it to a shared allocation, which is the read buffer's cost.
    let first = split_frame(&mut wire, 0).ok().flatten().map(|f| f.payload);
    let second = split_frame(&mut wire, 0).ok().flatten().map(|f| f.payload);
    let (Some(first), Some(second)) = (first, second) else {
        panic!("two frames")
    };
    let (n, _) = alloc_count::count(|| vec![0u8; 16]);
    assert!(n >= 1, "the counter sees allocations");
    let (n, decoded) = alloc_count::count(|| Method::decode(first.clone()));
    assert_eq!(decoded, Ok(publish));
    assert_eq!(n, 0, "basic.publish decode allocated");
    let (n, decoded) = alloc_count::count(|| Method::decode(second.clone()));
    assert_eq!(decoded, Ok(ack));
    assert_eq!(n, 0, "basic.ack decode allocated");
    let (n, _) = alloc_count::count(|| {
        Method::decode(Bytes::from_static(b"\x00\x3c\x00\x28\x00\x00\x00\x01k\x00"))
    });
    assert_eq!(n, 0, "basic.publish decode from static allocated");
}
