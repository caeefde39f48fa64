//! ratelab-core's integration tests, one binary: a module per subject.

mod all_or_nothing;
mod behaviour;
mod properties;
mod spec;
