//! How the list of algorithms (in `lib.rs`) becomes [`Policy`](crate::Policy),
//! [`PolicyState`](crate::PolicyState) and [`AlgorithmName`]: the `algorithms!` macro, and
//! what an algorithm's name does beyond the list (parsing either spelling, serde, schema).
//!
//! Each line of the list names one algorithm: its variant, its policy and state types (which
//! implement [`Algorithm`](crate::Algorithm) and [`Written`](crate::spec::Written) in their
//! own file), its name in files and its name in prose.

use crate::AlgorithmName;
use core::fmt;

/// Declares the algorithms: [`Policy`](crate::Policy), [`PolicyState`](crate::PolicyState),
/// [`AlgorithmName`] and the dispatch between them, from one line per algorithm (the list is
/// in `lib.rs`).
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
                match self { $(AlgorithmName::$variant => <$policy as $crate::spec::Written>::FIELDS,)* }
            }

            /// Its policy that admits `capacity` at once and `per_sec` a second over time.
            pub fn shaped(self, capacity: u64, per_sec: u64) -> $crate::PolicySpec {
                let mut spec = $crate::PolicySpec::empty(self);
                match self {
                    $(AlgorithmName::$variant => {
                        <$policy as $crate::spec::Written>::shaped(capacity, per_sec, &mut spec)
                    })*
                }
                spec
            }
        }

        impl $crate::PolicySpec {
            /// The policy this spec describes, or what is wrong with it.
            pub fn build(&self) -> Result<Policy, $crate::SpecError> {
                self.only(self.algorithm.fields())?;
                match self.algorithm {
                    $(AlgorithmName::$variant => {
                        <$policy as $crate::spec::Written>::from_spec(self).map(Policy::$variant)
                    })*
                }
            }
        }

        impl Policy {
            /// Its algorithm's name.
            pub fn name(&self) -> AlgorithmName {
                match self { $(Policy::$variant(_) => AlgorithmName::$variant,)* }
            }

            /// The spec that writes it. For a policy a file can write (periods and windows in
            /// whole ms, at most a week) its `PolicySpec::build` gives it back; another is
            /// written to the nearest ms, and `build` may refuse it.
            pub fn spec(&self) -> $crate::PolicySpec {
                let mut spec = $crate::PolicySpec::empty(self.name());
                match self { $(Policy::$variant(p) => $crate::spec::Written::write(p, &mut spec),)* }
                spec
            }
        }

        impl $crate::Algorithm for Policy {
            type State = PolicyState;

            fn transition(
                &self,
                state: Option<PolicyState>,
                now: $crate::Nanos,
                cost: u64,
            ) -> Result<(PolicyState, $crate::Decision), $crate::CostError> {
                match self {
                    $(Policy::$variant(a) => {
                        // A state of another algorithm (the policy changed under a live key)
                        // is treated as absent: the key starts with a full quota.
                        let state = match state {
                            Some(PolicyState::$variant(s)) => Some(s),
                            _ => None,
                        };
                        a.transition(state, now, cost)
                            .map(|(s, d)| (PolicyState::$variant(s), d))
                    })*
                }
            }

            fn expires_at(&self, state: &PolicyState) -> $crate::Nanos {
                match (self, state) {
                    $((Policy::$variant(a), PolicyState::$variant(s)) => a.expires_at(s),)*
                    // A foreign state means nothing under this policy: it may go at once.
                    #[allow(unreachable_patterns)]
                    _ => $crate::Nanos::ZERO,
                }
            }

            fn quota(&self) -> $crate::Quota {
                match self { $(Policy::$variant(a) => a.quota(),)* }
            }
        }
    };
}

pub(crate) use algorithms;

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
