//! Rendering a [`Decision`] as HTTP fields: `RateLimit-Policy`, `RateLimit` and `Retry-After`.
//!
//! The two RateLimit fields follow draft-ietf-httpapi-ratelimit-headers-11 by default, and
//! draft-10 on request ([`FieldsDraft`]). Both drafts share the syntax: each field is a
//! structured-field List (RFC 9651) of one Item, the policy name as an sf-string, with
//! integer parameters:
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=10
//! RateLimit: "default";r=42;t=1
//! ```
//!
//! `q` is the quota and `w` the window in seconds (for a token bucket, the time to refill
//! from empty). The drafts differ in what `r` and `t` mean:
//!
//! - **draft-11**: `r` is the available quota and `t` the *effective window*, the seconds
//!   within which the client may use no more than `r`. ratelab announces the window it can
//!   keep exactly: on an admission, the time until the quota is whole again
//!   ([`Decision::full_after`]), so any requests totalling at most `r` sent within `t` are
//!   admitted (absent other clients of the key), and after `t` the whole quota is there; on
//!   a denial, the wait after which the denied request is admitted (its `retry_after`), so
//!   `Retry-After` never points before the window's end.
//! - **draft-10**: `r` is the remaining quota and `t` the seconds until more quota becomes
//!   available ([`Decision::reset_after`]).
//!
//! Seconds are rounded up, so a client that waits `t` never arrives early, and a window
//! announced is never shorter than the true one.
//!
//! `Retry-After` (RFC 9110, delay-seconds) is only sent on a denial: whole seconds, rounded
//! up, at least 1, the exact wait. It is never less than the `t` of a policy that denied,
//! under either draft, because a decision's `retry_after` is never less than its
//! `reset_after` (checked by the property tests). A request denied by one of several limits
//! carries the others' items too, whose draft-11 windows (the time until each is whole
//! again) may end later.

use crate::{Decision, Quota};
use core::fmt;
use core::fmt::Write as _;

/// Which draft of the RateLimit fields an answer follows (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FieldsDraft {
    /// draft-ietf-httpapi-ratelimit-headers-10: `t` is the time until more quota.
    Draft10,
    /// draft-ietf-httpapi-ratelimit-headers-11: `t` is the effective window.
    #[default]
    Draft11,
}

impl FieldsDraft {
    /// `draft-10` or `draft-11`.
    pub fn parse(text: &str) -> Result<FieldsDraft, String> {
        match text {
            "draft-10" => Ok(FieldsDraft::Draft10),
            "draft-11" => Ok(FieldsDraft::Draft11),
            other => Err(format!("{other:?}: expected \"draft-10\" or \"draft-11\"")),
        }
    }

    /// Its name, as [`FieldsDraft::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            FieldsDraft::Draft10 => "draft-10",
            FieldsDraft::Draft11 => "draft-11",
        }
    }

    /// The `t` parameter for `decision`, in the unrounded nanoseconds it stands for.
    pub fn t(self, decision: &Decision) -> crate::Nanos {
        match (self, decision.retry_after) {
            (FieldsDraft::Draft10, _) => decision.reset_after,
            (FieldsDraft::Draft11, Some(wait)) => wait,
            (FieldsDraft::Draft11, None) => decision.full_after,
        }
    }
}

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

/// Renders the fields for `decision` under policy `name` advertising `quota`, as `draft`
/// says.
pub fn render(
    name: &PolicyName,
    quota: Quota,
    decision: &Decision,
    draft: FieldsDraft,
) -> RateLimitFields {
    PolicyFields::new(name, quota).render(decision, draft)
}

/// The parts of a policy's fields that do not change from one decision to the next, rendered
/// once: the whole `RateLimit-Policy` item and the quoted name that starts a `RateLimit` item.
/// A limiter renders each limit's once and each decision's from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFields {
    policy: String,
    quoted: String,
}

impl PolicyFields {
    /// The fields of policy `name` advertising `quota`.
    pub fn new(name: &PolicyName, quota: Quota) -> PolicyFields {
        let mut quoted = String::with_capacity(name.as_str().len() + 2);
        sf_string(&mut quoted, name.as_str());
        let mut policy = quoted.clone();
        // q ≤ 10¹² and w ≤ 100 years in seconds: both inside sf-integer's 15 digits.
        let _ = write!(
            policy,
            ";q={};w={}",
            quota.limit,
            quota.window.as_secs_ceil().max(1)
        );
        PolicyFields { policy, quoted }
    }

    /// The `RateLimit-Policy` item.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The `RateLimit` item for `decision`, as `draft` says.
    pub fn ratelimit(&self, decision: &Decision, draft: FieldsDraft) -> String {
        let (r, t) = (decision.remaining, draft.t(decision).as_secs_ceil());
        // The exact length: a string whose capacity is its length becomes a header value
        // without another allocation.
        let mut out = String::with_capacity(self.quoted.len() + 6 + digits(r) + digits(t));
        out.push_str(&self.quoted);
        out.push_str(";r=");
        push_u64(&mut out, r);
        out.push_str(";t=");
        push_u64(&mut out, t);
        out
    }

    /// The `Retry-After` delay-seconds for `decision`: present only on a denial.
    pub fn retry_after(decision: &Decision) -> Option<u64> {
        decision
            .retry_after
            .map(|after| after.as_secs_ceil().max(1))
    }

    /// All three fields for `decision`, as `draft` says.
    pub fn render(&self, decision: &Decision, draft: FieldsDraft) -> RateLimitFields {
        RateLimitFields {
            policy: self.policy.clone(),
            ratelimit: self.ratelimit(decision, draft),
            retry_after: Self::retry_after(decision).map(|s| s.to_string()),
        }
    }
}

/// How many decimal digits `n` has.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// `n` in decimal ASCII digits, written at the end of `buf`: for writers that build header
/// values or wire commands without a formatter.
/// Two digits at a time, from a table of every pair: half the divisions of one at a time.
pub fn decimal(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    &buf[at..]
}

/// Appends `n` in decimal.
fn push_u64(out: &mut String, n: u64) {
    // ASCII digits, each one char: no UTF-8 check of the whole.
    decimal(&mut [0; 20], n)
        .iter()
        .for_each(|&d| out.push(char::from(d)));
}

#[cfg(test)]
mod tests {
    use super::push_u64;

    #[test]
    fn integers_are_written_as_display_writes_them() {
        // Every length, each side of every power of ten.
        let edges = (0..20u32).flat_map(|e| {
            let p = 10u64.pow(e);
            [p - 1, p, p + 1, p.saturating_mul(7).saturating_add(3)]
        });
        for n in edges.chain([
            0,
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            1_000_000_000_000,
            u64::MAX - 1,
            u64::MAX,
        ]) {
            let mut s = String::from("x");
            push_u64(&mut s, n);
            assert_eq!(s, format!("x{n}"));
            assert_eq!(super::digits(n), n.to_string().len());
            assert_eq!(super::decimal(&mut [0; 20], n), n.to_string().as_bytes());
        }
    }
}
