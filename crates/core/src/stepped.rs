//! The token bucket whose refill comes in whole-interval steps, as deployed limiters that
//! count refills by elapsed periods do (bucket4j's *intervally* refill, Symfony's and
//! Laravel's buckets counted in whole periods).
//!
//! A bucket holds at most `capacity` (B) tokens. Every whole `refill_period` (P) since its
//! *anchor* it gains `refill_amount` (A) tokens, up to B; the anchor moves on by the whole
//! periods counted, so a part of a period is never lost. A key's first request finds it full,
//! anchored at that request; a request that finds it full anchors it anew, so a bucket a store
//! dropped once it was full and one it kept answer alike. A request of cost `c` takes `c`
//! tokens or is denied and takes none.
//!
//! Envelope: steps are at least P apart, so in any interval of length Δt it admits at most
//! B + min(A, B)·(⌊Δt/P⌋ + 1), within the bound its [`Quota`] gives a window algorithm
//! (2L + L·Δt/W with L = B and W = B·P / min(A, B)).
//!
//! Time going backwards: a `now` before the anchor counts no step, so it sees no more tokens
//! than the stored ones; a full bucket is never anchored earlier than it was.

use crate::algorithm::{Algorithm, Quota, check_cost};
use crate::spec::{COUNT_MAX, PolicySpec, SpecError, WINDOW_MS_MAX, Written, need, refused};
use crate::token_bucket::MAX_PERIOD;
use crate::{CostError, Decision, Nanos, PolicyError};

/// A stepped token bucket: capacity B, `refill_amount` tokens at the end of every whole
/// `refill_period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SteppedBucket {
    capacity: u64,
    refill_amount: u64,
    refill_period: Nanos,
}

/// A stepped bucket's state: its tokens, and the instant its steps count from.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SteppedBucketState {
    /// Tokens held as of `anchor`.
    pub tokens: u64,
    /// The instant the next step is one period after, ns.
    pub anchor: Nanos,
}

impl SteppedBucket {
    /// A bucket of `capacity` tokens gaining `refill_amount` at the end of every whole
    /// `refill_period`.
    ///
    /// Bounds: `1 ≤ capacity, refill_amount ≤ 10¹²`, `1 ns ≤ refill_period`, and the time
    /// to refill from empty, ⌈B/A⌉·P, at most 100 years.
    pub fn new(
        capacity: u64,
        refill_amount: u64,
        refill_period: Nanos,
    ) -> Result<SteppedBucket, PolicyError> {
        for (parameter, value) in [("capacity", capacity), ("refill_amount", refill_amount)] {
            if !(1..=COUNT_MAX).contains(&value) {
                return Err(PolicyError::out_of_range(
                    parameter,
                    value.into(),
                    1,
                    COUNT_MAX.into(),
                ));
            }
        }
        let max = u128::from(MAX_PERIOD.as_u64());
        let fill =
            u128::from(capacity.div_ceil(refill_amount)) * u128::from(refill_period.as_u64());
        if refill_period == Nanos::ZERO || fill > max {
            return Err(PolicyError {
                parameter: if refill_period == Nanos::ZERO {
                    "refill_period_ns"
                } else {
                    "fill_time_ns"
                },
                value: fill,
                expected: format!(
                    "a refill period of at least 1 ns and ⌈capacity / refill_amount⌉ × \
                     refill_period of at most {max} ns (100 years)"
                ),
            });
        }
        Ok(SteppedBucket {
            capacity,
            refill_amount,
            refill_period,
        })
    }

    /// Capacity B.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens added per step.
    pub fn refill_amount(&self) -> u64 {
        self.refill_amount
    }

    /// The time between steps.
    pub fn refill_period(&self) -> Nanos {
        self.refill_period
    }

    /// `state` brought up to `now`: the steps since its anchor added, the anchor moved on by
    /// them; a full bucket anchored at `now` (never earlier than it was).
    fn refilled(&self, state: Option<SteppedBucketState>, now: Nanos) -> SteppedBucketState {
        let Some(mut s) = state else {
            return SteppedBucketState {
                tokens: self.capacity,
                anchor: now,
            };
        };
        let elapsed = now.as_u64().saturating_sub(s.anchor.as_u64());
        let steps = elapsed / self.refill_period.as_u64();
        let added = u128::from(steps) * u128::from(self.refill_amount);
        s.tokens = (u128::from(s.tokens) + added).min(u128::from(self.capacity)) as u64;
        s.anchor = Nanos(s.anchor.as_u64() + steps * self.refill_period.as_u64());
        if s.tokens == self.capacity {
            s.anchor = s.anchor.max(now);
        }
        s
    }

    /// The instant `state` holds `tokens + n` tokens (`n` ≥ 1): ⌈n/A⌉ steps after its anchor.
    fn holds_more_at(&self, state: &SteppedBucketState, n: u64) -> u128 {
        u128::from(state.anchor.as_u64())
            + u128::from(n.div_ceil(self.refill_amount)) * u128::from(self.refill_period.as_u64())
    }

    /// Time from `now` until `state` holds `n` more tokens.
    fn until_more(&self, state: &SteppedBucketState, now: Nanos, n: u64) -> Nanos {
        Nanos::saturating_from_u128(self.holds_more_at(state, n) - u128::from(now.as_u64()))
    }
}

impl Algorithm for SteppedBucket {
    type State = SteppedBucketState;

    fn transition(
        &self,
        state: Option<SteppedBucketState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(SteppedBucketState, Decision), CostError> {
        check_cost(cost, self.capacity)?;
        let mut s = self.refilled(state, now);
        let allowed = s.tokens >= cost;
        if allowed {
            s.tokens -= cost;
        }
        let full = s.tokens == self.capacity;
        let decision = Decision {
            allowed,
            limit: self.capacity,
            remaining: s.tokens,
            reset_after: if full {
                Nanos::ZERO
            } else {
                self.until_more(&s, now, 1)
            },
            retry_after: (!allowed).then(|| self.until_more(&s, now, cost - s.tokens)),
            full_after: if full {
                Nanos::ZERO
            } else {
                self.until_more(&s, now, self.capacity - s.tokens)
            },
        };
        Ok((s, decision))
    }

    fn expires_at(&self, state: &SteppedBucketState) -> Nanos {
        if state.tokens >= self.capacity {
            state.anchor
        } else {
            Nanos::saturating_from_u128(self.holds_more_at(state, self.capacity - state.tokens))
        }
    }

    fn quota(&self) -> Quota {
        let per_step = self.refill_amount.min(self.capacity);
        let window = u128::from(self.capacity) * u128::from(self.refill_period.as_u64())
            / u128::from(per_step);
        Quota {
            limit: self.capacity,
            window: Nanos::saturating_from_u128(window.max(1)),
        }
    }
}

impl Written for SteppedBucket {
    const FIELDS: &'static [&'static str] = &["capacity", "refill", "refill_period_ms"];

    fn from_spec(spec: &PolicySpec) -> Result<SteppedBucket, SpecError> {
        let capacity = need(spec, "capacity", spec.capacity, COUNT_MAX)?;
        let refill = need(spec, "refill", spec.refill, COUNT_MAX)?;
        let period = need(
            spec,
            "refill_period_ms",
            spec.refill_period_ms,
            WINDOW_MS_MAX,
        )?;
        SteppedBucket::new(capacity, refill, Nanos::from_millis(period)).map_err(refused)
    }

    /// A period that is not a whole number of ms is written as the nearest that is, at
    /// least 1.
    fn write(&self, spec: &mut PolicySpec) {
        spec.capacity = Some(self.capacity);
        spec.refill = Some(self.refill_amount);
        spec.refill_period_ms = Some(((self.refill_period.as_u64() + 500_000) / 1_000_000).max(1));
    }

    /// `per_sec` a second in steps of at most `capacity` tokens (a larger step would fill
    /// the bucket and waste the rest): the longest period, a divisor of a second in whole ms,
    /// whose step is a whole number of tokens within the capacity; if none is, `capacity`
    /// tokens every `1000 · capacity / per_sec` ms.
    fn shaped(capacity: u64, per_sec: u64, spec: &mut PolicySpec) {
        let (refill, period_ms) = [
            1_000u64, 500, 250, 200, 125, 100, 50, 40, 25, 20, 10, 8, 5, 4, 2, 1,
        ]
        .into_iter()
        .filter(|ms| per_sec.saturating_mul(*ms) % 1_000 == 0)
        .map(|ms| (per_sec.saturating_mul(ms) / 1_000, ms))
        .find(|&(refill, _)| (1..=capacity).contains(&refill))
        // Else a whole bucket a step, as often as the rate asks (to the ms).
        .unwrap_or((
            capacity,
            (capacity.saturating_mul(1_000) / per_sec.max(1)).max(1),
        ));
        spec.capacity = Some(capacity);
        spec.refill = Some(refill);
        spec.refill_period_ms = Some(period_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    #[test]
    fn tokens_come_back_only_at_whole_periods() {
        let b = SteppedBucket::new(3, 2, ms(1_000)).unwrap();
        let (mut s, d) = b.transition(None, ms(500), 3).unwrap();
        assert!(d.allowed && d.remaining == 0);
        assert_eq!(d.full_after, ms(2_000), "two steps of 2 refill 3");
        assert_eq!(d.reset_after, ms(1_000));
        // A continuous bucket would hold 1.8 tokens at 1 400 ms; this one holds none.
        let (s2, d) = b.transition(Some(s), ms(1_400), 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(ms(100)));
        assert_eq!(s2, s, "a denial before a step leaves the state as it was");
        (s, _) = b.transition(Some(s), ms(1_500), 2).unwrap();
        assert_eq!((s.tokens, s.anchor), (0, ms(1_500)));
        // The part of a period before a request is kept: the next step is at 2 500 ms.
        let (_, d) = b.transition(Some(s), ms(2_499), 1).unwrap();
        assert!(!d.allowed);
        let (_, d) = b.transition(Some(s), ms(2_500), 2).unwrap();
        assert!(d.allowed && d.remaining == 0);
    }

    #[test]
    fn a_full_bucket_is_anchored_at_its_request_as_a_new_key_is() {
        let b = SteppedBucket::new(2, 1, ms(100)).unwrap();
        let (s, _) = b.transition(None, ms(0), 1).unwrap();
        assert_eq!(b.expires_at(&s), ms(100));
        let kept = b.transition(Some(s), ms(250), 1).unwrap();
        let dropped = b.transition(None, ms(250), 1).unwrap();
        assert_eq!(kept, dropped);
    }

    #[test]
    fn a_state_holding_more_than_the_capacity_holds_the_capacity() {
        let b = SteppedBucket::new(2, 1, ms(100)).unwrap();
        let big = SteppedBucketState {
            tokens: u64::MAX,
            anchor: ms(0),
        };
        let (s, d) = b.transition(Some(big), ms(50), 1).unwrap();
        assert!(d.allowed && d.remaining == 1 && s.tokens == 1);
        let end = Nanos(u64::MAX);
        let last = SteppedBucketState {
            tokens: 0,
            anchor: end,
        };
        let (_, d) = b.transition(Some(last), end, 1).unwrap();
        assert!(!d.allowed);
    }

    #[test]
    fn a_clock_that_steps_back_counts_no_step() {
        let b = SteppedBucket::new(2, 2, ms(100)).unwrap();
        let (s, _) = b.transition(None, ms(1_000), 2).unwrap();
        let (_, d) = b.transition(Some(s), ms(500), 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(ms(600)));
    }

    #[test]
    fn its_quota_bounds_what_it_admits() {
        let b = SteppedBucket::new(3, 2, ms(1_000)).unwrap();
        assert_eq!(
            b.quota(),
            Quota {
                limit: 3,
                window: ms(1_500)
            }
        );
        let fast = SteppedBucket::new(3, 5, ms(1_000)).unwrap();
        assert_eq!(fast.quota().window, ms(1_000), "a step refills it whole");
        assert!(SteppedBucket::new(1, 1, Nanos::ZERO).is_err());
        assert!(SteppedBucket::new(0, 1, ms(1)).is_err());
    }
}
