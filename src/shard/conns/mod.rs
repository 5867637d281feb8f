//! Owns: the connection side of a shard — the connections this shard accepted (a slab;
//! ids carry a generation), their channels, consumers, delivery tags, confirms and
//! publisher flow state, their outbound buffers, the list of connections with bytes to
//! write (taken by the shard's write pass, `net::write_pass`) and the queues each
//! connection's write dispatches (`Conn::pulls`, noted for the queue side). `handler`
//! turns frames into actions, `deliver` writes deliveries into outbound buffers, `flow`
//! holds and releases publishers.
//!
//! Does not: touch a home queue's state. It reaches the queue side only through
//! [`QueueSide`]'s methods (enqueue, settle, queue requests), and other shards through
//! the [`Outbox`] and the control plane. Fields are private to this room.

pub mod deliver;
pub mod flow;
pub mod handler;
pub mod queue_notices;

use std::collections::VecDeque;

use slab::Slab;
use smallvec::SmallVec;

use crate::model::ids::{ConnId, QueueId, ShardId};
use crate::session::connection::Conn;

use super::home::{HomeQueues, QueueSide};
use super::Common;

/// The write pass's list of connections with bytes, lent with one connection
/// ([`Connections::get_mut_with_writes`]).
pub struct WriteList<'a>(&'a mut VecDeque<ConnId>);

impl WriteList<'_> {
    /// Puts `c` on the list once (it carries a flag, so it is listed once however often
    /// it is marked).
    pub fn mark(&mut self, c: &mut Conn) {
        if !c.writer_marked {
            c.writer_marked = true;
            self.0.push_back(c.id);
        }
    }
}

/// The connections of one shard and what the shard applied to their publishers.
pub struct Connections {
    /// Boxed: a slab grows by doubling, so its spare slots would each hold a whole
    /// `Conn` (600 bytes; up to 60 % more memory per connection at 10,000, issue 23).
    slab: Slab<Box<Conn>>,
    next_generation: u32,
    /// Next connection serial: shard `i` of `n` hands out `i+1, i+1+n, …`, so serials are
    /// unique across the broker.
    next_serial: u64,
    serial_step: u64,
    /// Connections with bytes to write, in the order they got them: the shard's write
    /// pass takes them from the front (`next_write`).
    dirty: VecDeque<ConnId>,
    name_seed: u64,
    /// The memory alarm as this shard has applied it to its publishers.
    memory_alarm: bool,
    /// The broker-wide disk alarm (`store.disk_free_limit`) as this shard applied it.
    disk_alarm: bool,
    /// Each vhost's store alarm (disk quota) as this shard has applied it.
    store_alarms: Vec<bool>,
    /// Recent `client-properties`, shared by the connections that sent the same.
    properties: crate::session::properties_cache::PropertiesCache,
}

impl Connections {
    pub fn new(shard: ShardId, shards: usize) -> Connections {
        Connections {
            slab: Slab::new(),
            next_generation: 1,
            next_serial: u64::from(shard) + 1,
            serial_step: shards as u64,
            dirty: VecDeque::new(),
            name_seed: super::outbox::wall_nanos() ^ (u64::from(shard) << 32),
            memory_alarm: false,
            disk_alarm: false,
            store_alarms: Vec::new(),
            properties: Default::default(),
        }
    }

    /// Registers a new connection and returns its id.
    pub fn add(&mut self, make: impl FnOnce(ConnId, u64) -> Conn) -> ConnId {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let serial = self.next_serial;
        self.next_serial += self.serial_step;
        let entry = self.slab.vacant_entry();
        let id = ConnId {
            slot: entry.key() as u32,
            generation,
        };
        entry.insert(Box::new(make(id, serial)));
        id
    }

    /// The connection with this id, if it is still the same connection.
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.get_mut_with_writes(id).map(|(c, _)| c)
    }

    /// The connection with the write pass's list, for a caller that may queue bytes on
    /// it and then lists it ([`WriteList::mark`]) without looking it up again.
    pub fn get_mut_with_writes(&mut self, id: ConnId) -> Option<(&mut Conn, WriteList<'_>)> {
        let c = self
            .slab
            .get_mut(id.slot as usize)
            .filter(|c| c.id.generation == id.generation)?;
        Some((&mut **c, WriteList(&mut self.dirty)))
    }

    /// Hints the connection in `slot` for a delivery a few deliveries ahead, without
    /// reading it (its generation is not checked: a hint for a slot reused meanwhile
    /// only warms the wrong lines).
    pub fn prefetch(&self, id: ConnId) {
        if let Some(c) = self.slab.get(id.slot as usize) {
            c.prefetch_for_delivery();
        }
    }

    pub fn get(&self, id: ConnId) -> Option<&Conn> {
        self.slab
            .get(id.slot as usize)
            .filter(|c| c.id.generation == id.generation)
            .map(|c| &**c)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Conn> {
        self.slab.iter().map(|(_, c)| &**c)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Conn> {
        self.slab.iter_mut().map(|(_, c)| &mut **c)
    }

    /// Every connection's id (for shutdown and operator actions that visit them all).
    pub fn ids(&self) -> Vec<ConnId> {
        self.slab.iter().map(|(_, c)| c.id).collect()
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Whether the memory alarm is applied on this shard.
    pub fn memory_alarm(&self) -> bool {
        self.memory_alarm
    }

    /// Whether the disk alarm is applied on this shard.
    pub fn disk_alarm(&self) -> bool {
        self.disk_alarm
    }

    /// Puts a connection with bytes to write on the write pass's list (O(1): the
    /// connection carries a flag, so it is listed once however often it is marked).
    pub fn mark_writer(&mut self, id: ConnId) {
        if let Some((c, mut writes)) = self.get_mut_with_writes(id) {
            writes.mark(c);
        }
    }

    /// Whether the write pass has connections to write.
    pub fn has_writes(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Asks the write pass to dispatch `queue` when it reaches connection `id` (the
    /// queue's only consumer is a no-ack one here) and lists the connection. False when
    /// the connection is gone: the caller dispatches the queue otherwise.
    pub fn request_pull(&mut self, id: ConnId, queue: QueueId) -> bool {
        let Some((c, mut writes)) = self.get_mut_with_writes(id) else {
            return false;
        };
        c.pulls.push(queue);
        writes.mark(c);
        true
    }

    /// The connection `n` places behind the next one on the write pass's list, and how
    /// long the list is (for hints ahead of the pass).
    pub fn write_ahead(&self, n: usize) -> (Option<ConnId>, usize) {
        (self.dirty.get(n).copied(), self.dirty.len())
    }

    /// Hints what a pull of connection `id`'s first waiting queue touches on the
    /// connection side (its first channel, whose consumer the deliveries go to) and
    /// returns that queue, for the caller to hint the queue side. The connection itself
    /// should have been hinted a few steps before ([`Connections::prefetch`]).
    pub fn prefetch_pull(&self, id: ConnId) -> Option<QueueId> {
        let c = self.slab.get(id.slot as usize)?;
        let queue = c.pulls.first().copied()?;
        if let Some(ch) = c.channels.values().next() {
            ch.prefetch_for_delivery();
        }
        Some(queue)
    }

    /// The first queue waiting for connection `id`'s write (for hints; the slot's
    /// generation is not checked).
    pub fn first_pull(&self, id: ConnId) -> Option<QueueId> {
        self.slab.get(id.slot as usize)?.pulls.first().copied()
    }

    /// The queues waiting for connection `id`'s write, taken (none when it is gone).
    pub fn take_pulls(&mut self, id: ConnId) -> SmallVec<[QueueId; 1]> {
        self.get_mut(id)
            .map(|c| std::mem::take(&mut c.pulls))
            .unwrap_or_default()
    }

    /// Whether queues wait for connection `id`'s write.
    pub fn has_pulls(&self, id: ConnId) -> bool {
        self.get(id).is_some_and(|c| !c.pulls.is_empty())
    }

    /// The connection the write pass takes next, left on the list (and marked: a
    /// delivery to it meanwhile does not list it again); `None` when the list is empty.
    /// Connections gone meanwhile are dropped from the front.
    pub fn peek_write(&mut self) -> Option<ConnId> {
        while let Some(&id) = self.dirty.front() {
            if self.get(id).is_some() {
                return Some(id);
            }
            self.dirty.pop_front();
        }
        None
    }

    /// The next connection for the write pass (marked again if it gets more bytes
    /// after this); `None` when the list is empty. A connection gone meanwhile is
    /// skipped.
    pub fn next_write(&mut self) -> Option<ConnId> {
        let id = self.peek_write()?;
        self.dirty.pop_front();
        if let Some(c) = self.get_mut(id) {
            c.writer_marked = false;
        }
        Some(id)
    }

    /// Gives back memory that bursts left behind (`reclaim`, between turns): idle
    /// outbound buffers, the writer list, and the vacant end of the slab once most of it
    /// is empty (ids carry a generation, so a reused slot is never mistaken for an old
    /// connection).
    pub fn release_spare(&mut self) {
        for (_, conn) in self.slab.iter_mut() {
            conn.out.release_idle();
        }
        if self.slab.is_empty() {
            self.slab = Slab::new();
        } else if self.slab.len() * 4 < self.slab.capacity() {
            self.slab.shrink_to_fit();
        }
        if self.dirty.is_empty() && self.dirty.capacity() > 64 {
            self.dirty = VecDeque::new();
        }
    }

    /// A seed for server-generated names, different on every call.
    pub fn next_name_seed(&mut self) -> u64 {
        self.name_seed = self
            .name_seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.name_seed ^ super::outbox::wall_nanos()
    }
}

/// The connection side at work in one call: its own state, and the queue side and the
/// shard's common parts it may use. Made by [`super::State::conn_side`].
pub struct ConnSide<'a> {
    conns: &'a mut Connections,
    home: &'a mut HomeQueues,
    common: &'a mut Common,
}

impl<'a> ConnSide<'a> {
    pub fn new(
        conns: &'a mut Connections,
        home: &'a mut HomeQueues,
        common: &'a mut Common,
    ) -> ConnSide<'a> {
        ConnSide {
            conns,
            home,
            common,
        }
    }

    /// The queue side, for enqueueing, settling and queue requests.
    pub fn queues(&mut self) -> QueueSide<'_> {
        QueueSide::new(self.home, self.common)
    }

    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(id)
    }

    /// `client-properties` as a connection keeps them, shared with the connections of
    /// this shard that sent the same.
    pub fn intern_client_properties(
        &mut self,
        properties: &crate::protocol::FieldTable,
    ) -> crate::session::properties_cache::Interned {
        self.conns.properties.intern(properties)
    }

    pub fn conn(&self, id: ConnId) -> Option<&Conn> {
        self.conns.get(id)
    }

    pub fn mark_writer(&mut self, id: ConnId) {
        self.conns.mark_writer(id);
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::time::Instant;

    use super::*;
    use crate::session::signal::ConnSignals;

    fn conn(conns: &mut Connections, signal: &Rc<ConnSignals>) -> ConnId {
        let now = Instant::now();
        conns.add(|id, serial| {
            Conn::new(
                id,
                serial,
                "127.0.0.1:1".parse().expect("address"),
                now,
                512,
                131_072,
                Rc::clone(signal),
            )
        })
    }

    #[test]
    fn a_writer_marked_many_times_in_a_turn_is_listed_once() {
        let mut conns = Connections::new(0, 1);
        let signals: Vec<Rc<ConnSignals>> = (0..1000).map(|_| Rc::default()).collect();
        let ids: Vec<ConnId> = signals.iter().map(|s| conn(&mut conns, s)).collect();
        for _ in 0..5 {
            for id in &ids {
                conns.mark_writer(*id);
            }
        }
        assert_eq!(conns.dirty.len(), 1000);
        let mut order = Vec::new();
        while let Some(id) = conns.next_write() {
            order.push(id);
        }
        assert_eq!(order, ids, "in the order they were marked, each once");
        assert!(conns.iter().all(|c| !c.writer_marked));
        // Marked again in the next turn; a connection gone meanwhile is skipped.
        conns.mark_writer(ids[0]);
        conns.mark_writer(ids[1]);
        conns.slab.remove(ids[1].slot as usize);
        conns.mark_writer(ids[1]);
        conns.mark_writer(ids[2]);
        assert_eq!(conns.dirty.len(), 3);
        assert_eq!(conns.next_write(), Some(ids[0]));
        // Marked again once taken: listed again, behind the others.
        conns.mark_writer(ids[0]);
        assert_eq!(conns.next_write(), Some(ids[2]));
        assert_eq!(conns.next_write(), Some(ids[0]));
        assert_eq!(conns.next_write(), None);
        assert!(!conns.has_writes());
    }

    #[test]
    fn serials_are_unique_across_shards_and_generations_change() {
        let signal: Rc<ConnSignals> = Rc::default();
        let mut second = Connections::new(1, 2);
        let a = conn(&mut second, &signal);
        let b = conn(&mut second, &signal);
        assert_eq!(second.get(a).map(|c| c.serial), Some(2));
        assert_eq!(second.get(b).map(|c| c.serial), Some(4));
        second.slab.remove(a.slot as usize);
        let c = conn(&mut second, &signal);
        assert_eq!(c.slot, a.slot);
        assert_ne!(c.generation, a.generation);
        assert!(
            second.get(a).is_none(),
            "an old id does not reach a new connection"
        );
    }
}
