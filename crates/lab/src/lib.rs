//! # ratelab-lab
//!
//! Experiments over the simulator, and what they write. `crates/sim` is the cluster, the
//! scenarios and their reports; this crate runs many of them and turns the results into files:
//!
//! - [`sweep`]: the overshoot experiment (naive vs atomic over a concurrency ladder, store
//!   round trips and seeds) and the algorithm comparison at a window boundary;
//! - [`matched`]: the simulated ladder at the round trips a real Redis measured, beside it;
//! - [`output`]: the CSV, JSON and SVG files under `docs/results/`, and the marked figure
//!   blocks of the write-up and the README (`<!-- BEGIN sweep:NAME -->`), with the check that
//!   they are current;
//! - [`commands`]: what the `ratelab` subcommands that run experiments do, from settings to
//!   printed tables and written files;
//! - [`real`]: the overshoot ladder on a real Redis, and the atomic path beside
//!   `redis-benchmark`;
//! - [`explore`]: swarm-generated scenarios judged by every checker (`ratelab explore`);
//! - [`fuzz`]: mutation fuzzing of scenario files (`ratelab fuzz`);
//! - [`probe`]: real limiters ratelab did not write (an HTTP endpoint, a Redis script, the
//!   read-then-write client) driven from outside and judged by the checkers (`ratelab probe`);
//! - [`failover`]: what a Redis Cluster failover costs a token bucket, on a real local
//!   cluster (`ratelab failover`);
//! - [`soak`]: a long, bounded run of a real `ratelab-server` over many keys, sampled for
//!   growth (`ratelab soak`);
//! - [`table`]: the one style of the tables the commands print on a terminal;
//! - [`audit`]: the rate limiters people deploy, installed from their registries and
//!   started on loopback from the recipes under `audits/`, probed and judged, with the
//!   results written to `docs/AUDITS.md` (`ratelab audit`);
//! - [`timeline`]: one key's requests, the store's applies, the envelope and the faults as a
//!   self-contained HTML page (`ratelab run --timeline`, and the explorer's shrunk failures).
//!
//! The private `redis-server` and Redis Cluster that the experiments start on their own
//! (`sweep --redis auto`, `failover`) come from `ratelab-procs`, which the tests share.
//!
//! A new experiment is a module here with a function from its configuration to serializable
//! results, and, if the docs quote it, a block writer in [`output`] and a test that reruns it
//! against the committed results.
#![warn(missing_docs)]

pub mod audit;
pub mod commands;
pub mod explore;
pub mod failover;
pub mod fuzz;
pub mod matched;
pub mod output;
pub mod probe;
pub mod real;
pub mod soak;
pub mod sweep;
pub mod table;
pub mod timeline;
