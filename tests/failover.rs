//! A Redis Cluster failover under load, on a real local cluster: the hot key's primary is
//! killed while senders decide on it, once with plain asynchronous replication and once with
//! WAIT after each decision (the two runs at once, each on a cluster of its own); the
//! overshoot stays within the documented bound (B), calls fail at the failover, and the
//! replica is promoted and decides. `ratelab failover` runs the same longer, and restarts the
//! killed node as the promoted primary's replica.

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use ratelab_lab::failover::{FailoverConfig, run};
use std::time::Duration;

#[test]
fn a_failover_under_load_stays_within_its_bound_and_recovers() {
    if !redis_cluster::installed() {
        // Says why, and fails when Redis is required.
        assert!(redis_cluster::RedisCluster::start("a_failover_under_load").is_none());
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = |wait| FailoverConfig {
        senders: 4,
        seconds: 4.5,
        kill_at: 0.3,
        restart_after: None,
        wait,
        // As `ratelab failover`: the call's timeout exceeds the longest wait.
        timeout: Duration::from_millis(90),
        ..FailoverConfig::default()
    };
    let (plain, waited) = (cfg(None), cfg(Some(Duration::from_millis(20))));
    let (a, b) = rt.block_on(async { tokio::join!(run(&plain), run(&waited)) });
    for r in [a.unwrap(), b.unwrap()] {
        println!("{r:?}");
        assert!(r.overshoot <= r.bound, "{r:?}");
        assert!(r.failed > 0, "the kill was felt: {r:?}");
        assert!(r.promoted_ms.is_some(), "the replica was promoted: {r:?}");
        assert!(
            r.recovered_ms.is_some(),
            "the promoted replica decided: {r:?}"
        );
        assert!(r.admitted > plain.capacity, "{r:?}");
    }
}
