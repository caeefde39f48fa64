//! A private Redis Cluster for one test: three primaries and three replicas from
//! `redis-server` on free loopback ports, no persistence, a short `cluster-node-timeout`
//! (500 ms), every node stopped when dropped.

pub use ratelab_procs::redis::{Node, cli, cluster_installed as installed};

/// A running cluster: [`ratelab_procs::redis::RedisCluster`] (its nodes, seeds, kill,
/// restart), created for a test.
#[derive(Debug)]
pub struct RedisCluster(ratelab_procs::redis::RedisCluster);

impl RedisCluster {
    /// Starts and creates a cluster for test `test`, or returns `None` (after saying why) when
    /// `redis-server` or `redis-cli` is not installed and not required
    /// (`RATELAB_REQUIRE_REDIS=1`).
    pub fn start(test: &str) -> Option<RedisCluster> {
        if !crate::require(
            test,
            "redis-server or redis-cli",
            installed(),
            "RATELAB_REQUIRE_REDIS",
            "Debian: apt-get install redis-server",
        ) {
            return None;
        }
        let cluster =
            ratelab_procs::redis::RedisCluster::create().unwrap_or_else(|e| panic!("{test}: {e}"));
        Some(RedisCluster(cluster))
    }
}

impl std::ops::Deref for RedisCluster {
    type Target = ratelab_procs::redis::RedisCluster;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for RedisCluster {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
