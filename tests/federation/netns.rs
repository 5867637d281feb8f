//! The two-level tree (root → 2 relays → subscribers) with each broker in its own
//! network namespace, the links over veth pairs (10.231.R.x, inside the namespaces the
//! test creates) with `tc netem` delay where the kernel has it: every subscriber gets
//! every message once and in order, and the time bindings take to propagate over the
//! pair is printed (not asserted). Skipped, with a message, unless the test runs as root
//! and `ip netns` works.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use amqprs::connection::OpenConnectionArguments;

use crate::cluster::{
    bind, exchange_toml, propagated_keys, publish_numbered, upstream_toml, wait_keys, Node,
    Subscriber, BINDING_TIMEOUT, DELIVERY_TIMEOUT, LINK_TIMEOUT,
};
use crate::common::broker::connect_to;
use crate::namespaces::{in_netns, join, root_addr, Star};

const X: &str = "amq.topic";
const COUNT: u32 = 1_000;
/// The AMQP port every node uses on its namespace's addresses.
const PORT: u16 = 5672;
/// Bindings timed over the pair.
const BULK: usize = 1_000;

/// The root admits the relays' user from non-loopback addresses (guest may not).
const ROOT_TOML: &str = "[auth]\nusers = [\
    { name = \"guest\", password = \"guest\", tags = [\"administrator\"] }, \
    { name = \"fed\", password = \"fedsecret\" }]\n";

fn loopback(port: u16) -> OpenConnectionArguments {
    OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest")
}

fn tree_in_namespaces() {
    let star = match Star::new(2) {
        Ok(star) => star,
        Err(why) => {
            crate::cluster::skip("the tree in network namespaces", &why);
            return;
        }
    };
    let root = Node::start_in_netns("ns-root", PORT, ROOT_TOML, star.path(0));
    let relays: Vec<Node> = (1..=2)
        .map(|r| {
            let uri = format!("amqp://fed:fedsecret@{}:{PORT}/%2f", root_addr(r));
            let toml =
                upstream_toml("root", &uri, "reconnect_delay = 1") + &exchange_toml(X, &["root"]);
            Node::start_in_netns(&format!("ns-relay-{r}"), PORT, &toml, star.path(r))
        })
        .collect();
    for relay in &relays {
        relay.wait_link_running("root", X, 1, LINK_TIMEOUT);
    }
    println!(
        "namespaces {:?}, netem delay {}",
        star.names,
        if star.delayed {
            crate::namespaces::DELAY
        } else {
            "none"
        }
    );

    // Subscribers inside each relay's namespace.
    let (ready_tx, ready_rx) = mpsc::channel();
    let subscribers: Vec<_> = relays
        .iter()
        .enumerate()
        .map(|(i, relay)| {
            let (port, label, ready) =
                (relay.broker().port(), relay.name.clone(), ready_tx.clone());
            in_netns(star.path(i + 1), move || async move {
                let mut sub =
                    Subscriber::on(connect_to(&loopback(port)).await, &label, X, &["ns.#"]).await;
                ready.send(()).expect("signal ready");
                sub.collect(2 * COUNT as usize, DELIVERY_TIMEOUT).await;
                sub.assert_quiet().await;
                sub.assert_exactly(&["p1", "p2"], COUNT);
                sub.got.len()
            })
        })
        .collect();
    for _ in &subscribers {
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a subscriber in its namespace did not get ready");
    }
    // Publishers inside the root's namespace, once both relays' interest is there.
    let (root_port, root_http) = (root.broker().port(), root.http_port());
    let relay_names: Vec<String> = relays.iter().map(|r| r.name.clone()).collect();
    let publishers = in_netns(star.path(0), move || async move {
        for name in &relay_names {
            let took = wait_keys(root_http, X, name, BINDING_TIMEOUT, "ns.#", |k| {
                k.contains("ns.#")
            });
            println!("{name}: ns.# at the root {took:?} after its subscriber was ready");
        }
        let mut tasks = Vec::new();
        for (publisher, key) in [("p1", "ns.a"), ("p2", "ns.b")] {
            let conn = connect_to(&loopback(root_port)).await;
            tasks.push(tokio::spawn(async move {
                let ch = conn.channel().await;
                publish_numbered(&ch, X, key, publisher, COUNT).await;
                conn.close().await;
            }));
        }
        for t in tasks {
            t.await.expect("publisher task");
        }
    });
    join(publishers);
    for handle in subscribers {
        assert_eq!(join(handle), 2 * COUNT as usize);
    }

    // Binding propagation over the pair: BULK keys bound at relay 1.
    let relay_port = relays[0].broker().port();
    let relay_name = relays[0].name.clone();
    let (start_tx, start_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let binder = in_netns(star.path(1), move || async move {
        let conn = connect_to(&loopback(relay_port)).await;
        let ch = conn.channel().await;
        let queue = ch.declare_server_named().await;
        start_tx.send(Instant::now()).expect("send start");
        for i in 0..BULK {
            bind(&ch, &queue, X, &format!("nsbulk.{i}")).await;
        }
        // The queue (and its bindings) live as long as the connection: keep it until the
        // root has seen them.
        let seen =
            tokio::task::spawn_blocking(move || done_rx.recv_timeout(Duration::from_secs(90)))
                .await
                .expect("wait for the watcher");
        conn.close().await;
        seen.is_ok()
    });
    let start = start_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("binder started");
    let watcher = in_netns(star.path(0), move || async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let n = propagated_keys(root_http, X, &relay_name)
                .iter()
                .filter(|k| k.starts_with("nsbulk."))
                .count();
            if n == BULK {
                return start.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "{n} of {BULK} bindings at the root after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let took = join(watcher);
    println!("{BULK} bindings bound at a relay reached the root over the pair in {took:?}");
    done_tx.send(()).expect("release the binder");
    assert!(join(binder), "the binder was not released");
    for mut node in relays.into_iter().chain([root]) {
        node.assert_healthy();
    }
    drop(star);
}

async fn two_level_tree_in_namespaces() {
    tokio::task::spawn_blocking(tree_in_namespaces)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}

mod tests {
    fed_tests! {
        two_level_tree_in_namespaces => 180,
    }
}
