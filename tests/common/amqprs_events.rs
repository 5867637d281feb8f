//! The amqprs callbacks that forward what the server sends on its own initiative
//! (close, cancel, flow, confirms, returns, blocked) as [`Event`]s on a channel.

use std::future::Future;
use std::pin::Pin;

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::Channel;
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return};
use tokio::sync::mpsc;

use super::amqprs_client::Event;

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
type CbResult = Result<(), amqprs::error::Error>;

pub(super) struct ConnEvents {
    pub(super) tx: mpsc::UnboundedSender<Event>,
}

impl ConnectionCallback for ConnEvents {
    fn close<'a, 'b, 'c>(&'a mut self, _c: &'b Connection, close: Close) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::ConnectionClose {
            code: close.reply_code(),
            text: close.reply_text().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn blocked<'a, 'b, 'c>(&'a mut self, _c: &'b Connection, reason: String) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Blocked { reason });
        Box::pin(async {})
    }

    fn unblocked<'a, 'b, 'c>(&'a mut self, _c: &'b Connection) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Unblocked);
        Box::pin(async {})
    }

    fn secret_updated<'a, 'b, 'c>(&'a mut self, _c: &'b Connection) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        Box::pin(async {})
    }
}

pub(super) struct ChanEvents {
    pub(super) tx: mpsc::UnboundedSender<Event>,
}

impl ChannelCallback for ChanEvents {
    fn close<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, close: CloseChannel) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::ChannelClose {
            code: close.reply_code(),
            text: close.reply_text().clone(),
            class_id: close.class_id(),
            method_id: close.method_id(),
        });
        Box::pin(async { Ok(()) })
    }

    fn cancel<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, cancel: Cancel) -> BoxFut<'c, CbResult>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Cancel {
            consumer_tag: cancel.consumer_tag().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn flow<'a, 'b, 'c>(
        &'a mut self,
        _c: &'b Channel,
        active: bool,
    ) -> BoxFut<'c, Result<bool, amqprs::error::Error>>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Flow { active });
        Box::pin(async move { Ok(active) })
    }

    fn publish_ack<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, ack: Ack) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Ack {
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
        Box::pin(async {})
    }

    fn publish_nack<'a, 'b, 'c>(&'a mut self, _c: &'b Channel, nack: Nack) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Nack {
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
        Box::pin(async {})
    }

    fn publish_return<'a, 'b, 'c>(
        &'a mut self,
        _c: &'b Channel,
        ret: Return,
        props: BasicProperties,
        body: Vec<u8>,
    ) -> BoxFut<'c, ()>
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let _ = self.tx.send(Event::Return {
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            exchange: ret.exchange().clone(),
            routing_key: ret.routing_key().clone(),
            props: Box::new(props),
            body,
        });
        Box::pin(async {})
    }
}
