//! Owns: what the client hands the application — [`Delivery`] (from a consumer),
//! [`GetMessage`] (from `basic.get`) and [`Returned`] (a `basic.return` of a mandatory
//! publish) — and the property helpers [`NO_PROPERTIES`] and [`encode_properties`].
//! Does not: copy bodies or decode properties eagerly: both are `Bytes` slices of the
//! frames they arrived in, decoded on request.

use bytes::{Bytes, BytesMut};

use crate::protocol::{BasicProperties, DecodeError, ShortStr};

/// Raw properties of a message without properties (an all-clear flag word).
pub const NO_PROPERTIES: Bytes = Bytes::from_static(&[0, 0]);

/// Raw properties carrying only `delivery-mode = 2` (persistent).
pub const PERSISTENT_PROPERTIES: Bytes = Bytes::from_static(&[0x10, 0x00, 2]);

/// Encodes typed properties once into the raw form `basic_publish` takes, so a
/// publisher that sends the same properties repeatedly encodes them once.
pub fn encode_properties(props: &BasicProperties) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    props.encode(&mut out);
    out.freeze()
}

/// A message delivered to a consumer.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The consumer it was delivered to.
    pub consumer_tag: ShortStr,
    /// The tag to acknowledge it with (on its channel).
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The exchange it was published to.
    pub exchange: ShortStr,
    /// The routing key it was published with.
    pub routing_key: ShortStr,
    /// Property flags and list, raw.
    pub properties: Bytes,
    /// The body.
    pub body: Bytes,
}

impl Delivery {
    /// The typed properties.
    pub fn properties(&self) -> Result<BasicProperties, DecodeError> {
        BasicProperties::decode(&self.properties)
    }
}

/// A message fetched with `basic.get`.
#[derive(Clone, Debug)]
pub struct GetMessage {
    /// The tag to acknowledge it with.
    pub delivery_tag: u64,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// The exchange it was published to.
    pub exchange: ShortStr,
    /// The routing key it was published with.
    pub routing_key: ShortStr,
    /// Messages left in the queue.
    pub message_count: u32,
    /// Property flags and list, raw.
    pub properties: Bytes,
    /// The body.
    pub body: Bytes,
}

impl GetMessage {
    /// The typed properties.
    pub fn properties(&self) -> Result<BasicProperties, DecodeError> {
        BasicProperties::decode(&self.properties)
    }
}

/// A mandatory message the broker could not route, returned to the publisher.
#[derive(Clone, Debug)]
pub struct Returned {
    /// Why (312 `NO_ROUTE`, 313 `NO_CONSUMERS`).
    pub reply_code: u16,
    /// The reply text.
    pub reply_text: ShortStr,
    /// The exchange it was published to.
    pub exchange: ShortStr,
    /// The routing key it was published with.
    pub routing_key: ShortStr,
    /// Property flags and list, raw.
    pub properties: Bytes,
    /// The body.
    pub body: Bytes,
}
