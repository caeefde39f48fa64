//! The workspace-level integration tests that are not proofs, one binary: a module per subject. (The loom and shuttle proofs and the scenario runner are binaries of their own.)

mod architecture;
#[path = "../support/caller_clock.rs"]
mod caller_clock;
mod fuzz;
mod http;
#[path = "../support/multi_conformance.rs"]
mod multi_conformance;
mod redis;
mod redis_cluster;
mod redis_limits;
mod request_log;
