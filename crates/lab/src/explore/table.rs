//! The planted-bug benchmark: for each planted bug, how many seeds and how much wall time the
//! explorer takes to find it with no hint (seeds 1, 2, … in order), what it finds there, and
//! how small the shrinker makes it. `ratelab explore table` writes the table into
//! `docs/EXPLORER.md` and the figures into `docs/results/planted.json`; a test reruns the
//! search and checks the seeds and signatures against today's code (the wall times are this
//! machine's and are not checked).

use super::shrink::{self, ShrinkSummary};
use super::{Campaign, Found, Outcome, Sut};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// One planted bug's detection.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Detection {
    /// The planted bug.
    pub sut: Sut,
    /// The first seed that fails (seeds run from 1), if any within the search's bound.
    pub first_seed: Option<u64>,
    /// Wall seconds until it was found, on every core.
    pub wall_s: f64,
    /// The failures at that seed, as `class/checker`, in order.
    pub signatures: Vec<String>,
    /// The first of them, shrunk.
    pub shrunk: Option<ShrinkSummary>,
}

/// Searches seeds 1 to `max_seeds` in order for `sut`'s first failing seed.
pub fn first_failure(sut: Sut, max_seeds: u64, threads: usize) -> Option<Outcome> {
    let batch = (threads.max(1) * 4) as u64;
    let mut first = 1;
    while first <= max_seeds {
        let count = batch.min(max_seeds - first + 1);
        let c = Campaign {
            sut,
            first,
            count,
            shard: (0, 1),
            threads,
            budget: super::verdict::LINEARIZABILITY_BUDGET,
        };
        let (_, outcomes) = super::run(&c, &|_, _| {});
        // A generator failure (an invalid draw) is the explorer's bug, not a detection.
        if let Some(o) = outcomes.into_iter().find(|o| {
            o.failures
                .iter()
                .any(|f| f.class != super::verdict::Class::Generator)
        }) {
            return Some(o);
        }
        first += count;
    }
    None
}

/// The failures of one outcome as sorted signatures.
pub fn signatures(o: &Outcome) -> Vec<String> {
    let mut s: Vec<String> = o.failures.iter().map(|f| f.signature()).collect();
    s.sort();
    s.dedup();
    s
}

/// Finds and shrinks one planted bug, writing its regression under `regressions`.
pub fn detect(
    sut: Sut,
    max_seeds: u64,
    threads: usize,
    regressions: &Path,
    runs: u32,
) -> Result<Detection, String> {
    let started = Instant::now();
    let found = first_failure(sut, max_seeds, threads);
    let wall_s = started.elapsed().as_secs_f64();
    let Some(o) = found else {
        return Ok(Detection {
            sut,
            first_seed: None,
            wall_s,
            signatures: Vec::new(),
            shrunk: None,
        });
    };
    let mut first = o.failures.clone();
    first.sort_by(|a, b| (a.class, &a.checker).cmp(&(b.class, &b.checker)));
    let f = &first[0];
    let mut found = Found {
        class: f.class,
        checker: f.checker.clone(),
        sut,
        seeds: 1,
        first_seed: o.seed,
        detail: f.detail.clone(),
        replay: String::new(),
        shrunk: None,
    };
    super::shrink_found(&mut found, regressions, None, runs)?;
    Ok(Detection {
        sut,
        first_seed: Some(o.seed),
        wall_s,
        signatures: signatures(&o),
        shrunk: found.shrunk,
    })
}

fn size(s: &shrink::Size) -> String {
    format!(
        "{} req, {} faults, {} clients, {} gw, {} ms",
        s.requests, s.faults, s.clients, s.gateways, s.duration_ms
    )
}

/// The table, as markdown.
pub fn markdown(rows: &[Detection]) -> String {
    let mut out = String::from(
        "| `--sut` | seeds to first detection | wall time | found as | drawn scenario | shrunk to | regression |\n\
         |---|---:|---:|---|---|---|---|\n",
    );
    for r in rows {
        let (before, after, file) = r.shrunk.as_ref().map_or_else(
            || ("—".to_owned(), "—".to_owned(), "—".to_owned()),
            |s| {
                let name = Path::new(&s.file)
                    .file_name()
                    .map_or(s.file.clone(), |n| n.to_string_lossy().into_owned());
                (size(&s.before), size(&s.after), format!("`{name}`"))
            },
        );
        out.push_str(&format!(
            "| `{}` | {} | {:.1} s | {} | {before} | {after} | {file} |\n",
            r.sut.name(),
            r.first_seed
                .map_or_else(|| "not found".to_owned(), |s| s.to_string()),
            r.wall_s,
            if r.signatures.is_empty() {
                "—".to_owned()
            } else {
                r.signatures.join(", ")
            },
        ));
    }
    out
}
