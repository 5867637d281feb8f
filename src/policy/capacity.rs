//! Owns: producer flow control on a queue's capacity (seed 001) as a pure hysteresis —
//! `capacity` and `flowResumeCapacity` in bytes, where they may be declared
//! (`x-qpid-capacity`, `x-qpid-flow-resume-capacity`), and the [`FlowChange`] a new queue
//! size causes: overfull above the capacity, underfull again below the resume capacity.
//!
//! Does not: send `channel.flow` or log; the shard does both on a `FlowChange`.

use crate::protocol::FieldTable;

use super::args::{self, ArgError};

/// Declare-argument names (the Qpid broker's, so existing applications keep working).
pub mod arg {
    pub const CAPACITY: &str = "x-qpid-capacity";
    pub const FLOW_RESUME_CAPACITY: &str = "x-qpid-flow-resume-capacity";
}

/// A queue's capacity settings at one level of configuration (declare arguments, a
/// `[[queue]]` entry, the vhost default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacitySettings {
    /// Bytes; 0 means unlimited.
    pub capacity: Option<u64>,
    /// Bytes; defaults to the capacity.
    pub flow_resume_capacity: Option<u64>,
}

impl CapacitySettings {
    /// Reads `x-qpid-capacity` and `x-qpid-flow-resume-capacity`.
    pub fn from_arguments(a: &FieldTable) -> Result<CapacitySettings, ArgError> {
        let s = CapacitySettings {
            capacity: args::non_negative(a, arg::CAPACITY)?,
            flow_resume_capacity: args::non_negative(a, arg::FLOW_RESUME_CAPACITY)?,
        };
        s.check()
            .map_err(|reason| ArgError::new(arg::FLOW_RESUME_CAPACITY, reason))?;
        Ok(s)
    }

    /// The resume capacity may not exceed the capacity.
    pub fn check(&self) -> Result<(), String> {
        match (self.capacity, self.flow_resume_capacity) {
            (Some(0), Some(resume)) if resume > 0 => Err(format!(
                "flow resume capacity {resume} is set but the capacity is 0 (unlimited)"
            )),
            (Some(cap), Some(resume)) if resume > cap => Err(format!(
                "flow resume capacity {resume} is larger than the capacity {cap}"
            )),
            _ => Ok(()),
        }
    }

    /// These settings over `lower`. A level that sets the capacity also decides the
    /// resume capacity (it defaults to that capacity, not to a lower level's value).
    pub fn over(&self, lower: &CapacitySettings) -> CapacitySettings {
        match self.capacity {
            Some(_) => *self,
            None => CapacitySettings {
                capacity: lower.capacity,
                flow_resume_capacity: self.flow_resume_capacity.or(lower.flow_resume_capacity),
            },
        }
    }

    /// The effective limits, or `None` when the capacity is unlimited.
    pub fn resolve(&self) -> Option<Capacity> {
        let capacity = self.capacity.filter(|c| *c > 0)?;
        let resume = self
            .flow_resume_capacity
            .filter(|r| *r > 0)
            .unwrap_or(capacity)
            .min(capacity);
        Some(Capacity {
            capacity,
            resume,
            overfull: false,
        })
    }
}

/// A queue's capacity state.
///
/// # Invariants
/// `resume <= capacity`; `overfull` changes only through [`Capacity::update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub capacity: u64,
    pub resume: u64,
    overfull: bool,
}

/// A change of a queue's flow state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowChange {
    /// The size went above the capacity: publishers to this queue are to be stopped.
    Overfull { size: u64, capacity: u64 },
    /// The size fell below the resume capacity: they may go on.
    Underfull { size: u64, resume: u64 },
}

impl Capacity {
    pub fn is_overfull(&self) -> bool {
        self.overfull
    }

    /// Applies a new queue size and says whether the state flipped.
    pub fn update(&mut self, size: u64) -> Option<FlowChange> {
        if !self.overfull && size > self.capacity {
            self.overfull = true;
            return Some(FlowChange::Overfull {
                size,
                capacity: self.capacity,
            });
        }
        if self.overfull && size < self.resume {
            self.overfull = false;
            return Some(FlowChange::Underfull {
                size,
                resume: self.resume,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::FieldValue;

    #[test]
    fn hysteresis_between_capacity_and_resume() {
        let mut c = CapacitySettings {
            capacity: Some(1000),
            flow_resume_capacity: Some(800),
        }
        .resolve()
        .expect("limited");
        assert_eq!(c.update(1000), None);
        assert_eq!(
            c.update(1200),
            Some(FlowChange::Overfull {
                size: 1200,
                capacity: 1000
            })
        );
        assert_eq!(c.update(1300), None);
        assert_eq!(c.update(900), None);
        assert_eq!(c.update(800), None);
        assert_eq!(
            c.update(600),
            Some(FlowChange::Underfull {
                size: 600,
                resume: 800
            })
        );
        assert!(!c.is_overfull());
    }

    #[test]
    fn defaults_and_validation() {
        assert_eq!(CapacitySettings::default().resolve(), None);
        let c = CapacitySettings {
            capacity: Some(100),
            flow_resume_capacity: None,
        }
        .resolve()
        .expect("limited");
        assert_eq!(c.resume, 100);
        let mut t = FieldTable::new();
        t.insert(arg::CAPACITY, FieldValue::I64(100));
        t.insert(arg::FLOW_RESUME_CAPACITY, FieldValue::I64(200));
        let e = CapacitySettings::from_arguments(&t).expect_err("resume > capacity");
        assert_eq!(e.argument, arg::FLOW_RESUME_CAPACITY);
        let mut t = FieldTable::new();
        t.insert(arg::CAPACITY, FieldValue::I64(-5));
        let e = CapacitySettings::from_arguments(&t).expect_err("negative");
        assert_eq!(e.argument, arg::CAPACITY);
    }

    #[test]
    fn a_level_setting_the_capacity_owns_the_resume_capacity() {
        let vhost = CapacitySettings {
            capacity: Some(1000),
            flow_resume_capacity: Some(500),
        };
        let queue = CapacitySettings {
            capacity: Some(200),
            flow_resume_capacity: None,
        };
        let c = queue.over(&vhost).resolve().expect("limited");
        assert_eq!((c.capacity, c.resume), (200, 200));
        let only_resume = CapacitySettings {
            capacity: None,
            flow_resume_capacity: Some(900),
        };
        let c = only_resume.over(&vhost).resolve().expect("limited");
        assert_eq!((c.capacity, c.resume), (1000, 900));
    }
}
