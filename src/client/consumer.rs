//! Owns: [`Consumer`], the receiving end of one `basic.consume`: deliveries one at a
//! time or in batches, and the reason the stream ended.
//! Does not: acknowledge (that is [`super::Channel::basic_ack`], on the channel the
//! consumer was opened on) or buffer without bound (its queue is bounded; when full
//! the connection task stops reading the socket).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::error::ClientError;
use super::message::Delivery;
use super::shared::{ChanShared, ConnShared};
use crate::protocol::ShortStr;

/// Deliveries of one consumer.
pub struct Consumer {
    tag: ShortStr,
    rx: mpsc::Receiver<Vec<Delivery>>,
    /// The rest of the batch last received (taken by value: no copy on receipt).
    local: std::vec::IntoIter<Delivery>,
    chan: Arc<ChanShared>,
    conn: Arc<ConnShared>,
}

impl Consumer {
    pub(crate) fn new(
        tag: ShortStr,
        rx: mpsc::Receiver<Vec<Delivery>>,
        chan: Arc<ChanShared>,
        conn: Arc<ConnShared>,
    ) -> Consumer {
        Consumer {
            tag,
            rx,
            local: Vec::new().into_iter(),
            chan,
            conn,
        }
    }

    /// Refills the local batch, waiting for the next one.
    async fn refill(&mut self) -> Result<(), ClientError> {
        while self.local.len() == 0 {
            match self.rx.recv().await {
                Some(batch) => self.local = batch.into_iter(),
                None => return Err(self.ended()),
            }
        }
        Ok(())
    }

    /// The consumer tag.
    pub fn tag(&self) -> &ShortStr {
        &self.tag
    }

    fn ended(&self) -> ClientError {
        match self.chan.check(&self.conn) {
            Err(e) => e,
            Ok(()) => ClientError::ConsumerCancelled {
                consumer_tag: self.tag.to_string(),
            },
        }
    }

    /// The next delivery. When the stream ends the error says why:
    /// [`ClientError::ChannelClosed`] (e.g. 506 `Consuming too slow.`),
    /// [`ClientError::ConnectionClosed`], or [`ClientError::ConsumerCancelled`].
    pub async fn recv(&mut self) -> Result<Delivery, ClientError> {
        self.refill().await?;
        self.local.next().ok_or_else(|| self.ended())
    }

    /// Appends up to `limit` deliveries to `buf`, waiting for at least one.
    pub async fn recv_many(
        &mut self,
        buf: &mut Vec<Delivery>,
        limit: usize,
    ) -> Result<usize, ClientError> {
        self.refill().await?;
        let n = self.local.len().min(limit.max(1));
        buf.extend(self.local.by_ref().take(n));
        Ok(n)
    }

    /// A delivery if one is buffered, without waiting. `Ok(None)`: none yet.
    pub fn try_recv(&mut self) -> Result<Option<Delivery>, ClientError> {
        if let Some(d) = self.local.next() {
            return Ok(Some(d));
        }
        match self.rx.try_recv() {
            Ok(batch) => {
                self.local = batch.into_iter();
                Ok(self.local.next())
            }
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => Err(self.ended()),
        }
    }
}
