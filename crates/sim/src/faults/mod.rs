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

use crate::cluster::record::Shared;
use crate::locate::PathSeg;
use crate::rng::{Draw, SimRng};
use crate::values::{Fraction, Ms, NodeName, ms};
use madsim::net::NetSim;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use ratelab_core::Nanos;
use schemars::JsonSchema;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// What the store does with one message while a store-side fault holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Apply it and reply.
    Serve,
    /// Answer with an error, not applied.
    Error,
    /// Drop it, not applied: the caller times out.
    Drop,
    /// Apply it and lose the reply.
    LoseReply,
    /// Apply it and reply this much later.
    Delay(Nanos),
}

/// How a fault takes the store down, for the checkers' epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outage {
    /// Every bucket is lost; the store comes back empty.
    Restart,
    /// The replica is promoted with what had reached it.
    Failover,
}

/// What a fault's checks see of the rest of the scenario.
pub(crate) struct Check {
    /// Gateways in the cluster.
    pub(crate) gateways: u64,
    /// Whether the store has a replica.
    pub(crate) replica: bool,
}

/// A located problem: the path inside the fault, and what was expected.
pub(crate) type Invalid = (Vec<PathSeg>, String);

/// What the explorer's draw of a fault knows of the scenario drawn so far.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The run's duration, ms.
    pub duration_ms: u64,
    /// Gateways in the cluster.
    pub gateways: u64,
}

/// The store's replica, as a fault reaches it.
pub(crate) trait ReplicaControl: Send + Sync {
    /// Loses every copy (the replica goes down with the primary).
    fn clear(&self);
    /// Promotes the replica at `kill`: the writes not on it are lost. Returns when each lost
    /// write was made and the per-key bucket it wrote, if any.
    fn promote(&self, kill: Nanos) -> Vec<(Nanos, Option<String>)>;
}

/// What a node- or network-level fault acts on.
pub(crate) struct Ctx<'a> {
    /// The recorder and the run's time origin.
    pub(crate) shared: &'a Shared,
    /// madsim's node verbs.
    pub(crate) handle: Handle,
    /// madsim's network verbs.
    pub(crate) net: &'a NetSim,
    /// The store node.
    pub(crate) store: NodeId,
    /// Each gateway's node, by index.
    pub(crate) gateways: Vec<NodeId>,
    /// Turns gateway `g`'s kill switch on or off.
    pub(crate) kill_switch: &'a (dyn Fn(usize, bool) + Send + Sync),
    /// The store's replica, if the scenario has one.
    pub(crate) replica: Option<&'a dyn ReplicaControl>,
}

impl Ctx<'_> {
    /// Sleeps until `ms` after time zero.
    pub(crate) async fn sleep_until_ms(&self, ms: u64) {
        self.shared.sleep_until(Duration::from_millis(ms)).await;
    }

    /// A node's id.
    pub(crate) fn node(&self, n: NodeName) -> NodeId {
        match n {
            NodeName::Store => self.store,
            NodeName::Gateway(g) => self.gateways[g as usize],
        }
    }
}

/// An injection in progress.
pub(crate) type Injection<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A fault kind: its window, its checks, what it does, how the explorer draws it.
pub(crate) trait Kind: fmt::Debug + Send + Sync {
    /// When the fault is in force, `[from, until)` in ms (a crash until its restart); `None`
    /// for one that lasts the whole run.
    fn window_ms(&self) -> Option<(u64, u64)>;

    /// Checks it against the rest of the scenario (its fields' own ranges are checked as they
    /// are parsed).
    fn check(&self, _cx: &Check) -> Result<(), Invalid> {
        Ok(())
    }

    /// A store-side fault's verdict on a message the store receives at `now`; `None` lets
    /// the next fault decide. Draws from the store's stream only when `now` is in its window.
    fn on_store_message(&self, _now: Nanos, _rng: &mut SimRng) -> Option<Verdict> {
        None
    }

    /// Gateway `gateway`'s clock offset (ns) and drift (ppm) this fault adds.
    fn clock(&self, _gateway: u32) -> Option<(i64, i64)> {
        None
    }

    /// The largest delay it adds to a reply, µs (the run drains for it).
    fn extra_latency_us(&self) -> u64 {
        0
    }

    /// Whether, and how, it takes the store down.
    fn outage(&self) -> Option<Outage> {
        None
    }

    /// Acts from the window's start (the caller has slept until then) to its end; by default
    /// it only waits for the end (a store-side fault acts per message).
    fn inject<'a>(&'a self, cx: &'a Ctx<'a>) -> Injection<'a> {
        let until = self.window_ms().map(|(_, until)| until);
        Box::pin(async move {
            if let Some(until) = until {
                cx.sleep_until_ms(until).await;
            }
        })
    }

    /// Whether the explorer's per-kind loop draws it (a failover is drawn with the replica
    /// it needs).
    fn drawn() -> bool
    where
        Self: Sized,
    {
        true
    }

    /// One drawn at random in `window`, `[at, until)` ms inside the run.
    fn draw(d: &mut Draw, window: (u64, u64), shape: &Shape) -> Self
    where
        Self: Sized;
}

/// `until` after `at`, or where the problem is.
pub(crate) fn check_window(at: Ms, until: Ms) -> Result<(), Invalid> {
    if at >= until {
        return Err((
            vec![PathSeg::Key("until_ms".into())],
            format!("until_ms {} is not after at_ms {}", until.get(), at.get()),
        ));
    }
    Ok(())
}

/// Gateway `g` exists, or where the problem is (`path` inside the fault).
pub(crate) fn check_gateway(g: u32, path: Vec<PathSeg>, cx: &Check) -> Result<(), Invalid> {
    if u64::from(g) >= cx.gateways {
        return Err((
            path,
            format!(
                "gateway {g} does not exist: the cluster has gateways 0 to {}",
                cx.gateways - 1
            ),
        ));
    }
    Ok(())
}

/// A non-empty list of existing gateways at `field`, or where the problem is.
pub(crate) fn check_gateways(gs: &[u32], field: &str, cx: &Check) -> Result<(), Invalid> {
    let at = || vec![PathSeg::Key(field.into())];
    if gs.is_empty() {
        return Err((at(), "expected at least one gateway index".into()));
    }
    for (j, &g) in gs.iter().enumerate() {
        let mut path = at();
        path.push(PathSeg::Index(j));
        check_gateway(g, path, cx)?;
    }
    Ok(())
}

/// The fields of a fault that affects `rate` of what happens in a window.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Rated {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// Fraction of calls or messages affected (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Fraction>,
}

impl Rated {
    pub(crate) fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    pub(crate) fn check(&self) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)
    }

    /// The rate as a probability.
    pub(crate) fn rate(&self) -> f64 {
        self.rate.map_or(1.0, Fraction::get)
    }

    /// Whether a message at `now` is hit: in the window, and drawn at the rate.
    pub(crate) fn hits(&self, now: Nanos, rng: &mut SimRng) -> bool {
        let (from, until) = (ms(self.at_ms.get()), ms(self.until_ms.get()));
        now >= from && now < until && rng.chance(self.rate())
    }

    /// One drawn in `window`, at a rate from 0.1 to 1.
    pub(crate) fn draw(d: &mut Draw, (at, until): (u64, u64)) -> Rated {
        let rate = *d.pick(&[0.1f64, 0.3, 0.5, 1.0]);
        Rated {
            at_ms: crate::values::Bounded(at),
            until_ms: crate::values::Bounded(until),
            rate: Fraction::new(rate),
        }
    }
}

/// A window `[at, until)` inside a run of `duration` ms, as the explorer draws one.
fn draw_window(d: &mut Draw, duration: u64) -> (u64, u64) {
    let at = d.int(0, duration - 1);
    (at, (at + d.int(1, duration)).min(duration))
}

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
    /// `kind` first (as every shipped scenario writes it): the rest streams into the kind's
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
