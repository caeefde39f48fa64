//! [`Policy`]: any of the algorithms behind one type, for configuration and scenarios; and
//! the one list of them.
//!
//! **The list.** Each line of `algorithms!` below names one algorithm: its variant, its
//! policy and state types (which implement [`Algorithm`] and [`Written`] in their own
//! file), its name in files and its name in prose. From it come [`Policy`],
//! [`PolicyState`], [`AlgorithmName`] and the dispatch between them, so a new algorithm is
//! its own file plus one line here.

use crate::algorithm::{Algorithm, Quota};
use crate::first_hit::{FirstHitWindow, FirstHitWindowState};
use crate::spec::{PolicySpec, SpecError, Written};
use crate::window::{FixedWindow, FixedWindowState, SlidingWindow, SlidingWindowState};
use crate::{CostError, Decision, Nanos, TokenBucket, TokenBucketState};
use core::fmt;

/// Runs `alg` over `state` if the state belongs to it. A state of another algorithm (the
/// policy changed under a live key) is treated as absent: the key starts with a full quota.
macro_rules! dispatch {
    ($alg:expr, $state:expr, $now:expr, $cost:expr, $variant:ident) => {{
        let state = match $state {
            Some(PolicyState::$variant(s)) => Some(s),
            _ => None,
        };
        $alg.transition(state, $now, $cost)
            .map(|(s, d)| (PolicyState::$variant(s), d))
    }};
}

macro_rules! algorithms {
    ($( $(#[$doc:meta])* $variant:ident($policy:ty, $state:ty), $name:literal, $prose:literal; )*) => {
        /// One of the supported algorithms, chosen at run time.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Policy {
            $( $(#[$doc])* $variant($policy), )*
        }

        /// The state of whichever algorithm a [`Policy`] holds.
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum PolicyState {
            $( #[doc = concat!("A ", $prose, "'s state.")] $variant($state), )*
        }

        /// An algorithm's name, as files write it ([`AlgorithmName::name`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum AlgorithmName {
            $( $(#[$doc])* $variant, )*
        }

        impl AlgorithmName {
            /// Every algorithm, in the list's order.
            pub const ALL: &[AlgorithmName] = &[$(AlgorithmName::$variant),*];
            /// Every name, in the list's order.
            pub const NAMES: &[&str] = &[$($name),*];

            /// Its name in files, in snake case (`token_bucket`).
            pub fn name(self) -> &'static str {
                match self { $(AlgorithmName::$variant => $name,)* }
            }

            /// Its name in prose (`token bucket`).
            pub fn prose(self) -> &'static str {
                match self { $(AlgorithmName::$variant => $prose,)* }
            }

            /// The parameters it takes.
            pub fn fields(self) -> &'static [&'static str] {
                match self { $(AlgorithmName::$variant => <$policy as Written>::FIELDS,)* }
            }

            /// Its policy that admits `capacity` at once and `per_sec` a second over time.
            pub fn shaped(self, capacity: u64, per_sec: u64) -> PolicySpec {
                let mut spec = PolicySpec::empty(self);
                match self {
                    $(AlgorithmName::$variant => {
                        <$policy as Written>::shaped(capacity, per_sec, &mut spec)
                    })*
                }
                spec
            }
        }

        impl PolicySpec {
            /// The policy this spec describes, or what is wrong with it.
            pub fn build(&self) -> Result<Policy, SpecError> {
                self.only(self.algorithm.fields())?;
                match self.algorithm {
                    $(AlgorithmName::$variant => {
                        <$policy as Written>::from_spec(self).map(Policy::$variant)
                    })*
                }
            }
        }

        impl Policy {
            /// Its algorithm's name.
            pub fn name(&self) -> AlgorithmName {
                match self { $(Policy::$variant(_) => AlgorithmName::$variant,)* }
            }

            /// The spec that writes it: its [`PolicySpec::build`] gives it back.
            pub fn spec(&self) -> PolicySpec {
                let mut spec = PolicySpec::empty(self.name());
                match self { $(Policy::$variant(p) => p.write(&mut spec),)* }
                spec
            }
        }

        impl Algorithm for Policy {
            type State = PolicyState;

            fn transition(
                &self,
                state: Option<PolicyState>,
                now: Nanos,
                cost: u64,
            ) -> Result<(PolicyState, Decision), CostError> {
                match self {
                    $(Policy::$variant(a) => dispatch!(a, state, now, cost, $variant),)*
                }
            }

            fn expires_at(&self, state: &PolicyState) -> Nanos {
                match (self, state) {
                    $((Policy::$variant(a), PolicyState::$variant(s)) => a.expires_at(s),)*
                    // A foreign state means nothing under this policy: it may go at once.
                    #[allow(unreachable_patterns)]
                    _ => Nanos::ZERO,
                }
            }

            fn quota(&self) -> Quota {
                match self { $(Policy::$variant(a) => a.quota(),)* }
            }
        }
    };
}

algorithms! {
    /// Token bucket (GCRA): `capacity`, and `refill_per_sec` or `refill` per
    /// `refill_period_ms`.
    TokenBucket(TokenBucket, TokenBucketState), "token_bucket", "token bucket";
    /// Fixed window: `limit` per aligned window of `window_ms`.
    FixedWindow(FixedWindow, FixedWindowState), "fixed_window", "fixed window";
    /// Sliding-window counter: `limit` per `window_ms`, the previous window weighted.
    SlidingWindow(SlidingWindow, SlidingWindowState), "sliding_window", "sliding window";
    /// Fixed window opened by a key's first request: `limit` per `window_ms` from then.
    FirstHitWindow(FirstHitWindow, FirstHitWindowState), "first_hit_window", "first-hit window";
}

impl AlgorithmName {
    /// The algorithm `name` names, in snake case or with hyphens.
    pub fn parse(name: &str) -> Option<AlgorithmName> {
        let snake = name.replace('-', "_");
        AlgorithmName::ALL
            .iter()
            .copied()
            .find(|a| a.name() == snake)
    }
}

impl fmt::Display for AlgorithmName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for AlgorithmName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for AlgorithmName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = AlgorithmName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an algorithm's name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<AlgorithmName, E> {
                AlgorithmName::parse(s).ok_or_else(|| E::unknown_variant(s, AlgorithmName::NAMES))
            }
        }
        d.deserialize_str(Name)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for AlgorithmName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AlgorithmName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut names: Vec<String> = AlgorithmName::NAMES.iter().map(|n| n.to_string()).collect();
        names.extend(AlgorithmName::NAMES.iter().map(|n| n.replace('_', "-")));
        let about: Vec<String> = AlgorithmName::ALL
            .iter()
            .map(|a| format!("`{}`: {}", a.name(), a.prose()))
            .collect();
        schemars::json_schema!({
            "description": format!(
                "The algorithm, in snake case or with hyphens: {}.",
                about.join("; ")
            ),
            "type": "string",
            "enum": names,
        })
    }
}
