//! # ratelab-gateway
//!
//! The request pipeline of a rate-limiting gateway, in the order a request meets it:
//!
//! 1. a request id (the HTTP layer assigns a time-ordered UUIDv7);
//! 2. the guard slot (a cheap pre-check such as a bloom filter of keys);
//! 3. the **per-IP edge limit**, keyed on the client address, decided by one rule ([`ip`]:
//!    canonical addresses, and only the one forwarding header named, believed only from
//!    configured proxies, its rightmost untrusted entry);
//! 4. the **per-key limit**, keyed on the `x-api-key` header, when one is sent;
//! 5. the answer: 429 with `Retry-After` and the RateLimit fields on a denial, the RateLimit
//!    fields on an admission, so clients can pace themselves.
//!
//! A request denied at the edge never reaches — and never spends — its per-key quota. Before
//! any of it, the HTTP front end gives the request one spelling ([`path`]: the path
//! normalised, a lower-case method or a keyed header sent twice or folded refused), so a
//! selector cannot be dodged by spelling a route otherwise.
//!
//! Those two are the default pair ([`Gateway::new`]). In general a gateway applies a set of
//! named limits ([`limits`]: a selector, a key, a cost, enforce or shadow mode, each over its
//! own store client), and [`Gateway::replace_limits`] swaps the set while serving. A
//! request's enforced limits are decided in one all-or-nothing store step when their store
//! can ([`StoreClient::apply_all`](ratelab_store::StoreClient::apply_all)), else one by one
//! in order, stopping at the first denial. A new way to select, key or cost a request goes in
//! [`limits`].
//!
//! Store trouble fails **open** by default: after a short timeout (or at once while the
//! layer's circuit breaker is open) the request is allowed, marked, and counted by reason.
//! Routes listed as fail-closed are refused with 503 instead. The kill switch turns limiting
//! off entirely; bypassed requests are counted and the store is not called.
//!
//! [`Gateway`] is runtime-agnostic: stores come in through
//! [`StoreClient`](ratelab_store::StoreClient) and time through [`Env`], so the same code runs
//! in the madsim cluster and behind the real HTTP server ([`http`], feature `http`: the tower
//! layer and the axum app; [`front`]: the HTTP/1.1 front end `ratelab-server` runs, whose
//! connections [`conns`] bounds; [`admin`]: the metrics and the switches, on a listener of
//! their own).
//! [`latency`] keeps the store-latency histogram every store call records. Under tokio a
//! store call that waits is bounded by its thread's table of deadlines (`deadlines`, one timer
//! per thread rather than one per call). [`waiting`] holds waiting calls in slots their
//! tickets name, by deadline when they have one: that table's, and in the simulator a
//! gateway's timeouts and the replies its store calls wait for.
#![warn(missing_docs)]

#[cfg(feature = "http")]
pub mod admin;
mod answer;
pub mod bloom;
pub mod breaker;
mod config;
#[cfg(feature = "http")]
pub mod conns;
#[cfg(feature = "http")]
mod deadlines;
pub mod denial_cache;
mod env;
#[cfg(feature = "http")]
pub mod front;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
mod in_place;
pub mod ip;
pub mod latency;
pub mod limits;
pub mod path;
mod pipeline;
pub mod reqlog;
mod request;
pub mod singleton;
mod stats;
pub mod waiting;

pub use answer::{Answer, FailReason, LayerOutcome, LimitResult, Verdict};
pub use breaker::{Breaker, BreakerConfig, BreakerState};
pub use config::GatewayConfig;
#[cfg(feature = "http")]
pub use deadlines::BoundedSent;
pub use env::Env;
pub use ip::{ClientIpHeader, IpNet};
pub use pipeline::Gateway;
pub use request::{Guard, Request, same_when_folded};
pub use stats::{Stats, StatsSnapshot};
