//! # ratelab-probe
//!
//! The black-box half of ratelab: real processes, measured over real sockets and judged by
//! `ratelab-check`'s checkers. Nothing here simulates, and the crate's graph holds no madsim,
//! simulator, model checker or experiment crate (`tests/suite/graph.rs` holds it to that), so
//! a real clock, real randomness and real threads are what it measures with. Its binary,
//! `ratelab-probe`, runs the real-world commands; `ratelab probe|audit|soak|failover` hands
//! them to it.
//!
//! - [`probe`]: a real limiter ratelab did not write (an HTTP endpoint, a Redis script, the
//!   read-then-write client) driven from outside and judged against the policy it claims
//!   (`ratelab probe`);
//! - [`audit`]: the rate limiters people deploy, installed from their registries and started
//!   on loopback from the recipes under `audits/`, probed and judged, with the results
//!   written to `docs/AUDITS.md` (`ratelab audit`);
//! - [`soak`]: a long, bounded run of a real `ratelab-server` over many keys, sampled for
//!   growth (`ratelab soak`);
//! - [`real`]: the overshoot ladder on a real Redis, and the atomic path beside
//!   `redis-benchmark` (the simulator's twin of the ladder is `ratelab-lab`'s);
//! - [`failover`]: what a Redis Cluster failover costs a token bucket, on a real local
//!   cluster (`ratelab failover`);
//! - [`commands`]: those commands from their settings to printed tables and written files;
//! - [`table`] and [`blocks`]: the one style of the printed tables, and the docs' marked
//!   figure blocks the commands rewrite.
//!
//! A new kind of probe target is a [`probe::Target`] in a module under `probe/`; a new audited
//! limiter is a directory under `audits/` with a recipe, and no code here.
#![warn(missing_docs)]

pub mod audit;
pub mod blocks;
pub mod commands;
pub mod failover;
pub mod probe;
pub mod real;
pub mod soak;
pub mod table;
