//! The running cluster: every gateway node, the recorder, the replica and the key guard.

use super::client::RpcStore;
use super::clock::SimEnv;
use super::record::Shared;
use super::script::Script;
use super::store_node::SharedReplica;
use crate::scenario::Scenario;
use madsim::runtime::NodeHandle;
use ratelab_gateway::Gateway;
use std::sync::Arc;

pub(crate) struct SimGateway<S: Script> {
    pub(crate) node: NodeHandle,
    pub(crate) gateway: Gateway<RpcStore<S>, SimEnv>,
}

pub(crate) struct Cluster<S: Script> {
    pub(crate) sc: Arc<Scenario>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) replica: Option<SharedReplica<S>>,
    pub(crate) gateways: Vec<Arc<SimGateway<S>>>,
    pub(crate) guard: Option<ratelab_gateway::bloom::KeyGuard>,
    /// What the faults hold (links, kill switches, pauses), counted so that overlapping
    /// faults lift each only when the last of them ends.
    pub(crate) holds: std::sync::Mutex<std::collections::BTreeMap<crate::faults::Hold, u32>>,
}
