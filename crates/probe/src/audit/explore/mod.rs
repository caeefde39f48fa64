//! Exploring audits (`ratelab audit --explore`): seeded schedules against a real target, in
//! the manner of the simulated explorer.
//!
//! Each seed draws a [`schedule::Schedule`] ([`schedule::draw`]): keys, clients paced at a
//! share of the claimed rate, bursts on and around window boundaries, idle gaps across the
//! claim's time to forget a key, the instance of every request, and store faults at drawn
//! moments. [`run::run`] sends it to the started target and applies its faults;
//! [`judge::found`] holds every answer to the claimed family's specification (the probe's
//! checkers), classifies the answers a fault touched, and holds the target to its declared
//! failure mode and to limiting again after its declared recovery.
//!
//! A check that fails is *repeated*: the same schedule run again until it has run `n`
//! times, the finding reported as failing in `k` of them. Then the schedule is *shrunk*
//! ([`shrink::candidates`]: fewer faults, keys, requests, instances) while it still fails in
//! most of `n` runs, and written out twice: as JSON that `ratelab audit --explore TARGET
//! --replay FILE` runs again, and as a standalone Python script ([`repro::script`]) that
//! drives the target and checks the violation with its own few lines. [`confirm::confirm`]
//! (`--confirm`) runs each reproducer outside ratelab, k of n, and records what it printed.
//!
//! A target whose answers on a healthy store are not decisions could not run: the campaign
//! stops there, its instances' logs kept and named, and nothing is judged.

pub mod confirm;
pub mod judge;
pub mod repro;
pub mod run;
pub mod schedule;
pub mod shrink;

use super::{Started, Target};
use crate::probe::http::HttpTarget;
use crate::probe::{forget_time, fresh_prefix, interval_at};
use judge::{Classified, Found, Holding};
use schedule::{FaultKind, Schedule, Shape};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The first seed.
    pub first: u64,
    /// Seeds, at most.
    pub seeds: u64,
    /// Runs of a failing schedule (n of "k of n").
    pub repeats: u32,
    /// The campaign's time bound: no seed starts after it.
    pub time: Duration,
    /// The longest schedule.
    pub length: Duration,
    /// The most requests in one schedule.
    pub most_requests: usize,
    /// The time a finding's shrinking may take (0: not shrunk).
    pub shrink: Duration,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// Whether to install what is missing.
    pub install: bool,
}

impl Settings {
    /// A campaign worth running: 30 seeds or 20 minutes, schedules of up to 12 s.
    pub fn full() -> Settings {
        Settings {
            first: 1,
            seeds: 30,
            repeats: 3,
            time: Duration::from_secs(1_200),
            length: Duration::from_secs(12),
            most_requests: 2_000,
            shrink: Duration::from_secs(120),
            budget: ratelab_check::linearizable::DEFAULT_BUDGET,
            install: true,
        }
    }

    /// A short campaign for tests: a few seeds of short schedules, repeated twice, not
    /// shrunk.
    pub fn bounded() -> Settings {
        Settings {
            seeds: 3,
            repeats: 2,
            time: Duration::from_secs(20),
            length: Duration::from_secs(4),
            most_requests: 600,
            shrink: Duration::ZERO,
            budget: 100_000,
            install: false,
            ..Settings::full()
        }
    }
}

/// One finding of a campaign: a check that failed, on the first seed that showed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    /// The check.
    pub check: String,
    /// Its failure line, from the first run.
    pub line: String,
    /// The seed.
    pub seed: u64,
    /// Runs of the (shrunk) schedule in which the check failed.
    pub k: u32,
    /// Runs.
    pub n: u32,
    /// Seeds of the campaign on which the check failed.
    pub seeds: u64,
    /// Requests and faults of the seed's schedule, then of the shrunk one.
    pub shrunk_from: (usize, usize),
    /// Requests and faults of the schedule written out.
    pub shrunk_to: (usize, usize),
    /// The schedule written out, as JSON.
    pub schedule: Option<PathBuf>,
    /// The standalone reproducer.
    pub script: Option<PathBuf>,
    /// The command that replays it.
    pub replay: String,
    /// Its reproducer run outside ratelab (`--confirm`), if it has been.
    #[serde(default)]
    pub outside: Option<confirm::Outside>,
}

/// What a campaign did and found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Explored {
    /// `NAME/VARIANT`.
    pub target: String,
    /// The claimed policy.
    pub policy: String,
    /// Seeds run.
    pub seeds: u64,
    /// Requests sent, repeats and shrinking included.
    pub requests: u64,
    /// Runs of a schedule, repeats and shrinking included.
    pub runs: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Seeds whose every check held.
    pub passed: u64,
    /// Seeds on which some key could not be decided (and nothing failed).
    pub unknown: u64,
    /// Findings, one a check.
    pub findings: Vec<Finding>,
    /// The answers a store fault touched, over every run.
    pub classified: Classified,
    /// Why the campaign could not run, if it could not, with the instances' logs kept.
    pub could_not_run: Option<String>,
    /// The versions of what the target runs.
    pub versions: std::collections::BTreeMap<String, String>,
}

/// Where a campaign that could not run keeps `target`'s instances' logs: a directory of
/// its own under the system's temporary directory, left in place.
fn logs_dir(target: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "ratelab-explore-logs-{}-{}",
        slug(target),
        std::process::id()
    ))
}

/// The file name of `target`'s artifacts: `NAME-VARIANT`.
pub fn slug(target: &str) -> String {
    target.replace('/', "-")
}

/// What a schedule is drawn for: a target holding `claim`, with `instances` on `store`,
/// declaring `recovery`.
pub fn shape(
    claim: &ratelab_check::probe::Claim,
    store: super::recipe::StoreKind,
    instances: u32,
    recovery: ratelab_core::Nanos,
    s: &Settings,
) -> Shape {
    let forget = forget_time(claim);
    let faults: &'static [FaultKind] = match store {
        super::recipe::StoreKind::Redis => {
            &[FaultKind::Freeze, FaultKind::Restart, FaultKind::Slow]
        }
        super::recipe::StoreKind::Memcached => &[FaultKind::Freeze, FaultKind::Restart],
        super::recipe::StoreKind::None => &[],
    };
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Shape {
        window_us: us(forget / 2).max(1_000),
        forget_us: us(forget),
        rate_us: us(interval_at(claim, 100)).max(1),
        burst: claim.burst(),
        instances,
        faults,
        recovery_us: recovery.as_u64() / 1_000,
        length_us: us(s.length),
        most_requests: s.most_requests,
    }
}

/// A started target and what it is held to, for runs of schedules.
struct Bench {
    target: HttpTarget,
    started: Started,
    holding: Holding,
    runs: u64,
    requests: u64,
    classified: Classified,
}

impl Bench {
    /// Starts `t` (installing what is missing with `s.install`) and waits until every
    /// instance decides: the outer error if it cannot start, the inner (with the instances'
    /// logs kept under `logs`) if it starts and answers no decisions.
    async fn start(t: &Target, s: &Settings, logs: &Path) -> Result<Result<Bench, String>, String> {
        let started = super::start(t, s.install).await?;
        let target =
            HttpTarget::new(&started.spec, 256).map_err(|e| format!("{}: {e}", t.name()))?;
        if let Err(why) = super::decided(&target, t.instances(), &fresh_prefix()).await {
            let kept = started.running.keep_logs(logs);
            return Ok(Err(format!("{why}; the instances' logs: {kept:?}")));
        }
        let holding = Holding {
            claim: started.claim,
            clock_resolution: started.clock_resolution,
            budget: s.budget,
            mode: t.failure_mode(),
            recovery: started.recovery,
            epoch_windows: t.loaded.recipe.probe.epoch_windows,
            instances: t.instances(),
        };
        Ok(Ok(Bench {
            target,
            started,
            holding,
            runs: 0,
            requests: 0,
            classified: Classified::default(),
        }))
    }

    /// One run of `schedule`, judged.
    async fn once(&mut self, schedule: &Schedule) -> Result<Found, String> {
        let prefix = format!("{}-s{}", fresh_prefix(), schedule.seed);
        let ran = run::run(
            schedule,
            &self.target,
            self.started.running.store.as_mut(),
            &prefix,
        )
        .await?;
        self.runs += 1;
        self.requests += ran.observations.len() as u64;
        let found = judge::found(&ran, &self.holding);
        let c = &mut self.classified;
        c.in_flight_at_start += found.classified.in_flight_at_start;
        c.sent_during += found.classified.sent_during;
        c.sent_in_recovery += found.classified.sent_in_recovery;
        c.answered_after += found.classified.answered_after;
        Ok(found)
    }

    /// In how many of `n` runs of `schedule` `check` failed; with `need`, stops once that
    /// many failed or can no longer.
    async fn repeated(
        &mut self,
        schedule: &Schedule,
        check: &str,
        n: u32,
        need: Option<u32>,
    ) -> Result<u32, String> {
        let mut k = 0;
        for ran in 0..n {
            if let Some(need) = need
                && (k >= need || k + (n - ran) < need)
            {
                break;
            }
            let f = self.once(schedule).await?;
            if f.could_not_run.is_some() {
                break;
            }
            k += u32::from(f.failures.contains_key(check));
        }
        Ok(k)
    }
}

/// Runs a campaign against `t`, writing each finding's schedule and reproducer under `out`.
/// `progress` is told each seed's outcome as a line.
pub async fn explore(
    t: &Target,
    s: &Settings,
    out: &Path,
    progress: impl Fn(&str),
) -> Result<Explored, String> {
    let began = Instant::now();
    let dir = out.join(slug(&t.name()));
    let mut e = Explored {
        target: t.name(),
        policy: t.policy().to_owned(),
        ..Explored::default()
    };
    let logs = logs_dir(&t.name());
    let mut bench = match Bench::start(t, s, &logs).await? {
        Ok(b) => b,
        Err(why) => {
            e.could_not_run = Some(why);
            return Ok(e);
        }
    };
    e.versions = bench.started.versions.clone();
    let shape = shape(
        &bench.started.claim,
        t.store(),
        t.instances(),
        bench.started.recovery,
        s,
    );
    for seed in s.first..s.first.saturating_add(s.seeds) {
        if began.elapsed() > s.time {
            break;
        }
        let schedule = schedule::draw(seed, &shape);
        let found = bench.once(&schedule).await?;
        e.seeds += 1;
        if let Some(why) = found.could_not_run {
            let logs = bench.started.running.keep_logs(&logs);
            e.could_not_run = Some(format!("seed {seed}: {why}; the instances' logs: {logs:?}"));
            break;
        }
        progress(&format!(
            "seed {seed}: {} requests, {}",
            schedule.requests.len(),
            if found.failed() {
                found
                    .failures
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            } else if found.unknown > 0 {
                "unknown".to_owned()
            } else {
                "passed".to_owned()
            }
        ));
        e.passed += u64::from(!found.failed() && found.unknown == 0);
        e.unknown += u64::from(!found.failed() && found.unknown > 0);
        let new: Vec<&String> = found
            .failures
            .keys()
            .filter(|check| !e.findings.iter().any(|f| &f.check == *check))
            .collect();
        for f in e.findings.iter_mut() {
            f.seeds += u64::from(found.failures.contains_key(&f.check));
        }
        // The seed's schedule run again, once for all its new findings: k of n for each.
        let mut k: std::collections::BTreeMap<&String, u32> = new.iter().map(|c| (*c, 1)).collect();
        for _ in 1..s.repeats.max(1) {
            if new.is_empty() {
                break;
            }
            let again = bench.once(&schedule).await?;
            for (check, n) in k.iter_mut() {
                *n += u32::from(again.failures.contains_key(*check));
            }
        }
        for check in new {
            let line = &found.failures[check];
            let f = finding(&mut bench, t, s, (&schedule, k[check]), check, line, &dir).await?;
            progress(&format!(
                "  {check}: {} of {} runs, shrunk to {} requests",
                f.k, f.n, f.shrunk_to.0
            ));
            e.findings.push(f);
        }
    }
    e.runs = bench.runs;
    e.requests = bench.requests;
    e.classified = bench.classified;
    e.seconds = began.elapsed().as_secs_f64();
    Ok(e)
}

/// A failing check on `schedule`, which failed it in `k` of the campaign's runs: shrunk and
/// written out.
async fn finding(
    bench: &mut Bench,
    t: &Target,
    s: &Settings,
    (schedule, mut k): (&Schedule, u32),
    check: &str,
    line: &str,
    dir: &Path,
) -> Result<Finding, String> {
    let n = s.repeats.max(1);
    let need = n.div_ceil(2);
    let mut current = schedule.clone();
    let shrinking = Instant::now();
    'smaller: while shrinking.elapsed() < s.shrink {
        for c in shrink::candidates(&current) {
            if shrinking.elapsed() >= s.shrink {
                break 'smaller;
            }
            if bench.repeated(&c, check, n, Some(need)).await? >= need {
                current = c;
                continue 'smaller;
            }
        }
        break;
    }
    if current != *schedule {
        k = bench.repeated(&current, check, n, None).await?;
    }
    let size = |s: &Schedule| (s.requests.len(), s.faults.len());
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = dir.join(format!("{check}.json"));
    let text = serde_json::to_string_pretty(&current).map_err(|e| e.to_string())?;
    std::fs::write(&json, text + "\n").map_err(|e| format!("{}: {e}", json.display()))?;
    let replay = format!(
        "ratelab audit --explore {} --replay {}",
        t.name(),
        json.display()
    );
    let script = dir.join(format!("{check}.py"));
    write_script(bench, t, &current, line, &replay, &script)?;
    Ok(Finding {
        check: check.to_owned(),
        line: line.to_owned(),
        seed: schedule.seed,
        k,
        n,
        seeds: 1,
        shrunk_from: size(schedule),
        shrunk_to: size(&current),
        schedule: Some(json),
        script: Some(script),
        replay,
        outside: None,
    })
}

/// The keys a reproducer of `schedule` checks: those `line` names that shrinking kept, or
/// every key of it when it kept none of them (it fails on another).
fn kept_keys(line: &str, schedule: &Schedule) -> Vec<u32> {
    let keys = schedule.keys();
    named_keys(line)
        .into_iter()
        .filter(|k| keys.contains(k))
        .collect()
}

/// The schedule's keys a failure line names (`…-k2@0`).
fn named_keys(line: &str) -> Vec<u32> {
    let mut keys: Vec<u32> = line
        .match_indices("-k")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            (rest[digits..].starts_with('@')).then(|| rest[..digits].parse().ok())?
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Writes `schedule`'s standalone reproducer of the failure `line` to `to`.
fn write_script(
    bench: &Bench,
    t: &Target,
    schedule: &Schedule,
    line: &str,
    replay: &str,
    to: &Path,
) -> Result<(), String> {
    let r = &t.loaded.recipe.probe;
    let py = repro::script(
        &repro::Script {
            target: &t.name(),
            finding: line,
            check: to.file_stem().and_then(|c| c.to_str()).unwrap_or(""),
            policy: t.policy(),
            claim: bench.holding.claim,
            clock_resolution: bench.holding.clock_resolution,
            urls: bench.target.urls(),
            key_header: r.key_header.as_deref(),
            deny: &r.deny_status,
            replay,
            keys: &kept_keys(line, schedule),
            recovery: bench.holding.recovery,
        },
        schedule,
    );
    std::fs::write(to, py).map_err(|e| format!("{}: {e}", to.display()))
}

/// The schedule in `file`, as a campaign wrote it; what is wrong with it, at its line and
/// column or its JSON path, if it cannot be run.
pub fn read_schedule(file: &Path) -> Result<Schedule, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let schedule: Schedule = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: line {}, column {}: {e} (expected a schedule that `ratelab audit --explore` wrote)",
            file.display(),
            e.line(),
            e.column()
        )
    })?;
    schedule
        .check()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(schedule)
}

/// Runs `schedule` (read from `file`) `n` times against `t`: the checks that failed, each with the
/// runs it failed in. Where the check the file is named for failed, its reproducer beside it
/// is written again from this run.
pub async fn replay(
    t: &Target,
    s: &Settings,
    file: &Path,
    schedule: &Schedule,
) -> Result<(Vec<(String, u32)>, u32), String> {
    let mut bench = Bench::start(t, s, &logs_dir(&t.name()))
        .await?
        .map_err(|e| format!("{}: could not run: {e}", t.name()))?;
    let n = s.repeats.max(1);
    let mut failed: std::collections::BTreeMap<String, u32> = Default::default();
    let mut lines: std::collections::BTreeMap<String, String> = Default::default();
    for _ in 0..n {
        let f = bench.once(schedule).await?;
        if let Some(why) = f.could_not_run {
            return Err(format!("{}: could not run: {why}", t.name()));
        }
        for (check, line) in f.failures {
            *failed.entry(check.clone()).or_default() += 1;
            lines.entry(check).or_insert(line);
        }
    }
    // The reproducer beside a finding's schedule (`CHECK.json` → `CHECK.py`), written again
    // from this run's failure of that check.
    let check = file.file_stem().and_then(|c| c.to_str()).unwrap_or("");
    if let Some(line) = lines.get(check) {
        let replay = format!(
            "ratelab audit --explore {} --replay {}",
            t.name(),
            file.display()
        );
        write_script(
            &bench,
            t,
            schedule,
            line,
            &replay,
            &file.with_extension("py"),
        )?;
    }
    Ok((failed.into_iter().collect(), n))
}

/// A campaign as the terminal prints it.
pub fn text(e: &Explored) -> String {
    let mut s = format!(
        "{} (exploring, held to {}): {} seeds, {} runs, {} requests, {:.0} s; {} seeds passed, {} unknown\n",
        e.target, e.policy, e.seeds, e.runs, e.requests, e.seconds, e.passed, e.unknown
    );
    if let Some(why) = &e.could_not_run {
        s.push_str(&format!("  could not run: {why}\n"));
    }
    for f in &e.findings {
        s.push_str(&format!(
            "  {} (seed {}, {} of {} runs, on {} seeds; {} requests, shrunk from {}): {}\n    replay: {}\n    reproducer: {}\n",
            f.check,
            f.seed,
            f.k,
            f.n,
            f.seeds,
            f.shrunk_to.0,
            f.shrunk_from.0,
            f.line,
            f.replay,
            f.script
                .as_ref()
                .map_or("-".to_owned(), |p| format!("python3 {}", p.display()))
        ));
    }
    for f in &e.findings {
        if let Some(o) = &f.outside {
            s.push_str(&format!(
                "  {}: its reproducer, run outside ratelab, reproduced it in {}\n",
                f.check,
                o.summary()
            ));
            for line in &o.said {
                s.push_str(&format!("    | {line}\n"));
            }
        }
    }
    let c = &e.classified;
    s.push_str(&format!(
        "  requests a store fault touched: {} in flight at its start, {} sent during it ({} of them answered after), {} sent in the recovery\n",
        c.in_flight_at_start, c.sent_during, c.answered_after, c.sent_in_recovery
    ));
    s
}

/// Writes `out/NAME-VARIANT.json`.
pub fn save(out: &Path, e: &Explored) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|x| format!("{}: {x}", out.display()))?;
    let path = out.join(format!("{}.json", slug(&e.target)));
    let text = serde_json::to_string_pretty(e).map_err(|x| x.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|x| format!("{}: {x}", path.display()))
}

/// Every campaign saved under `out`, by target.
pub fn saved(out: &Path) -> Result<Vec<Explored>, String> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(Vec::new());
    };
    let mut all = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "json") {
            let text =
                std::fs::read_to_string(&path).map_err(|x| format!("{}: {x}", path.display()))?;
            all.push(
                serde_json::from_str::<Explored>(&text)
                    .map_err(|x| format!("{}: {x}", path.display()))?,
            );
        }
    }
    all.sort_by(|a, b| a.target.cmp(&b.target));
    Ok(all)
}

/// The exploring audits' section of `docs/AUDITS.md`.
pub fn section(all: &[Explored]) -> String {
    if all.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "## Exploring audits\n\n`ratelab audit --explore TARGET` runs seeded schedules against the target \
         (keys, clients paced at shares of the claimed rate, bursts on and around window \
         boundaries, idle gaps across the time to forget a key, the instance of each request, \
         store faults at drawn moments), judges every answer, repeats each finding's schedule \
         (k of n runs) and shrinks it to a schedule and a standalone Python reproducer under \
         `docs/results/explore/`. The rows below come from `ratelab audit --explore --seeds 10 \
         --seconds 120 --shrink-seconds 40 --repeats 3` (150 s for the first targets), then \
         `ratelab audit --render`; real processes on a 2-core machine, so another run differs \
         in detail, and the seeds a target reached depend on how long its findings took to \
         repeat and shrink. Each reproducer was then run outside ratelab by `ratelab audit \
         --explore TARGET --confirm --repeats 3`: the target started afresh, then only \
         `python3 CHECK.py` with the instances' URLs and the store's pid, restart command and \
         port; \"outside ratelab k of n\" counts the runs in which the script printed the \
         violation and exited 1.\n\n\
         | target | seeds | runs | requests | seconds | seeds passed | finding (k of n, seeds, requests after shrinking; reproducer outside ratelab) |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
    );
    for e in all {
        let findings: Vec<String> = e
            .findings
            .iter()
            .map(|f| {
                let outside = f
                    .outside
                    .as_ref()
                    .map_or("not run".to_owned(), confirm::Outside::summary);
                format!(
                    "{} ({} of {}, {} seeds, {} requests; outside ratelab {outside})",
                    f.check, f.k, f.n, f.seeds, f.shrunk_to.0
                )
            })
            .collect();
        let findings = match &e.could_not_run {
            Some(why) => format!("could not run: {why}"),
            None if findings.is_empty() => "none".to_owned(),
            None => findings.join("; "),
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {:.0} | {} | {} |\n",
            e.target, e.seeds, e.runs, e.requests, e.seconds, e.passed, findings
        ));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reproducer_checks_the_named_keys_shrinking_kept() {
        use super::schedule::{Planned, Schedule};
        let s = Schedule {
            seed: 1,
            align_us: 1_000,
            requests: vec![Planned {
                at_us: 0,
                key: 1,
                instance: 0,
            }],
            faults: Vec::new(),
        };
        assert_eq!(super::kept_keys("key \"p-s1-k1@0\"", &s), vec![1]);
        // Shrinking kept another key, which fails as well: every key is checked.
        assert!(super::kept_keys("key \"p-s1-k0@0\"", &s).is_empty());
    }

    #[test]
    fn a_failure_line_names_its_keys() {
        let line = "linearizable: key \"ratelab-probe-1-ab-s6-k2@0\": request 59: admitted";
        assert_eq!(super::named_keys(line), vec![2]);
        let both = "envelope: key \"p-s1-k0@1\" and key \"p-s1-k13@0\"";
        assert_eq!(super::named_keys(both), vec![0, 13]);
        assert!(super::named_keys("failure-mode: declared fail-closed").is_empty());
    }
}
