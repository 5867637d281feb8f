//! Tests of the topic trie: RabbitMQ's word rules, pruning, dedup, a randomized
//! comparison with a reference matcher, and the cost bounds.

use super::*;

/// Straightforward recursive matcher used as the oracle.
fn reference(pattern: &[&[u8]], key: &[&[u8]]) -> bool {
    match pattern.split_first() {
        None => key.is_empty(),
        Some((&b"#", rest)) => (0..=key.len()).any(|n| reference(rest, &key[n..])),
        Some((&b"*", rest)) => !key.is_empty() && reference(rest, &key[1..]),
        Some((w, rest)) => key.first() == Some(w) && reference(rest, &key[1..]),
    }
}

fn ref_match(key: &str, pattern: &str) -> bool {
    reference(
        &split_words(pattern.as_bytes()),
        &split_words(key.as_bytes()),
    )
}

fn matches(trie: &TopicTrie<u32>, key: &str) -> Vec<u32> {
    let mut out = Vec::new();
    trie.match_into(key.as_bytes(), &mut out);
    out.sort_unstable();
    out
}

/// (routing key, binding pattern, matches?) as RabbitMQ routes them.
const TABLE: &[(&str, &str, bool)] = &[
    ("a.b.c", "a.*.c", true),
    ("a.b.c", "a.#", true),
    ("a", "a.#", true),
    ("b", "a.#", false),
    ("a.b.c", "#", true),
    ("", "#", true),
    ("a", "*", true),
    ("a.b", "*", false),
    ("", "*", false), // RabbitMQ: "" is zero words
    ("", "", true),
    ("a", "", false),
    ("", "a", false),
    (".", "*", false), // two empty words
    (".", "*.*", true),
    ("a.", "a.*", true),
    ("a.", "a", false),
    ("a..c", "a.*.c", true),
    ("a..c", "a.c", false),
    ("a..c", "a..c", true),
    ("a.c", "a.#.c", true),
    ("a.b.b.c", "a.#.c", true),
    ("a.b.c.d", "a.#.c", false),
    ("c", "#.c", true),
    ("a.b.c", "#.c", true),
    ("a.c.b", "#.c", false),
    ("a", "*.*", false),
    ("a.b", "*.*", true),
    ("a.b", "a.b.#", true),
    ("a.b", "a.b.*", false),
    ("a.b.c", "a.b.*", true),
    ("", "#.#", true),
    ("a.b.c", "#.#", true),
    ("a", "a.*.#", false),
    ("a.b", "a.*.#", true),
    ("a.b.c.d", "a.*.#", true),
    ("x", "#.#.#.x", true),
    ("a.b.c.d.e.f.g.x", "#.#.#.x", true),
    ("a.b.c.d.e.f.g.y", "#.#.#.x", false),
    ("x.y", "#.x.#", true),
    ("a.x.b.c", "#.x.#.c", true),
    ("a.b", "A.b", false),
    ("a*.b", "a*.b", true),
    ("ab.b", "a*.b", false),
    ("a.b", "#.b.#", true),
    ("a.b.c", "*.#.*", true),
    ("a", "*.#.*", false),
    ("a.b", "*.#.*", true),
    ("#", "#", true),
    ("*", "*", true),
    ("*", "a", false),
    ("stock.usd.nyse", "stock.*.nyse", true),
    ("quick.orange.male.rabbit", "*.*.rabbit", false),
    ("lazy.orange.male.rabbit", "lazy.#", true),
    ("a.b", "#.a.#.b.#", true),
    ("b.a", "#.a.#.b.#", false),
    ("", "#.*", false),
    ("a", "#.*", true),
    ("a.b.c", "a.b.c", true),
    ("a.b.c", "a.b", false),
];

#[test]
fn table_matches_rabbitmq_semantics() {
    assert!(TABLE.len() >= 40);
    for &(key, pattern, expected) in TABLE {
        assert_eq!(
            ref_match(key, pattern),
            expected,
            "oracle {key:?} {pattern:?}"
        );
        let mut trie = TopicTrie::new();
        assert!(trie.insert(pattern.as_bytes(), 7));
        let want = if expected { vec![7] } else { vec![] };
        assert_eq!(matches(&trie, key), want, "key {key:?} pattern {pattern:?}");
    }
}

#[test]
fn table_in_one_trie() {
    let mut trie = TopicTrie::new();
    for (i, &(_, pattern, _)) in TABLE.iter().enumerate() {
        trie.insert(pattern.as_bytes(), i as u32);
    }
    for &(key, _, _) in TABLE {
        let want: Vec<u32> = (0..TABLE.len() as u32)
            .filter(|&i| ref_match(key, TABLE[i as usize].1))
            .collect();
        assert_eq!(matches(&trie, key), want, "key {key:?}");
    }
}

#[test]
fn split_follows_rabbitmq() {
    assert!(split_words(b"").is_empty());
    assert_eq!(split_words(b"a..b").as_slice(), &[&b"a"[..], b"", b"b"]);
    assert_eq!(split_words(b".").as_slice(), &[&b""[..], b""]);
}

#[test]
fn nested_hashes_do_not_blow_up() {
    let mut trie = TopicTrie::new();
    trie.insert(b"#.#.#.#.#.x", 1u32);
    let key = vec!["w"; 30].join(".");
    let mut out = Vec::new();
    let steps = trie.match_counting(key.as_bytes(), &mut out);
    assert!(out.is_empty());
    // 7 nodes × 31 word positions bounds the walk; naive is ~C(35, 5).
    assert!(steps <= 7 * 31, "steps {steps}");
    let hit = format!("{key}.x");
    let steps = trie.match_counting(hit.as_bytes(), &mut out);
    assert_eq!(out, vec![1]);
    assert!(steps <= 7 * 32, "steps {steps}");
}

#[test]
fn insert_remove_and_prune() {
    let mut trie = TopicTrie::new();
    assert!(trie.is_empty());
    assert!(trie.insert(b"a.*.c", 1u32));
    assert!(!trie.insert(b"a.*.c", 1));
    assert!(trie.insert(b"a.*.c", 2));
    assert!(trie.insert(b"a.#", 3));
    assert_eq!(trie.len(), 3);
    assert_eq!(matches(&trie, "a.b.c"), vec![1, 2, 3]);
    assert!(!trie.remove(b"a.*.d", 1));
    assert!(!trie.remove(b"a.*.c", 9));
    assert!(trie.remove(b"a.*.c", 1));
    assert!(!trie.remove(b"a.*.c", 1));
    assert_eq!(matches(&trie, "a.b.c"), vec![2, 3]);
    assert!(trie.remove(b"a.*.c", 2));
    assert!(trie.remove(b"a.#", 3));
    assert!(trie.is_empty());
    assert_eq!(trie.nodes.len(), 1, "only the root survives pruning");
    assert_eq!(trie.multi_bound, 0);
    assert!(trie.per_value.is_empty());
}

#[test]
fn prune_keeps_shared_prefixes() {
    let mut trie = TopicTrie::new();
    trie.insert(b"a.b.c", 1u32);
    trie.insert(b"a.b", 2);
    trie.insert(b"", 3);
    assert!(trie.remove(b"a.b.c", 1));
    assert_eq!(trie.nodes.len(), 3); // root, a, a.b
    assert_eq!(matches(&trie, "a.b"), vec![2]);
    assert_eq!(matches(&trie, ""), vec![3]);
    assert!(trie.remove(b"", 3));
    assert_eq!(trie.nodes.len(), 3);
}

#[test]
fn value_bound_twice_is_reported_once() {
    let mut trie = TopicTrie::new();
    trie.insert(b"a.#", 5u32);
    trie.insert(b"*.b", 5);
    trie.insert(b"#", 5);
    trie.insert(b"a.b", 6);
    let mut out = vec![5]; // pre-existing contents are not deduplicated against
    trie.match_into(b"a.b", &mut out);
    out[1..].sort_unstable();
    assert_eq!(out, vec![5, 5, 6]);
}

#[test]
fn large_result_dedup_uses_set_path() {
    let mut trie = TopicTrie::new();
    for v in 0..100u32 {
        trie.insert(b"#", v);
        trie.insert(b"a.*", v);
    }
    let got = matches(&trie, "a.b");
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

/// Tiny deterministic PRNG so the tests need no extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_words(rng: &mut XorShift, alphabet: &[&str], max: u64) -> String {
    let n = rng.below(max + 1) as usize;
    let words: Vec<&str> = (0..n)
        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
        .collect();
    words.join(".")
}

#[test]
fn randomized_against_reference() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _round in 0..40 {
        let mut trie = TopicTrie::new();
        let mut bound: Vec<(String, u32)> = Vec::new();
        for _ in 0..60 {
            let p = random_words(&mut rng, &["a", "b", "", "*", "#", "#"], 5);
            let v = rng.below(20) as u32;
            let fresh = !bound.contains(&(p.clone(), v));
            assert_eq!(trie.insert(p.as_bytes(), v), fresh);
            if fresh {
                bound.push((p, v));
            }
        }
        // Remove a third, checking pruning leaves matching intact.
        for _ in 0..20 {
            let i = rng.below(bound.len() as u64) as usize;
            let (p, v) = bound.swap_remove(i);
            assert!(trie.remove(p.as_bytes(), v));
        }
        assert_eq!(trie.len(), bound.len());
        for _ in 0..100 {
            let key = random_words(&mut rng, &["a", "b", "c", ""], 7);
            let mut want: Vec<u32> = bound
                .iter()
                .filter(|(p, _)| ref_match(&key, p))
                .map(|&(_, v)| v)
                .collect();
            want.sort_unstable();
            want.dedup();
            assert_eq!(matches(&trie, &key), want, "key {key:?}");
        }
    }
}

#[test]
fn randomized_unique_values_need_no_dedup() {
    // With one binding per value, dedup is skipped, so this checks that
    // the walk itself never reports a node twice.
    let mut rng = XorShift(0xD1B5_4A32_D192_ED03);
    for _round in 0..40 {
        let mut trie = TopicTrie::new();
        let patterns: Vec<String> = (0..40)
            .map(|_| random_words(&mut rng, &["a", "", "*", "#", "#"], 6))
            .collect();
        for (v, p) in patterns.iter().enumerate() {
            trie.insert(p.as_bytes(), v as u32);
        }
        assert_eq!(trie.multi_bound, 0);
        for _ in 0..100 {
            let key = random_words(&mut rng, &["a", "b", ""], 8);
            let want: Vec<u32> = (0..patterns.len() as u32)
                .filter(|&v| ref_match(&key, &patterns[v as usize]))
                .collect();
            assert_eq!(matches(&trie, &key), want, "key {key:?}");
        }
    }
}

#[test]
fn ten_thousand_topics_under_one_prefix_route_by_hash_and_shrink_back() {
    let mut trie = TopicTrie::new();
    for i in 0..10_000u32 {
        assert!(trie.insert(format!("t{i}.price").as_bytes(), i));
        assert!(trie.insert(format!("t{i}.*").as_bytes(), i + 100_000));
    }
    trie.insert(b"#", 999_999);
    assert!(matches!(
        trie.nodes[trie.root].literals,
        Literals::Hashed(_)
    ));
    assert_eq!(matches(&trie, "t4321.price"), vec![4321, 104_321, 999_999]);
    assert_eq!(matches(&trie, "t4321.volume"), vec![104_321, 999_999]);
    assert_eq!(matches(&trie, "u1.price"), vec![999_999]);
    // Steps visited do not depend on how many topics there are.
    let mut out = Vec::new();
    assert!(trie.match_counting(b"t77.price", &mut out) <= 6);
    for i in 0..10_000u32 {
        assert!(trie.remove(format!("t{i}.price").as_bytes(), i));
        assert!(trie.remove(format!("t{i}.*").as_bytes(), i + 100_000));
    }
    assert!(matches!(
        trie.nodes[trie.root].literals,
        Literals::Sorted(_)
    ));
    assert_eq!(trie.len(), 1);
    assert_eq!(trie.nodes.len(), 2, "root and the # node are left");
}

/// The last answer is kept (`TopicTrie::match_into`): repeated keys between binds and
/// unbinds must answer as a fresh walk does, also into a list that already holds values.
#[test]
fn the_last_answer_never_outlives_a_change() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut trie = TopicTrie::new();
    let mut bound: Vec<(String, u32)> = Vec::new();
    let keys = ["a.b", "a", "b.a.c", ""];
    let (mut hits, mut changes) = (0, 0);
    for _ in 0..3_000 {
        match rng.below(4) {
            0 => {
                let p = random_words(&mut rng, &["a", "b", "c", "*", "#"], 3);
                let v = rng.below(10) as u32;
                if trie.insert(p.as_bytes(), v) {
                    bound.push((p, v));
                    changes += 1;
                }
            }
            1 if !bound.is_empty() => {
                let (p, v) = bound.swap_remove(rng.below(bound.len() as u64) as usize);
                assert!(trie.remove(p.as_bytes(), v));
                changes += 1;
            }
            _ => {
                let key = keys[rng.below(keys.len() as u64) as usize];
                let mut want: Vec<u32> = bound
                    .iter()
                    .filter(|(p, _)| ref_match(key, p))
                    .map(|&(_, v)| v)
                    .collect();
                want.sort_unstable();
                want.dedup();
                assert_eq!(matches(&trie, key), want, "key {key:?}");
                // Again, into a list holding values already: they are left alone.
                let mut out = vec![99, 98];
                trie.match_into(key.as_bytes(), &mut out);
                assert_eq!(&out[..2], &[99, 98]);
                let mut again = out[2..].to_vec();
                again.sort_unstable();
                assert_eq!(again, want, "key {key:?} (kept answer)");
                hits += 1;
            }
        }
    }
    assert!(hits > 1_000 && changes > 500);
}
