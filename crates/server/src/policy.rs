//! A limit's algorithm and its parameters, as a `[[limit]]` and a descriptor's `policy`
//! write them, validated into a core [`Policy`]; and which policies the Redis store runs.

use ratelab_core::{FixedWindow, Nanos, Policy, SlidingWindow, TokenBucket};
use schemars::JsonSchema;
use serde::Deserialize;

/// The largest capacity, limit, refill rate or cost the file accepts.
const COUNT_MAX: u64 = 1_000_000_000_000;
/// The longest window: a week.
const WINDOW_MS_MAX: u64 = 7 * 24 * 3600 * 1000;

/// A validation error: the path of the offending value (`limit[2].capacity`), and what is
/// wrong with it.
pub(crate) type Invalid = (String, String);

/// A limit's algorithm.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum AlgorithmName {
    /// A token bucket of `capacity` refilled at `refill_per_sec` (GCRA, exact).
    TokenBucket,
    /// At most `limit` per aligned window of `window_ms`.
    FixedWindow,
    /// A sliding-window counter: `limit` per `window_ms`, the previous window weighted.
    SlidingWindow,
}

/// An algorithm's parameters, each optional as written: [`Params::policy`] checks that the
/// algorithm's own are given, within range, and no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// The algorithm.
    pub algorithm: AlgorithmName,
    /// Token bucket: its capacity B.
    pub capacity: Option<u64>,
    /// Token bucket: its refill per second.
    pub refill_per_sec: Option<u64>,
    /// Token bucket: tokens added every `refill_period_ms`.
    pub refill: Option<u64>,
    /// Token bucket: the period of `refill`, ms.
    pub refill_period_ms: Option<u64>,
    /// Windows: the most admitted per window.
    pub limit: Option<u64>,
    /// Windows: the window, ms.
    pub window_ms: Option<u64>,
}

/// The most a policy admits at once: its capacity (a window's limit).
pub(crate) fn policy_capacity(p: &Policy) -> u64 {
    use ratelab_core::Algorithm as _;
    p.quota().limit
}

impl Params {
    /// The policy these parameters describe, at `at` (the path of the entry that gives them).
    pub fn policy(&self, at: &str) -> Result<Policy, Invalid> {
        let e = self;
        let field = |f: &str| format!("{at}.{f}");
        let (name, allowed): (&str, &[&str]) = match e.algorithm {
            AlgorithmName::TokenBucket => (
                "token-bucket",
                &["capacity", "refill_per_sec", "refill", "refill_period_ms"],
            ),
            AlgorithmName::FixedWindow => ("fixed-window", &["limit", "window_ms"]),
            AlgorithmName::SlidingWindow => ("sliding-window", &["limit", "window_ms"]),
        };
        let given = [
            ("capacity", e.capacity),
            ("refill_per_sec", e.refill_per_sec),
            ("refill", e.refill),
            ("refill_period_ms", e.refill_period_ms),
            ("limit", e.limit),
            ("window_ms", e.window_ms),
        ];
        if let Some((f, _)) = given
            .iter()
            .find(|(f, v)| v.is_some() && !allowed.contains(f))
        {
            return Err((field(f), format!("a {name} limit has no {f}")));
        }
        // A parameter that must be given, from 1 to `max`.
        let need = |f: &str, v: Option<u64>, max: u64| match v {
            None => Err((at.to_owned(), format!("a {name} limit needs {f}"))),
            Some(v) if !(1..=max).contains(&v) => {
                Err((field(f), format!("{v}: expected 1 to {max}")))
            }
            Some(v) => Ok(v),
        };
        let policy = match e.algorithm {
            AlgorithmName::TokenBucket => {
                let capacity = need("capacity", e.capacity, COUNT_MAX)?;
                let (amount, period_ms) = match (e.refill_per_sec, e.refill, e.refill_period_ms) {
                    (Some(_), None, None) => {
                        (need("refill_per_sec", e.refill_per_sec, COUNT_MAX)?, 1_000)
                    }
                    (None, Some(_), Some(_)) => (
                        need("refill", e.refill, COUNT_MAX)?,
                        need("refill_period_ms", e.refill_period_ms, WINDOW_MS_MAX)?,
                    ),
                    (None, None, None) => {
                        return Err((
                            at.to_owned(),
                            "a token-bucket limit needs refill_per_sec, or refill and refill_period_ms"
                                .into(),
                        ));
                    }
                    (Some(_), _, _) => {
                        return Err((
                            field("refill_per_sec"),
                            "give refill_per_sec, or refill and refill_period_ms, not both".into(),
                        ));
                    }
                    (None, Some(_), None) => {
                        return Err((at.to_owned(), "refill needs refill_period_ms".into()));
                    }
                    (None, None, Some(_)) => {
                        return Err((at.to_owned(), "refill_period_ms needs refill".into()));
                    }
                };
                TokenBucket::new(capacity, amount, Nanos::from_millis(period_ms))
                    .map(Policy::TokenBucket)
            }
            AlgorithmName::FixedWindow | AlgorithmName::SlidingWindow => {
                let limit = need("limit", e.limit, COUNT_MAX)?;
                let window = Nanos::from_millis(need("window_ms", e.window_ms, WINDOW_MS_MAX)?);
                if e.algorithm == AlgorithmName::FixedWindow {
                    FixedWindow::new(limit, window).map(Policy::FixedWindow)
                } else {
                    SlidingWindow::new(limit, window).map(Policy::SlidingWindow)
                }
            }
        };
        policy.map_err(|err| (at.to_owned(), err.to_string()))
    }
}

/// Whether `s` is 1 to 64 letters, digits, `_`, `-` or `.` (a limit's name).
pub(crate) fn simple_name(s: &str) -> bool {
    let simple = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
    !s.is_empty() && s.len() <= 64 && s.chars().all(simple)
}

/// Why the Redis store cannot run a policy.
pub(crate) enum RedisRefusal {
    /// A token bucket beyond the Lua script's exact range.
    Range(String),
    /// Not a token bucket.
    Algorithm(String),
}

/// Whether the Redis store can run `policy`: a token bucket within the script's exact range.
pub(crate) fn redis_can_run(policy: &Policy) -> Result<(), RedisRefusal> {
    match policy {
        Policy::TokenBucket(b) => ratelab_store::redis_store::check_exact(b)
            .map_err(|e| RedisRefusal::Range(e.to_string())),
        _ => Err(RedisRefusal::Algorithm(
            "the Redis store runs token-bucket limits only (fixed and sliding windows need the \
             in-memory store)"
                .into(),
        )),
    }
}
