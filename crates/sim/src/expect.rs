//! A scenario's `expect`: bounds on the checkers' figures (`<figure>_at_most`,
//! `<figure>_at_least`, for every figure in [`crate::checkers::figures`]), bounds on single
//! keys, and the switches (answers, liveness, the explorer's verdict).

pub use crate::checkers::Bounds;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// Bounds every seed's report must meet. Absent bounds are not checked.
///
/// Besides the switches below, `expect` takes `<figure>_at_most` and `<figure>_at_least` for
/// every figure a checker reports ([`crate::checkers::figures`]): `max_excess_at_most`,
/// `denied_at_least`, …
#[derive(Clone, Debug, PartialEq)]
pub struct Expect {
    /// The bounds on the checkers' figures, by figure name.
    pub bounds: std::collections::BTreeMap<String, Bounds>,
    /// Every request answered exactly once (default true).
    pub all_answered: bool,
    /// After the last fault heals and the bucket has had time to refill, no request on a key
    /// whose clients all send at constant rates within the policy's rate is denied or fails
    /// (default false).
    pub liveness: bool,
    /// Judge the run by the explorer's checkers instead of the bounds here (`ratelab run`
    /// and `cargo test` both do): `"pass"`, or the signature `"class/checker"` (class
    /// `safety` or `liveness`) a planted bug must show (`"safety/linearizable"`). The other
    /// fields then only switch phases on (`liveness`). Shrunk failures in
    /// `sim-scenarios/regressions/` carry it.
    pub explorer: Option<String>,
    /// Bounds on what single keys were admitted, by the key as clients send it (at most 64
    /// keys): `{ "victim": { "allowed_at_least": 10, "allowed_at_most": 12 } }`.
    pub keys: std::collections::BTreeMap<String, KeyExpect>,
}

impl Expect {
    /// The bounds on figure `name` (none when not given).
    pub fn bound(&self, name: &str) -> Bounds {
        self.bounds.get(name).copied().unwrap_or_default()
    }

    /// Sets a bound: `field` is `<figure>_at_most` or `<figure>_at_least`; `None` when no
    /// checker reports that figure.
    pub fn set(&mut self, field: &str, value: u64) -> Option<()> {
        let (name, most) = split_bound(field)?;
        let b = self.bounds.entry(name.to_owned()).or_default();
        if most {
            b.at_most = Some(value);
        } else {
            b.at_least = Some(value);
        }
        Some(())
    }
}

/// `<figure>_at_most` or `<figure>_at_least`, for a figure a checker reports: the figure and
/// whether the bound is from above.
fn split_bound(field: &str) -> Option<(&str, bool)> {
    let (name, most) = match field.strip_suffix("_at_most") {
        Some(name) => (name, true),
        None => (field.strip_suffix("_at_least")?, false),
    };
    crate::checkers::figure(name).map(|f| (f.name, most))
}

/// Every bound field `expect` takes, in the checkers' order.
fn bound_fields() -> impl Iterator<Item = (String, &'static crate::checkers::Figure, bool)> {
    crate::checkers::figures().flat_map(|f| {
        [
            (format!("{}_at_most", f.name), f, true),
            (format!("{}_at_least", f.name), f, false),
        ]
    })
}

impl Serialize for Expect {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (field, f, most) in bound_fields() {
            let b = self.bound(f.name);
            if let Some(v) = if most { b.at_most } else { b.at_least } {
                m.serialize_entry(&field, &v)?;
            }
        }
        m.serialize_entry("all_answered", &self.all_answered)?;
        m.serialize_entry("liveness", &self.liveness)?;
        if let Some(e) = &self.explorer {
            m.serialize_entry("explorer", e)?;
        }
        m.serialize_entry("keys", &self.keys)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Expect {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Expect;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an object of bounds and switches")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Expect, A::Error> {
                let mut e = Expect::default();
                let mut seen = std::collections::BTreeSet::new();
                while let Some(k) = map.next_key::<String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(de::Error::custom(format!("duplicate field `{k}`")));
                    }
                    match k.as_str() {
                        "all_answered" => e.all_answered = map.next_value()?,
                        "liveness" => e.liveness = map.next_value()?,
                        "explorer" => e.explorer = map.next_value()?,
                        "keys" => e.keys = map.next_value()?,
                        field => {
                            if split_bound(field).is_none() {
                                let names: Vec<&str> =
                                    crate::checkers::figures().map(|f| f.name).collect();
                                return Err(de::Error::custom(format!(
                                    "unknown field `{field}`: expected `all_answered`, `liveness`, `explorer`, `keys`, \
                                     or `<figure>_at_most` / `<figure>_at_least` for a figure among {}",
                                    names.join(", ")
                                )));
                            }
                            let v: u64 = map.next_value()?;
                            e.set(field, v);
                        }
                    }
                }
                Ok(e)
            }
        }
        d.deserialize_map(V)
    }
}

impl JsonSchema for Expect {
    fn schema_name() -> Cow<'static, str> {
        "Expect".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let mut props = serde_json::Map::new();
        for (field, f, most) in bound_fields() {
            let side = if most { "at most" } else { "at least" };
            props.insert(
                field,
                serde_json::json!({
                    "description": format!("{}: {side} this.", f.about),
                    "type": "integer",
                    "minimum": 0
                }),
            );
        }
        props.insert(
            "all_answered".into(),
            serde_json::json!({ "description": "Every request answered exactly once (default true).", "type": "boolean" }),
        );
        props.insert(
            "liveness".into(),
            serde_json::json!({ "description": "Hold the run to liveness after the last fault heals (default false).", "type": "boolean" }),
        );
        props.insert(
            "explorer".into(),
            serde_json::json!({ "description": "Judge by the explorer's checkers: \"pass\" or the signature \"class/checker\" a planted bug must show.", "type": "string" }),
        );
        let keys = g.subschema_for::<std::collections::BTreeMap<String, KeyExpect>>();
        props.insert("keys".into(), keys.to_value());
        json_schema!({
            "description": "Bounds every seed's report must meet, on the checkers' figures, and switches.",
            "type": "object",
            "properties": props,
            "additionalProperties": false
        })
    }
}

/// Bounds on one key's admissions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyExpect {
    /// Requests on this key admitted by a decision: at least.
    pub allowed_at_least: Option<u64>,
    /// … at most.
    pub allowed_at_most: Option<u64>,
}

/// Most keys an `expect.keys` block may name.
pub const MAX_EXPECTED_KEYS: usize = 64;

impl Default for Expect {
    fn default() -> Self {
        Expect {
            bounds: std::collections::BTreeMap::new(),
            all_answered: true,
            liveness: false,
            explorer: None,
            keys: std::collections::BTreeMap::new(),
        }
    }
}
