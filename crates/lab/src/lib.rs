//! # ratelab-lab
//!
//! Experiments over the simulator, and what they write. `crates/sim` is the cluster, the
//! scenarios and their reports; this crate runs many of them and turns the results into files:
//!
//! - [`sweep`]: the overshoot experiment (naive vs atomic over a concurrency ladder, store
//!   round trips and seeds) and the algorithm comparison at a window boundary;
//! - [`matched`]: the simulated ladder at the round trips a real Redis measured
//!   (`ratelab_probe::real`), beside it;
//! - [`output`]: the CSV, JSON and SVG files under `docs/results/`, and the marked figure
//!   blocks of the write-up and the README (`<!-- BEGIN sweep:NAME -->`), with the check that
//!   they are current;
//! - [`commands`]: what the `ratelab` subcommands that run experiments do, from settings to
//!   the outcome they return (which displays as `ratelab` prints it) and the files written;
//! - [`explore`]: swarm-generated scenarios judged by every checker (`ratelab explore`);
//! - [`fuzz`]: mutation fuzzing of scenario files (`ratelab fuzz`);
//! - [`timeline`]: a simulated run's timeline page (`ratelab run --timeline`, and the
//!   explorer's shrunk failures), drawn by `ratelab_check::timeline`.
//!
//! What measures real processes (the probe, the audits, the soak, the real-Redis ladder, the
//! failover) is `ratelab-probe`, which has no simulator in its graph.
//!
//! A new experiment is a module here with a function from its configuration to serializable
//! results, and, if the docs quote it, a block writer in [`output`] and a test that reruns it
//! against the committed results.
#![warn(missing_docs)]

pub mod commands;
pub mod explore;
pub mod fuzz;
pub mod matched;
pub mod output;
pub mod sweep;
pub mod timeline;
