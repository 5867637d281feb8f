//! Owns: the connection task's inbound side — splitting the read buffer into frames and
//! handling each: connection methods (close, blocked/unblocked), channel methods (replies
//! to pending requests, deliveries, returns, confirms, flow, broker-initiated closes and
//! cancels) and content assembly, handing batches of deliveries to consumers.
//!
//! Does not: write to the socket or take commands (the task loop in `io` does).

use super::*;

impl ConnTask {
    /// Splits and handles every complete frame in the read buffer, unless a full
    /// consumer queue pauses it.
    pub(super) fn process_frames(&mut self) -> Result<Flow, ClientError> {
        let mut flow = Flow::Continue;
        while !self.paused() {
            let Some(frame) = split_frame(&mut self.rbuf, self.tuning.frame_max)? else {
                break;
            };
            if let Flow::Stop = self.frame(frame)? {
                flow = Flow::Stop;
                break;
            }
        }
        self.flush_batches();
        Ok(flow)
    }

    /// Hands every consumer its batch of this read pass.
    fn flush_batches(&mut self) {
        let overflow = &mut self.overflow;
        for ch in self.channels.iter_mut().flatten() {
            for slot in &mut ch.consumers {
                slot.flush(overflow);
            }
        }
    }

    fn frame(&mut self, frame: Frame) -> Result<Flow, ClientError> {
        let channel = frame.channel;
        match frame.kind {
            FrameKind::Heartbeat => Ok(Flow::Continue),
            FrameKind::Method => {
                let method = Method::decode(frame.payload)?;
                if channel == 0 {
                    self.connection_method(method)
                } else {
                    self.channel_method(channel, method)?;
                    Ok(Flow::Continue)
                }
            }
            FrameKind::Header => {
                let header = ContentHeader::decode(frame.payload)?;
                let Some(ch) = self.chan(channel) else {
                    return Ok(Flow::Continue);
                };
                let Some(a) = ch.assembly.as_mut().filter(|a| a.properties.is_none()) else {
                    return Err(ClientError::UnexpectedFrame {
                        channel,
                        got: "content header",
                    });
                };
                a.body_size = header.body_size;
                a.properties = Some(header.raw_properties);
                if header.body_size == 0 {
                    self.complete(channel);
                }
                Ok(Flow::Continue)
            }
            FrameKind::Body => {
                let Some(ch) = self.chan(channel) else {
                    return Ok(Flow::Continue);
                };
                let Some(a) = ch.assembly.as_mut().filter(|a| a.properties.is_some()) else {
                    return Err(ClientError::UnexpectedFrame {
                        channel,
                        got: "content body",
                    });
                };
                let have = match (&a.body, a.parts.is_empty()) {
                    (None, true) if frame.payload.len() as u64 >= a.body_size => {
                        a.body = Some(frame.payload);
                        a.body_size
                    }
                    _ => {
                        if let Some(first) = a.body.take() {
                            a.parts.extend_from_slice(&first);
                        }
                        a.parts.extend_from_slice(&frame.payload);
                        a.parts.len() as u64
                    }
                };
                if have >= a.body_size {
                    if !a.parts.is_empty() {
                        a.body = Some(a.parts.split().freeze());
                    }
                    self.complete(channel);
                }
                Ok(Flow::Continue)
            }
        }
    }

    /// Hands a fully assembled message to whoever waits for it.
    fn complete(&mut self, channel: u16) {
        let Some(ch) = self
            .channels
            .get_mut(usize::from(channel))
            .and_then(|c| c.as_mut())
        else {
            return;
        };
        let Some(a) = ch.assembly.take() else { return };
        let properties = a.properties.unwrap_or_default();
        let body = a.body.unwrap_or_default();
        match a.target {
            Target::Deliver(d) => {
                let overflow = &mut self.overflow;
                let Some(slot) = ch.consumers.iter_mut().find(|c| c.tag == d.consumer_tag) else {
                    return;
                };
                slot.batch.push(Delivery {
                    consumer_tag: slot.tag.clone(),
                    delivery_tag: d.delivery_tag,
                    redelivered: d.redelivered,
                    exchange: d.exchange,
                    routing_key: d.routing_key,
                    properties,
                    body,
                });
                if slot.batch.len() >= slot.batch_max {
                    slot.flush(overflow);
                }
            }
            Target::Return(r) => {
                let _ = ch.returns.send(Returned {
                    reply_code: r.reply_code,
                    reply_text: r.reply_text,
                    exchange: r.exchange,
                    routing_key: r.routing_key,
                    properties,
                    body,
                });
            }
            Target::Get(g, tx) => {
                let _ = tx.send(Ok(Some(GetMessage {
                    delivery_tag: g.delivery_tag,
                    redelivered: g.redelivered,
                    exchange: g.exchange,
                    routing_key: g.routing_key,
                    message_count: g.message_count,
                    properties,
                    body,
                })));
            }
        }
    }

    fn connection_method(&mut self, method: Method) -> Result<Flow, ClientError> {
        match method {
            Method::ConnectionClose(c) => {
                encode_method(
                    &mut self.wbuf,
                    0,
                    &Method::ConnectionCloseOk(ConnectionCloseOk),
                );
                let e = ClientError::ConnectionClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                    class_id: c.class_id,
                    method_id: c.method_id,
                };
                self.shared.fail(e);
                Ok(Flow::Stop)
            }
            Method::ConnectionCloseOk(_) if self.closing.is_some() => Ok(Flow::Stop),
            Method::ConnectionBlocked(b) => {
                tracing::warn!("broker blocked this connection: {}", b.reason);
                self.shared.set_blocked(true);
                Ok(Flow::Continue)
            }
            Method::ConnectionUnblocked(_) => {
                self.shared.set_blocked(false);
                Ok(Flow::Continue)
            }
            other => Err(ClientError::UnexpectedFrame {
                channel: 0,
                got: other.name(),
            }),
        }
    }

    fn channel_method(&mut self, channel: u16, method: Method) -> Result<(), ClientError> {
        if matches!(
            method,
            Method::ChannelClose(_) | Method::BasicCancel(_) | Method::BasicCancelOk(_)
        ) {
            // Deliveries that arrived before the end of a consumer reach it first.
            self.flush_batches();
        }
        let Some(ch) = self.chan(channel) else {
            // Frames for a channel already closed on this side are discarded.
            return Ok(());
        };
        if ch.assembly.is_some() {
            return Err(ClientError::UnexpectedFrame {
                channel,
                got: method.name(),
            });
        }
        let start = |target| Assembly {
            target,
            body_size: 0,
            properties: None,
            body: None,
            parts: BytesMut::new(),
        };
        match method {
            Method::BasicDeliver(d) => ch.assembly = Some(start(Target::Deliver(d))),
            Method::BasicReturn(r) => ch.assembly = Some(start(Target::Return(r))),
            Method::BasicAck(a) => {
                if let Some(c) = ch.confirms.as_mut() {
                    c.settle(a.delivery_tag, a.multiple, true);
                }
            }
            Method::BasicNack(n) => {
                if let Some(c) = ch.confirms.as_mut() {
                    c.settle(n.delivery_tag, n.multiple, false);
                }
            }
            Method::ChannelFlow(f) => {
                ch.shared.set_flow(f.active);
                if !f.active {
                    // Routine under producer flow control; a publish that waits says
                    // so at WARN every notify period (shared.rs).
                    tracing::info!(
                        channel,
                        "broker stopped publishing on this channel (channel.flow)"
                    );
                }
                encode_method(
                    &mut self.wbuf,
                    channel,
                    &Method::ChannelFlowOk(ChannelFlowOk { active: f.active }),
                );
            }
            Method::ChannelClose(c) => {
                encode_method(
                    &mut self.wbuf,
                    channel,
                    &Method::ChannelCloseOk(ChannelCloseOk),
                );
                let e = ClientError::ChannelClosed {
                    code: c.reply_code,
                    text: c.reply_text.to_string(),
                    class_id: c.class_id,
                    method_id: c.method_id,
                };
                if let Some(st) = self.channels[usize::from(channel)].take() {
                    st.fail(&e);
                }
            }
            Method::ChannelCloseOk(_) => {
                let e = ClientError::ChannelClosed {
                    code: 200,
                    text: "channel closed by client".into(),
                    class_id: 0,
                    method_id: 0,
                };
                if let Some(mut st) = self.channels[usize::from(channel)].take() {
                    st.shared.fail(e.clone());
                    if let Some(Pending::Method(tx)) = st.pending.pop_front() {
                        let _ = tx.send(Ok(Method::ChannelCloseOk(ChannelCloseOk)));
                    }
                    st.fail(&e);
                }
            }
            Method::BasicCancel(c) => {
                // Server-initiated cancel (consumer_cancel_notify).
                ch.consumers.retain(|slot| slot.tag != c.consumer_tag);
                if !c.nowait {
                    encode_method(
                        &mut self.wbuf,
                        channel,
                        &Method::BasicCancelOk(BasicCancelOk {
                            consumer_tag: c.consumer_tag,
                        }),
                    );
                }
            }
            Method::BasicGetOk(g) => match ch.pending.pop_front() {
                Some(Pending::Get(tx)) => ch.assembly = Some(start(Target::Get(g, tx))),
                _ => {
                    return Err(ClientError::UnexpectedFrame {
                        channel,
                        got: "basic.get-ok",
                    })
                }
            },
            Method::BasicGetEmpty(_) => match ch.pending.pop_front() {
                Some(Pending::Get(tx)) => {
                    let _ = tx.send(Ok(None));
                }
                _ => {
                    return Err(ClientError::UnexpectedFrame {
                        channel,
                        got: "basic.get-empty",
                    })
                }
            },
            reply @ (Method::ChannelOpenOk(_)
            | Method::ExchangeDeclareOk(_)
            | Method::ExchangeDeleteOk(_)
            | Method::ExchangeBindOk(_)
            | Method::ExchangeUnbindOk(_)
            | Method::QueueDeclareOk(_)
            | Method::QueueBindOk(_)
            | Method::QueueUnbindOk(_)
            | Method::QueuePurgeOk(_)
            | Method::QueueDeleteOk(_)
            | Method::BasicQosOk(_)
            | Method::BasicConsumeOk(_)
            | Method::BasicCancelOk(_)
            | Method::BasicRecoverOk(_)
            | Method::TxSelectOk(_)
            | Method::TxCommitOk(_)
            | Method::TxRollbackOk(_)
            | Method::ConfirmSelectOk(_)
            | Method::AccessRequestOk(_)) => {
                if let Method::BasicCancelOk(c) = &reply {
                    ch.consumers.retain(|slot| slot.tag != c.consumer_tag);
                }
                match ch.pending.pop_front() {
                    Some(Pending::Method(tx)) => {
                        let _ = tx.send(Ok(reply));
                    }
                    Some(Pending::Consume {
                        deliveries,
                        batch_max,
                        reply: tx,
                    }) => {
                        if let Method::BasicConsumeOk(ok) = &reply {
                            ch.consumers.push(Slot {
                                // Its own allocation: a slice would pin the read
                                // buffer the consume-ok arrived in for the
                                // consumer's lifetime.
                                tag: ShortStr::from(Bytes::copy_from_slice(
                                    ok.consumer_tag.as_bytes(),
                                )),
                                tx: deliveries,
                                batch: Vec::new(),
                                batch_max,
                            });
                        }
                        let _ = tx.send(Ok(reply));
                    }
                    Some(Pending::Ignore) => {}
                    Some(Pending::Get(_)) | None => {
                        return Err(ClientError::UnexpectedFrame {
                            channel,
                            got: reply.name(),
                        })
                    }
                }
            }
            other => {
                return Err(ClientError::UnexpectedFrame {
                    channel,
                    got: other.name(),
                })
            }
        }
        Ok(())
    }
}
