//! Owns: the exchange methods of an open channel — `exchange.declare` (passive or not),
//! `exchange.delete`, `exchange.bind` and `exchange.unbind` — checked here (names,
//! type, permissions) and handed to the control plane as a [`PendingOp`].
//!
//! Does not: change the directory (the control plane does) or wait for it.

use crate::auth::permissions::Perm::Configure;
use crate::model::exchange::{ExchangeDef, ExchangeKind};
use crate::model::ids::ConnId;
use crate::protocol::method::{ExchangeBind, ExchangeDeclare, ExchangeDelete, ExchangeUnbind};
use crate::protocol::{FieldTable, Method, ShortStr};
use crate::session::error::{ChannelError, ObjectKind};

use super::channel::{check_name_characters, wait_for};
use super::pending::OkReply;
use super::{AfterFrame, MethodError, PendingOp};
use crate::shard::conns::ConnSide;
use crate::shard::inbox::ControlRequest;

impl ConnSide<'_> {
    /// `exchange.declare`.
    pub(super) fn exchange_declare(
        &mut self,
        conn: ConnId,
        number: u16,
        decl: ExchangeDeclare,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        // A passive declare only checks that the exchange exists: type (even an
        // empty one), flags and arguments are ignored, as RabbitMQ does.
        if decl.passive {
            // Not even a passive declare may name the default exchange
            // (RabbitMQ's check_not_default_exchange): 403.
            if decl.exchange.is_empty() {
                return Err(MethodError::Channel(ChannelError::DefaultExchange));
            }
            self.authorize_any(conn, number, ObjectKind::Exchange, &decl.exchange)?;
            self.passive_exchange(conn, &decl.exchange)?;
            if !decl.nowait {
                self.reply(conn, number, Method::ExchangeDeclareOk(Default::default()));
            }
            return Ok(AfterFrame::Continue);
        }
        check_name_characters(ObjectKind::Exchange, &decl.exchange)?;
        // An unknown type is 406 on the channel (RabbitMQ's check_type).
        let Some(kind) = ExchangeKind::parse(decl.kind.as_bytes()) else {
            return Err(MethodError::Channel(ChannelError::UnknownExchangeType(
                decl.kind.to_string(),
            )));
        };
        self.authorize_declare(
            conn,
            number,
            ObjectKind::Exchange,
            &decl.exchange,
            &decl.arguments,
        )?;
        let def = ExchangeDef {
            name: decl.exchange,
            kind,
            durable: decl.durable,
            auto_delete: decl.auto_delete,
            internal: decl.internal,
            arguments: decl.arguments,
        };
        wait_for(
            conn,
            number,
            PendingOp::Control {
                req: ControlRequest::DeclareExchange { vhost, def },
                then: OkReply::ExchangeDeclareOk {
                    nowait: decl.nowait,
                },
            },
        )
    }

    /// `exchange.delete`.
    pub(super) fn exchange_delete(
        &mut self,
        conn: ConnId,
        number: u16,
        del: ExchangeDelete,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        self.authorize(conn, number, Configure, ObjectKind::Exchange, &del.exchange)?;
        wait_for(
            conn,
            number,
            PendingOp::Control {
                req: ControlRequest::DeleteExchange {
                    vhost,
                    name: del.exchange,
                    if_unused: del.if_unused,
                },
                then: OkReply::ExchangeDeleteOk { nowait: del.nowait },
            },
        )
    }

    /// `exchange.bind`.
    pub(super) fn exchange_bind(
        &mut self,
        conn: ConnId,
        number: u16,
        bind: ExchangeBind,
    ) -> Result<AfterFrame, MethodError> {
        let binding = ExchangeBinding {
            source: bind.source,
            destination: bind.destination,
            routing_key: bind.routing_key,
            arguments: bind.arguments,
        };
        self.bind_exchanges(conn, number, binding, bind.nowait, false)
    }

    /// `exchange.unbind`.
    pub(super) fn exchange_unbind(
        &mut self,
        conn: ConnId,
        number: u16,
        unbind: ExchangeUnbind,
    ) -> Result<AfterFrame, MethodError> {
        let binding = ExchangeBinding {
            source: unbind.source,
            destination: unbind.destination,
            routing_key: unbind.routing_key,
            arguments: unbind.arguments,
        };
        self.bind_exchanges(conn, number, binding, unbind.nowait, true)
    }

    /// Binds (or unbinds) one exchange to another through the coordinator.
    fn bind_exchanges(
        &mut self,
        conn: ConnId,
        number: u16,
        b: ExchangeBinding,
        nowait: bool,
        unbind: bool,
    ) -> Result<AfterFrame, MethodError> {
        let vhost = self.vhost_index(conn);
        self.authorize_bind(
            conn,
            number,
            &b.source,
            ObjectKind::Exchange,
            &b.destination,
        )?;
        wait_for(
            conn,
            number,
            PendingOp::Control {
                req: ControlRequest::BindExchange {
                    vhost,
                    source: b.source,
                    destination: b.destination,
                    routing_key: b.routing_key,
                    arguments: b.arguments,
                    unbind,
                },
                then: OkReply::ExchangeBindOk { nowait, unbind },
            },
        )
    }

    fn passive_exchange(&self, conn: ConnId, name: &ShortStr) -> Result<(), ChannelError> {
        let vhost = self.conn(conn).map(|c| c.vhost).unwrap_or_default();
        let dir = self
            .common
            .directory
            .vhost(vhost)
            .ok_or_else(|| ChannelError::Internal("vhost gone".into()))?;
        if dir.exchange(name).is_some() {
            return Ok(());
        }
        Err(ChannelError::NotFound {
            kind: ObjectKind::Exchange,
            name: name.to_string(),
            vhost: dir.name.clone(),
        })
    }
}

/// The fields `exchange.bind` and `exchange.unbind` share.
struct ExchangeBinding {
    source: ShortStr,
    destination: ShortStr,
    routing_key: ShortStr,
    arguments: FieldTable,
}
