//! `ratelab run`'s table, per-seed lines, the files it writes and a failure's report.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The scenario's summary and the table's column names, their widths [`row`]'s. The table
/// is written a row at a time, each seed as soon as it is done, with its gateway, job and
/// verdict lines under it, so its columns are padded here rather than laid out at the end.
pub fn header(out: &mut impl Write, sc: &ratelab_sim::Scenario) {
    let _ = writeln!(
        out,
        "{} — {}\n{} path, {} gateways, {} client groups, {} faults, {} ms\n",
        sc.name(),
        sc.spec().description,
        sc.path().name(),
        sc.spec().gateways.get(),
        sc.spec().clients.len(),
        sc.spec().faults.len(),
        sc.spec().duration_ms.get()
    );
    let _ = writeln!(
        out,
        "{:>8} {:>9} {:>8} {:>8} {:>7} {:>10} {:>12} {:>13}  {:<16}  result",
        "seed",
        "requests",
        "allowed",
        "denied",
        "errors",
        "max_excess",
        "total_excess",
        "max_in_window",
        "trace_hash"
    );
}

/// Writes seed `seed`'s request logs to `DIR/seed-SEED/gateway-N.jsonl`, one file per
/// gateway (empty for a gateway that answered nothing); the directory written.
pub fn write_request_logs(
    dir: &Path,
    sc: &ratelab_sim::Scenario,
    history: &ratelab_sim::History,
    seed: u64,
) -> Result<PathBuf, String> {
    let dir = dir.join(format!("seed-{seed}"));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        (0..sc.spec().gateways.get()).try_for_each(|g| {
            let name = format!("gateway-{g}");
            let text = history.request_logs.get(&name).map_or("", String::as_str);
            std::fs::write(dir.join(format!("{name}.jsonl")), text)
        })
    });
    written.map_err(|e| format!("request logs in {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Where seed `seed`'s timeline goes: `path` itself, or `NAME-seed-SEED.html` beside it
/// when the run has `several` seeds.
pub fn timeline_path(path: &Path, seed: u64, several: bool) -> PathBuf {
    if !several {
        return path.to_owned();
    }
    let stem = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    path.with_file_name(format!("{stem}-seed-{seed}.html"))
}

/// A failed seed's report: its failures, the worst window and the commands that replay it.
pub fn failure(r: &ratelab_sim::Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nFAILED: scenario {} ({}), seed {}",
        r.scenario, r.file, r.seed
    );
    for f in &r.failures {
        let _ = writeln!(s, "  {f}");
    }
    if let Some(w) = &r.excess_witness {
        let _ = writeln!(
            s,
            "  worst window: key {:?}, {} admitted in [{} ns, {} ns] against a bound of {}; requests {:?}",
            w.key, w.admitted, w.from_ns, w.to_ns, w.bound, w.ids
        );
    }
    let _ = writeln!(s, "  replay:");
    for c in ratelab_sim::replay_commands(&r.scenario, &r.file, r.seed) {
        let _ = writeln!(s, "    {c}");
    }
    s
}

/// One seed's line of `ratelab run`'s table.
pub fn row(out: &mut impl Write, r: &ratelab_sim::Report) {
    let _ = writeln!(
        out,
        "{:>8} {:>9} {:>8} {:>8} {:>7} {:>10} {:>12} {:>13}  {:<16}  {}",
        r.seed,
        r.requests,
        r.figure("allowed"),
        r.figure("denied"),
        r.figure("errors"),
        r.figure("max_excess"),
        r.figure("total_excess"),
        r.figure("max_in_window"),
        r.trace_hash,
        if r.passed { "pass" } else { "FAIL" }
    );
}

/// The gateway's failure handling for one seed, when there was any.
pub fn gateway_line(out: &mut impl Write, r: &ratelab_sim::Report) {
    let c = &r.gateway_counters;
    if r.figure("fail_open") == 0 && r.figure("bypassed") == 0 && c.breaker_opened == 0 {
        return;
    }
    let mut line = format!(
        "{:>8}   fail-open {} {:?}",
        "",
        r.figure("fail_open"),
        r.fail_open_by_reason
    );
    if let Some([p50, p99, max]) = r.fail_open_latency_percentiles_ms {
        line.push_str(&format!(
            ", answer latency p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms"
        ));
    }
    line.push_str(&format!(
        "; bypassed {}; breaker opened {}, closed {}",
        r.figure("bypassed"),
        c.breaker_opened,
        c.breaker_closed
    ));
    let _ = writeln!(out, "{line}");
}

/// The cleanup job's lease and fencing figures for one seed, when it ran.
pub fn job_line(out: &mut impl Write, r: &ratelab_sim::Report) {
    let Some(j) = &r.job else { return };
    let mut line = format!(
        "{:>8}   cleanup job ({}): {} grants, {} runs, stale commits {} rejected / {} accepted, \
         {} buckets deleted, longest gap {:.3} ms",
        "",
        if j.fencing { "fenced" } else { "NOT fenced" },
        j.grants,
        j.runs,
        j.stale_rejected,
        j.stale_accepted,
        j.keys_removed,
        j.max_gap_ms
    );
    if let Some(first) = &j.first_live_delete {
        line.push_str(&format!(
            "; {} live buckets deleted, the first: {first}",
            j.live_deleted
        ));
    }
    let _ = writeln!(out, "{line}");
}

/// One event of a history, a sent request with its client, key, gateway and cost.
pub fn describe(e: &ratelab_sim::history::Timed, h: &ratelab_sim::History) -> String {
    use ratelab_sim::history::Event;
    match &e.event {
        Event::Sent { id } => {
            let r = &h.requests[*id as usize];
            format!(
                "{:>12.6} ms  sent      #{id} client {} key {:?} gateway {} cost {}",
                e.at.as_u64() as f64 / 1e6,
                r.client,
                r.key,
                r.gateway,
                r.cost
            )
        }
        _ => e.to_string(),
    }
}
