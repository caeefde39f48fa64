//! The gateway's limit set over a store: the classic per-IP and per-key pair, or a limits
//! file's limits, a reloaded limit keeping its buckets when its algorithm is unchanged.

use crate::config::{LimitsSource, ServeSettings};
use crate::limits::FileLimit;
use crate::stores::Stores;
use ratelab_core::{Policy, TokenBucket};
use ratelab_gateway::http::TokioEnv;
use ratelab_gateway::limits::{KeyBy, Limit, LimitSet, LimitSpec, PER_IP, PER_KEY};
use ratelab_gateway::{Gateway, GatewayConfig};
use std::sync::Arc;

/// A limit over `client`, with the gateway's breaker and denial-cache settings.
pub(crate) fn limit<C>(config: &GatewayConfig, spec: LimitSpec, client: C) -> Arc<Limit<C>> {
    let limit = Limit::new(spec, client, config.breaker);
    Arc::new(limit.with_denial_cache(config.denial_cache))
}

/// The classic pair when no limits file is given: per-IP, then per-key (`x-api-key`).
async fn classic<S: Stores>(
    stores: &S,
    per_ip: TokenBucket,
    per_key: TokenBucket,
    config: &GatewayConfig,
) -> Result<LimitSet<S::Client>, String> {
    let mut set = Vec::new();
    for (name, key_by, bucket, prefix) in [
        (PER_IP, KeyBy::ClientIp, per_ip, "ratelab:ip:"),
        (PER_KEY, KeyBy::ApiKey, per_key, "ratelab:key:"),
    ] {
        let client = stores.client(prefix, Policy::TokenBucket(bucket)).await?;
        let spec = LimitSpec::new(
            ratelab_core::headers::PolicyName::new(name).map_err(|e| e.to_string())?,
            key_by,
        );
        set.push(limit(config, spec, client));
    }
    Ok(set)
}

/// The set for a limits file's `limits`. A limit of `old` with the same name and algorithm
/// keeps its store (its buckets), and its breaker too when nothing else changed.
pub async fn file_set<S: Stores>(
    stores: &S,
    old: &LimitSet<S::Client>,
    limits: Vec<FileLimit>,
    config: &GatewayConfig,
) -> Result<LimitSet<S::Client>, String> {
    let mut set = Vec::with_capacity(limits.len());
    for l in limits {
        let name = l.spec.name.as_str().to_owned();
        let kept = old
            .iter()
            .find(|o| o.name() == name && S::runs(o.client(), &l.policy));
        let limit = match kept {
            Some(o) if *o.spec() == l.spec => o.clone(),
            Some(o) => limit(config, l.spec, o.client().clone()),
            None => {
                // The policy's fingerprint in the key space: a limit whose parameters change
                // starts new buckets (an old state read under new parameters would be wrong),
                // and the old ones expire by their TTL.
                let prefix = format!("ratelab:limit:{name}:{:08x}:", fingerprint(&l.policy));
                let client = stores
                    .client(&prefix, l.policy)
                    .await
                    .map_err(|e| format!("limit {name}: {e}"))?;
                limit(config, l.spec, client)
            }
        };
        set.push(limit);
    }
    Ok(set)
}

/// A stable 32-bit fingerprint of a policy's algorithm and parameters (FNV-1a of its
/// description): the same in every process and release that describes it the same way.
pub(crate) fn fingerprint(policy: &Policy) -> u32 {
    fingerprint_text(&format!("{policy:?}"))
}

/// FNV-1a of `text`, folded to 32 bits: stable across processes and releases.
pub(crate) fn fingerprint_text(text: &str) -> u32 {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (h ^ (h >> 32)) as u32
}

/// The gateway the settings describe, over `stores`.
pub async fn gateway<S: Stores>(
    s: &ServeSettings,
    stores: &S,
) -> Result<Arc<Gateway<S::Client, TokioEnv>>, String> {
    let config = &s.gateway;
    let set = match &s.limits {
        LimitsSource::Classic { per_ip, per_key } => {
            classic(stores, *per_ip, *per_key, config).await?
        }
        LimitsSource::File {
            path,
            text,
            limits,
            domains,
        } => {
            stores.check(&path.display().to_string(), text, limits, domains)?;
            file_set(stores, &Vec::new(), limits.clone(), config).await?
        }
    };
    Ok(Arc::new(Gateway::with_limits(
        s.gateway.clone(),
        set,
        TokioEnv,
    )))
}
