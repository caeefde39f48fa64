//! The token bucket, as GCRA over exact scaled integer time.
//!
//! A bucket holds at most `capacity` (B) tokens and gains `refill_amount` tokens every
//! `refill_period` (R = amount / period). A request of cost `c` takes `c` tokens or is denied.
//!
//! The state is one number, the *theoretical arrival time* (TAT): the instant at which the
//! bucket would be full again. To keep it exact for any rational rate, time is scaled by
//! `refill_amount`: one token is worth `refill_period` scaled units, and one nanosecond is
//! `refill_amount` scaled units. All arithmetic is `u128` and bounded by the policy limits
//! below, so no input can overflow.
//!
//! Envelope: for any interval of length Δt (on a non-decreasing clock), the admitted cost is at
//! most `B + R·Δt`. The property tests check this exactly, as
//! `admitted · period ≤ B · period + amount · Δt`.
//!
//! Time going backwards: a `now` before the stored TAT's reference point simply sees fewer
//! tokens (the deficit `TAT − now` is larger), so a backwards step can deny but never admit
//! more than the later time would.

use crate::algorithm::{Algorithm, Quota, check_cost};
use crate::spec::{COUNT_MAX, PolicySpec, SpecError, WINDOW_MS_MAX, Written, need, refused};
use crate::{CostError, Decision, Nanos, PolicyError};

/// Largest capacity (and largest refill amount): 10¹².
pub const MAX_CAPACITY: u64 = 1_000_000_000_000;
/// Longest refill period and longest fill time from empty: 100 years of 365 days, in ns.
pub const MAX_PERIOD: Nanos = Nanos(100 * 365 * 86_400 * 1_000_000_000);

/// A token-bucket policy: capacity B, refill R = `refill_amount` per `refill_period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    capacity: u64,
    refill_amount: u64,
    refill_period: Nanos,
}

/// A token bucket's stored state: the theoretical arrival time, scaled by `refill_amount`.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenBucketState {
    /// The instant the bucket is full again, in ns × `refill_amount`.
    pub tat_scaled: u128,
}

impl TokenBucket {
    /// A bucket of `capacity` tokens gaining `refill_amount` tokens every `refill_period`.
    ///
    /// Bounds: `1 ≤ capacity ≤ 10¹²`, `1 ≤ refill_amount ≤ 10¹²`,
    /// `1 ns ≤ refill_period ≤ 100 years`, and the time to refill from empty at most 100 years.
    pub fn new(
        capacity: u64,
        refill_amount: u64,
        refill_period: Nanos,
    ) -> Result<TokenBucket, PolicyError> {
        let max = u128::from(MAX_CAPACITY);
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(PolicyError::out_of_range(
                "capacity",
                capacity.into(),
                1,
                max,
            ));
        }
        if !(1..=MAX_CAPACITY).contains(&refill_amount) {
            return Err(PolicyError::out_of_range(
                "refill_amount",
                refill_amount.into(),
                1,
                max,
            ));
        }
        let max_period = u128::from(MAX_PERIOD.as_u64());
        if !(1..=MAX_PERIOD.as_u64()).contains(&refill_period.as_u64()) {
            return Err(PolicyError::out_of_range(
                "refill_period_ns",
                refill_period.as_u64().into(),
                1,
                max_period,
            ));
        }
        let bucket = TokenBucket {
            capacity,
            refill_amount,
            refill_period,
        };
        let fill = bucket.fill_time_ns();
        if fill > max_period {
            return Err(PolicyError {
                parameter: "fill_time_ns",
                value: fill,
                expected: format!(
                    "capacity × refill_period / refill_amount of at most {max_period} ns (100 years)"
                ),
            });
        }
        Ok(bucket)
    }

    /// A bucket of `capacity` tokens refilled at `refill_per_sec` tokens per second.
    pub fn per_second(capacity: u64, refill_per_sec: u64) -> Result<TokenBucket, PolicyError> {
        TokenBucket::new(capacity, refill_per_sec, Nanos::from_secs(1))
    }

    /// Capacity B.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens added per refill period.
    pub fn refill_amount(&self) -> u64 {
        self.refill_amount
    }

    /// The refill period.
    pub fn refill_period(&self) -> Nanos {
        self.refill_period
    }

    /// Nanoseconds to refill from empty, rounded up.
    fn fill_time_ns(&self) -> u128 {
        (u128::from(self.capacity) * self.period()).div_ceil(self.amount())
    }

    fn amount(&self) -> u128 {
        u128::from(self.refill_amount)
    }

    fn period(&self) -> u128 {
        u128::from(self.refill_period.as_u64())
    }

    fn scaled(&self, now: Nanos) -> u128 {
        u128::from(now.as_u64()) * self.amount()
    }

    /// The deficit the bucket may carry: B tokens, in scaled units.
    fn burst(&self) -> u128 {
        u128::from(self.capacity) * self.period()
    }

    /// Whole tokens available at scaled time `now_s` for a bucket whose TAT is `tat`.
    fn available(&self, tat: u128, now_s: u128) -> u64 {
        let deficit = tat.saturating_sub(now_s);
        let tokens = div_floor(self.burst().saturating_sub(deficit), self.period());
        // tokens ≤ capacity, which fits in u64.
        tokens as u64
    }

    /// Nanoseconds from `now_s` until `n` tokens are available.
    fn wait_for(&self, tat: u128, now_s: u128, n: u64) -> Nanos {
        let need = tat + u128::from(n) * self.period();
        let short = need.saturating_sub(now_s + self.burst());
        Nanos::saturating_from_u128(div_ceil(short, self.amount()))
    }

    /// Time until the bucket is full: until its TAT, in ns rounded up (the deficit is zero
    /// exactly then, and positive a nanosecond before).
    fn full_after(&self, tat: u128, now_s: u128) -> Nanos {
        Nanos::saturating_from_u128(div_ceil(tat.saturating_sub(now_s), self.amount()))
    }

    /// Time until more than `remaining` tokens are available.
    fn reset_after(&self, tat: u128, now_s: u128, remaining: u64) -> Nanos {
        if remaining >= self.capacity {
            Nanos::ZERO
        } else {
            self.wait_for(tat, now_s, remaining + 1)
        }
    }
}

/// `a / b`. The operands are differences of nearby instants and almost always fit in 64 bits,
/// where division is several times cheaper than the 128-bit software routine.
fn div_floor(a: u128, b: u128) -> u128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a / b),
        _ => a / b,
    }
}

/// `⌈a / b⌉`, with the same 64-bit fast path as [`div_floor`].
fn div_ceil(a: u128, b: u128) -> u128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a.div_ceil(b)),
        _ => a.div_ceil(b),
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn transition(
        &self,
        state: Option<TokenBucketState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(TokenBucketState, Decision), CostError> {
        check_cost(cost, self.capacity)?;
        let now_s = self.scaled(now);
        let tat = state.map_or(now_s, |s| s.tat_scaled);
        let new_tat = tat.max(now_s) + u128::from(cost) * self.period();
        if new_tat - now_s <= self.burst() {
            let remaining = self.available(new_tat, now_s);
            let decision = Decision {
                allowed: true,
                limit: self.capacity,
                remaining,
                reset_after: self.reset_after(new_tat, now_s, remaining),
                retry_after: None,
                full_after: self.full_after(new_tat, now_s),
            };
            Ok((
                TokenBucketState {
                    tat_scaled: new_tat,
                },
                decision,
            ))
        } else {
            let remaining = self.available(tat, now_s);
            let decision = Decision {
                allowed: false,
                limit: self.capacity,
                remaining,
                reset_after: self.reset_after(tat, now_s, remaining),
                retry_after: Some(self.wait_for(tat, now_s, cost)),
                full_after: self.full_after(tat, now_s),
            };
            Ok((TokenBucketState { tat_scaled: tat }, decision))
        }
    }

    fn expires_at(&self, state: &TokenBucketState) -> Nanos {
        Nanos::saturating_from_u128(div_ceil(state.tat_scaled, self.amount()))
    }

    /// Computed from the deficit `TAT − now`, a small number, rather than from the absolute
    /// TAT: the same value as the default, without a 128-bit division on the hot path.
    fn ttl(&self, state: &TokenBucketState, now: Nanos) -> Nanos {
        let deficit = state.tat_scaled.saturating_sub(self.scaled(now));
        // ⌈TAT/a⌉ − now = ⌈(TAT − now·a)/a⌉ when TAT ≥ now·a.
        Nanos(
            Nanos::saturating_from_u128(div_ceil(deficit, self.amount()))
                .as_u64()
                .max(1),
        )
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.capacity,
            window: Nanos::saturating_from_u128(self.fill_time_ns()),
        }
    }
}

impl Written for TokenBucket {
    const FIELDS: &'static [&'static str] =
        &["capacity", "refill_per_sec", "refill", "refill_period_ms"];

    /// `capacity`, and either `refill_per_sec` or `refill` per `refill_period_ms`.
    fn from_spec(spec: &PolicySpec) -> Result<TokenBucket, SpecError> {
        let capacity = need(spec, "capacity", spec.capacity, COUNT_MAX)?;
        let at_spec = |message: &str| SpecError {
            field: None,
            message: message.to_owned(),
        };
        let (amount, period_ms) = match (spec.refill_per_sec, spec.refill, spec.refill_period_ms) {
            (Some(_), None, None) => (
                need(spec, "refill_per_sec", spec.refill_per_sec, COUNT_MAX)?,
                1_000,
            ),
            (None, Some(_), Some(_)) => (
                need(spec, "refill", spec.refill, COUNT_MAX)?,
                need(
                    spec,
                    "refill_period_ms",
                    spec.refill_period_ms,
                    WINDOW_MS_MAX,
                )?,
            ),
            (None, None, None) => {
                return Err(at_spec(
                    "a token bucket needs `refill_per_sec`, or `refill` and `refill_period_ms`",
                ));
            }
            (Some(_), _, _) => {
                return Err(SpecError {
                    field: Some("refill_per_sec"),
                    message: "give `refill_per_sec`, or `refill` and `refill_period_ms`, not both"
                        .into(),
                });
            }
            (None, Some(_), None) => return Err(at_spec("`refill` needs `refill_period_ms`")),
            (None, None, Some(_)) => return Err(at_spec("`refill_period_ms` needs `refill`")),
        };
        TokenBucket::new(capacity, amount, Nanos::from_millis(period_ms)).map_err(refused)
    }

    /// A whole number of tokens per second is written `refill_per_sec`; any other rate as
    /// `refill` per `refill_period_ms` (a period that is not a whole number of ms is written
    /// as the nearest that is, at least 1).
    fn write(&self, spec: &mut PolicySpec) {
        spec.capacity = Some(self.capacity);
        let period = self.refill_period.as_u64();
        if period == Nanos::from_secs(1).as_u64() {
            spec.refill_per_sec = Some(self.refill_amount);
        } else {
            spec.refill = Some(self.refill_amount);
            spec.refill_period_ms = Some(((period + 500_000) / 1_000_000).max(1));
        }
    }

    fn shaped(capacity: u64, per_sec: u64, spec: &mut PolicySpec) {
        spec.capacity = Some(capacity);
        spec.refill_per_sec = Some(per_sec);
    }
}
