//! Owns: the sockets. Per shard, an accept loop (`listener`) and the write pass
//! (`write_pass`) that writes plain connections' bounded outbound buffers
//! (`session::outbound`) straight to their sockets, and the set of parked readers
//! (`park`); per connection, one reader task (`reader`; an idle plain connection's
//! parks: the task ends and the shard's epoll set watches the socket until it has bytes)
//! and one writer task (`writer`) that takes over when a socket is full (or the
//! connection is TLS or closing) and waits for room.
//!
//! Does not: interpret AMQP methods (the shard's handler does) or put an in-flight
//! io_uring read inside a `select!` (a dropped read is not cancelled; its bytes would be
//! lost). Buffers go into the kernel by value and come back with the result.

pub mod listener;
pub mod park;
pub mod read_buf;
pub mod reader;
pub mod send_ring;
pub mod tls;
pub mod write_pass;
pub mod writer;

use std::rc::Rc;

/// How a connection's bytes reach the socket: as they are (zero-copy `writev` of the
/// outbound buffers), or through a TLS session (`net::tls`).
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(Rc<tls::Session>),
}
