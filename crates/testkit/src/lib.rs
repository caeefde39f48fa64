//! # ratelab-testkit
//!
//! What the tests of every ratelab crate share (a dev-dependency only, never published):
//!
//! - `redis_server` and `redis_cluster`: a private `redis-server` or Redis Cluster on free
//!   loopback ports (the processes are `ratelab_procs::redis`'s, the ones the experiments
//!   start; the kit adds the skip-or-fail policy);
//! - `nginx`: a private nginx from a configuration the test gives;
//! - [`temp`]: a temp directory removed on drop;
//! - [`cargo`]: a package's dependency graph, the libc functions a binary defines, and
//!   another package's binary built for a test;
//! - [`docs`]: the figure blocks of the docs a test checks, or writes under `RATELAB_BLESS=1`;
//! - `free_port`: a loopback port nothing listens on.
//!
//! The process helpers are behind the default feature `processes`, the only one that brings in
//! a workspace crate (`ratelab-procs`, which depends on the standard library alone); without
//! it the kit is the figure blocks and temp dirs, and depends on nothing in the workspace.
//!
//! Every process the kit starts is stopped, and waited for, when its guard drops, a panicking
//! test's too.
//!
//! **A component that is not installed.** A test that needs Redis, nginx or another outside
//! program is marked ignored by its package's build script when the program is missing
//! (`#[cfg_attr(ratelab_missing_redis, ignore = "…")]`; the components and the build script
//! are `ratelab_procs::installed`'s), so it shows as `ignored`, with the reason, in cargo's
//! summary. When the component's `RATELAB_REQUIRE_*` variable is `1` (as `.ci/run` sets), the
//! build script marks nothing and the test runs. At run time the test asks [`require`] as
//! well, the second line of defence: missing and required, it panics; missing and not
//! required (a program removed since the build), it says loudly that the test skips, and the
//! test passes as `ok`.
#![warn(missing_docs)]

pub mod cargo;
pub mod docs;
#[cfg(feature = "processes")]
pub mod haproxy;
#[cfg(feature = "processes")]
pub mod nginx;
#[cfg(feature = "processes")]
pub mod redis_cluster;
#[cfg(feature = "processes")]
pub mod redis_server;
pub mod temp;

#[cfg(feature = "processes")]
pub use ratelab_procs::free_port;

/// Whether a test that needs `component` runs: `true` if `installed`; otherwise, when
/// `require_var` is `1`, a panic naming the test; otherwise `false` after a loud
/// `*** SKIPPED` line that says how to install it (`how`).
pub fn require(test: &str, component: &str, installed: bool, require_var: &str, how: &str) -> bool {
    if installed {
        return true;
    }
    if std::env::var(require_var).as_deref() == Ok("1") {
        panic!("{test}: {component} is not installed and {require_var}=1");
    }
    eprintln!(
        "\n*** SKIPPED {test}: {component} is not installed. Install it ({how}); set \
         {require_var}=1 to make its absence a failure. ***\n"
    );
    false
}
