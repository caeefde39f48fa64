//! `ratelab run`: a scenario's seeds (or one seed), checked against its expectations; the
//! table or JSON lines, the trace, the request logs and timelines it writes, and the replay
//! commands of a failure. The rows are `run_report`'s.

use crate::run_report::{
    describe, failure, gateway_line, header, job_line, row, timeline_path, write_request_logs,
};
use ratelab_lab::commands::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNKNOWN};
use ratelab_sim::{RunOptions, Scenario};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab run`'s flags.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The scenario file.
    file: PathBuf,
    /// Run only this seed (the scenario's seeds otherwise).
    #[arg(long)]
    seed: Option<u64>,
    /// Print every event of the run.
    #[arg(long)]
    trace: bool,
    /// Print one JSON object per seed instead of a table.
    #[arg(long)]
    json: bool,
    /// Write each gateway's request log (JSON lines) to DIR/seed-SEED/gateway-N.jsonl.
    #[arg(long, value_name = "DIR")]
    request_logs: Option<PathBuf>,
    /// Write a self-contained HTML timeline of one key's requests (with several seeds,
    /// one file per seed: NAME-seed-S.html).
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// The key the timeline shows (default: the envelope's witness, else the busiest key).
    #[arg(long, value_name = "KEY", requires = "timeline")]
    timeline_key: Option<String>,
    /// Worker threads for the seeds (1 to 256; default: every core). The output is the
    /// same on any number.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: Option<u64>,
}

/// `ratelab run`.
pub fn run_command(args: RunArgs) -> ExitCode {
    let RunArgs {
        file,
        seed,
        trace,
        json,
        request_logs,
        timeline,
        timeline_key,
        threads,
    } = args;
    let (request_logs, timeline, timeline_key) = (
        request_logs.as_deref(),
        timeline.as_deref(),
        timeline_key.as_deref(),
    );
    let threads = threads.map_or_else(ratelab_sim::parallel::default_threads, |t| t as usize);
    let sc = match Scenario::load(&file) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let seeds = seed.map_or_else(|| sc.spec().seeds.get().to_vec(), |s| vec![s]);
    let mut out = std::io::stdout().lock();
    if !json {
        header(&mut out, &sc);
    }
    let mut failed = Vec::new();
    let mut unknown_seeds = 0u64;
    let options = RunOptions {
        // The timeline draws every store call of its key from the events.
        keep_events: trace || timeline.is_some(),
        request_logs: request_logs.is_some(),
    };
    // Every seed on the worker threads; each printed in seed order as soon as it is done.
    let mut write_error = None;
    ratelab_sim::run_seeds(&sc, &seeds, threads, options, |(report, history)| {
        if write_error.is_some() {
            return;
        }
        let mut report = report;
        let (verdict, named, unknown) =
            ratelab_lab::explore::report::explorer_verdict(&sc, &mut report, &history);
        unknown_seeds += u64::from(unknown > 0);
        let s = report.seed;
        if let Some(dir) = request_logs {
            match write_request_logs(dir, &sc, &history, s) {
                Ok(dir) => eprintln!(
                    "request logs: {} (gateway-0.jsonl to gateway-{}.jsonl)",
                    dir.display(),
                    sc.spec().gateways.get() - 1
                ),
                Err(e) => {
                    write_error = Some(e);
                    return;
                }
            }
        }
        if let Some(path) = timeline {
            let path = timeline_path(path, s, seeds.len() > 1);
            let key = timeline_key
                .map(str::to_owned)
                .or_else(|| named.key.clone());
            match ratelab_lab::timeline::write(&sc, &report, &history, key, named.request, &path) {
                Ok(true) => {}
                Ok(false) => {
                    write_error = Some("timeline: the run has no requests".into());
                    return;
                }
                Err(e) => {
                    write_error = Some(e);
                    return;
                }
            }
            eprintln!("timeline: {}", path.display());
        }
        if trace {
            for e in &history.events {
                let _ = writeln!(out, "{}", describe(e, &history));
            }
        }
        if json {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(&report).expect("report serializes")
            );
        } else {
            row(&mut out, &report);
            gateway_line(&mut out, &report);
            job_line(&mut out, &report);
            if let Some(v) = &verdict {
                let _ = writeln!(out, "{v}");
            }
        }
        if !report.passed {
            failed.push(report);
        }
    });
    let _ = out.flush();
    if let Some(e) = write_error {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if failed.is_empty() && unknown_seeds > 0 {
        eprintln!(
            "unknown: {unknown_seeds} seeds had keys the explorer's linearizability search could not \
             decide within its budget: not passed"
        );
        return ExitCode::from(EXIT_UNKNOWN);
    }
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    for r in &failed {
        eprint!("{}", failure(r));
    }
    ExitCode::from(EXIT_FAILED)
}
