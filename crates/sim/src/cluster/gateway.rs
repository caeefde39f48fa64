//! Starting a gateway node: its clock, its store clients and its pipeline.

use super::client::{Connection, RpcStore};
use super::clock::{Clock, SimEnv};
use super::nodes::SimGateway;
use super::record::Shared;
use super::script::{Plug, Script};
use super::wire::{gateway_ip, store_addr};
use crate::rng::{SimRng, stream};
use crate::scenario::{Scenario, ms};
use crate::timeouts::Timeouts;
use crate::transport::Link;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use ratelab_check::history::Layer;
use ratelab_core::Nanos;
use ratelab_gateway::{BreakerConfig, Gateway, GatewayConfig};
use std::sync::Arc;
use std::time::Duration;

/// Creates gateway `i`'s node, its clock and its pipeline over RPC store clients; returns it
/// with the per-key client its cleanup job uses.
pub(crate) async fn start_gateway<S: Script>(
    handle: &Handle,
    sc: &Scenario,
    seed: u64,
    i: u32,
    shared: &Arc<Shared>,
    plug: &Plug<S>,
) -> (Arc<SimGateway<S>>, RpcStore<S>) {
    let node = handle
        .create_node()
        .name(format!("gateway-{i}"))
        .ip(gateway_ip(i))
        .build();
    let (link, timeouts) = node
        .spawn(async {
            let ep = Endpoint::bind("0.0.0.0:0")
                .await
                .expect("gateway binds a port");
            (Link::start(ep, store_addr()), Timeouts::start())
        })
        .await
        .expect("gateway setup task");
    let clock = sc.spec.faults.iter().filter_map(|f| f.clock(i)).fold(
        Clock::default(),
        |c, (offset_ns, drift_ppm)| Clock {
            offset_ns: c.offset_ns + offset_ns,
            drift_ppm: c.drift_ppm + drift_ppm,
        },
    );
    if clock.offset_ns != 0 || clock.drift_ppm != 0 {
        shared.record(|h, t| {
            h.fault(
                t,
                format!(
                    "clock gateway {i}: offset {} ns, drift {} ppm",
                    clock.offset_ns, clock.drift_ppm
                ),
            )
        });
    }
    let timeout = Duration::from_millis(sc.spec.store.timeout_ms.get());
    let conn = Arc::new(Connection {
        link,
        dead: std::sync::atomic::AtomicBool::new(false),
    });
    let rpc = |layer, algorithm| RpcStore {
        conn: conn.clone(),
        timeout: None,
        layer,
        algorithm,
        request: 0,
        planted: sc.spec.planted_bug,
        attempt: timeout / 2,
    };
    let spec = &sc.spec.gateway;
    let config = GatewayConfig {
        path: sc.path,
        time_source: sc.time_source,
        timeout,
        breaker: spec.breaker.map_or(
            // No breaker: it never opens.
            BreakerConfig {
                failures_to_open: u32::MAX,
                cooldown: Nanos::ZERO,
            },
            |b| BreakerConfig {
                failures_to_open: b.failures_to_open.get() as u32,
                cooldown: ms(b.cooldown_ms.get()),
            },
        ),
        fail_open: spec.fail_open,
        // Only clients that pace themselves read the headers: render them only for those.
        headers: sc.spec.clients.iter().any(|c| c.waits_for_answers()),
        name: format!("gateway-{i}"),
        id_seed: Some(SimRng::new(seed, stream::GATEWAY_IDS + u64::from(i)).next_u64()),
        denial_cache: sc
            .spec
            .gateway
            .denial_cache
            .map_or(0, |c| c.keys.get() as usize),
        ..GatewayConfig::default()
    };
    let env = SimEnv {
        shared: shared.clone(),
        clock,
        timeouts,
    };
    let edge = plug.edge.clone().map(|p| rpc(Layer::Edge, p));
    let per_key = rpc(Layer::PerKey, plug.gateway.clone());
    let job = RpcStore {
        timeout: Some(timeout),
        ..per_key.clone()
    };
    let gateway = Arc::new(SimGateway {
        node,
        gateway: Gateway::new(config, edge, Some(per_key), env),
    });
    (gateway, job)
}
