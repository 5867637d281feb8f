//! sluice

pub mod model;
pub mod policy;
pub mod timer;
