//! The timeline of a simulated run ([`ratelab_check::timeline`] draws it): its frame from
//! the scenario and the report, the key to show, and the page written to a file
//! (`ratelab run --timeline`, and the explorer's shrunk failures).

use ratelab_check::history::History;
use ratelab_check::timeline::{Frame, bound_of, draw};
use ratelab_core::Policy;
use ratelab_sim::{Report, Scenario};

/// The key a picture of this run should show: the envelope's witness, else the key with the
/// most requests.
pub fn default_key(report: &Report, h: &History) -> Option<String> {
    if let Some(w) = &report.excess_witness {
        return Some(w.key.clone());
    }
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in &h.requests {
        *counts.entry(r.key.as_str()).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(k, n)| (*n, std::cmp::Reverse(*k)))
        .map(|(k, _)| k.to_owned())
}

/// Fault windows, in ms, with a label.
fn fault_windows(sc: &Scenario) -> Vec<(f64, f64, &'static str)> {
    sc.spec()
        .faults
        .iter()
        .filter_map(|f| {
            f.window_ms()
                .map(|(from, until)| (from as f64, until as f64, f.kind().name()))
        })
        .collect()
}

/// The frame of a simulated run's picture of `key`.
pub fn frame_of_run(sc: &Scenario, report: &Report, key: &str) -> Frame {
    // The violating window: the envelope's witness, for a token bucket (a window
    // policy's report holds it to L + L·Δt/W, which a correct fixed window exceeds at
    // a boundary).
    let bucket = matches!(sc.policy(), Policy::TokenBucket(_));
    let violation = report
        .excess_witness
        .as_ref()
        .filter(|w| bucket && w.key == key)
        .map(|w| {
            (
                w.from_ns as f64 / 1e6,
                w.to_ns as f64 / 1e6,
                w.admitted,
                w.bound,
            )
        });
    Frame {
        title: format!("{} — seed {} — key {key}", report.scenario, report.seed),
        description: sc.spec().description.clone(),
        row_label: "gateway",
        rows: sc.spec().gateways.get() as usize,
        duration_ms: sc.spec().duration_ms.get() as f64,
        faults: fault_windows(sc),
        violation,
        bound: bound_of(sc.policy()),
    }
}

/// Writes the page of `key` (else the run's [`default_key`]) to `path`, outlining request
/// `mark`; `Ok(false)` when the run has no requests to draw.
pub fn write(
    sc: &Scenario,
    report: &Report,
    h: &History,
    key: Option<String>,
    mark: Option<u64>,
    path: &std::path::Path,
) -> Result<bool, String> {
    let Some(key) = key.or_else(|| default_key(report, h)) else {
        return Ok(false);
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, html(sc, report, h, &key, mark))
        .map_err(|e| format!("timeline {}: {e}", path.display()))?;
    Ok(true)
}

/// The page for `key`'s requests in this run, outlining request `mark`.
pub fn html(sc: &Scenario, report: &Report, h: &History, key: &str, mark: Option<u64>) -> String {
    draw(&frame_of_run(sc, report, key), h, key, mark)
}
