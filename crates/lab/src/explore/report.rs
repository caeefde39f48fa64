//! What `ratelab explore` prints and writes: a campaign's report, the planted-bug table of
//! the write-up, and the explorer's verdict on a scenario that asks for it.

use crate::explore::{self, ExploreReport, Sut, shrink};
use ratelab_check::timeline::Named;
use std::fmt::Write as _;

/// What each checker judged over the campaign, and those that applied and judged nothing.
fn coverage(out: &mut String, r: &ExploreReport) {
    if r.coverage_by_checker.is_empty() {
        return;
    }
    let mut t = ratelab_probe::table::numeric(["checker", "seeds it applied to", "judged"], 1);
    for (k, c) in &r.coverage_by_checker {
        t.add_row([k.clone(), c.seeds.to_string(), c.judged.to_string()]);
    }
    let _ = writeln!(
        out,
        "coverage by checker (requests judged; the cleanup job's commits):\n{t}"
    );
    let blind = r.blind();
    if !blind.is_empty() {
        let _ = writeln!(
            out,
            "FAILED: applied but judged nothing in the whole campaign: {}",
            blind.join(", ")
        );
    }
}

/// An explore campaign's report as `ratelab explore` prints it: what it ran, and each failure
/// found with its replay. `wall` is its wall-clock time in seconds (NaN for a merged report,
/// which has none).
pub fn render(r: &ExploreReport, wall: f64) -> String {
    let mut out = String::new();
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
    let _ = writeln!(
        out,
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
    let _ = writeln!(out, "seeds with each fault kind: {}", kinds.join(", "));
    if r.unknown_seeds > 0 {
        let _ = writeln!(
            out,
            "seeds where the linearizability search ran out of budget on a key (unknown, not passed): {}",
            r.unknown_seeds
        );
        let _ = writeln!(
            out,
            "  raise the budget with --budget N (states per key and epoch; {} by default)",
            explore::verdict::LINEARIZABILITY_BUDGET
        );
    }
    let (hit, never): (Vec<_>, Vec<_>) = r.reached.iter().partition(|(_, n)| **n > 0);
    let hit: Vec<String> = hit.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let never: Vec<&str> = never.iter().map(|(k, _)| k.as_str()).collect();
    let _ = writeln!(out, "seeds reaching each situation: {}", hit.join(", "));
    if !never.is_empty() {
        let _ = writeln!(out, "never reached: {}", never.join(", "));
    }
    coverage(&mut out, r);
    if r.found.is_empty() {
        let _ = writeln!(out, "no failures");
        return out;
    }
    for f in &r.found {
        let _ = writeln!(
            out,
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
            let _ = writeln!(
                out,
                "  shrunk in {} runs{}: {} → {}\n  regression: {}",
                s.runs,
                if s.exhausted { " (budget spent)" } else { "" },
                size(&s.before),
                size(&s.after),
                s.replay
            );
        }
    }
    out
}

/// The planted-bug table: its markdown, and how many planted bugs no seed found.
#[derive(Clone, Debug)]
pub struct PlantedTable {
    /// The table, as the write-up quotes it.
    pub markdown: String,
    /// Planted bugs not found within the seeds allowed.
    pub missing: usize,
}

/// `ratelab explore table`: every planted bug found, shrunk, tabled, and written into the
/// write-up's block and `results`; `progress` hears a line as each bug starts and is found.
pub fn table(
    max_seeds: u64,
    threads: usize,
    runs: u32,
    regressions: &std::path::Path,
    writeup: &std::path::Path,
    results: &std::path::Path,
    progress: &dyn Fn(&str),
) -> Result<PlantedTable, String> {
    let mut rows = Vec::new();
    for sut in Sut::planted() {
        progress(&format!("{}…", sut.name()));
        let d = explore::table::detect(sut, max_seeds, threads, regressions, runs)?;
        progress(&format!(
            "  seed {:?} in {:.1} s: {}",
            d.first_seed,
            d.wall_s,
            d.signatures.join(", ")
        ));
        rows.push(d);
    }
    let markdown = explore::table::markdown(&rows);
    let text =
        std::fs::read_to_string(writeup).map_err(|e| format!("{}: {e}", writeup.display()))?;
    let text =
        crate::output::replace_marked(&text, "planted", &markdown).map_err(|e| e.to_string())?;
    std::fs::write(writeup, text).map_err(|e| format!("{}: {e}", writeup.display()))?;
    let json = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())? + "\n";
    std::fs::write(results, json).map_err(|e| format!("{}: {e}", results.display()))?;
    Ok(PlantedTable {
        markdown,
        missing: rows.iter().filter(|r| r.first_seed.is_none()).count(),
    })
}

/// Adds the explorer's verdict to a run of a scenario that asks for it (`expect.explorer`),
/// and says what it was, with the key and request its first failure names, and how many keys
/// its linearizability search could not decide (unknown).
pub fn explorer_verdict(
    sc: &ratelab_sim::Scenario,
    report: &mut ratelab_sim::Report,
    history: &ratelab_sim::History,
) -> (Option<String>, Named, u64) {
    let Some(v) = explore::verdict::explorer_expectation(sc, history) else {
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
