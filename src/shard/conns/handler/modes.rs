//! Owns: the channel's two modes and their methods — transactions (`tx.select`,
//! `tx.commit` replaying the buffered publishes and settlements, `tx.rollback`) and
//! publisher confirms (`confirm.select`) — and the rule that a channel has at most one.
//!
//! Does not: route or settle itself (`publish`, `settle`).

use crate::model::ids::ConnId;
use crate::protocol::method::{ConfirmSelect, ConfirmSelectOk, TxRollbackOk, TxSelectOk};
use crate::protocol::Method;
use crate::session::channel::TxOp;
use crate::session::confirm::ConfirmTracker;
use crate::session::error::ChannelError;

use super::settle::AckKind;
use super::{AfterFrame, MethodError};
use crate::shard::conns::ConnSide;
use crate::shard::Shard;

impl ConnSide<'_> {
    /// `tx.select`.
    pub(super) fn tx_select(
        &mut self,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        let ch = self.channel_mut(conn, number)?;
        if ch.confirms.is_some() {
            return Err(MethodError::Channel(ChannelError::TxInConfirm));
        }
        if ch.tx.is_none() {
            ch.tx = Some(Box::default());
        }
        self.reply(conn, number, Method::TxSelectOk(TxSelectOk {}));
        Ok(AfterFrame::Continue)
    }

    /// `tx.commit`.
    pub(super) fn tx_commit(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        let ch = self.channel_mut(conn, number)?;
        let Some(ops) = ch.tx.as_mut().map(std::mem::take) else {
            return Err(MethodError::Channel(ChannelError::TxNotSelected));
        };
        for op in *ops {
            match op {
                TxOp::Publish { publish, msg } => {
                    self.route_message(shard, conn, number, &publish, msg)?
                }
                TxOp::Ack { tag, multiple } => {
                    self.settle_now(shard, conn, number, tag, multiple, AckKind::Ack)?;
                }
                TxOp::Reject {
                    tag,
                    multiple,
                    requeue,
                } => {
                    let how = if requeue {
                        AckKind::Requeue
                    } else {
                        AckKind::Discard
                    };
                    self.settle_now(shard, conn, number, tag, multiple, how)?;
                }
            }
        }
        if let Some(ch) = self
            .conn_mut(conn)
            .and_then(|c| c.channels.get_mut(&number))
        {
            ch.committed();
        }
        self.flush_confirms(conn);
        Ok(AfterFrame::Continue)
    }

    /// `tx.rollback`.
    pub(super) fn tx_rollback(
        &mut self,
        conn: ConnId,
        number: u16,
    ) -> Result<AfterFrame, MethodError> {
        let ch = self.channel_mut(conn, number)?;
        let Some(tx) = ch.tx.as_mut() else {
            return Err(MethodError::Channel(ChannelError::TxNotSelected));
        };
        tx.clear();
        self.reply(conn, number, Method::TxRollbackOk(TxRollbackOk {}));
        Ok(AfterFrame::Continue)
    }

    /// `confirm.select`.
    pub(super) fn confirm_select(
        &mut self,
        conn: ConnId,
        number: u16,
        select: ConfirmSelect,
    ) -> Result<AfterFrame, MethodError> {
        let ch = self.channel_mut(conn, number)?;
        if ch.tx.is_some() {
            return Err(MethodError::Channel(ChannelError::ConfirmInTx));
        }
        if ch.confirms.is_none() {
            ch.confirms = Some(Box::new(ConfirmTracker::new()));
        }
        if !select.nowait {
            self.reply(conn, number, Method::ConfirmSelectOk(ConfirmSelectOk {}));
        }
        Ok(AfterFrame::Continue)
    }
}
