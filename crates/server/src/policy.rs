//! A limit's algorithm and its parameters, as a `[[limit]]` and a descriptor's `policy`
//! write them (core's [`PolicySpec`]), validated into a core [`Policy`] at a path; and which
//! policies the Redis store runs.

use ratelab_core::Policy;
pub use ratelab_core::{AlgorithmName, PolicySpec};

/// A validation error: the path of the offending value (`limit[2].capacity`), and what is
/// wrong with it.
pub(crate) type Invalid = (String, String);

/// The most a policy admits at once: its capacity (a window's limit).
pub(crate) fn policy_capacity(p: &Policy) -> u64 {
    use ratelab_core::Algorithm as _;
    p.quota().limit
}

/// The policy `spec` describes, at `at` (the path of the entry that writes it).
pub fn policy_at(spec: &PolicySpec, at: &str) -> Result<Policy, Invalid> {
    spec.build().map_err(|e| match e.field {
        Some(field) => (format!("{at}.{field}"), e.message),
        None => (at.to_owned(), e.message),
    })
}

/// Whether `s` is 1 to 64 letters, digits, `_`, `-` or `.` (a limit's name).
pub(crate) fn simple_name(s: &str) -> bool {
    let simple = |c: char| c.is_ascii_alphanumeric() || "_-.".contains(c);
    !s.is_empty() && s.len() <= 64 && s.chars().all(simple)
}

/// Whether the Redis store (one server or a cluster) can run `policy`: every algorithm
/// within its script's exact range (`ratelab_store::redis_limits::ScriptLimit`); the error
/// says why not.
pub(crate) fn redis_can_run(policy: &Policy) -> Result<(), String> {
    ratelab_store::redis_limits::ScriptLimit::new(*policy).map(|_| ())
}
