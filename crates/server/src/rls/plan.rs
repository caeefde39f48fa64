//! One call's descriptors, resolved against their domain's tree, and planned: one item per
//! distinct bucket for the gateway's all-or-nothing step.

use super::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use super::proto::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
use ratelab_gateway::limits::{Limit, Planned};
use ratelab_store::Key;
use std::sync::Arc;

/// One descriptor, resolved.
pub(super) enum Resolved<'t, C> {
    /// No limit: OK, counted.
    Unmatched,
    /// Never limited.
    Unlimited,
    /// Decided at `limit` on `key` for `cost`.
    Limited {
        limit: Arc<Limit<C>>,
        current: std::borrow::Cow<'t, RateLimit>,
        key: Key,
        cost: u64,
    },
}

/// The bucket of a descriptor at its limit: every entry's key and value, each with its
/// length, so no two entry lists share one. Text too long for a key, or with control
/// characters, is replaced by its 128-bit SipHash (under a fixed key: the same bucket in
/// every process).
pub(super) fn bucket_key(d: &RateLimitDescriptor) -> Key {
    use std::fmt::Write as _;
    let mut text = String::new();
    for e in &d.entries {
        let _ = write!(
            text,
            "{}:{}={}:{}|",
            e.key.len(),
            e.key,
            e.value.len(),
            e.value
        );
    }
    Key::new(&text).unwrap_or_else(|_| {
        let h = siphasher::sip128::Hasher128::finish128(&{
            let mut s = siphasher::sip128::SipHasher13::new_with_keys(0x7261_7465, 0x006c_6162);
            std::hash::Hasher::write(&mut s, text.as_bytes());
            s
        });
        Key::new(&format!("h:{:016x}{:016x}", h.h1, h.h2)).expect("a short ASCII key")
    })
}

/// One planned item per distinct bucket (two descriptors on one bucket spend at it once, for
/// both costs together), and each descriptor's item.
pub(super) fn plan<'r, C>(
    resolved: &'r [Resolved<'_, C>],
) -> (Vec<Planned<'r, C>>, Vec<Option<usize>>) {
    let mut planned: Vec<Planned<'r, C>> = Vec::new();
    let mut slot: Vec<Option<usize>> = Vec::with_capacity(resolved.len());
    for r in resolved {
        let result = match r {
            Resolved::Unmatched => "unmatched",
            Resolved::Unlimited => "unlimited",
            Resolved::Limited { .. } => "matched",
        };
        metrics::counter!("ratelab_rls_descriptors_total", "result" => result).increment(1);
        let Resolved::Limited {
            limit, key, cost, ..
        } = r
        else {
            slot.push(None);
            continue;
        };
        let same = planned
            .iter()
            .position(|p| Arc::ptr_eq(p.limit, limit) && &p.key == key);
        slot.push(Some(match same {
            Some(j) => {
                planned[j].cost = planned[j].cost.saturating_add(*cost);
                j
            }
            None => {
                planned.push(Planned {
                    limit,
                    key: key.clone(),
                    cost: *cost,
                });
                planned.len() - 1
            }
        }));
    }
    (planned, slot)
}
