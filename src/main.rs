//! The `sluice` command: parse flags (`sluice::cli`), run a tool or load the
//! configuration, start the shards, wait for SIGINT/SIGTERM, shut down cleanly; reload
//! the configuration file on SIGHUP. Process-wide settings the library leaves to its
//! host are made here: the allocator, transparent huge pages (off at load).

use clap::Parser;

use sluice::cli::Args;
use sluice::config::Config;

/// mimalloc, except in a `system-alloc` build: heap profilers (heaptrack, valgrind's
/// massif) see the C allocator's calls only (`perf/heap_fanout.sh`).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off when the binary is loaded, before the first allocation
/// (`sluice::server::huge_pages_off_at_load`; `memory.huge_pages` may turn them on).
#[used]
#[link_section = ".init_array"]
static HUGE_PAGES_OFF_AT_LOAD: extern "C" fn() = sluice::server::huge_pages_off_at_load;

fn main() -> std::process::ExitCode {
    let Args {
        broker: cli,
        command,
    } = Args::parse();
    if let Some(command) = &command {
        return sluice::cli::run(command);
    }
    let config = match Config::load(&cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    sluice::ops::log::init(&config.log_level, config.log_format);
    sluice::config::auth::announce(&config);
    sluice::server::abort_on_panic();
    sluice::server::block_signals();
    sluice::server::set_huge_pages(config.policies.memory.huge_pages);
    let mut broker = match sluice::server::start(config) {
        Ok(broker) => broker,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    while sluice::server::wait_for_signal() == sluice::server::Signal::Reload {
        sluice::server::reload_signalled(&mut broker, &cli);
    }
    broker.shutdown();
    std::process::ExitCode::SUCCESS
}
