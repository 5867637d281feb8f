//! sluice

pub mod model;
pub mod timer;
