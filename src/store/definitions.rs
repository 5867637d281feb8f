//! Owns: the durable definitions — which directory changes must survive a restart
//! (durable exchanges, durable non-exclusive queues, bindings whose two ends are
//! durable), their records in `definitions.log`, replaying the log into the set of
//! definitions in force, and compacting it to that set at start.
//!
//! Does not: write at run time (`definitions_writer` on the coordinator does), or apply
//! anything to a directory (shards apply the changes it yields).
//!
//! Vhosts are recorded by name and queues by id and name; a queue's home shard is not
//! recorded (it is `hash(vhost, name) mod shards` for the shard count of each run).

use std::collections::BTreeMap;
use std::path::Path;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::model::exchange::{Binding, ExchangeBinding, ExchangeDef, ExchangeKind};
use crate::model::ids::{QueueId, QueueRef};
use crate::model::routing::{Directory, DirectoryChange, QueueMeta};
use crate::protocol::codec::{put_shortstr, Reader};
use crate::protocol::{FieldTable, ShortStr};

use super::record;

/// The log's file name under the data dir.
pub const FILE: &str = "definitions.log";

const EXCHANGE: u8 = 1;
const EXCHANGE_DELETED: u8 = 2;
const QUEUE: u8 = 3;
const QUEUE_DELETED: u8 = 4;
const BIND: u8 = 5;
const UNBIND: u8 = 6;
const BIND_EXCHANGE: u8 = 7;
const UNBIND_EXCHANGE: u8 = 8;
const QUEUE_ID_FLOOR: u8 = 9;

/// A queue's home shard from its vhost and name (the broker's placement rule for the
/// shard count of this run).
pub type HomeOf<'a> = dyn Fn(&str, &[u8]) -> crate::model::ids::ShardId + 'a;

/// A durable queue as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct DurableQueue {
    pub id: QueueId,
    pub auto_delete: bool,
    pub arguments: FieldTable,
}

/// A binding as recorded: source exchange, destination (queue or exchange) name, key,
/// arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct DurableBinding {
    pub source: ShortStr,
    pub destination: ShortStr,
    pub routing_key: ShortStr,
    pub arguments: FieldTable,
}

/// The definitions in force, per vhost name.
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    pub exchanges: BTreeMap<(String, ShortStr), ExchangeDef>,
    pub queues: BTreeMap<(String, ShortStr), DurableQueue>,
    /// Queue bindings and exchange bindings, per vhost, in the order they were made.
    pub bindings: BTreeMap<String, Vec<DurableBinding>>,
    pub exchange_bindings: BTreeMap<String, Vec<DurableBinding>>,
    /// Every queue id ever handed out is below this (ids are never reused, so a
    /// deleted queue's records can never be taken for a new queue's).
    pub next_queue_id: u64,
    /// Users and permissions changed at run time (`super::access`).
    pub access: super::access::AccessOverlay,
    /// Policies set at run time (`super::policies`).
    pub policies: super::policies::StoredPolicies,
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u16_le(s.len() as u16);
    out.put_slice(s.as_bytes());
}

fn put_binding(out: &mut BytesMut, tag: u8, vhost: &str, b: &DurableBinding) {
    out.put_u8(tag);
    put_str(out, vhost);
    put_shortstr(out, &b.source);
    put_shortstr(out, &b.destination);
    put_shortstr(out, &b.routing_key);
    b.arguments.encode(out);
}

/// The record of one durable change, given the vhost's name. `durable` says whether
/// the change touches only durable objects (the caller knows the directory before it is
/// applied); non-durable changes write nothing.
pub fn encode_change(out: &mut BytesMut, vhost: &str, change: &DirectoryChange) {
    record::append(out, 0, |o| match change {
        DirectoryChange::DeclareExchange { def, .. } => {
            o.put_u8(EXCHANGE);
            put_str(o, vhost);
            put_shortstr(o, &def.name);
            put_shortstr(o, &ShortStr::from_static(def.kind.name()));
            o.put_u8(u8::from(def.auto_delete) | (u8::from(def.internal) << 1));
            def.arguments.encode(o);
        }
        DirectoryChange::DeleteExchange { name, .. } => {
            o.put_u8(EXCHANGE_DELETED);
            put_str(o, vhost);
            put_shortstr(o, name);
        }
        DirectoryChange::DeclareQueue { meta, .. } => {
            o.put_u8(QUEUE);
            put_str(o, vhost);
            put_shortstr(o, &meta.name);
            o.put_u64(meta.queue.id.0);
            o.put_u8(u8::from(meta.auto_delete));
            meta.arguments.encode(o);
        }
        DirectoryChange::DeleteQueue { queue, name, .. } => {
            o.put_u8(QUEUE_DELETED);
            put_str(o, vhost);
            put_shortstr(o, name);
            o.put_u64(queue.id.0);
        }
        DirectoryChange::Bind {
            exchange, binding, ..
        }
        | DirectoryChange::Unbind {
            exchange, binding, ..
        } => {
            let tag = if matches!(change, DirectoryChange::Bind { .. }) {
                BIND
            } else {
                UNBIND
            };
            put_binding(
                o,
                tag,
                vhost,
                &DurableBinding {
                    source: exchange.clone(),
                    destination: binding.queue_name.clone(),
                    routing_key: binding.routing_key.clone(),
                    arguments: binding.arguments.clone(),
                },
            );
        }
        DirectoryChange::BindExchange {
            source, binding, ..
        }
        | DirectoryChange::UnbindExchange {
            source, binding, ..
        } => {
            let tag = if matches!(change, DirectoryChange::BindExchange { .. }) {
                BIND_EXCHANGE
            } else {
                UNBIND_EXCHANGE
            };
            put_binding(
                o,
                tag,
                vhost,
                &DurableBinding {
                    source: source.clone(),
                    destination: binding.destination.clone(),
                    routing_key: binding.routing_key.clone(),
                    arguments: binding.arguments.clone(),
                },
            );
        }
    });
}

/// Whether a change must be recorded, judged on the directory *before* it is applied:
/// it creates or removes a durable object, or a binding between durable ends.
pub fn is_durable(dir: &Directory, change: &DirectoryChange) -> bool {
    let vhost_of = |idx| dir.vhost(idx);
    let durable_exchange = |idx, name: &ShortStr| {
        vhost_of(idx)
            .and_then(|v| v.exchange(name))
            .is_some_and(|e| e.def.durable)
    };
    let durable_queue = |idx, name: &ShortStr| {
        vhost_of(idx)
            .and_then(|v| v.queue(name))
            .is_some_and(|m| m.durable && m.exclusive_owner.is_none())
    };
    match change {
        DirectoryChange::DeclareExchange { def, .. } => def.durable,
        DirectoryChange::DeleteExchange { vhost, name } => durable_exchange(*vhost, name),
        DirectoryChange::DeclareQueue { meta, .. } => {
            meta.durable && meta.exclusive_owner.is_none()
        }
        DirectoryChange::DeleteQueue { vhost, name, .. } => durable_queue(*vhost, name),
        DirectoryChange::Bind {
            vhost,
            exchange,
            binding,
        }
        | DirectoryChange::Unbind {
            vhost,
            exchange,
            binding,
        } => durable_exchange(*vhost, exchange) && durable_queue(*vhost, &binding.queue_name),
        DirectoryChange::BindExchange {
            vhost,
            source,
            binding,
        }
        | DirectoryChange::UnbindExchange {
            vhost,
            source,
            binding,
        } => durable_exchange(*vhost, source) && durable_exchange(*vhost, &binding.destination),
    }
}

/// Why a definitions record could not be read although its checksum matched.
#[derive(Debug)]
pub struct BadDefinition(String);

impl std::fmt::Display for BadDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn get_str(r: &mut Bytes) -> Result<String, BadDefinition> {
    if r.remaining() < 2 {
        return Err(BadDefinition("short vhost name".into()));
    }
    let len = r.get_u16_le() as usize;
    if r.remaining() < len {
        return Err(BadDefinition("short vhost name".into()));
    }
    String::from_utf8(r.split_to(len).to_vec()).map_err(|_| BadDefinition("vhost name".into()))
}

impl Definitions {
    /// Applies one record.
    pub fn replay(&mut self, payload: Bytes) -> Result<(), BadDefinition> {
        let mut b = payload;
        if !b.has_remaining() {
            return Err(BadDefinition("empty record".into()));
        }
        let tag = b.get_u8();
        if super::access::is_access_record(tag) {
            return self.access.replay(tag, b).map_err(BadDefinition);
        }
        if super::policies::is_policy_record(tag) {
            return self.policies.replay(tag, b).map_err(BadDefinition);
        }
        let vhost = if tag == QUEUE_ID_FLOOR {
            String::new()
        } else {
            get_str(&mut b)?
        };
        let mut r = Reader::new(b);
        let bad = |e: crate::protocol::codec::DecodeError| BadDefinition(format!("{e:?}"));
        match tag {
            EXCHANGE => {
                let name = r.shortstr("exchange").map_err(bad)?;
                let kind = r.shortstr("kind").map_err(bad)?;
                let flags = r.u8("flags").map_err(bad)?;
                let arguments = r.table("arguments").map_err(bad)?;
                let kind = ExchangeKind::parse(kind.as_bytes())
                    .ok_or_else(|| BadDefinition(format!("exchange type {kind:?}")))?;
                self.exchanges.insert(
                    (vhost, name.clone()),
                    ExchangeDef {
                        name,
                        kind,
                        durable: true,
                        auto_delete: flags & 1 != 0,
                        internal: flags & 2 != 0,
                        arguments,
                    },
                );
            }
            EXCHANGE_DELETED => {
                let name = r.shortstr("exchange").map_err(bad)?;
                if let Some(v) = self.bindings.get_mut(&vhost) {
                    v.retain(|b| b.source != name);
                }
                if let Some(v) = self.exchange_bindings.get_mut(&vhost) {
                    v.retain(|b| b.source != name && b.destination != name);
                }
                self.exchanges.remove(&(vhost, name));
            }
            QUEUE => {
                let name = r.shortstr("queue").map_err(bad)?;
                let id = r.u64("id").map_err(bad)?;
                let flags = r.u8("flags").map_err(bad)?;
                let arguments = r.table("arguments").map_err(bad)?;
                self.next_queue_id = self.next_queue_id.max(id + 1);
                self.queues.insert(
                    (vhost, name),
                    DurableQueue {
                        id: QueueId(id),
                        auto_delete: flags & 1 != 0,
                        arguments,
                    },
                );
            }
            QUEUE_DELETED => {
                let name = r.shortstr("queue").map_err(bad)?;
                let id = r.u64("id").map_err(bad)?;
                self.next_queue_id = self.next_queue_id.max(id + 1);
                let key = (vhost.clone(), name.clone());
                if self.queues.get(&key).is_some_and(|q| q.id.0 == id) {
                    self.queues.remove(&key);
                    if let Some(v) = self.bindings.get_mut(&vhost) {
                        v.retain(|b| b.destination != name);
                    }
                }
            }
            BIND | UNBIND | BIND_EXCHANGE | UNBIND_EXCHANGE => {
                let binding = DurableBinding {
                    source: r.shortstr("source").map_err(bad)?,
                    destination: r.shortstr("destination").map_err(bad)?,
                    routing_key: r.shortstr("routing key").map_err(bad)?,
                    arguments: r.table("arguments").map_err(bad)?,
                };
                // A binding recorded after its queue's deletion (planned while the delete
                // waited for its fsync) binds nothing; a later queue of the same name
                // must not inherit it.
                if tag == BIND
                    && !self
                        .queues
                        .contains_key(&(vhost.clone(), binding.destination.clone()))
                {
                    return Ok(());
                }
                let list = if matches!(tag, BIND | UNBIND) {
                    self.bindings.entry(vhost).or_default()
                } else {
                    self.exchange_bindings.entry(vhost).or_default()
                };
                let existing = list.iter().position(|b| *b == binding);
                match (matches!(tag, BIND | BIND_EXCHANGE), existing) {
                    (true, None) => list.push(binding),
                    (false, Some(at)) => {
                        list.remove(at);
                    }
                    _ => {}
                }
            }
            QUEUE_ID_FLOOR => {
                let floor = r.u64("floor").map_err(bad)?;
                self.next_queue_id = self.next_queue_id.max(floor);
            }
            other => return Err(BadDefinition(format!("record type {other}"))),
        }
        Ok(())
    }

    /// The definitions as a compact log: one record per object, then the id floor.
    pub fn snapshot(&self) -> BytesMut {
        let mut out = BytesMut::new();
        for ((vhost, _), def) in &self.exchanges {
            let change = DirectoryChange::DeclareExchange {
                vhost: 0,
                def: def.clone(),
            };
            encode_change(&mut out, vhost, &change);
        }
        for ((vhost, name), q) in &self.queues {
            record::append(&mut out, 0, |o| {
                o.put_u8(QUEUE);
                put_str(o, vhost);
                put_shortstr(o, name);
                o.put_u64(q.id.0);
                o.put_u8(u8::from(q.auto_delete));
                q.arguments.encode(o);
            });
        }
        for (vhost, list) in &self.bindings {
            for b in list {
                record::append(&mut out, 0, |o| put_binding(o, BIND, vhost, b));
            }
        }
        for (vhost, list) in &self.exchange_bindings {
            for b in list {
                record::append(&mut out, 0, |o| put_binding(o, BIND_EXCHANGE, vhost, b));
            }
        }
        self.access.snapshot_into(&mut out);
        self.policies.snapshot_into(&mut out);
        let floor = self.next_queue_id;
        record::append(&mut out, 0, |o| {
            o.put_u8(QUEUE_ID_FLOOR);
            o.put_u64(floor);
        });
        out
    }

    /// The directory changes that recreate these definitions on a broker with `shards`
    /// shards and the directory's vhosts. Definitions of a vhost the configuration no
    /// longer has are left out; their names are returned.
    pub fn changes(
        &self,
        dir: &Directory,
        home: &HomeOf<'_>,
    ) -> (Vec<DirectoryChange>, Vec<String>) {
        let mut out = Vec::new();
        let mut missing = Vec::new();
        let mut idx = |vhost: &str| match dir.vhost_index(vhost) {
            Some(i) => Some(i),
            None => {
                if !missing.iter().any(|m| m == vhost) {
                    missing.push(vhost.to_owned());
                }
                None
            }
        };
        for ((vhost, _), def) in &self.exchanges {
            let Some(vhost) = idx(vhost) else { continue };
            out.push(DirectoryChange::DeclareExchange {
                vhost,
                def: def.clone(),
            });
        }
        let mut refs = BTreeMap::new();
        for ((vhost_name, name), q) in &self.queues {
            let Some(vhost) = idx(vhost_name) else {
                continue;
            };
            let queue = QueueRef {
                id: q.id,
                home: home(vhost_name, name.as_bytes()),
            };
            refs.insert((vhost_name.clone(), name.clone()), queue);
            out.push(DirectoryChange::DeclareQueue {
                vhost,
                meta: QueueMeta {
                    queue,
                    name: name.clone(),
                    durable: true,
                    exclusive_owner: None,
                    auto_delete: q.auto_delete,
                    arguments: q.arguments.clone(),
                },
            });
        }
        for (vhost_name, list) in &self.exchange_bindings {
            let Some(vhost) = idx(vhost_name) else {
                continue;
            };
            for b in list {
                out.push(DirectoryChange::BindExchange {
                    vhost,
                    source: b.source.clone(),
                    binding: ExchangeBinding {
                        destination: b.destination.clone(),
                        routing_key: b.routing_key.clone(),
                        arguments: b.arguments.clone(),
                    },
                });
            }
        }
        for (vhost_name, list) in &self.bindings {
            let Some(vhost) = idx(vhost_name) else {
                continue;
            };
            for b in list {
                let Some(queue) = refs.get(&(vhost_name.clone(), b.destination.clone())) else {
                    continue;
                };
                out.push(DirectoryChange::Bind {
                    vhost,
                    exchange: b.source.clone(),
                    binding: Binding {
                        queue: *queue,
                        queue_name: b.destination.clone(),
                        routing_key: b.routing_key.clone(),
                        arguments: b.arguments.clone(),
                    },
                });
            }
        }
        (out, missing)
    }
}

/// What reading the log found.
pub struct Loaded {
    pub definitions: Definitions,
    /// Damaged regions in the middle that were skipped (the changes after them apply).
    pub skipped: Vec<record::Skipped>,
    /// A damaged tail that was dropped: offset and why.
    pub truncated: Option<(usize, record::Damage)>,
    /// Bytes of the log up to the end of its last whole, intact record.
    pub good_len: u64,
}

/// Reads `DIR/definitions.log` (absent: nothing defined yet). A damaged tail (a record
/// torn by a crash while it was being written, which was therefore never answered) is
/// dropped. A damaged record with good ones after it is skipped, as in the segments:
/// one lost change (a declare, bind or delete the operator may have to repeat) instead
/// of every later one; the log is rewritten from what was read (`compact`), so nothing
/// is repaired in place.
pub fn load(data_dir: &Path) -> std::io::Result<Loaded> {
    let path = data_dir.join(FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => Bytes::from(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Bytes::new(),
        Err(e) => return Err(e),
    };
    let mut definitions = Definitions {
        next_queue_id: 1,
        ..Definitions::default()
    };
    let mut records = record::Records::resyncing(data, 0);
    loop {
        let at = records.good_len();
        let Some(payload) = records.next() else {
            break;
        };
        // A record that passed its checksum but does not decode (written by a newer
        // sluice, say) is skipped with a warning; the ones after it still count.
        if let Err(e) = definitions.replay(payload) {
            tracing::warn!(
                target: "sluice::ops",
                "{}: definition record at offset {at} skipped: {e}",
                path.display()
            );
        }
    }
    let good_len = records.good_len() as u64;
    Ok(Loaded {
        definitions,
        skipped: records.skipped().to_vec(),
        truncated: records.damage().cloned(),
        good_len,
    })
}

/// Keeps the log as it is when it cannot be compacted (a full disk): cut back to its
/// last good record (`good_len`; cutting needs no space) and synced. Returns its size.
pub fn keep_as_is(data_dir: &Path, good_len: u64) -> std::io::Result<u64> {
    let path = data_dir.join(FILE);
    let file = match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    if file.metadata()?.len() > good_len {
        file.set_len(good_len)?;
        file.sync_all()?;
    }
    Ok(good_len)
}

/// Rewrites the log as the snapshot of `defs`: written beside it, synced, renamed over
/// it, and the directory synced, so a crash leaves either the old log or the new one.
pub fn compact(data_dir: &Path, defs: &Definitions) -> std::io::Result<u64> {
    use std::io::Write;
    let tmp = data_dir.join(format!("{FILE}.tmp"));
    let snapshot = defs.snapshot();
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&snapshot)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, data_dir.join(FILE))?;
    super::sync_dir(data_dir)?;
    Ok(snapshot.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::ShardId;

    fn replay_all(log: &BytesMut) -> Definitions {
        let mut d = Definitions::default();
        for p in record::Records::new(log.clone().freeze(), 0) {
            d.replay(p).expect("replays");
        }
        d
    }

    fn queue(id: u64, name: &str) -> DirectoryChange {
        DirectoryChange::DeclareQueue {
            vhost: 0,
            meta: QueueMeta {
                queue: QueueRef {
                    id: QueueId(id),
                    home: 0 as ShardId,
                },
                name: name.into(),
                durable: true,
                exclusive_owner: None,
                auto_delete: false,
                arguments: FieldTable::default(),
            },
        }
    }

    fn bind(queue: &str, key: &str) -> DirectoryChange {
        DirectoryChange::Bind {
            vhost: 0,
            exchange: "amq.topic".into(),
            binding: Binding {
                queue: QueueRef {
                    id: QueueId(0),
                    home: 0,
                },
                queue_name: queue.into(),
                routing_key: key.into(),
                arguments: FieldTable::default(),
            },
        }
    }

    #[test]
    fn replay_follows_declares_binds_and_deletes() {
        let mut log = BytesMut::new();
        encode_change(&mut log, "/", &queue(1, "a"));
        encode_change(&mut log, "/", &queue(2, "b"));
        encode_change(&mut log, "/", &bind("a", "x.#"));
        encode_change(&mut log, "/", &bind("b", "y.*"));
        encode_change(
            &mut log,
            "/",
            &DirectoryChange::DeleteQueue {
                vhost: 0,
                queue: QueueRef {
                    id: QueueId(2),
                    home: 0,
                },
                name: "b".into(),
            },
        );
        let d = replay_all(&log);
        assert_eq!(d.queues.len(), 1);
        assert_eq!(d.next_queue_id, 3);
        let binds = &d.bindings["/"];
        assert_eq!(binds.len(), 1);
        assert_eq!(binds[0].routing_key.as_bytes(), b"x.#");
        // A compacted log says the same and keeps the id floor past the deleted queue.
        let again = replay_all(&d.snapshot());
        assert_eq!(again.queues, d.queues);
        assert_eq!(again.bindings, d.bindings);
        assert_eq!(again.next_queue_id, 3);
    }

    #[test]
    fn a_damaged_change_mid_log_loses_only_that_change() {
        let dir = std::env::temp_dir().join(format!("sluice-defs-resync-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create test dir");
        let mut log = BytesMut::new();
        let mut starts = Vec::new();
        for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
            starts.push(log.len());
            encode_change(&mut log, "/", &queue(i as u64 + 1, name));
        }
        let tail = log.len();
        encode_change(&mut log, "/", &bind("d", "k"));
        log[starts[1] + record::HEADER + 2] ^= 0x01; // "b"
        let last = log.len() - 1;
        log[last] ^= 0x01; // the binding: a damaged tail
        std::fs::write(dir.join(FILE), &log).expect("write log");
        let loaded = load(&dir).expect("load");
        let _ = std::fs::remove_dir_all(&dir);
        let names: Vec<&[u8]> = loaded
            .definitions
            .queues
            .keys()
            .map(|(_, n)| n.as_bytes())
            .collect();
        assert_eq!(names, [&b"a"[..], b"c", b"d"]);
        assert_eq!(loaded.skipped.len(), 1);
        assert_eq!(
            (loaded.skipped[0].at, loaded.skipped[0].len),
            (starts[1], starts[2] - starts[1])
        );
        assert_eq!(loaded.truncated.as_ref().map(|t| t.0), Some(tail));
        assert!(loaded.definitions.bindings.is_empty());
    }
}
