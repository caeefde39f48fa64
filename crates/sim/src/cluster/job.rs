//! The idle-bucket cleanup job each gateway runs as a fenced singleton.

use super::client::RpcStore;
use super::nodes::Cluster;
use super::script::Script;
use super::wire::{JOB_LEASE, JobCall, StoreReply};
use crate::dilation::sleep;
use crate::scenario::ms;
use ratelab_gateway::singleton::{FencedJob, Singleton, SingletonConfig};

use ratelab_store::{FenceVerdict, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// The idle-bucket cleanup over RPC: scan for expired buckets, work on them for `work`, commit
/// their deletion with the fencing token.
pub(crate) struct Cleanup<S: Script> {
    pub(crate) rpc: RpcStore<S>,
    pub(crate) owner: String,
    pub(crate) work: Duration,
    pub(crate) batch: u32,
}

impl<S: Script> FencedJob for Cleanup<S> {
    type Plan = Vec<String>;

    async fn plan(&self) -> Result<Vec<String>, StoreError> {
        let keys = match self
            .rpc
            .job(JobCall::ScanExpired {
                owner: self.owner.clone(),
                limit: self.batch,
            })
            .await?
        {
            StoreReply::Keys(keys) => keys,
            _ => return Err(StoreError::Unavailable),
        };
        if !self.work.is_zero() {
            sleep(self.work).await;
        }
        Ok(keys)
    }

    async fn commit(&self, token: u64, keys: Vec<String>) -> Result<FenceVerdict, StoreError> {
        let call = JobCall::Cleanup {
            owner: self.owner.clone(),
            token,
            keys,
        };
        match self.rpc.job(call).await? {
            StoreReply::Fenced { accepted: true, .. } => Ok(FenceVerdict::Accepted),
            StoreReply::Fenced { highest, .. } => Ok(FenceVerdict::Stale { highest }),
            _ => Err(StoreError::Unavailable),
        }
    }
}

/// Gateway `g`'s side of the cleanup job, from its staggered start to the end of the run.
pub(crate) async fn job_main<S: Script>(cluster: Arc<Cluster<S>>, g: usize, rpc: RpcStore<S>) {
    let sc = &cluster.sc;
    let Some(spec) = sc.spec.cleanup_job else {
        return;
    };
    let n = cluster.gateways.len() as u64;
    let period = Duration::from_millis(spec.period_ms.get());
    let stagger = period * g as u32 / n as u32;
    cluster.shared.sleep_until(stagger).await;
    let owner = format!("gateway-{g}");
    let job = Cleanup {
        rpc: rpc.clone(),
        owner: owner.clone(),
        work: Duration::from_millis(spec.work_ms.get()),
        batch: spec.batch.get() as u32,
    };
    let config = SingletonConfig {
        name: JOB_LEASE.into(),
        owner,
        lease_ttl: Duration::from_millis(spec.lease_ms.get()),
        period,
    };
    let env = cluster.gateways[g].gateway.env().clone();
    let end = ms(sc.spec.duration_ms.get());
    let shared = cluster.shared.clone();
    Singleton::new(config, rpc, job, env)
        .run(|_| shared.now() < end)
        .await;
}
