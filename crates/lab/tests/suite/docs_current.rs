//! The committed results are today's results. `docs_figures_match_the_committed_results`
//! (sweep_shape.rs) shows the docs quote `docs/results/`; this shows `docs/results/` is what
//! the code gives now: seed 1 of every scenario the docs cite, rerun, gives exactly its report
//! in `gateway.json` (every figure and the trace hash; wall time aside), and a spread of sweep
//! points gives exactly their rows of `overshoot.json`. When a change moves a figure, this
//! fails until `cargo run --release -p ratelab -- sweep` has regenerated the results.

use ratelab_lab::matched::{RealLadder, RealStore};
use ratelab_lab::output::cited_scenarios;
use ratelab_lab::sweep::{self, Sweep};
use ratelab_sim::{RunOptions, Scenario};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(p: &str) -> String {
    std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// `v` as the committed files hold it: written as JSON text and read back, so a float goes
/// through the same decimal text (and the same parse) on both sides of a comparison.
fn as_committed<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::from_str(&serde_json::to_string(v).expect("serializes")).expect("parses")
}

const REGENERATE: &str = "regenerate with `cargo run --release -p ratelab -- sweep`";

#[test]
fn every_cited_scenario_reruns_to_its_committed_report() {
    let committed: Vec<serde_json::Value> =
        serde_json::from_str(&read("docs/results/gateway.json")).expect("gateway.json parses");
    let files: Vec<&str> = cited_scenarios().collect();
    assert_eq!(
        committed.len(),
        files.len(),
        "gateway.json holds {} reports for {} cited scenarios: {REGENERATE}",
        committed.len(),
        files.len()
    );
    for (file, want) in files.iter().zip(&committed) {
        let sc = Scenario::load(&root().join(file)).unwrap_or_else(|e| panic!("{e}"));
        let (mut report, _) = ratelab_sim::run(&sc, 1, RunOptions::default());
        report.file = (*file).to_owned();
        report.wall_ms = 0.0;
        let got = as_committed(&report);
        if &got != want {
            let differ: Vec<String> = got
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| want.get(k.as_str()) != Some(v))
                .map(|(k, v)| format!("{k}: committed {:?}, today {v}", want.get(k.as_str())))
                .collect();
            panic!(
                "{file}, seed 1, differs from docs/results/gateway.json: {differ:#?}\n{REGENERATE}"
            );
        }
    }
}

#[test]
fn sweep_points_rerun_to_their_committed_rows() {
    let s: Sweep =
        serde_json::from_str(&read("docs/results/overshoot.json")).expect("overshoot.json parses");
    // Seed 1 at a few concurrencies, every path and round trip: milliseconds each.
    let picked: Vec<_> = s
        .points
        .iter()
        .filter(|p| p.seed == 1 && [2, 8, 16].contains(&p.concurrency))
        .collect();
    assert!(picked.len() >= 12, "{} points picked", picked.len());
    for want in picked {
        let got = sweep::measure(
            &s.config,
            &want.path,
            want.concurrency,
            want.latency_us,
            want.seed,
        );
        assert_eq!(
            as_committed(&got),
            as_committed(want),
            "{} path, {} senders, {} µs one way, seed {}: {REGENERATE}",
            want.path,
            want.concurrency,
            want.latency_us,
            want.seed
        );
    }
}

/// The real ladders committed: one server's, and a Redis Cluster's, each with the command
/// that measures it again.
const LADDERS: [(RealStore, &str); 2] = [
    (
        RealStore::Server,
        "regenerate with `cargo run --release -p ratelab -- sweep --redis auto`",
    ),
    (
        RealStore::Cluster,
        "regenerate with `cargo run --release -p ratelab -- sweep --redis auto-cluster`",
    ),
];

fn committed_ladder(store: RealStore) -> RealLadder {
    let file = format!("docs/results/{}.json", store.results_stem());
    let l: RealLadder =
        serde_json::from_str(&read(&file)).unwrap_or_else(|e| panic!("{file} parses: {e}"));
    assert_eq!(l.store, store, "{file} names the store it ran on");
    l
}

/// The simulated half of each real-Redis comparison is today's simulator: a spread of its
/// Poisson runs, and of its replays of the recorded real arrivals, rerun to their committed
/// rows (the real half is a measurement of a real store and is not rerun here).
#[test]
fn the_simulated_side_of_the_redis_ladders_reruns_to_its_committed_rows() {
    for (store, regenerate) in LADDERS {
        simulated_side_reruns(&committed_ladder(store), regenerate);
    }
}

fn simulated_side_reruns(l: &RealLadder, regenerate: &str) {
    let picked: Vec<_> = l
        .sim
        .iter()
        .filter(|p| p.seed == 1 && [8, 64].contains(&p.concurrency))
        .collect();
    assert!(
        picked.len() >= 4,
        "{} simulated points picked",
        picked.len()
    );
    for want in picked {
        let got = sweep::measure(
            &l.sim_config,
            &want.path,
            want.concurrency,
            want.latency_us,
            want.seed,
        );
        assert_eq!(
            as_committed(&got),
            as_committed(want),
            "{} path, {} senders, {} µs: {regenerate}",
            want.path,
            want.concurrency,
            want.latency_us
        );
    }
    let replays: Vec<_> = l
        .replayed
        .iter()
        .filter(|r| r.run == 0 && [8, 64].contains(&r.concurrency))
        .collect();
    assert!(replays.len() >= 4, "{} replays picked", replays.len());
    for want in replays {
        let real = l
            .real
            .iter()
            .find(|p| p.path == want.path && p.concurrency == want.concurrency && p.run == want.run)
            .expect("every replay has its real run");
        assert_eq!(
            real.offered as usize,
            real.store_reads_us.len() + real.errors as usize
        );
        let got = ratelab_lab::matched::replay(real, want.latency_us, &l.sim_config)
            .expect("a committed run replays");
        assert_eq!(
            as_committed(&got),
            as_committed(want),
            "replay of {} run {} at {} senders: {regenerate}",
            want.path,
            want.run,
            want.concurrency
        );
    }
}

/// docs/CLUSTER.md quotes the committed cluster ladder exactly (one server's block is checked
/// with the write-up's, in sweep_shape.rs), and each ladder's CSV is its real runs.
#[test]
fn the_cluster_ladder_in_the_docs_is_the_committed_one() {
    let l = committed_ladder(RealStore::Cluster);
    let doc = read("docs/CLUSTER.md");
    let regenerated = ratelab_lab::output::replace_marked(
        &doc,
        RealStore::Cluster.block(),
        &ratelab_lab::matched::real_table(&l),
    )
    .expect("docs/CLUSTER.md has the sweep:redis-cluster block");
    assert!(
        regenerated == doc,
        "docs/CLUSTER.md: sweep:redis-cluster is stale: {}",
        LADDERS[1].1
    );
    for (store, regenerate) in LADDERS {
        assert_eq!(
            read(&format!("docs/results/{}.csv", store.results_stem())),
            ratelab_lab::output::real_csv(&committed_ladder(store).real),
            "{regenerate}"
        );
    }
}

/// docs/CLUSTER.md quotes the committed real-cluster runs exactly: the failover
/// (`cargo run --release -p ratelab-probe -- failover`) and the scale measurement
/// (`cargo run --release -p ratelab-probe -- failover --scale --senders 32 --seconds 5`).
#[test]
fn the_cluster_doc_quotes_the_committed_failover_and_scale_runs() {
    use ratelab_probe::failover::{FailoverResults, ScaleResults, failover_table, scale_table};
    let doc = read("docs/CLUSTER.md");
    let failover: FailoverResults = serde_json::from_str(&read("docs/results/failover-real.json"))
        .expect("failover-real.json parses");
    assert_eq!(failover.runs.len(), 2, "a run without and one with WAIT");
    let scale: ScaleResults = serde_json::from_str(&read("docs/results/cluster-scale.json"))
        .expect("cluster-scale.json parses");
    for (tag, table, command) in [
        (
            "figures:failover-real",
            failover_table(&failover),
            "cargo run --release -p ratelab-probe -- failover",
        ),
        (
            "figures:cluster-scale",
            scale_table(&scale),
            "cargo run --release -p ratelab-probe -- failover --scale --senders 32 --seconds 5",
        ),
    ] {
        let regenerated = ratelab_lab::output::replace_block(&doc, tag, &table)
            .unwrap_or_else(|e| panic!("docs/CLUSTER.md: {e}"));
        assert!(
            regenerated == doc,
            "docs/CLUSTER.md: {tag} is stale: regenerate with `{command}`"
        );
    }
    // Each committed run measured the replica's lag and stayed within its bound.
    for r in &failover.runs {
        assert!(r.lag_samples > 0, "{r:?}");
        assert!(r.overshoot <= r.bound, "{r:?}");
    }
}
