//! Owns: a stream's tail cache — its newest messages in memory, by offset, each with
//! its filter value and its chunk's timestamp — so that readers at the tail are served
//! without a disk read, every one of them sharing the message by reference count.
//!
//! Does not: decide its limit (the shard passes `stream.tail_cache_bytes`, or less
//! under memory pressure) or what is committed (the stream says up to where entries
//! may go).
//!
//! # Invariants
//! - Entries have consecutive offsets; `bytes` is the sum of their messages' memory.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::model::message::LocalMessage;

/// One cached message.
#[derive(Clone, Debug)]
pub struct Cached {
    pub offset: u64,
    pub msg: LocalMessage,
    pub filter: Option<Bytes>,
    pub timestamp_ms: i64,
}

/// The newest messages of a stream.
#[derive(Debug, Default)]
pub struct TailCache {
    entries: VecDeque<Cached>,
    bytes: u64,
}

impl TailCache {
    /// The first offset held, if any.
    pub fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.offset)
    }

    /// Whether `offset` is held.
    pub fn holds(&self, offset: u64) -> bool {
        self.first().is_some_and(|f| offset >= f) && self.get(offset).is_some()
    }

    /// The entry at `offset`.
    pub fn get(&self, offset: u64) -> Option<&Cached> {
        let first = self.first()?;
        let at = usize::try_from(offset.checked_sub(first)?).ok()?;
        self.entries.get(at)
    }

    /// Appends the next offset's message.
    pub fn push(&mut self, entry: Cached) {
        debug_assert!(self
            .entries
            .back()
            .is_none_or(|last| last.offset + 1 == entry.offset));
        self.bytes += entry.msg.memory_size();
        self.entries.push_back(entry);
    }

    /// Bytes of message memory held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops the oldest entries below `keep_from` while more than `limit` bytes are
    /// held (entries at or above `keep_from` are not on disk yet and stay).
    pub fn trim(&mut self, limit: u64, keep_from: u64) {
        while self.bytes > limit {
            match self.entries.front() {
                Some(e) if e.offset < keep_from => {
                    self.bytes -= e.msg.memory_size();
                    self.entries.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Drops every entry below `offset` (retention removed them).
    pub fn drop_below(&mut self, offset: u64) {
        while self.entries.front().is_some_and(|e| e.offset < offset) {
            if let Some(e) = self.entries.pop_front() {
                self.bytes -= e.msg.memory_size();
            }
        }
    }

    /// Drops every entry at or above `offset` (a write that failed: those offsets are
    /// taken back).
    pub fn drop_from(&mut self, offset: u64) {
        while self.entries.back().is_some_and(|e| e.offset >= offset) {
            if let Some(e) = self.entries.pop_back() {
                self.bytes -= e.msg.memory_size();
            }
        }
    }
}
