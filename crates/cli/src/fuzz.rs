//! `ratelab fuzz`: mutate the shipped scenarios and feed each input to validation and a
//! short run (the campaign is `ratelab_lab::fuzz`'s); its progress bar and summary, and every
//! panic with its input and replay command.

use ratelab_lab::commands::{EXIT_BAD_INPUT, EXIT_FAILED};
use ratelab_lab::fuzz::{self, FuzzConfig};
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab fuzz`'s flags.
#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// Inputs to generate (1 to 10 000 000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    inputs: u64,
    /// The campaign's seed: the same seed gives the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the scenarios to mutate are.
    #[arg(long, default_value = "sim-scenarios")]
    corpus: PathBuf,
    /// Run a valid input only if it schedules at most this many requests (1 to 1 000 000).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    run_requests: u64,
    /// … and simulates at most this long, ms (1 to 3 600 000).
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    run_ms: u64,
}

/// `ratelab fuzz`.
pub fn fuzz_command(args: FuzzArgs) -> ExitCode {
    let FuzzArgs {
        inputs,
        seed,
        corpus,
        run_requests,
        run_ms,
    } = args;
    let cfg = &FuzzConfig {
        inputs,
        seed,
        run_requests,
        run_ms,
    };
    let dir = corpus;
    let corpus = match fuzz::corpus(&dir) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("error: {}: no scenario files to mutate", dir.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let bar = indicatif::ProgressBar::new(cfg.inputs);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} inputs ({per_sec}, {eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let r = fuzz::fuzz(&corpus, cfg, &|done| bar.set_position(done));
    bar.finish_and_clear();
    println!(
        "{} inputs from {} scenarios (seed {}) in {:.1} s{}",
        r.inputs,
        corpus.len(),
        cfg.seed,
        started.elapsed().as_secs_f64(),
        if cfg!(debug_assertions) {
            ", debug build (overflow checks on)"
        } else {
            ", release build"
        }
    );
    println!("{r}");
    if r.panic_count == 0 {
        return ExitCode::SUCCESS;
    }
    for p in &r.panics {
        eprintln!("\n{p}");
    }
    eprintln!("replay: {}", cfg.replay());
    ExitCode::from(EXIT_FAILED)
}
