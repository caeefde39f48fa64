//! The probe crate's integration tests, one binary: the probe against real limiters, the
//! bounded audit, the soak, and the graph that keeps the simulator out.

mod audit;
mod explore;
mod graph;
mod probe;
mod soak;

use std::path::PathBuf;

/// The `ratelab-probe` binary under test.
fn probe_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ratelab-probe"))
}

/// The `ratelab-server` the probes and the soak run against, built into this target
/// directory.
fn server_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            ratelab_testkit::cargo::workspace_binary("ratelab-server", "ratelab-server")
        })
        .clone()
}
