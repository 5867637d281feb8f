//! sluice

pub mod protocol;
