//! Injects a scenario's faults (each kind's own code is in `crate::faults`).

use super::nodes::Cluster;
use super::script::Script;
use crate::faults::{Ctx, ReplicaControl};
use crate::scenario::FaultSpec;
use madsim::net::NetSim;
use madsim::runtime::{Handle, NodeHandle};
use std::sync::Arc;
use std::time::Duration;

/// Injects one fault: from its window's start, marked in the trace, the fault acts until its
/// end (a store-side fault is decided per message by the store node meanwhile).
pub(crate) async fn fault_main<S: Script>(
    cluster: Arc<Cluster<S>>,
    f: FaultSpec,
    store: NodeHandle,
) {
    let shared = &cluster.shared;
    let kind = f.kind().name();
    let window = f.window_ms();
    shared
        .sleep_until(Duration::from_millis(window.map_or(0, |(at, _)| at)))
        .await;
    let fields = serde_json::to_string(&f).unwrap_or_default();
    shared.record(|h, t| h.fault(t, format!("{kind} begins: {fields}")));
    if window.is_none() {
        return;
    }
    let net = NetSim::current();
    let kill_switch = |g: usize, on: bool| cluster.gateways[g].gateway.set_kill_switch(on);
    let cx = Ctx {
        holds: &cluster.holds,
        shared,
        handle: Handle::current(),
        net: &net,
        store: store.id(),
        gateways: cluster.gateways.iter().map(|g| g.node.id()).collect(),
        kill_switch: &kill_switch,
        replica: cluster.replica.as_deref().map(|r| r as &dyn ReplicaControl),
    };
    f.as_kind().inject(&cx).await;
    shared.record(|h, t| h.fault(t, format!("{kind} ends")));
}
