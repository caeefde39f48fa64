//! How a policy is written: [`PolicySpec`], an algorithm's name and its parameters, as
//! scenario files, limits files and the RLS configuration all write it; and [`Written`], what
//! each algorithm says about its own parameters (which it takes, how it is built from them,
//! how it writes itself back).
//!
//! Every parameter is a whole number from 1: counts up to [`COUNT_MAX`], times in
//! milliseconds up to [`WINDOW_MS_MAX`]. A spec names one algorithm and gives exactly that
//! algorithm's parameters: [`PolicySpec::build`] refuses a missing one, one out of range, and
//! one that belongs to another algorithm, each with the field it is about.
//!
//! The names of the algorithms, [`AlgorithmName`], come from the one list in `lib.rs`.
//! A file writes a name in snake case (`token_bucket`) or with hyphens (`token-bucket`).

use crate::AlgorithmName;
use core::fmt;

/// The largest capacity, limit, refill amount or rate a spec accepts: 10¹².
pub const COUNT_MAX: u64 = 1_000_000_000_000;
/// The longest window or refill period a spec accepts, in ms: a week.
pub const WINDOW_MS_MAX: u64 = 7 * 24 * 3_600 * 1_000;

/// The parameters a policy is written with, one line each: its documentation, its name in
/// files, and its largest value (every one is a whole number from 1). The one list of them:
/// [`PolicySpec`] is declared from it, and so are the files that write a policy beside fields
/// of their own (the server's limits file and RLS configuration), by calling
/// `for_each_policy_field!(m)` with a macro `m` that takes the lines
/// (`$($doc:literal, $field:ident, $max:literal;)*`).
#[macro_export]
macro_rules! for_each_policy_field {
    ($callback:ident) => {
        $callback! {
            "Token bucket: its capacity B.", capacity, 1_000_000_000_000u64;
            "Token bucket: its refill R per second (or give `refill` and `refill_period_ms`).",
            refill_per_sec, 1_000_000_000_000u64;
            "Token bucket: tokens added every `refill_period_ms` (for rates below one per second: \
`refill = 100, refill_period_ms = 3600000` is 100 an hour); stepped bucket: tokens \
added at the end of every whole `refill_period_ms`.",
            refill, 1_000_000_000_000u64;
            "Token bucket and stepped bucket: the period of `refill`, ms.",
            refill_period_ms, 604_800_000u64;
            "Windows: the most admitted per window.", limit, 1_000_000_000_000u64;
            "Windows: the window, ms.", window_ms, 604_800_000u64;
        }
    };
}

/// Declares [`PolicySpec`] and the accessors that list its parameters.
macro_rules! policy_spec {
    ($($doc:literal, $field:ident, $max:literal;)*) => {
        /// A policy as written: its algorithm and that algorithm's parameters.
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(deny_unknown_fields)
        )]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct PolicySpec {
            /// The algorithm.
            pub algorithm: AlgorithmName,
            $(
                #[doc = $doc]
                #[cfg_attr(
                    feature = "serde",
                    serde(default, skip_serializing_if = "Option::is_none")
                )]
                #[cfg_attr(feature = "schema", schemars(range(min = 1, max = $max)))]
                pub $field: Option<u64>,
            )*
        }

        impl PolicySpec {
            /// A spec of `algorithm` with no parameters yet.
            pub fn empty(algorithm: AlgorithmName) -> PolicySpec {
                PolicySpec {
                    algorithm,
                    $($field: None,)*
                }
            }

            /// Every parameter, to write, in the list's order.
            pub fn values_mut(&mut self) -> [(&'static str, &mut Option<u64>); FIELD_COUNT] {
                [$((stringify!($field), &mut self.$field),)*]
            }
        }

        /// How many parameters a policy can be written with.
        pub const FIELD_COUNT: usize = [$(stringify!($field)),*].len();
    };
}

for_each_policy_field!(policy_spec);

/// What is wrong with a [`PolicySpec`]: the field it is about (`None`: the spec as a whole),
/// and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The offending field, as written (`capacity`), if one is.
    pub field: Option<&'static str>,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for SpecError {}

/// What an algorithm says about how it is written. Each algorithm implements it in its own
/// file; the list at the end of `lib.rs` names it once.
pub trait Written: Sized {
    /// The parameters it takes; any other given is refused before [`Written::from_spec`].
    const FIELDS: &'static [&'static str];

    /// The policy `spec` describes (its algorithm is this one, and it gives no field outside
    /// [`Written::FIELDS`]).
    fn from_spec(spec: &PolicySpec) -> Result<Self, SpecError>;

    /// Its parameters written into `spec` (whose algorithm is already set, and whose other
    /// fields are empty): for a policy a file can write, [`Written::from_spec`] of the result
    /// gives it back.
    fn write(&self, spec: &mut PolicySpec);

    /// Writes into `spec` this algorithm's policy that admits `capacity` at once and
    /// `per_sec` a second over time (a window policy: `capacity` per the time a bucket
    /// takes to fill).
    fn shaped(capacity: u64, per_sec: u64, spec: &mut PolicySpec);
}

impl PolicySpec {
    /// Every parameter and its value, in the list's order.
    pub fn values(&self) -> [(&'static str, Option<u64>); FIELD_COUNT] {
        let mut copy = *self;
        copy.values_mut().map(|(field, value)| (field, *value))
    }

    /// Sets the parameter named `field` (as files write it) to `value`, or says it is no
    /// parameter; [`PolicySpec::build`] then judges the whole.
    pub fn set(&mut self, field: &str, value: u64) -> Result<(), SpecError> {
        let algorithm = self.algorithm;
        match self.values_mut().into_iter().find(|(f, _)| *f == field) {
            Some((_, slot)) => {
                *slot = Some(value);
                Ok(())
            }
            None => Err(SpecError {
                field: None,
                message: format!(
                    "{field:?} is no parameter of a {} (it takes: {})",
                    algorithm.prose(),
                    algorithm.fields().join(", ")
                ),
            }),
        }
    }

    /// Refuses a field the algorithm does not take.
    pub(crate) fn only(&self, fields: &[&str]) -> Result<(), SpecError> {
        match self
            .values()
            .iter()
            .find(|(f, v)| v.is_some() && !fields.contains(f))
        {
            None => Ok(()),
            Some((field, _)) => Err(SpecError {
                field: Some(field),
                message: format!(
                    "`{field}` does not apply to a {} (it takes: {})",
                    self.algorithm.prose(),
                    fields.join(", ")
                ),
            }),
        }
    }
}

/// The value of a parameter the algorithm needs: given, and from 1 to `max`.
pub(crate) fn need(
    spec: &PolicySpec,
    field: &'static str,
    value: Option<u64>,
    max: u64,
) -> Result<u64, SpecError> {
    match value {
        None => Err(SpecError {
            field: None,
            message: format!("a {} needs `{field}`", spec.algorithm.prose()),
        }),
        Some(v) if !(1..=max).contains(&v) => Err(SpecError {
            field: Some(field),
            message: format!("{v}: expected 1 to {max}"),
        }),
        Some(v) => Ok(v),
    }
}

/// A constructor's refusal (a bound that involves several parameters), about the spec.
pub(crate) fn refused(e: crate::PolicyError) -> SpecError {
    SpecError {
        field: None,
        message: e.to_string(),
    }
}
