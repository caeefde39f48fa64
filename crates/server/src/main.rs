//! `ratelab-server`: the rate-limiting gateway over HTTP, on the in-memory store or Redis.
//!
//! Exit codes: 0 after a clean shutdown (Ctrl-C or SIGTERM: in-flight requests finish), 2 on
//! bad input.

use clap::Parser;
use ratelab_server::{EXIT_BAD_INPUT, ServeArgs, serve_command};
use std::process::ExitCode;

/// Serve the gateway over HTTP, on the in-memory store or Redis: 200 when allowed, 429 when
/// denied.
#[derive(Parser, Debug)]
#[command(name = "ratelab-server", version)]
struct Cli {
    #[command(flatten)]
    args: ServeArgs,
}

fn main() -> ExitCode {
    match Cli::try_parse() {
        Ok(cli) => serve_command(cli.args),
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            ExitCode::from(code)
        }
    }
}
