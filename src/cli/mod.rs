//! Owns: the `sluice` command line as a whole — the broker's flags (`config::Cli`)
//! beside the tools that run instead of a broker, `sluice hash-password` and `sluice
//! import-definitions` ([`import`]): their arguments, input and output (stdout for
//! results, stderr for the account of what was skipped) and exit codes.
//!
//! Does not: start a broker (`main` hands the flags to `config` and `server`), hash
//! passwords (`auth::password`) or encode definitions records (`store::definitions`).
//! Nothing in the library depends on it: it sits above `server`, beside `main`.

pub mod import;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::auth::password::Password;
use crate::config::Cli;

use import::Skipped;

/// sluice — an AMQP 0-9-1 broker for heavy topic fan-out, one io_uring event loop per core.
#[derive(Parser, Debug, Clone)]
#[command(name = "sluice", version, about, long_about = None)]
pub struct Args {
    /// The broker's flags.
    #[command(flatten)]
    pub broker: Cli,
    /// A tool to run instead of the broker (`sluice hash-password`, `sluice
    /// import-definitions`); none starts the broker.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands of `sluice`; without one, the broker starts.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Print a password hash for `[auth] users` (RabbitMQ's format).
    ///
    /// The hash is `password_hash` in RabbitMQ's rabbit_password_hashing_sha256 format.
    /// Without PASSWORD it is read from stdin (so it stays out of the shell history);
    /// one trailing newline is dropped.
    HashPassword {
        /// The password (prefer stdin).
        password: Option<String>,
    },
    /// Import a RabbitMQ definitions export (JSON).
    ///
    /// Users, vhosts and permissions are printed as sluice configuration; with
    /// --data-dir the durable exchanges, queues and bindings are added to that data dir
    /// (no broker may be running on it). What is not imported is listed on stderr.
    ImportDefinitions {
        /// The definitions JSON (rabbitmqctl export_definitions, GET /api/definitions).
        file: PathBuf,
        /// Write the configuration entries here instead of stdout.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Add the durable exchanges, queues and bindings to this data dir.
        #[arg(long = "data-dir", value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
}

/// Runs a subcommand: 0 on success, 1 on failure (the reason on stderr).
pub fn run(command: &Command) -> ExitCode {
    let result = match command {
        Command::HashPassword { password } => hash_password(password.as_deref()),
        Command::ImportDefinitions {
            file,
            output,
            data_dir,
        } => import_definitions(file, output.as_ref(), data_dir.as_ref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}

fn hash_password(given: Option<&str>) -> Result<(), String> {
    let password = match given {
        Some(p) => p.to_owned(),
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("reading the password from stdin: {e}"))?;
            let trimmed = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'))
                .unwrap_or(&text);
            trimmed.to_owned()
        }
    };
    if password.is_empty() {
        return Err("the password is empty".into());
    }
    let hash = Password::hash_sha256(password.as_bytes())
        .map_err(|e| format!("no random salt: {e}"))?
        .encoded()
        .ok_or("no hash")?;
    println!("{hash}");
    Ok(())
}

fn import_definitions(
    file: &PathBuf,
    output: Option<&PathBuf>,
    data_dir: Option<&PathBuf>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let root: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}", file.display()))?;
    let mut skipped = Skipped::default();
    let conversion = import::convert(&root, &mut skipped)?;
    let mut summary = String::new();
    if let Some(dir) = data_dir {
        let applied = import::apply(&root, &conversion.vhosts, dir, &mut skipped)?;
        summary = format!(
            "added to {}: {} policies, {} exchanges, {} queues, {} bindings\n",
            dir.display(),
            applied.policies,
            applied.exchanges,
            applied.queues,
            applied.bindings
        );
    } else {
        for kind in ["policies", "exchanges", "queues", "bindings"] {
            let items = root.get(kind).and_then(serde_json::Value::as_array);
            for item in items.map_or(&[][..], Vec::as_slice) {
                let name = item.get("name").or_else(|| item.get("destination"));
                let name = name.and_then(serde_json::Value::as_str).unwrap_or("");
                skipped.add(kind, format!("'{name}': not applied (no --data-dir given)"));
            }
        }
    }
    let header = format!(
        "# Imported from {} by `sluice import-definitions`.\n",
        file.display()
    );
    let config = format!("{header}{}", conversion.toml);
    match output {
        // The entries hold password hashes: readable by the owner alone.
        Some(path) => write_private(path, config.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
        None => std::io::stdout()
            .write_all(config.as_bytes())
            .map_err(|e| format!("stdout: {e}"))?,
    }
    eprint!("{summary}{}", skipped.report());
    Ok(())
}

/// Writes `bytes` to `path` with mode 0600 (an existing file is truncated and its mode
/// set too).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)
}
