//! `ratelab check`: validate scenario files without running them.

use ratelab_lab::commands::EXIT_BAD_INPUT;
use ratelab_sim::Scenario;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab check`'s flags.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Scenario files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// `ratelab check`: `ok` and the seed and request counts per valid file, the error of each
/// invalid one (exit 2 if any).
pub fn check_command(args: CheckArgs) -> ExitCode {
    let files = args.files;
    let mut ok = true;
    for f in &files {
        match Scenario::load(f) {
            Ok(sc) => println!(
                "ok: {} ({} seeds, about {} requests per seed)",
                f.display(),
                sc.spec().seeds.get().len(),
                sc.scheduled_requests()
            ),
            Err(e) => {
                eprintln!("error: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_BAD_INPUT)
    }
}
