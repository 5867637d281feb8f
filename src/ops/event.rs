//! Owns: [`OpsEvent`], every operational log line sluice writes, each with its Qpid-style
//! code (`BRK-1002`, `CON-1001`, `QUE-1001`, …), rendered by one formatter and emitted
//! under the `sluice::ops` tracing target. The codes are documented in
//! `config/log-codes.md`.
//!
//! Does not: format ad-hoc strings for other modules or rate-limit (callers that can
//! repeat, such as discards, keep their own minimum gap).

use std::fmt;
use std::net::SocketAddr;

use super::escape::Escaped;

/// One operational event.
#[derive(Debug, Clone, PartialEq)]
pub enum OpsEvent {
    /// BRK-1001: startup, with version and shard count.
    BrokerStartup {
        version: &'static str,
        shards: usize,
    },
    /// BRK-1002: a listener is bound.
    BrokerListening { addr: SocketAddr },
    /// BRK-1003: shutdown begins.
    BrokerShuttingDown,
    /// BRK-1004: every shard is accepting connections.
    BrokerReady,
    /// BRK-1005: the broker has stopped.
    BrokerStopped,
    /// BRK-1006: shard started (with its pinned core, if any).
    ShardStarted { shard: u16, core: Option<usize> },
    /// CON-1001: connection opened (after connection.open).
    /// `name`: the `connection_name` the client gave in `client-properties`, if any.
    ConnectionOpen {
        subject: String,
        client: String,
        name: Option<String>,
    },
    /// CON-1002: connection closed.
    ConnectionClose { subject: String, reason: String },
    /// CHN-1001: channel created.
    ChannelCreate { subject: String, channel: u16 },
    /// CHN-1003: channel closed, with the reason if the broker closed it.
    ChannelClose {
        subject: String,
        channel: u16,
        reason: Option<String>,
    },
    /// QUE-1001: queue created.
    QueueCreate {
        vhost: String,
        queue: String,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
    },
    /// QUE-1002: queue deleted.
    QueueDeleted { vhost: String, queue: String },
    /// EXH-1001: exchange created.
    ExchangeCreate {
        vhost: String,
        exchange: String,
        kind: &'static str,
        durable: bool,
    },
    /// EXH-1002: exchange deleted.
    ExchangeDeleted { vhost: String, exchange: String },
    /// BRK-1007: message memory went above the high watermark; publishers are blocked.
    MemoryAlarmSet { used: u64, high: u64 },
    /// BRK-1008: message memory fell below the low watermark; publishers resume.
    MemoryAlarmCleared { used: u64, low: u64 },
    /// BRK-1009: the memory watermarks in force (at start), and where the available
    /// figure came from (a cgroup limit file, or the machine's RAM when `None`).
    MemoryWatermarks {
        high: u64,
        low: u64,
        available: u64,
        cgroup_file: Option<String>,
    },
    /// BRK-1011: the open-files limit at start (the soft limit raised to the hard one).
    FileLimit { soft_was: u64, soft: u64, hard: u64 },
    /// BRK-1028: at start, whether the heap may use transparent huge pages
    /// (`memory.huge_pages`), and why the kernel's setting stays when it refused.
    HugePages {
        allowed: bool,
        error: Option<String>,
    },
    /// BRK-1012: a panic; the process aborts (a half-alive broker is worse than none).
    Panic { thread: String, message: String },
    /// BRK-1013: a systemd notification (`$NOTIFY_SOCKET`) could not be sent; logged
    /// once, the broker goes on.
    NotifyFailed { socket: String, error: String },
    /// BRK-1027: a shard's write pass has no send ring of its own (io_uring refused it
    /// at start, or a submission on it failed): it sends with one system call per
    /// connection from then on.
    SendRingUnavailable { shard: u16, error: String },
    /// BRK-1029: a shard cannot park idle readers (`net::park`: the kernel refused the
    /// epoll set, or its registration): every connection keeps its reader task.
    ReaderParkUnavailable { shard: u16, reason: String },
    /// BRK-1014: the management listener (metrics and HTTP API) is bound.
    ManagementListening { addr: SocketAddr },
    /// BRK-1023: the Prometheus listener (RabbitMQ's metric names, no credentials) is
    /// bound.
    PrometheusListening { addr: SocketAddr },
    /// BRK-1015: a TLS (amqps) listener is bound.
    TlsListening { addr: SocketAddr },
    /// CON-1010: a TLS handshake failed or timed out; the socket was closed. Rate-limited
    /// per shard; `suppressed` counts the failures not logged since the last line.
    TlsHandshakeFailed {
        peer: SocketAddr,
        reason: String,
        suppressed: u64,
    },
    /// CON-1005: accepting failed (out of file descriptors, usually); summed per report.
    AcceptFailed {
        shard: u16,
        error: String,
        failures: u64,
    },
    /// BRK-1010: the memory ledger, by where the bytes live (when `memory.report_interval_ms`
    /// is set and it changed).
    MemoryReport {
        messages: i64,
        entries: i64,
        outbound: i64,
        partial: i64,
    },
    /// CON-1003: the broker stopped reading a connection that kept publishing after it
    /// was told to stop (flow control enforcement).
    ReadingSuspended {
        subject: String,
        channel: u16,
        excess: u64,
        grace: u64,
    },
    /// CON-1004: the broker reads that connection again.
    ReadingResumed { subject: String },
    /// CHN-1005: a publishing channel is flow-controlled, because of an overfull queue or
    /// the memory alarm.
    FlowEnforced {
        subject: String,
        channel: u16,
        cause: FlowCause,
    },
    /// CHN-1006: the channel may publish again.
    FlowRemoved { subject: String, channel: u16 },
    /// QUE-1003: the queue's size went above its capacity.
    QueueOverfull {
        vhost: String,
        queue: String,
        size: u64,
        capacity: u64,
    },
    /// QUE-1004: the queue's size fell below its resume capacity.
    QueueUnderfull {
        vhost: String,
        queue: String,
        size: u64,
        resume: u64,
    },
    /// QUE-1005: a ring discarded its oldest messages (at most one line per alert gap).
    QueueDiscarded {
        vhost: String,
        queue: String,
        discarded: u64,
        reason: &'static str,
        count: u64,
        bytes: u64,
    },
    /// QUE-1006: `x-overflow = reject-publish` refused publishes (one line per alert gap).
    QueueRejected {
        vhost: String,
        queue: String,
        rejected: u64,
        count: u64,
        bytes: u64,
    },
    /// SUB-1003: a subscription crossed a slow-consumer threshold.
    SlowConsumerDetected(Box<SlowReport>),
    /// SUB-1004: a subscription is predicted to cross a threshold soon.
    SlowConsumerPredicted(Box<SlowReport>),
    /// SUB-1005: a subscription over a threshold is exempt and left alone.
    SlowConsumerExempt(Box<SlowReport>),
    /// BRK-1017: users whose password is in the configuration in plain text (at start).
    PlaintextPasswords { users: Vec<String> },
    /// CHN-1010: a permission was refused (rate-limited: `suppressed` refusals were not
    /// logged since the previous line).
    AccessRefused {
        subject: String,
        channel: u16,
        reason: String,
        suppressed: u64,
    },
    /// CON-1015: a user was refused a vhost at `connection.open` (rate-limited as CHN-1010).
    VhostRefused {
        subject: String,
        reason: String,
        suppressed: u64,
    },
}

/// Why a channel is flow-controlled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowCause {
    Queue(String),
    Memory,
    /// The store is over the vhost's disk quota.
    Store,
    /// The data dir's file system is below `disk_free_limit` (or a store write failed).
    Disk,
}

/// The numbers behind a slow-consumer line.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowReport {
    pub vhost: String,
    pub queue: String,
    /// The threshold crossed (or predicted), e.g. "count".
    pub threshold: &'static str,
    /// Its limit, rendered with its unit.
    pub limit: String,
    /// "delete" or "cycle".
    pub policy: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub age_ms: Option<u64>,
    /// Consumption rate (msg/s): the judged window rate when known, else the estimate.
    pub rate: f64,
    /// Arrival rate (msg/s).
    pub arrival: f64,
    /// Seconds to the predicted breach (SUB-1004).
    pub in_seconds: Option<f64>,
    /// Why it is left alone (SUB-1005).
    pub exempt: Option<&'static str>,
}

/// `1234567` as `1,234,567`, as Qpid writes sizes.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl OpsEvent {
    pub fn code(&self) -> &'static str {
        match self {
            OpsEvent::BrokerStartup { .. } => "BRK-1001",
            OpsEvent::BrokerListening { .. } => "BRK-1002",
            OpsEvent::BrokerShuttingDown => "BRK-1003",
            OpsEvent::BrokerReady => "BRK-1004",
            OpsEvent::BrokerStopped => "BRK-1005",
            OpsEvent::ShardStarted { .. } => "BRK-1006",
            OpsEvent::ConnectionOpen { .. } => "CON-1001",
            OpsEvent::ConnectionClose { .. } => "CON-1002",
            OpsEvent::ChannelCreate { .. } => "CHN-1001",
            OpsEvent::ChannelClose { .. } => "CHN-1003",
            OpsEvent::QueueCreate { .. } => "QUE-1001",
            OpsEvent::QueueDeleted { .. } => "QUE-1002",
            OpsEvent::ExchangeCreate { .. } => "EXH-1001",
            OpsEvent::ExchangeDeleted { .. } => "EXH-1002",
            OpsEvent::MemoryAlarmSet { .. } => "BRK-1007",
            OpsEvent::MemoryAlarmCleared { .. } => "BRK-1008",
            OpsEvent::MemoryWatermarks { .. } => "BRK-1009",
            OpsEvent::MemoryReport { .. } => "BRK-1010",
            OpsEvent::FileLimit { .. } => "BRK-1011",
            OpsEvent::HugePages { .. } => "BRK-1028",
            OpsEvent::Panic { .. } => "BRK-1012",
            OpsEvent::NotifyFailed { .. } => "BRK-1013",
            OpsEvent::SendRingUnavailable { .. } => "BRK-1027",
            OpsEvent::ReaderParkUnavailable { .. } => "BRK-1029",
            OpsEvent::ManagementListening { .. } => "BRK-1014",
            OpsEvent::PrometheusListening { .. } => "BRK-1023",
            OpsEvent::AcceptFailed { .. } => "CON-1005",
            OpsEvent::TlsListening { .. } => "BRK-1015",
            OpsEvent::TlsHandshakeFailed { .. } => "CON-1010",
            OpsEvent::ReadingSuspended { .. } => "CON-1003",
            OpsEvent::ReadingResumed { .. } => "CON-1004",
            OpsEvent::FlowEnforced { .. } => "CHN-1005",
            OpsEvent::FlowRemoved { .. } => "CHN-1006",
            OpsEvent::QueueOverfull { .. } => "QUE-1003",
            OpsEvent::QueueUnderfull { .. } => "QUE-1004",
            OpsEvent::QueueDiscarded { .. } => "QUE-1005",
            OpsEvent::QueueRejected { .. } => "QUE-1006",
            OpsEvent::SlowConsumerDetected(_) => "SUB-1003",
            OpsEvent::SlowConsumerPredicted(_) => "SUB-1004",
            OpsEvent::SlowConsumerExempt(_) => "SUB-1005",
            OpsEvent::PlaintextPasswords { .. } => "BRK-1017",
            OpsEvent::AccessRefused { .. } => "CHN-1010",
            OpsEvent::VhostRefused { .. } => "CON-1015",
        }
    }

    /// Writes the event to the log at the level its kind deserves, with its parts as
    /// fields ([`super::fields`], [`LogFields`] below).
    pub fn emit(&self) {
        super::fields::emit(self);
    }
}

/// ` (N more refused since the last line)` after a rate-limited line.
fn suppressed_note(f: &mut fmt::Formatter<'_>, suppressed: u64) -> fmt::Result {
    if suppressed > 0 {
        write!(f, " ({suppressed} more refused since the last line)")?;
    }
    Ok(())
}

impl fmt::Display for OpsEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code();
        match self {
            OpsEvent::BrokerStartup { version, shards } => {
                write!(f, "{code} : Startup : Version: {version} Shards: {shards}")
            }
            OpsEvent::BrokerListening { addr } => {
                write!(f, "{code} : Starting : Listening on TCP {addr}")
            }
            OpsEvent::BrokerShuttingDown => write!(f, "{code} : Shutting down"),
            OpsEvent::BrokerReady => write!(f, "{code} : Ready"),
            OpsEvent::BrokerStopped => write!(f, "{code} : Stopped"),
            OpsEvent::ShardStarted { shard, core } => match core {
                Some(core) => write!(f, "{code} : Shard {shard} started on core {core}"),
                None => write!(f, "{code} : Shard {shard} started"),
            },
            OpsEvent::ConnectionOpen {
                subject,
                client,
                name,
            } => {
                write!(
                    f,
                    "[{subject}] {code} : Open : Client: {client}",
                    subject = Escaped(subject),
                )?;
                match name {
                    Some(name) => write!(f, " : Name: {}", Escaped(name)),
                    None => Ok(()),
                }
            }
            OpsEvent::ConnectionClose { subject, reason } => {
                write!(
                    f,
                    "[{subject}] {code} : Close : {reason}",
                    subject = Escaped(subject),
                    reason = Escaped(reason),
                )
            }
            OpsEvent::ChannelCreate { subject, channel } => {
                write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Create",
                    subject = Escaped(subject),
                )
            }
            OpsEvent::ChannelClose {
                subject,
                channel,
                reason,
            } => match reason {
                Some(reason) => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Close : {reason}",
                    subject = Escaped(subject),
                    reason = Escaped(reason),
                ),
                None => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Close",
                    subject = Escaped(subject),
                ),
            },
            OpsEvent::QueueCreate {
                vhost,
                queue,
                durable,
                exclusive,
                auto_delete,
            } => {
                write!(
                    f,
                    "[vh({vhost})/qu({queue})] {code} : Create",
                    vhost = Escaped(vhost),
                    queue = Escaped(queue),
                )?;
                if *durable {
                    f.write_str(" Durable")?;
                }
                if *exclusive {
                    f.write_str(" Exclusive")?;
                }
                if *auto_delete {
                    f.write_str(" AutoDelete")?;
                }
                Ok(())
            }
            OpsEvent::QueueDeleted { vhost, queue } => {
                write!(
                    f,
                    "[vh({vhost})/qu({queue})] {code} : Deleted",
                    vhost = Escaped(vhost),
                    queue = Escaped(queue),
                )
            }
            OpsEvent::ExchangeCreate {
                vhost,
                exchange,
                kind,
                durable,
            } => {
                write!(
                    f,
                    "[vh({vhost})/ex({kind}/{exchange})] {code} : Create",
                    vhost = Escaped(vhost),
                    exchange = Escaped(exchange),
                )?;
                if *durable {
                    f.write_str(" Durable")?;
                }
                Ok(())
            }
            OpsEvent::ExchangeDeleted { vhost, exchange } => {
                write!(
                    f,
                    "[vh({vhost})/ex({exchange})] {code} : Deleted",
                    vhost = Escaped(vhost),
                    exchange = Escaped(exchange),
                )
            }
            OpsEvent::MemoryAlarmSet { used, high } => write!(
                f,
                "{code} : Memory high watermark exceeded : Used : {} bytes, High watermark : {} : every publisher is blocked",
                thousands(*used),
                thousands(*high)
            ),
            OpsEvent::MemoryAlarmCleared { used, low } => write!(
                f,
                "{code} : Memory alarm cleared : Used : {} bytes, Low watermark : {} : publishers resume",
                thousands(*used),
                thousands(*low)
            ),
            OpsEvent::MemoryWatermarks {
                high,
                low,
                available,
                cgroup_file,
            } => {
                write!(
                    f,
                    "{code} : Memory watermarks : High : {} bytes, Low : {} bytes, Available : {} bytes",
                    thousands(*high),
                    thousands(*low),
                    thousands(*available)
                )?;
                match cgroup_file {
                    Some(file) => write!(f, " (cgroup limit {})", Escaped(file)),
                    None => write!(f, " (physical memory)"),
                }
            }
            OpsEvent::MemoryReport {
                messages,
                entries,
                outbound,
                partial,
            } => write!(
                f,
                "{code} : Memory : Used : {} bytes : Messages : {}, Queue entries : {}, Outbound : {}, Partial publishes : {}",
                thousands((messages + entries + outbound + partial).max(0) as u64),
                thousands((*messages).max(0) as u64),
                thousands((*entries).max(0) as u64),
                thousands((*outbound).max(0) as u64),
                thousands((*partial).max(0) as u64)
            ),
            OpsEvent::FileLimit {
                soft_was,
                soft,
                hard,
            } => {
                write!(f, "{code} : Open files limit : {soft} (hard limit {hard}")?;
                if soft_was != soft {
                    write!(f, ", raised from {soft_was}")?;
                }
                write!(f, ")")
            }
            OpsEvent::HugePages { allowed, error } => {
                let state = if *allowed { "allowed" } else { "off" };
                match error {
                    None => write!(f, "{code} : Transparent huge pages : {state}"),
                    Some(error) => write!(
                        f,
                        "{code} : Transparent huge pages : could not set {state} : {error} : the kernel's setting stays"
                    ),
                }
            }
            OpsEvent::Panic { thread, message } => {
                write!(f, "{code} : Panic in thread {thread} : {message} : aborting")
            }
            OpsEvent::NotifyFailed { socket, error } => write!(
                f,
                "{code} : systemd notification failed : NOTIFY_SOCKET={socket} : {error} : not retried, the broker goes on"
            ),
            OpsEvent::SendRingUnavailable { shard, error } => write!(
                f,
                "{code} : Send ring unavailable : shard {shard} : {error} : one send per connection"
            ),
            OpsEvent::ReaderParkUnavailable { shard, reason } => write!(
                f,
                "{code} : Reader parking unavailable : shard {shard} : {reason} : every connection keeps its reader task"
            ),
            OpsEvent::ManagementListening { addr } => {
                write!(f, "{code} : Management listening on http://{addr}")
            }
            OpsEvent::PrometheusListening { addr } => {
                write!(f, "{code} : Prometheus listening on http://{addr}/metrics")
            }
            OpsEvent::TlsListening { addr } => {
                write!(f, "{code} : Starting : Listening on TLS {addr}")
            }
            OpsEvent::TlsHandshakeFailed {
                peer,
                reason,
                suppressed,
            } => {
                write!(
                    f,
                    "{code} : TLS handshake failed from {peer} : {reason} : socket closed",
                    reason = Escaped(reason),
                )?;
                if *suppressed > 0 {
                    write!(f, " ({suppressed} more failures not logged)")?;
                }
                Ok(())
            }
            OpsEvent::AcceptFailed {
                shard,
                error,
                failures,
            } => write!(
                f,
                "{code} : Accept failed on shard {shard} : {error} : {failures} failures since the last report; open connections are served, accepting resumes when descriptors free up"
            ),
            OpsEvent::ReadingSuspended {
                subject,
                channel,
                excess,
                grace,
            } => write!(
                f,
                "[{subject}] {code} : Reading suspended : channel {channel} published {} bytes after it was told to stop (grace {} bytes)",
                thousands(*excess),
                thousands(*grace),
                subject = Escaped(subject),
            ),
            OpsEvent::ReadingResumed { subject } => {
                write!(
                    f,
                    "[{subject}] {code} : Reading resumed",
                    subject = Escaped(subject),
                )
            }
            OpsEvent::FlowEnforced {
                subject,
                channel,
                cause,
            } => match cause {
                FlowCause::Queue(queue) => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Flow Control Enforced (Queue {queue})",
                    subject = Escaped(subject),
                    queue = Escaped(queue),
                ),
                FlowCause::Memory => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Flow Control Enforced (Memory high watermark)",
                    subject = Escaped(subject),
                ),
                FlowCause::Store => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Flow Control Enforced (Store overfull)",
                    subject = Escaped(subject),
                ),
                FlowCause::Disk => write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Flow Control Enforced (Disk free limit)",
                    subject = Escaped(subject),
                ),
            },
            OpsEvent::FlowRemoved { subject, channel } => {
                write!(
                    f,
                    "[{subject}/ch:{channel}] {code} : Flow Control Removed",
                    subject = Escaped(subject),
                )
            }
            OpsEvent::QueueOverfull {
                vhost,
                queue,
                size,
                capacity,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Overfull : Size : {} bytes, Capacity : {}",
                thousands(*size),
                thousands(*capacity),
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            OpsEvent::QueueUnderfull {
                vhost,
                queue,
                size,
                resume,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Underfull : Size : {} bytes, Resume Capacity : {}",
                thousands(*size),
                thousands(*resume),
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            OpsEvent::QueueDiscarded {
                vhost,
                queue,
                discarded,
                reason,
                count,
                bytes,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Discarded : {} messages since the last report, oldest first ({reason}) : Count : {}, Depth : {} bytes",
                thousands(*discarded),
                thousands(*count),
                thousands(*bytes),
                reason = Escaped(reason),
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            OpsEvent::QueueRejected {
                vhost,
                queue,
                rejected,
                count,
                bytes,
            } => write!(
                f,
                "[vh({vhost})/qu({queue})] {code} : Rejected : {} publishes since the last report (x-overflow reject-publish) : Count : {}, Depth : {} bytes",
                thousands(*rejected),
                thousands(*count),
                thousands(*bytes),
                vhost = Escaped(vhost),
                queue = Escaped(queue),
            ),
            OpsEvent::SlowConsumerDetected(r) => {
                write!(f, "[vh({})/qu({})] {code} : Slow consumer detected : ", Escaped(&r.vhost), Escaped(&r.queue))?;
                r.numbers(f)?;
                write!(f, " threshold={} (limit {}) policy={}", r.threshold, r.limit, r.policy)
            }
            OpsEvent::SlowConsumerPredicted(r) => {
                write!(
                    f,
                    "[vh({})/qu({})] {code} : Slow consumer predicted : threshold={} (limit {}) in {:.1} s : ",
                    Escaped(&r.vhost),
                    Escaped(&r.queue),
                    r.threshold,
                    r.limit,
                    r.in_seconds.unwrap_or(0.0)
                )?;
                r.numbers(f)?;
                write!(
                    f,
                    " arrival={:.1} msg/s growth={:+.1} msg/s policy={}",
                    r.arrival,
                    r.arrival - r.rate,
                    r.policy
                )
            }
            OpsEvent::SlowConsumerExempt(r) => {
                write!(f, "[vh({})/qu({})] {code} : Slow consumer exempt : ", Escaped(&r.vhost), Escaped(&r.queue))?;
                r.numbers(f)?;
                write!(
                    f,
                    " threshold={} (limit {}) reason={}",
                    r.threshold,
                    r.limit,
                    r.exempt.unwrap_or("exempt")
                )
            }
            OpsEvent::PlaintextPasswords { users } => write!(
                f,
                "{code} : Plain-text passwords : users {} have a plain-text password in the configuration; store password_hash instead (sluice hash-password)",
                users.iter().map(|u| format!("'{}'", Escaped(u))).collect::<Vec<_>>().join(", ")
            ),
            OpsEvent::AccessRefused {
                subject,
                channel,
                reason,
                suppressed,
            } => {
                write!(
                    f,
                    "[{}/ch:{channel}] {code} : Access refused : {}",
                    Escaped(subject),
                    Escaped(reason)
                )?;
                suppressed_note(f, *suppressed)
            }
            OpsEvent::VhostRefused {
                subject,
                reason,
                suppressed,
            } => {
                write!(
                    f,
                    "[{}] {code} : Vhost access refused : {}",
                    Escaped(subject),
                    Escaped(reason)
                )?;
                suppressed_note(f, *suppressed)
            }
        }
    }
}

impl SlowReport {
    /// `queue=q depth=1,234 bytes count=12 age=1,500 ms rate=3.5 msg/s`
    fn numbers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue={} depth={} bytes count={} age=",
            Escaped(&self.queue),
            thousands(self.bytes),
            thousands(self.count)
        )?;
        match self.age_ms {
            Some(ms) => write!(f, "{} ms", thousands(ms))?,
            None => f.write_str("none")?,
        }
        write!(f, " rate={:.1} msg/s", self.rate)
    }
}

mod log_fields;

#[cfg(test)]
mod tests;
