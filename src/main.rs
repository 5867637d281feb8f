//! The `sluice` command: parse flags (`sluice::cli`), run a tool or load the
//! configuration, start the shards, wait for SIGINT/SIGTERM, shut down cleanly; reload
//! the configuration file on SIGHUP.

use clap::Parser;

use sluice::cli::Args;
use sluice::config::Config;

/// mimalloc, except in a `system-alloc` build: heap profilers (heaptrack, valgrind's
/// massif) see the C allocator's calls only (`perf/heap_fanout.sh`).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off before the first allocation (a 2 MiB page stays resident
/// whole); `memory.huge_pages` may turn them on again (`sluice::server::set_huge_pages`).
#[used]
#[link_section = ".init_array"]
static HUGE_PAGES_OFF_AT_LOAD: extern "C" fn() = huge_pages_off_at_load;

extern "C" fn huge_pages_off_at_load() {
    // SAFETY: takes integers, allocates nothing, sets a flag on this process only.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

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
