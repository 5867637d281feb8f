//! Owns: the Prometheus text exposition format, version 0.0.4 — the format
//! rabbitmq_prometheus answers with (`text/plain; version=0.0.4`), including its
//! `untyped` families (`rabbitmq_identity_info`, `rabbitmq_build_info`, the alarms),
//! which OpenMetrics (the `prometheus-client` crate's only encoding, used for sluice's
//! own `/metrics`) has no word for. A family is written as `# HELP`, `# TYPE`, then its
//! samples; label values are escaped as the format says (`\\`, `\"`, `\n`).
//!
//! Does not: know any metric; it writes what it is given.

use std::fmt::Write;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A family's type, as `# TYPE` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Untyped,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Untyped => "untyped",
        }
    }
}

/// Label pairs of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// The exposition being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: its `# HELP` and `# TYPE` lines. Its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Exposition {
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.word());
        let _ = write!(self.out, "# HELP {name} ");
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        self.out.push('\n');
        self
    }

    /// One sample of the family just started (`name` repeats it, as the format does).
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) -> &mut Exposition {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(key);
                self.out.push_str("=\"");
                for c in val.chars() {
                    match c {
                        '\\' => self.out.push_str("\\\\"),
                        '"' => self.out.push_str("\\\""),
                        '\n' => self.out.push_str("\\n"),
                        c => self.out.push(c),
                    }
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        if value.is_nan() {
            self.out.push_str("NaN");
        } else if value.is_infinite() {
            self.out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(self.out, "{value}");
        }
        self.out.push('\n');
        self
    }

    /// A family of one sample without labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Exposition {
        self.family(name, kind, help).sample(name, &[], value)
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_escaped_labels() {
        let mut e = Exposition::default();
        e.family("rabbitmq_queue_messages", Kind::Gauge, "Depth\\all")
            .sample(
                "rabbitmq_queue_messages",
                &[("vhost", "/"), ("queue", "a\"b\\c\nd")],
                3.0,
            )
            .single("rabbitmq_up", Kind::Untyped, "x", 0.5);
        e.family("f", Kind::Counter, "h").sample("f", &[], f64::NAN);
        assert_eq!(
            e.finish(),
            "# TYPE rabbitmq_queue_messages gauge\n\
             # HELP rabbitmq_queue_messages Depth\\\\all\n\
             rabbitmq_queue_messages{vhost=\"/\",queue=\"a\\\"b\\\\c\\nd\"} 3\n\
             # TYPE rabbitmq_up untyped\n\
             # HELP rabbitmq_up x\n\
             rabbitmq_up 0.5\n\
             # TYPE f counter\n\
             # HELP f h\n\
             f NaN\n"
        );
    }
}
