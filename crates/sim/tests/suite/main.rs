//! ratelab-sim's integration tests, one binary: a module per subject.

mod checkers;
mod faults;
mod fidelity;
mod limiter;
mod linearizable;
mod policy;
mod store_engine;
mod store_plug;
