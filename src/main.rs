//! The `sluice` command: parse flags, load the configuration, start the shards, wait for
//! SIGINT/SIGTERM, shut down cleanly.

use clap::Parser;

use sluice::config::{Cli, Config};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    sluice::server::abort_on_panic();
    sluice::server::block_signals();
    let broker = match sluice::server::start(config) {
        Ok(broker) => broker,
        Err(e) => {
            eprintln!("sluice: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    sluice::server::wait_for_signal();
    broker.shutdown();
    std::process::ExitCode::SUCCESS
}
