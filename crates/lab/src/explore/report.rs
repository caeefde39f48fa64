//! What `ratelab explore` prints and writes: a campaign's report, the planted-bug table of
//! the write-up, and the explorer's verdict on a scenario that asks for it.

use crate::explore::{self, ExploreReport, Sut, shrink};
use ratelab_check::timeline::Named;
use std::process::ExitCode;

/// Prints what each checker judged over the campaign, and names those that applied and
/// judged nothing.
fn print_coverage(r: &ExploreReport) {
    if r.coverage_by_checker.is_empty() {
        return;
    }
    let mut t = ratelab_probe::table::numeric(["checker", "seeds it applied to", "judged"], 1);
    for (k, c) in &r.coverage_by_checker {
        t.add_row([k.clone(), c.seeds.to_string(), c.judged.to_string()]);
    }
    println!("coverage by checker (requests judged; the cleanup job's commits):\n{t}");
    let blind = r.blind();
    if !blind.is_empty() {
        println!(
            "FAILED: applied but judged nothing in the whole campaign: {}",
            blind.join(", ")
        );
    }
}

/// Prints an explore campaign's report: what it ran, and each failure found with its replay.
/// `wall` is its wall-clock time in seconds (NaN for a merged report, which has none).
pub fn print_report(r: &ExploreReport, wall: f64) {
    // A merged report has no wall time of its own.
    let timing = if wall.is_finite() {
        format!(
            " in {wall:.1} s ({:.0} seeds/min, {:.0} simulated requests/s)",
            r.seeds as f64 / wall.max(1e-9) * 60.0,
            r.requests as f64 / wall.max(1e-9)
        )
    } else {
        format!(" ({} simulated requests)", r.requests)
    };
    println!(
        "explored {} seeds against `{}`{timing}: {} failed",
        r.seeds,
        r.sut.name(),
        r.failed_seeds
    );
    let kinds: Vec<String> = r
        .fault_coverage
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("seeds with each fault kind: {}", kinds.join(", "));
    if r.unknown_seeds > 0 {
        println!(
            "seeds where the linearizability search ran out of budget on a key (unknown, not passed): {}",
            r.unknown_seeds
        );
        println!(
            "  raise the budget with --budget N (states per key and epoch; {} by default)",
            explore::verdict::LINEARIZABILITY_BUDGET
        );
    }
    let (hit, never): (Vec<_>, Vec<_>) = r.reached.iter().partition(|(_, n)| **n > 0);
    let hit: Vec<String> = hit.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let never: Vec<&str> = never.iter().map(|(k, _)| k.as_str()).collect();
    println!("seeds reaching each situation: {}", hit.join(", "));
    if !never.is_empty() {
        println!("never reached: {}", never.join(", "));
    }
    print_coverage(r);
    if r.found.is_empty() {
        println!("no failures");
        return;
    }
    for f in &r.found {
        println!(
            "\n{} / {}: {} seeds, first seed {}\n  {}\n  replay: {}",
            f.class.name(),
            f.checker,
            f.seeds,
            f.first_seed,
            f.detail,
            f.replay
        );
        if let Some(s) = &f.shrunk {
            let size = |z: &shrink::Size| {
                format!(
                    "{} requests, {} events, {} faults, {} client groups, {} gateways, {} ms",
                    z.requests, z.events, z.faults, z.clients, z.gateways, z.duration_ms
                )
            };
            println!(
                "  shrunk in {} runs{}: {} → {}\n  regression: {}",
                s.runs,
                if s.exhausted { " (budget spent)" } else { "" },
                size(&s.before),
                size(&s.after),
                s.replay
            );
        }
    }
}

/// `ratelab explore table`: every planted bug found, shrunk, tabled.
pub fn table(
    max_seeds: u64,
    threads: usize,
    runs: u32,
    regressions: &std::path::Path,
    writeup: &std::path::Path,
    results: &std::path::Path,
) -> ExitCode {
    let mut rows = Vec::new();
    for sut in Sut::planted() {
        eprintln!("{}…", sut.name());
        match explore::table::detect(sut, max_seeds, threads, regressions, runs) {
            Ok(d) => {
                eprintln!(
                    "  seed {:?} in {:.1} s: {}",
                    d.first_seed,
                    d.wall_s,
                    d.signatures.join(", ")
                );
                rows.push(d);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(crate::commands::EXIT_BAD_INPUT);
            }
        }
    }
    let md = explore::table::markdown(&rows);
    print!("{md}");
    let written = std::fs::read_to_string(writeup)
        .map_err(|e| format!("{}: {e}", writeup.display()))
        .and_then(|text| {
            crate::output::replace_marked(&text, "planted", &md).map_err(|e| e.to_string())
        })
        .and_then(|text| {
            std::fs::write(writeup, text).map_err(|e| format!("{}: {e}", writeup.display()))
        })
        .and_then(|()| {
            let json = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())? + "\n";
            std::fs::write(results, json).map_err(|e| format!("{}: {e}", results.display()))
        });
    match written {
        Ok(()) => {
            let missing = rows.iter().filter(|r| r.first_seed.is_none()).count();
            if missing == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!("{missing} planted bugs not found within {max_seeds} seeds");
                ExitCode::from(crate::commands::EXIT_FAILED)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(crate::commands::EXIT_BAD_INPUT)
        }
    }
}

/// Adds the explorer's verdict to a run of a scenario that asks for it (`expect.explorer`),
/// and says what it was, with the key and request its first failure names, and how many keys
/// its linearizability search could not decide (unknown).
pub fn explorer_verdict(
    sc: &ratelab_sim::Scenario,
    report: &mut ratelab_sim::Report,
    history: &ratelab_sim::History,
) -> (Option<String>, Named, u64) {
    let Some(v) = explore::verdict::explorer_expectation(sc, report, history) else {
        return (None, Named::default(), 0);
    };
    let named = v
        .found
        .first()
        .map(|f| ratelab_check::timeline::named(&f.detail))
        .unwrap_or_default();
    let found: Vec<String> = v
        .found
        .iter()
        .map(|f| format!("{}: {}", f.signature(), f.detail))
        .collect();
    if !v.problems.is_empty() {
        report.failures.extend(v.problems);
        report.passed = false;
    }
    let mut line = format!(
        "  explorer's checkers (expected {}): {}",
        sc.spec().expect.explorer.as_deref().unwrap_or("pass"),
        if found.is_empty() {
            "nothing found".to_owned()
        } else {
            found.join("; ")
        }
    );
    if v.unknown_keys > 0 {
        line += &format!(
            "; {} keys unknown (the linearizability search ran out of its budget: not passed)",
            v.unknown_keys
        );
    }
    (Some(line), named, v.unknown_keys)
}
