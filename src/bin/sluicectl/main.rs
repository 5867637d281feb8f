//! `sluicectl`: a command-line administration tool on sluice's management API
//! (`[http] listen`, RabbitMQ-compatible). This file owns the entry point: parsing the
//! line, choosing the password, and the exit status (0 ok, 1 when the broker refuses or
//! cannot be reached, with the reason on stderr, 2 for usage errors). The modules:
//! `args` (the command line), `client` (HTTP over ureq, auth, errors), `commands` (the
//! object commands), `health` (checks and `top`), `tables` (output).

mod args;
mod client;
mod commands;
mod health;
mod tables;

use std::process::ExitCode;

use clap::Parser;

/// --password, else the first line of --password-file, else $SLUICE_PASSWORD, else guest.
fn password(a: &args::Args) -> Result<String, client::Error> {
    if let Some(p) = &a.password {
        return Ok(p.clone());
    }
    if let Some(f) = &a.password_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| client::Error::Other(format!("cannot read --password-file {f}: {e}")))?;
        return Ok(text.lines().next().unwrap_or("").to_owned());
    }
    Ok(std::env::var("SLUICE_PASSWORD").unwrap_or_else(|_| "guest".to_owned()))
}

fn run(a: &args::Args) -> Result<String, client::Error> {
    let pass = password(a)?;
    let c = client::Client::new(&a.server, &a.user, &pass, a.cacert.as_deref())?;
    commands::run(&c, a)
        .or_else(|| health::run(&c, a))
        .unwrap_or_else(|| Err(client::Error::Other("unknown command".into())))
}

fn main() -> ExitCode {
    let a = args::Args::parse();
    match run(&a) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluicectl: {e}");
            ExitCode::FAILURE
        }
    }
}
