//! Running sluice as an operator does: SIGHUP reloads the configuration file without
//! dropping anyone, a second broker on the same AMQP port refuses to start, and the
//! memory limit of the cgroup the broker runs in sets its watermark (BRK-1009).

mod common;

mod operations {
    pub mod cgroup;
    pub mod port;
    pub mod reload;
}
