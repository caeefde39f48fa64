//! `ratelab explore`: find the failures no scenario names.
//!
//! Each explore seed draws a whole scenario ([`generate`]), the system under test adjusts it
//! ([`Sut`]), the simulator runs it, and every applicable checker judges the run
//! ([`verdict`]). Failures are classified (safety and which invariant, liveness, panic,
//! determinism) and deduplicated by their signature (class, checker, system under test);
//! each signature keeps its first seed, the drawn scenario (an ordinary scenario file) and
//! the command that replays it.
//!
//! Seeds run on every core, one madsim runtime per worker, and come back in seed order, so
//! a campaign's report does not depend on the number of threads. `--shard I/N` keeps the
//! seeds congruent to I modulo N, so N machines can split one seed range between them.
//!
//! Each distinct failure is shrunk ([`shrink`]) to a regression scenario judged by these
//! checkers; [`coverage`] counts the situations a campaign reached; [`table`] is the
//! planted-bug benchmark of `docs/EXPLORER.md`.
//!
//! A new planted bug goes in `ratelab_sim::planted` alone: the explorer runs every one of
//! them ([`Sut::Planted`]), put in the drawn scenario as its [`PlantedBug::needs`] says. A new
//! configuration that is wrong by design is a [`Sut`] variant with its adjustment; a new
//! checker goes in `ratelab_sim::checkers`; a new coverage probe in [`coverage`].

pub mod check;
pub mod coverage;
pub mod generate;
pub mod report;
pub mod shrink;
pub mod table;
pub mod verdict;

pub use check::{Checked, Rerun, check, first_difference};
use ratelab_sim::planted::{Needs, PlantedBug};
use ratelab_sim::{RunOptions, Scenario, ScenarioBuilder};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use verdict::{Class, Failure};

/// The limiters the explorer can be pointed at: the correct one, the configurations that
/// are wrong by design, and every planted bug of the simulator ([`PlantedBug`]), seen in real
/// deployments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sut {
    /// The atomic path on the store's clock, the cleanup job fenced: must never fail.
    Correct,
    /// Read, decide in the gateway, write back: loses updates under concurrency.
    Naive,
    /// The atomic path deciding on each gateway's own clock instead of the store's.
    GatewayClock,
    /// The cleanup job deleting what its scan found without checking it is still expired:
    /// a bucket written while the job worked is deleted live, by a leader in good standing.
    BlindCleanup,
    /// The cleanup job deleting blindly and without fencing tokens: a stale leader's old
    /// plan lands too.
    UnfencedCleanup,
    /// A planted bug, put where its [`PlantedBug::needs`] says.
    Planted(PlantedBug),
}

impl Sut {
    /// Every system under test: the correct one, then [`Sut::planted`].
    pub fn all() -> impl Iterator<Item = Sut> {
        std::iter::once(Sut::Correct).chain(Sut::planted())
    }

    /// The planted bugs: every system under test but the correct one.
    pub fn planted() -> impl Iterator<Item = Sut> {
        [
            Sut::Naive,
            Sut::GatewayClock,
            Sut::BlindCleanup,
            Sut::UnfencedCleanup,
        ]
        .into_iter()
        .chain(PlantedBug::ALL.iter().map(|&b| Sut::Planted(b)))
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Sut::Correct => "correct",
            Sut::Naive => "naive",
            Sut::GatewayClock => "gateway-clock",
            Sut::BlindCleanup => "blind-cleanup",
            Sut::UnfencedCleanup => "unfenced-cleanup",
            Sut::Planted(b) => b.command_name(),
        }
    }

    /// The system named `name`.
    pub fn parse(name: &str) -> Result<Sut, String> {
        Sut::all().find(|s| s.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Sut::all().map(|s| s.name()).collect();
            format!(
                "unknown system under test {name:?}: expected one of {}",
                names.join(", ")
            )
        })
    }

    /// Puts this system into the scenario seed `seed` drew. A planted bug of one algorithm
    /// recasts the drawn policy as that algorithm, at the same capacity and rate; a bug of the
    /// cleanup job brings a job (drawn from the seed's own stream for it) when the seed drew
    /// none.
    fn adjust(self, b: ScenarioBuilder, seed: u64) -> ScenarioBuilder {
        let with_job = |b: ScenarioBuilder| {
            if b.spec().cleanup_job.is_none() {
                generate::cleanup_job(seed).on(b)
            } else {
                b
            }
        };
        let job = |b: ScenarioBuilder, blind_delete: bool, fencing: bool| {
            with_job(b).edit(|s| {
                if let Some(j) = &mut s.cleanup_job {
                    j.blind_delete = blind_delete;
                    j.fencing = fencing;
                }
            })
        };
        match self {
            Sut::Correct => b,
            // The denial cache needs the atomic path (the validator says why).
            Sut::Naive => b.naive().edit(|s| s.gateway.denial_cache = None),
            Sut::GatewayClock => b.gateway_time(),
            Sut::BlindCleanup => job(b, true, true),
            Sut::UnfencedCleanup => job(b, true, false),
            Sut::Planted(bug) => {
                let b = match bug.needs() {
                    Needs::Atomic => b,
                    Needs::AtomicPolicy(alg) => match generate::policy_parts(&b.spec().policy) {
                        Some((capacity, rate)) => b.policy(generate::policy(alg, capacity, rate)),
                        None => b,
                    },
                    Needs::FencedJob => with_job(b),
                };
                b.planted_bug(bug)
            }
        }
    }
}

impl Serialize for Sut {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Sut {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Sut, D::Error> {
        let name = String::deserialize(d)?;
        Sut::parse(&name).map_err(serde::de::Error::custom)
    }
}

/// The scenario explore seed `seed` runs against `sut`, as scenario JSON; what is out of
/// range in it if the generator drew a value its field does not take.
pub fn scenario_json(seed: u64, sut: Sut) -> Result<serde_json::Value, String> {
    let description = format!(
        "drawn by `ratelab explore --sut {}` from explore seed {seed}",
        sut.name()
    );
    let b = sut
        .adjust(generate::draw(seed), seed)
        .edit(|s| s.description = description);
    generate::json(b).map_err(|e| format!("explore seed {seed} drew an invalid scenario: {e}"))
}

/// One explored seed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    /// The explore seed (also the simulation's seed).
    pub seed: u64,
    /// Requests simulated.
    pub requests: u64,
    /// Fault kinds the drawn scenario had.
    pub faults: Vec<String>,
    /// What the checkers found.
    pub failures: Vec<Failure>,
    /// The coverage probes the run reached.
    #[serde(default)]
    pub reached: Vec<String>,
    /// Keys whose linearizability search ran out of budget (an honest unknown).
    #[serde(default)]
    pub unknown_keys: u64,
    /// What each checker that applied judged.
    #[serde(default)]
    pub judged: BTreeMap<String, u64>,
}

/// How often to rerun a seed to check it is deterministic: every seed that fails, and one
/// in this many of the others.
pub const RECHECK_EVERY: u64 = 8;

/// Explores one seed.
pub fn explore_one(seed: u64, sut: Sut, budget: u64) -> Outcome {
    let json = match scenario_json(seed, sut) {
        Ok(json) => json,
        Err(detail) => {
            return Outcome {
                seed,
                requests: 0,
                faults: Vec::new(),
                failures: vec![Failure {
                    class: Class::Generator,
                    checker: "builder".into(),
                    detail,
                }],
                reached: Vec::new(),
                unknown_keys: 0,
                judged: BTreeMap::new(),
            };
        }
    };
    let faults = json["faults"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter_map(|f| f["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let rerun = if seed.is_multiple_of(RECHECK_EVERY) {
        Rerun::Always
    } else {
        Rerun::IfFailed
    };
    let checked = check(&json, seed, rerun, budget);
    Outcome {
        seed,
        requests: checked.requests,
        faults,
        failures: checked.failures,
        reached: checked.reached.iter().map(|p| (*p).to_owned()).collect(),
        unknown_keys: checked.unknown_keys,
        judged: checked.judged,
    }
}

/// A campaign's settings.
#[derive(Clone, Copy, Debug)]
pub struct Campaign {
    /// The system under test.
    pub sut: Sut,
    /// Seeds `first .. first + count`.
    pub first: u64,
    /// How many seeds.
    pub count: u64,
    /// This shard's index and the number of shards: only seeds ≡ index (mod shards) run.
    pub shard: (u64, u64),
    /// Worker threads.
    pub threads: usize,
    /// The linearizability search's budget per key and epoch
    /// ([`verdict::LINEARIZABILITY_BUDGET`] by default): past it a key is unknown.
    pub budget: u64,
}

impl Campaign {
    /// The seeds this shard runs, in order.
    pub fn seeds(&self) -> Vec<u64> {
        let (i, n) = (self.shard.0, self.shard.1.max(1));
        (self.first..self.first.saturating_add(self.count))
            .filter(|s| s % n == i % n)
            .collect()
    }
}

/// One deduplicated failure.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Found {
    /// Class, checker and system under test.
    pub class: Class,
    /// The checker.
    pub checker: String,
    /// The system under test.
    pub sut: Sut,
    /// How many seeds failed this way.
    pub seeds: u64,
    /// The first of them.
    pub first_seed: u64,
    /// Its witness.
    pub detail: String,
    /// The command that replays it, once the scenario is saved.
    pub replay: String,
    /// Its shrunk regression, once shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<shrink::ShrinkSummary>,
}

/// A campaign's report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExploreReport {
    /// The system under test.
    pub sut: Sut,
    /// Seeds run.
    pub seeds: u64,
    /// Requests simulated.
    pub requests: u64,
    /// Seeds with each fault kind drawn.
    pub fault_coverage: BTreeMap<String, u64>,
    /// Seeds that reached each coverage probe (every probe named, 0 when none did).
    #[serde(default)]
    pub reached: BTreeMap<String, u64>,
    /// Seeds that failed.
    pub failed_seeds: u64,
    /// Seeds where the linearizability search ran out of budget on some key (neither a pass
    /// nor a failure there).
    #[serde(default)]
    pub unknown_seeds: u64,
    /// Every distinct failure, by signature.
    pub found: Vec<Found>,
    /// Per checker: the seeds it applied to and what it judged there over the campaign.
    #[serde(default)]
    pub coverage_by_checker: BTreeMap<String, Coverage>,
}

/// What one checker judged over a campaign.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Seeds it applied to.
    pub seeds: u64,
    /// Requests (the cleanup job's commits) it judged.
    pub judged: u64,
}

impl ExploreReport {
    /// The checkers that applied to some seed and judged nothing in the whole campaign: a
    /// check that never looked at anything is a failure of the campaign, not a pass.
    pub fn blind(&self) -> Vec<&str> {
        self.coverage_by_checker
            .iter()
            .filter(|(_, c)| c.seeds > 0 && c.judged == 0)
            .map(|(k, _)| k.as_str())
            .collect()
    }
}

/// The file a failure's drawn scenario is saved to, under the output directory.
pub fn scenario_file(sut: Sut, class: Class, checker: &str, seed: u64) -> String {
    format!(
        "{}-{}-{}-seed-{seed}.json",
        sut.name(),
        class.name(),
        checker
    )
}

/// Runs `c`, calling `progress(done, total, failed)` as seeds finish.
pub fn run(
    c: &Campaign,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> (ExploreReport, Vec<Outcome>) {
    let seeds = c.seeds();
    let outcomes = ratelab_sim::parallel::map(
        &seeds,
        c.threads,
        |&s| explore_one(s, c.sut, c.budget),
        progress,
    );
    (summarize(c.sut, &outcomes, None), outcomes)
}

/// The report over `outcomes`; replay commands name files under `out` when given.
pub fn summarize(sut: Sut, outcomes: &[Outcome], out: Option<&Path>) -> ExploreReport {
    let mut found: BTreeMap<(Class, String), Found> = BTreeMap::new();
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_checker: BTreeMap<String, Coverage> = BTreeMap::new();
    let mut reached: BTreeMap<String, u64> = coverage::PROBES
        .iter()
        .map(|p| ((*p).to_owned(), 0))
        .collect();
    for o in outcomes {
        // Counts are of seeds: a seed with two faults of a kind, or two failures of one
        // signature, counts once.
        let kinds: std::collections::BTreeSet<&String> = o.faults.iter().collect();
        for f in kinds {
            *coverage.entry(f.clone()).or_default() += 1;
        }
        let mut counted = std::collections::BTreeSet::new();
        for (checker, n) in &o.judged {
            let c = by_checker.entry(checker.clone()).or_default();
            c.seeds += 1;
            c.judged += n;
        }
        for p in &o.reached {
            *reached.entry(p.clone()).or_default() += 1;
        }
        for f in &o.failures {
            let e = found
                .entry((f.class, f.checker.clone()))
                .or_insert_with(|| {
                    let file = scenario_file(sut, f.class, &f.checker, o.seed);
                    let path = out.map_or(file.clone(), |d| d.join(&file).display().to_string());
                    Found {
                        class: f.class,
                        checker: f.checker.clone(),
                        sut,
                        seeds: 0,
                        first_seed: o.seed,
                        detail: f.detail.clone(),
                        replay: format!("ratelab run {path} --seed {}", o.seed),
                        shrunk: None,
                    }
                });
            if counted.insert((f.class, &f.checker)) {
                e.seeds += 1;
            }
        }
    }
    ExploreReport {
        sut,
        seeds: outcomes.len() as u64,
        requests: outcomes.iter().map(|o| o.requests).sum(),
        fault_coverage: coverage,
        reached,
        failed_seeds: outcomes.iter().filter(|o| !o.failures.is_empty()).count() as u64,
        unknown_seeds: outcomes.iter().filter(|o| o.unknown_keys > 0).count() as u64,
        found: found.into_values().collect(),
        coverage_by_checker: by_checker,
    }
}

/// Saves each distinct failure's drawn scenario and the report under `out`.
pub fn save(out: &Path, sut: Sut, report: &ExploreReport) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for f in &report.found {
        let file = out.join(scenario_file(sut, f.class, &f.checker, f.first_seed));
        // A seed the generator could not draw has no scenario to save (its finding says why).
        let Ok(json) = scenario_json(f.first_seed, sut) else {
            continue;
        };
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())? + "\n";
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    let path = out.join("report.json");
    let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Joins shard reports of one system under test into one.
pub fn merge(reports: &[ExploreReport]) -> Result<ExploreReport, String> {
    let Some(first) = reports.first() else {
        return Err("no reports to merge".into());
    };
    if let Some(r) = reports.iter().find(|r| r.sut != first.sut) {
        return Err(format!(
            "reports of different systems under test: {} and {}",
            first.sut.name(),
            r.sut.name()
        ));
    }
    let mut found: BTreeMap<(Class, String), Found> = BTreeMap::new();
    let mut coverage: BTreeMap<String, u64> = BTreeMap::new();
    let mut reached: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_checker: BTreeMap<String, Coverage> = BTreeMap::new();
    for r in reports {
        for (k, v) in &r.coverage_by_checker {
            let c = by_checker.entry(k.clone()).or_default();
            c.seeds += v.seeds;
            c.judged += v.judged;
        }
        for (k, v) in &r.fault_coverage {
            *coverage.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &r.reached {
            *reached.entry(k.clone()).or_default() += v;
        }
        for f in &r.found {
            found
                .entry((f.class, f.checker.clone()))
                .and_modify(|e| {
                    e.seeds += f.seeds;
                    if f.first_seed < e.first_seed {
                        e.first_seed = f.first_seed;
                        e.detail = f.detail.clone();
                        e.replay = f.replay.clone();
                    }
                })
                .or_insert_with(|| f.clone());
        }
    }
    Ok(ExploreReport {
        sut: first.sut,
        seeds: reports.iter().map(|r| r.seeds).sum(),
        requests: reports.iter().map(|r| r.requests).sum(),
        fault_coverage: coverage,
        reached,
        failed_seeds: reports.iter().map(|r| r.failed_seeds).sum(),
        unknown_seeds: reports.iter().map(|r| r.unknown_seeds).sum(),
        found: found.into_values().collect(),
        coverage_by_checker: by_checker,
    })
}

/// Shrinks a found failure's scenario within `runs` runs and writes it as a regression
/// scenario under `dir`; a generator failure (an invalid draw) is not shrunk.
pub fn shrink_found(
    f: &mut Found,
    dir: &Path,
    timelines: Option<&Path>,
    runs: u32,
) -> Result<(), String> {
    if f.class == Class::Generator {
        return Ok(());
    }
    let spec = scenario_json(f.first_seed, f.sut)?;
    let shrunk = shrink::shrink(&spec, f.first_seed, f.class, &f.checker, runs);
    let signature = format!("{}/{}", f.class.name(), f.checker);
    let json = shrink::regression(&shrunk, &signature, f.sut.name(), f.first_seed);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(scenario_file(f.sut, f.class, &f.checker, f.first_seed));
    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(out) = timelines {
        let page = out.join(path.with_extension("html").file_name().unwrap_or_default());
        write_timeline(&json, f.first_seed, &shrunk.detail, &page)?;
    }
    f.shrunk = Some(shrink::ShrinkSummary {
        file: path.display().to_string(),
        before: shrunk.before,
        after: shrunk.after,
        runs: shrunk.runs,
        exhausted: shrunk.exhausted,
        replay: format!("ratelab run {} --seed {}", path.display(), f.first_seed),
    });
    Ok(())
}

/// Writes the timeline of scenario `json`'s run with `seed` to `page`, showing the key and
/// request the failure's `detail` names.
pub fn write_timeline(
    json: &serde_json::Value,
    seed: u64,
    detail: &str,
    page: &Path,
) -> Result<(), String> {
    let sc =
        Scenario::parse(Path::new("<timeline>"), &json.to_string()).map_err(|e| e.to_string())?;
    let options = RunOptions {
        keep_events: true,
        ..RunOptions::default()
    };
    let (report, history) = ratelab_sim::run(&sc, seed, options);
    let named = ratelab_check::timeline::named(detail);
    crate::timeline::write(&sc, &report, &history, named.key, named.request, page).map(|_| ())
}

/// The key a checker's witness names (`key "…"`, as Rust's `{:?}` quotes it).
pub fn named_key(detail: &str) -> Option<String> {
    ratelab_check::timeline::named_key(detail)
}
