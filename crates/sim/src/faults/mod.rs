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
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

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

    /// The gateways whose store calls it may fail without the store answering them with an
    /// error: `None`, every gateway.
    pub fn fails_calls_from(&self) -> Option<Vec<u32>> {
        self.as_kind().fails_calls_from()
    }
}

impl crate::tagged::Tagged for FaultSpec {
    type Tag = FaultKind;
    const TAG: &'static str = "kind";
    const EXPECTING: &'static str = "a fault: an object with its `kind` and that kind's fields";

    fn of_tag<'de, D: Deserializer<'de>>(kind: FaultKind, fields: D) -> Result<Self, D::Error> {
        FaultSpec::of_kind(kind, fields)
    }

    fn needs(kind: FaultKind, field: &str) -> String {
        format!("a {} fault needs `{field}`", kind.name())
    }
}

impl<'de> Deserialize<'de> for FaultSpec {
    /// Through [`crate::tagged`]: each error at its field.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::tagged::deserialize(d)
    }
}
