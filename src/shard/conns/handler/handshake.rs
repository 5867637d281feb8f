//! Owns: the AMQP handshake of a connection, up to `connection.open-ok` — the protocol
//! header and `connection.start`, `start-ok` (mechanism and credentials; the answer's
//! timing is `login`'s), `tune-ok` (frame and channel limits, heartbeat), and `open` (the
//! vhost, its permission and connection limits).
//!
//! Does not: throttle or log failed logins (`login`), or handle frames once the
//! connection is open (`mod.rs`, `channel`).

use crate::model::ids::ConnId;
use crate::ops::event::OpsEvent;
use crate::protocol::frame::{Frame, FrameKind, PROTOCOL_HEADER};
use crate::protocol::method::{ConnectionOpenOk, ConnectionStart, ConnectionStartOk};
use crate::protocol::{LongStr, Method, ShortStr};
use crate::session::connection::{self, Phase};
use crate::session::error::{ConnectionError, HardError, MethodId};

use super::{heartbeat_period, AfterFrame, HeaderCheck};

/// `connection.start-ok`, which a refused login answers.
const START_OK: MethodId = method_id!(ConnectionStartOk);
use crate::shard::conns::ConnSide;
use crate::shard::{Shard, TimerKey};

impl ConnSide<'_> {
    /// Checks the 8-byte protocol header and starts the handshake (`connection.start`
    /// names this node: `node_name`).
    pub fn on_protocol_header(
        &mut self,
        conn: ConnId,
        header: &[u8],
        node_name: &str,
    ) -> HeaderCheck {
        let Some(c) = self.conn_mut(conn) else {
            return HeaderCheck::Refused;
        };
        if header != PROTOCOL_HEADER {
            c.out.raw(&PROTOCOL_HEADER);
            c.finish();
            self.mark_writer(conn);
            return HeaderCheck::Refused;
        }
        c.out.method(
            0,
            &Method::ConnectionStart(ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties: connection::server_properties(node_name),
                mechanisms: LongStr::from(connection::offered_mechanisms(c.tls.as_deref())),
                locales: LongStr::from(connection::LOCALES),
            }),
        );
        c.header_accepted();
        self.mark_writer(conn);
        HeaderCheck::Accepted
    }

    pub(super) fn on_handshake_frame(
        &mut self,
        shard: &Shard,
        conn: ConnId,
        frame: Frame,
    ) -> Result<AfterFrame, HardError> {
        let phase = self.conn(conn).map(|c| c.phase());
        if frame.kind == FrameKind::Heartbeat {
            if !frame.payload.is_empty() {
                return Err(ConnectionError::heartbeat_payload(&frame.payload).on(MethodId::NONE));
            }
            return Ok(AfterFrame::Continue);
        }
        if frame.kind != FrameKind::Method || frame.channel != 0 {
            return Err(ConnectionError::UnexpectedFrame(format!(
                    "expected a connection method on channel 0 during the handshake, got a {:?} frame on channel {}",
                    frame.kind, frame.channel
                )).on(MethodId::NONE));
        }
        let method = Method::decode(frame.payload)
            .map_err(|e| ConnectionError::undecodable(&e).on(MethodId::NONE))?;
        let cause = MethodId::of(&method);
        let fail = |e: ConnectionError| Err(e.on(cause));
        let config = &shard.live();
        match (phase, method) {
            (Some(Phase::AwaitStartOk), Method::ConnectionStartOk(ok)) => {
                let offered =
                    connection::offered_mechanisms(self.conn(conn).and_then(|c| c.tls.as_deref()));
                let mechanism = ok.mechanism.as_str_lossy().into_owned();
                if !connection::mechanism_offered(ok.mechanism.as_bytes(), offered) {
                    return Ok(self.refuse_mechanism(shard, conn, &mechanism, offered));
                }
                let creds = connection::parse_sasl(
                    ok.mechanism.as_bytes(),
                    &ok.response.clone().into_bytes(),
                );
                let user = if ok.mechanism.as_bytes() == b"EXTERNAL" {
                    // The verified client certificate's CN names the user (TLS only).
                    let peer = self.conn(conn).and_then(|c| c.tls.as_deref());
                    let cn = connection::external_identity(peer);
                    let user = cn
                        .and_then(|cn| config.users.iter().find(|u| u.name == cn))
                        .cloned();
                    user.ok_or_else(|| cn.unwrap_or_default().to_owned())
                } else {
                    let name = creds.as_ref().map(|c| c.user.clone()).unwrap_or_default();
                    let from_loopback = self.conn(conn).is_some_and(|c| c.peer.ip().is_loopback());
                    if let (Some(link), Some(creds)) = (&shard.link_credential, &creds) {
                        if creds.user == crate::auth::local_link::LINK_USER {
                            // Only this broker's own links use this name, from loopback.
                            if from_loopback && link.accepts(&creds.user, creds.password.as_bytes())
                            {
                                let properties =
                                    self.intern_client_properties(&ok.client_properties);
                                if let Some(c) = self.conn_mut(conn) {
                                    c.user = creds.user.clone();
                                    c.federation_link = true;
                                    c.capabilities =
                                        connection::client_capabilities(&ok.client_properties);
                                    c.set_client_properties(properties);
                                    c.auth_mechanism = mechanism.clone();
                                    c.start_ok_accepted();
                                }
                                self.send_login_outcome(shard, conn, Ok(()));
                                return Ok(AfterFrame::Continue);
                            }
                            let refused = ConnectionError::LoginRefused {
                                mechanism: mechanism.clone(),
                            }
                            .on(START_OK);
                            return Ok(self.refuse_login(shard, conn, &name, &mechanism, refused));
                        }
                    }
                    creds
                        .and_then(|creds| {
                            config
                                .authenticate(&creds.user, creds.password.as_bytes())
                                .cloned()
                        })
                        .ok_or(name)
                };
                let user = match user {
                    Ok(user) => user,
                    Err(name) => {
                        let refused = ConnectionError::LoginRefused {
                            mechanism: mechanism.clone(),
                        }
                        .on(START_OK);
                        return Ok(self.refuse_login(shard, conn, &name, &mechanism, refused));
                    }
                };
                let properties = self.intern_client_properties(&ok.client_properties);
                let Some(c) = self.conn_mut(conn) else {
                    return Ok(AfterFrame::Stop);
                };
                if config.loopback_users.contains(&user.name) && !c.peer.ip().is_loopback() {
                    let name = user.name.clone();
                    let refused = ConnectionError::LoopbackOnly { user: user.name }.on(START_OK);
                    return Ok(self.refuse_login(shard, conn, &name, &mechanism, refused));
                }
                // A correct login is answered at once, whatever failed before.
                c.user = user.name;
                c.capabilities = connection::client_capabilities(&ok.client_properties);
                c.set_client_properties(properties);
                c.auth_mechanism = mechanism;
                c.start_ok_accepted();
                self.send_login_outcome(shard, conn, Ok(()));
                Ok(AfterFrame::Continue)
            }
            (Some(Phase::AwaitTuneOk), Method::ConnectionTuneOk(tune)) => {
                let server_max = config.limits.frame_max;
                if tune.frame_max != 0 && tune.frame_max < 4096 {
                    return fail(ConnectionError::NotAllowed(format!(
                        "frame_max={} < 4096 min size",
                        tune.frame_max
                    )));
                }
                if tune.frame_max > server_max {
                    return fail(ConnectionError::NotAllowed(format!(
                        "frame_max={} > {} max size",
                        tune.frame_max, server_max
                    )));
                }
                if tune.channel_max > config.limits.channel_max {
                    return fail(ConnectionError::NotAllowed(format!(
                        "channel_max={} > {} max channels",
                        tune.channel_max, config.limits.channel_max
                    )));
                }
                let now = shard.clock.now();
                let Some(c) = self.conn_mut(conn) else {
                    return Ok(AfterFrame::Stop);
                };
                c.frame_max = if tune.frame_max == 0 {
                    server_max
                } else {
                    tune.frame_max
                };
                c.channel_max = if tune.channel_max == 0 {
                    config.limits.channel_max
                } else {
                    tune.channel_max
                };
                c.heartbeat = tune.heartbeat;
                c.out.set_frame_max(c.frame_max);
                c.tune_ok_accepted();
                if c.heartbeat > 0 {
                    let at = now + heartbeat_period(c.heartbeat);
                    self.common.wheel.arm(at, TimerKey::Heartbeat(conn));
                }
                Ok(AfterFrame::Continue)
            }
            (Some(Phase::AwaitOpen), Method::ConnectionOpen(open)) => {
                let name = connection::vhost_name(&open.virtual_host);
                let Some(vhost) = self.common.directory.vhost_index(&name) else {
                    return fail(ConnectionError::VhostNotFound(name));
                };
                if let Err(e) = self.open_access(shard, conn, &name) {
                    return fail(e);
                }
                let Some(c) = self.conn_mut(conn) else {
                    return Ok(AfterFrame::Stop);
                };
                let now = shard.clock.now();
                if let Err(refusal) = shard.limits.admit_open(conn, c.peer, &name, &c.user, now) {
                    return fail(ConnectionError::Limit(refusal));
                }
                c.vhost = vhost;
                c.vhost_name = name;
                c.opened();
                crate::shard::ShardCounters::bump(&shard.counters.connections_opened);
                c.out.method(
                    0,
                    &Method::ConnectionOpenOk(ConnectionOpenOk {
                        known_hosts: ShortStr::default(),
                    }),
                );
                OpsEvent::ConnectionOpen {
                    subject: c.log_subject(),
                    client: c.peer.to_string(),
                    name: c.client_name(),
                }
                .emit();
                self.mark_writer(conn);
                Ok(AfterFrame::Continue)
            }
            (_, Method::ConnectionClose(_)) => {
                self.answer_close(shard, conn);
                Ok(AfterFrame::Stop)
            }
            (_, other) => fail(ConnectionError::CommandInvalid(format!(
                "'{}' is not expected during the handshake",
                other.name()
            ))),
        }
    }
}
