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
    /// Token bucket: its capacity B.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = 1, max = 1_000_000_000_000u64))
    )]
    pub capacity: Option<u64>,
    /// Token bucket: its refill R per second (or give `refill` and `refill_period_ms`).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = 1, max = 1_000_000_000_000u64))
    )]
    pub refill_per_sec: Option<u64>,
    /// Token bucket: tokens added every `refill_period_ms` (for rates below one per second:
    /// `refill = 100, refill_period_ms = 3600000` is 100 an hour).
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = 1, max = 1_000_000_000_000u64))
    )]
    pub refill: Option<u64>,
    /// Token bucket: the period of `refill`, ms.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 604_800_000u64)))]
    pub refill_period_ms: Option<u64>,
    /// Windows: the most admitted per window.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(
        feature = "schema",
        schemars(range(min = 1, max = 1_000_000_000_000u64))
    )]
    pub limit: Option<u64>,
    /// Windows: the window, ms.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 604_800_000u64)))]
    pub window_ms: Option<u64>,
}

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
    /// A spec of `algorithm` with no parameters yet.
    pub fn empty(algorithm: AlgorithmName) -> PolicySpec {
        PolicySpec {
            algorithm,
            capacity: None,
            refill_per_sec: None,
            refill: None,
            refill_period_ms: None,
            limit: None,
            window_ms: None,
        }
    }

    /// Every parameter and its value, in the order written above.
    pub fn values(&self) -> [(&'static str, Option<u64>); 6] {
        [
            ("capacity", self.capacity),
            ("refill_per_sec", self.refill_per_sec),
            ("refill", self.refill),
            ("refill_period_ms", self.refill_period_ms),
            ("limit", self.limit),
            ("window_ms", self.window_ms),
        ]
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
