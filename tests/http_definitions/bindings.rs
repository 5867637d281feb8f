//! Bindings over the management API: created by `POST` (201 with RabbitMQ's relative
//! `Location`: the destination and the properties key, quoted again), listed from every
//! side, deleted by their properties key (204, then 404), exchange-to-exchange bindings
//! that route.

use serde_json::json;

use crate::common::Broker;
use crate::{admin, assert_empty, assert_error, object_not_found, open, passive_count, publish};

fn declare(port: u16, path: &str, body: serde_json::Value) {
    assert_empty(&admin(port, "PUT", path, Some(body)), 201);
}

#[test]
fn bindings_are_created_listed_and_deleted_by_properties_key() {
    let broker = Broker::start(2);
    let port = broker.http_port();
    declare(port, "/api/exchanges/%2F/orders", json!({"type": "topic"}));
    declare(port, "/api/queues/%2F/eu", json!({"durable": false}));

    let created = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/orders/q/eu",
        Some(json!({"routing_key": "eu.#"})),
    );
    assert_empty(&created, 201);
    // pack_binding_props quotes `#`, and the URL quotes the key once more.
    let location = created.headers.get("location").expect("Location");
    assert_eq!(location, "eu/eu.%2523");
    let expected = json!({
        "source": "orders", "vhost": "/", "destination": "eu",
        "destination_type": "queue", "routing_key": "eu.#", "arguments": {},
        "properties_key": "eu.%23",
    });
    // The Location, resolved against the POST's path, is the binding.
    let one = admin(
        port,
        "GET",
        &format!("/api/bindings/%2F/e/orders/q/{location}"),
        None,
    );
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json(), expected);
    let between = admin(port, "GET", "/api/bindings/%2F/e/orders/q/eu", None);
    assert_eq!(between.status, 200, "{}", between.body);
    assert_eq!(between.json(), json!([expected]));

    // The queue's list starts with the default exchange's implicit binding.
    let default = json!({
        "source": "", "vhost": "/", "destination": "eu", "destination_type": "queue",
        "routing_key": "eu", "arguments": {}, "properties_key": "eu",
    });
    let of_queue = admin(port, "GET", "/api/queues/%2F/eu/bindings", None);
    assert_eq!(of_queue.status, 200, "{}", of_queue.body);
    assert_eq!(of_queue.json(), json!([default, expected]));
    let of_source = admin(
        port,
        "GET",
        "/api/exchanges/%2F/orders/bindings/source",
        None,
    );
    assert_eq!(of_source.json(), json!([expected]));
    let of_dest = admin(
        port,
        "GET",
        "/api/exchanges/%2F/orders/bindings/destination",
        None,
    );
    assert_eq!(of_dest.json(), json!([]));
    for path in ["/api/bindings", "/api/bindings/%2F"] {
        let all = admin(port, "GET", path, None).json();
        let all = all.as_array().expect("list");
        assert!(all.contains(&expected), "{path}: {all:?}");
        assert!(all.contains(&default), "{path}: {all:?}");
    }

    // Arguments make the key `routing key ~ hash`; the hash finds the binding again.
    declare(port, "/api/exchanges/%2F/hdr", json!({"type": "headers"}));
    let with_args = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/hdr/q/eu",
        Some(json!({"routing_key": "", "arguments": {"x-match": "any", "region": "eu"}})),
    );
    assert_empty(&with_args, 201);
    let location = with_args.headers.get("location").expect("Location").clone();
    let props = location.strip_prefix("eu/").expect("the destination first");
    assert!(props.starts_with('~') && props.len() == 7, "{props}");
    let listed = admin(port, "GET", "/api/bindings/%2F/e/hdr/q/eu", None).json();
    assert_eq!(listed[0]["properties_key"], props);
    assert_eq!(
        listed[0]["arguments"],
        json!({"x-match": "any", "region": "eu"})
    );
    let mut c = open(&broker);
    let headers = vec![(
        "region".to_owned(),
        crate::common::wire::Val::LongStr(b"eu".to_vec()),
    )];
    let props_eu = crate::common::wire::Props {
        headers: Some(headers),
        ..Default::default()
    };
    c.publish(1, "hdr", "", &props_eu, b"by header")
        .expect("publish");
    assert_eq!(passive_count(&mut c, 1, "eu"), Ok(1));
    let path = format!("/api/bindings/%2F/e/hdr/q/eu/{props}");
    assert_empty(&admin(port, "DELETE", &path, None), 204);
    let again = admin(port, "DELETE", &path, None);
    assert_eq!((again.status, again.json()), (404, object_not_found()));

    // Deleted by its key: 204, then 404; the topic publish is routed no more.
    publish(&mut c, "orders", "eu.de", b"routed");
    assert_eq!(passive_count(&mut c, 1, "eu"), Ok(2));
    let path = "/api/bindings/%2F/e/orders/q/eu/eu.%23";
    assert_empty(&admin(port, "DELETE", path, None), 204);
    let again = admin(port, "DELETE", path, None);
    assert_eq!((again.status, again.json()), (404, object_not_found()));
    publish(&mut c, "orders", "eu.de", b"unrouted");
    assert_eq!(passive_count(&mut c, 1, "eu"), Ok(2));
    assert_eq!(
        admin(port, "GET", "/api/bindings/%2F/e/orders/q/eu", None).json(),
        json!([])
    );

    // The ends must exist; the default exchange is not bound by clients.
    assert_error(
        &admin(
            port,
            "POST",
            "/api/bindings/%2F/e/orders/q/nope",
            Some(json!({})),
        ),
        404,
        "not_found",
        "no queue 'nope' in vhost '/'",
    );
    assert_error(
        &admin(
            port,
            "POST",
            "/api/bindings/%2F/e/nope/q/eu",
            Some(json!({})),
        ),
        404,
        "not_found",
        "no exchange 'nope' in vhost '/'",
    );
    assert_error(
        &admin(
            port,
            "POST",
            "/api/bindings/%2F/e/amq.default/q/eu",
            Some(json!({})),
        ),
        401,
        "not_authorised",
        "Access refused.",
    );
    let bad = admin(port, "GET", "/api/bindings/%2F/e/orders/q/eu/a~b~c", None);
    assert_eq!(bad.status, 400, "{}", bad.body);
}

/// `POST /api/bindings/{vhost}/e/{source}/e/{destination}`: the exchange-to-exchange
/// binding routes (a fanout into a direct exchange that picks by key), is listed as the
/// destination's, and goes with its key.
#[test]
fn exchange_to_exchange_bindings_route() {
    let broker = Broker::start(2);
    let port = broker.http_port();
    declare(port, "/api/exchanges/%2F/src", json!({"type": "fanout"}));
    declare(port, "/api/exchanges/%2F/dst", json!({"type": "direct"}));
    declare(port, "/api/queues/%2F/picked", json!({}));
    let to_queue = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/dst/q/picked",
        Some(json!({"routing_key": "r"})),
    );
    assert_empty(&to_queue, 201);
    let chained = admin(
        port,
        "POST",
        "/api/bindings/%2F/e/src/e/dst",
        Some(json!({"routing_key": "any"})),
    );
    assert_empty(&chained, 201);
    assert_eq!(
        chained.headers.get("location").map(String::as_str),
        Some("dst/any")
    );
    let expected = json!({
        "source": "src", "vhost": "/", "destination": "dst",
        "destination_type": "exchange", "routing_key": "any", "arguments": {},
        "properties_key": "any",
    });
    assert_eq!(
        admin(
            port,
            "GET",
            "/api/exchanges/%2F/dst/bindings/destination",
            None
        )
        .json(),
        json!([expected])
    );
    assert_eq!(
        admin(port, "GET", "/api/bindings/%2F/e/src/e/dst", None).json(),
        json!([expected])
    );

    let mut c = open(&broker);
    publish(&mut c, "src", "r", b"through both");
    publish(&mut c, "src", "elsewhere", b"dst drops it");
    assert_eq!(passive_count(&mut c, 1, "picked"), Ok(1));

    assert_empty(
        &admin(port, "DELETE", "/api/bindings/%2F/e/src/e/dst/any", None),
        204,
    );
    publish(&mut c, "src", "r", b"no longer chained");
    assert_eq!(passive_count(&mut c, 1, "picked"), Ok(1));
    let again = admin(port, "DELETE", "/api/bindings/%2F/e/src/e/dst/any", None);
    assert_eq!((again.status, again.json()), (404, object_not_found()));
}
