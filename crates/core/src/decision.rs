//! What a limiter answers, and the one error a caller can cause per request.

use crate::Nanos;
use core::fmt;

/// The answer to one request: admitted or not, and what the client may know about its quota.
///
/// A denial is a value, not an error: it carries `retry_after`, the exact wait after which
/// the same request is admitted (provided no other request for the key intervenes).
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The policy's quota (`q`): the bucket capacity, or the per-window limit.
    pub limit: u64,
    /// Quota units a request could still take right now, after this decision.
    pub remaining: u64,
    /// Time until more quota becomes available than `remaining` (draft-10's `t`);
    /// zero when the quota is already full.
    pub reset_after: Nanos,
    /// On a denial, the exact wait after which this request would be admitted; `None` when
    /// admitted. Always `>= reset_after`.
    pub retry_after: Option<Nanos>,
    /// Time until the quota is whole again (`remaining` = `limit`) if nothing more is taken:
    /// exactly, so the quota is whole at `now + full_after` and not a nanosecond before. Zero
    /// when it is whole already. Always `>= reset_after`. Draft-11's effective window on an
    /// admission (the headers module).
    #[cfg_attr(feature = "serde", serde(default))]
    pub full_after: Nanos,
}

/// A request whose cost can never be admitted under the policy (larger than the quota).
///
/// This is the caller's error, distinct from a denial: no amount of waiting helps.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CostError {
    /// The requested cost.
    pub cost: u64,
    /// The most the policy can ever admit at once.
    pub limit: u64,
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a request of cost {} can never be admitted: the policy admits at most {} at once",
            self.cost, self.limit
        )
    }
}

impl std::error::Error for CostError {}

/// An invalid policy parameter, with the bound it broke.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyError {
    /// The parameter's name, as in the constructor (`capacity`, `refill_period`, …).
    pub parameter: &'static str,
    /// The rejected value.
    pub value: u128,
    /// What was expected, in words (`"between 1 and 1000000000000"`).
    pub expected: String,
}

impl PolicyError {
    pub(crate) fn out_of_range(parameter: &'static str, value: u128, min: u128, max: u128) -> Self {
        PolicyError {
            parameter,
            value,
            expected: format!("between {min} and {max}"),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {}: {} (expected {})",
            self.parameter, self.value, self.expected
        )
    }
}

impl std::error::Error for PolicyError {}
