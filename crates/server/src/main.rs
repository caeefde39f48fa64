//! `ratelab-server`: the rate-limiting gateway over HTTP, on the in-memory store or Redis.
//!
//! Exit codes: 0 after a clean shutdown (Ctrl-C or SIGTERM: in-flight requests finish), 2 on
//! bad input.

use clap::{Parser, Subcommand};
use ratelab_server::{EXIT_BAD_INPUT, ServeArgs, limits, serve_command};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Serve the gateway over HTTP, on the in-memory store or Redis: 200 when allowed, 429 when
/// denied.
#[derive(Parser, Debug)]
#[command(
    name = "ratelab-server",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: ServeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the limits file's JSON Schema.
    Schema,
    /// Validate a limits file without serving: 0 when it is valid, 2 with the located error.
    Check {
        /// The limits file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    match Cli::try_parse() {
        Ok(Cli {
            command: Some(Command::Schema),
            ..
        }) => {
            let _ = std::io::stdout().write_all(limits::json_schema().as_bytes());
            ExitCode::SUCCESS
        }
        Ok(Cli {
            command: Some(Command::Check { file }),
            ..
        }) => match limits::load(&file) {
            Ok(l) => {
                let names: Vec<_> = l.iter().map(|l| l.spec.name.as_str()).collect();
                println!(
                    "{}: {} limits: {}",
                    file.display(),
                    l.len(),
                    names.join(", ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(EXIT_BAD_INPUT)
            }
        },
        Ok(cli) => serve_command(cli.args),
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            ExitCode::from(code)
        }
    }
}
