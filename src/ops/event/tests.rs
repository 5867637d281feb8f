use super::*;

#[test]
fn renders_with_code() {
    let e = OpsEvent::BrokerListening {
        addr: SocketAddr::from(([127, 0, 0, 1], 5672)),
    };
    assert_eq!(
        e.to_string(),
        "BRK-1002 : Starting : Listening on TCP 127.0.0.1:5672"
    );
    let e = OpsEvent::QueueCreate {
        vhost: "/".into(),
        queue: "q".into(),
        durable: true,
        exclusive: false,
        auto_delete: true,
    };
    assert_eq!(
        e.to_string(),
        "[vh(/)/qu(q)] QUE-1001 : Create Durable AutoDelete"
    );
    // As config/log-codes.md documents it.
    let e = OpsEvent::SendRingUnavailable {
        shard: 0,
        error: "Operation not permitted (os error 1)".into(),
    };
    assert_eq!(
        e.to_string(),
        "BRK-1027 : Send ring unavailable : shard 0 : Operation not permitted (os error 1) : one send per connection"
    );
    let e = OpsEvent::HugePages {
        allowed: false,
        error: None,
    };
    assert_eq!(e.to_string(), "BRK-1028 : Transparent huge pages : off");
    let e = OpsEvent::HugePages {
        allowed: false,
        error: Some("Invalid argument (os error 22)".into()),
    };
    assert_eq!(
        e.to_string(),
        "BRK-1028 : Transparent huge pages : could not set off : Invalid argument (os error 22) : the kernel's setting stays"
    );
}

#[test]
fn flow_lines_read_like_the_seed() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1200), "1,200");
    assert_eq!(thousands(10_485_760), "10,485,760");
    let e = OpsEvent::QueueOverfull {
        vhost: "/test".into(),
        queue: "MyQueue".into(),
        size: 1200,
        capacity: 1000,
    };
    assert_eq!(
        e.to_string(),
        "[vh(/test)/qu(MyQueue)] QUE-1003 : Overfull : Size : 1,200 bytes, Capacity : 1,000"
    );
    let e = OpsEvent::QueueUnderfull {
        vhost: "/test".into(),
        queue: "MyQueue".into(),
        size: 600,
        resume: 800,
    };
    assert_eq!(
        e.to_string(),
        "[vh(/test)/qu(MyQueue)] QUE-1004 : Underfull : Size : 600 bytes, Resume Capacity : 800"
    );
    let e = OpsEvent::FlowEnforced {
        subject: "con:2(guest@127.0.0.1:5000/test)".into(),
        channel: 1,
        cause: FlowCause::Queue("MyQueue".into()),
    };
    assert_eq!(
        e.to_string(),
        "[con:2(guest@127.0.0.1:5000/test)/ch:1] CHN-1005 : Flow Control Enforced (Queue MyQueue)"
    );
    let e = OpsEvent::FlowRemoved {
        subject: "con:2(guest@127.0.0.1:5000/test)".into(),
        channel: 1,
    };
    assert_eq!(
        e.to_string(),
        "[con:2(guest@127.0.0.1:5000/test)/ch:1] CHN-1006 : Flow Control Removed"
    );
}

#[test]
fn slow_consumer_lines_carry_their_numbers() {
    let r = SlowReport {
        vhost: "/".into(),
        queue: "sub".into(),
        threshold: "count",
        limit: "10".into(),
        policy: "delete",
        count: 11,
        bytes: 704,
        age_ms: Some(1500),
        rate: 2.0,
        arrival: 50.0,
        in_seconds: Some(4.25),
        exempt: None,
    };
    assert_eq!(
        OpsEvent::SlowConsumerDetected(Box::new(r.clone())).to_string(),
        "[vh(/)/qu(sub)] SUB-1003 : Slow consumer detected : queue=sub depth=704 bytes count=11 age=1,500 ms rate=2.0 msg/s threshold=count (limit 10) policy=delete"
    );
    assert_eq!(
        OpsEvent::SlowConsumerPredicted(Box::new(r)).to_string(),
        "[vh(/)/qu(sub)] SUB-1004 : Slow consumer predicted : threshold=count (limit 10) in 4.2 s : queue=sub depth=704 bytes count=11 age=1,500 ms rate=2.0 msg/s arrival=50.0 msg/s growth=+48.0 msg/s policy=delete"
    );
}
