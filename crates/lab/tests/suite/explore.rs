//! The explorer: seeds draw the same valid scenarios everywhere, shards split the seeds, and
//! a bounded campaign finds the naive path's lost updates with no scenario written for them.

use ratelab_lab::explore::{self, Campaign, ExploreReport, Outcome, Sut, verdict::Class};
use std::sync::OnceLock;

/// A bounded campaign of the correct limiter, seeds 1 to 200: run once, read by every test
/// that asks what such a campaign finds and reaches.
fn correct_campaign() -> &'static (ExploreReport, Vec<Outcome>) {
    static RUN: OnceLock<(ExploreReport, Vec<Outcome>)> = OnceLock::new();
    RUN.get_or_init(|| {
        let c = Campaign {
            sut: Sut::Correct,
            first: 1,
            count: 200,
            shard: (0, 1),
            threads: 2,
            budget: explore::verdict::LINEARIZABILITY_BUDGET,
        };
        explore::run(&c, &|_, _| {})
    })
}

#[test]
fn a_seed_draws_the_same_valid_scenario_every_time() {
    for seed in 1..=300 {
        let a = explore::scenario_json(seed, Sut::Correct).unwrap();
        assert_eq!(
            a,
            explore::scenario_json(seed, Sut::Correct).unwrap(),
            "seed {seed}"
        );
        ratelab_sim::Scenario::parse(std::path::Path::new("<drawn>"), &a.to_string())
            .unwrap_or_else(|e| panic!("seed {seed} drew an invalid scenario: {e}"));
    }
    // Different seeds draw different scenarios.
    assert_ne!(
        explore::scenario_json(1, Sut::Correct).unwrap(),
        explore::scenario_json(2, Sut::Correct).unwrap()
    );
}

#[test]
fn shards_split_the_seeds_exactly() {
    let c = |i| Campaign {
        sut: Sut::Correct,
        first: 10,
        count: 100,
        shard: (i, 3),
        threads: 1,
        budget: explore::verdict::LINEARIZABILITY_BUDGET,
    };
    let mut all: Vec<u64> = (0..3).flat_map(|i| c(i).seeds()).collect();
    all.sort_unstable();
    assert_eq!(all, (10..110).collect::<Vec<_>>());
}

#[test]
fn a_bounded_campaign_finds_the_naive_path_and_merges_across_shards() {
    let campaign = |i| Campaign {
        sut: Sut::Naive,
        first: 1,
        count: 24,
        shard: (i, 2),
        threads: 2,
        budget: explore::verdict::LINEARIZABILITY_BUDGET,
    };
    let (a, _) = explore::run(&campaign(0), &|_, _| {});
    let (b, _) = explore::run(&campaign(1), &|_, _| {});
    let merged = explore::merge(&[a.clone(), b.clone()]).expect("one system under test");
    assert_eq!(merged.seeds, 24);
    let lost = merged
        .found
        .iter()
        .find(|f| f.class == Class::Safety && f.checker == "linearizable")
        .expect("the naive path's lost updates are found");
    assert!(lost.seeds >= 6, "{} of 24 seeds", lost.seeds);
    assert!(lost.replay.starts_with("ratelab run "), "{}", lost.replay);
    // A report of another system under test does not merge in.
    let (c, _) = explore::run(
        &Campaign {
            sut: Sut::Correct,
            count: 2,
            ..campaign(0)
        },
        &|_, _| {},
    );
    assert!(explore::merge(&[a, c]).is_err());
}

#[test]
fn a_bounded_campaign_finds_nothing_wrong_with_the_correct_limiter() {
    let (r, _) = correct_campaign();
    assert_eq!(r.seeds, 200);
    assert!(
        r.found.is_empty(),
        "false alarms on the correct limiter: {:#?}",
        r.found
    );
    // Unknown is never a pass: every key of every seed was decided.
    assert_eq!(r.unknown_seeds, 0, "seeds with undecided keys");
    // Every checker that judges requests looked at some, the linearizability checker at
    // every seed's.
    assert!(r.blind().is_empty(), "{:?}", r.coverage_by_checker);
    for checker in [
        "answered-once",
        "fail-reasons",
        "linearizable",
        "over-denial",
        "liveness",
        "recovery",
    ] {
        assert!(
            r.coverage_by_checker
                .get(checker)
                .is_some_and(|c| c.judged > 0),
            "{checker}: {:?}",
            r.coverage_by_checker
        );
    }
    assert_eq!(r.coverage_by_checker["linearizable"].seeds, 200);
    assert!(r.fault_coverage.len() >= 8, "{:?}", r.fault_coverage);
    // Failovers to a lagging replica are among the draws, and the correct limiter passes
    // beside them (within each failover's allowance).
    assert!(
        r.fault_coverage
            .get("store_failover")
            .is_some_and(|&n| n > 0),
        "{:?}",
        r.fault_coverage
    );
}

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_planted_bug_is_found_at_the_seed_the_table_gives() {
    let text = std::fs::read_to_string(root().join("docs/results/planted.json"))
        .expect("docs/results/planted.json");
    let rows: Vec<explore::table::Detection> = serde_json::from_str(&text).expect("planted.json");
    let planted: Vec<Sut> = Sut::planted().collect();
    assert_eq!(
        rows.iter().map(|r| r.sut).collect::<Vec<_>>(),
        planted,
        "one row per planted bug; regenerate with `ratelab explore table`"
    );
    for r in &rows {
        let seed = r.first_seed.expect("every planted bug is found");
        let o = explore::table::first_failure(r.sut, seed, 2)
            .unwrap_or_else(|| panic!("{}: nothing found in seeds 1 to {seed}", r.sut.name()));
        assert_eq!(o.seed, seed, "{}: first failing seed", r.sut.name());
        assert_eq!(
            explore::table::signatures(&o),
            r.signatures,
            "{}: what seed {seed} finds; regenerate with `ratelab explore table`",
            r.sut.name()
        );
        let shrunk = r.shrunk.as_ref().expect("shrunk");
        assert_eq!(
            o.requests,
            shrunk.before.requests,
            "{}: the drawn scenario's size",
            r.sut.name()
        );
        let file = root().join(&shrunk.file);
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: its regression {}: {e}", r.sut.name(), file.display()));
        let spec: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let again = explore::check(
            &spec,
            seed,
            explore::Rerun::Never,
            explore::verdict::LINEARIZABILITY_BUDGET,
        );
        assert_eq!(
            (again.requests, again.events),
            (shrunk.after.requests, shrunk.after.events),
            "{}: the shrunk scenario's size",
            r.sut.name()
        );
    }
}

/// The same scenario with every planted bug taken out: the atomic path on the store's clock,
/// the cleanup job fenced and deleting only what is still expired.
fn corrected(mut spec: serde_json::Value) -> serde_json::Value {
    let obj = spec.as_object_mut().expect("an object");
    obj.remove("planted_bug");
    spec["store"]["path"] = "atomic".into();
    spec["store"]["time_source"] = "store".into();
    if let Some(job) = spec.get_mut("cleanup_job").and_then(|j| j.as_object_mut()) {
        job.remove("blind_delete");
        job.remove("fencing");
    }
    spec["expect"]["explorer"] = "pass".into();
    spec
}

#[test]
fn each_shrunk_regression_fails_only_because_of_its_bug() {
    let dir = root().join("sim-scenarios/regressions");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("regressions/") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        let spec: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let Some(want) = spec["expect"]["explorer"].as_str().filter(|w| *w != "pass") else {
            continue;
        };
        let seed = spec["seeds"][0].as_u64().expect("one seed");
        let found = explore::check(
            &spec,
            seed,
            explore::Rerun::Never,
            explore::verdict::LINEARIZABILITY_BUDGET,
        )
        .failures;
        assert!(
            found.iter().any(|f| f.signature() == want),
            "{}: expected {want}, found {found:?}",
            path.display()
        );
        let fixed = explore::check(
            &corrected(spec),
            seed,
            explore::Rerun::Never,
            explore::verdict::LINEARIZABILITY_BUDGET,
        )
        .failures;
        assert!(
            fixed.is_empty(),
            "{}: still fails with its bug taken out: {fixed:?}",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 9, "{checked} shrunk regressions");
}

#[test]
fn shrinking_is_deterministic_and_keeps_the_signature() {
    let spec = explore::scenario_json(
        18,
        Sut::Planted(ratelab_sim::planted::PlantedBug::RetryOnTimeout),
    )
    .unwrap();
    let a = explore::shrink::shrink(&spec, 18, Class::Safety, "linearizable", 60);
    let b = explore::shrink::shrink(&spec, 18, Class::Safety, "linearizable", 60);
    assert_eq!(a.spec, b.spec);
    assert!(a.runs <= 60);
    assert!(
        a.after.requests < a.before.requests,
        "{:?} → {:?}",
        a.before,
        a.after
    );
    let still = explore::check(
        &a.spec,
        18,
        explore::Rerun::Never,
        explore::verdict::LINEARIZABILITY_BUDGET,
    )
    .failures;
    assert!(
        still
            .iter()
            .any(|f| f.class == Class::Safety && f.checker == "linearizable"),
        "{still:?}"
    );
}

#[test]
fn the_planted_table_in_the_docs_is_the_committed_figures() {
    let text = std::fs::read_to_string(root().join("docs/results/planted.json")).expect("json");
    let rows: Vec<explore::table::Detection> = serde_json::from_str(&text).expect("planted.json");
    let doc = std::fs::read_to_string(root().join("docs/EXPLORER.md")).expect("EXPLORER.md");
    let block =
        ratelab_lab::output::replace_marked(&doc, "planted", &explore::table::markdown(&rows))
            .expect("the planted block");
    assert_eq!(
        block, doc,
        "docs/EXPLORER.md's table differs from docs/results/planted.json; run `ratelab explore table`"
    );
}

#[test]
fn a_campaign_reports_the_situations_it_reached_and_those_it_did_not() {
    let (r, outcomes) = correct_campaign();
    assert_eq!(
        r.reached.keys().map(String::as_str).collect::<Vec<_>>(),
        {
            let mut all = explore::coverage::PROBES.to_vec();
            all.sort_unstable();
            all
        },
        "every probe is named, reached or not"
    );
    let hit = r.reached.values().filter(|n| **n > 0).count();
    assert!(hit >= 5, "{:?}", r.reached);
    // The counts are the seeds that reached each probe.
    for (probe, n) in &r.reached {
        let seeds = outcomes
            .iter()
            .filter(|o| o.reached.contains(probe))
            .count() as u64;
        assert_eq!(*n, seeds, "{probe}");
    }
}

#[test]
fn a_determinism_failure_names_the_first_event_where_the_traces_part() {
    let a = ["sent 1", "store 1", "answered 1"];
    let b = ["sent 1", "store 2", "answered 1"];
    let d = explore::first_difference(&a, &b);
    assert!(d.contains("event 1") && d.contains("store 2"), "{d}");
    assert!(explore::first_difference(&a, &a[..2]).contains("the end"));
}

#[test]
fn every_system_under_test_draws_valid_scenarios() {
    for sut in Sut::all() {
        for seed in 1..=100 {
            let spec = explore::scenario_json(seed, sut)
                .unwrap_or_else(|e| panic!("{} seed {seed}: {e}", sut.name()));
            ratelab_sim::Scenario::parse(std::path::Path::new("<drawn>"), &spec.to_string())
                .unwrap_or_else(|e| panic!("{} seed {seed}: {e}", sut.name()));
        }
    }
}

#[test]
fn a_witness_names_its_key_even_with_quotes_in_it() {
    let detail = format!("epoch 0, key {:?}: request 7: denied", "a\"b\\c");
    assert_eq!(explore::named_key(&detail).as_deref(), Some("a\"b\\c"));
    assert_eq!(explore::named_key("no key here"), None);
    assert_eq!(ratelab_check::timeline::named_request(&detail), Some(7));
}

#[test]
fn a_campaigns_counts_are_of_seeds() {
    use explore::verdict::{Class, Failure};
    let failure = |detail: &str| Failure {
        class: Class::Safety,
        checker: "window".into(),
        detail: detail.into(),
    };
    let outcome = |seed, failures: Vec<Failure>| explore::Outcome {
        seed,
        requests: 10,
        faults: vec!["pause".into(), "pause".into(), "clock".into()],
        failures,
        reached: Vec::new(),
        unknown_keys: 0,
        judged: Default::default(),
    };
    let outcomes = [
        outcome(1, vec![failure("key a"), failure("key b")]),
        outcome(2, vec![failure("key c")]),
        outcome(3, Vec::new()),
    ];
    let r = explore::summarize(Sut::Naive, &outcomes, None);
    assert_eq!(r.failed_seeds, 2);
    assert_eq!(r.found.len(), 1);
    assert_eq!(r.found[0].seeds, 2, "two failing seeds, three failures");
    assert_eq!(r.found[0].first_seed, 1);
    assert_eq!(r.fault_coverage["pause"], 3, "three seeds with a pause");
}

#[test]
fn a_checker_that_judged_nothing_in_a_campaign_fails_it() {
    let outcome = |seed, judged: u64| explore::Outcome {
        seed,
        requests: 10,
        faults: Vec::new(),
        failures: Vec::new(),
        reached: Vec::new(),
        unknown_keys: 0,
        judged: [("liveness".to_owned(), judged)].into(),
    };
    let blind = explore::summarize(Sut::Correct, &[outcome(1, 0), outcome(2, 0)], None);
    assert_eq!(blind.blind(), ["liveness"]);
    let seen = explore::summarize(Sut::Correct, &[outcome(1, 0), outcome(2, 3)], None);
    assert!(seen.blind().is_empty());
    assert_eq!(
        seen.coverage_by_checker["liveness"],
        explore::Coverage {
            seeds: 2,
            judged: 3
        }
    );
    // A merge of shards adds them up.
    let merged = explore::merge(&[blind, seen]).unwrap();
    assert_eq!(merged.coverage_by_checker["liveness"].seeds, 4);
    assert!(merged.blind().is_empty());
}
