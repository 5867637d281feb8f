//! Code generator for `src/protocol/method/generated.rs`, run as a test.
//!
//! Owns: turning the AMQP 0-9-1 JSON spec (RabbitMQ codegen format, checked in
//! at `src/protocol/method/amqp-0-9-1.json`) into Rust text: frame and class
//! constants, [`ReplyCode`] with its soft/hard class, one struct per method
//! with its argument codec, and the `Method` enum.
//! Does not: write anything unless `SLUICE_REGEN=1` is set. Without it the
//! test only compares the freshly generated text with the checked-in file and
//! fails if they differ, so a stale `generated.rs` (or a hand edit) cannot land.
//!
//! Regenerate with:
//! `SLUICE_REGEN=1 cargo test --test codegen`

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;

const SPEC: &str = "src/protocol/method/amqp-0-9-1.json";
const OUTPUT: &str = "src/protocol/method/generated.rs";

#[test]
fn generated_rs_is_fresh() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let spec_text = std::fs::read_to_string(root.join(SPEC)).expect("read spec JSON");
    let spec: Value = serde_json::from_str(&spec_text).expect("parse spec JSON");
    let fresh = generate(&spec);
    let out_path = root.join(OUTPUT);
    if std::env::var_os("SLUICE_REGEN").is_some_and(|v| v == "1") {
        std::fs::write(&out_path, &fresh).expect("write generated.rs");
        return;
    }
    let current = std::fs::read_to_string(&out_path).unwrap_or_default();
    if current != fresh {
        let line = current
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "end of file".to_string(), |n| format!("line {}", n + 1));
        panic!(
            "{OUTPUT} is stale (first difference at {line}); \
             run `SLUICE_REGEN=1 cargo test --test codegen` and commit the result"
        );
    }
}

/// AMQP argument types after resolving domains.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Bit,
    Octet,
    Short,
    Long,
    LongLong,
    Timestamp,
    ShortStr,
    LongStr,
    Table,
}

impl Ty {
    fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "bit" => Ty::Bit,
            "octet" => Ty::Octet,
            "short" => Ty::Short,
            "long" => Ty::Long,
            "longlong" => Ty::LongLong,
            "timestamp" => Ty::Timestamp,
            "shortstr" => Ty::ShortStr,
            "longstr" => Ty::LongStr,
            "table" => Ty::Table,
            _ => return None,
        })
    }

    fn rust(self) -> &'static str {
        match self {
            Ty::Bit => "bool",
            Ty::Octet => "u8",
            Ty::Short => "u16",
            Ty::Long => "u32",
            Ty::LongLong | Ty::Timestamp => "u64",
            Ty::ShortStr => "ShortStr",
            Ty::LongStr => "LongStr",
            Ty::Table => "FieldTable",
        }
    }

    fn wire(self) -> &'static str {
        match self {
            Ty::Bit => "bit",
            Ty::Octet => "octet",
            Ty::Short => "short",
            Ty::Long => "long",
            Ty::LongLong => "longlong",
            Ty::Timestamp => "timestamp",
            Ty::ShortStr => "shortstr",
            Ty::LongStr => "longstr",
            Ty::Table => "table",
        }
    }

    /// The `Reader` method that reads this type (bits are handled in groups).
    fn reader(self) -> &'static str {
        match self {
            Ty::Bit => unreachable!("bits are read in groups"),
            Ty::Octet => "u8",
            Ty::Short => "u16",
            Ty::Long => "u32",
            Ty::LongLong | Ty::Timestamp => "u64",
            Ty::ShortStr => "shortstr",
            Ty::LongStr => "longstr",
            Ty::Table => "table",
        }
    }
}

struct Arg {
    json: String,
    field: String,
    ty: Ty,
    domain: Option<String>,
}

struct MethodSpec {
    class: String,
    class_id: u64,
    name: String,
    id: u64,
    rust: String,
    args: Vec<Arg>,
    synchronous: bool,
    content: bool,
}

impl MethodSpec {
    fn full_name(&self) -> String {
        format!("{}.{}", self.class, self.name)
    }
}

fn camel(s: &str) -> String {
    s.split(['-', '_'])
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect()
}

fn snake(s: &str) -> String {
    let s = s.replace('-', "_");
    match s.as_str() {
        "type" => "kind".to_string(),
        _ => s,
    }
}

fn upper(s: &str) -> String {
    s.replace('-', "_").to_ascii_uppercase()
}

fn resolve(arg: &Value, domains: &HashMap<String, String>) -> (Ty, Option<String>) {
    if let Some(t) = arg["type"].as_str() {
        return (
            Ty::parse(t).unwrap_or_else(|| panic!("unknown type {t}")),
            None,
        );
    }
    let domain = arg["domain"].as_str().expect("argument has type or domain");
    let mut name = domain.to_string();
    for _ in 0..8 {
        if let Some(t) = Ty::parse(&name) {
            return (t, Some(domain.to_string()));
        }
        name = domains
            .get(&name)
            .unwrap_or_else(|| panic!("unknown domain {name}"))
            .clone();
    }
    panic!("domain {domain} does not resolve");
}

fn methods(spec: &Value) -> Vec<MethodSpec> {
    let domains: HashMap<String, String> = spec["domains"]
        .as_array()
        .expect("domains")
        .iter()
        .map(|d| {
            (
                d[0].as_str().expect("domain name").to_string(),
                d[1].as_str().expect("domain type").to_string(),
            )
        })
        .collect();
    let mut out = Vec::new();
    for class in spec["classes"].as_array().expect("classes") {
        let class_name = class["name"].as_str().expect("class name");
        let class_id = class["id"].as_u64().expect("class id");
        for m in class["methods"].as_array().expect("methods") {
            let name = m["name"].as_str().expect("method name");
            let args = m["arguments"]
                .as_array()
                .expect("arguments")
                .iter()
                .map(|a| {
                    let json = a["name"].as_str().expect("argument name").to_string();
                    let (ty, domain) = resolve(a, &domains);
                    Arg {
                        field: snake(&json),
                        json,
                        ty,
                        domain,
                    }
                })
                .collect();
            out.push(MethodSpec {
                class: class_name.to_string(),
                class_id,
                name: name.to_string(),
                id: m["id"].as_u64().expect("method id"),
                rust: camel(class_name) + &camel(name),
                args,
                synchronous: m["synchronous"].as_bool().unwrap_or(false),
                content: m["content"].as_bool().unwrap_or(false),
            });
        }
    }
    out
}

/// Splits arguments into runs: a run of consecutive bits, or a single non-bit.
fn runs(args: &[Arg]) -> Vec<&[Arg]> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let mut j = i + 1;
        if args[i].ty == Ty::Bit {
            while j < args.len() && args[j].ty == Ty::Bit {
                j += 1;
            }
        }
        out.push(&args[i..j]);
        i = j;
    }
    out
}

fn generate(spec: &Value) -> String {
    let ms = methods(spec);
    let mut s = String::new();
    let w = &mut s;
    header(w, spec);
    constants(w, spec);
    reply_codes(w, spec);
    for m in &ms {
        method_struct(w, m);
    }
    method_enum(w, spec, &ms);
    samples(w, &ms);
    s
}

fn header(w: &mut String, spec: &Value) {
    let major = spec["major-version"].as_u64().unwrap_or(0);
    let minor = spec["minor-version"].as_u64().unwrap_or(0);
    let rev = spec["revision"].as_u64().unwrap_or(0);
    let _ = writeln!(
        w,
        "//! AMQP {major}-{minor}-{rev} constants, reply codes and method codecs.\n\
         //!\n\
         //! GENERATED by `tests/codegen.rs` from `amqp-0-9-1.json`. Do not edit by hand:\n\
         //! change the generator and run `SLUICE_REGEN=1 cargo test --test codegen`.\n\
         //!\n\
         //! Owns: one struct per method (fields in wire order, consecutive bits packed\n\
         //! into octets LSB first), the `Method` enum and its exhaustive dispatch.\n\
         //! Does not: allocate while decoding methods without tables (strings are\n\
         //! zero-copy `Bytes` slices), or decide what a method means to the broker.\n\
         \n\
         use bytes::{{BufMut, BytesMut}};\n\
         \n\
         use crate::protocol::codec::{{put_bits, put_longstr, put_shortstr, DecodeError, LongStr, Reader, ShortStr}};\n\
         use crate::protocol::table::FieldTable;\n"
    );
}

fn constants(w: &mut String, spec: &Value) {
    let _ = writeln!(w, "/// Default AMQP port.");
    let _ = writeln!(
        w,
        "pub const PORT: u16 = {};\n",
        spec["port"].as_u64().unwrap_or(5672)
    );
    for c in spec["constants"].as_array().expect("constants") {
        let name = c["name"].as_str().expect("constant name");
        if !name.starts_with("FRAME-") || c.get("class").is_some() {
            continue;
        }
        let value = c["value"].as_u64().expect("constant value");
        let ty = if name.ends_with("SIZE") { "u32" } else { "u8" };
        let _ = writeln!(w, "/// `{name}` from the spec.");
        let _ = writeln!(w, "pub const {}: {ty} = {value};", upper(name));
    }
    let _ = writeln!(w);
    for class in spec["classes"].as_array().expect("classes") {
        let name = class["name"].as_str().expect("class name");
        let id = class["id"].as_u64().expect("class id");
        let _ = writeln!(w, "/// Class id of `{name}`.");
        let _ = writeln!(w, "pub const CLASS_{}: u16 = {id};", upper(name));
    }
    let _ = writeln!(w);
}

fn reply_codes(w: &mut String, spec: &Value) {
    struct Code {
        spec: String,
        variant: String,
        value: u64,
        hard: bool,
    }
    let codes: Vec<Code> = spec["constants"]
        .as_array()
        .expect("constants")
        .iter()
        .filter(|c| c.get("class").is_some() || c["name"] == "REPLY-SUCCESS")
        .map(|c| {
            let name = c["name"].as_str().expect("constant name");
            Code {
                spec: upper(name),
                variant: camel(name.strip_prefix("REPLY-").unwrap_or(name)),
                value: c["value"].as_u64().expect("constant value"),
                hard: c["class"] == "hard-error",
            }
        })
        .collect();
    let _ = writeln!(
        w,
        "/// Reply codes from the spec. Soft errors close the channel, hard errors\n\
         /// (`class: hard-error`) close the connection.\n\
         #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\n\
         #[repr(u16)]\n\
         pub enum ReplyCode {{"
    );
    for c in &codes {
        let class = match (c.hard, c.value) {
            (_, 200) => "success",
            (true, _) => "hard error",
            (false, _) => "soft error",
        };
        let _ = writeln!(w, "    /// {} `{}` ({class}).", c.value, c.spec);
        let _ = writeln!(w, "    {} = {},", c.variant, c.value);
    }
    let _ = writeln!(w, "}}\n\nimpl ReplyCode {{");
    let _ = writeln!(w, "    /// Every reply code, in spec order.");
    let _ = writeln!(w, "    pub const ALL: [ReplyCode; {}] = [", codes.len());
    for c in &codes {
        let _ = writeln!(w, "        ReplyCode::{},", c.variant);
    }
    let _ = writeln!(w, "    ];\n");
    let _ = writeln!(w, "    /// The numeric code sent on the wire.");
    let _ = writeln!(
        w,
        "    pub const fn code(self) -> u16 {{\n        self as u16\n    }}\n"
    );
    let _ = writeln!(
        w,
        "    /// The reply code for `code`, if the spec defines one."
    );
    let _ = writeln!(
        w,
        "    pub const fn from_code(code: u16) -> Option<Self> {{\n        match code {{"
    );
    for c in &codes {
        let _ = writeln!(
            w,
            "            {} => Some(ReplyCode::{}),",
            c.value, c.variant
        );
    }
    let _ = writeln!(w, "            _ => None,\n        }}\n    }}\n");
    let _ = writeln!(
        w,
        "    /// `true` for hard errors (the connection must be closed)."
    );
    let _ = writeln!(
        w,
        "    pub const fn is_hard(self) -> bool {{\n        match self {{"
    );
    for c in &codes {
        let _ = writeln!(w, "            ReplyCode::{} => {},", c.variant, c.hard);
    }
    let _ = writeln!(w, "        }}\n    }}\n");
    let _ = writeln!(w, "    /// The spec name, e.g. `NOT_FOUND`.");
    let _ = writeln!(
        w,
        "    pub const fn name(self) -> &'static str {{\n        match self {{"
    );
    for c in &codes {
        let _ = writeln!(w, "            ReplyCode::{} => \"{}\",", c.variant, c.spec);
    }
    let _ = writeln!(w, "        }}\n    }}\n}}\n");
}

fn method_struct(w: &mut String, m: &MethodSpec) {
    let full = m.full_name();
    let kind = match (m.synchronous, m.content) {
        (true, true) => "synchronous, carries content",
        (true, false) => "synchronous",
        (false, true) => "asynchronous, carries content",
        (false, false) => "asynchronous",
    };
    let _ = writeln!(
        w,
        "/// `{full}` (class {}, method {}): {kind}.",
        m.class_id, m.id
    );
    let _ = writeln!(w, "#[derive(Debug, Clone, PartialEq, Default)]");
    if m.args.is_empty() {
        let _ = writeln!(w, "pub struct {};\n", m.rust);
    } else {
        let _ = writeln!(w, "pub struct {} {{", m.rust);
        for a in &m.args {
            match &a.domain {
                Some(d) => {
                    let _ = writeln!(w, "    /// `{}`: domain `{d}` ({}).", a.json, a.ty.wire());
                }
                None => {
                    let _ = writeln!(w, "    /// `{}` ({}).", a.json, a.ty.wire());
                }
            }
            let _ = writeln!(w, "    pub {}: {},", a.field, a.ty.rust());
        }
        let _ = writeln!(w, "}}\n");
    }

    let _ = writeln!(w, "impl {} {{", m.rust);
    let _ = writeln!(
        w,
        "    /// Class id on the wire.\n    pub const CLASS_ID: u16 = {};",
        m.class_id
    );
    let _ = writeln!(
        w,
        "    /// Method id on the wire.\n    pub const METHOD_ID: u16 = {};",
        m.id
    );
    let _ = writeln!(
        w,
        "    /// Spec name, `class.method`.\n    pub const NAME: &'static str = \"{full}\";"
    );
    let _ = writeln!(
        w,
        "    /// Whether the spec marks this method synchronous (it expects a reply).\n    pub const SYNCHRONOUS: bool = {};",
        m.synchronous
    );
    let _ = writeln!(
        w,
        "    /// Whether a content header and body frames follow this method.\n    pub const CARRIES_CONTENT: bool = {};\n",
        m.content
    );

    // decode_args
    let _ = writeln!(
        w,
        "    /// Reads the arguments (the payload after class-id and method-id)."
    );
    if m.args.is_empty() {
        let _ = writeln!(
            w,
            "    pub fn decode_args(_r: &mut Reader) -> Result<Self, DecodeError> {{\n        Ok({})\n    }}\n",
            m.rust
        );
    } else {
        let _ = writeln!(
            w,
            "    pub fn decode_args(r: &mut Reader) -> Result<Self, DecodeError> {{"
        );
        for run in runs(&m.args) {
            if run[0].ty == Ty::Bit {
                let names: Vec<&str> = run.iter().map(|a| a.field.as_str()).collect();
                let jsons: Vec<&str> = run.iter().map(|a| a.json.as_str()).collect();
                let _ = writeln!(
                    w,
                    "        let [{}] = r.bits::<{}>(\"{full} {}\")?;",
                    names.join(", "),
                    run.len(),
                    jsons.join("/")
                );
            } else {
                let a = &run[0];
                // Short strings of methods without content must be UTF-8, as RabbitMQ
                // checks them; content-carrying methods (basic.publish, deliver, ...)
                // skip the check on the hot path, as RabbitMQ does.
                let reader = if a.ty == Ty::ShortStr && !m.content {
                    "shortstr_utf8"
                } else {
                    a.ty.reader()
                };
                let _ = writeln!(
                    w,
                    "        let {} = r.{}(\"{full} {}\")?;",
                    a.field, reader, a.json
                );
            }
        }
        let fields: Vec<&str> = m.args.iter().map(|a| a.field.as_str()).collect();
        let _ = writeln!(
            w,
            "        Ok({} {{ {} }})\n    }}\n",
            m.rust,
            fields.join(", ")
        );
    }

    // encode_args
    let _ = writeln!(
        w,
        "    /// Writes the arguments (without class-id and method-id)."
    );
    if m.args.is_empty() {
        let _ = writeln!(w, "    pub fn encode_args(&self, _out: &mut BytesMut) {{}}");
    } else {
        let _ = writeln!(w, "    pub fn encode_args(&self, out: &mut BytesMut) {{");
        for run in runs(&m.args) {
            let a = &run[0];
            let f = &a.field;
            match a.ty {
                Ty::Bit => {
                    let names: Vec<String> =
                        run.iter().map(|a| format!("self.{}", a.field)).collect();
                    let _ = writeln!(w, "        put_bits(out, &[{}]);", names.join(", "));
                }
                Ty::Octet => {
                    let _ = writeln!(w, "        out.put_u8(self.{f});");
                }
                Ty::Short => {
                    let _ = writeln!(w, "        out.put_u16(self.{f});");
                }
                Ty::Long => {
                    let _ = writeln!(w, "        out.put_u32(self.{f});");
                }
                Ty::LongLong | Ty::Timestamp => {
                    let _ = writeln!(w, "        out.put_u64(self.{f});");
                }
                Ty::ShortStr => {
                    let _ = writeln!(w, "        put_shortstr(out, &self.{f});");
                }
                Ty::LongStr => {
                    let _ = writeln!(w, "        put_longstr(out, &self.{f});");
                }
                Ty::Table => {
                    let _ = writeln!(w, "        self.{f}.encode(out);");
                }
            }
        }
        let _ = writeln!(w, "    }}");
    }
    let _ = writeln!(w, "}}\n");

    let _ = writeln!(
        w,
        "impl From<{0}> for Method {{\n    fn from(m: {0}) -> Self {{\n        Method::{0}(m)\n    }}\n}}\n",
        m.rust
    );
}

fn method_enum(w: &mut String, spec: &Value, ms: &[MethodSpec]) {
    let _ = writeln!(w, "/// Every AMQP 0-9-1 method, one variant per method.");
    let _ = writeln!(w, "#[derive(Debug, Clone, PartialEq)]\npub enum Method {{");
    for m in ms {
        let _ = writeln!(w, "    /// `{}`.", m.full_name());
        let _ = writeln!(w, "    {0}({0}),", m.rust);
    }
    let _ = writeln!(w, "}}\n\nimpl Method {{");

    // decode
    let class_ids: Vec<String> = spec["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .map(|c| format!("CLASS_{}", upper(c["name"].as_str().expect("class name"))))
        .collect();
    let _ = writeln!(
        w,
        "    /// Decodes a method-frame payload (class-id, method-id, arguments).\n\
         \x20   ///\n\
         \x20   /// Strings are zero-copy slices of `payload`. Fails if the ids are\n\
         \x20   /// unknown, the arguments are truncated, or bytes are left over.\n\
         \x20   pub fn decode(payload: bytes::Bytes) -> Result<Method, DecodeError> {{\n\
         \x20       let mut r = Reader::new(payload);\n\
         \x20       let class_id = r.u16(\"method class-id\")?;\n\
         \x20       let method_id = r.u16(\"method method-id\")?;\n\
         \x20       let method = match (class_id, method_id) {{"
    );
    for m in ms {
        let _ = writeln!(
            w,
            "            ({}, {}) => Method::{}({}::decode_args(&mut r)?),",
            m.class_id, m.id, m.rust, m.rust
        );
    }
    let _ = writeln!(
        w,
        "            ({}, _) => return Err(DecodeError::UnknownMethod {{ class_id, method_id }}),\n\
         \x20           _ => return Err(DecodeError::UnknownClass(class_id)),\n\
         \x20       }};\n\
         \x20       r.finish(method.name())?;\n\
         \x20       Ok(method)\n\
         \x20   }}\n",
        class_ids.join(" | ")
    );

    // encode
    let _ = writeln!(
        w,
        "    /// Writes class-id, method-id and the arguments.\n\
         \x20   pub fn encode(&self, out: &mut BytesMut) {{\n\
         \x20       out.put_u16(self.class_id());\n\
         \x20       out.put_u16(self.method_id());\n\
         \x20       match self {{"
    );
    for m in ms {
        let _ = writeln!(
            w,
            "            Method::{}(m) => m.encode_args(out),",
            m.rust
        );
    }
    let _ = writeln!(w, "        }}\n    }}\n");

    let accessors: [(&str, &str, &str, &str); 5] = [
        ("class_id", "u16", "CLASS_ID", "The class id."),
        (
            "method_id",
            "u16",
            "METHOD_ID",
            "The method id within its class.",
        ),
        (
            "name",
            "&'static str",
            "NAME",
            "The spec name, e.g. `basic.publish`.",
        ),
        (
            "carries_content",
            "bool",
            "CARRIES_CONTENT",
            "Whether a content header and body follow (`content: true` in the spec).",
        ),
        (
            "is_synchronous",
            "bool",
            "SYNCHRONOUS",
            "Whether the spec marks the method synchronous.",
        ),
    ];
    for (i, (fname, ret, konst, doc)) in accessors.iter().enumerate() {
        let _ = writeln!(w, "    /// {doc}");
        let _ = writeln!(
            w,
            "    pub fn {fname}(&self) -> {ret} {{\n        match self {{"
        );
        for m in ms {
            let _ = writeln!(w, "            Method::{0}(_) => {0}::{konst},", m.rust);
        }
        let sep = if i + 1 == accessors.len() { "" } else { "\n" };
        let _ = writeln!(w, "        }}\n    }}{sep}");
    }
    let _ = writeln!(w, "}}\n");
}

fn samples(w: &mut String, ms: &[MethodSpec]) {
    let _ = writeln!(
        w,
        "/// One instance of every method with non-default values, for round-trip tests.\n\
         #[cfg(test)]\n\
         pub(crate) fn sample_methods() -> Vec<Method> {{\n    vec!["
    );
    for m in ms {
        if m.args.is_empty() {
            let _ = writeln!(w, "        Method::{0}({0}),", m.rust);
            continue;
        }
        let _ = writeln!(w, "        Method::{0}({0} {{", m.rust);
        let mut bit = 0;
        for (k, a) in m.args.iter().enumerate() {
            let k = k as u64 + 1;
            let value = match a.ty {
                Ty::Bit => {
                    bit += 1;
                    (bit % 2 == 1).to_string()
                }
                Ty::Octet => format!("{}", 0x10 + k),
                Ty::Short => format!("{}", 0x0100 * k + 7),
                Ty::Long => format!("{}", 0x0101_0000 * k + 9),
                Ty::LongLong | Ty::Timestamp => format!("{}", 0x0102_0000_0000_0000 * k + 11),
                Ty::ShortStr => format!("ShortStr::from_static(\"{}\")", a.json),
                Ty::LongStr => format!("LongStr::from_static(\"long {}\")", a.json),
                Ty::Table => format!(
                    "[(ShortStr::from_static(\"{}\"), crate::protocol::table::FieldValue::I32(-7))].into_iter().collect()",
                    a.json
                ),
            };
            let _ = writeln!(w, "            {}: {value},", a.field);
        }
        let _ = writeln!(w, "        }}),");
    }
    let _ = writeln!(w, "    ]\n}}");
}
