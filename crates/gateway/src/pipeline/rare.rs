//! The counters of a request's rare outcomes (refused, bypassed, failed open or closed, a
//! full store, a shadow denial, a denial cache's answer, a breaker's transition), each in a
//! function of its own, out of line and marked cold: a metric's labelled lookup is a good
//! deal of code, and kept inline it would sit between the instructions every request runs.

use crate::answer::FailReason;
use crate::breaker::Transition;
use crate::stats::{Stats, bump};
use metrics::SharedString;

/// A request the HTTP layer or the pipeline could not read (400).
#[cold]
#[inline(never)]
pub(super) fn bad_request(stats: &Stats) {
    bump(&stats.bad_request);
}

/// A request the guard rejected (403).
#[cold]
#[inline(never)]
pub(super) fn rejected(stats: &Stats) {
    bump(&stats.rejected);
    metrics::counter!("ratelab_requests_total", "decision" => "rejected").increment(1);
}

/// A request the kill switch let through.
#[cold]
#[inline(never)]
pub(super) fn bypassed(stats: &Stats) {
    bump(&stats.bypassed);
    metrics::counter!("ratelab_requests_total", "decision" => "bypassed").increment(1);
}

/// A request a limit's denial cache answered.
#[cold]
#[inline(never)]
pub(super) fn denial_cache_hit(stats: &Stats, limit: &SharedString) {
    bump(&stats.denial_cache_hits);
    metrics::counter!("ratelab_denial_cache_hits_total", "limit" => limit.clone()).increment(1);
}

/// A request an enforced limit refused for a full store.
#[cold]
#[inline(never)]
pub(super) fn store_full(stats: &Stats, limit: &SharedString) {
    bump(&stats.denied_store_full);
    metrics::counter!("ratelab_store_full_total", "limit" => limit.clone()).increment(1);
}

/// A limit that failed open, for `reason`.
#[cold]
#[inline(never)]
pub(super) fn failed_open(stats: &Stats, reason: FailReason, limit: &SharedString) {
    let counter = match reason {
        FailReason::Error => &stats.fail_open_error,
        FailReason::Timeout => &stats.fail_open_timeout,
        FailReason::BreakerOpen => &stats.fail_open_breaker,
    };
    bump(counter);
    metrics::counter!("ratelab_fail_open_total", "reason" => reason.name(), "limit" => limit.clone())
        .increment(1);
}

/// A request refused with 503 on a fail-closed route.
#[cold]
#[inline(never)]
pub(super) fn failed_closed(stats: &Stats) {
    bump(&stats.fail_closed);
    metrics::counter!("ratelab_requests_total", "decision" => "fail_closed").increment(1);
}

/// A shadow limit that would have refused a request.
#[cold]
#[inline(never)]
pub(super) fn shadow_denied(stats: &Stats, limit: &SharedString) {
    bump(&stats.shadow_denied);
    metrics::counter!("ratelab_shadow_denied_total", "limit" => limit.clone()).increment(1);
}

/// A limit's breaker that opened or closed (`transition` is not [`Transition::None`]).
#[cold]
#[inline(never)]
pub(super) fn breaker_moved(stats: &Stats, transition: Transition, limit: &SharedString) {
    let (counter, to) = match transition {
        Transition::Opened => (&stats.breaker_opened, "open"),
        Transition::Closed => (&stats.breaker_closed, "closed"),
        Transition::None => return,
    };
    bump(counter);
    metrics::counter!("ratelab_breaker_transitions_total", "to" => to, "limit" => limit.clone())
        .increment(1);
}
