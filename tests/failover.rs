//! A Redis Cluster failover under load, on a real local cluster: the hot key's primary is
//! killed while senders decide on it; the overshoot it causes stays within the documented
//! bound (B), calls fail at the failover, the replica is promoted and decides, and decisions
//! go on once the killed node is back as its replica.

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
    for wait in [None, Some(Duration::from_millis(20))] {
        let cfg = FailoverConfig {
            senders: 8,
            seconds: 5.0,
            kill_at: 0.5,
            restart_after: Some(1.0),
            wait,
            // As `ratelab failover`: the call's timeout exceeds the longest wait.
            timeout: Duration::from_millis(90),
            ..FailoverConfig::default()
        };
        let r = rt.block_on(run(&cfg)).unwrap();
        println!("{r:?}");
        assert!(r.overshoot <= r.bound, "{r:?}");
        assert!(r.failed > 0, "the kill was felt: {r:?}");
        assert!(
            r.recovered_ms.is_some(),
            "the promoted replica decided: {r:?}"
        );
        assert!(r.promoted_ms.is_some(), "the replica was promoted: {r:?}");
        assert!(
            r.decided_after_restart > 0,
            "decisions after the restart: {r:?}"
        );
        assert!(r.admitted > cfg.capacity, "{r:?}");
    }
}
