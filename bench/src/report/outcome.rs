//! Owns: what the parts of a run came out as — each subscriber's [`SubResult`],
//! each publisher's [`PubResult`], each matrix cell's [`MatrixCell`] — as the
//! report lists them.
//! Does not: measure or judge them (the scenarios fill them in).

use serde::Serialize;

use crate::opts::{AckMode, ConsumeMode, Policy};

/// One subscriber's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SubResult {
    pub id: usize,
    pub queue: String,
    pub slow: bool,
    pub delivered: u64,
    /// Sequence numbers skipped (messages the broker discarded for this subscriber,
    /// e.g. by a cycle policy or `x-max-length`), including those seen skipped in
    /// `read_after_run`.
    pub gaps: u64,
    /// Deliveries whose sequence number was at or below one seen before (out of
    /// order or duplicated).
    pub reordered: u64,
    /// Deliveries in the measured window (those its latency figures cover).
    pub measured: u64,
    /// p99 latency of its deliveries in the measured window (±3.2 %).
    pub p99_ns: Option<u64>,
    /// Reply code and text if the broker closed its channel (e.g. 506
    /// `Consuming too slow.`), and when (seconds since publishing started).
    pub closed_code: Option<u16>,
    pub closed_text: Option<String>,
    pub closed_at_s: Option<f64>,
    /// The close was seen only after the run, behind `read_after_run` deliveries.
    pub closed_after_run: bool,
    /// Deliveries a throttled subscriber read (unthrottled, not counted as delivered)
    /// after the run to learn whether the broker had closed its channel behind what
    /// it had already written to the socket.
    pub read_after_run: u64,
    pub error: Option<String>,
}

/// One publisher's outcome.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PubResult {
    pub published: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub returned: u64,
    /// Time publishes spent held by broker flow control (ms), measured by the client
    /// around every publish that waited.
    pub flow_held_ms: u64,
    /// Publishes that had to wait for flow control.
    pub flow_waits: u64,
    /// Time publishes waited for room toward the socket (ms): TCP backpressure, or a
    /// broker that stopped reading this connection (how an `--ignore-flow`
    /// publisher is held).
    pub send_blocked_ms: u64,
    /// Publishes that gave up under flow control (each retried until sent or stopped).
    pub flow_timeouts: u64,
    /// `channel.flow active=false` received.
    pub channel_flow_stops: u64,
    /// `connection.blocked` received.
    pub connection_blocks: u64,
    /// Time spent waiting for subscribers under closed-loop pacing (ms): while it
    /// waited, the rate was the subscribers' capacity, not the publisher's.
    pub pacing_wait_ms: u64,
    /// Times the publisher had to wait for subscribers.
    pub pacing_waits: u64,
    /// How long the publisher ran (ms), waits included.
    pub run_ms: u64,
    /// When (seconds since publishing started) no pacing subscriber was left and the
    /// publisher went on open loop.
    pub pacing_released_at_s: Option<f64>,
    pub error: Option<String>,
}

/// One cell of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixCell {
    pub ack: AckMode,
    pub consume: ConsumeMode,
    pub durable: bool,
    pub published: u64,
    pub fast_subscribers: usize,
    /// Fewest and most messages a fast subscriber received.
    pub fast_min_delivered: u64,
    pub fast_max_delivered: u64,
    /// Every fast subscriber received every published message.
    pub fast_complete: bool,
    pub slow_delivered: u64,
    pub slow_gaps: u64,
    pub slow_closed_code: Option<u16>,
    pub slow_closed_text: Option<String>,
    /// What the broker did to the slow subscriber: "delete" (506 close), "cycle"
    /// (messages skipped), or "none".
    pub policy_fired: Policy,
    /// The policy expected for this cell (durable cells expect none unless
    /// `--policy-durable`).
    pub policy_expected: Policy,
    pub as_configured: bool,
    pub p99_ns: u64,
    pub error: Option<String>,
}
