//! The bounded values scenario files are made of: integers in a range, fractions, signed
//! offsets, latency ranges, node names, the store's engine. Each checks its range as it is
//! parsed.

use ratelab_core::Nanos;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// Longest simulated run: one hour.
pub const MAX_DURATION_MS: u64 = 3_600_000;
/// Most gateways in a cluster.
pub const MAX_GATEWAYS: u64 = 256;
/// Most client groups in a scenario.
pub const MAX_CLIENT_GROUPS: usize = 64;
/// Most faults in a scenario.
pub const MAX_FAULTS: usize = 64;
/// Most requests one seed may schedule (all clients together).
pub const MAX_REQUESTS: u64 = 2_000_000;
/// Most seeds in one scenario.
pub const MAX_SEEDS: usize = 1_000;
/// Largest scenario file.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// An integer from `MIN` to `MAX` inclusive: only [`Bounded::new`] and the deserializer make
/// one, and both check the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Bounded<const MIN: u64, const MAX: u64>(pub(crate) u64);

impl<const MIN: u64, const MAX: u64> Default for Bounded<MIN, MAX> {
    fn default() -> Self {
        Bounded(MIN)
    }
}

impl<const MIN: u64, const MAX: u64> Bounded<MIN, MAX> {
    /// `v`, if it is from `MIN` to `MAX`.
    pub fn new(v: u64) -> Option<Self> {
        (MIN..=MAX).contains(&v).then_some(Bounded(v))
    }

    /// The value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl<'de, const MIN: u64, const MAX: u64> Deserialize<'de> for Bounded<MIN, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const MIN: u64, const MAX: u64>;
        impl<const MIN: u64, const MAX: u64> Visitor<'_> for V<MIN, MAX> {
            type Value = Bounded<MIN, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an integer from {MIN} to {MAX}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if (MIN..=MAX).contains(&v) {
                    Ok(Bounded(v))
                } else {
                    Err(E::custom(format_args!(
                        "{v} is out of range: expected an integer from {MIN} to {MAX}"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Err(E::custom(format_args!(
                    "{v} is out of range: expected an integer from {MIN} to {MAX}"
                )))
            }
        }
        d.deserialize_u64(V::<MIN, MAX>)
    }
}

impl<const MIN: u64, const MAX: u64> JsonSchema for Bounded<MIN, MAX> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Integer_{MIN}_{MAX}").into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer", "minimum": MIN, "maximum": MAX })
    }
}

/// A fraction from 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Fraction(pub(crate) f64);

impl Fraction {
    /// `v`, if it is from 0 to 1.
    pub fn new(v: f64) -> Option<Self> {
        (0.0..=1.0).contains(&v).then_some(Fraction(v))
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..=1.0).contains(&v) {
            Ok(Fraction(v))
        } else {
            Err(de::Error::custom(format_args!(
                "{v} is out of range: expected a fraction from 0 to 1"
            )))
        }
    }
}

impl JsonSchema for Fraction {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Fraction".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number", "minimum": 0.0, "maximum": 1.0 })
    }
}

/// A signed integer from `-LIMIT` to `LIMIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Signed<const LIMIT: i64>(pub(crate) i64);

impl<const LIMIT: i64> Signed<LIMIT> {
    /// `v`, if it is from `-LIMIT` to `LIMIT`.
    pub fn new(v: i64) -> Option<Self> {
        (-LIMIT..=LIMIT).contains(&v).then_some(Signed(v))
    }

    /// The value.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl<'de, const LIMIT: i64> Deserialize<'de> for Signed<LIMIT> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        if (-LIMIT..=LIMIT).contains(&v) {
            Ok(Signed(v))
        } else {
            Err(de::Error::custom(format_args!(
                "{v} is out of range: expected an integer from -{LIMIT} to {LIMIT}"
            )))
        }
    }
}

impl<const LIMIT: i64> JsonSchema for Signed<LIMIT> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Signed_{LIMIT}").into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer", "minimum": -LIMIT, "maximum": LIMIT })
    }
}

/// Milliseconds within a run.
pub type Ms = Bounded<0, MAX_DURATION_MS>;

/// A latency range in microseconds.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LatencyRange {
    /// Smallest latency, µs.
    pub min_us: Bounded<0, 10_000_000>,
    /// Largest latency, µs (at least `min_us`).
    pub max_us: Bounded<0, 10_000_000>,
}

/// A node to pause: `"store"` or a gateway index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeName {
    /// The store node.
    Store,
    /// A gateway, by index.
    Gateway(u32),
}

impl Serialize for NodeName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NodeName::Store => s.serialize_str("store"),
            NodeName::Gateway(g) => s.serialize_u32(*g),
        }
    }
}

impl<'de> Deserialize<'de> for NodeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NodeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "\"store\" or a gateway index")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<NodeName, E> {
                u32::try_from(n)
                    .map(NodeName::Gateway)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NodeName, E> {
                match s {
                    "store" => Ok(NodeName::Store),
                    _ => Err(E::invalid_value(de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for NodeName {
    fn schema_name() -> Cow<'static, str> {
        "NodeName".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "\"store\" or a gateway index.",
            "oneOf": [
                { "type": "string", "enum": ["store"] },
                { "type": "integer", "minimum": 0, "maximum": MAX_GATEWAYS - 1 }
            ]
        })
    }
}

/// Milliseconds as [`Nanos`].
pub fn ms(v: u64) -> Nanos {
    Nanos::from_millis(v)
}

/// What decides a request in the store node on the atomic path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StoreEngine {
    /// The Rust core's transition (`ratelab-core`), as the in-memory store runs it.
    #[default]
    Core,
    /// ratelab's Redis script (`limits.lua`, the text Redis runs) in an embedded Lua 5.1.
    RedisScripts,
}

impl StoreEngine {
    /// Whether it is the default, which a scenario need not write.
    pub fn is_core(&self) -> bool {
        *self == StoreEngine::Core
    }
}
