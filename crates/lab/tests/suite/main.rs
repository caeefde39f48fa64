//! ratelab-lab's integration tests, one binary: a module per subject.

mod docs_current;
mod explore;
mod sweep_shape;
mod timeline;
