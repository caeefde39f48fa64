//! The simulated cluster: one store node, N gateway nodes, a client node, and the faults.
//!
//! - The **store node** owns every key and handles its messages one at a time, in arrival
//!   order, like Redis: each request runs to completion (read, transition, write) before the
//!   next is looked at. It holds one real [`MemoryStore`] per limit layer (the per-key
//!   policy's, and the edge policy's when the scenario has one); every call names its layer,
//!   so a layer's keys are decided under that layer's policy only. It
//!   decides store-side faults per message from the scenario's plan and its own seeded
//!   stream: answer with an error (not applied), drop (not applied: the caller times out),
//!   apply but lose the reply, or delay the reply. A crash kills the node; the restart runs
//!   its init again with an empty store: all state is lost. With `store.replica`, every write
//!   is copied to a replica after a lag (`replica.rs`), and a failover kills the node and
//!   restarts it from the replica's copies.
//! - Each **gateway node** decides requests over a [`StoreClient`] whose implementation here
//!   sends raw endpoint messages to the store node (`transport.rs`), on either path, bounded
//!   by the request's deadline on the node's timeout queue (`timeouts.rs`), reading its own
//!   clock (true simulated time with the scenario's offset and drift) or the store's.
//! - **Clients** are tasks on a client node. They send each request by starting the gateway's
//!   handler on the chosen gateway node; clients that honour Retry-After wait for the answer.
//! - **Network faults** use madsim's verbs: `clog_link` for partitions, the packet-loss rate,
//!   `kill`/`restart`, `pause`/`resume`.
//!
//! Nothing here reads a wall clock or an unseeded random number.

mod client;
mod clock;
mod gateway;
mod inject;
mod job;
mod nodes;
pub(crate) mod record;
mod script;
mod store_node;
mod wire;
mod workload;

use crate::dilation::{self};
use crate::replica::Replica;
use crate::rng::{SimRng, stream};
use crate::scenario::{Scenario, ms};
pub use clock::SIM_EPOCH_MS;
use gateway::start_gateway;
use inject::fault_main;
use job::job_main;
use madsim::runtime::Handle;
use nodes::Cluster;
use ratelab_check::history::History;
use ratelab_gateway::StatsSnapshot;
use record::Shared;
pub(crate) use script::{Plug, Script, edge_bucket};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store_node::{SharedReplica, start_store_node};
pub use wire::{JobCall, StoreCall, StoreMessage, StoreReply, StoreRequest, WireError};
use workload::client_main;

/// madsim time (undilated: 50 ns of physical time) for nodes to start and bind before time zero.
const SETUP: Duration = Duration::from_millis(5);

/// The madsim network configuration for a scenario.
pub(crate) fn net_config(sc: &Scenario) -> madsim::Config {
    let mut cfg = madsim::Config::default();
    let lat = sc.spec.network.latency;
    let lo = dilation::link_latency(Duration::from_micros(lat.min_us.get()));
    let hi = dilation::link_latency(Duration::from_micros(lat.max_us.get()));
    // madsim draws from a half-open range: make it non-empty and include the maximum.
    cfg.net.send_latency = lo..hi + Duration::from_nanos(1);
    cfg
}

/// When the last fault of `sc` ends, in ms (clock faults never end and are not counted).
pub fn faults_end_ms(sc: &Scenario) -> u64 {
    sc.spec
        .faults
        .iter()
        .filter_map(|f| f.window_ms().map(|(_, until)| until))
        .max()
        .unwrap_or(0)
}

/// Runs one seed of `sc` with its builtin policy inside the current madsim runtime; returns
/// the history and each gateway's counters.
pub(crate) async fn simulate(
    sc: Arc<Scenario>,
    seed: u64,
    keep_events: bool,
) -> (History, Vec<StatsSnapshot>) {
    let plug = Plug::builtin(&sc);
    simulate_with(sc, plug, seed, keep_events).await
}

/// Runs one seed of `sc` with `plug`'s algorithms inside the current madsim runtime.
pub(crate) async fn simulate_with<S: Script>(
    sc: Arc<Scenario>,
    plug: Plug<S>,
    seed: u64,
    keep_events: bool,
) -> (History, Vec<StatsSnapshot>) {
    let handle = Handle::current();
    // Time zero is after a short setup allowance, in which nodes start and bind; events during
    // setup are stamped 0.
    // The requests the workload schedules, a tenth more for Poisson's spread, at most 2^18
    // (about 60 MB of request records, which a longer run grows past): only the history's
    // first allocation is sized by it, and pages of it never written are never resident.
    let scheduled = sc.scheduled_requests();
    let expected = scheduled.saturating_add(scheduled / 10 + 16).min(1 << 18);
    let history = History::new(keep_events).expecting(expected as usize);
    let shared = Arc::new(Shared::new(
        SETUP,
        if sc.spec.cleanup_job.is_some() {
            history.keeping_writes()
        } else {
            history
        },
    ));
    let replica: Option<SharedReplica<S>> = sc.spec.store.replica.map(|r| {
        let lag = (r.lag.min_us.get() * 1_000, r.lag.max_us.get() * 1_000);
        Arc::new(Mutex::new(Replica::new(
            lag,
            SimRng::new(seed, stream::REPLICA),
        )))
    });
    let store_node = start_store_node(&handle, &sc, seed, (&shared, &replica), &plug);
    let mut gateways = Vec::new();
    let mut job_clients = Vec::new();
    for i in 0..sc.spec.gateways.get() as u32 {
        let (gateway, job_client) = start_gateway(&handle, &sc, seed, i, &shared, &plug).await;
        gateways.push(gateway);
        job_clients.push(job_client);
    }
    let guard = sc.spec.gateway.guard.as_ref().map(|g| {
        let (prefix, n) = (&g.valid_keys.prefix, g.valid_keys.count.get());
        let keys = (0..n).map(|i| format!("{prefix}:{i}"));
        ratelab_gateway::bloom::KeyGuard::new::<str>(
            keys,
            n,
            g.false_positive_rate.get(),
            u128::from(seed),
        )
        .expect("validated guard")
    });
    let cluster = Arc::new(Cluster {
        sc: sc.clone(),
        shared: shared.clone(),
        replica,
        gateways,
        guard,
        holds: Default::default(),
    });
    shared.sleep_until(Duration::ZERO).await;

    let clients_node = handle
        .create_node()
        .name("clients")
        .ip(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)))
        .build();
    let mut client = 0u32;
    for (g, c) in sc.spec.clients.iter().enumerate() {
        for _ in 0..c.count.get() {
            clients_node.spawn(client_main(cluster.clone(), g, client, seed));
            client += 1;
        }
    }
    for f in &sc.spec.faults {
        madsim::task::spawn(fault_main(cluster.clone(), f.clone(), store_node.clone()));
    }
    if sc.spec.cleanup_job.is_some() {
        for (g, rpc) in job_clients.into_iter().enumerate() {
            cluster.gateways[g]
                .node
                .spawn(job_main(cluster.clone(), g, rpc));
        }
    }

    let end = ms(sc.spec.duration_ms.get().max(faults_end_ms(&sc)));
    shared
        .sleep_until(Duration::from(end) + drain_time(&sc))
        .await;
    let stats = cluster
        .gateways
        .iter()
        .map(|g| g.gateway.stats().snapshot())
        .collect();
    let history = std::mem::take(&mut *shared.history.lock());
    // Every node's tasks hold the cluster, which holds the nodes: madsim does not cancel a
    // node's tasks when its runtime is dropped (madsim-rs/madsim#242), so without killing
    // the nodes each run's cluster would stay in memory for good.
    for g in &cluster.gateways {
        handle.kill(g.node.id());
    }
    handle.kill(clients_node.id());
    handle.kill(store_node.id());
    (history, stats)
}

/// How long the run goes on after the last send or fault, so that every request in flight is
/// answered: two timeouts, four one-way latencies, the largest injected delay, and a margin.
fn drain_time(sc: &Scenario) -> Duration {
    2 * Duration::from_millis(sc.spec.store.timeout_ms.get())
        + Duration::from_micros(4 * sc.spec.network.latency.max_us.get())
        + Duration::from_millis(10)
        + sc.spec
            .faults
            .iter()
            .map(|f| Duration::from_micros(f.as_kind().extra_latency_us()))
            .max()
            .unwrap_or_default()
}
