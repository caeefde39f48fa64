//! Rendering a [`Decision`] as HTTP fields: `RateLimit-Policy`, `RateLimit` and `Retry-After`.
//!
//! The two RateLimit fields follow draft-ietf-httpapi-ratelimit-headers-10: each is a
//! structured-field List (RFC 9651) of one Item, the policy name as an sf-string, with
//! integer parameters:
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=10
//! RateLimit: "default";r=42;t=1
//! ```
//!
//! `q` is the quota, `w` the window in seconds (for a token bucket, the time to refill from
//! empty), `r` the remaining units and `t` the seconds until more quota becomes available.
//! Seconds are rounded up, so a client that waits `t` never arrives early.
//!
//! `Retry-After` (RFC 9110, delay-seconds) is only sent on a denial: whole seconds, rounded
//! up, at least 1. It is never less than the `t` announced beside it, because a decision's
//! `retry_after` is never less than its `reset_after` (checked by the property tests).

use crate::{Decision, Quota};
use core::fmt;
use core::fmt::Write as _;

/// Longest policy name, in bytes.
pub const MAX_POLICY_NAME_LEN: usize = 64;

/// A policy name that is a valid sf-string: 1–64 printable ASCII characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(String);

/// A rejected policy name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyNameError {
    /// The rejected name (lossily printed if not UTF-8 printable).
    pub name: String,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for PolicyNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid policy name {:?}: expected {}",
            self.name, self.expected
        )
    }
}

impl std::error::Error for PolicyNameError {}

impl PolicyName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<PolicyName, PolicyNameError> {
        let err = |expected| PolicyNameError {
            name: name.chars().take(MAX_POLICY_NAME_LEN + 8).collect(),
            expected,
        };
        if name.is_empty() || name.len() > MAX_POLICY_NAME_LEN {
            return Err(err("1 to 64 bytes"));
        }
        if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(err("printable ASCII characters only (0x20–0x7E)"));
        }
        Ok(PolicyName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The rendered field values for one response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitFields {
    /// The `RateLimit-Policy` field value.
    pub policy: String,
    /// The `RateLimit` field value.
    pub ratelimit: String,
    /// The `Retry-After` field value, present only on a denial.
    pub retry_after: Option<String>,
}

/// Writes `s` as an sf-string: quoted, with `"` and `\` escaped.
fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Renders the fields for `decision` under policy `name` advertising `quota`.
pub fn render(name: &PolicyName, quota: Quota, decision: &Decision) -> RateLimitFields {
    let mut policy = String::with_capacity(32);
    sf_string(&mut policy, name.as_str());
    // q ≤ 10¹² and w ≤ 100 years in seconds: both inside sf-integer's 15 digits.
    let _ = write!(
        policy,
        ";q={};w={}",
        quota.limit,
        quota.window.as_secs_ceil().max(1)
    );

    let t = decision.reset_after.as_secs_ceil();
    let mut ratelimit = String::with_capacity(32);
    sf_string(&mut ratelimit, name.as_str());
    let _ = write!(ratelimit, ";r={};t={}", decision.remaining, t);

    let retry_after = decision
        .retry_after
        .map(|after| after.as_secs_ceil().max(1).to_string());
    RateLimitFields {
        policy,
        ratelimit,
        retry_after,
    }
}
