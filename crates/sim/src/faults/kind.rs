//! What a fault kind is: its trait, what its checks and injection see, and the helpers the
//! kinds share.

use crate::cluster::record::Shared;
use crate::locate::PathSeg;
use crate::rng::{Draw, SimRng};
use crate::values::{Fraction, Ms, NodeName, ms};
use madsim::net::NetSim;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use ratelab_core::Nanos;
use schemars::JsonSchema;
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
    /// How many faults hold each link, switch and pause (they may overlap).
    pub(crate) holds: &'a std::sync::Mutex<std::collections::BTreeMap<Hold, u32>>,
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

/// Something a fault holds while it is in force; overlapping faults hold it together, and it
/// is let go when the last of them ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Hold {
    /// Messages from the first node to the second are dropped.
    Link(NodeId, NodeId),
    /// A gateway's kill switch is on.
    KillSwitch(usize),
    /// A node is paused.
    Pause(NodeId),
}

impl Ctx<'_> {
    /// Takes `h`: whether this fault is the first to hold it (and so must put it in force).
    pub(crate) fn hold(&self, h: Hold) -> bool {
        let mut holds = self.holds.lock().expect("fault holds");
        let n = holds.entry(h).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// Lets `h` go: whether this fault was the last to hold it (and so must lift it).
    pub(crate) fn release(&self, h: Hold) -> bool {
        let mut holds = self.holds.lock().expect("fault holds");
        let n = holds.entry(h).or_insert(1);
        *n = n.saturating_sub(1);
        *n == 0
    }

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

    /// The gateways whose store calls it may fail without the store answering them with an
    /// error (a store down, a link cut, a node paused): `None`, every gateway (the default,
    /// for any fault that touches the store); `Some(&[])` for none.
    fn fails_calls_from(&self) -> Option<Vec<u32>> {
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

/// The fields of a fault that cuts links between some gateways and the store in a window.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct Cut {
    /// Start, in ms.
    pub at_ms: Ms,
    /// End (exclusive), in ms.
    pub until_ms: Ms,
    /// The gateway indexes whose links are cut.
    pub gateways: Vec<u32>,
}

impl Cut {
    pub(crate) fn window_ms(&self) -> Option<(u64, u64)> {
        Some((self.at_ms.get(), self.until_ms.get()))
    }

    pub(crate) fn check(&self, cx: &Check) -> Result<(), Invalid> {
        check_window(self.at_ms, self.until_ms)?;
        check_gateways(&self.gateways, "gateways", cx)
    }

    /// The cut gateways' nodes.
    pub(crate) fn nodes(&self, cx: &Ctx<'_>) -> Vec<NodeId> {
        self.gateways
            .iter()
            .map(|&g| cx.gateways[g as usize])
            .collect()
    }

    /// Drops the messages on `links` (from, to) until the window ends, holding each with any
    /// other fault that cuts it too.
    pub(crate) async fn cut(&self, cx: &Ctx<'_>, links: &[(NodeId, NodeId)]) {
        for &(a, b) in links {
            if cx.hold(Hold::Link(a, b)) {
                cx.net.clog_link(a, b);
            }
        }
        cx.sleep_until_ms(self.until_ms.get()).await;
        for &(a, b) in links {
            if cx.release(Hold::Link(a, b)) {
                cx.net.unclog_link(a, b);
            }
        }
    }

    /// One drawn in `window`, cutting one gateway.
    pub(crate) fn draw(d: &mut Draw, (at, until): (u64, u64), shape: &Shape) -> Cut {
        Cut {
            at_ms: crate::values::Bounded(at),
            until_ms: crate::values::Bounded(until),
            gateways: vec![d.int(0, shape.gateways - 1) as u32],
        }
    }
}

/// A window `[at, until)` inside a run of `duration` ms, as the explorer draws one.
pub(crate) fn draw_window(d: &mut Draw, duration: u64) -> (u64, u64) {
    let at = d.int(0, duration - 1);
    (at, (at + d.int(1, duration)).min(duration))
}
