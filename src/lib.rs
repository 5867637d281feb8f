//! sluice

pub mod model;
