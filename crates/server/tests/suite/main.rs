//! ratelab-server's integration tests, one binary: a module per subject, `common` the servers they start.

mod admin;
mod bounds;
mod common;
mod conns;
mod edge;
mod graph;
mod limits;
mod malformed;
mod proxy;
mod rls;
mod serve;
