//! Owns: the permission checks of a connection's methods, as `rabbit_channel` and
//! `rabbit_reader` make them — the vhost at `connection.open` (530 NOT_ALLOWED), and
//! configure / write / read on exchanges and queues (403 ACCESS_REFUSED on the channel)
//! — and the rate-limited log line of a refusal (CHN-1010, CON-1015).
//!
//! Does not: match patterns or cache decisions (`auth::permissions::Access` does), or
//! choose which method needs which permission (each method's arm names it in one call).

use std::time::Duration;

use crate::auth::permissions::{exchange_resource, Access, Perm};
use crate::limits::report::Reporter;
use crate::model::ids::ConnId;
use crate::ops::event::OpsEvent;
use crate::protocol::properties::raw_user_id;
use crate::protocol::table::FieldValue;
use crate::protocol::{FieldTable, ShortStr};
use crate::session::error::{ChannelError, ConnectionError, ObjectKind};
use crate::timer::clock;

use crate::shard::conns::ConnSide;
use crate::shard::Shard;

/// At most one refusal line per this gap on a shard; the others are counted.
const LOG_GAP: Duration = Duration::from_secs(1);

thread_local! {
    /// This shard's (thread's) rate limit of refusal lines.
    static REFUSAL_LINES: Reporter = const { Reporter::new(LOG_GAP, 1) };
}

/// `Some(suppressed)` when a refusal line may be written now (the refusal paths have no
/// `&Shard`, hence the clock's own read).
fn may_log() -> Option<u64> {
    REFUSAL_LINES
        .with(|r| r.note(clock::os_now()))
        .map(|count| count - 1)
}

impl ConnSide<'_> {
    /// New users and permissions are in force (a SIGHUP reload or a change over the
    /// management API), as RabbitMQ applies them to open connections: one whose user no
    /// longer exists is closed with `320 CONNECTION_FORCED - user 'NAME' is deleted`
    /// (whose vhost was deleted, `… - vhost 'NAME' is deleted`);
    /// the others take their user's grant on their vhost as it is now (none: every
    /// operation is refused with 403), so a changed permission counts from the next
    /// operation. The broker's own federation links keep theirs.
    pub fn access_changed(&mut self, shard: &Shard) {
        let live = shard.live();
        let mut deleted = Vec::new();
        for id in self.conns.ids() {
            let Some(c) = self.conn_mut(id) else { continue };
            if c.phase() != crate::session::connection::Phase::Open {
                continue;
            }
            if live.vhost_slots.get(c.vhost).is_some_and(Option::is_none) {
                deleted.push((id, format!("vhost '{}' is deleted", c.vhost_name)));
                continue;
            }
            if c.federation_link {
                continue;
            }
            if !live.users.iter().any(|u| u.name == c.user) {
                deleted.push((id, format!("user '{}' is deleted", c.user)));
                continue;
            }
            c.access = match live.permissions.grant(&c.user, &c.vhost_name) {
                Some(grant) => Access::new(grant),
                None => Access::default(),
            };
        }
        for (id, why) in deleted {
            let err = ConnectionError::Forced(why);
            self.close_connection(shard, id, &err.on(crate::session::error::MethodId::NONE));
        }
    }

    /// `connection.open`: the user's grant on the vhost, or 530 as RabbitMQ refuses it.
    pub(super) fn open_access(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        vhost: &str,
    ) -> Result<(), ConnectionError> {
        let Some(c) = self.conn_mut(conn) else {
            return Ok(());
        };
        let grant = if c.federation_link {
            Some(crate::auth::permissions::Grant::full())
        } else {
            shard.live().permissions.grant(&c.user, vhost)
        };
        match grant {
            Some(grant) => {
                c.access = Access::new(grant);
                Ok(())
            }
            None => {
                let e = ConnectionError::VhostRefused {
                    vhost: vhost.to_owned(),
                    user: c.user.clone(),
                };
                if let Some(suppressed) = may_log() {
                    OpsEvent::VhostRefused {
                        subject: c.log_subject(),
                        reason: e.to_string(),
                        suppressed,
                    }
                    .emit();
                }
                Err(e)
            }
        }
    }

    /// `perm` on the exchange or queue `name`, or 403. The default exchange's
    /// configure and read rules are RabbitMQ's own checks (elsewhere); its write is
    /// checked as `amq.default`.
    pub(super) fn authorize(
        &self,
        conn: ConnId,
        number: u16,
        perm: Perm,
        kind: ObjectKind,
        name: &ShortStr,
    ) -> Result<(), ChannelError> {
        self.check(conn, number, perm, kind, name, |access, resource| {
            access.allows(perm, resource)
        })
    }

    /// A passive declare needs any of the three permissions; the refusal names
    /// configure, as RabbitMQ's does.
    pub(super) fn authorize_any(
        &self,
        conn: ConnId,
        number: u16,
        kind: ObjectKind,
        name: &ShortStr,
    ) -> Result<(), ChannelError> {
        self.check(
            conn,
            number,
            Perm::Configure,
            kind,
            name,
            Access::allows_any,
        )
    }

    /// `allowed` on the resource behind `kind` and `name`, or a 403 naming `perm`.
    fn check(
        &self,
        conn: ConnId,
        number: u16,
        perm: Perm,
        kind: ObjectKind,
        name: &ShortStr,
        allowed: impl FnOnce(&Access, &[u8]) -> bool,
    ) -> Result<(), ChannelError> {
        let name = name.as_bytes();
        let Some(c) = self.conn(conn) else {
            return Ok(());
        };
        let resource = match kind {
            ObjectKind::Exchange if name.is_empty() && perm != Perm::Write => return Ok(()),
            ObjectKind::Exchange => exchange_resource(name),
            ObjectKind::Queue => name,
        };
        if allowed(&c.access, resource) {
            return Ok(());
        }
        Err(self.refusal(conn, number, perm, kind, name))
    }

    /// Write on a publish's exchange: a cached decision per connection (no allocation
    /// and no regex while the exchange stays the same).
    pub(super) fn authorize_publish(
        &mut self,
        conn: ConnId,
        number: u16,
        exchange: &ShortStr,
    ) -> Result<(), ChannelError> {
        let allowed = self
            .conn_mut(conn)
            .is_none_or(|c| c.access.allows_publish(exchange));
        if allowed {
            return Ok(());
        }
        Err(self.refusal(
            conn,
            number,
            Perm::Write,
            ObjectKind::Exchange,
            exchange.as_bytes(),
        ))
    }

    /// A publish's `user-id` property, when set, must name the connection's user
    /// unless that user is tagged `impersonator` (RabbitMQ's `check_user_id`): 406.
    pub(super) fn check_user_id(
        &self,
        shard: &Shard,
        conn: ConnId,
        raw_properties: &[u8],
    ) -> Result<(), ChannelError> {
        let Some(claimed) = raw_user_id(raw_properties) else {
            return Ok(());
        };
        let Some(c) = self.conn(conn) else {
            return Ok(());
        };
        if claimed == c.user.as_bytes() {
            return Ok(());
        }
        let impersonator = shard
            .live()
            .users
            .iter()
            .find(|u| u.name == c.user)
            .is_some_and(|u| u.tags.iter().any(|t| t == "impersonator"));
        if impersonator {
            return Ok(());
        }
        Err(ChannelError::UserIdMismatch {
            claimed: String::from_utf8_lossy(claimed).into_owned(),
            user: c.user.clone(),
        })
    }

    /// RabbitMQ's 403 text, logged (rate-limited) as CHN-1010.
    fn refusal(
        &self,
        conn: ConnId,
        number: u16,
        perm: Perm,
        kind: ObjectKind,
        name: &[u8],
    ) -> ChannelError {
        let resource = match kind {
            ObjectKind::Exchange => exchange_resource(name),
            ObjectKind::Queue => name,
        };
        let (user, vhost, subject) = self
            .conn(conn)
            .map(|c| (c.user.clone(), c.vhost_name.clone(), c.log_subject()))
            .unwrap_or_default();
        let e = ChannelError::AccessRefused {
            permission: perm.name(),
            kind,
            name: String::from_utf8_lossy(resource).into_owned(),
            vhost,
            user,
        };
        if let Some(suppressed) = may_log() {
            OpsEvent::AccessRefused {
                subject,
                channel: number,
                reason: e.to_string(),
                suppressed,
            }
            .emit();
        }
        e
    }
}

impl ConnSide<'_> {
    /// A non-passive declare: configure on the object; and when it does not exist yet,
    /// for a dead-letter exchange (queue) or an alternate exchange (exchange) named in
    /// its arguments, read on the object and write on that exchange — rabbit_channel's
    /// checks, so a user cannot route messages into an exchange it may not write to.
    pub(super) fn authorize_declare(
        &self,
        conn: ConnId,
        number: u16,
        kind: ObjectKind,
        name: &ShortStr,
        arguments: &FieldTable,
    ) -> Result<(), ChannelError> {
        self.authorize(conn, number, Perm::Configure, kind, name)?;
        let key = match kind {
            ObjectKind::Queue => "x-dead-letter-exchange",
            ObjectKind::Exchange => "alternate-exchange",
        };
        let Some(target) = arguments.get(key).and_then(FieldValue::as_bytes) else {
            return Ok(());
        };
        let dir = self
            .conn(conn)
            .and_then(|c| self.common.directory.vhost(c.vhost));
        let exists = dir.is_some_and(|d| match kind {
            ObjectKind::Queue => d.queue(name).is_some(),
            ObjectKind::Exchange => d.exchange(name).is_some(),
        });
        if exists {
            return Ok(());
        }
        let target = ShortStr::from(bytes::Bytes::copy_from_slice(target));
        self.authorize(conn, number, Perm::Read, kind, name)?;
        self.authorize(conn, number, Perm::Write, ObjectKind::Exchange, &target)
    }

    /// `queue.bind` / `exchange.bind` (and unbind): write on the destination, read on
    /// the source exchange, in RabbitMQ's order.
    pub(super) fn authorize_bind(
        &self,
        conn: ConnId,
        number: u16,
        source: &ShortStr,
        kind: ObjectKind,
        destination: &ShortStr,
    ) -> Result<(), ChannelError> {
        self.authorize(conn, number, Perm::Write, kind, destination)?;
        self.authorize(conn, number, Perm::Read, ObjectKind::Exchange, source)
    }
}
