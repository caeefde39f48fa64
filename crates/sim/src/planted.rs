//! Planted bugs: realistic broken limiters, each a bug seen in real deployments, that the
//! explorer (`ratelab explore --sut NAME`) must find with no scenario written for it.
//!
//! A scenario selects one with `"planted_bug"`; the validator refuses a bug the scenario's
//! limiter does not have a place for (a fixed-window bug under a token bucket, a fence bug
//! without a cleanup job). Each bug lives where it lives in a real deployment:
//!
//! - in the store's script ([`StorePolicy`]): `short_ttl`, `refill_rounding`,
//!   `window_one_over`, `counter_forgets_previous`, `expire_on_every_hit`,
//!   `steps_from_every_request`;
//! - in the gateway's store client (`cluster::RpcStore`): `retry_on_timeout`,
//!   `short_client_timeout`, `no_reconnect`, `errors_as_full`, `incr_then_expire` (over the
//!   store's plain counters, [`Counters`]);
//! - in the fence beside the lease table (`cluster::StoreNode`): `fence_forgets_grants`.
//!
//! A new planted bug is a variant here (in [`PlantedBug::ALL`], with its names), its rule in
//! [`PlantedBug::needs`], and its code where it lives; the explorer then runs it as a system
//! under test of its own.

use crate::values::StoreEngine;
use ratelab_core::window::SlidingWindowState;
use ratelab_core::{
    Algorithm, AlgorithmName, CostError, Decision, FixedWindow, Nanos, Policy, PolicyState, Quota,
    TokenBucketState,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A deliberately broken limiter.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PlantedBug {
    /// The atomic path, but the gateway retries a store call that timed out: a call whose
    /// reply was lost or late is applied twice, spending its tokens twice.
    RetryOnTimeout,
    /// The stored state's TTL is half the time the bucket takes to fill again, so a bucket
    /// forgotten early comes back full.
    ShortTtl,
    /// The refill is rounded up to a whole token at every decision: a fraction of a token
    /// counts as a token, so requests closer together than one refill period each get one.
    RefillRounding,
    /// A fixed window written as `INCRBY` then, for the window's first request, `EXPIRE`, in
    /// two calls: when the `INCRBY`'s reply is lost the `EXPIRE` is never sent, the counter
    /// never expires and its key is locked out for good.
    IncrThenExpire,
    /// A fence that remembers only the tokens it has seen written, not the ones the lease
    /// table granted: a stale leader's commit lands after a new leader was granted, until
    /// the new leader writes.
    FenceForgetsGrants,
    /// A fixed window whose script checks the count before the request against the limit
    /// (`count < limit + cost`, where `count + cost <= limit` is meant): one unit more than
    /// the limit in every window.
    WindowOneOver,
    /// A sliding-window counter whose script reads only the current window's counter: the
    /// previous window's weight is lost, so it admits as a fixed window does, up to twice
    /// the limit across a boundary.
    CounterForgetsPrevious,
    /// A first-hit window whose `EXPIRE` is set again by every admitted request, not only
    /// the window's first: the window ends one window after its last admission, not after
    /// its first, so a client is denied past the window's end, and every denial says to
    /// wait a whole window.
    ExpireOnEveryHit,
    /// The gateway's store client gives up on a decision call after a quarter of the
    /// request's deadline (its timeout set in the wrong unit): a store that answers in time,
    /// only not at once, is taken for a failed one, and the request fails open.
    ShortClientTimeout,
    /// The gateway's store client never replaces a connection that failed: after its first
    /// failed call (a timeout, an error), every later decision fails at once, long after the
    /// store is back.
    NoReconnect,
    /// The gateway's store client reads every error reply as "no room for the key": a store
    /// that fails (an error burst, a restart) has its limit refuse requests as store-full,
    /// not fail open or closed as the gateway is configured to.
    ErrorsAsFull,
    /// A stepped bucket whose script writes the time of the request as its last refill
    /// (`last_refill = now`) instead of moving it on by the whole periods it counted: the
    /// part of a period before each request is lost, so steady traffic a little faster than
    /// one request a period starves for good, and every denial names a whole period to wait.
    StepsFromEveryRequest,
}

/// What a planted bug needs of its scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// The atomic path.
    Atomic,
    /// The atomic path and this algorithm.
    AtomicPolicy(AlgorithmName),
    /// A fenced cleanup job.
    FencedJob,
}

impl PlantedBug {
    /// Every planted bug, each a system the explorer runs.
    pub const ALL: &[PlantedBug] = &[
        PlantedBug::RetryOnTimeout,
        PlantedBug::ShortTtl,
        PlantedBug::RefillRounding,
        PlantedBug::IncrThenExpire,
        PlantedBug::FenceForgetsGrants,
        PlantedBug::WindowOneOver,
        PlantedBug::CounterForgetsPrevious,
        PlantedBug::ExpireOnEveryHit,
        PlantedBug::ShortClientTimeout,
        PlantedBug::NoReconnect,
        PlantedBug::ErrorsAsFull,
        PlantedBug::StepsFromEveryRequest,
    ];

    /// Its name in scenario files (`short_ttl`).
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::RetryOnTimeout => "retry_on_timeout",
            PlantedBug::ShortTtl => "short_ttl",
            PlantedBug::RefillRounding => "refill_rounding",
            PlantedBug::IncrThenExpire => "incr_then_expire",
            PlantedBug::FenceForgetsGrants => "fence_forgets_grants",
            PlantedBug::WindowOneOver => "window_one_over",
            PlantedBug::CounterForgetsPrevious => "counter_forgets_previous",
            PlantedBug::ExpireOnEveryHit => "expire_on_every_hit",
            PlantedBug::ShortClientTimeout => "short_client_timeout",
            PlantedBug::NoReconnect => "no_reconnect",
            PlantedBug::ErrorsAsFull => "errors_as_full",
            PlantedBug::StepsFromEveryRequest => "steps_from_every_request",
        }
    }

    /// Its name on the command line (`ratelab explore --sut short-ttl`).
    pub fn command_name(self) -> &'static str {
        match self {
            PlantedBug::RetryOnTimeout => "retry-on-timeout",
            PlantedBug::ShortTtl => "short-ttl",
            PlantedBug::RefillRounding => "refill-rounding",
            PlantedBug::IncrThenExpire => "incr-then-expire",
            PlantedBug::FenceForgetsGrants => "fence-forgets-grants",
            PlantedBug::WindowOneOver => "window-one-over",
            PlantedBug::CounterForgetsPrevious => "counter-forgets-previous",
            PlantedBug::ExpireOnEveryHit => "expire-on-every-hit",
            PlantedBug::ShortClientTimeout => "short-client-timeout",
            PlantedBug::NoReconnect => "no-reconnect",
            PlantedBug::ErrorsAsFull => "errors-as-full",
            PlantedBug::StepsFromEveryRequest => "steps-from-every-request",
        }
    }

    /// Whether the bug lives in the store's script ([`StorePolicy`]).
    pub fn in_script(self) -> bool {
        matches!(
            self,
            PlantedBug::ShortTtl
                | PlantedBug::RefillRounding
                | PlantedBug::WindowOneOver
                | PlantedBug::CounterForgetsPrevious
                | PlantedBug::ExpireOnEveryHit
                | PlantedBug::StepsFromEveryRequest
        )
    }

    /// Whether the bug lives outside the limiter's algorithm (in the gateway's store client
    /// or the fence), so that it applies to a user's limiter too.
    pub fn outside_the_algorithm(self) -> bool {
        matches!(
            self,
            PlantedBug::RetryOnTimeout
                | PlantedBug::FenceForgetsGrants
                | PlantedBug::ShortClientTimeout
                | PlantedBug::NoReconnect
                | PlantedBug::ErrorsAsFull
        )
    }

    /// What the bug needs of its scenario, for the validator and for the explorer, which
    /// puts the bug into the scenario it draws accordingly.
    pub fn needs(self) -> Needs {
        match self {
            PlantedBug::RetryOnTimeout
            | PlantedBug::ShortClientTimeout
            | PlantedBug::NoReconnect
            | PlantedBug::ErrorsAsFull => Needs::Atomic,
            PlantedBug::ShortTtl | PlantedBug::RefillRounding => {
                Needs::AtomicPolicy(AlgorithmName::TokenBucket)
            }
            PlantedBug::IncrThenExpire | PlantedBug::WindowOneOver => {
                Needs::AtomicPolicy(AlgorithmName::FixedWindow)
            }
            PlantedBug::CounterForgetsPrevious => Needs::AtomicPolicy(AlgorithmName::SlidingWindow),
            PlantedBug::ExpireOnEveryHit => Needs::AtomicPolicy(AlgorithmName::FirstHitWindow),
            PlantedBug::StepsFromEveryRequest => Needs::AtomicPolicy(AlgorithmName::SteppedBucket),
            PlantedBug::FenceForgetsGrants => Needs::FencedJob,
        }
    }
}

/// The per-key policy as the store's script runs it, with the script's planted bug if any.
#[derive(Clone, Copy, Debug)]
pub struct StorePolicy {
    /// The policy.
    pub policy: Policy,
    /// The bug, when it is one of the script's.
    pub bug: Option<PlantedBug>,
    /// What decides: the core's transition, or the Redis script in Lua (then `bug` is none:
    /// validation refuses both together).
    pub engine: StoreEngine,
}

impl StorePolicy {
    /// `policy` as a correct script runs it.
    pub fn correct(policy: Policy) -> StorePolicy {
        StorePolicy {
            policy,
            bug: None,
            engine: StoreEngine::Core,
        }
    }

    /// [`StorePolicy::correct`] on `engine`.
    pub fn on(policy: Policy, engine: StoreEngine) -> StorePolicy {
        StorePolicy {
            engine,
            ..StorePolicy::correct(policy)
        }
    }

    /// The transition as the limits script computes it. The scenario's validation keeps
    /// every policy within the script's exact range, so a failure is the script's own: the
    /// run stops with it, as a panic the explorer reports.
    fn scripted(
        &self,
        state: Option<PolicyState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(PolicyState, Decision), CostError> {
        use ratelab_store::lua_script::{ScriptError, transition};
        match transition(&self.policy, state, now, cost) {
            Ok((Some(next), d)) => Ok((next, d)),
            // A denial on a key with no state writes nothing; the core's state for it is as
            // good as any (the store keeps only an admission's).
            Ok((None, d)) => Ok((self.policy.transition(None, now, cost)?.0, d)),
            Err(ScriptError::Cost(c)) => Err(c),
            Err(e) => panic!(
                "{e} (policy {:?}, state {state:?}, now {now:?}, cost {cost})",
                self.policy
            ),
        }
    }

    /// The state the rounding script decides on: the bucket's fractional token counted as
    /// a whole one. With `d` = TAT − now (scaled), the bucket holds B − d/period tokens;
    /// rounding the count up is rounding `d` down to a whole number of periods.
    fn rounded(&self, state: Option<PolicyState>, now: Nanos) -> Option<PolicyState> {
        let (Policy::TokenBucket(b), Some(PolicyState::TokenBucket(s))) = (self.policy, state)
        else {
            return state;
        };
        let now_s = u128::from(now.as_u64()) * u128::from(b.refill_amount());
        let period = u128::from(b.refill_period().as_u64());
        let deficit = s.tat_scaled.saturating_sub(now_s);
        if deficit == 0 {
            return state;
        }
        Some(PolicyState::TokenBucket(TokenBucketState {
            tat_scaled: now_s + deficit / period * period,
        }))
    }
}

impl Algorithm for StorePolicy {
    type State = PolicyState;

    fn transition(
        &self,
        state: Option<PolicyState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(PolicyState, Decision), CostError> {
        if self.engine == StoreEngine::RedisScripts {
            return self.scripted(state, now, cost);
        }
        match (self.bug, self.policy, state) {
            (Some(PlantedBug::RefillRounding), ..) => {
                self.policy.transition(self.rounded(state, now), now, cost)
            }
            (Some(PlantedBug::WindowOneOver), Policy::FixedWindow(w), _)
                if (1..=w.0.limit()).contains(&cost) =>
            {
                // The window's own transition with room for one more, reported against the
                // real limit.
                let Ok(wider) = FixedWindow::new(w.0.limit().saturating_add(1), w.0.window())
                else {
                    return self.policy.transition(state, now, cost);
                };
                let s = match state {
                    Some(PolicyState::FixedWindow(s)) => Some(s),
                    _ => None,
                };
                let (next, mut d) = wider.transition(s, now, cost)?;
                d.limit = w.0.limit();
                d.remaining = d.remaining.saturating_sub(1);
                Ok((PolicyState::FixedWindow(next), d))
            }
            (
                Some(PlantedBug::CounterForgetsPrevious),
                Policy::SlidingWindow(w),
                Some(PolicyState::SlidingWindow(s)),
            ) => {
                // Only the current window's counter is read: from a later window, nothing.
                let index = now.as_u64() / w.0.window().as_u64().max(1);
                let current =
                    (s.window >= index).then_some(SlidingWindowState { previous: 0, ..s });
                self.policy
                    .transition(current.map(PolicyState::SlidingWindow), now, cost)
            }
            (Some(PlantedBug::ExpireOnEveryHit), Policy::FirstHitWindow(w), _) => {
                let (next, mut d) = self.policy.transition(state, now, cost)?;
                let PolicyState::FirstHitWindow(mut s) = next else {
                    return Ok((next, d));
                };
                // The expiry set again: the window now ends one window from this request.
                s.start = now;
                let len = w.0.window();
                d.retry_after = d.retry_after.map(|_| len);
                if d.reset_after > Nanos::ZERO {
                    (d.reset_after, d.full_after) = (len, len);
                }
                Ok((PolicyState::FirstHitWindow(s), d))
            }
            (Some(PlantedBug::StepsFromEveryRequest), Policy::SteppedBucket(_), _) => {
                let (next, mut d) = self.policy.transition(state, now, cost)?;
                let PolicyState::SteppedBucket(mut s) = next else {
                    return Ok((next, d));
                };
                // The last refill written as now: every instant the decision names moves on
                // by the part of a period the steps left.
                let lost = now.saturating_sub(s.anchor);
                s.anchor = now;
                d.retry_after = d.retry_after.map(|r| r.saturating_add(lost));
                if d.reset_after > Nanos::ZERO {
                    d.reset_after = d.reset_after.saturating_add(lost);
                    d.full_after = d.full_after.saturating_add(lost);
                }
                Ok((PolicyState::SteppedBucket(s), d))
            }
            _ => self.policy.transition(state, now, cost),
        }
    }

    fn expires_at(&self, state: &PolicyState) -> Nanos {
        self.policy.expires_at(state)
    }

    fn quota(&self) -> Quota {
        self.policy.quota()
    }

    fn ttl(&self, state: &PolicyState, now: Nanos) -> Nanos {
        let ttl = self.policy.ttl(state, now);
        match self.bug {
            Some(PlantedBug::ShortTtl) => Nanos((ttl.as_u64() / 2).max(1)),
            _ => ttl,
        }
    }
}

/// The store's plain counters, as Redis's `INCRBY` and `EXPIRE` keep them: a count, and an
/// expiry only once one is set.
#[derive(Debug, Default)]
pub struct Counters {
    map: BTreeMap<String, (u64, Option<Nanos>)>,
}

impl Counters {
    /// `INCRBY key by`: the new count; a missing or expired key starts from zero, with no
    /// expiry.
    pub fn incr(&mut self, key: &str, by: u64, now: Nanos) -> u64 {
        let e = self.map.entry(key.to_owned()).or_insert((0, None));
        if e.1.is_some_and(|at| at <= now) {
            *e = (0, None);
        }
        e.0 = e.0.saturating_add(by);
        e.0
    }

    /// `key`'s count and expiry as held (what a replica copies after each write).
    pub fn entry(&self, key: &str) -> Option<(u64, Option<Nanos>)> {
        self.map.get(key).copied()
    }

    /// Sets `key`'s count and expiry as a replica applies a copied entry (`None`: deleted).
    pub fn restore(&mut self, key: &str, entry: Option<(u64, Option<Nanos>)>) {
        match entry {
            Some(e) => {
                self.map.insert(key.to_owned(), e);
            }
            None => {
                self.map.remove(key);
            }
        }
    }

    /// `EXPIRE key ttl`: whether the key exists.
    pub fn expire(&mut self, key: &str, ttl: Nanos, now: Nanos) -> bool {
        match self.map.get_mut(key) {
            Some(e) if e.1.is_none_or(|at| at > now) => {
                e.1 = Some(now.saturating_add(ttl));
                true
            }
            _ => false,
        }
    }
}

/// The decision the `incr_then_expire` gateway makes from the count `INCRBY` returned.
pub fn counted_decision(count: u64, limit: u64, window: Nanos) -> Decision {
    let allowed = count <= limit;
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(count),
        reset_after: window,
        retry_after: (!allowed).then_some(window),
        full_after: window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::TokenBucket;

    #[test]
    fn every_bug_is_listed_and_named_as_files_write_it() {
        for &b in PlantedBug::ALL {
            let json = serde_json::to_value(b).unwrap();
            assert_eq!(json, b.name(), "{b:?}");
            assert_eq!(b.command_name(), b.name().replace('_', "-"));
        }
        // The list is complete: every name the schema knows is a listed bug.
        fn names(v: &serde_json::Value, out: &mut BTreeMap<String, PlantedBug>) {
            match v {
                serde_json::Value::String(s) => {
                    if let Ok(b) = serde_json::from_value(v.clone()) {
                        out.insert(s.clone(), b);
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| names(v, out)),
                serde_json::Value::Object(o) => o.values().for_each(|v| names(v, out)),
                _ => {}
            }
        }
        let mut known = BTreeMap::new();
        names(
            &serde_json::to_value(schemars::schema_for!(PlantedBug)).unwrap(),
            &mut known,
        );
        assert_eq!(known.len(), PlantedBug::ALL.len(), "{known:?}");
        assert!(known.values().all(|b| PlantedBug::ALL.contains(b)));
    }

    fn bucket() -> Policy {
        Policy::TokenBucket(TokenBucket::per_second(1, 1).expect("policy"))
    }

    #[test]
    fn the_rounding_script_admits_what_the_correct_one_denies() {
        let correct = StorePolicy::correct(bucket());
        let rounding = StorePolicy {
            bug: Some(PlantedBug::RefillRounding),
            ..correct
        };
        let (s, d) = correct.transition(None, Nanos::ZERO, 1).expect("cost");
        assert!(d.allowed);
        let at = Nanos::from_millis(100);
        assert!(!correct.transition(Some(s), at, 1).expect("cost").1.allowed);
        assert!(rounding.transition(Some(s), at, 1).expect("cost").1.allowed);
    }

    #[test]
    fn the_short_ttl_script_forgets_a_bucket_before_it_is_full() {
        let correct = StorePolicy::correct(bucket());
        let short = StorePolicy {
            bug: Some(PlantedBug::ShortTtl),
            ..correct
        };
        let (s, _) = correct.transition(None, Nanos::ZERO, 1).expect("cost");
        assert_eq!(correct.ttl(&s, Nanos::ZERO), Nanos::from_secs(1));
        assert_eq!(short.ttl(&s, Nanos::ZERO), Nanos::from_millis(500));
    }

    #[test]
    fn a_counter_without_an_expiry_never_resets() {
        let mut c = Counters::default();
        let t = Nanos::from_secs;
        assert_eq!(c.incr("k", 1, t(0)), 1);
        assert!(c.expire("k", t(1), t(0)));
        assert_eq!(c.incr("k", 1, t(2)), 1, "expired: counts from zero");
        // This window's EXPIRE is lost: the count only grows.
        assert_eq!(c.incr("k", 1, t(100)), 2);
        assert!(!counted_decision(c.incr("k", 5, t(200)), 3, t(1)).allowed);
        assert!(!c.expire("missing", t(1), t(0)));
    }
}
