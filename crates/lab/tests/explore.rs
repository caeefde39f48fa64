//! The explorer: seeds draw the same valid scenarios everywhere, shards split the seeds, and
//! a bounded campaign finds the naive path's lost updates with no scenario written for them.

use ratelab_lab::explore::{self, Campaign, Sut, verdict::Class};

#[test]
fn a_seed_draws_the_same_valid_scenario_every_time() {
    for seed in 1..=300 {
        let a = explore::scenario_json(seed, Sut::Correct);
        assert_eq!(a, explore::scenario_json(seed, Sut::Correct), "seed {seed}");
        ratelab_sim::Scenario::parse(std::path::Path::new("<drawn>"), &a.to_string())
            .unwrap_or_else(|e| panic!("seed {seed} drew an invalid scenario: {e}"));
    }
    // Different seeds draw different scenarios.
    assert_ne!(
        explore::scenario_json(1, Sut::Correct),
        explore::scenario_json(2, Sut::Correct)
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
    let c = Campaign {
        sut: Sut::Correct,
        first: 1,
        count: 200,
        shard: (0, 1),
        threads: 2,
    };
    let (r, _) = explore::run(&c, &|_, _| {});
    assert_eq!(r.seeds, 200);
    assert!(
        r.found.is_empty(),
        "false alarms on the correct limiter: {:#?}",
        r.found
    );
    assert!(r.fault_coverage.len() >= 8, "{:?}", r.fault_coverage);
}
