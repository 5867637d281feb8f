//! Hand-written AMQP 0-9-1 encoding, from the spec (`amqp-0-9-1.json`) and the RabbitMQ
//! field-table errata. Kept independent of the broker's own codec on purpose: the suites
//! must not share a bug with the code they test.

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
pub const FRAME_END: u8 = 0xCE;

pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// (class id, method id) pairs used by the suites.
pub mod m {
    pub const CONNECTION_START: (u16, u16) = (10, 10);
    pub const CONNECTION_START_OK: (u16, u16) = (10, 11);
    pub const CONNECTION_TUNE: (u16, u16) = (10, 30);
    pub const CONNECTION_TUNE_OK: (u16, u16) = (10, 31);
    pub const CONNECTION_OPEN: (u16, u16) = (10, 40);
    pub const CONNECTION_OPEN_OK: (u16, u16) = (10, 41);
    pub const CONNECTION_CLOSE: (u16, u16) = (10, 50);
    pub const CONNECTION_CLOSE_OK: (u16, u16) = (10, 51);
    pub const CHANNEL_OPEN: (u16, u16) = (20, 10);
    pub const CHANNEL_OPEN_OK: (u16, u16) = (20, 11);
    pub const CHANNEL_CLOSE: (u16, u16) = (20, 40);
    pub const CHANNEL_CLOSE_OK: (u16, u16) = (20, 41);
    pub const EXCHANGE_DECLARE: (u16, u16) = (40, 10);
    pub const EXCHANGE_DECLARE_OK: (u16, u16) = (40, 11);
    pub const QUEUE_DECLARE: (u16, u16) = (50, 10);
    pub const QUEUE_DECLARE_OK: (u16, u16) = (50, 11);
    pub const QUEUE_BIND: (u16, u16) = (50, 20);
    pub const QUEUE_BIND_OK: (u16, u16) = (50, 21);
    pub const BASIC_QOS: (u16, u16) = (60, 10);
    pub const BASIC_QOS_OK: (u16, u16) = (60, 11);
    pub const BASIC_CONSUME: (u16, u16) = (60, 20);
    pub const BASIC_CONSUME_OK: (u16, u16) = (60, 21);
    pub const BASIC_PUBLISH: (u16, u16) = (60, 40);
    pub const BASIC_RETURN: (u16, u16) = (60, 50);
    pub const BASIC_DELIVER: (u16, u16) = (60, 60);
    pub const BASIC_GET: (u16, u16) = (60, 70);
    pub const BASIC_GET_OK: (u16, u16) = (60, 71);
    pub const BASIC_GET_EMPTY: (u16, u16) = (60, 72);
    pub const BASIC_ACK: (u16, u16) = (60, 80);
    pub const CONFIRM_SELECT: (u16, u16) = (85, 10);
    pub const CONFIRM_SELECT_OK: (u16, u16) = (85, 11);
}

/// A field value (RabbitMQ's table type set).
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Bool(bool),
    I8(i8),
    U8(u8),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
    Decimal(u8, i32),
    LongStr(Vec<u8>),
    Array(Vec<Val>),
    Timestamp(u64),
    Table(Table),
    Void,
    Bytes(Vec<u8>),
}

/// A field table with its wire order preserved.
pub type Table = Vec<(String, Val)>;

/// Looks up `key` in a table.
pub fn get<'a>(t: &'a Table, key: &str) -> Option<&'a Val> {
    t.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Big-endian encoder.
#[derive(Default, Debug, Clone)]
pub struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn new() -> Enc {
        Enc::default()
    }
    pub fn octet(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }
    pub fn short(mut self, v: u16) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn long(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn longlong(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn shortstr(mut self, s: &str) -> Self {
        assert!(s.len() < 256, "shortstr too long");
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self
    }
    /// A shortstr of arbitrary bytes (not necessarily UTF-8).
    pub fn shortstr_bytes(mut self, s: &[u8]) -> Self {
        assert!(s.len() < 256, "shortstr too long");
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s);
        self
    }
    pub fn longstr(mut self, s: &[u8]) -> Self {
        self.buf.extend_from_slice(&(s.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(s);
        self
    }
    /// Consecutive bit fields packed into one octet, first field in the lowest bit.
    pub fn bits(mut self, bits: &[bool]) -> Self {
        assert!(bits.len() <= 8);
        let mut b = 0u8;
        for (i, &on) in bits.iter().enumerate() {
            if on {
                b |= 1 << i;
            }
        }
        self.buf.push(b);
        self
    }
    pub fn table(mut self, t: &Table) -> Self {
        let body = encode_table_body(t);
        self.buf
            .extend_from_slice(&(body.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(&body);
        self
    }
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.buf.extend_from_slice(bytes);
        self
    }
    pub fn done(self) -> Vec<u8> {
        self.buf
    }
}

/// A table's entries without the leading length (also the AMQPLAIN response format).
pub fn encode_table_body(t: &Table) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in t {
        assert!(k.len() < 256);
        out.push(k.len() as u8);
        out.extend_from_slice(k.as_bytes());
        encode_value(&mut out, v);
    }
    out
}

fn encode_value(out: &mut Vec<u8>, v: &Val) {
    match v {
        Val::Bool(b) => {
            out.push(b't');
            out.push(*b as u8);
        }
        Val::I8(x) => {
            out.push(b'b');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::U8(x) => {
            out.push(b'B');
            out.push(*x);
        }
        Val::I16(x) => {
            out.push(b's');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::U16(x) => {
            out.push(b'u');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::I32(x) => {
            out.push(b'I');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::U32(x) => {
            out.push(b'i');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::I64(x) => {
            out.push(b'l');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::F32(x) => {
            out.push(b'f');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::F64(x) => {
            out.push(b'd');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::Decimal(scale, x) => {
            out.push(b'D');
            out.push(*scale);
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::LongStr(s) => {
            out.push(b'S');
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s);
        }
        Val::Array(items) => {
            out.push(b'A');
            let mut body = Vec::new();
            for item in items {
                encode_value(&mut body, item);
            }
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            out.extend_from_slice(&body);
        }
        Val::Timestamp(x) => {
            out.push(b'T');
            out.extend_from_slice(&x.to_be_bytes());
        }
        Val::Table(t) => {
            out.push(b'F');
            let body = encode_table_body(t);
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            out.extend_from_slice(&body);
        }
        Val::Void => out.push(b'V'),
        Val::Bytes(b) => {
            out.push(b'x');
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// Big-endian decoder over a borrowed payload; panics (failing the test) on short input.
pub struct Dec<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        assert!(
            self.pos + n <= self.buf.len(),
            "short payload: want {n} bytes at {} of {}",
            self.pos,
            self.buf.len()
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn octet(&mut self) -> u8 {
        self.take(1)[0]
    }
    pub fn short(&mut self) -> u16 {
        u16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    pub fn long(&mut self) -> u32 {
        u32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    pub fn longlong(&mut self) -> u64 {
        u64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    pub fn shortstr(&mut self) -> String {
        let n = self.octet() as usize;
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
    pub fn longstr(&mut self) -> Vec<u8> {
        let n = self.long() as usize;
        self.take(n).to_vec()
    }
    /// One octet of packed bits, expanded to `n` booleans.
    pub fn bits(&mut self, n: usize) -> Vec<bool> {
        let b = self.octet();
        (0..n).map(|i| b & (1 << i) != 0).collect()
    }
    pub fn table(&mut self) -> Table {
        let n = self.long() as usize;
        let body = self.take(n);
        decode_table_body(body)
    }
}

/// Decodes a table's entries (no leading length).
pub fn decode_table_body(body: &[u8]) -> Table {
    let mut d = Dec::new(body);
    let mut t = Vec::new();
    while d.remaining() > 0 {
        let k = d.shortstr();
        let v = decode_value(&mut d);
        t.push((k, v));
    }
    t
}

fn decode_value(d: &mut Dec<'_>) -> Val {
    let tag = d.octet();
    match tag {
        b't' => Val::Bool(d.octet() != 0),
        b'b' => Val::I8(d.octet() as i8),
        b'B' => Val::U8(d.octet()),
        b's' => Val::I16(d.short() as i16),
        b'u' => Val::U16(d.short()),
        b'I' => Val::I32(d.long() as i32),
        b'i' => Val::U32(d.long()),
        b'l' => Val::I64(d.longlong() as i64),
        b'f' => Val::F32(f32::from_bits(d.long())),
        b'd' => Val::F64(f64::from_bits(d.longlong())),
        b'D' => {
            let scale = d.octet();
            Val::Decimal(scale, d.long() as i32)
        }
        b'S' => Val::LongStr(d.longstr()),
        b'A' => {
            let n = d.long() as usize;
            let body = d.take(n);
            let mut inner = Dec::new(body);
            let mut items = Vec::new();
            while inner.remaining() > 0 {
                items.push(decode_value(&mut inner));
            }
            Val::Array(items)
        }
        b'T' => Val::Timestamp(d.longlong()),
        b'F' => Val::Table(d.table()),
        b'V' => Val::Void,
        b'x' => Val::Bytes(d.longstr()),
        other => panic!("unknown field type tag {other:#04x}"),
    }
}

/// A method frame payload: class id, method id, arguments.
pub fn method_payload(id: (u16, u16), args: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + args.len());
    p.extend_from_slice(&id.0.to_be_bytes());
    p.extend_from_slice(&id.1.to_be_bytes());
    p.extend_from_slice(args);
    p
}

/// A complete frame: type, channel, size, payload, frame-end.
pub fn frame(ty: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + payload.len());
    f.push(ty);
    f.extend_from_slice(&channel.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f.push(FRAME_END);
    f
}

/// The 14 basic properties, in flag order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Props {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub headers: Option<Table>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    pub expiration: Option<String>,
    pub message_id: Option<String>,
    pub timestamp: Option<u64>,
    pub kind: Option<String>,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub cluster_id: Option<String>,
}

impl Props {
    /// Property flags and property list, as they follow body-size in a content header.
    pub fn encode(&self) -> Vec<u8> {
        let mut flags = 0u16;
        let mut e = Enc::new();
        let mut bit = 15;
        let s = |v: &Option<String>, e: Enc, flags: &mut u16, bit: &mut u16| -> Enc {
            let e = match v {
                Some(v) => {
                    *flags |= 1 << *bit;
                    e.shortstr(v)
                }
                None => e,
            };
            *bit -= 1;
            e
        };
        e = s(&self.content_type, e, &mut flags, &mut bit);
        e = s(&self.content_encoding, e, &mut flags, &mut bit);
        if let Some(h) = &self.headers {
            flags |= 1 << bit;
            e = e.table(h);
        }
        bit -= 1;
        if let Some(v) = self.delivery_mode {
            flags |= 1 << bit;
            e = e.octet(v);
        }
        bit -= 1;
        if let Some(v) = self.priority {
            flags |= 1 << bit;
            e = e.octet(v);
        }
        bit -= 1;
        e = s(&self.correlation_id, e, &mut flags, &mut bit);
        e = s(&self.reply_to, e, &mut flags, &mut bit);
        e = s(&self.expiration, e, &mut flags, &mut bit);
        e = s(&self.message_id, e, &mut flags, &mut bit);
        if let Some(v) = self.timestamp {
            flags |= 1 << bit;
            e = e.longlong(v);
        }
        bit -= 1;
        e = s(&self.kind, e, &mut flags, &mut bit);
        e = s(&self.user_id, e, &mut flags, &mut bit);
        e = s(&self.app_id, e, &mut flags, &mut bit);
        e = s(&self.cluster_id, e, &mut flags, &mut bit);
        debug_assert_eq!(bit, 1);
        let mut out = flags.to_be_bytes().to_vec();
        out.extend_from_slice(&e.done());
        out
    }

    /// Decodes property flags plus list.
    pub fn decode(d: &mut Dec<'_>) -> Props {
        let flags = d.short();
        let on = |bit: u16| flags & (1 << bit) != 0;
        let mut p = Props::default();
        if on(15) {
            p.content_type = Some(d.shortstr());
        }
        if on(14) {
            p.content_encoding = Some(d.shortstr());
        }
        if on(13) {
            p.headers = Some(d.table());
        }
        if on(12) {
            p.delivery_mode = Some(d.octet());
        }
        if on(11) {
            p.priority = Some(d.octet());
        }
        if on(10) {
            p.correlation_id = Some(d.shortstr());
        }
        if on(9) {
            p.reply_to = Some(d.shortstr());
        }
        if on(8) {
            p.expiration = Some(d.shortstr());
        }
        if on(7) {
            p.message_id = Some(d.shortstr());
        }
        if on(6) {
            p.timestamp = Some(d.longlong());
        }
        if on(5) {
            p.kind = Some(d.shortstr());
        }
        if on(4) {
            p.user_id = Some(d.shortstr());
        }
        if on(3) {
            p.app_id = Some(d.shortstr());
        }
        if on(2) {
            p.cluster_id = Some(d.shortstr());
        }
        p
    }
}

/// A content header payload: class 60, weight 0, body size, properties.
pub fn content_header_payload(body_size: u64, props: &Props) -> Vec<u8> {
    Enc::new()
        .short(60)
        .short(0)
        .longlong(body_size)
        .raw(&props.encode())
        .done()
}
