//! 10,000 distinct topic patterns (with `*` and `#`) on one topic exchange, bound from
//! four connections (sluice's client and amqprs): keys that match no binding, exactly
//! one, and many reach exactly the queues a reference matcher says, once each; so do
//! a few hundred random keys; and after an unbind and the deletion of a queue holding
//! 250 of the bindings, routing follows.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};
use sluice::client::{Channel, ConsumeOptions, NO_PROPERTIES};

use crate::common::{bounded_for, unique, Broker};
use crate::support::*;

const BINDINGS: usize = 10_000;
const QUEUES: usize = 40;
const RANDOM_KEYS: usize = 300;
/// Literal words of the generated patterns and keys.
const VOCAB: [&str; 12] = [
    "a", "b", "c", "d", "e", "f", "g", "h", "eu", "us", "tick", "trade",
];
/// The one binding of the key that matches exactly one binding: neither word is in
/// [`VOCAB`], and every generated pattern has at least one literal word from it.
const SOLO: &str = "solo.only";

/// xorshift64*: deterministic patterns and keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        (self.next() >> 33) % n
    }
}

/// `BINDINGS - 1` distinct patterns of 1 to 5 words, each with at least one literal word
/// and many with `*` and `#`, plus [`SOLO`].
fn patterns() -> Vec<String> {
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(BINDINGS);
    while out.len() < BINDINGS - 1 {
        let words = 1 + rng.below(5) as usize;
        let parts: Vec<&str> = (0..words)
            .map(|_| match rng.below(10) {
                0 | 1 => "*",
                2 => "#",
                _ => VOCAB[rng.below(VOCAB.len() as u64) as usize],
            })
            .collect();
        if parts.iter().all(|p| *p == "*" || *p == "#") {
            continue;
        }
        let p = parts.join(".");
        if seen.insert(p.clone()) {
            out.push(p);
        }
    }
    out.push(SOLO.to_owned());
    out
}

fn random_keys() -> Vec<String> {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    (0..RANDOM_KEYS)
        .map(|_| {
            let words = 1 + rng.below(5) as usize;
            (0..words)
                .map(|_| VOCAB[rng.below(VOCAB.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect()
}

/// The bindings in force: (queue index, pattern).
struct Model {
    bindings: Vec<(usize, String)>,
    deleted: BTreeSet<usize>,
    counts: Vec<u32>,
}

impl Model {
    /// Queues a message with `key` reaches (each once).
    fn route(&self, key: &str) -> BTreeSet<usize> {
        self.bindings
            .iter()
            .filter(|(q, p)| !self.deleted.contains(q) && topic_matches(p, key))
            .map(|(q, _)| *q)
            .collect()
    }
    fn matching_bindings(&self, key: &str) -> usize {
        self.bindings
            .iter()
            .filter(|(q, p)| !self.deleted.contains(q) && topic_matches(p, key))
            .count()
    }
}

/// Publishes `keys` (mandatory) and waits until every one is confirmed (acked).
async fn publish_keys(ch: &Channel, exchange: &str, keys: &[String]) {
    let mut pending = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        pending.push(
            ch.basic_publish_confirmed(
                exchange,
                key.as_str(),
                true,
                NO_PROPERTIES,
                body(i as u32 + 1),
            )
            .await
            .expect("basic.publish"),
        );
    }
    for c in pending {
        assert!(c.await.expect("confirm"), "publish nacked");
    }
}

/// Asserts every live queue holds what the model says.
async fn check_counts(ch: &Channel, names: &[String], model: &Model, phase: &str) {
    let mut wrong = Vec::new();
    for (i, q) in names.iter().enumerate() {
        if model.deleted.contains(&i) {
            continue;
        }
        let got = ch
            .queue_declare(q, passive())
            .await
            .expect("passive declare")
            .message_count;
        if got != model.counts[i] {
            wrong.push(format!("{q}: {got}, expected {}", model.counts[i]));
        }
    }
    assert!(
        wrong.is_empty(),
        "{phase}: queue counts differ:\n  {}",
        wrong.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_topic_bindings_route_exactly() {
    bounded_for(Duration::from_secs(90), async {
        let mut broker = Broker::start(2);
        let exchange = unique("scale-topic");
        let admin = connect(&broker).await;
        let ach = admin.open_channel().await.expect("open channel");
        ach.exchange_declare(&exchange, "topic", Default::default())
            .await
            .expect("exchange.declare");
        let names: Vec<String> = (0..QUEUES).map(|i| unique(&format!("bind-q{i}"))).collect();
        for q in &names {
            ach.queue_declare(q, Default::default())
                .await
                .expect("queue.declare");
        }
        let patterns = patterns();
        let bindings: Vec<(usize, String)> = patterns
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i % QUEUES, p))
            .collect();
        let solo_queue = bindings.last().unwrap().0;

        // Bind from four connections at once: two sluice clients, two amqprs.
        let t0 = std::time::Instant::now();
        let mut tasks = Vec::new();
        for part in 0..4usize {
            let mine: Vec<(String, String)> = bindings
                .iter()
                .skip(part)
                .step_by(4)
                .map(|(q, p)| (names[*q].clone(), p.clone()))
                .collect();
            let exchange = exchange.clone();
            if part % 2 == 0 {
                let conn = connect(&broker).await;
                tasks.push(tokio::spawn(async move {
                    let ch = conn.open_channel().await.expect("open channel");
                    for (q, p) in &mine {
                        ch.queue_bind(q, &exchange, p, Default::default())
                            .await
                            .unwrap_or_else(|e| panic!("bind {q} {p}: {e}"));
                    }
                    drop(ch);
                    let _ = conn.close().await;
                }));
            } else {
                let conn = broker.connect().await;
                tasks.push(tokio::spawn(async move {
                    let ch = conn.channel().await;
                    ch.exchange_declare(
                        ExchangeDeclareArguments::new(&exchange, "topic")
                            .passive(true)
                            .finish(),
                    )
                    .await
                    .expect("passive exchange.declare");
                    for (q, p) in &mine {
                        ch.queue_bind(QueueBindArguments::new(q, &exchange, p))
                            .await
                            .unwrap_or_else(|e| panic!("bind {q} {p}: {e}"));
                    }
                    conn.close().await;
                }));
            }
        }
        for t in tasks {
            t.await.expect("binder");
        }
        let bound = t0.elapsed();

        let mut model = Model {
            bindings,
            deleted: BTreeSet::new(),
            counts: vec![0; QUEUES],
        };
        let publisher = connect(&broker).await;
        let mut pch = publisher.open_channel().await.expect("open channel");
        pch.confirm_select().await.expect("confirm.select");
        let mut returns = pch.take_returns().unwrap();

        // A key no binding matches: returned, and no queue has it.
        let none = "zz.top";
        assert!(model.route(none).is_empty());
        publish_keys(&pch, &exchange, &[none.to_owned()]).await;
        let r = returns
            .try_recv()
            .expect("the unroutable publish is returned");
        assert_eq!(
            (r.reply_code, r.routing_key.to_string()),
            (312, none.to_owned())
        );
        check_counts(&ach, &names, &model, "key matching no binding").await;

        // A key exactly one binding matches.
        assert_eq!(model.matching_bindings(SOLO), 1);
        publish_keys(&pch, &exchange, &[SOLO.to_owned()]).await;
        model.counts[solo_queue] += 1;
        check_counts(&ach, &names, &model, "key matching one binding").await;

        // A key many bindings match: each of their queues gets it once.
        let many = "a.b.c";
        let many_bindings = model.matching_bindings(many);
        let many_queues = model.route(many);
        assert!(
            many_bindings >= 50,
            "{many} matches only {many_bindings} bindings"
        );
        publish_keys(&pch, &exchange, &[many.to_owned()]).await;
        for q in &many_queues {
            model.counts[*q] += 1;
        }
        check_counts(&ach, &names, &model, "key matching many bindings").await;

        // Random keys.
        let keys = random_keys();
        publish_keys(&pch, &exchange, &keys).await;
        let mut unroutable = 0;
        for k in &keys {
            let qs = model.route(k);
            unroutable += usize::from(qs.is_empty());
            for q in qs {
                model.counts[q] += 1;
            }
        }
        check_counts(&ach, &names, &model, "random keys").await;
        let mut returned = 0;
        while let Ok(r) = returns.try_recv() {
            assert_eq!(r.reply_code, 312);
            returned += 1;
        }
        assert_eq!(returned, unroutable, "returns of the random keys");

        // Unbind SOLO; delete a queue holding 250 bindings (and a consumer).
        ach.queue_unbind(&names[solo_queue], &exchange, SOLO, Default::default())
            .await
            .expect("queue.unbind");
        model.bindings.pop();
        let victim = (solo_queue + 1) % QUEUES;
        let _consumer = ach
            .basic_consume(&names[victim], ConsumeOptions::default())
            .await
            .expect("basic.consume");
        let cch = admin.open_channel().await.expect("open channel");
        cch.queue_delete(&names[victim], false, false)
            .await
            .expect("queue.delete");
        model.deleted.insert(victim);
        publish_keys(&pch, &exchange, &[SOLO.to_owned(), many.to_owned()]).await;
        let r = returns
            .try_recv()
            .expect("SOLO is returned after the unbind");
        assert_eq!(
            (r.reply_code, r.routing_key.to_string()),
            (312, SOLO.to_owned())
        );
        assert!(returns.try_recv().is_err(), "only SOLO is returned");
        for q in model.route(many) {
            model.counts[q] += 1;
        }
        check_counts(&cch, &names, &model, "after unbind and delete").await;

        eprintln!(
            "fanout_scale bindings: {BINDINGS} bindings on {QUEUES} queues bound in {bound:?}; \
             `{many}` matches {many_bindings} bindings on {} queues; {unroutable} of \
             {RANDOM_KEYS} random keys unroutable",
            many_queues.len()
        );
        broker.assert_healthy();
    })
    .await;
}
