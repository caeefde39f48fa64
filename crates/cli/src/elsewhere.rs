//! The real-world commands, handed to `ratelab-probe`: this binary links the simulator, whose
//! madsim replaces the process's clock, randomness and `sysconf`, and a measurement of a real
//! limiter must read the machine's own. `ratelab probe ARGS…` runs `ratelab-probe probe ARGS…`
//! in this process's place (same arguments, same streams, same exit code), found beside this
//! binary (where `cargo build` puts both) or else on `PATH`.
//!
//! One real measurement stays here: `ratelab sweep --redis` runs the real ladder beside its
//! simulated twin in one command, so it measures Redis from this binary (no simulation runs
//! while it measures).

use ratelab_lab::commands::EXIT_BAD_INPUT;
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// The binary that runs the real-world commands.
pub const BINARY: &str = "ratelab-probe";

/// Everything after the subcommand, flags and `--help` included, passed on untouched.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

impl From<Vec<OsString>> for Args {
    fn from(args: Vec<OsString>) -> Args {
        Args { args }
    }
}

/// Where `ratelab-probe` is: beside this binary, else the name alone (looked up on `PATH`,
/// said on stderr, since that one may be of another version).
fn binary() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(BINARY))
        .filter(|p| p.is_file());
    beside.unwrap_or_else(|| {
        eprintln!("ratelab: no {BINARY} beside this binary; running the one on PATH");
        PathBuf::from(BINARY)
    })
}

/// Replaces this process with `ratelab-probe SUBCOMMAND ARGS…`; returns only when that could
/// not start, with exit code 2 and what to build.
pub fn run(subcommand: &str, args: Args) -> ExitCode {
    let path = binary();
    let err = Command::new(&path)
        .arg0("ratelab")
        .arg(subcommand)
        .args(args.args)
        .exec();
    eprintln!(
        "error: `ratelab {subcommand}` runs in {BINARY}, a binary without the simulator, and \
         {} could not be started: {err}. Build it beside ratelab with `cargo build -p \
         ratelab-probe` (add --release as for ratelab), or install it with `cargo install \
         --path crates/probe`.",
        path.display()
    );
    ExitCode::from(EXIT_BAD_INPUT)
}
