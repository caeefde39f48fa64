//! # ratelab-procs
//!
//! The outside programs ratelab's experiments and tests run, and nothing else:
//!
//! - [`redis`]: a private `redis-server` or Redis Cluster (three primaries, three replicas)
//!   on free loopback ports, stopped when its guard drops — the one Redis starter of the
//!   workspace, used by `ratelab-lab`'s experiments (`sweep --redis auto`, `failover`) and,
//!   through `ratelab-testkit`, by the tests;
//! - [`free_port`]: a loopback port nothing listens on;
//! - [`installed`]: which outside programs the tests drive (redis-server, nginx, Chromium,
//!   `nm`, Python's grpcio) are installed, for the build script of each package whose tests
//!   need one: a missing one marks those tests ignored (`cfg(ratelab_missing_NAME)`), unless
//!   its `RATELAB_REQUIRE_*` variable is `1`.
//!
//! It depends on nothing but the standard library, so that both the experiments and the test
//! kit can use it without one depending on the other, and so can a build script. A new private
//! process (another store, a proxy the experiments start) or a new outside program a test
//! needs goes here; what a test alone needs (temp dirs, the docs' figure blocks, the
//! skip-or-fail policy at run time) goes in `ratelab-testkit`.
#![warn(missing_docs)]

pub mod installed;
pub mod redis;

/// A port nothing listens on now, never handed out before in this process, with its cluster
/// bus port (port + 10 000) free of every port handed out too: the tests of one binary start
/// clusters at once. 0, which no server can use, if none was found in 100 tries.
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..100 {
        let Ok(port) = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
        else {
            continue;
        };
        let bus = u32::from(port) + 10_000;
        let clash = given
            .iter()
            .any(|&g| g == port || u32::from(g) + 10_000 == u32::from(port) || u32::from(g) == bus);
        if bus <= 65_535 && !clash && std::net::TcpListener::bind(("127.0.0.1", bus as u16)).is_ok()
        {
            given.push(port);
            return port;
        }
    }
    0
}
