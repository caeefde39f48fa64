//! A private `redis-server` for one test: a free loopback port, no persistence, a temp dir,
//! stopped (SIGKILL, then waited for) when dropped.

pub use ratelab_procs::free_port;
pub use ratelab_procs::redis::info_field;

/// A running server: [`ratelab_procs::redis::RedisServer`] (its port, URL, signals, kill,
/// restart), started for a test.
#[derive(Debug)]
pub struct RedisServer(ratelab_procs::redis::RedisServer);

impl RedisServer {
    /// Starts a server, or returns `None` (after saying why) when Redis is not installed and
    /// not required (`RATELAB_REQUIRE_REDIS=1`).
    pub fn start(test: &str) -> Option<RedisServer> {
        let installed = ratelab_procs::redis::server_installed();
        if !crate::require(
            test,
            "redis-server",
            installed,
            "RATELAB_REQUIRE_REDIS",
            "Debian: apt-get install redis-server",
        ) {
            return None;
        }
        let server =
            ratelab_procs::redis::RedisServer::start().unwrap_or_else(|e| panic!("{test}: {e}"));
        Some(RedisServer(server))
    }
}

impl std::ops::Deref for RedisServer {
    type Target = ratelab_procs::redis::RedisServer;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
