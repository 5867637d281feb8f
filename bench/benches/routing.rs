//! `cargo bench -p sluice-bench --bench routing`: topic routing with 10,000 distinct
//! binding patterns on one exchange (exact words, `*` and `#`), through sluice's
//! public model API — the per-shard [`Directory`] a publish is routed with, and the
//! [`TopicTrie`] under it — for routing keys that match 0, 1 and about 100 bindings;
//! plus what binding, unbinding and deleting a queue cost at that size, and a route that
//! reaches the topic exchange through an exchange-to-exchange binding (a direct exchange
//! in front of it). Nanoseconds per operation (best of five rounds).
//! Plain timing loops (no benchmark framework): figures compare commits on one
//! machine. Issue 9 asks that a route cost O(words in the key) plus the matches:
//! the 0- and 1-match figures should not grow with the number of patterns.

use std::hint::black_box;
use std::time::Instant;

use sluice::model::exchange::{Binding, ExchangeBinding, ExchangeDef, ExchangeKind, Targets};
use sluice::model::ids::{QueueId, QueueRef};
use sluice::model::routing::{Directory, DirectoryChange};
use sluice::model::topic_trie::TopicTrie;
use sluice::protocol::{FieldTable, ShortStr};

const EXCHANGE: &str = "bench.topic";
const PATTERNS: usize = 10_000;

/// The key about 100 patterns match: six words.
const KEY_100: &str = "m.a.b.c.d.e";

fn measure(name: &str, ops: u64, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
    }
    println!("{name:<52} {best:>10.1} ns/op");
    best
}

/// Patterns that match [`KEY_100`]: each word kept or `*` (64), and each run of
/// words (possibly empty) replaced by `#`, at least one literal word left.
fn family() -> Vec<String> {
    let words: Vec<&str> = KEY_100.split('.').collect();
    let n = words.len();
    let mut out = Vec::new();
    for mask in 0u32..(1 << n) {
        if mask == (1 << n) - 1 {
            continue; // all stars: keep a literal
        }
        let p: Vec<&str> = (0..n)
            .map(|i| if mask & (1 << i) != 0 { "*" } else { words[i] })
            .collect();
        out.push(p.join("."));
    }
    for i in 0..=n {
        for j in i..=n {
            if i == 0 && j == n {
                continue; // "#" alone matches everything
            }
            let mut p: Vec<&str> = words[..i].to_vec();
            p.push("#");
            p.extend_from_slice(&words[j..]);
            out.push(p.join("."));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `n` distinct patterns (at least the family): the family of [`KEY_100`], then exact `e{a}.{b}.{c}`,
/// `*` patterns `s{a}.*.{c}` and `#` patterns `h{a}.#.{c}`, none of which matches
/// another class's keys.
fn patterns(n: usize) -> Vec<String> {
    let mut out = family();
    let mut seen: std::collections::HashSet<String> = out.iter().cloned().collect();
    let mut i = 0usize;
    while out.len() < n {
        let (a, c) = (i / 10, i % 10);
        let p = match c {
            0..=6 => format!("e{a}.{}.{c}", i % 7),
            7 | 8 => format!("s{a}.*.{c}"),
            _ => format!("h{a}.#.{c}"),
        };
        if seen.insert(p.clone()) {
            out.push(p);
        }
        i += 1;
    }
    out
}

/// 100 keys that each match one pattern of the kind starting with `first`
/// (`*` replaced by a word).
fn one_match_keys(pats: &[String], first: char) -> Vec<ShortStr> {
    pats.iter()
        .filter(|p| p.starts_with(first))
        .take(100)
        .map(|p| p.replace('*', "x").as_str().into())
        .collect()
}

fn queue(i: usize) -> QueueRef {
    QueueRef {
        id: QueueId(i as u64 + 1),
        home: (i % 2) as u16,
    }
}

fn binding(i: usize, pattern: &str) -> Binding {
    Binding {
        queue: queue(i),
        queue_name: ShortStr::from(format!("q{i}").as_str()),
        routing_key: ShortStr::from(pattern),
        arguments: FieldTable::new(),
    }
}

fn bind(i: usize, pattern: &str) -> DirectoryChange {
    DirectoryChange::Bind {
        vhost: 0,
        exchange: EXCHANGE.into(),
        binding: binding(i, pattern),
    }
}

fn directory() -> Directory {
    let mut dir = Directory::new(&["/".to_owned()]);
    dir.apply(&DirectoryChange::DeclareExchange {
        vhost: 0,
        def: ExchangeDef {
            name: EXCHANGE.into(),
            kind: ExchangeKind::Topic,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        },
    });
    dir
}

/// Route and trie-match figures for each key class with `pats` bound (one queue
/// per pattern).
fn route_figures(dir: &Directory, pats: &[String]) {
    let n = pats.len();
    let vh = dir.vhost(0).expect("vhost /");
    let ex: ShortStr = EXCHANGE.into();
    let no_match: Vec<ShortStr> = (0..100)
        .map(|i| format!("q{i}.z.z").as_str().into())
        .collect();
    let keys: [(&str, Vec<ShortStr>); 4] = [
        ("0 matches", no_match),
        ("1 match (exact)", one_match_keys(pats, 'e')),
        ("1 match (*)", one_match_keys(pats, 's')),
        ("~100 matches", vec![KEY_100.into(); 100]),
    ];
    let mut out = Targets::new();
    let mut trie: TopicTrie<QueueRef> = TopicTrie::new();
    for (i, p) in pats.iter().enumerate() {
        trie.insert(p.as_bytes(), queue(i));
    }
    let mut hits: Vec<QueueRef> = Vec::new();
    for (what, ks) in &keys {
        if ks.is_empty() {
            continue;
        }
        out.clear();
        vh.route(&ex, &ks[0], || None, &mut out)
            .expect("exchange exists");
        let matched = out.len();
        let ops = (ks.len() * 1000) as u64;
        measure(
            &format!("route, {n} patterns, {what}: {matched}"),
            ops,
            || {
                for _ in 0..1000 {
                    for k in ks {
                        out.clear();
                        let _ = vh.route(&ex, k, || None, &mut out);
                        black_box(&out);
                    }
                }
            },
        );
        measure(
            &format!("trie match_into, {n} patterns, {what}"),
            ops,
            || {
                for _ in 0..1000 {
                    for k in ks {
                        hits.clear();
                        trie.match_into(k.as_bytes(), &mut hits);
                        black_box(&hits);
                    }
                }
            },
        );
    }
}

/// A direct exchange bound to the topic exchange with the ~100-match key and one exact
/// pattern: the same routes one hop further.
fn chain_figures(dir: &mut Directory, pats: &[String]) {
    const FRONT: &str = "bench.front";
    dir.apply(&DirectoryChange::DeclareExchange {
        vhost: 0,
        def: ExchangeDef {
            name: FRONT.into(),
            kind: ExchangeKind::Direct,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        },
    });
    let exact = one_match_keys(pats, 'e');
    for key in [KEY_100.into(), exact[0].clone()] {
        dir.apply(&DirectoryChange::BindExchange {
            vhost: 0,
            source: FRONT.into(),
            binding: ExchangeBinding {
                destination: EXCHANGE.into(),
                routing_key: key,
                arguments: FieldTable::new(),
            },
        });
    }
    let vh = dir.vhost(0).expect("vhost /");
    let front: ShortStr = FRONT.into();
    let mut out = Targets::new();
    for (what, key) in [
        ("1 match (exact)", exact[0].clone()),
        ("~100 matches", KEY_100.into()),
    ] {
        out.clear();
        vh.route(&front, &key, || None, &mut out)
            .expect("exchange exists");
        let matched = out.len();
        measure(
            &format!("route via direct -> topic, {what}: {matched}"),
            100_000,
            || {
                for _ in 0..100_000 {
                    out.clear();
                    let _ = vh.route(&front, &key, || None, &mut out);
                    black_box(&out);
                }
            },
        );
    }
}

fn main() {
    // The same key classes with 100 patterns: a route should cost the same.
    let small = patterns(100);
    let mut dir = directory();
    for (i, p) in small.iter().enumerate() {
        dir.apply(&bind(i, p));
    }
    route_figures(&dir, &small);

    let pats = patterns(PATTERNS);
    assert_eq!(pats.len(), PATTERNS);
    // Binding cost, first and last thousand (one queue per pattern).
    let mut dir = directory();
    let t = Instant::now();
    for (i, p) in pats.iter().enumerate().take(1000) {
        dir.apply(&bind(i, p));
    }
    let first = t.elapsed().as_nanos() as f64 / 1000.0;
    for (i, p) in pats.iter().enumerate().take(PATTERNS - 1000).skip(1000) {
        dir.apply(&bind(i, p));
    }
    let t = Instant::now();
    for (i, p) in pats.iter().enumerate().skip(PATTERNS - 1000) {
        dir.apply(&bind(i, p));
    }
    let last = t.elapsed().as_nanos() as f64 / 1000.0;
    route_figures(&dir, &pats);
    chain_figures(&mut dir, &pats);
    println!(
        "{:<52} {first:>10.1} ns/op",
        "bind: first 1,000 of 10,000 patterns"
    );
    println!(
        "{:<52} {last:>10.1} ns/op",
        "bind: last 1,000 of 10,000 patterns"
    );

    // Unbind the last 500 queues; delete the 500 before them (with their binding).
    let t = Instant::now();
    for (i, p) in pats.iter().enumerate().skip(PATTERNS - 500) {
        dir.apply(&DirectoryChange::Unbind {
            vhost: 0,
            exchange: EXCHANGE.into(),
            binding: binding(i, p),
        });
    }
    let unbind = t.elapsed().as_nanos() as f64 / 500.0;
    let t = Instant::now();
    for i in PATTERNS - 1000..PATTERNS - 500 {
        dir.apply(&DirectoryChange::DeleteQueue {
            vhost: 0,
            queue: queue(i),
            name: format!("q{i}").as_str().into(),
        });
    }
    let delete = t.elapsed().as_nanos() as f64 / 500.0;
    println!(
        "{:<52} {unbind:>10.1} ns/op",
        "unbind (of ~10,000 bindings)"
    );
    println!(
        "{:<52} {delete:>10.1} ns/op",
        "delete queue with its binding (of ~9,500)"
    );
}
