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
            "the Redis store runs token-bucket limits only (other algorithms need the in-memory \
             store)"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The properties of `T`'s JSON Schema.
    fn properties<T: schemars::JsonSchema>() -> Value {
        serde_json::to_value(schemars::schema_for!(T)).unwrap()["properties"].clone()
    }

    /// A `[[limit]]` and a descriptor's `policy` write a policy's parameters beside their own
    /// fields, so they declare them again: each must read them as core's `PolicySpec` does.
    #[test]
    fn the_files_write_a_policys_parameters_as_the_policy_spec_does() {
        let spec = properties::<PolicySpec>();
        let limit = properties::<crate::limits::LimitEntry>();
        let rls = properties::<crate::rls::config::PolicyEntry>();
        let bounds = |v: &Value| (v["minimum"].clone(), v["maximum"].clone());
        for (field, _) in PolicySpec::empty(AlgorithmName::TokenBucket).values() {
            let want = bounds(&spec[field]);
            assert!(want.1.is_number(), "{field}: {spec}");
            assert_eq!(bounds(&limit[field]), want, "limit[].{field}");
            assert_eq!(bounds(&rls[field]), want, "descriptor policy.{field}");
        }
    }
}
