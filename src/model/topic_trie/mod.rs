//! Topic-exchange matching: a trie of `.`-separated words with dedicated `*`
//! and `#` slots (the nats sublist shape).
//!
//! Owns: the binding patterns of topic exchanges on one shard and the answer
//! to "which values does this routing key reach?", with the last answer kept: a
//! publisher sends key after key the same, and comparing the key and copying a short
//! answer is ~70 instructions where splitting it and walking was ~580 (issue 23). Any
//! bind or unbind forgets it (one store). Does not: know what a value means (queue,
//! exchange), or take locks or atomics.
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

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

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
/// - `literals` has no duplicate words and never holds the words `*` or `#`
///   (those live in `star` and `hash`).
/// - `values` holds no duplicates.
/// - Every node except the root has a value or a child (empty nodes are
///   pruned on removal).
#[derive(Debug)]
struct Node<T> {
    literals: Literals,
    star: Option<NodeId>,
    hash: Option<NodeId>,
    values: SmallVec<[T; 2]>,
}

impl<T> Node<T> {
    fn new() -> Self {
        Node {
            literals: Literals::Sorted(Vec::new()),
            star: None,
            hash: None,
            values: SmallVec::new(),
        }
    }

    fn has_children(&self) -> bool {
        !self.literals.is_empty() || self.star.is_some() || self.hash.is_some()
    }

    fn literal(&self, word: &[u8]) -> Option<NodeId> {
        self.literals.get(word)
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
            Edge::Literal(w) => self.literals.insert(w, id),
            Edge::Star => self.star = Some(id),
            Edge::Hash => self.hash = Some(id),
        }
    }

    fn unset_child(&mut self, edge: Edge<'_>) {
        match edge {
            Edge::Literal(w) => self.literals.remove(w),
            Edge::Star => self.star = None,
            Edge::Hash => self.hash = None,
        }
    }
}

/// Literal children of a node, up to this many, are a sorted `Vec`; more go in a
/// `HashMap`, so neither a lookup nor adding the 10,000th topic under one prefix costs
/// more than O(1) expected (a sorted `Vec` would move every entry after the new one).
const SORTED_LITERALS_MAX: usize = 32;

/// A node's literal children.
#[derive(Debug)]
enum Literals {
    /// Sorted by word, no duplicates.
    Sorted(Vec<(Box<[u8]>, NodeId)>),
    Hashed(HashMap<Box<[u8]>, NodeId>),
}

impl Literals {
    fn is_empty(&self) -> bool {
        match self {
            Literals::Sorted(v) => v.is_empty(),
            Literals::Hashed(m) => m.is_empty(),
        }
    }

    fn get(&self, word: &[u8]) -> Option<NodeId> {
        match self {
            Literals::Sorted(v) => v
                .binary_search_by(|(w, _)| (**w).cmp(word))
                .ok()
                .map(|i| v[i].1),
            Literals::Hashed(m) => m.get(word).copied(),
        }
    }

    fn insert(&mut self, word: &[u8], id: NodeId) {
        match self {
            Literals::Sorted(v) => {
                if let Err(i) = v.binary_search_by(|(x, _)| (**x).cmp(word)) {
                    if v.len() < SORTED_LITERALS_MAX {
                        v.insert(i, (word.into(), id));
                    } else {
                        let mut m: HashMap<Box<[u8]>, NodeId> =
                            std::mem::take(v).into_iter().collect();
                        m.insert(word.into(), id);
                        *self = Literals::Hashed(m);
                    }
                }
            }
            Literals::Hashed(m) => {
                m.entry(word.into()).or_insert(id);
            }
        }
    }

    fn remove(&mut self, word: &[u8]) {
        match self {
            Literals::Sorted(v) => {
                if let Ok(i) = v.binary_search_by(|(x, _)| (**x).cmp(word)) {
                    v.remove(i);
                }
            }
            Literals::Hashed(m) => {
                m.remove(word);
                if m.len() <= SORTED_LITERALS_MAX / 2 {
                    let mut v: Vec<_> = std::mem::take(m).into_iter().collect();
                    v.sort_by(|a, b| a.0.cmp(&b.0));
                    *self = Literals::Sorted(v);
                }
            }
        }
    }
}

/// Topic bindings of one shard: (pattern, value) pairs matched against
/// routing keys with RabbitMQ's `*`/`#` rules.
///
/// Literal children are a sorted `Vec` searched by binary search while a node has
/// few (compact, no hashing on the hot path), a `HashMap` above
/// [`SORTED_LITERALS_MAX`].
///
/// # Invariants
///
/// - Node `root` exists for the trie's whole life and is never pruned.
/// - `len` is the total number of values over all nodes, i.e. the number of
///   distinct (pattern, value) bindings.
/// - `per_value[v]` is the number of bindings of `v` (absent when zero), and
///   `multi_bound` is the number of values with two or more bindings. While
///   `multi_bound == 0`, a match cannot yield duplicates and skips dedup.
/// - While `last.valid`, `last.values` is what a walk for `last.key` would append.
#[derive(Debug)]
pub struct TopicTrie<T: Copy + Eq + Hash> {
    nodes: Slab<Node<T>>,
    root: NodeId,
    len: usize,
    per_value: HashMap<T, u32>,
    multi_bound: usize,
    /// The last key matched and what it reached, if that was at most [`LAST_MAX`]
    /// values; not valid after any change.
    last: RefCell<LastMatch<T>>,
}

/// Answers longer than this are not kept: copying them costs what the walk saves.
const LAST_MAX: usize = 64;

/// A routing key (copied) and the values it reached, in match order. Its lists are
/// refilled in place: after the first few keys a match that misses allocates nothing.
#[derive(Debug)]
struct LastMatch<T> {
    valid: bool,
    key: Vec<u8>,
    values: Vec<T>,
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
            last: RefCell::new(LastMatch {
                valid: false,
                key: Vec::new(),
                values: Vec::new(),
            }),
        }
    }

    /// Gives back the room of a mostly empty trie (vacant node slots at the end of the
    /// arena, the per-value counts).
    pub fn release_spare(&mut self) {
        if super::worth_shrinking(self.nodes.len(), self.nodes.capacity()) {
            self.nodes.shrink_to_fit();
        }
        if super::worth_shrinking(self.per_value.len(), self.per_value.capacity()) {
            self.per_value.shrink_to_fit();
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
        self.last.get_mut().valid = false;
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
        self.last.get_mut().valid = false;
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
        let mut last = self.last.borrow_mut();
        if last.valid && last.key == key {
            out.append_slice(&last.values);
            return;
        }
        let start = out.len();
        self.match_counting(key, out);
        let reached = &out[start..];
        last.valid = reached.len() <= LAST_MAX;
        if last.valid {
            last.key.clear();
            last.key.extend_from_slice(key);
            last.values.clear();
            last.values.extend_from_slice(reached);
        }
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

/// Removes duplicates from `out[start..]`, keeping first occurrences: O(n²) for up to
/// 32 elements (no hashing), expected O(n) above.
pub fn dedup_tail<T: Copy + Eq + Hash, O: MatchOut<T>>(out: &mut O, start: usize) {
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

#[cfg(test)]
mod tests;
