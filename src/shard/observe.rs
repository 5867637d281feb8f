//! Owns: what a shard tells the operator interfaces (`crate::http`) about itself — a
//! snapshot of its home queues, its connections, channels and consumers, its counters, and
//! (from any one replica) the directory's exchanges and bindings — and the operator's
//! actions a shard performs on what it owns: force-closing one of its connections and
//! purging one of its home queues; the management API's publish and get are handed to
//! `shard::messages`.
//!
//! Each request is answered from the shard's own `State` in one borrow, in the turn the
//! request arrives ([`answer`]; a persistent publish once it is on disk, [`answer_or_wait`]). The reply is plain owned data sent back on a oneshot, so
//! the HTTP thread formats it at its own pace: a slow HTTP client never holds a shard.
//!
//! Does not: format anything for the wire (JSON and the exposition format are `http`'s),
//! or touch another shard's state.

use std::time::Instant;

use crate::model::ids::ShardId;
use crate::model::routing::Directory;
use crate::policy::stream_args::StreamRefusal;
use crate::protocol::ShortStr;
use crate::queue::{Queue, QueueCounters};
use crate::session::connection::{Conn, Phase};
use crate::shard::inbox::observe::{
    BindingView, ChannelView, Churn, ConnView, ConsumerView, CounterView, ExchangeCounters,
    ExchangeView, FlowView, ObserveReply, ObserveRequest, QueueDefView, QueueView, ReaderView,
    ShardView, SlowView, StreamView, VhostView, Want, QUEUE_CHUNK,
};
use crate::shard::inbox::{QueueReply, QueueRequest};
use crate::shard::{Shard, State};
use crate::stream::Stream;

/// The operator's name of a connection, as RabbitMQ forms it (`Conn::name`:
/// `127.0.0.1:40312 -> 127.0.0.1:5672`), unique in the broker.
pub fn connection_name(conn: &Conn) -> String {
    conn.name()
}

fn text(s: &ShortStr) -> String {
    s.as_str_lossy().into_owned()
}

/// How a request is answered: now, or (a management API publish of a persistent
/// message) once what this turn staged is on disk, as a publisher confirm is, so that
/// a message the answer says was routed survives a crash.
pub enum Answer {
    Now(ObserveReply),
    /// Told whether the group holding the message was written.
    OnceSynced(tokio::sync::oneshot::Receiver<bool>),
}

/// Answers a request from the shard's own state (see [`Answer`]).
pub fn answer_or_wait(shard: &Shard, req: ObserveRequest) -> Answer {
    let ObserveRequest::Enqueue {
        queues,
        msg,
        permits,
    } = req
    else {
        return Answer::Now(answer(shard, req));
    };
    let persistent = msg.is_persistent();
    let accepted = super::messages::enqueue(shard, &queues, msg, permits);
    if !(accepted && persistent) {
        return Answer::Now(ObserveReply::Enqueued(accepted));
    }
    let (synced_tx, synced) = tokio::sync::oneshot::channel();
    shard
        .state
        .borrow_mut()
        .queue_side()
        .wait_for_sync(synced_tx);
    shard.flush_soon();
    Answer::OnceSynced(synced)
}

/// Answers a request in this turn, from the shard's own state.
pub fn answer(shard: &Shard, req: ObserveRequest) -> ObserveReply {
    let now = shard.clock.now();
    match req {
        ObserveRequest::Snapshot(want) => {
            let st = shard.state.borrow();
            let mut view = snapshot(&st, shard.id, now, want);
            view.bytes_read = shard.counters.bytes_read.get();
            view.bytes_written = shard.counters.bytes_written.get();
            view.readers_parked = shard.parked_readers.parked() as u64;
            view.reader_parks = shard.parked_readers.parks();
            let c = &shard.counters;
            view.churn = Churn {
                connections_opened: c.connections_opened.get(),
                connections_closed: c.connections_closed.get(),
                channels_opened: c.channels_opened.get(),
                logins_succeeded: c.logins_succeeded.get(),
                logins_failed: c.logins_failed.get(),
                queues_declared: c.queues_declared.get(),
                queues_created: c.queues_created.get(),
                queues_deleted: c.queues_deleted.get(),
            };
            view.message_totals = message_totals(&st);
            view.message_sizes = c.message_sizes.read();
            view.cpu_seconds = thread_cpu_seconds();
            ObserveReply::Snapshot(Box::new(view))
        }
        ObserveRequest::Directory => {
            ObserveReply::Directory(directory_view(&shard.state.borrow().common.directory))
        }
        ObserveRequest::CloseConnection { name, reason } => {
            let mut st = shard.state.borrow_mut();
            let found = st
                .conns
                .iter()
                .find(|c| connection_name(c) == name)
                .map(|c| c.id);
            if let Some(id) = found {
                st.conn_side().force_close(shard, id, &reason);
            }
            ObserveReply::Closed(found.is_some())
        }
        ObserveRequest::Vhosts => {
            let st = shard.state.borrow();
            let directory = &st.common.directory;
            let open = (0..directory.vhost_count())
                .filter(|i| !directory.is_closed(*i))
                .filter_map(|i| directory.vhost(i))
                .map(|d| d.name.clone())
                .collect();
            ObserveReply::Vhosts(open)
        }
        ObserveRequest::Purge { vhost, name } => {
            let mut st = shard.state.borrow_mut();
            let queue = st
                .common
                .directory
                .vhost_index(&vhost)
                .and_then(|v| st.common.directory.vhost(v))
                .and_then(|d| d.queue(&ShortStr::from(name.as_str())))
                .map(|m| m.queue)
                .filter(|q| q.home == shard.id);
            let Some(queue) = queue else {
                return ObserveReply::Purged(None);
            };
            if st.home.stream(queue.id).is_some() {
                return ObserveReply::NotSupported(StreamRefusal::Purge.text(&name, &vhost));
            }
            match st
                .queue_side()
                .queue_request(shard, QueueRequest::Purge { queue: queue.id })
            {
                QueueReply::Purged(n) => ObserveReply::Purged(Some(n)),
                _ => ObserveReply::Purged(None),
            }
        }
        ObserveRequest::Route {
            vhost,
            exchange,
            routing_key,
            raw_properties,
        } => ObserveReply::Routed(super::messages::route(
            shard,
            &vhost,
            &exchange,
            &routing_key,
            &raw_properties,
        )),
        ObserveRequest::Enqueue {
            queues,
            msg,
            permits,
        } => ObserveReply::Enqueued(super::messages::enqueue(shard, &queues, msg, permits)),
        ObserveRequest::Get {
            vhost,
            name,
            count,
            mode,
        } => match super::messages::is_stream(shard, &vhost, &name) {
            true => ObserveReply::NotSupported(StreamRefusal::Get.text(&name, &vhost)),
            false => ObserveReply::Got(super::messages::get(shard, &vhost, &name, count, mode)),
        },
        ObserveRequest::Counters => {
            ObserveReply::Counters(Box::new(counters(&shard.state.borrow())))
        }
    }
}

/// The totals of every channel this shard has had: the closed ones' and the open ones'.
fn message_totals(st: &State) -> crate::session::channel::ChannelStats {
    let mut all = crate::session::channel::retired_totals();
    for c in st.conns.iter() {
        for ch in c.channels.values() {
            all.add(&ch.totals());
        }
    }
    all
}

/// The message counters of this shard's home queues, channels and exchanges: copies of
/// plain numbers (no names but the exchanges that were published to).
fn counters(st: &State) -> CounterView {
    let queues = st.home.iter().map(|q| (q.id.0, q.counters)).collect();
    let mut channels = Vec::new();
    for c in st.conns.iter() {
        channels.extend(
            c.channels
                .values()
                .map(|ch| ((c.serial, ch.number), ch.counts())),
        );
    }
    let directory = &st.common.directory;
    let mut exchanges = Vec::new();
    let open = (0..directory.vhost_count()).filter(|i| !directory.is_closed(*i));
    for d in open.filter_map(|i| directory.vhost(i)) {
        if d.default_publish_in.get() > 0 {
            exchanges.push(ExchangeCounters {
                vhost: d.name.clone(),
                name: String::new(),
                publish_in: d.default_publish_in.get(),
                publish_out: d.default_publish_out.get(),
            });
        }
        for ex in d.exchanges().filter(|ex| ex.publish_in.get() > 0) {
            exchanges.push(ExchangeCounters {
                vhost: d.name.clone(),
                name: text(&ex.def.name),
                publish_in: ex.publish_in.get(),
                publish_out: ex.publish_out.get(),
            });
        }
    }
    CounterView {
        queues,
        channels,
        exchanges,
    }
}

/// CPU time used by the calling thread, seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn queue_view(q: &Queue, home: ShardId, now: Instant) -> QueueView {
    let stats = q.stats();
    let holdings = q.holdings(now);
    let slow = &q.limits.slow;
    QueueView {
        id: q.id.0,
        vhost: q.vhost.clone(),
        name: text(&q.name),
        home,
        durable: q.settings.durable,
        exclusive: q.settings.exclusive,
        auto_delete: q.settings.auto_delete,
        arguments: q.settings.arguments.clone(),
        policy: q.limits.policy.clone(),
        ready: u64::from(stats.messages),
        unacked: q.held_count().saturating_sub(u64::from(stats.messages)),
        ready_bytes: stats.depth_bytes,
        bytes: stats.held_bytes,
        consumers: u64::from(stats.consumers),
        oldest_age_secs: holdings.oldest_age.map_or(0.0, |a| a.as_secs_f64()),
        counters: q.counters,
        flow: q.limits.capacity.as_ref().map(|c| FlowView {
            blocked: c.is_overfull(),
            capacity: c.capacity,
            resume_capacity: c.resume,
            blocked_publishers: q.limits.blocked_publishers.len() as u64,
        }),
        slow: slow.active().map(|p| SlowView {
            action: p.action.name(),
            max_depth: p.max_depth,
            max_count: p.max_count,
            max_age_secs: p.max_age.map(|a| a.as_secs_f64()),
            min_rate: p.min_rate,
            arrival_rate: slow.arrival_rate(),
            consume_rate: slow.consume_rate(),
            predicted_threshold: slow.prediction().map(|p| p.threshold.name()),
            predicted_seconds: slow.prediction().map(|p| p.seconds),
        }),
        stream: None,
    }
}

/// A home stream as a queue view: its messages are the log's, its consumers its
/// readers, with the stream's own figures in `stream`.
fn stream_view(s: &Stream, home: ShardId, now_ms: i64) -> QueueView {
    let readers: Vec<ReaderView> = s
        .readers()
        .iter()
        .map(|r| {
            let lag = s.lag(r, now_ms);
            ReaderView {
                consumer_tag: text(&r.tag),
                connection: r.connection.clone(),
                channel: r.target.channel,
                offset: r.position(),
                started_at: r.started_at,
                delivered: r.delivered,
                delivery_rate: r.rate(),
                prefetch: r.prefetch,
                credit: r.credit,
                tracking: r.tracking,
                lag_messages: lag.messages,
                lag_bytes: lag.bytes,
                seconds_to_retention: lag.seconds_to_retention,
                reading: r.is_reading(),
            }
        })
        .collect();
    let (publish_rate, publish_bytes_rate) = s.publish_rates();
    let c = s.counters;
    QueueView {
        id: s.id.0,
        vhost: s.vhost.clone(),
        name: text(&s.name),
        home,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: s.arguments.clone(),
        policy: None,
        ready: s.messages(),
        unacked: 0,
        ready_bytes: s.disk_bytes(),
        bytes: s.disk_bytes(),
        consumers: readers.len() as u64,
        oldest_age_secs: 0.0,
        counters: QueueCounters {
            enqueued: c.appended,
            delivered: c.delivered,
            consumed: c.delivered,
            ..QueueCounters::default()
        },
        flow: None,
        slow: None,
        stream: Some(Box::new(StreamView {
            first_offset: s.first_offset(),
            committed_offset: s.committed(),
            segments: s.segment_count() as u64,
            disk_bytes: s.disk_bytes(),
            cache_bytes: s.cache_bytes(),
            max_length_bytes: s.settings.max_bytes,
            max_age_secs: s.settings.max_age.map(|a| a.as_secs_f64()),
            segment_size: s.settings.segment_size,
            publish_rate,
            publish_bytes_rate,
            tracked_consumers: s.tracked() as u64,
            segments_removed: c.segments_removed,
            messages_removed: c.messages_removed,
            readers,
        })),
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::AwaitHeader | Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::AwaitOpen => {
            "starting"
        }
        Phase::Open => "running",
        Phase::Closing | Phase::Lingering | Phase::Closed => "closing",
    }
}

/// This shard's counts, and its home queues, connections, channels and consumers
/// as asked.
fn snapshot(st: &State, shard: ShardId, now: Instant, want: Want) -> ShardView {
    let with_consumers = want.consumers;
    let mut view = ShardView {
        shard,
        queue_count: st.home.len() as u64,
        connection_count: st.conns.len() as u64,
        ..ShardView::default()
    };
    for q in st.home.iter() {
        let ready = q.ready_count() as u64;
        view.messages_ready += ready;
        view.messages_unacked += q.held_count().saturating_sub(ready);
    }
    for c in st.conns.iter() {
        view.channel_count += c.channels.len() as u64;
        for ch in c.channels.values() {
            view.consumer_count += ch.consumers.len() as u64;
            view.publisher_count += u64::from(ch.publisher().is_some_and(|p| p.published));
        }
    }
    if want.queues {
        // The next chunk in id order: O(queues) to select, no allocation per queue.
        let mut ids: Vec<u64> = st
            .home
            .iter()
            .map(|q| q.id.0)
            .chain(st.home.streams().map(|s| s.id.0))
            .filter(|id| *id > want.queues_after)
            .collect();
        if ids.len() > QUEUE_CHUNK {
            ids.select_nth_unstable(QUEUE_CHUNK - 1);
            ids.truncate(QUEUE_CHUNK);
            ids.sort_unstable();
            view.next_queue = ids.last().copied();
        }
        let now_ms = super::home::streams::wall_ms();
        view.queues = ids
            .iter()
            .map(|id| crate::model::ids::QueueId(*id))
            .filter_map(|id| match st.home.get(id) {
                Some(q) => Some(queue_view(q, shard, now)),
                None => st.home.stream(id).map(|s| stream_view(s, shard, now_ms)),
            })
            .collect();
    }
    if !(want.connections || want.consumers) {
        return view;
    }
    // Queue names by reference, for the consumers (built only when asked).
    let mut queue_names = std::collections::HashMap::new();
    if with_consumers {
        let directory = &st.common.directory;
        for d in (0..directory.vhost_count()).filter_map(|i| directory.vhost(i)) {
            for m in d.queues() {
                queue_names.insert(m.queue, text(&m.name));
            }
        }
    }
    for c in st.conns.iter() {
        let name = connection_name(c);
        view.connections.push(ConnView {
            name: name.clone(),
            serial: c.serial,
            shard,
            peer: c.peer.to_string(),
            user: c.user.clone(),
            vhost: c.vhost_name.clone(),
            state: phase_name(c.phase()),
            channels: c.channels.len() as u64,
            frame_max: c.frame_max,
            channel_max: c.channel_max,
            heartbeat: c.heartbeat,
            held: c.read_paused_since.is_some(),
            outbound_bytes: c.out.queued_bytes() as u64,
            local: c.local.map(|a| a.to_string()),
            tls: c.tls.is_some(),
            connected_at_ms: c.connected_at_ms,
            client_properties: c.client_properties(),
            auth_mechanism: c.auth_mechanism.clone(),
            recv_oct: c.recv_oct,
            send_oct: c.send_oct,
        });
        for ch in c.channels.values() {
            view.channels.push(ChannelView {
                connection: name.clone(),
                peer: c.peer.to_string(),
                serial: c.serial,
                number: ch.number,
                user: c.user.clone(),
                vhost: c.vhost_name.clone(),
                prefetch: ch.prefetch,
                global_prefetch: ch.global_prefetch,
                unacked: ch.unacked.len() as u64,
                consumers: ch.consumers.len() as u64,
                confirm: ch.confirms.is_some(),
                transactional: ch.tx.is_some(),
                flow_blocked: ch.publisher().is_some_and(|p| p.told_stopped()),
                stats: ch.counts(),
            });
            if !with_consumers {
                continue;
            }
            for cons in ch.consumers.values() {
                let queue = queue_names.get(&cons.queue).cloned().unwrap_or_default();
                view.consumers.push(ConsumerView {
                    connection: name.clone(),
                    channel: ch.number,
                    tag: text(&cons.tag),
                    vhost: c.vhost_name.clone(),
                    queue,
                    ack_required: !cons.no_ack,
                    prefetch: cons.prefetch,
                    unacked: cons.unacked,
                });
            }
        }
    }
    view
}

/// Every vhost's exchanges, queues and bindings, from this replica.
fn directory_view(directory: &Directory) -> Vec<VhostView> {
    (0..directory.vhost_count())
        .filter(|i| !directory.is_closed(*i))
        .filter_map(|i| directory.vhost(i))
        .map(|d| {
            let mut exchanges = Vec::new();
            let mut bindings = Vec::new();
            for ex in d.exchanges() {
                exchanges.push(ExchangeView {
                    name: text(&ex.def.name),
                    kind: ex.def.kind.name(),
                    durable: ex.def.durable,
                    auto_delete: ex.def.auto_delete,
                    internal: ex.def.internal,
                    arguments: ex.def.arguments.clone(),
                });
                for b in ex.bindings() {
                    bindings.push(BindingView {
                        source: text(&ex.def.name),
                        destination: text(&b.queue_name),
                        destination_type: "queue",
                        routing_key: text(&b.routing_key),
                        arguments: b.arguments.clone(),
                    });
                }
                for (_, b) in ex.exchange_bindings() {
                    bindings.push(BindingView {
                        source: text(&ex.def.name),
                        destination: text(&b.destination),
                        destination_type: "exchange",
                        routing_key: text(&b.routing_key),
                        arguments: b.arguments.clone(),
                    });
                }
            }
            let mut queues: Vec<QueueDefView> = d
                .queues()
                .map(|q| QueueDefView {
                    name: text(&q.name),
                    durable: q.durable,
                    exclusive: q.exclusive_owner.is_some(),
                    auto_delete: q.auto_delete,
                    arguments: q.arguments.clone(),
                })
                .collect();
            queues.sort_by(|a, b| a.name.cmp(&b.name));
            VhostView {
                vhost: d.name.clone(),
                exchanges,
                queues,
                bindings,
            }
        })
        .collect()
}
