//! Audits: the rate limiters people deploy, installed from their registries, started on
//! loopback as their docs recommend (several instances on a shared store where the target
//! supports it), probed from outside and judged by the probe's checkers (`ratelab audit`).
//!
//! Each target is a directory under `audits/`: a [`recipe`] (`recipe.toml`) and, when the
//! target is a library, the glue app that serves it — a few dozen lines in the target's own
//! language. An audit of one target:
//!
//! 1. [`install`]: checks its npm, PyPI and Debian needs, installing the packages that are
//!    missing at the versions the recipe pins (or saying exactly what to install);
//! 2. [`instances`]: starts its store and its instances on free loopback ports;
//! 3. probes them ([`crate::probe::probe`] over an [`HttpTarget`] spreading requests round
//!    robin over the instances): the concurrency ladder, the idle, steady and boundary
//!    phases ([`Phases`]) and the Retry-After honesty probes, every request judged against
//!    the policy the recipe says the target is configured with;
//! 4. for a target whose store it started, the store-fault phase ([`faults`]): the store
//!    frozen, killed and started again under paced clients, the answers held to the failure
//!    mode the recipe declares, and, once the store has been back for the recovery the recipe
//!    declares, to the policy again;
//! 5. stops everything and turns the verdict into a report card and findings ([`card`]),
//!    each finding with the command that reproduces it and, where a finding matches an
//!    upstream issue the recipe lists, that issue.
//!
//! [`card::save`] writes `docs/results/audits/<name>-<variant>.json`, [`card::render`] renders
//! `docs/AUDITS.md` from every result there. A new target is a directory with a recipe; the
//! mechanism knows no target by name.
//!
//! [`explore`] (`ratelab audit --explore`) runs seeded schedules against the same started
//! targets instead of the fixed phases: keys, pacing, bursts, idle gaps, instances and store
//! faults drawn per seed, every answer judged, each finding repeated (k of n), shrunk, and
//! written out with a standalone reproducer, which [`explore::confirm`] (`--confirm`) runs
//! outside ratelab against the target started afresh.

pub mod card;
pub mod explore;
pub mod faults;
pub mod install;
pub mod instances;
pub mod recipe;

use crate::probe::fields::ResetReading;
use crate::probe::http::{HttpSpec, HttpTarget};
use crate::probe::{self, Phases, ProbeConfig, ProbeRun, Spread, policy};
use ratelab_check::linearizable::{DEFAULT_BUDGET, Initial};
use ratelab_check::probe::Claim;
use ratelab_core::Nanos;
use recipe::{Loaded, Variant};
use std::collections::BTreeMap;
use std::time::Duration;

/// How hard an audit probes each target.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Clients per ladder step.
    pub ladder: Vec<u32>,
    /// Requests per step.
    pub requests_per_step: u64,
    /// Keys per step.
    pub keys: u32,
    /// Retry-After honesty probes.
    pub retry_probes: u32,
    /// The phases after the ladder.
    pub phases: Phases,
    /// Install missing packages (else say what to install).
    pub install: bool,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// The store-fault phase's steps, or none.
    pub faults: Option<faults::Timing>,
}

impl Settings {
    /// The published audit.
    pub fn full() -> Settings {
        Settings {
            ladder: vec![1, 4, 16, 64],
            requests_per_step: 600,
            keys: 4,
            retry_probes: 3,
            phases: Phases::all(Duration::from_secs(3)),
            install: true,
            budget: DEFAULT_BUDGET,
            faults: Some(faults::Timing {
                step: Duration::from_millis(1_500),
                frozen: Duration::from_secs(2),
                grace: Duration::from_secs(2),
                judged: Duration::from_secs(2),
                clients: 4,
            }),
        }
    }

    /// A short audit for tests: a smaller ladder, a shorter steady phase, a search budget
    /// that leaves the keys concurrency makes hard unknown rather than spend a minute.
    pub fn bounded() -> Settings {
        Settings {
            ladder: vec![1, 8],
            requests_per_step: 120,
            keys: 2,
            retry_probes: 1,
            phases: Phases::all(Duration::from_secs(1)),
            install: false,
            budget: 100_000,
            faults: Some(faults::Timing {
                step: Duration::from_millis(500),
                frozen: Duration::from_millis(700),
                grace: Duration::from_secs(1),
                judged: Duration::from_millis(700),
                clients: 2,
            }),
        }
    }
}

/// One target of a recipe: the recipe and one of its variants.
#[derive(Clone, Debug)]
pub struct Target {
    /// The recipe.
    pub loaded: Loaded,
    /// Which variant.
    pub variant: usize,
}

impl Target {
    /// `NAME/VARIANT`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.loaded.name, self.variant().name)
    }

    /// The variant.
    pub fn variant(&self) -> &Variant {
        &self.loaded.recipe.variant[self.variant]
    }

    /// The policy the target is configured with, as the probe's grammar writes it.
    pub fn policy(&self) -> &str {
        self.variant()
            .policy
            .as_deref()
            .unwrap_or(&self.loaded.recipe.probe.policy)
    }

    /// How far its clock may lag its decisions, as a recipe writes it.
    pub fn clock_resolution(&self) -> &str {
        self.variant()
            .clock_resolution
            .as_deref()
            .unwrap_or(&self.loaded.recipe.probe.clock_resolution)
    }

    /// What it declares it does when its store fails.
    pub fn failure_mode(&self) -> recipe::FailureMode {
        self.variant()
            .failure_mode
            .unwrap_or(self.loaded.recipe.failure_mode)
    }

    /// The files written for each of its instances.
    pub fn templates(&self) -> &[recipe::Template] {
        self.variant()
            .templates
            .as_deref()
            .unwrap_or(&self.loaded.recipe.instance.templates)
    }

    /// The store its instances share.
    pub fn store(&self) -> recipe::StoreKind {
        self.variant().store.unwrap_or(self.loaded.recipe.store)
    }

    /// How long after its store is back it may take to limit again, as a recipe writes it.
    pub fn recovery(&self) -> &str {
        self.variant()
            .recovery
            .as_deref()
            .or(self.loaded.recipe.recovery.as_deref())
            .unwrap_or(recipe::DEFAULT_RECOVERY)
    }

    /// How many instances it runs.
    pub fn instances(&self) -> u32 {
        self.variant()
            .count
            .unwrap_or(self.loaded.recipe.instance.count)
    }
}

/// The targets under `root` that `names` select (`NAME` for each of its variants,
/// `NAME/VARIANT` for one), every target if `names` is empty; an error names what matched
/// nothing.
pub fn select(root: &std::path::Path, names: &[String]) -> Result<Vec<Target>, String> {
    let recipes = recipe::all(root)?;
    let every: Vec<Target> = recipes
        .iter()
        .flat_map(|l| {
            (0..l.recipe.variant.len()).map(|variant| Target {
                loaded: l.clone(),
                variant,
            })
        })
        .collect();
    if names.is_empty() {
        return Ok(every);
    }
    let mut out = Vec::new();
    for n in names {
        let chosen: Vec<&Target> = every
            .iter()
            .filter(|t| t.name() == *n || t.loaded.name == *n)
            .collect();
        if chosen.is_empty() {
            let known: Vec<String> = every.iter().map(Target::name).collect();
            return Err(format!(
                "no audit target {n:?} under {}; there are: {}",
                root.display(),
                known.join(", ")
            ));
        }
        out.extend(chosen.into_iter().cloned());
    }
    Ok(out)
}

/// What one audit found: the probe's run, the versions installed, and the report card.
#[derive(Debug)]
pub struct Audited {
    /// The target.
    pub target: Target,
    /// The run.
    pub run: ProbeRun,
    /// The versions installed.
    pub versions: BTreeMap<String, String>,
    /// The store-fault phase, when it ran.
    pub faults: Option<faults::FaultReport>,
}

/// A target installed (or checked) and started, with what it is held to.
#[derive(Debug)]
pub struct Started {
    /// The versions of what it runs.
    pub versions: BTreeMap<String, String>,
    /// The policy it is configured with.
    pub claim: Claim,
    /// Its clock resolution.
    pub clock_resolution: Nanos,
    /// How long after its store is back it may take to limit again.
    pub recovery: Nanos,
    /// Its instances and store, stopped when dropped.
    pub running: instances::Running,
    /// How to reach its instances.
    pub spec: HttpSpec,
}

impl Started {
    /// Its declared failure behaviour, for the store-fault phase.
    pub fn declared(&self, t: &Target) -> faults::Declared {
        faults::Declared {
            mode: t.failure_mode(),
            claim: self.claim,
            instances: t.instances(),
            recovery: Duration::from_nanos(self.recovery.as_u64()),
            clock_resolution: Duration::from_nanos(self.clock_resolution.as_u64()),
        }
    }
}

/// Installs (with `install`) or checks `t`, reads what its recipe declares, and starts it.
pub async fn start(t: &Target, install: bool) -> Result<Started, String> {
    let r = &t.loaded.recipe;
    let versions = install::ensure(&t.loaded, install)?;
    let claim = policy::parse(t.policy()).map_err(|e| format!("{}: policy: {e}", t.name()))?;
    let clock_resolution = policy::duration(t.clock_resolution())
        .map_err(|e| format!("{}: clock_resolution: {e}", t.name()))?;
    let recovery =
        policy::duration(t.recovery()).map_err(|e| format!("{}: recovery: {e}", t.name()))?;
    let reset = ResetReading::parse(&r.probe.reset_unit)
        .map_err(|e| format!("{}: probe.reset_unit: {e}", t.name()))?;
    let mut env = t.variant().env.clone();
    env.insert("RATELAB_AUDIT_TARGET".into(), t.name());
    // Started on a blocking thread: it waits for ports.
    let (loaded, count, store) = (t.loaded.clone(), t.instances(), t.store());
    let templates = t.templates().to_vec();
    let running = tokio::task::spawn_blocking(move || {
        instances::start(&loaded, store, &env, count, &templates)
    })
    .await
    .map_err(|e| format!("{}: {e}", t.name()))??;
    let spec = HttpSpec {
        urls: running
            .ports
            .iter()
            .map(|p| r.probe.url.replace("{port}", &p.to_string()))
            .collect(),
        spread: Spread::RoundRobin,
        method: "GET".into(),
        key_header: r.probe.key_header.clone(),
        headers: Vec::new(),
        deny_statuses: r.probe.deny_status.clone(),
        policy_name: None,
        reset,
        timeout: Duration::from_secs(5),
    };
    Ok(Started {
        versions,
        claim,
        clock_resolution,
        recovery,
        running,
        spec,
    })
}

/// Waits (up to 15 s) until every one of `instances` answers a request, on a key of its own
/// under `prefix`, with a decision: an instance is ready when it decides, not when its port
/// accepts (a server whose backend is still starting answers 502).
pub async fn decided(target: &HttpTarget, instances: u32, prefix: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    for i in 0..instances {
        loop {
            let key = format!("{prefix}-ready{i}");
            match target.send_to(i, &key).await.0 {
                ratelab_check::probe::Outcome::Failed(why) => {
                    if tokio::time::Instant::now() > deadline {
                        return Err(format!(
                            "instance {i} answered no decision within 15 s (the last answer: {why})"
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => break,
            }
        }
    }
    Ok(())
}

/// The share of a probe's answers (on a healthy store) that may be no decision before the
/// run says nothing about the limiter, %.
const UNDECIDED_PERCENT: usize = 5;

/// Why `run` judged nothing, if its answers were not decisions (5xx, refused, timed out):
/// a target that cannot answer is not a target to grade.
fn undecided(run: &ProbeRun) -> Option<String> {
    let all = &run.history.observations;
    let failed: Vec<&ratelab_check::probe::Observation> = all
        .iter()
        .filter(|o| matches!(o.outcome, ratelab_check::probe::Outcome::Failed(_)))
        .collect();
    let first = failed.first()?;
    (failed.len() * 100 > all.len() * UNDECIDED_PERCENT).then(|| {
        format!(
            "{} of {} answers were not decisions (the first, request {}: {:?})",
            failed.len(),
            all.len(),
            first.id,
            first.outcome
        )
    })
}

/// Audits `t`: installs or checks, starts, probes, stops. `progress` is told the ladder's
/// requests sent and planned.
pub async fn audit(
    t: &Target,
    s: &Settings,
    progress: impl Fn(u64, u64) + Send + Sync + 'static,
) -> Result<Audited, String> {
    let r = &t.loaded.recipe;
    let started = start(t, s.install).await?;
    let declared = started.declared(t);
    let Started {
        versions,
        claim,
        clock_resolution,
        mut running,
        spec,
        ..
    } = started;
    let count = t.instances();
    let top = s.ladder.iter().copied().max().unwrap_or(1) as usize;
    let target = HttpTarget::new(&spec, top).map_err(|e| format!("{}: {e}", t.name()))?;
    decided(&target, count, &probe::fresh_prefix())
        .await
        .map_err(|e| format!("{}: could not run: {e}", t.name()))?;
    let partitioned = r.probe.key_header.is_some() || r.probe.url.contains("{key}");
    let cfg = ProbeConfig {
        ladder: s.ladder.clone(),
        requests_per_step: s.requests_per_step,
        keys: if partitioned { s.keys } else { 1 },
        partitioned,
        key_prefix: probe::fresh_prefix(),
        max_time: Duration::from_secs(120),
        retry_probes: s.retry_probes,
        max_wait: Duration::from_secs(10),
        clock_resolution,
        initial: if partitioned {
            Initial::Full
        } else {
            Initial::Unknown
        },
        budget: s.budget,
        exact: true,
        phases: s.phases,
        epoch_windows: r.probe.epoch_windows,
    };
    let run = probe::probe(target.clone(), claim, &cfg, progress).await;
    if let Some(why) = undecided(&run) {
        let kept = running.keep_logs(&std::env::temp_dir().join(format!(
            "ratelab-audit-logs-{}-{}",
            t.name().replace('/', "-"),
            std::process::id()
        )));
        return Err(format!(
            "could not run: {why}; its instances' logs are kept: {}",
            kept.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let faults = match (s.faults, running.store.as_mut()) {
        (Some(timing), Some(store)) => Some(
            faults::run(&target, store, declared, &cfg.key_prefix, timing)
                .await
                .map_err(|e| format!("{}: store-fault phase: {e}", t.name()))?,
        ),
        _ => None,
    };
    drop(running);
    Ok(Audited {
        target: t.clone(),
        run,
        versions,
        faults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_check::probe::{Fields, Observation, Outcome, ProbeHistory, ProbeVerdict};

    fn run(outcomes: &[Outcome]) -> ProbeRun {
        let observations = outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| Observation {
                id: i as u64,
                key: "k".into(),
                client: 0,
                instance: 0,
                cost: 1,
                sent: Nanos(i as u64),
                answered: Nanos(i as u64 + 1),
                outcome: o.clone(),
                fields: Fields::default(),
            })
            .collect();
        ProbeRun {
            claim: Claim::TokenBucket {
                capacity: 1,
                amount: 1,
                period: Nanos::from_secs(1),
            },
            history: ProbeHistory {
                observations,
                retry_probes: Vec::new(),
            },
            verdict: ProbeVerdict::default(),
            steps: Vec::new(),
            retry_skipped: Vec::new(),
            seconds: 0.0,
            check_seconds: 0.0,
        }
    }

    /// A run whose answers are mostly 502s says nothing about the limiter: no card.
    #[test]
    fn a_run_of_answers_that_are_not_decisions_could_not_run() {
        let bad = Outcome::Failed("status 502".into());
        let mostly_bad: Vec<Outcome> = (0..100)
            .map(|i| {
                if i % 10 < 9 {
                    bad.clone()
                } else {
                    Outcome::Allowed
                }
            })
            .collect();
        let why = undecided(&run(&mostly_bad)).expect("could not run");
        assert!(
            why.starts_with("90 of 100 answers") && why.contains("502"),
            "{why}"
        );
        // One error in a hundred is a finding of the decisions check, not a run lost.
        let once: Vec<Outcome> = (0..100)
            .map(|i| if i == 7 { bad.clone() } else { Outcome::Denied })
            .collect();
        assert_eq!(undecided(&run(&once)), None);
    }
}
