//! `ratelab-server`: the rate-limiting gateway over HTTP, on the in-memory store or Redis.
//!
//! Exit codes: 0 after a clean shutdown (Ctrl-C or SIGTERM: in-flight requests finish), 2 on
//! bad input.

use clap::{Parser, Subcommand};
use ratelab_server::{EXIT_BAD_INPUT, ServeArgs, limits, rls, serve_command};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: the request path allocates a few small blocks and one large future per request
/// (docs/PERFORMANCE-HISTORY.md, "The build", measured the server with it and with glibc's
/// allocator side by side).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Validate a limits file (TOML), or an envoyproxy/ratelimit config (YAML, for
    /// `--rls-config`), without serving: 0 when it is valid, 2 with the located error.
    Check {
        /// The file.
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
        }) => match check(&file) {
            Ok(said) => {
                println!("{}: {said}", file.display());
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

/// What a valid limits file or envoyproxy/ratelimit config holds, in a line.
fn check(file: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    let name = file.display().to_string();
    let yaml = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    let (limits, domains) = if yaml {
        (Vec::new(), rls::config::parse_yaml(&name, &text)?.into())
    } else {
        limits::parse_all(&name, &text)?
    };
    let names: Vec<_> = limits.iter().map(|l| l.spec.name.as_str()).collect();
    let mut said = format!("{} limits: {}", limits.len(), names.join(", "));
    if limits.is_empty() {
        said.clear();
    }
    if !domains.is_empty() {
        let leaves: usize = domains.iter().map(rls::config::Domain::limits).sum();
        let names: Vec<_> = domains.iter().map(|d| d.name.as_str()).collect();
        let sep = if said.is_empty() { "" } else { "; " };
        said = format!(
            "{said}{sep}{} domains ({}) with {leaves} descriptor limits",
            domains.len(),
            names.join(", ")
        );
    }
    Ok(said)
}
