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

/// A stable 32-bit fingerprint of a policy: [`fingerprint_text`] of its [`canonical`] text.
///
/// It covers the algorithm and its validated parameters, nothing else: not the limit's name,
/// key, mode, cost or match (the callers put the name, or the domain and place, in the key
/// prefix beside it), and not how the file spelled the parameters (key order,
/// `refill_per_sec = 10` or `refill = 10` with `refill_period_ms = 1000`). Equal policies
/// have equal fingerprints in every process and release; a changed parameter changes it
/// (but for a 32-bit collision), and with it the key prefix, so the limit starts new buckets.
pub(crate) fn fingerprint(policy: &Policy) -> u32 {
    fingerprint_text(&canonical(policy))
}

/// The canonical text of a policy, the input of its [`fingerprint`]: the algorithm, then its
/// parameters in a fixed order, as whole numbers (periods and windows in nanoseconds):
///
/// ```text
/// TokenBucket(TokenBucket { capacity: 100, refill_amount: 10, refill_period: Nanos(1000000000) })
/// FixedWindow(FixedWindow(WindowPolicy { limit: 60, window: Nanos(60000000000) }))
/// SlidingWindow(SlidingWindow(WindowPolicy { limit: 60, window: Nanos(60000000000) }))
/// ```
///
/// An algorithm added since is its spec as a file writes it, `name field=value …` in the
/// spec's order (`first_hit_window limit=60 window_ms=60000`).
///
/// The text is frozen: it is what every release so far has hashed, so the key prefixes in a
/// store outlive an upgrade (a new text would start every limit's buckets anew). It is
/// written out here rather than taken from the types' `Debug` output, which may change.
fn canonical(policy: &Policy) -> String {
    frozen(policy).unwrap_or_else(|| written(&policy.spec()))
}

/// The texts the three algorithms of the first releases hash (the `Debug` output of their
/// policies then); `None` for any other.
fn frozen(policy: &Policy) -> Option<String> {
    if let Policy::TokenBucket(b) = policy {
        return Some(format!(
            "TokenBucket(TokenBucket {{ capacity: {}, refill_amount: {}, refill_period: Nanos({}) }})",
            b.capacity(),
            b.refill_amount(),
            b.refill_period().as_u64()
        ));
    }
    let (name, w) = match policy {
        Policy::FixedWindow(w) => ("FixedWindow", w.0),
        Policy::SlidingWindow(w) => ("SlidingWindow", w.0),
        _ => return None,
    };
    Some(format!(
        "{name}({name}(WindowPolicy {{ limit: {}, window: Nanos({}) }}))",
        w.limit(),
        w.window().as_u64()
    ))
}

/// A policy's spec as written, `name field=value …` in the spec's order.
fn written(spec: &ratelab_core::PolicySpec) -> String {
    let mut text = spec.algorithm.name().to_owned();
    for (field, value) in spec.values() {
        if let Some(v) = value {
            text += &format!(" {field}={v}");
        }
    }
    text
}

/// FNV-1a (64-bit: offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) of `text`'s
/// UTF-8 bytes, folded to 32 bits as the low half XOR the high half: a fixed, public
/// algorithm, so a key prefix can be recomputed anywhere.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::parse;

    const FILE: &str = r#"
[[limit]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 100
refill_per_sec = 10

[[limit]]
name = "writes"
algorithm = "sliding-window"
limit = 60
window_ms = 60000
key = "header:x-tenant"
"#;

    /// The same limits as [`FILE`], written another way: keys in another order, the refill
    /// as an amount per period, another key and a mode (outside the fingerprint).
    const REWRITTEN: &str = r#"
[[limit]]
refill_period_ms = 1000
refill = 10
capacity = 100
algorithm = "token-bucket"
name = "per-ip"

[[limit]]
mode = "shadow"
key = "client-ip"
window_ms = 60000
limit = 60
algorithm = "sliding-window"
name = "writes"
"#;

    fn fingerprints(text: &str) -> Vec<u32> {
        let limits = parse("limits.toml", text).unwrap();
        limits.iter().map(|l| fingerprint(&l.policy)).collect()
    }

    #[test]
    fn equal_limits_written_differently_have_equal_fingerprints() {
        assert_eq!(fingerprints(FILE), fingerprints(REWRITTEN));
    }

    #[test]
    fn a_changed_parameter_changes_the_fingerprint() {
        let base = fingerprints(FILE);
        for changed in [
            FILE.replace("capacity = 100", "capacity = 101"),
            FILE.replace("refill_per_sec = 10", "refill_per_sec = 11"),
            FILE.replace("limit = 60", "limit = 61"),
            FILE.replace("window_ms = 60000", "window_ms = 60001"),
            FILE.replace("sliding-window", "fixed-window"),
        ] {
            assert_ne!(fingerprints(&changed), base, "{changed}");
        }
    }

    #[test]
    fn the_canonical_text_and_its_fingerprint_are_pinned() {
        // These values name buckets in deployed stores: a change here starts them all anew.
        for (policy, text, hex) in [
            (
                Policy::TokenBucket(TokenBucket::per_second(100, 10).unwrap()),
                "TokenBucket(TokenBucket { capacity: 100, refill_amount: 10, refill_period: Nanos(1000000000) })",
                "1b9e7cb5",
            ),
            (
                Policy::FixedWindow(
                    ratelab_core::FixedWindow::new(60, ratelab_core::Nanos(60_000_000_000))
                        .unwrap(),
                ),
                "FixedWindow(FixedWindow(WindowPolicy { limit: 60, window: Nanos(60000000000) }))",
                "7e1e0729",
            ),
            (
                Policy::SlidingWindow(
                    ratelab_core::SlidingWindow::new(60, ratelab_core::Nanos(60_000_000_000))
                        .unwrap(),
                ),
                "SlidingWindow(SlidingWindow(WindowPolicy { limit: 60, window: Nanos(60000000000) }))",
                "70810953",
            ),
            (
                Policy::FirstHitWindow(
                    ratelab_core::FirstHitWindow::new(60, ratelab_core::Nanos(60_000_000_000))
                        .unwrap(),
                ),
                "first_hit_window limit=60 window_ms=60000",
                "c4a751a5",
            ),
        ] {
            assert_eq!(canonical(&policy), text);
            assert_eq!(format!("{:08x}", fingerprint(&policy)), hex);
        }
    }
}
