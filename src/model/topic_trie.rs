//! Topic-exchange matching: a trie of `.`-separated words with dedicated `*`
//! and `#` slots (the nats sublist shape), plus a per-shard result cache.
//!
//! Owns: the binding patterns of topic exchanges on one shard and the answer
//! to "which values does this routing key reach?". Does not: know what a value
//! means (queue, exchange), take locks or atomics, or decide when the cache's
//! generation changes (that is `model::routing`).
//!
//! # Words
//!
//! Splitting follows RabbitMQ (`rabbit_db_topic_exchange:split_topic_key/1`
//! and `split_topic_key_binary/1`, and rabbitmq-server PR #16271): the
//! empty string is **zero** words. Any other string is split on every `.`, so
//! `"a..b"` is `a`, ``, `b`, `"a."` is `a`, `` and `"."` is two empty
//! words. In a pattern, a word that is exactly `*` matches one word (an empty
//! word counts), a word that is exactly `#` matches zero or more words, and
//! every other word (`a*` too) matches only itself, byte for byte.
//! Routing keys and patterns use the same split, so `""` is matched by `""`
//! and `#` but not by `*`.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::rc::Rc;

use slab::Slab;
use smallvec::SmallVec;

/// Index of a node in the trie's arena.
type NodeId = usize;

/// Most routing keys have fewer words than this; longer ones spill to the heap.
type Words<'a> = SmallVec<[&'a [u8]; 16]>;

/// Result sets up to this size are deduplicated by a quadratic scan, which
/// beats hashing for them; larger ones use a `HashSet`.
const SMALL_DEDUP: usize = 32;

/// Splits a routing key or pattern into words (see the module doc).
fn split_words(s: &[u8]) -> Words<'_> {
    if s.is_empty() {
        return Words::new();
    }
    s.split(|b| *b == b'.').collect()
}

/// What one pattern word means.
#[derive(Clone, Copy)]
enum Edge<'a> {
    Literal(&'a [u8]),
    Star,
    Hash,
}

impl<'a> Edge<'a> {
    fn of(word: &'a [u8]) -> Self {
        match word {
            b"*" => Edge::Star,
            b"#" => Edge::Hash,
            w => Edge::Literal(w),
        }
    }
}

/// One trie node: the position reached after some sequence of pattern words.
///
/// # Invariants
///
/// - `literals` is sorted by word, has no duplicate words and never holds
///   the words `*` or `#` (those live in `star` and `hash`).
/// - `values` holds no duplicates.
/// - Every node except the root has a value or a child (empty nodes are
///   pruned on removal).
#[derive(Debug)]
struct Node<T> {
    literals: Vec<(Box<[u8]>, NodeId)>,
    star: Option<NodeId>,
    hash: Option<NodeId>,
    values: SmallVec<[T; 2]>,
}

impl<T> Node<T> {
    fn new() -> Self {
        Node {
            literals: Vec::new(),
            star: None,
            hash: None,
            values: SmallVec::new(),
        }
    }

    fn has_children(&self) -> bool {
        !self.literals.is_empty() || self.star.is_some() || self.hash.is_some()
    }

    fn literal(&self, word: &[u8]) -> Option<NodeId> {
        self.literals
            .binary_search_by(|(w, _)| (**w).cmp(word))
            .ok()
            .map(|i| self.literals[i].1)
    }

    fn child(&self, edge: Edge<'_>) -> Option<NodeId> {
        match edge {
            Edge::Literal(w) => self.literal(w),
            Edge::Star => self.star,
            Edge::Hash => self.hash,
        }
    }

    fn set_child(&mut self, edge: Edge<'_>, id: NodeId) {
        match edge {
            Edge::Literal(w) => {
                if let Err(i) = self.literals.binary_search_by(|(x, _)| (**x).cmp(w)) {
                    self.literals.insert(i, (w.into(), id));
                }
            }
            Edge::Star => self.star = Some(id),
            Edge::Hash => self.hash = Some(id),
        }
    }

    fn unset_child(&mut self, edge: Edge<'_>) {
        match edge {
            Edge::Literal(w) => {
                if let Ok(i) = self.literals.binary_search_by(|(x, _)| (**x).cmp(w)) {
                    self.literals.remove(i);
                }
            }
            Edge::Star => self.star = None,
            Edge::Hash => self.hash = None,
        }
    }
}

/// Topic bindings of one shard: (pattern, value) pairs matched against
/// routing keys with RabbitMQ's `*`/`#` rules.
///
/// Literal children are a sorted `Vec` searched by binary search: compact,
/// no hashing on the hot path, and O(log fan-out) lookups; inserting a new
/// word costs O(fan-out), which is control-plane work.
///
/// # Invariants
///
/// - Node `root` exists for the trie's whole life and is never pruned.
/// - `len` is the total number of values over all nodes, i.e. the number of
///   distinct (pattern, value) bindings.
/// - `per_value[v]` is the number of bindings of `v` (absent when zero), and
///   `multi_bound` is the number of values with two or more bindings. While
///   `multi_bound == 0`, a match cannot yield duplicates and skips dedup.
#[derive(Debug)]
pub struct TopicTrie<T: Copy + Eq + Hash> {
    nodes: Slab<Node<T>>,
    root: NodeId,
    len: usize,
    per_value: HashMap<T, u32>,
    multi_bound: usize,
}

impl<T: Copy + Eq + Hash> Default for TopicTrie<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Eq + Hash> TopicTrie<T> {
    /// An empty trie.
    pub fn new() -> Self {
        let mut nodes = Slab::new();
        let root = nodes.insert(Node::new());
        TopicTrie {
            nodes,
            root,
            len: 0,
            per_value: HashMap::new(),
            multi_bound: 0,
        }
    }

    /// Number of (pattern, value) bindings.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Binds `value` with `pattern`. Returns false (and changes nothing) if
    /// exactly this (pattern, value) pair is already bound.
    pub fn insert(&mut self, pattern: &[u8], value: T) -> bool {
        let mut node = self.root;
        for word in split_words(pattern) {
            let edge = Edge::of(word);
            node = match self.nodes[node].child(edge) {
                Some(child) => child,
                None => {
                    let child = self.nodes.insert(Node::new());
                    self.nodes[node].set_child(edge, child);
                    child
                }
            };
        }
        let values = &mut self.nodes[node].values;
        if values.contains(&value) {
            return false;
        }
        values.push(value);
        self.len += 1;
        let count = self.per_value.entry(value).or_insert(0);
        *count += 1;
        if *count == 2 {
            self.multi_bound += 1;
        }
        true
    }

    /// Unbinds `value` from `pattern`, pruning nodes left empty. Returns false
    /// if that pair was not bound.
    pub fn remove(&mut self, pattern: &[u8], value: T) -> bool {
        // (parent, word) for each step, so pruning can walk back up.
        let mut path: SmallVec<[(NodeId, &[u8]); 16]> = SmallVec::new();
        let mut node = self.root;
        for word in split_words(pattern) {
            match self.nodes[node].child(Edge::of(word)) {
                Some(child) => {
                    path.push((node, word));
                    node = child;
                }
                None => return false,
            }
        }
        let values = &mut self.nodes[node].values;
        let Some(pos) = values.iter().position(|v| *v == value) else {
            return false;
        };
        values.swap_remove(pos);
        self.len -= 1;
        if let Some(count) = self.per_value.get_mut(&value) {
            *count -= 1;
            match *count {
                0 => {
                    self.per_value.remove(&value);
                }
                1 => self.multi_bound -= 1,
                _ => {}
            }
        }
        while let Some((parent, word)) = path.pop() {
            let n = &self.nodes[node];
            if n.has_children() || !n.values.is_empty() {
                break;
            }
            self.nodes.remove(node);
            self.nodes[parent].unset_child(Edge::of(word));
            node = parent;
        }
        true
    }

    /// Appends to `out` every value bound with a pattern that matches `key`.
    ///
    /// Each value appears at most once among the appended elements, however
    /// many of its patterns match; elements already in `out` are left alone
    /// and not considered. Order is unspecified.
    ///
    /// # Complexity
    ///
    /// The walk visits each (node, word index) state at most once: a `#` node
    /// remembers the lowest index it was entered at, because entering at `i`
    /// already covers every later index. So the cost is O(S) with S the
    /// number of reachable states, at most nodes × (words + 1) and, for
    /// patterns without `#`, just the matching prefixes. Dedup is skipped
    /// unless some value has two bindings; then it is O(r²) for r ≤ 32
    /// results (no hashing) and expected O(r) above. Recursion depth is
    /// bounded by the longest pattern's word count.
    pub fn match_into<O: MatchOut<T>>(&self, key: &[u8], out: &mut O) {
        self.match_counting(key, out);
    }

    /// [`match_into`](Self::match_into) that also returns the number of
    /// states visited (for tests of the complexity bound).
    fn match_counting<O: MatchOut<T>>(&self, key: &[u8], out: &mut O) -> u64 {
        let words = split_words(key);
        let start = out.len();
        let mut walk = Walk {
            trie: self,
            words: &words,
            out,
            hash_low: SmallVec::new(),
            steps: 0,
        };
        walk.visit(self.root, 0);
        let steps = walk.steps;
        if self.multi_bound > 0 {
            dedup_tail(out, start);
        }
        steps
    }
}

/// Where match results go: a `Vec`, or a caller's `SmallVec` so that routing a publish
/// allocates nothing when it reaches few queues.
pub trait MatchOut<T>: std::ops::DerefMut<Target = [T]> {
    fn append_slice(&mut self, values: &[T]);
    fn truncate_to(&mut self, len: usize);
}

impl<T: Copy> MatchOut<T> for Vec<T> {
    fn append_slice(&mut self, values: &[T]) {
        self.extend_from_slice(values);
    }
    fn truncate_to(&mut self, len: usize) {
        self.truncate(len);
    }
}

impl<T: Copy, const N: usize> MatchOut<T> for SmallVec<[T; N]> {
    fn append_slice(&mut self, values: &[T]) {
        self.extend_from_slice(values);
    }
    fn truncate_to(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// One match in progress.
///
/// # Invariants
///
/// For each `(node, low)` in `hash_low`, `node` is the target of a `#` edge
/// and has already been visited at every word index in `low..=words.len()`.
struct Walk<'t, 'k, 'o, T: Copy + Eq + Hash, O: MatchOut<T>> {
    trie: &'t TopicTrie<T>,
    words: &'k [&'k [u8]],
    out: &'o mut O,
    hash_low: SmallVec<[(NodeId, usize); 8]>,
    steps: u64,
}

impl<T: Copy + Eq + Hash, O: MatchOut<T>> Walk<'_, '_, '_, T, O> {
    /// We stand at `id` having consumed the first `i` words.
    fn visit(&mut self, id: NodeId, i: usize) {
        self.steps += 1;
        let trie = self.trie;
        let node = &trie.nodes[id];
        match self.words.get(i) {
            Some(word) => {
                if let Some(child) = node.literal(word) {
                    self.visit(child, i + 1);
                }
                if let Some(child) = node.star {
                    self.visit(child, i + 1);
                }
            }
            None => self.out.append_slice(&node.values),
        }
        if let Some(child) = node.hash {
            self.enter_hash(child, i);
        }
    }

    /// We follow a `#` edge into `id` having consumed `i` words; the `#` may
    /// absorb any number of the remaining words.
    fn enter_hash(&mut self, id: NodeId, i: usize) {
        let end = match self.hash_low.iter_mut().find(|(n, _)| *n == id) {
            Some((_, low)) if *low <= i => return,
            Some((_, low)) => std::mem::replace(low, i),
            None => {
                self.hash_low.push((id, i));
                self.words.len() + 1
            }
        };
        let trie = self.trie;
        let node = &trie.nodes[id];
        if !node.has_children() {
            // A trailing `#` absorbs everything left: it matches once.
            self.steps += 1;
            if end == self.words.len() + 1 {
                self.out.append_slice(&node.values);
            }
            return;
        }
        for j in i..end {
            self.visit(id, j);
        }
    }
}

/// Removes duplicates from `out[start..]`, keeping first occurrences.
fn dedup_tail<T: Copy + Eq + Hash, O: MatchOut<T>>(out: &mut O, start: usize) {
    let n = out.len() - start;
    let mut write = start;
    if n <= SMALL_DEDUP {
        for read in start..out.len() {
            let v = out[read];
            if !out[start..write].contains(&v) {
                out[write] = v;
                write += 1;
            }
        }
    } else {
        let mut seen = HashSet::with_capacity(n);
        for read in start..out.len() {
            let v = out[read];
            if seen.insert(v) {
                out[write] = v;
                write += 1;
            }
        }
    }
    out.truncate_to(write);
}

/// Bounded cache of match results keyed by (exchange id, routing key).
///
/// The owner passes its routing generation on every call; any change of
/// generation drops every entry, so a cached result never outlives the
/// bindings it was computed from. When an insert would exceed `capacity`
/// entries the cache is cleared wholesale (cheap, and hot keys come back
/// at once).
///
/// # Invariants
///
/// - Every entry was inserted under `generation`.
/// - `entries.len() <= capacity`.
/// - Keys are the exchange id (4 bytes, big-endian) followed by the
///   routing key bytes.
#[derive(Debug)]
pub struct MatchCache<T> {
    capacity: usize,
    generation: u64,
    entries: HashMap<Box<[u8]>, Rc<[T]>>,
}

/// Routing keys up to this long build their cache key on the stack.
type CacheKey = SmallVec<[u8; 64]>;

fn cache_key(exchange: u32, key: &[u8]) -> CacheKey {
    let mut k = CacheKey::with_capacity(4 + key.len());
    k.extend_from_slice(&exchange.to_be_bytes());
    k.extend_from_slice(key);
    k
}

impl<T> MatchCache<T> {
    /// An empty cache holding at most `capacity` entries (0 disables it).
    pub fn new(capacity: usize) -> Self {
        MatchCache {
            capacity,
            generation: 0,
            entries: HashMap::new(),
        }
    }

    /// Number of cached results.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached result for (`exchange`, `key`), if it was stored under
    /// this `generation`.
    pub fn get(&mut self, generation: u64, exchange: u32, key: &[u8]) -> Option<Rc<[T]>> {
        self.sync(generation);
        self.entries.get(&cache_key(exchange, key)[..]).cloned()
    }

    /// Stores the result for (`exchange`, `key`) computed under `generation`.
    pub fn insert(&mut self, generation: u64, exchange: u32, key: &[u8], value: Rc<[T]>) {
        self.sync(generation);
        if self.capacity == 0 {
            return;
        }
        let k = cache_key(exchange, key);
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&k[..]) {
            self.entries.clear();
        }
        self.entries.insert(k[..].into(), value);
    }

    fn sync(&mut self, generation: u64) {
        if generation != self.generation {
            self.entries.clear();
            self.generation = generation;
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn cache_hits_and_generation_invalidation() {
        let mut cache: MatchCache<u32> = MatchCache::new(4);
        assert!(cache.get(1, 7, b"a.b").is_none());
        cache.insert(1, 7, b"a.b", Rc::from(vec![1, 2]));
        assert_eq!(cache.get(1, 7, b"a.b").as_deref(), Some(&[1, 2][..]));
        assert!(
            cache.get(1, 8, b"a.b").is_none(),
            "exchange is part of the key"
        );
        assert!(cache.get(1, 7, b"a.c").is_none());
        assert!(
            cache.get(2, 7, b"a.b").is_none(),
            "new generation drops all"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn cache_clears_when_full() {
        let mut cache: MatchCache<u32> = MatchCache::new(2);
        cache.insert(1, 1, b"a", Rc::from(vec![1]));
        cache.insert(1, 1, b"b", Rc::from(vec![2]));
        cache.insert(1, 1, b"b", Rc::from(vec![3])); // overwrite, no clear
        assert_eq!(cache.len(), 2);
        cache.insert(1, 1, b"c", Rc::from(vec![4]));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(1, 1, b"c").as_deref(), Some(&[4][..]));
        let mut off: MatchCache<u32> = MatchCache::new(0);
        off.insert(1, 1, b"a", Rc::from(vec![1]));
        assert!(off.get(1, 1, b"a").is_none());
    }
}
