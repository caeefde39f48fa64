//! # ratelab-server
//!
//! The rate-limiting gateway as a server to deploy: HTTP in front of the embedded in-memory
//! store or Redis, with the production behaviours of `ratelab-gateway` (429 with
//! `Retry-After` and the RateLimit fields, fail-open with a breaker, the kill switch, layered
//! limits, metrics, the request log).
//!
//! Its dependency graph holds no simulator: madsim's `#[no_mangle]` replacements of
//! `clock_gettime`, `getrandom` and the like are linked into any binary that depends on
//! madsim, so the server is its own crate and binary (`ratelab-server`), and
//! `tests/suite/graph.rs` checks its resolved graph. `ratelab serve` in the simulation binary runs
//! this same code, for demonstrations and probes next to the simulator.
//!
//! | module | owns |
//! |---|---|
//! | [`config`] | the config file and its validation into settings |
//! | [`args`] | the flags, merged over the config file |
//! | [`limits`] | the limits file: TOML, its JSON Schema, validation with located errors |
//! | [`policy`] | a limit's algorithm and parameters, validated; which ones Redis runs |
//! | [`stores`] | where the limits keep their buckets: in memory, Redis, a Redis Cluster |
//! | [`limit_set`] | the gateway's limits over a store, kept across reloads |
//! | [`serve`] | serving the gateway, its admin listener and its rate limit service |
//! | [`reload`] | hot reload of the limits file, on change and on SIGHUP |
//! | [`writers`] | whether a write to the limits file is open (inotify), for the reloader |
//! | [`proxy`] | the reverse proxy to `--upstream`, behind the limiter |
//! | [`body`] | a proxied request's body, read under bounds |
//! | [`upstream_conns`] | the bound on sockets to the upstream, idle ones included |
//! | [`listeners`] | the admin and gRPC listeners, bounded like the data plane |
//! | [`rls`] | Envoy's rate limit service (RLS v3 gRPC) and its descriptor trees |
#![warn(missing_docs)]

pub mod args;
pub mod body;
pub mod config;
pub mod limit_set;
pub mod limits;
pub mod listeners;
pub mod policy;
pub mod proxy;
pub mod reload;
pub mod rls;
pub mod serve;
pub mod stores;
pub mod upstream_conns;
pub mod writers;

pub use args::{EXIT_BAD_INPUT, ServeArgs, serve_command};
