//! Owns: one connection's writer task — it waits for its signal, takes the queued
//! buffers (at most `IOV_MAX` per call), writes them with io_uring `writev` (which waits
//! for room in the socket), accounts for what was written (no-ack deliveries on the wire
//! are reported to their queues), and tops up consumer credit once the buffer has
//! drained below the low-water mark. On a plain connection it is started (by the
//! reader's closure the connection holds) and woken only when the shard's write pass
//! (`write_pass`) found the socket full, or to close, and gives the socket back once the
//! buffer is empty; a TLS connection's bytes always go through it (started with it). Once the
//! connection is `Closed` (close-ok to the broker's close, a close timeout, shutdown, or
//! the client gone after its own close) it flushes and shuts the socket; while the
//! connection lingers after close-ok to the client's close, it flushes only and leaves the
//! socket for the client to close. A write that never completes (a peer that stopped
//! reading) is ended by the reader shutting the socket `CLOSE_GRACE` after the close.
//!
//! Does not: grow the outbound buffer (the shard fills it, bounded by credit), or read.

use std::rc::Rc;

use bytes::{Buf, Bytes};
use tokio_uring::net::TcpStream;

use super::Transport;
use crate::model::ids::ConnId;
use crate::session::signal::{ConnSignals, Signal};
use crate::shard::Shard;

/// Most iovecs one `writev` takes (Linux `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Runs until the connection is gone or its socket fails, then raises `writer_done`.
pub async fn run(
    shard: Rc<Shard>,
    stream: Rc<TcpStream>,
    transport: Transport,
    conn: ConnId,
    signals: Rc<ConnSignals>,
) {
    write_loop(&shard, &stream, &transport, conn, &signals.writer).await;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    // Whatever ended the writer (close handshake done, or a failed write: the peer is
    // gone), the connection is finished; a reader that is not reading (held, or paused
    // for a full buffer) must not wait for it.
    shard.writer_finished(conn);
    signals.writer_done.notify();
    signals.progress.notify();
}

async fn write_loop(
    shard: &Rc<Shard>,
    stream: &TcpStream,
    transport: &Transport,
    conn: ConnId,
    signal: &Signal,
) {
    loop {
        signal.wait().await;
        // The writing is boxed while it runs, so that the task every connection keeps is
        // only as large as its wait (issue 23).
        if !Box::pin(drain(shard, stream, transport, conn)).await {
            return;
        }
    }
}

/// Writes what is queued until nothing is; false once the writer must end (the
/// connection closed or gone, or a write failed).
async fn drain(shard: &Rc<Shard>, stream: &TcpStream, transport: &Transport, conn: ConnId) -> bool {
    loop {
        let Some((bufs, closed)) = shard.take_output(conn, IOV_MAX) else {
            return false;
        };
        if bufs.is_empty() {
            if let Transport::Tls(session) = transport {
                // Handshake or alert records, and a close_notify when closing.
                if let Err(e) = session.flush(stream, closed).await {
                    tracing::debug!("TLS write failed: {e}");
                    return false;
                }
            }
            return !closed;
        }
        let sent = match transport {
            Transport::Plain => write_all(stream, bufs).await,
            Transport::Tls(session) => session.write(stream, bufs).await,
        };
        let written = match sent {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("write failed: {e}");
                return false;
            }
        };
        // Counted (bytes written included) by the shard, as the write pass's writes are.
        shard.wrote(conn, written);
    }
}

/// Writes every buffer, resubmitting after partial writes. Returns the bytes written.
async fn write_all(stream: &TcpStream, mut bufs: Vec<Bytes>) -> std::io::Result<usize> {
    let mut total = 0;
    while !bufs.is_empty() {
        let (res, returned) = stream.writev(bufs).await;
        bufs = returned;
        let n = res?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "socket accepted no bytes",
            ));
        }
        total += n;
        let mut left = n;
        let mut done = 0;
        while done < bufs.len() && left >= bufs[done].len() {
            left -= bufs[done].len();
            done += 1;
        }
        bufs.drain(..done);
        if left > 0 {
            if let Some(first) = bufs.first_mut() {
                first.advance(left);
            }
        }
    }
    Ok(total)
}
