//! Binding propagation: a relay's bindings reach the upstream, coalesced per key, and
//! 10,000 of them propagate.

use std::time::{Duration, Instant};

use crate::cluster::{
    bind, exchange_toml, propagated_keys, publish_numbered, queue_json, unbind, upstream_queue,
    upstream_toml, wait_keys, Node, Subscriber, BINDING_TIMEOUT, DELIVERY_TIMEOUT, LINK_TIMEOUT,
};

const X: &str = "amq.topic";
const COUNT: u32 = 200;

fn relay_of(root: &Node) -> String {
    upstream_toml("root", &root.uri(), "reconnect_delay = 1") + &exchange_toml(X, &["root"])
}

/// How many messages the root routed to the relay's upstream queue so far.
fn link_published(root: &Node, relay: &Node) -> u64 {
    let name = upstream_queue(X, &relay.name);
    let q = queue_json(root.http_port(), &name)
        .unwrap_or_else(|| panic!("the root has no queue {name:?}"));
    q["message_stats"]["publish"]
        .as_u64()
        .unwrap_or_else(|| panic!("no message_stats.publish in {q}"))
}

async fn bind_unbind_coalesce() {
    let root = Node::start("bind-root", "");
    let relay = Node::start("bind-relay", &relay_of(&root));
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    let http = root.http_port();
    // Only the relay's own interest crosses: nothing is bound yet.
    let before = propagated_keys(http, X, &relay.name);
    assert!(
        before.is_empty(),
        "bindings before any local bind: {before:?}"
    );

    // One queue on bind.one.
    let mut one = Subscriber::new(&relay, "one", X, &["bind.one"]).await;
    wait_keys(http, X, &relay.name, BINDING_TIMEOUT, "bind.one", |k| {
        k.contains("bind.one")
    });
    // Two queues on bind.two: the upstream has the key once.
    let mut two_a = Subscriber::new(&relay, "two-a", X, &["bind.two"]).await;
    let mut two_b = Subscriber::new(&relay, "two-b", X, &["bind.two"]).await;
    wait_keys(http, X, &relay.name, BINDING_TIMEOUT, "bind.two", |k| {
        k.contains("bind.two")
    });
    let dup = crate::cluster::bindings(http)
        .into_iter()
        .filter(|(s, d, k)| s == X && d.starts_with("federation: ") && k == "bind.two")
        .count();
    assert_eq!(
        dup, 1,
        "bind.two bound upstream {dup} times for two local queues"
    );

    let conn = root.connect().await;
    let ch = conn.channel().await;
    publish_numbered(&ch, X, "bind.one", "one", COUNT).await;
    publish_numbered(&ch, X, "bind.two", "two", COUNT).await;
    one.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    two_a.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    two_b.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    for sub in [&mut one, &mut two_a, &mut two_b] {
        sub.assert_quiet().await;
    }
    one.assert_exactly(&["one"], COUNT);
    two_a.assert_exactly(&["two"], COUNT);
    two_b.assert_exactly(&["two"], COUNT);
    // A key nobody at the relay wants never crosses the link: of these and a marker
    // behind them, only the marker enters the link queue.
    let published_before = link_published(&root, &relay);
    publish_numbered(&ch, X, "bind.nobody", "nobody", COUNT).await;
    publish_numbered(&ch, X, "bind.one", "marker", 1).await;
    one.got.clear();
    one.collect(1, DELIVERY_TIMEOUT).await;
    one.assert_exactly(&["marker"], 1);
    assert_eq!(
        link_published(&root, &relay),
        published_before + 1,
        "messages no relay binding wants went into the link queue"
    );

    // Unbind one of the two: the key stays upstream and the other still gets it.
    unbind(&two_a.ch, &two_a.queue, X, "bind.two").await;
    // Propagation is asynchronous: give an unbind that should not happen the time a
    // bind takes to show, then check the key is still there.
    wait_keys(http, X, &relay.name, BINDING_TIMEOUT, "bind.two", |k| {
        k.contains("bind.two")
    });
    publish_numbered(&ch, X, "bind.two", "two-again", COUNT).await;
    two_b.got.clear();
    two_b.collect(COUNT as usize, DELIVERY_TIMEOUT).await;
    two_b.assert_quiet().await;
    two_b.assert_exactly(&["two-again"], COUNT);
    two_a.assert_quiet().await;

    // Unbind the last: the upstream binding goes, and the root routes nothing over the
    // link for that key.
    unbind(&two_b.ch, &two_b.queue, X, "bind.two").await;
    let took = wait_keys(
        http,
        X,
        &relay.name,
        BINDING_TIMEOUT,
        "without bind.two",
        |k| !k.contains("bind.two") && k.contains("bind.one"),
    );
    println!("last unbind of bind.two reached the root in {took:?}");
    let published_before = link_published(&root, &relay);
    publish_numbered(&ch, X, "bind.two", "two-gone", COUNT).await;
    // A marker behind them, on a key still bound, shows the root has routed them all.
    publish_numbered(&ch, X, "bind.one", "marker", 1).await;
    one.got.clear();
    one.collect(1, DELIVERY_TIMEOUT).await;
    one.assert_exactly(&["marker"], 1);
    assert_eq!(
        link_published(&root, &relay),
        published_before + 1,
        "after the last unbind the root still routed bind.two over the link"
    );
    two_a.assert_quiet().await;
    two_b.assert_quiet().await;
    conn.close().await;
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

/// Distinct binding keys bound at the relay.
const MANY: usize = 10_000;

/// Channels the relay's bindings are made on, concurrently.
const BINDERS: usize = 4;

async fn ten_thousand_bindings() {
    let root = Node::start("bulk-root", "");
    let relay = Node::start("bulk-relay", &relay_of(&root));
    relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    let conn = relay.connect().await;
    let ch = conn.channel().await;
    let queue = ch.declare_server_named().await;
    let start = Instant::now();
    let mut binders = Vec::new();
    for b in 0..BINDERS {
        let ch = conn.channel().await;
        let queue = queue.clone();
        binders.push(tokio::spawn(async move {
            for i in (b..MANY).step_by(BINDERS) {
                bind(&ch, &queue, X, &format!("bulk.{i}")).await;
            }
        }));
    }
    for b in binders {
        b.await.expect("binder task");
    }
    let bound = start.elapsed();
    let http = root.http_port();
    // Polled gently: each poll lists every binding of the root.
    let deadline = Instant::now() + Duration::from_secs(90);
    let keys = loop {
        let keys = propagated_keys(http, X, &relay.name);
        if keys.len() >= MANY || Instant::now() >= deadline {
            break keys;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let total = start.elapsed();
    let want: std::collections::BTreeSet<String> = (0..MANY).map(|i| format!("bulk.{i}")).collect();
    assert_eq!(keys.len(), MANY, "upstream binding count after {total:?}");
    assert_eq!(keys, want, "upstream binding keys");
    println!(
        "{MANY} bindings: bind-ok for all at the relay after {bound:?}, all at the upstream \
         after {total:?} ({:?} after the last bind-ok; debug build, polled every 250 ms)",
        total - bound
    );
    conn.close().await;
    for mut node in [relay, root] {
        node.assert_healthy();
    }
}

mod tests {
    fed_tests! {
        bind_unbind_coalesce => 120,
        ten_thousand_bindings => 150,
    }
}
