//! ratelab's Lua scripts, as text, and what a caller needs to run one: the script's name
//! and parameters for each limit ([`ScriptLimit`], or why a policy is beyond the script's
//! exact arithmetic) and the decision in its reply. Redis runs them (`redis_limits`,
//! `redis_store`, `redis_slots`); so can an embedded Lua (`lua_script`, feature `lua`).
//!
//! - [`TOKEN_BUCKET_SCRIPT`] (`token_bucket.lua`): the token bucket alone, over one key or
//!   several.
//! - [`LIMITS_SCRIPT`]: every family, over one key or several of any families, all or
//!   nothing — `limits.lua` with the token bucket's functions put in from
//!   `token_bucket.lua` (the lines it marks as shared), so the token bucket is decided by one
//!   piece of Lua whichever script runs it, and a bucket written by either reads in the other.
//! - [`REFUND_SCRIPT`] (`refund.lua`): gives back what a request spent at its limits, where a
//!   Redis Cluster decided it slot by slot and another slot denied it.
//!
//! A [`ScriptLimit`] is a policy the scripts decide exactly: a token bucket within
//! `token_bucket.lua`'s range ([`bucket_exact`]); every other duration they handle (a window,
//! a stepped bucket's fill time) below 2^50 ns (about 13 days), a window at least 1 ms long,
//! so that every intermediate is an integer below 2^53 (Lua's doubles hold those exactly).

#[cfg(any(feature = "redis", feature = "lua"))]
use crate::{AllApplied, StoreError};
#[cfg(any(feature = "redis", feature = "lua"))]
use ratelab_core::{Algorithm, Decision, Nanos};
use ratelab_core::{Policy, TokenBucket, WindowPolicy};
use std::sync::LazyLock;

/// The token bucket's script.
pub const TOKEN_BUCKET_SCRIPT: &str = include_str!("token_bucket.lua");

/// The script that gives back what a request spent at its limits, of any family:
/// `refund.lua`, with `limits.lua`'s clock reading and field reading and the token bucket's
/// shared functions put in where it marks them.
pub static REFUND_SCRIPT: LazyLock<String> = LazyLock::new(|| {
    include_str!("refund.lua")
        .replacen(
            "-- ratelab:common here",
            section(include_str!("limits.lua"), "common"),
            1,
        )
        .replacen(
            "-- ratelab:shared here",
            section(TOKEN_BUCKET_SCRIPT, "shared"),
            1,
        )
});

/// The lines of `script` between its `-- ratelab:NAME begin` line and `-- ratelab:NAME end`
/// (none when it marks no such section).
fn section<'a>(script: &'a str, name: &str) -> &'a str {
    script
        .split_once(&format!("-- ratelab:{name} begin"))
        .and_then(|(_, rest)| rest.split_once('\n'))
        .and_then(|(_, rest)| rest.split_once(&format!("-- ratelab:{name} end")))
        .map_or("", |(lines, _)| lines)
}

/// Every intermediate of the token bucket's script is an integer below this.
const EXACT: u128 = 1 << 53;

/// Whether `bucket` stays exact in `token_bucket.lua`; why not, with the figure, if not.
pub fn bucket_exact(bucket: &TokenBucket) -> Result<(), String> {
    let units = 1_000_000_000 * u128::from(bucket.refill_amount());
    let need =
        units + 2 * u128::from(bucket.capacity()) * u128::from(bucket.refill_period().as_u64());
    if need >= EXACT {
        return Err(format!(
            "policy too large for the Redis store: 1e9 × refill_amount + 2 × capacity × refill_period_ns = {need}, must be below 2^53"
        ));
    }
    Ok(())
}

/// The script: `limits.lua`, the token bucket's shared functions of `token_bucket.lua`
/// put in where it marks them.
pub static LIMITS_SCRIPT: LazyLock<String> = LazyLock::new(|| {
    include_str!("limits.lua").replacen(
        "-- ratelab:shared here",
        section(TOKEN_BUCKET_SCRIPT, "shared"),
        1,
    )
});

/// Every duration the script handles is below this, in ns.
const EXACT_NS: u64 = 1 << 50;

/// A limit the script decides: its policy, the script's name for its family and its three
/// parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptLimit {
    policy: Policy,
    family: &'static str,
    params: [u64; 3],
}

impl ScriptLimit {
    /// `policy` as the script decides it, or why it cannot decide it exactly.
    pub fn new(policy: Policy) -> Result<ScriptLimit, String> {
        let (family, params) = match policy {
            Policy::FixedWindow(w) => ("fw", window(&w.0)?),
            Policy::FirstHitWindow(w) => ("fh", window(&w.0)?),
            Policy::SlidingWindow(w) => ("sw", window(&w.0)?),
            Policy::SteppedBucket(b) => {
                let (cap, amount, period) =
                    (b.capacity(), b.refill_amount(), b.refill_period().as_u64());
                let fill = u128::from(cap.div_ceil(amount)) * u128::from(period);
                if fill >= u128::from(EXACT_NS) {
                    return Err(format!(
                        "a stepped bucket on Redis fills from empty in less than {EXACT_NS} ns \
                         (about 13 days); this one takes {fill} ns"
                    ));
                }
                ("sb", [cap, amount, period])
            }
            Policy::TokenBucket(b) => {
                bucket_exact(&b)?;
                let period = b.refill_period().as_u64();
                ("tb", [b.capacity(), b.refill_amount(), period])
            }
        };
        Ok(ScriptLimit {
            policy,
            family,
            params,
        })
    }

    /// Its policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The script's name for its family, and its three parameters (as `limits.lua` and
    /// `refund.lua` take them).
    pub fn script_args(&self) -> (&'static str, [u64; 3]) {
        (self.family, self.params)
    }
}

fn window(w: &WindowPolicy) -> Result<[u64; 3], String> {
    let ns = w.window().as_u64();
    if !(1_000_000..EXACT_NS).contains(&ns) {
        return Err(format!(
            "a window on Redis is at least 1 ms and shorter than {EXACT_NS} ns (about 13 \
             days); this one is {ns} ns"
        ));
    }
    Ok([w.limit(), ns, 0])
}

/// A reply's field that is never negative.
#[cfg(any(feature = "redis", feature = "lua"))]
pub(crate) fn non_negative(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt)
}

/// A reply's remaining count, at most `most` (the limit): more left than the limit is no
/// state's, a reply no script of ours made.
#[cfg(any(feature = "redis", feature = "lua"))]
pub(crate) fn remaining_within(v: i64, most: u64) -> Result<u64, StoreError> {
    non_negative(v).and_then(|r| {
        if r <= most {
            Ok(r)
        } else {
            Err(StoreError::Corrupt)
        }
    })
}

/// The script's reply: five fields per key, then the store's clock.
#[cfg(any(feature = "redis", feature = "lua"))]
pub(crate) fn read_reply(
    parts: &[(&str, &ScriptLimit, u64)],
    reply: &[i64],
) -> Result<AllApplied, StoreError> {
    if reply.len() != 5 * parts.len() + 2 {
        return Err(StoreError::Corrupt);
    }
    let mut decisions = Vec::with_capacity(parts.len());
    let mut allowed = true;
    for ((_, limit, _), f) in parts.iter().zip(reply.chunks_exact(5)) {
        let [flag, remaining, reset, retry, full] = *f else {
            return Err(StoreError::Corrupt);
        };
        if !(0..=2).contains(&flag) {
            return Err(StoreError::Corrupt);
        }
        allowed &= flag == 1;
        let most = limit.policy.quota().limit;
        let remaining = remaining_within(remaining, most)?;
        // Only a denying key's wait is read: the others send -1.
        let retry_after = if flag == 0 {
            Some(Nanos(non_negative(retry)?))
        } else {
            None
        };
        decisions.push(Decision {
            allowed: flag != 0,
            limit: most,
            remaining,
            reset_after: Nanos(non_negative(reset)?),
            retry_after,
            full_after: Nanos(non_negative(full)?),
        });
    }
    let [sec, nsec] = reply[reply.len() - 2..] else {
        return Err(StoreError::Corrupt);
    };
    let store_time = non_negative(sec)?
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(non_negative(nsec).ok()?))
        .ok_or(StoreError::Corrupt)?;
    Ok(AllApplied {
        allowed,
        decisions,
        store_time: Nanos(store_time),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{FixedWindow, Nanos, SteppedBucket, TokenBucket};

    #[test]
    fn limits_outside_the_exact_range_are_refused_with_their_figures() {
        let day = Nanos::from_millis(86_400_000);
        assert!(ScriptLimit::new(Policy::FixedWindow(FixedWindow::new(5, day).unwrap())).is_ok());
        let month = Nanos::from_millis(30 * 86_400_000);
        let e = ScriptLimit::new(Policy::FixedWindow(FixedWindow::new(5, month).unwrap()));
        assert!(e.unwrap_err().contains("2592000000000000 ns"));
        let short = Policy::FixedWindow(FixedWindow::new(5, Nanos(999_999)).unwrap());
        assert!(ScriptLimit::new(short).is_err());
        let slow = SteppedBucket::new(1_000, 1, Nanos::from_millis(3_600_000)).unwrap();
        assert!(ScriptLimit::new(Policy::SteppedBucket(slow)).is_err());
        let bucket = TokenBucket::per_second(5, 1).unwrap();
        assert!(ScriptLimit::new(Policy::TokenBucket(bucket)).is_ok());
        let huge = TokenBucket::per_second(5, 10_000_000).unwrap();
        assert!(ScriptLimit::new(Policy::TokenBucket(huge)).is_err());
    }

    #[test]
    fn the_script_holds_the_token_buckets_functions_once() {
        let script = LIMITS_SCRIPT.as_str();
        assert!(!script.contains("ratelab:shared"), "the marker is replaced");
        for f in [
            "local function bucket(",
            "local function idiv(",
            "local function fixed(",
            "local function field(",
        ] {
            assert_eq!(script.matches(f).count(), 1, "{f}");
        }
    }

    #[test]
    fn the_refund_script_holds_the_clock_fields_and_division_once() {
        let script = REFUND_SCRIPT.as_str();
        assert!(!script.contains("-- ratelab:"), "every marker is replaced");
        for f in [
            "local ns, nn",
            "local FAR = ",
            "local function field(",
            "local function idiv(",
            "local function join(",
            "local function stepped(",
        ] {
            assert_eq!(script.matches(f).count(), 1, "{f}");
        }
    }

    #[test]
    #[cfg(any(feature = "redis", feature = "lua"))]
    fn a_reply_of_the_wrong_shape_or_sign_is_corrupt() {
        let limit = ScriptLimit::new(Policy::FixedWindow(
            FixedWindow::new(5, Nanos(1_000_000)).unwrap(),
        ))
        .unwrap();
        let parts = [("k", &limit, 1)];
        assert!(read_reply(&parts, &[1, 4, 10, -1, 10, 1, 2]).is_ok());
        for bad in [
            &[1, 4, 10, -1, 10, 1][..],
            &[3, 4, 10, -1, 10, 1, 2],
            &[1, -4, 10, -1, 10, 1, 2],
            &[0, 4, 10, -1, 10, 1, 2],
            &[1, 6, 10, -1, 10, 1, 2],
        ] {
            assert_eq!(read_reply(&parts, bad), Err(StoreError::Corrupt), "{bad:?}");
        }
    }
}
