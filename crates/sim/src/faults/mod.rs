//! Simulator faults: one module per kind, each owning its fields, its checks, its injection
//! and how the explorer draws it.
//!
//! **A new fault kind** is one file here and one line in the `faults!` list below: a type
//! with exactly the fields it takes (serde's `deny_unknown_fields`, bounded values from
//! `crate::values`) that implements `Kind`. A store-side fault answers
//! `Kind::on_store_message` with a `Verdict` (serve, error, drop, lose the reply, delay);
//! a node- or network-level fault acts in `Kind::inject` through `Ctx` (madsim's kill,
//! restart, pause and link verbs, the gateways' kill switches, the store's replica); a fault
//! that bends a gateway's clock answers `Kind::clock`. The list makes the scenario format's
//! `kind`, the schema, the explorer's draws and every dispatch from that one line; the
//! module's name is the kind's name in scenario files.

mod kind;

pub(crate) use kind::{Check, Ctx, Hold, Kind, ReplicaControl, Verdict, draw_window};
pub use kind::{Cut, Outage, Rated, Shape};

use crate::rng::Draw;
use schemars::JsonSchema;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Makes the fault types, [`FaultSpec`] and [`FaultKind`] from one list: each line is a kind's
/// variant, the module that owns it (named as scenario files name the kind) and its type.
macro_rules! faults {
    ($( $(#[$doc:meta])* $variant:ident($module:ident::$ty:ident), )*) => {
        $( mod $module; pub use $module::$ty; )*

        /// One injected fault: its `kind` and exactly that kind's fields.
        #[derive(Clone, Debug, Serialize, JsonSchema)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum FaultSpec {
            $( $(#[$doc])* $variant($ty), )*
        }

        /// A kind of fault.
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize,
            JsonSchema,
        )]
        #[serde(rename_all = "snake_case")]
        pub enum FaultKind {
            $( $(#[$doc])* $variant, )*
        }

        impl FaultKind {
            /// Every kind, in the list's order.
            pub const ALL: &'static [FaultKind] = &[$( FaultKind::$variant, )*];

            /// One fault of this kind, drawn in `window` as the explorer draws it.
            pub fn draw(self, d: &mut Draw, window: (u64, u64), shape: &Shape) -> FaultSpec {
                match self {
                    $( FaultKind::$variant => FaultSpec::$variant(<$ty as Kind>::draw(d, window, shape)), )*
                }
            }

            /// Its name in scenario files.
            pub fn name(self) -> &'static str {
                match self {
                    $( FaultKind::$variant => stringify!($module), )*
                }
            }
        }

        impl FaultSpec {
            /// Its kind.
            pub fn kind(&self) -> FaultKind {
                match self {
                    $( FaultSpec::$variant(_) => FaultKind::$variant, )*
                }
            }

            pub(crate) fn as_kind(&self) -> &dyn Kind {
                match self {
                    $( FaultSpec::$variant(f) => f, )*
                }
            }

            fn of_kind<'de, D: Deserializer<'de>>(
                kind: FaultKind,
                fields: D,
            ) -> Result<FaultSpec, D::Error> {
                Ok(match kind {
                    $( FaultKind::$variant => FaultSpec::$variant(<$ty>::deserialize(fields)?), )*
                })
            }

            /// The faults the explorer draws for one scenario: each kind switched on with
            /// probability 1/4, in the list's order (swarm testing).
            pub fn draw_all(d: &mut Draw, shape: &Shape) -> Vec<FaultSpec> {
                let mut out = Vec::new();
                $(
                    if <$ty as Kind>::drawn() && d.chance(0.25) {
                        let w = draw_window(d, shape.duration_ms);
                        out.push(FaultSpec::$variant(<$ty as Kind>::draw(d, w, shape)));
                    }
                )*
                out
            }
        }
    };
}

faults! {
    /// The store answers `rate` of calls in [at_ms, until_ms) with an error, not applied.
    StoreErrors(store_errors::StoreErrors),
    /// The store drops `rate` of calls in the window unapplied: the gateway times out.
    StoreTimeouts(store_timeouts::StoreTimeouts),
    /// The store applies `rate` of calls in the window but the reply is lost.
    LostReplies(lost_replies::LostReplies),
    /// `rate` of all messages are lost in the window.
    PacketLoss(packet_loss::PacketLoss),
    /// The store delays its replies in the window by `extra_latency` (uniform).
    StoreLatency(store_latency::StoreLatency),
    /// The store crashes at `at_ms`, losing all state (its replica's too), and restarts
    /// `restart_after_ms` later.
    StoreCrash(store_crash::StoreCrash),
    /// `gateways` cannot reach the store (both directions) in the window.
    Partition(partition::Partition),
    /// `gateway`'s clock runs `offset_ms` ahead (negative: behind) and drifts by `drift_ppm`.
    Clock(clock::Clock),
    /// `node` ("store" or a gateway index) is paused in the window.
    Pause(pause::Pause),
    /// The kill switch is on in the window, on `gateways` (default: all).
    KillSwitch(kill_switch::KillSwitch),
    /// The store's primary dies at `at_ms`; its replica (`store.replica`) is promoted
    /// `promote_after_ms` later with the writes whose copies had reached it by `at_ms`. The
    /// writes still on their way are lost.
    StoreFailover(store_failover::StoreFailover),
    /// The store's replies to `gateways` are lost in the window; their calls still arrive
    /// and are applied.
    AsymmetricPartition(asymmetric_partition::AsymmetricPartition),
}

impl FaultSpec {
    /// When the fault is in force, `[from, until)` in ms: a crash until its restart; `None`
    /// for a clock fault, which lasts the whole run.
    pub fn window_ms(&self) -> Option<(u64, u64)> {
        self.as_kind().window_ms()
    }

    /// Whether, and how, it takes the store down.
    pub fn outage(&self) -> Option<Outage> {
        self.as_kind().outage()
    }

    /// Gateway `gateway`'s clock offset (ns) and drift (ppm) this fault adds.
    pub fn clock(&self, gateway: u32) -> Option<(i64, i64)> {
        self.as_kind().clock(gateway)
    }
}

/// Names the kind in serde's message for a missing field (which points at the fault as a
/// whole). Other messages, an unknown field's among them, keep serde's exact position.
fn in_terms_of(kind: FaultKind, message: String) -> String {
    match message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
    {
        Some(field) => format!("a {} fault needs `{field}`", kind.name()),
        None => message,
    }
}

impl<'de> Deserialize<'de> for FaultSpec {
    /// `kind` first (as hand-written scenarios write it): the rest streams into the kind's
    /// own type, so each error points at its field. `kind` elsewhere: the object is read whole
    /// first.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FaultSpec;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a fault: an object with its `kind` and that kind's fields"
                )
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultSpec, A::Error> {
                let Some(first) = map.next_key::<String>()? else {
                    return Err(de::Error::missing_field("kind"));
                };
                if first == "kind" {
                    let kind: FaultKind = map.next_value()?;
                    return FaultSpec::of_kind(kind, MapAccessDeserializer::new(map)).map_err(
                        |e| {
                            let message = e.to_string();
                            let ours = in_terms_of(kind, message.clone());
                            if ours == message {
                                e
                            } else {
                                de::Error::custom(ours)
                            }
                        },
                    );
                }
                let mut fields = serde_json::Map::new();
                fields.insert(first, map.next_value()?);
                while let Some(k) = map.next_key::<String>()? {
                    let v: serde_json::Value = map.next_value()?;
                    if fields.contains_key(&k) {
                        return Err(de::Error::custom(format!("duplicate field `{k}`")));
                    }
                    fields.insert(k, v);
                }
                let Some(kind) = fields.remove("kind") else {
                    return Err(de::Error::missing_field("kind"));
                };
                let kind = FaultKind::deserialize(kind).map_err(de::Error::custom)?;
                FaultSpec::of_kind(kind, serde_json::Value::Object(fields))
                    .map_err(|e| de::Error::custom(in_terms_of(kind, e.to_string())))
            }
        }
        d.deserialize_map(V)
    }
}
