//! The gateway's counters: exact, lock-free [`Stats`] for tests and reports, and the metrics
//! exported through the `metrics` facade, described here and set to 0 for each limit so
//! their series exist before the first event.

use crate::limits::LimitSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters, exact and lock-free; also exported through the `metrics` facade.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests let through by the limits: admitted, or admitted because a limit failed open.
    pub allowed: AtomicU64,
    /// Requests denied (429), for any reason.
    pub denied: AtomicU64,
    /// Of those, requests denied because a limit's store had no room for a new key.
    pub denied_store_full: AtomicU64,
    /// Layers that failed open because of a store error.
    pub fail_open_error: AtomicU64,
    /// … a timeout.
    pub fail_open_timeout: AtomicU64,
    /// … an open breaker.
    pub fail_open_breaker: AtomicU64,
    /// Requests refused because a fail-closed route could not reach the store.
    pub fail_closed: AtomicU64,
    /// Requests let through by the kill switch.
    pub bypassed: AtomicU64,
    /// Requests a limit's denial cache answered, without a store call.
    pub denial_cache_hits: AtomicU64,
    /// Denials by a shadow limit (or under the global shadow switch), each let through.
    pub shadow_denied: AtomicU64,
    /// Requests rejected as malformed.
    pub bad_request: AtomicU64,
    /// Requests rejected by the guard.
    pub rejected: AtomicU64,
    /// Breaker openings.
    pub breaker_opened: AtomicU64,
    /// Breaker closings.
    pub breaker_closed: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// See [`Stats`].
    pub allowed: u64,
    /// See [`Stats`].
    pub denied: u64,
    /// See [`Stats`].
    pub denied_store_full: u64,
    /// See [`Stats`].
    pub fail_open_error: u64,
    /// See [`Stats`].
    pub fail_open_timeout: u64,
    /// See [`Stats`].
    pub fail_open_breaker: u64,
    /// See [`Stats`].
    pub fail_closed: u64,
    /// See [`Stats`].
    pub bypassed: u64,
    /// See [`Stats`].
    pub denial_cache_hits: u64,
    /// See [`Stats`].
    pub shadow_denied: u64,
    /// See [`Stats`].
    pub bad_request: u64,
    /// See [`Stats`].
    pub rejected: u64,
    /// See [`Stats`].
    pub breaker_opened: u64,
    /// See [`Stats`].
    pub breaker_closed: u64,
}

impl StatsSnapshot {
    /// Fail-open limit outcomes of every reason.
    pub fn fail_open(&self) -> u64 {
        self.fail_open_error + self.fail_open_timeout + self.fail_open_breaker
    }
}

impl Stats {
    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            allowed: r(&self.allowed),
            denied: r(&self.denied),
            denied_store_full: r(&self.denied_store_full),
            fail_open_error: r(&self.fail_open_error),
            fail_open_timeout: r(&self.fail_open_timeout),
            fail_open_breaker: r(&self.fail_open_breaker),
            fail_closed: r(&self.fail_closed),
            bypassed: r(&self.bypassed),
            denial_cache_hits: r(&self.denial_cache_hits),
            shadow_denied: r(&self.shadow_denied),
            bad_request: r(&self.bad_request),
            rejected: r(&self.rejected),
            breaker_opened: r(&self.breaker_opened),
            breaker_closed: r(&self.breaker_closed),
        }
    }
}

/// Adds one to `counter`.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The `# HELP` text and unit of every metric the gateway exports.
pub(crate) fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!("ratelab_requests_total", "Requests answered, by decision.");
    describe_counter!(
        "ratelab_fail_open_total",
        "Limit checks let through because the limit's store failed, by reason and limit."
    );
    describe_counter!(
        "ratelab_store_full_total",
        "Requests denied because a limit's store had no room for a new key."
    );
    describe_counter!(
        "ratelab_denial_cache_hits_total",
        "Requests a limit's local denial cache answered with 429, without a store call."
    );
    describe_counter!(
        "ratelab_shadow_denied_total",
        "Requests a limit would have denied, let through because it is in shadow mode."
    );
    describe_counter!(
        "ratelab_breaker_transitions_total",
        "A limit's circuit breaker opening or closing."
    );
    describe_gauge!(
        "ratelab_kill_switch",
        "1 while the kill switch lets everything through."
    );
    describe_gauge!(
        "ratelab_shadow",
        "1 while the global shadow switch only measures every limit."
    );
    // The store-latency histogram is rendered apart: crate::latency.
}

/// Each limit's counters at 0.
pub(crate) fn export_limit_zeros<C>(limits: &LimitSet<C>) {
    for limit in limits {
        let label = || limit.label.clone();
        for to in ["open", "closed"] {
            metrics::counter!("ratelab_breaker_transitions_total", "to" => to, "limit" => label())
                .increment(0);
        }
        for reason in ratelab_store::FailReason::ALL {
            metrics::counter!("ratelab_fail_open_total", "reason" => reason.name(), "limit" => label())
                .increment(0);
        }
        metrics::counter!("ratelab_store_full_total", "limit" => label()).increment(0);
        metrics::counter!("ratelab_shadow_denied_total", "limit" => label()).increment(0);
        if limit.cache.is_some() {
            metrics::counter!("ratelab_denial_cache_hits_total", "limit" => label()).increment(0);
        }
    }
}
